"""The synchronous client: the asyncio client run on an event loop in a
background thread of the client's own. Renewals run there; the caller's
thread only waits for the calls it makes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Callable, Dict, Generic, Iterator, List, Optional, Sequence, TypeVar

try:
    from typing import Protocol
except ImportError:  # pragma: no cover
    from typing_extensions import Protocol  # type: ignore

from . import aio, errors
from ._model import RETRY_FOR, Listing, Lock, Loss, SessionInfo

T = TypeVar("T")


class _Loop:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="leasehold-client", daemon=True)
        self.thread.start()
        started.wait()

    def run(self, coro: Awaitable[T], timeout: Optional[float] = None) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a leasehold.Client call from inside its own loop thread")
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(coro), self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        except KeyboardInterrupt:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


class Client:
    """A client of a leasehold cluster (blocking calls, renewals in a
    background thread).

    ``endpoints``: ``host:port`` or ``http(s)://host:port`` of any nodes
    (default: ``LEASEHOLD_ENDPOINTS``, comma-separated). ``token``: sent as
    ``Authorization: Bearer`` (default: the variable ``token_env`` names,
    ``LEASEHOLD_TOKEN``, if set, as the command line reads it; ``""`` for
    none). ``tls_ca_file``: trust only this CA (PEM), and reach bare
    ``host:port`` endpoints over ``https`` (default: ``LEASEHOLD_TLS_CA``
    if set). ``retry_for``: how long one-shot calls keep retrying while no
    node can serve (seconds)."""

    def __init__(
        self,
        endpoints: Optional[Sequence[str]] = None,
        *,
        token: Optional[str] = None,
        token_env: Optional[str] = "LEASEHOLD_TOKEN",
        tls_ca_file: Optional[str] = None,
        retry_for: float = RETRY_FOR,
    ) -> None:
        # Built here so that bad endpoints or a bad CA fail at once.
        self._aio = aio.Client(
            endpoints, token=token, token_env=token_env, tls_ca_file=tls_ca_file, retry_for=retry_for
        )
        self._loop = _Loop()

    def _run(self, coro: Awaitable[T]) -> T:
        return self._loop.run(coro)

    @property
    def endpoints(self) -> List[str]:
        return self._aio.endpoints

    @property
    def retry_for(self) -> float:
        return self._aio.retry_for

    def close(self) -> None:
        """Closes the connections and stops the client's thread (held locks
        are renewed no more: release them first)."""
        if self._loop.loop.is_closed():
            return
        try:
            self._run(self._aio.aclose())
        finally:
            self._loop.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- locks -----------------------------------------------------------

    def acquire(self, name: str, **options: Any) -> "LockGuard":
        """Acquires ``name`` (``lease``, ``wait``, ``holder``, ``data``,
        ``renew_every``, ``lapse_margin``, ``shared``, ``permits``,
        ``lock_delay``: seconds where a time) and returns a guard renewing it
        in the background until released."""
        return LockGuard(self, self._run(self._aio.acquire(name, **options)))

    def try_acquire(self, name: str, **options: Any) -> "LockGuard":
        """Acquires ``name`` if free now; else :class:`~leasehold.errors.Held`."""
        options["wait"] = 0.0
        return self.acquire(name, **options)

    def lock(self, name: str, **options: Any) -> "_Context[LockGuard]":
        """``with client.lock(name, lease=10, wait=30) as lock:`` holds the
        lock for the block: released on exit, :class:`Lost` on exit if lost."""
        return _Context(lambda: self.acquire(name, **options))

    def acquire_all(self, names: Sequence[str], **options: Any) -> "LockSet":
        """Acquires every one of ``names`` at once, or none."""
        return LockSet(self, self._run(self._aio.acquire_all(names, **options)))

    def lock_all(self, names: Sequence[str], **options: Any) -> "_Context[LockSet]":
        """``with client.lock_all(names) as locks:`` holds the set for the block."""
        return _Context(lambda: self.acquire_all(names, **options))

    def with_lock(self, name: str, work: Callable[[threading.Event], T], **options: Any) -> T:
        """Runs ``work(lost)`` while holding ``name``, then releases it.
        ``lost`` (a :class:`threading.Event`) is set the moment the lock is
        lost or its lease is about to lapse. The work runs in a thread of its
        own: after a refused renewal the call raises :class:`Lost` at once,
        after a lapse once the work returns or the lease ends (a thread
        cannot be stopped from outside: the work must watch ``lost``)."""
        guard = self.acquire(name, **options)
        return _run_under(work, guard.lost, lambda: guard.loss, guard.lease_ends, guard.is_lost, guard.release)

    def with_locks(self, names: Sequence[str], work: Callable[[threading.Event], T], **options: Any) -> T:
        """As :meth:`with_lock`, under a set."""
        held = self.acquire_all(names, **options)
        return _run_under(work, held.lost, lambda: held.loss, held._lease_ends, held.is_lost, held.release)

    def get(self, name: str) -> Optional[Lock]:
        """The lock ``name``, or None when the name is free."""
        return self._run(self._aio.get(name))

    def watch(self, name: str, after_fence: int, wait: float) -> Optional[Lock]:
        """The lock ``name`` once its fence differs from ``after_fence``, or
        after ``wait`` seconds (at most 60), as it then is."""
        return self._run(self._aio.watch(name, after_fence, wait))

    def list(self, prefix: str = "", limit: int = 1000) -> List[Lock]:
        """The locks whose names start with ``prefix``, at most ``limit``."""
        return self._run(self._aio.list(prefix, limit))

    def listing(self, prefix: str = "", limit: int = 1000) -> Listing:
        """As :meth:`list`, with how many locks are held under ``prefix`` in
        all and the free names under it that requests wait for."""
        return self._run(self._aio.listing(prefix, limit))

    def cluster(self) -> Dict[str, Any]:
        """The cluster as the node reached sees it."""
        return self._run(self._aio.cluster())

    def release(self, name: str, id: str) -> Lock:
        """Releases a lock by name and id; :class:`NotHeld` if not held so."""
        return self._run(self._aio.release(name, id))

    # -- sessions --------------------------------------------------------

    def open_session(
        self, *, ttl: Optional[float] = None, holder: Optional[str] = None, lock_delay: float = 0.0
    ) -> "Session":
        """Opens a session renewed in the background; ``lock_delay`` goes
        with every lock taken in it unless the lock asks its own."""
        return Session(self, self._run(self._aio.open_session(ttl=ttl, holder=holder, lock_delay=lock_delay)))

    def session(
        self, *, ttl: Optional[float] = None, holder: Optional[str] = None, lock_delay: float = 0.0
    ) -> "_Context[Session]":
        """``with client.session(ttl=10) as s:`` closed on exit."""
        return _Context(lambda: self.open_session(ttl=ttl, holder=holder, lock_delay=lock_delay))

    # -- election --------------------------------------------------------

    def campaign(
        self, name: str, value: str, *, lease: Optional[float] = None, give_up_after: Optional[float] = None
    ) -> "Leadership":
        """Waits until this candidate leads ``name``; :class:`Held` once
        ``give_up_after`` seconds pass without winning."""
        return Leadership(
            self, self._run(self._aio.campaign(name, value, lease=lease, give_up_after=give_up_after))
        )

    def leader(self, name: str) -> Optional[Lock]:
        """The leader's lock now (its value in ``data``), or None."""
        return self._run(self._aio.leader(name))

    def observe(self, name: str) -> "Observer":
        """An iterator of who leads ``name``: the leader now (or None), then
        each change."""
        return Observer(self, name)


def _run_under(
    work: Callable[[threading.Event], T],
    lost: threading.Event,
    loss: Callable[[], Optional[Loss]],
    lease_ends: Callable[[], float],
    is_lost: Callable[[], bool],
    release: Callable[[], None],
) -> T:
    import time

    done = threading.Event()
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work(lost)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            outcome["error"] = e
        finally:
            done.set()
            # Wakes the waiter below.
            with wake:
                wake.notify_all()

    wake = threading.Condition()
    thread = threading.Thread(target=run, name="leasehold-work", daemon=True)
    thread.start()
    with wake:
        while not done.is_set() and not lost.is_set():
            is_lost()
            wake.wait(0.05)
    if not done.is_set():
        if loss() != Loss.REFUSED:
            # A lapse leaves the work until the lease ends.
            while not done.is_set() and time.monotonic() < lease_ends():
                done.wait(min(0.05, max(lease_ends() - time.monotonic(), 0.0)))
        raise errors.Lost()
    if "error" in outcome:
        # The work raised: the lock is released all the same.
        try:
            release()
        except errors.LeaseholdError:
            pass
        raise outcome["error"]
    if is_lost():
        raise errors.Lost()
    try:
        release()
    except errors.LeaseholdError:
        pass
    return outcome["value"]  # type: ignore[no-any-return]


class LockGuard:
    """A lock this client holds, renewed in the background until released."""

    def __init__(self, client: Client, guard: aio.LockGuard) -> None:
        self._client = client
        self._guard = guard

    @property
    def view(self) -> Lock:
        """The lock as last granted or renewed."""
        return self._guard.view

    @property
    def name(self) -> str:
        return self._guard.name

    @property
    def id(self) -> str:
        return self._guard.id

    @property
    def fence(self) -> int:
        """The fencing token: pass it to the resource the lock guards."""
        return self._guard.fence

    @property
    def node(self) -> int:
        return self._guard.node

    @property
    def lost(self) -> threading.Event:
        """Set the moment the lock is lost or about to lapse (and after a release)."""
        self._guard._count.is_lost()
        return self._guard._count.lost.flag

    @property
    def loss(self) -> Optional[Loss]:
        """Why it was lost (:class:`Loss`), None while held and after a release."""
        return self._guard.loss

    def lease_ends(self) -> float:
        """When the lease ends on this client's clock (``time.monotonic()``)."""
        return self._guard.lease_ends

    @property
    def lapse_margin(self) -> float:
        return self._guard.lapse_margin

    def is_lost(self) -> bool:
        return self._guard.is_lost()

    def check(self) -> None:
        """:class:`Lost` once the lock may be lost, judged now."""
        self._guard.check()

    def set_data(self, data: str) -> Lock:
        return self._client._run(self._guard.set_data(data))

    def release(self) -> None:
        """Stops renewing and releases; :class:`Lost` if it had been lost."""
        self._client._run(self._guard.release())

    def __enter__(self) -> "LockGuard":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except errors.LeaseholdError:
            if exc_type is None:
                raise


class LockSet:
    """Locks granted together, renewed side by side, lost as one."""

    def __init__(self, client: Client, held: aio.LockSet) -> None:
        self._client = client
        self._set = held

    @property
    def guards(self) -> List[aio.LockGuard]:
        return self._set.guards

    @property
    def locks(self) -> List[Lock]:
        return self._set.locks

    @property
    def fences(self) -> List[int]:
        return self._set.fences

    @property
    def fence(self) -> int:
        return self._set.fence

    @property
    def lost(self) -> threading.Event:
        self._set.is_lost()
        return self._set._lost.flag

    @property
    def loss(self) -> Optional[Loss]:
        return self._set.loss

    def _lease_ends(self) -> float:
        return max(g.lease_ends for g in self._set.guards)

    def is_lost(self) -> bool:
        return self._set.is_lost()

    def check(self) -> None:
        self._set.check()

    def release(self) -> None:
        self._client._run(self._set.release())

    def __enter__(self) -> "LockSet":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except errors.LeaseholdError:
            if exc_type is None:
                raise


class Session:
    """A session: one lease many locks hang off, renewed in the background."""

    def __init__(self, client: Client, session: aio.Session) -> None:
        self._client = client
        self._session = session

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def view(self) -> SessionInfo:
        return self._session.view

    @property
    def lost(self) -> threading.Event:
        self._session.is_lost()
        return self._session._lost.flag

    def is_lost(self) -> bool:
        return self._session.is_lost()

    def check(self) -> None:
        self._session.check()

    def acquire(self, name: str, **options: Any) -> "SessionLock":
        """Takes ``name`` in this session (``wait``, ``holder``, ``data``,
        ``shared``, ``permits``, ``lock_delay``)."""
        return SessionLock(self._client._run(self._session.acquire(name, **options)))

    def release(self, held: "SessionLock") -> None:
        self._client._run(self._session.release(held._lock))

    def close(self) -> int:
        """Closes the session, releasing every lock of it; how many went."""
        return self._client._run(self._session.close())

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self._session._closed:
            try:
                self.close()
            except errors.LeaseholdError:
                if exc_type is None:
                    raise


class SessionLock:
    """A lock of a session."""

    def __init__(self, held: aio.SessionLock) -> None:
        self._lock = held

    @property
    def view(self) -> Lock:
        return self._lock.view

    @property
    def name(self) -> str:
        return self._lock.name

    @property
    def id(self) -> str:
        return self._lock.id

    @property
    def fence(self) -> int:
        return self._lock.fence

    @property
    def node(self) -> int:
        return self._lock.node

    @property
    def lost(self) -> threading.Event:
        return self._lock._lost.flag

    def is_lost(self) -> bool:
        return self._lock.is_lost()

    def check(self) -> None:
        self._lock.check()


class Leadership:
    """This candidate leads while this is held and not lost."""

    def __init__(self, client: Client, leadership: aio.Leadership) -> None:
        self._client = client
        self._leadership = leadership
        self.guard = LockGuard(client, leadership.guard)

    @property
    def view(self) -> Lock:
        return self.guard.view

    @property
    def fence(self) -> int:
        return self.guard.fence

    @property
    def node(self) -> int:
        return self.guard.node

    @property
    def lost(self) -> threading.Event:
        return self.guard.lost

    @property
    def loss(self) -> Optional[Loss]:
        return self.guard.loss

    def is_lost(self) -> bool:
        return self.guard.is_lost()

    def check(self) -> None:
        self.guard.check()

    def proclaim(self, value: str) -> Lock:
        return self._client._run(self._leadership.proclaim(value))

    def resign(self) -> None:
        """Gives leadership up at once."""
        self._client._run(self._leadership.resign())

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.guard.__exit__(exc_type, exc, tb)


class Observer:
    """An iterator of who leads an election; it never ends on its own
    (``close()`` ends it at its next item)."""

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self._observer = aio.Observer(client._aio, name)
        self._closed = False

    @property
    def last_error(self) -> Optional[errors.LeaseholdError]:
        return self._observer.last_error

    def __iter__(self) -> Iterator[Optional[Lock]]:
        return self

    def __next__(self) -> Optional[Lock]:
        if self._closed:
            raise StopIteration
        return self._client._run(self._observer.__anext__())

    def close(self) -> None:
        self._closed = True


class _Exits(Protocol):
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...


H = TypeVar("H", bound=_Exits)


class _Context(Generic[H]):
    """Acquires (or opens) on entry, releases (or closes) on exit."""

    def __init__(self, enter: Callable[[], H]) -> None:
        self._enter = enter
        self._held: Optional[H] = None

    def __enter__(self) -> H:
        self._held = self._enter()
        return self._held

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._held is not None:
            self._held.__exit__(exc_type, exc, tb)
