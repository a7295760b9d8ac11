"""The Python client of leasehold, a cluster lock service.

``leasehold.Client`` blocks (renewals run in a background thread);
``leasehold.aio.Client`` is its asyncio twin. Both behave as the Rust
client does (docs/client.md)."""

from ._model import Awaited, Listing, Lock, Loss, Schedule, SessionInfo
from ._sync import Client, Leadership, LockGuard, LockSet, Observer, Session, SessionLock
from .errors import (
    ArrivedLate,
    BadRequest,
    Forbidden,
    Held,
    KindMismatch,
    LeaseholdError,
    Lost,
    Membership,
    NoAnswer,
    NotHeld,
    Reserved,
    Server,
    Unauthorized,
    Unavailable,
    UnknownRoute,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "LockGuard",
    "LockSet",
    "Session",
    "SessionLock",
    "Leadership",
    "Observer",
    "Lock",
    "Listing",
    "Awaited",
    "Loss",
    "Schedule",
    "SessionInfo",
    "LeaseholdError",
    "Held",
    "Reserved",
    "NotHeld",
    "KindMismatch",
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
