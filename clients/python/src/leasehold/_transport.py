"""How the client reaches the cluster: HTTP/1.1 to whichever of several
endpoints answers (the Rust client's ``HttpTransport``)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any, Dict, List, Optional, Union

import httpx

from . import errors
from ._model import (
    IDLE_KEPT,
    SERVED_CODES,
    ApiCall,
    CallError,
    NoAnswerCall,
    NotSentCall,
    error_body,
    first_endpoint,
    normalize_endpoints,
)


class Transport:
    """The API over HTTP, to whichever of several endpoints answers. It
    starts at an endpoint chosen at random and moves to the next when one
    does not serve (no answer, or an error worth retrying elsewhere); calls
    failing on one endpoint at once move it once, not once each."""

    def __init__(
        self,
        endpoints: List[str],
        token: Optional[str],
        tls_ca_file: Optional[str],
    ) -> None:
        self.endpoints = normalize_endpoints(endpoints, tls_ca_file is not None)
        self.current = first_endpoint(len(self.endpoints))
        self._moving = threading.Lock()
        headers: Dict[str, str] = {}
        if token:
            if any(ord(c) < 0x20 or ord(c) == 0x7F for c in token):
                raise errors.BadRequest("the token is not a valid header value")
            headers["Authorization"] = f"Bearer {token}"
        self._headers = headers
        self._verify: Union[bool, ssl.SSLContext] = True
        if tls_ca_file is not None:
            try:
                # Only this CA is trusted: a cafile replaces the default roots.
                self._verify = ssl.create_default_context(cafile=tls_ca_file)
            except (OSError, ssl.SSLError) as e:
                raise errors.BadRequest(f"TLS CA {tls_ca_file}: {e}") from None
        self._http: Optional[httpx.AsyncClient] = None
        self._http_loop: Optional[asyncio.AbstractEventLoop] = None

    def __len__(self) -> int:
        return len(self.endpoints)

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:
            self._http = httpx.AsyncClient(
                headers=self._headers,
                verify=self._verify,
                trust_env=False,
                limits=httpx.Limits(keepalive_expiry=IDLE_KEPT),
            )
            self._http_loop = loop
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    def move_on_from(self, at: int) -> None:
        """Moves the rotation on from place ``at``, unless another caller
        that failed there moved it already."""
        with self._moving:
            if self.current == at:
                self.current = at + 1

    async def call(
        self, method: str, path: str, body: Optional[Dict[str, Any]], timeout: float
    ) -> Dict[str, Any]:
        at = self.current
        base = self.endpoints[at % len(self.endpoints)]
        try:
            return await self._exchange(method, base + path, body, timeout)
        except CallError as e:
            served = isinstance(e, ApiCall) and e.code in SERVED_CODES
            if not served:
                self.move_on_from(at)
            raise

    async def _exchange(
        self, method: str, url: str, body: Optional[Dict[str, Any]], timeout: float
    ) -> Dict[str, Any]:
        timeout = max(timeout, 0.001)
        http = self._client()
        limits = httpx.Timeout(timeout, connect=min(timeout, 2.0))
        try:
            response = await asyncio.wait_for(
                http.request(method, url, json=body, timeout=limits), timeout
            )
        except asyncio.TimeoutError:
            raise NoAnswerCall(f"timed out ({url})") from None
        except httpx.ConnectTimeout as e:
            raise NotSentCall(f"connect timed out ({url}: {e})") from None
        except httpx.ConnectError as e:
            text = str(e)
            low = text.lower()
            if "refused" in low:
                why = "connection refused"
            elif "certificate" in low or "ssl" in low or "tls" in low or "handshake" in low:
                why = "TLS handshake failed"
            else:
                why = "could not connect"
            raise NotSentCall(f"{why} ({url}: {text})") from None
        except httpx.TimeoutException as e:
            raise NoAnswerCall(f"timed out ({url}: {e})") from None
        except (httpx.HTTPError, OSError) as e:
            raise NoAnswerCall(f"{type(e).__name__} ({url}: {e})") from None
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if 200 <= response.status_code < 300:
            if not isinstance(payload, dict):
                raise NoAnswerCall(f"unreadable answer from {url}")
            return payload
        raise error_body(response.status_code, payload)
