"""What the sync and asyncio clients share: the answers' shapes, the rules
that need no I/O (the renewal schedule, the attempt timeouts, the error
kinds), and the internal call errors."""

from __future__ import annotations

import enum
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import errors

#: The lease assumed before the cluster says which it granted (s).
ASSUMED_DEFAULT_LEASE = 30.0
#: How long a one-shot call keeps retrying while no node can serve (s).
RETRY_FOR = 10.0
#: The longest wait of one watch (s).
MAX_WATCH = 60.0
#: The time allowed one request beyond any wait it asks for (s).
REQUEST_TIMEOUT = 5.0
#: The longest one renewal or release attempt may take (s).
ATTEMPT_TIMEOUT = 2.0
#: The shortest time one attempt is given (s).
SHORTEST_ATTEMPT = 0.1
#: The longest lapse margin by default (s).
MAX_LAPSE_MARGIN = 2.0
#: The shortest renewal period a schedule may ask for (s).
MIN_RENEW_EVERY = 0.010
#: The longest the renewal task sleeps without looking at the lapse (s).
LOOK_AT_MOST = 0.250
#: How long a change of data is tried while the cluster answers upgrading (s).
DATA_PATIENCE = 5.0
#: The longest single wait of a campaign (s).
CAMPAIGN_WAIT = 60.0
#: How long an observer's watch waits before asking again (s).
OBSERVE_WAIT = 30.0
#: How long idle connections are kept (s): under the node's 30 s.
IDLE_KEPT = 20.0
#: The longest a deadline is set ahead (s).
FOREVER = 100 * 365 * 24 * 3600.0
#: The longest lock-delay (s).
MAX_LOCK_DELAY = 60.0


class Loss(str, enum.Enum):
    """Why a held lock was lost."""

    #: The cluster refused a renewal: the lock is gone; another may hold it.
    REFUSED = "Refused"
    #: No renewal got through before the lease was about to end on this
    #: client's clock: the cluster may still have it until its lease ends.
    LAPSED = "Lapsed"

    def __str__(self) -> str:
        return self.value


@dataclass
class Lock:
    """A lock as the cluster shows it (docs/api.md, "A lock")."""

    name: str
    id: str
    node: int
    holder: str
    fence: int
    lease_ms: int
    ttl_ms: int
    acquired_at: str = ""
    expires_at: str = ""
    data: Optional[str] = None
    mode: str = "exclusive"
    permits: Optional[int] = None
    others: List["Lock"] = field(default_factory=list)
    waiters: int = 0
    queue: List[Dict[str, Any]] = field(default_factory=list)
    lock_delay_ms: int = 0
    delay_left_ms: int = 0
    session: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Lock":
        try:
            return cls(
                name=str(v["name"]),
                id=str(v.get("id") or ""),
                node=int(v.get("node") or 0),
                holder=str(v.get("holder") or ""),
                fence=int(v["fence"]),
                lease_ms=int(v.get("lease_ms") or 0),
                ttl_ms=int(v.get("ttl_ms") or 0),
                acquired_at=str(v.get("acquired_at") or ""),
                expires_at=str(v.get("expires_at") or ""),
                data=v.get("data"),
                mode=str(v.get("mode") or "exclusive"),
                permits=v.get("permits"),
                others=[Lock.from_json(o) for o in (v.get("others") or [])],
                waiters=int(v.get("waiters") or 0),
                queue=list(v.get("queue") or []),
                lock_delay_ms=int(v.get("lock_delay_ms") or 0),
                delay_left_ms=int(v.get("delay_left_ms") or 0),
                session=v.get("session"),
                raw=v,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise _NoAnswerCall(f"unreadable answer: a lock without {e}") from None

    @property
    def holders(self) -> int:
        """How many hold the name: this lock and its ``others``."""
        return 1 + len(self.others)


@dataclass
class Awaited:
    """A name nobody holds that requests wait for, kept free for them (a
    set waiting for all its names), as a listing shows it."""

    name: str
    waiters: int
    queue: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Awaited":
        try:
            return cls(
                name=str(v["name"]),
                waiters=int(v.get("waiters") or 0),
                queue=list(v.get("queue") or []),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise _NoAnswerCall(f"unreadable answer: an awaited name without {e}") from None


@dataclass
class Listing:
    """A listing (``GET /v1/locks``): the locks held under the prefix, how
    many there are in all (``None`` where the node does not tell: a token
    of ``--acl``), and the free names under it that requests wait for."""

    locks: List[Lock]
    total: Optional[int] = None
    awaited: List[Awaited] = field(default_factory=list)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Listing":
        total = v.get("total")
        return cls(
            locks=[Lock.from_json(l) for l in (v.get("locks") or [])],
            total=None if total is None else int(total),
            awaited=[Awaited.from_json(a) for a in (v.get("awaited") or [])],
        )


@dataclass
class SessionInfo:
    """A session as the cluster shows it."""

    id: str
    node: int
    holder: str
    lease_ms: int
    ttl_ms: int
    expires_at: str = ""
    locks: Optional[int] = None

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "SessionInfo":
        try:
            return cls(
                id=str(v["id"]),
                node=int(v.get("node") or 0),
                holder=str(v.get("holder") or ""),
                lease_ms=int(v.get("lease_ms") or 0),
                ttl_ms=int(v.get("ttl_ms") or 0),
                expires_at=str(v.get("expires_at") or ""),
                locks=v.get("locks"),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise _NoAnswerCall(f"unreadable answer: a session without {e}") from None


# ---------------------------------------------------------------------------
# Internal call errors (the Rust client's CallError).


class CallError(Exception):
    """A call that failed (internal)."""


class ApiCall(CallError):
    """A node answered with an error."""

    def __init__(self, status: int, code: str, message: str, lock: Optional[Dict[str, Any]]) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.lock = lock


class _NoAnswerCall(CallError):
    """No node answered: the outcome is unknown."""


class NotSentCall(CallError):
    """The request never reached a node: nothing was done."""


NoAnswerCall = _NoAnswerCall

RETRYABLE_CODES = frozenset({"not_rebuilt", "no_leader", "not_caught_up", "upgrading"})
#: A refusal about the call itself is an answer: the endpoint served.
SERVED_CODES = frozenset({"held", "not_held", "bad_request", "too_large"})

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_held",
    405: "method_not_allowed",
    409: "held",
    413: "too_large",
    500: "internal",
    503: "not_rebuilt",
}


def error_body(status: int, payload: Any) -> ApiCall:
    """The error a failed answer carries; its code from the status when the
    body has none (a proxy's answer)."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        lock = payload.get("lock") if isinstance(payload.get("lock"), dict) else None
        return ApiCall(status, payload["error"], str(payload.get("message") or ""), lock)
    code = _STATUS_CODES.get(status)
    if code is None:
        code = "internal" if status >= 500 else "bad_request"
    if status == 404:
        code = "unknown_route"
    return ApiCall(status, code, f"HTTP {status}", None)


def retryable(e: BaseException) -> bool:
    if isinstance(e, (_NoAnswerCall, NotSentCall)):
        return True
    if isinstance(e, ApiCall):
        return e.code in RETRYABLE_CODES
    return False


def refused(e: BaseException) -> errors.LeaseholdError:
    """The error a caller sees for a failed call."""
    if isinstance(e, errors.LeaseholdError):
        return e
    if isinstance(e, _NoAnswerCall):
        return errors.NoAnswer(str(e))
    if isinstance(e, NotSentCall):
        return errors.Unavailable(str(e))
    if not isinstance(e, ApiCall):
        return errors.Server(str(e))
    code, message = e.code, e.message
    if code == "held":
        if e.lock is None:
            return errors.Reserved(message)
        try:
            return errors.Held(Lock.from_json(e.lock))
        except CallError:
            return errors.Server(f"a held answer with an unreadable lock: {message}")
    if code == "not_held":
        return errors.NotHeld()
    if code == "kind_mismatch":
        return errors.KindMismatch(message)
    if code in ("bad_request", "too_large", "in_session"):
        return errors.BadRequest(message)
    if code == "unauthorized":
        return errors.Unauthorized(message)
    if code == "forbidden":
        return errors.Forbidden(message)
    if code in ("not_rebuilt", "no_leader", "not_caught_up", "upgrading"):
        return errors.Unavailable(message)
    if code in ("unknown_route", "method_not_allowed"):
        return errors.UnknownRoute(message)
    if code in ("unknown_member", "member_exists", "change_in_progress", "would_lose_quorum"):
        return errors.Membership(code, message)
    # wrong_member, internal, disabled, and any code this client does not know.
    return errors.Server(message)


# ---------------------------------------------------------------------------
# Rules without I/O.


def request_id() -> str:
    """A new name for one acquisition: 32 random hex digits."""
    return secrets.token_hex(16)


def first_endpoint(n: int) -> int:
    """Where a process starts in its list of ``n`` endpoints: at random."""
    return secrets.randbelow(n) if n > 0 else 0


def backoff(attempt: int) -> float:
    """A short pause before trying again (s): 50 ms doubling, at most 500."""
    return min(50 << min(attempt, 4), 500) / 1000.0


def renew_pause(attempt: int) -> float:
    """The pause between renewal attempts (s): 25 ms doubling, at most 200."""
    return min(25 << min(attempt, 3), 200) / 1000.0


def observe_backoff(failures: int) -> float:
    """The wait before an observer's next call after ``failures`` in a row."""
    return min(50 << min(max(failures - 1, 0), 6), 2000) / 1000.0


def attempt_timeout(left: float, tries_left: int) -> float:
    """How long one attempt may take with ``left`` before the deadline: a
    share per endpoint not tried yet in this round, at least 100 ms (or what
    is left), at most 2 s."""
    left = max(left, 0.0)
    share = left / max(tries_left, 1)
    return min(max(share, SHORTEST_ATTEMPT), left, ATTEMPT_TIMEOUT)


_NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * _NS))


@dataclass(frozen=True)
class Schedule:
    """When a guard renews, and how long before the lease's end an
    unrenewed lock counts as lost (seconds)."""

    every: float
    margin: float

    @staticmethod
    def asked(lease: float, renew_every: Optional[float], lapse_margin: Optional[float]) -> "Schedule":
        lease_ns = _ns(lease)
        every = _ns(renew_every) if renew_every is not None else lease_ns // 3
        margin = (
            _ns(lapse_margin)
            if lapse_margin is not None
            else min(lease_ns // 10, _ns(MAX_LAPSE_MARGIN))
        )
        return Schedule(every / _NS, margin / _NS)

    @staticmethod
    def checked(lease: float, renew_every: Optional[float], lapse_margin: Optional[float]) -> "Schedule":
        """The schedule asked for under ``lease``, or BadRequest saying why it
        cannot keep the lock (the Rust client's rules)."""
        s = Schedule.asked(lease, renew_every, lapse_margin)
        lease_ns, every, margin = _ns(lease), _ns(s.every), _ns(s.margin)
        if every < _ns(MIN_RENEW_EVERY) or every > lease_ns // 2:
            raise errors.BadRequest(
                f"a renewal every {s.every}s does not fit a {lease}s lease: renew at least "
                f"twice a lease, and at most every {MIN_RENEW_EVERY}s"
            )
        if margin >= lease_ns // 2:
            raise errors.BadRequest(
                f"a lapse margin of {s.margin}s is too long for a {lease}s lease: keep it under half"
            )
        if every + every // 2 + margin > lease_ns:
            raise errors.BadRequest(
                f"a renewal every {s.every}s with a lapse margin of {s.margin}s leaves too little "
                f"of a {lease}s lease between renewals: shorten one of them"
            )
        return s

    @staticmethod
    def fitted(lease: float, renew_every: Optional[float], lapse_margin: Optional[float]) -> "Schedule":
        """The schedule for a granted ``lease``: as asked where it fits; else
        the margin asked is kept if under half the lease (a quarter of it
        otherwise) and the period shortened to fit around it."""
        try:
            s = Schedule.checked(lease, renew_every, lapse_margin)
        except errors.BadRequest:
            asked = Schedule.asked(lease, renew_every, lapse_margin)
            lease_ns = _ns(lease)
            margin = _ns(asked.margin)
            if margin >= lease_ns // 2:
                margin = lease_ns // 4
            room = max(lease_ns - margin, 0) * 2 // 3
            every = min(_ns(asked.every), lease_ns // 2, room)
            s = Schedule(every / _NS, margin / _NS)
        return Schedule(max(s.every, 0.001), s.margin)


def look_every(margin: float) -> float:
    """How often a wait looks at the lease again (s)."""
    return min(max(margin / 2, 0.010), LOOK_AT_MOST)


def data_tag(data: Optional[str]) -> int:
    """FNV-1a (64-bit) of the data's UTF-8 bytes; 0 for none."""
    if data is None:
        return 0
    h = 14695981039346656037
    for b in data.encode("utf-8"):
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def lock_id_bits(text: str) -> Optional[int]:
    """The 128 bits of a lock id (26 Crockford base32 digits), or None."""
    if len(text) != 26 or text[0] > "7":
        return None
    value = 0
    for c in text.upper():
        if c == "O":
            d = 0
        elif c in "IL":
            d = 1
        else:
            d = _CROCKFORD.find(c)
            if d < 0:
                return None
        value = (value << 5) | d
    return value & ((1 << 128) - 1)


def format_digest(digest: int) -> str:
    return f"{digest:032x}"


def check_name(name: str) -> None:
    """BadRequest for a name no lock can have (empty, or too long)."""
    if not name:
        raise errors.BadRequest("name: empty")
    if len(name.encode("utf-8")) > 512:
        raise errors.BadRequest("name: longer than 512 bytes")


def segment(name: str) -> str:
    """Percent-encodes a name as one path segment."""
    out = []
    for b in name.encode("utf-8"):
        c = chr(b)
        if c.isascii() and (c.isalnum() or c in "-._~"):
            out.append(c)
        else:
            out.append(f"%{b:02X}")
    return "".join(out)


def normalize_endpoints(endpoints: List[str], tls: bool) -> List[str]:
    scheme = "https://" if tls else "http://"
    out = []
    for e in endpoints:
        e = e.strip().rstrip("/")
        if "://" not in e:
            e = scheme + e
        scheme_part, _, rest = e.partition("://")
        if not rest:
            continue
        if scheme_part not in ("http", "https"):
            raise errors.BadRequest(f"{e!r} is not an endpoint (host:port, or http(s)://host:port)")
        out.append(e)
    if not out:
        raise errors.BadRequest("no endpoints given")
    return out


def token_from_env() -> Optional[str]:
    """The token as the CLI reads it: LEASEHOLD_TOKEN, if set and not empty."""
    return os.environ.get("LEASEHOLD_TOKEN") or None


def ms(seconds: float) -> int:
    return max(int(seconds * 1000), 0)


def acquire_body(
    name: Optional[str],
    names: Optional[List[str]],
    *,
    holder: Optional[str],
    lease: Optional[float],
    data: Optional[str],
    shared: bool,
    permits: Optional[int],
    lock_delay: float,
    session: Optional[str],
) -> Dict[str, Any]:
    """The body of an acquire: one request_id for this acquisition, sent on
    every retry of it."""
    if shared and permits is not None:
        raise errors.BadRequest("shared and permits together")
    body: Dict[str, Any] = {"request_id": request_id()}
    if names is not None:
        body["names"] = list(names)
    if name is not None:
        body["name"] = name
    if holder is not None:
        body["holder"] = holder
    if lease is not None:
        body["lease_ms"] = ms(lease)
    if data is not None:
        body["data"] = data
    if shared:
        body["shared"] = True
    if permits is not None:
        body["permits"] = int(permits)
    if lock_delay > 0:
        body["lock_delay_ms"] = ms(lock_delay)
    if session is not None:
        body["session"] = session
    return body
