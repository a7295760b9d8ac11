"""The errors callers branch on: the Rust client's, by the same names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ._model import Lock


class LeaseholdError(Exception):
    """Every error this client raises."""


class Held(LeaseholdError):
    """Another holds the lock (at the end of the wait, if any); ``.lock`` is
    the holder's lock."""

    def __init__(self, lock: "Lock") -> None:
        super().__init__(f"{lock.name} is held by {lock.holder!r}")
        self.lock = lock


class Reserved(LeaseholdError):
    """The name is free, but an earlier request waits for it (a set waiting
    for all its names keeps its free ones from later requests): refused as
    ``Held`` is, with no holder to show (``409 held`` without a lock)."""


class KindMismatch(LeaseholdError):
    """The name is held or awaited as another kind than asked (permits on a
    lock, a lock on a semaphore, another permit count): refused, not queued."""


class NotHeld(LeaseholdError):
    """The lock is not held under that id: released, expired, or lost."""

    def __init__(self, message: str = "the lock is not held") -> None:
        super().__init__(message)


class Lost(LeaseholdError):
    """The lock was lost: a renewal was refused, or the lease ran out on the
    client's own clock before a renewal got through."""

    def __init__(self, message: str = "the lock was lost") -> None:
        super().__init__(message)


class ArrivedLate(LeaseholdError):
    """A grant arrived after the client's own count of its lease had run out;
    it was released and is not held. Safe to retry at once."""

    def __init__(
        self, message: str = "the grant arrived after its lease had run out; it was released"
    ) -> None:
        super().__init__(message)


class Unavailable(LeaseholdError):
    """Nodes answered, but none could serve (``503``), or none could be
    reached, before the call's time ran out, and no attempt went unanswered
    after it was sent. Nothing was done; retry later."""


class NoAnswer(LeaseholdError):
    """No node answered before the call's time ran out. For an acquire or a
    release the outcome is unknown."""


class Unauthorized(LeaseholdError):
    """The cluster refused the credentials (``401``)."""


class Forbidden(LeaseholdError):
    """The token may not do that to that name, or on that route (``403``)."""


class Server(LeaseholdError):
    """A node failed (``500``), is not a member of the cluster the client was
    given (``409 wrong_member``), or answered without what its answer must
    carry."""


class BadRequest(LeaseholdError):
    """The request was refused as malformed, or the options are invalid."""


class Membership(LeaseholdError):
    """A membership change was refused; ``.code`` names why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class UnknownRoute(LeaseholdError):
    """The node serves no such call (``404 unknown_route``, ``405
    method_not_allowed``): the endpoint is not a node's address, or the node's
    version lacks the call. Nothing was done."""


__all__ = [
    "LeaseholdError",
    "Held",
    "KindMismatch",
    "NotHeld",
    "Lost",
    "ArrivedLate",
    "Unavailable",
    "NoAnswer",
    "Unauthorized",
    "Forbidden",
    "Server",
    "BadRequest",
    "Membership",
    "UnknownRoute",
]

