"""The asyncio client: the same calls as :class:`leasehold.Client`, awaited.

Every lease is counted on ``time.monotonic()`` from the moment the client
*sent* the request that won or renewed it, as the Rust client counts it
(docs/client.md, "How the lease is counted")."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generic,
    List,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from . import errors
from ._model import (
    ASSUMED_DEFAULT_LEASE,
    CAMPAIGN_WAIT,
    DATA_PATIENCE,
    FOREVER,
    MAX_WATCH,
    OBSERVE_WAIT,
    REQUEST_TIMEOUT,
    RETRY_FOR,
    ApiCall,
    CallError,
    Listing,
    Lock,
    Loss,
    NoAnswerCall,
    Schedule,
    SessionInfo,
    acquire_body,
    attempt_timeout,
    backoff,
    check_name,
    data_tag,
    format_digest,
    lock_id_bits,
    look_every,
    ms,
    observe_backoff,
    refused,
    renew_pause,
    retryable,
    segment,
)
from ._transport import Transport

T = TypeVar("T")

mono = time.monotonic

#: Tasks started in the background (a release after a late grant, a close),
#: kept so that they are not collected before they end.
_BACKGROUND: Set["asyncio.Task[Any]"] = set()


def _spawn(coro: Awaitable[Any]) -> "asyncio.Task[Any]":
    task: "asyncio.Task[Any]" = asyncio.ensure_future(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    return task


async def _sleep_until(at: float) -> None:
    left = at - mono()
    if left > 0:
        await asyncio.sleep(left)


class Signal:
    """A one-way flag set once (a loss, a session's end), seen from any
    thread: ``flag`` (a :class:`threading.Event`) and ``event`` (an
    :class:`asyncio.Event` of the loop it was made in)."""

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._callbacks: List[Callable[[], None]] = []
        self._fired = False

    def is_set(self) -> bool:
        return self.flag.is_set()

    def set(self) -> None:
        if self.flag.is_set():
            return
        self.flag.set()
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._fire()
        else:
            try:
                self._loop.call_soon_threadsafe(self._fire)
            except RuntimeError:  # the loop is closed
                pass

    def _fire(self) -> None:
        if self._fired:
            return
        self._fired = True
        self.event.set()
        for callback in self._callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` in the loop once the signal is set."""
        self._callbacks.append(callback)
        if self._fired:
            callback()


class _LostRenewal(Exception):
    def __init__(self, loss: Loss) -> None:
        super().__init__(loss.value)
        self.loss = loss


class _NotChanged(Exception):
    def __init__(self, error: errors.LeaseholdError) -> None:
        super().__init__(str(error))
        self.error = error


def _env_token(token: Optional[str], token_env: Optional[str]) -> Optional[str]:
    if token is not None:
        return token or None
    if token_env:
        return os.environ.get(token_env) or None
    return None


def _env_endpoints(endpoints: Optional[Sequence[str]]) -> List[str]:
    if endpoints is None:
        text = os.environ.get("LEASEHOLD_ENDPOINTS", "")
        return [e for e in text.split(",") if e.strip()]
    if isinstance(endpoints, str):
        return [endpoints]
    return list(endpoints)


class Client:
    """A client of a leasehold cluster (asyncio).

    ``endpoints``: ``host:port`` or ``http(s)://host:port`` of any nodes
    (default: ``LEASEHOLD_ENDPOINTS``, comma-separated). ``token``: sent as
    ``Authorization: Bearer`` (default: the variable ``token_env`` names,
    ``LEASEHOLD_TOKEN``, if set; ``""`` for none). ``tls_ca_file``: trust
    only this CA (PEM), and reach bare ``host:port`` endpoints over
    ``https`` (default: ``LEASEHOLD_TLS_CA`` if set). ``retry_for``: how
    long one-shot calls keep retrying while no node can serve (s)."""

    def __init__(
        self,
        endpoints: Optional[Sequence[str]] = None,
        *,
        token: Optional[str] = None,
        token_env: Optional[str] = "LEASEHOLD_TOKEN",
        tls_ca_file: Optional[str] = None,
        retry_for: float = RETRY_FOR,
    ) -> None:
        if tls_ca_file is None:
            tls_ca_file = os.environ.get("LEASEHOLD_TLS_CA") or None
        self._transport = Transport(
            _env_endpoints(endpoints), _env_token(token, token_env), tls_ca_file
        )
        self.retry_for = float(retry_for)

    @property
    def endpoints(self) -> List[str]:
        return list(self._transport.endpoints)

    async def aclose(self) -> None:
        """Closes the connections (held locks are not released)."""
        await self._transport.aclose()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- retries ---------------------------------------------------------

    async def _retrying(self, until: float, call: Callable[[], Awaitable[T]]) -> T:
        """Runs ``call`` until it succeeds, is refused for good, or ``until``
        passes; the transport moved to another node after each failure."""
        attempt = 0
        # An attempt that got no answer may have gone through: if one did,
        # the outcome stays unknown whatever the later ones say.
        unanswered: Optional[str] = None
        while True:
            try:
                return await call()
            except CallError as e:
                if retryable(e) and mono() < until:
                    if isinstance(e, NoAnswerCall):
                        unanswered = str(e)
                    await asyncio.sleep(backoff(attempt))
                    attempt += 1
                    continue
                if isinstance(e, ApiCall) and retryable(e) and unanswered is not None:
                    raise NoAnswerCall(f"{unanswered} (then: {e.message})") from None
                raise

    async def _one_shot(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        until = mono() + self.retry_for
        try:
            return await self._retrying(
                until, lambda: self._transport.call(method, path, body, REQUEST_TIMEOUT)
            )
        except CallError as e:
            raise refused(e) from None

    async def _granted(
        self,
        body: Dict[str, Any],
        lease: Optional[float],
        wait: float,
        renew_every: Optional[float],
        lapse_margin: Optional[float],
    ) -> Tuple[Dict[str, Any], float]:
        """Sends an acquire until a node grants it, refuses it for good, or
        the wait and the retries run out. Answers the grant and where its
        lease is counted from: the send of the call that won it, plus the
        time the node held it."""
        Schedule.checked(lease if lease is not None else ASSUMED_DEFAULT_LEASE, renew_every, lapse_margin)
        wait = max(float(wait), 0.0)
        now = mono()
        until = now + min(wait + self.retry_for, FOREVER)
        wait_until = now + min(wait, FOREVER)
        sent = now

        async def attempt() -> Dict[str, Any]:
            nonlocal sent
            sent = mono()
            b = dict(body)
            left = max(wait_until - sent, 0.0)
            if left > 0:
                b["wait_ms"] = ms(left)
            return await self._transport.call("POST", "/v1/locks/acquire", b, left + REQUEST_TIMEOUT)

        while True:
            try:
                answer = await self._retrying(until, attempt)
            except ApiCall as e:
                # A node waits at most 10 min at a time: ask again while
                # this call's own wait lasts.
                if e.code == "held" and mono() < wait_until:
                    await asyncio.sleep(backoff(0))
                    continue
                raise refused(e) from None
            except CallError as e:
                raise refused(e) from None
            served = float(answer.get("served_ms") or 0) / 1000.0
            return answer, sent + served

    # -- locks -----------------------------------------------------------

    async def acquire(
        self,
        name: str,
        *,
        lease: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        data: Optional[str] = None,
        renew_every: Optional[float] = None,
        lapse_margin: Optional[float] = None,
        shared: bool = False,
        permits: Optional[int] = None,
        lock_delay: float = 0.0,
    ) -> "LockGuard":
        """Acquires ``name``, waiting up to ``wait`` seconds while another
        holds it (0: fail at once with :class:`~leasehold.errors.Held`), and
        returns a guard that renews it until it is released."""
        body = acquire_body(
            name, None, holder=holder, lease=lease, data=data, shared=shared,
            permits=permits, lock_delay=lock_delay, session=None,
        )
        answer, sent = await self._granted(body, lease, wait, renew_every, lapse_margin)
        try:
            granted = Lock.from_json(answer["lock"])
        except (KeyError, TypeError, CallError):
            raise errors.Server("an acquire's answer without its lock") from None
        return LockGuard._start(self._transport, granted, sent, lease, renew_every, lapse_margin)

    async def try_acquire(self, name: str, **options: Any) -> "LockGuard":
        """Acquires ``name`` if it is free now; otherwise fails at once with
        :class:`~leasehold.errors.Held` and the holder's lock."""
        options["wait"] = 0.0
        return await self.acquire(name, **options)

    def lock(self, name: str, **options: Any) -> "_Entered[LockGuard]":
        """``async with client.lock(name, lease=10, wait=30) as lock:`` holds
        the lock for the block: renewed in the background, released on exit
        (:class:`~leasehold.errors.Lost` on exit if it was lost)."""
        return _Entered(lambda: self.acquire(name, **options))

    async def acquire_all(
        self,
        names: Sequence[str],
        *,
        lease: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        data: Optional[str] = None,
        renew_every: Optional[float] = None,
        lapse_margin: Optional[float] = None,
        shared: bool = False,
        permits: Optional[int] = None,
        lock_delay: float = 0.0,
    ) -> "LockSet":
        """Acquires every one of ``names`` at once, or none (a set)."""
        if isinstance(names, str):
            names = [names]
        body = acquire_body(
            None, list(names), holder=holder, lease=lease, data=data, shared=shared,
            permits=permits, lock_delay=lock_delay, session=None,
        )
        answer, sent = await self._granted(body, lease, wait, renew_every, lapse_margin)
        try:
            raw = answer.get("locks") or [answer["lock"]]
            granted = [Lock.from_json(v) for v in raw]
        except (KeyError, TypeError, CallError):
            raise errors.Server("a set's answer without its locks") from None
        guards: List[LockGuard] = []
        try:
            for view in granted:
                guards.append(
                    LockGuard._start(self._transport, view, sent, lease, renew_every, lapse_margin)
                )
        except errors.LeaseholdError:
            for g in guards:
                _spawn(g.release())
            raise
        return LockSet(guards, self._transport)

    def lock_all(self, names: Sequence[str], **options: Any) -> "_Entered[LockSet]":
        """``async with client.lock_all(names) as locks:`` holds the set for
        the block."""
        return _Entered(lambda: self.acquire_all(names, **options))

    async def with_lock(
        self,
        name: str,
        work: Callable[[asyncio.Event], Awaitable[T]],
        **options: Any,
    ) -> T:
        """Runs ``work(lost)`` while holding ``name``, then releases it.
        ``lost`` is set the moment the lock is lost or its lease is about to
        lapse. Work whose renewal was refused is cancelled at once; after a
        lapse it has until the lease ends. Either way :class:`Lost`."""
        guard = await self.acquire(name, **options)
        return await _run_under(work, guard.lost, guard._lease_ended, lambda: guard.loss, guard.is_lost, guard.release)

    async def with_locks(
        self,
        names: Sequence[str],
        work: Callable[[asyncio.Event], Awaitable[T]],
        **options: Any,
    ) -> T:
        """As :meth:`with_lock`, under a set."""
        held = await self.acquire_all(names, **options)
        return await _run_under(work, held.lost, held._lease_ended, lambda: held.loss, held.is_lost, held.release)

    async def get(self, name: str) -> Optional[Lock]:
        """The lock ``name``, or None when the name is free."""
        check_name(name)
        return await self._get(name, None, REQUEST_TIMEOUT, mono() + self.retry_for)

    async def _get(self, name: str, query: Optional[str], timeout: float, until: float) -> Optional[Lock]:
        path = f"/v1/locks/{segment(name)}" + (f"?{query}" if query else "")

        async def call() -> Optional[Lock]:
            try:
                answer = await self._transport.call("GET", path, None, timeout)
            except ApiCall as e:
                if e.code == "not_held":
                    return None
                raise
            return Lock.from_json(answer["lock"])

        try:
            return await self._retrying(until, call)
        except CallError as e:
            raise refused(e) from None

    async def watch(
        self,
        name: str,
        after_fence: int,
        wait: float,
        after_data: Union[str, None, "_Unset"] = None,
        *,
        data_too: bool = False,
    ) -> Optional[Lock]:
        """The lock ``name`` once its fence differs from ``after_fence`` (0
        for none), or, with ``data_too``, its data from ``after_data``; or
        after ``wait`` (at most 60 s), as it then is."""
        check_name(name)
        wait = min(max(wait, 0.0), MAX_WATCH)
        query = f"wait_ms={ms(wait)}&after_fence={int(after_fence)}"
        if data_too:
            query += f"&after_data={data_tag(after_data if isinstance(after_data, str) else None)}"
        return await self._get(name, query, wait + REQUEST_TIMEOUT, mono() + min(wait + self.retry_for, FOREVER))

    async def list(self, prefix: str = "", limit: int = 1000) -> List[Lock]:
        """The locks whose names start with ``prefix``, at most ``limit``."""
        return (await self.listing(prefix, limit)).locks

    async def listing(self, prefix: str = "", limit: int = 1000) -> Listing:
        """As :meth:`list`, with how many locks are held under ``prefix`` in
        all and the free names under it that requests wait for (a set
        waiting for all its names keeps the free ones for itself)."""
        answer = await self._one_shot("GET", f"/v1/locks?prefix={segment(prefix)}&limit={int(limit)}")
        try:
            return Listing.from_json(answer)
        except CallError as e:
            raise refused(e) from None

    async def cluster(self) -> Dict[str, Any]:
        """The cluster as the node reached sees it (``GET /v1/cluster``)."""
        return await self._one_shot("GET", "/v1/cluster")

    async def release(self, name: str, id: str) -> Lock:
        """Releases a lock by name and id (one held without a guard);
        :class:`~leasehold.errors.NotHeld` if not held under that id."""
        answer = await self._one_shot("POST", "/v1/locks/release", {"name": name, "id": id})
        try:
            return Lock.from_json(answer["lock"])
        except (KeyError, TypeError, CallError):
            raise errors.Server("a release's answer without its lock") from None

    # -- sessions --------------------------------------------------------

    async def open_session(
        self, *, ttl: Optional[float] = None, holder: Optional[str] = None, lock_delay: float = 0.0
    ) -> "Session":
        """Opens a session: a lease that locks taken with
        :meth:`Session.acquire` hang off, renewed in the background once for
        all of them. ``lock_delay`` goes with every lock taken in it unless
        the lock asks its own (protocol 8)."""
        body: Dict[str, Any] = {}
        if holder is not None:
            body["holder"] = holder
        if ttl is not None:
            body["ttl_ms"] = ms(ttl)
        until = mono() + self.retry_for
        sent = mono()

        async def call() -> Dict[str, Any]:
            nonlocal sent
            sent = mono()
            return await self._transport.call("POST", "/v1/sessions/open", body, REQUEST_TIMEOUT)

        try:
            answer = await self._retrying(until, call)
            view = SessionInfo.from_json(answer["session"])
        except CallError as e:
            raise refused(e) from None
        except (KeyError, TypeError):
            raise errors.Server("a session's answer without its session") from None
        ends = sent + (float(answer.get("served_ms") or 0) + view.ttl_ms) / 1000.0
        return Session._start(self, view, ends, lock_delay)

    def session(
        self, *, ttl: Optional[float] = None, holder: Optional[str] = None, lock_delay: float = 0.0
    ) -> "_Entered[Session]":
        """``async with client.session(ttl=10) as s:`` a session for the
        block, closed on exit (every lock of it released)."""
        return _Entered(lambda: self.open_session(ttl=ttl, holder=holder, lock_delay=lock_delay))

    # -- election --------------------------------------------------------

    async def campaign(
        self,
        name: str,
        value: str,
        *,
        lease: Optional[float] = None,
        give_up_after: Optional[float] = None,
    ) -> "Leadership":
        """Waits until this candidate leads election ``name``, announcing
        ``value``; :class:`~leasehold.errors.Held` once ``give_up_after``
        passes without winning."""
        give_up = None if give_up_after is None else mono() + min(give_up_after, FOREVER)
        while True:
            wait = CAMPAIGN_WAIT if give_up is None else min(max(give_up - mono(), 0.0), CAMPAIGN_WAIT)
            try:
                guard = await self.acquire(name, lease=lease, wait=wait, holder=value, data=value)
                return Leadership(guard)
            except (errors.Held, errors.ArrivedLate):
                if give_up is None or mono() < give_up:
                    continue
                raise

    async def leader(self, name: str) -> Optional[Lock]:
        """Who leads election ``name`` now: the leader's lock (its value in
        ``data``), or None."""
        return await self.get(name)

    def observe(self, name: str) -> "Observer":
        """Who leads election ``name``, as it changes: ``async for leader in
        client.observe(name)`` yields the leader now (or None), then each
        change (a new leader, or a leader's new value)."""
        return Observer(self, name)


class _Unset:
    pass


async def _run_under(
    work: Callable[[asyncio.Event], Awaitable[T]],
    lost: asyncio.Event,
    lease_ended: Callable[[], Awaitable[None]],
    loss: Callable[[], Optional[Loss]],
    is_lost: Callable[[], bool],
    release: Callable[[], Awaitable[None]],
) -> T:
    task = asyncio.ensure_future(work(lost))
    lost_wait = asyncio.ensure_future(lost.wait())
    try:
        await asyncio.wait({task, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            # A refused renewal means another may hold it already: stop now.
            # A lapse leaves the work until the lease ends.
            if loss() != Loss.REFUSED:
                ended = asyncio.ensure_future(lease_ended())
                await asyncio.wait({task, ended}, return_when=asyncio.FIRST_COMPLETED)
                ended.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            raise errors.Lost()
    finally:
        lost_wait.cancel()
    failed = task.exception()
    if failed is not None:
        # The work raised: the lock is released all the same.
        try:
            await release()
        except errors.LeaseholdError:
            pass
        raise failed
    out = task.result()
    if is_lost():
        raise errors.Lost()
    try:
        await release()
    except errors.LeaseholdError:
        pass  # the work is done; a failed release leaves the lease to run out
    return out


class _LeaseCount:
    """The lease as this client counts it, and whether (and why) the lock is
    lost: shared by a guard, its renewal task and the sync wrapper."""

    def __init__(self, ends: float, margin: float) -> None:
        self.ends = ends
        self.margin = margin
        self.lost = Signal()
        self.loss: Optional[Loss] = None
        self._mutex = threading.Lock()
        self.on_loss: List[Callable[[Loss], None]] = []

    def lapse(self) -> float:
        return self.ends - self.margin

    def lose(self, loss: Loss) -> None:
        with self._mutex:
            if self.loss is None and not self.lost.is_set():
                self.loss = loss
                callbacks = list(self.on_loss)
            else:
                callbacks = []
        self.lost.set()
        for callback in callbacks:
            callback(loss)

    def is_lost(self) -> bool:
        """Whether the lock is lost, judged now: a lapse is seen the moment
        it is due, whether or not the renewal task has run since."""
        if not self.lost.is_set() and mono() >= self.lapse():
            self.lose(Loss.LAPSED)
        return self.lost.is_set()

    async def lapsed(self) -> None:
        await self._passed(self.lapse)

    async def ended(self) -> None:
        await self._passed(lambda: self.ends)

    async def _passed(self, deadline: Callable[[], float]) -> None:
        while True:
            at, now = deadline(), mono()
            if now >= at:
                return
            await asyncio.sleep(min(at - now, look_every(self.margin)))


async def _release_one(
    transport: Transport, name: str, id: str, ends: Callable[[], float], unknown: bool
) -> None:
    """Releases a lock, trying node after node until its lease is over;
    Lost when it was not held (unless an earlier attempt may have released
    it unseen)."""
    body = {"name": name, "id": id}
    while True:
        now = mono()
        end = ends()
        if now >= end:
            return  # the lease is over anyway
        timeout = attempt_timeout(end - now, len(transport))
        try:
            await transport.call("POST", "/v1/locks/release", body, timeout)
            return
        except ApiCall as e:
            if e.code == "not_held":
                if unknown:
                    return
                raise errors.Lost() from None
            if not retryable(e):
                raise refused(e) from None
        except NoAnswerCall:
            unknown = True
        except CallError:
            pass
        await asyncio.sleep(0.05)


class LockGuard:
    """A lock this client holds, renewed in the background until it is
    released (:meth:`release`, or the end of an ``async with`` block)."""

    def __init__(
        self,
        transport: Transport,
        view: Lock,
        sent: float,
        lease: float,
        schedule: Schedule,
    ) -> None:
        self._transport = transport
        self._view = view
        self._view_sent = sent
        self._lease = lease
        self._every = schedule.every
        self._count = _LeaseCount(sent + min(view.ttl_ms / 1000.0, lease), schedule.margin)
        self._stop = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None
        self._release_task: Optional["asyncio.Task[None]"] = None
        self._handed = False

    @classmethod
    def _start(
        cls,
        transport: Transport,
        granted: Lock,
        sent: float,
        asked: Optional[float],
        renew_every: Optional[float],
        lapse_margin: Optional[float],
    ) -> "LockGuard":
        # Never counted past the lease asked for, whatever an answer says.
        granted_lease = max(granted.lease_ms, 1) / 1000.0
        lease = granted_lease if asked is None else min(asked, granted_lease)
        lease = max(lease, 0.001)
        schedule = Schedule.fitted(lease, renew_every, lapse_margin)
        guard = cls(transport, granted, sent, lease, schedule)
        if mono() >= guard._count.lapse():
            # The grant came too late to be used: give it back.
            body = {"name": granted.name, "id": granted.id}
            _spawn(_quietly(transport.call("POST", "/v1/locks/release", body, 2.0)))
            raise errors.ArrivedLate()
        guard._task = _spawn(guard._run())
        return guard

    # -- what the holder reads ---------------------------------------------

    @property
    def view(self) -> Lock:
        """The lock as last granted or renewed."""
        return self._view

    @property
    def name(self) -> str:
        return self._view.name

    @property
    def id(self) -> str:
        return self._view.id

    @property
    def fence(self) -> int:
        """The grant's fencing token: pass it to the resource the lock guards."""
        return self._view.fence

    @property
    def node(self) -> int:
        """The node the lock is recorded at (as last granted or renewed)."""
        return self._view.node

    @property
    def lease_ends(self) -> float:
        """When the lease ends on this client's clock (``time.monotonic()``)."""
        return self._count.ends

    @property
    def lapse_margin(self) -> float:
        return self._count.margin

    @property
    def lost(self) -> asyncio.Event:
        """Set the moment the lock is lost or about to lapse (also after a
        release: the guard holds nothing then)."""
        self._count.is_lost()
        return self._count.lost.event

    @property
    def loss(self) -> Optional[Loss]:
        """Why the lock was lost (:class:`Loss`), or None while held and
        after a release."""
        self._count.is_lost()
        return self._count.loss

    def is_lost(self) -> bool:
        """Whether the lock is lost, or about to lapse, judged now."""
        return self._count.is_lost()

    def check(self) -> None:
        """:class:`~leasehold.errors.Lost` once the lock may be lost, judged
        now: call it before every unit of work that acts as the holder."""
        if self._count.is_lost():
            raise errors.Lost()

    async def wait_lost(self) -> None:
        await self._count.lost.event.wait()

    async def _lease_ended(self) -> None:
        await self._count.ended()

    async def set_data(self, data: str) -> Lock:
        """Keeps ``data`` with the lock in place of its data (a leader
        proclaiming a new value), by a renewal."""
        if self._count.is_lost():
            raise errors.Lost()
        if len(data.encode("utf-8")) > 4096:
            raise errors.BadRequest("data: longer than 4096 bytes")
        try:
            renewed = await self._renew(data)
        except _NotChanged as e:
            raise e.error from None
        except _LostRenewal as e:
            self._count.lose(e.loss)
            raise errors.Lost() from None
        if renewed.data != data:
            raise errors.BadRequest(
                "the speaker renewed the lock but kept its data: it runs an earlier build; "
                "upgrade every member to change a held lock's data"
            )
        return renewed

    # -- release -----------------------------------------------------------

    async def release(self) -> None:
        """Stops renewing and releases the lock, retried node after node
        until the lease would have ended. :class:`~leasehold.errors.Lost`
        if it had been lost."""
        if self._release_task is None:
            self._release_task = _spawn(self._released())
        # The release goes on once asked, even if the caller stops waiting.
        await asyncio.shield(self._release_task)

    async def _stop_renewing(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _released(self) -> None:
        await self._stop_renewing()
        if self._count.loss is not None or self._handed:
            raise errors.Lost()
        try:
            await _release_one(self._transport, self.name, self.id, lambda: self._count.ends, False)
        finally:
            self._count.lost.set()

    async def _hand_over(self) -> Optional[Tuple[str, str, Callable[[], float]]]:
        """Stops renewing and hands the lock over to be released with others
        in one call; None if it was lost already."""
        await self._stop_renewing()
        if self._count.loss is not None or self._handed or self._release_task is not None:
            return None
        self._handed = True
        self._count.lost.set()
        return (self.name, self.id, lambda: self._count.ends)

    async def __aenter__(self) -> "LockGuard":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except errors.Lost:
            if exc_type is None:
                raise
        except errors.LeaseholdError:
            if exc_type is None:
                raise

    # -- renewal -----------------------------------------------------------

    def _next_renewal(self) -> float:
        """A period from now, but early enough that a whole period is left
        before the lapse (at once, for a grant that came with little left)."""
        now = mono()
        early = max(self._count.lapse() - self._every, now)
        return min(now + self._every, early)

    async def _run(self) -> None:
        count = self._count
        next_at = self._next_renewal()
        while True:
            lapse = count.lapse()
            look = mono() + look_every(count.margin)
            wake = min(next_at, lapse, look)
            if not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._stop.wait(), max(wake - mono(), 0.0))
                except asyncio.TimeoutError:
                    pass
            if self._stop.is_set():
                return
            if mono() >= count.lapse() or count.lost.is_set():
                count.lose(Loss.LAPSED)
                return
            next_at = min(next_at, self._next_renewal())
            if mono() < next_at:
                continue
            try:
                await self._renew(None)
            except _NotChanged:
                pass
            except _LostRenewal as e:
                count.lose(e.loss)
                return
            next_at = self._next_renewal()

    async def _renew(self, data: Optional[str]) -> Lock:
        """Renews, trying node after node, until it gets through or the
        lapse: the lock as renewed."""
        count = self._count
        attempt = 0
        started = mono()
        while True:
            lapse = count.lapse()
            sent = mono()
            if sent >= lapse or count.lost.is_set():
                raise _LostRenewal(Loss.LAPSED)
            body: Dict[str, Any] = {"name": self.name, "id": self.id, "lease_ms": ms(self._lease)}
            if data is not None:
                body["data"] = data
            endpoints = max(len(self._transport), 1)
            tries_left = endpoints - attempt % endpoints
            timeout = attempt_timeout(lapse - sent, tries_left)
            try:
                answer = await self._transport.call("POST", "/v1/locks/renew", body, timeout)
                view = Lock.from_json(answer["lock"])
            except ApiCall as e:
                if e.code in ("not_held", "held"):
                    raise _LostRenewal(Loss.REFUSED) from None
                if data is not None and e.code in ("bad_request", "too_large", "forbidden", "unauthorized"):
                    raise _NotChanged(refused(e)) from None
                if data is not None and e.code == "upgrading" and mono() - started >= DATA_PATIENCE:
                    raise _NotChanged(refused(e)) from None
            except (CallError, KeyError, TypeError):
                pass
            else:
                if count.lost.is_set():
                    raise _LostRenewal(Loss.LAPSED)
                left = min(view.ttl_ms / 1000.0, self._lease)
                count.ends = sent + left
                if sent >= self._view_sent:
                    self._view_sent = sent
                    self._view = view
                return view
            # Unknown outcome, no speaker, or a node that failed: not lost
            # until the lease really runs out; try another node.
            pause_until = mono() + renew_pause(attempt)
            if pause_until >= count.lapse():
                await _sleep_until(count.lapse())
                raise _LostRenewal(Loss.LAPSED)
            await _sleep_until(pause_until)
            attempt += 1


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except Exception:  # noqa: BLE001 - a background release's failure only leaves the lease to run out
        pass


async def _release_together(
    transport: Transport, held: List[Tuple[str, str, Callable[[], float]]]
) -> None:
    """Releases every one of ``held`` in one call, node after node while any
    of their leases runs; Lost when any was not held. A node that does not
    read a set's release (``400``) gets one release per lock, at once."""
    unknown = False
    while True:
        now = mono()
        live = [h for h in held if h[2]() > now]
        if not live:
            return
        end = max(h[2]() for h in live)
        timeout = attempt_timeout(end - now, len(transport))
        body = {"locks": [{"name": n, "id": i} for n, i, _ in live]}
        try:
            answer = await transport.call("POST", "/v1/locks/release", body, timeout)
        except ApiCall as e:
            if e.code == "bad_request":
                results = await asyncio.gather(
                    *(_release_one(transport, n, i, ends, unknown) for n, i, ends in live),
                    return_exceptions=True,
                )
                for r in results:
                    if isinstance(r, BaseException):
                        raise r
                return
            if e.code == "not_held":
                if unknown:
                    return
                raise errors.Lost() from None
            if not retryable(e):
                raise refused(e) from None
        except NoAnswerCall:
            unknown = True
        except CallError:
            pass
        else:
            if answer.get("not_held") and not unknown:
                raise errors.Lost()
            return
        await asyncio.sleep(0.05)


class LockSet:
    """Locks granted together, one guard each, renewed side by side; lost
    as one the moment any of them is."""

    def __init__(self, guards: List[LockGuard], transport: Transport) -> None:
        self.guards = guards
        self._transport = transport
        self._lost = Signal()
        self._loss: Optional[Loss] = None
        self._release_task: Optional["asyncio.Task[None]"] = None
        for g in guards:
            g._count.on_loss.append(self._on_loss)
            if g._count.loss is not None:
                self._on_loss(g._count.loss)

    def _on_loss(self, loss: Loss) -> None:
        if self._loss is None:
            self._loss = loss
        self._lost.set()

    @property
    def locks(self) -> List[Lock]:
        return [g.view for g in self.guards]

    @property
    def fences(self) -> List[int]:
        return [g.fence for g in self.guards]

    @property
    def fence(self) -> int:
        """The first lock's fence."""
        return self.guards[0].fence

    @property
    def lost(self) -> asyncio.Event:
        self.is_lost()
        return self._lost.event

    @property
    def loss(self) -> Optional[Loss]:
        self.is_lost()
        return self._loss

    def is_lost(self) -> bool:
        for g in self.guards:
            g.is_lost()
        return self._lost.is_set()

    def check(self) -> None:
        if self.is_lost():
            raise errors.Lost()

    async def _lease_ended(self) -> None:
        await asyncio.gather(*(g._lease_ended() for g in self.guards))

    async def release(self) -> None:
        """Stops every renewal and releases the whole set in one call,
        retried node after node while a lease runs; Lost if any lock of the
        set was lost (the others are released all the same)."""
        if self._release_task is None:
            self._release_task = _spawn(self._released())
        await asyncio.shield(self._release_task)

    async def _released(self) -> None:
        handed = await asyncio.gather(*(g._hand_over() for g in self.guards))
        held = [h for h in handed if h is not None]
        lost = len(held) < len(handed)
        if held:
            await _release_together(self._transport, held)
        if lost:
            raise errors.Lost()

    async def __aenter__(self) -> "LockSet":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except errors.LeaseholdError:
            if exc_type is None:
                raise


class SessionLock:
    """A lock of a session: no renewal of its own; lost when its session
    is, or when a renewal of the session finds it gone."""

    def __init__(self, view: Lock, lost: Signal) -> None:
        self.view = view
        self._lost = lost

    @property
    def name(self) -> str:
        return self.view.name

    @property
    def id(self) -> str:
        return self.view.id

    @property
    def fence(self) -> int:
        return self.view.fence

    @property
    def node(self) -> int:
        return self.view.node

    @property
    def lost(self) -> asyncio.Event:
        return self._lost.event

    def is_lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        if self.is_lost():
            raise errors.Lost()


class Session:
    """A session this client holds: renewed in the background, once for
    all its locks, until it is closed."""

    def __init__(self, client: Client, view: SessionInfo, ends: float) -> None:
        self._client = client
        self._transport = client._transport
        self.id = view.id
        self.view = view
        self.ends = ends
        self.lock_delay = 0.0
        lease = view.lease_ms / 1000.0
        self.margin = min(lease / 10.0, 2.0)
        self._every = max(lease / 3.0, 0.010)
        self._lost = Signal()
        self._locks: List[Tuple[str, Signal, float]] = []
        self._task: Optional["asyncio.Task[None]"] = None
        self._closed = False

    @classmethod
    def _start(cls, client: Client, view: SessionInfo, ends: float, lock_delay: float = 0.0) -> "Session":
        s = cls(client, view, ends)
        s.lock_delay = lock_delay
        s._task = _spawn(s._renew())
        return s

    @property
    def lost(self) -> asyncio.Event:
        self.is_lost()
        return self._lost.event

    def _lapse(self) -> float:
        return self.ends - self.margin

    def is_lost(self) -> bool:
        if not self._lost.is_set() and mono() + self.margin >= self.ends:
            self._set_lost()
        return self._lost.is_set()

    def _set_lost(self) -> None:
        self._lost.set()
        for _, lost, _ in self._locks:
            lost.set()

    def check(self) -> None:
        if self.is_lost():
            raise errors.Lost()

    async def acquire(
        self,
        name: str,
        *,
        wait: float = 0.0,
        holder: Optional[str] = None,
        data: Optional[str] = None,
        shared: bool = False,
        permits: Optional[int] = None,
        lock_delay: Optional[float] = None,
    ) -> SessionLock:
        """Takes ``name`` in this session (the session's lease, no renewal
        of its own; its own ``lock_delay``, or the session's)."""
        if self.is_lost():
            raise errors.Lost()
        body = acquire_body(
            name, None, holder=holder, lease=None, data=data, shared=shared,
            permits=permits, lock_delay=self.lock_delay if lock_delay is None else lock_delay,
            session=self.id,
        )
        answer, _ = await self._client._granted(body, None, wait, None, None)
        try:
            view = Lock.from_json(answer["lock"])
        except (KeyError, TypeError, CallError):
            raise errors.Server("an acquire's answer without its lock") from None
        lost = Signal()
        if self._lost.is_set():
            lost.set()
        self._locks.append((view.id, lost, mono()))
        return SessionLock(view, lost)

    async def release(self, held: SessionLock) -> None:
        """Releases one lock of the session before the session ends."""
        self._locks = [entry for entry in self._locks if entry[0] != held.id]
        try:
            await self._transport.call(
                "POST", "/v1/locks/release", {"name": held.name, "id": held.id}, REQUEST_TIMEOUT
            )
        except CallError as e:
            raise refused(e) from None

    async def close(self) -> int:
        """Closes the session: it and every lock of it are released. Answers
        how many locks went with it."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._set_lost()
        try:
            answer = await self._transport.call(
                "POST", "/v1/sessions/close", {"id": self.id}, REQUEST_TIMEOUT
            )
        except CallError as e:
            raise refused(e) from None
        released = answer.get("released")
        if released is None:
            released = (answer.get("session") or {}).get("locks") or 0
        return int(released)

    def _digest(self) -> str:
        d = 0
        for id, _, _ in self._locks:
            bits = lock_id_bits(id)
            if bits is not None:
                d ^= bits
        return format_digest(d)

    def _keep_only(self, held: List[str], sent: float) -> None:
        keep = set(held)
        kept = []
        for entry in self._locks:
            if entry[0] in keep or entry[2] >= sent:
                kept.append(entry)
            else:
                entry[1].set()
        self._locks = kept

    async def _renew(self) -> None:
        while True:
            wake = min(mono() + self._every, self._lapse())
            lost_wait = asyncio.ensure_future(self._lost.event.wait())
            try:
                await asyncio.wait({lost_wait}, timeout=max(wake - mono(), 0.0))
            finally:
                lost_wait.cancel()
            if self._lost.is_set():
                return
            attempt = 0
            while True:
                if self.is_lost():
                    return
                body = {"id": self.id, "digest": self._digest()}
                sent = mono()
                # A share of the time left for every endpoint not tried yet in
                # the round: a node that hangs leaves time for the others.
                endpoints = max(len(self._transport), 1)
                timeout = attempt_timeout(self._lapse() - sent, endpoints - attempt % endpoints)
                attempt += 1
                try:
                    answer = await asyncio.wait_for(
                        self._transport.call("POST", "/v1/sessions/renew", body, timeout),
                        max(self._lapse() - sent, 0.001),
                    )
                    view = SessionInfo.from_json(answer["session"])
                except asyncio.TimeoutError:
                    self._set_lost()
                    return
                except ApiCall as e:
                    if not retryable(e):
                        self._set_lost()
                        return
                except (CallError, KeyError, TypeError):
                    pass
                else:
                    self.ends = sent + view.ttl_ms / 1000.0
                    held = answer.get("held")
                    if isinstance(held, list):
                        self._keep_only([str(h) for h in held], sent)
                    self.view = view
                    break
                await asyncio.sleep(0.1)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self._closed:
            try:
                await self.close()
            except errors.LeaseholdError:
                if exc_type is None:
                    raise


class Leadership:
    """This candidate leads while this is held and not lost."""

    def __init__(self, guard: LockGuard) -> None:
        self.guard = guard

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
    def lost(self) -> asyncio.Event:
        return self.guard.lost

    @property
    def loss(self) -> Optional[Loss]:
        return self.guard.loss

    def is_lost(self) -> bool:
        return self.guard.is_lost()

    def check(self) -> None:
        self.guard.check()

    async def proclaim(self, value: str) -> Lock:
        """Announces ``value`` as this leader's without giving leadership up."""
        return await self.guard.set_data(value)

    async def resign(self) -> None:
        """Gives leadership up at once, so another candidate can take over."""
        await self.guard.release()

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.guard.__aexit__(exc_type, exc, tb)


class Observer:
    """An async iterator of who leads an election: the leader now (or None),
    then each change. It never ends on its own; a failed call is retried
    after 50 ms doubling to 2 s (``last_error`` holds the latest)."""

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self._name = name
        self._seen: Union[_Unset, None, Tuple[int, Optional[str]]] = _Unset()
        self._failures = 0
        self.last_error: Optional[errors.LeaseholdError] = None

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Optional[Lock]:
        while True:
            if self._failures:
                await asyncio.sleep(observe_backoff(self._failures))
            seen = self._seen
            try:
                if isinstance(seen, _Unset):
                    current = await self._client.get(self._name)
                elif seen is None:
                    current = await self._client.watch(self._name, 0, OBSERVE_WAIT, None, data_too=True)
                else:
                    current = await self._client.watch(self._name, seen[0], OBSERVE_WAIT, seen[1], data_too=True)
            except errors.LeaseholdError as e:
                self.last_error = e
                self._failures += 1
                continue
            self._failures = 0
            now = None if current is None else (current.fence, current.data)
            if isinstance(seen, _Unset) or now != seen:
                self._seen = now
                return current


class _Held(Protocol):
    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...


H = TypeVar("H", bound=_Held)


class _Entered(Generic[H]):
    """`async with` over what `get` gives (a guard, a set, a session): it
    is got on entry and ended as it ends itself on exit."""

    def __init__(self, get: Callable[[], Awaitable[H]]) -> None:
        self._get = get
        self._held: Optional[H] = None

    async def __aenter__(self) -> H:
        self._held = await self._get()
        return self._held

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._held is not None:
            await self._held.__aexit__(exc_type, exc, tb)


__all__ = [
    "Client",
    "LockGuard",
    "LockSet",
    "Session",
    "SessionLock",
    "Leadership",
    "Observer",
    "Lock",
    "Loss",
]
