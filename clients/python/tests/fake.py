"""A fake node: a local HTTP server answering as a test scripts it, noting
every request it gets (when, what)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

Answer = Tuple[int, Any]
Script = Callable[[str, Dict[str, Any]], Optional[Answer]]

_COUNTER = [0]


def lock(name: str = "jobs/1", *, lease_ms: int = 1000, ttl_ms: Optional[int] = None, fence: int = 7,
         node: int = 1, id: str = "01J00000000000000000000000", data: Optional[str] = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "name": name, "id": id, "node": node, "holder": "", "fence": fence,
        "lease_ms": lease_ms, "ttl_ms": lease_ms if ttl_ms is None else ttl_ms,
        "acquired_at": "2026-12-06T00:00:00.000Z", "expires_at": "2026-12-06T00:00:01.000Z",
    }
    if data is not None:
        out["data"] = data
    return out


def error(code: str, status: int, **extra: Any) -> Answer:
    body = {"error": code, "message": f"fake {code}"}
    body.update(extra)
    return status, body


class Request:
    def __init__(self, method: str, path: str, body: Dict[str, Any], headers: Dict[str, str]) -> None:
        self.at = time.monotonic()
        self.method = method
        self.path = path
        self.body = body
        self.headers = headers


class FakeNode:
    """Answers every request with ``script(path, body)``: ``(status, json)``,
    or None to hang (no answer until ``release_hung`` or the end)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: List[Request] = []
        self.delay = 0.0
        self._hang = threading.Event()
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                request = Request(method, self.path, body, dict(self.headers))
                node.requests.append(request)
                answer = node.script(self.path, body)
                if node.delay:
                    time.sleep(node.delay)
                if answer is None:
                    node._hang.wait(30)
                    self.close_connection = True
                    return
                status, payload = answer
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def paths(self) -> List[str]:
        return [r.path for r in self.requests]

    def of(self, path: str) -> List[Request]:
        return [r for r in self.requests if r.path == path]

    def stop(self) -> None:
        self._hang.set()
        self.server.shutdown()
        self.server.server_close()
