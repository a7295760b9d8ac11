"""The Rust client's rules, checked against fake nodes: moves, retries, the
renewal schedule's check, the lease counted from the send, the lapse, the
loss, release retries, the error kinds.

The tests run beside heavy work (CI runs them on two cores beside the Rust
suite): a count of background events is waited for, not expected after a
fixed sleep; a lock that must outlive a wait (or a slow acquire) has a lease
of seconds; a bound that says "no later than" has seconds of slack. What
tells a lease counted wrong from one counted right is checked against when
the fake got the call (no earlier than its send), or rests on an answer's
delay longer than that slack."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import leasehold
import leasehold.aio
from leasehold._model import Schedule, attempt_timeout, data_tag, lock_id_bits
from fake import Answer, FakeNode, error, lock


@pytest.fixture
def nodes() -> Iterator[List[FakeNode]]:
    made: List[FakeNode] = []
    yield made
    for n in made:
        n.stop()


def node(nodes: List[FakeNode], script: Any) -> FakeNode:
    n = FakeNode(script)
    nodes.append(n)
    return n


def granting(lease_ms: int = 1000, served_ms: int = 0, ttl_ms: Optional[int] = None) -> Any:
    """A node that grants, renews and releases everything."""

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/acquire":
            asked = body.get("lease_ms", lease_ms)
            return 200, {"lock": lock(body.get("name", "jobs/1"), lease_ms=asked, ttl_ms=ttl_ms), "served_ms": served_ms}
        if path == "/v1/locks/renew":
            return 200, {"lock": lock(body["name"], lease_ms=body.get("lease_ms", lease_ms), ttl_ms=ttl_ms), "served_ms": 0}
        if path == "/v1/locks/release":
            return 200, {"lock": lock(body.get("name", "jobs/1")), "served_ms": 0}
        if path.startswith("/v1/locks/"):
            return error("not_held", 404)  # a get: the name is free
        return error("unknown_route", 404)

    return script


def client_at(endpoints: List[str], start: int = 0, **options: Any) -> leasehold.Client:
    options.setdefault("token_env", None)
    c = leasehold.Client(endpoints, **options)
    c._aio._transport.current = start
    return c


def wait_for(done: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Waits until ``done()`` holds, looking every 20 ms; fails the test
    after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.02)


# -- the schedule --------------------------------------------------------


@pytest.mark.parametrize(
    "every,margin",
    [(0.6, None), (0.005, None), (None, 0.5), (0.4, 0.45)],
)
def test_a_schedule_that_cannot_keep_the_lock_is_refused_before_sending(
    nodes: List[FakeNode], every: Optional[float], margin: Optional[float]
) -> None:
    n = node(nodes, granting())
    c = client_at([n.addr])
    with pytest.raises(leasehold.BadRequest):
        c.acquire("jobs/1", lease=1.0, renew_every=every, lapse_margin=margin)
    assert n.requests == []
    c.close()


def test_schedule_rules_match_the_rust_clients() -> None:
    assert Schedule.checked(1.0, 0.4, 0.35) == Schedule(0.4, 0.35)
    assert Schedule.checked(30.0, None, None) == Schedule(10.0, 2.0)
    assert Schedule.checked(6.0, None, None) == Schedule(2.0, 0.6)
    # A granted lease shorter than assumed keeps the margin if under half,
    # and the period shrinks around it.
    fitted = Schedule.fitted(1.0, 5.0, 0.3)
    assert fitted.margin == 0.3 and fitted.every <= 0.5
    assert Schedule.fitted(1.0, None, 0.8).margin == 0.25
    # No lease asked: the check assumes 30 s.
    with pytest.raises(leasehold.BadRequest):
        Schedule.checked(30.0, 16.0, None)


def test_attempt_timeouts_share_the_time_left() -> None:
    assert attempt_timeout(3.0, 3) == pytest.approx(1.0)
    assert attempt_timeout(10.0, 3) == 2.0
    assert attempt_timeout(0.15, 3) == pytest.approx(0.1)
    assert attempt_timeout(0.05, 3) == pytest.approx(0.05)


def test_helpers() -> None:
    assert data_tag(None) == 0
    assert data_tag("") == 14695981039346656037
    assert data_tag("a") == 0xAF63DC4C8601EC8C
    assert lock_id_bits("00000000000000000000000001") == 1
    assert lock_id_bits("7ZZZZZZZZZZZZZZZZZZZZZZZZZ") == (1 << 128) - 1
    assert lock_id_bits("8ZZZZZZZZZZZZZZZZZZZZZZZZZ") is None


# -- moves and retries ----------------------------------------------------


def test_moves_on_503_and_stays(nodes: List[FakeNode]) -> None:
    refusing = node(nodes, lambda p, b: error("no_leader", 503))
    serving = node(nodes, granting())
    c = client_at([refusing.addr, serving.addr], start=0)
    g = c.acquire("jobs/1", lease=5)
    assert len(refusing.requests) == 1
    assert c._aio._transport.current % 2 == 1
    # The request_id is the same on the retry, within one call.
    ids = [r.body["request_id"] for r in refusing.requests + serving.of("/v1/locks/acquire")]
    assert len(set(ids)) == 1 and len(ids[0]) == 32
    g.release()
    g2 = c.acquire("jobs/2", lease=5)
    assert serving.of("/v1/locks/acquire")[-1].body["request_id"] != ids[0]
    g2.release()
    assert len(refusing.requests) == 1  # it stayed on the serving node
    c.close()


def test_moves_on_no_answer(nodes: List[FakeNode]) -> None:
    hanging = node(nodes, lambda p, b: None)
    serving = node(nodes, granting())
    c = client_at([hanging.addr, serving.addr], start=0)
    # A get waits 5 s for an answer, then moves on.
    t = time.monotonic()
    assert c.get("jobs/1") is None
    assert time.monotonic() - t >= 4.5
    assert len(hanging.requests) == 1
    c.close()


def test_a_refusal_is_an_answer_not_a_move(nodes: List[FakeNode]) -> None:
    n1 = node(nodes, lambda p, b: error("held", 409, lock=lock()))
    n2 = node(nodes, granting())
    c = client_at([n1.addr, n2.addr], start=0)
    with pytest.raises(leasehold.Held) as e:
        c.try_acquire("jobs/1")
    assert e.value.lock.fence == 7
    assert c._aio._transport.current == 0
    assert n2.requests == []
    c.close()


def test_concurrent_failures_move_once() -> None:
    t = leasehold.aio.Transport(["a:1", "b:1"], None, None)
    t.current = 4
    t.move_on_from(4)
    t.move_on_from(4)
    assert t.current == 5


def test_clients_start_at_random_endpoints() -> None:
    seen = set()
    for _ in range(200):
        seen.add(leasehold.aio.Transport(["a:1", "b:1", "c:1"], None, None).current)
    assert seen == {0, 1, 2}


def test_the_retry_window_ends_unavailable(nodes: List[FakeNode]) -> None:
    refusing = node(nodes, lambda p, b: error("not_rebuilt", 503))
    # A window of seconds: tried again and again within it, however slow the machine.
    c = client_at([refusing.addr], retry_for=4.0)
    t = time.monotonic()
    with pytest.raises(leasehold.Unavailable):
        c.get("jobs/1")
    took = time.monotonic() - t
    # Not before the window ends; the bound above only catches a call that
    # goes on retrying.
    assert 3.99 <= took < 14.0
    assert len(refusing.requests) >= 3
    c.close()


def test_no_endpoint_reachable_is_unavailable() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    c = client_at([dead], retry_for=0.3)
    with pytest.raises(leasehold.Unavailable):
        c.acquire("jobs/1")
    c.close()


def test_an_unanswered_attempt_makes_the_outcome_unknown(nodes: List[FakeNode]) -> None:
    calls = {"n": 0}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        calls["n"] += 1
        if calls["n"] == 1:
            return None  # no answer
        return error("not_rebuilt", 503)

    n = node(nodes, script)
    c = client_at([n.addr], retry_for=5.5)
    with pytest.raises(leasehold.NoAnswer):
        c.release("jobs/1", "01J00000000000000000000000")
    c.close()


@pytest.mark.parametrize(
    "answer,kind",
    [
        (error("unauthorized", 401), leasehold.Unauthorized),
        (error("forbidden", 403), leasehold.Forbidden),
        (error("kind_mismatch", 409), leasehold.KindMismatch),
        (error("internal", 500), leasehold.Server),
        (error("wrong_member", 409), leasehold.Server),
        (error("unknown_route", 404), leasehold.UnknownRoute),
        (error("method_not_allowed", 405), leasehold.UnknownRoute),
        (error("bad_request", 400), leasehold.BadRequest),
        (error("too_large", 413), leasehold.BadRequest),
        (error("held", 409), leasehold.Reserved),  # a held answer without its lock
    ],
)
def test_each_failure_has_its_kind(nodes: List[FakeNode], answer: Answer, kind: type) -> None:
    n = node(nodes, lambda p, b: answer)
    c = client_at([n.addr])
    with pytest.raises(kind):
        c.acquire("jobs/1")
    assert issubclass(kind, leasehold.LeaseholdError)
    c.close()


def test_release_by_id_not_held(nodes: List[FakeNode]) -> None:
    n = node(nodes, lambda p, b: error("not_held", 404))
    c = client_at([n.addr])
    with pytest.raises(leasehold.NotHeld):
        c.release("jobs/1", "01J00000000000000000000000")
    assert c.get("jobs/1") is None  # a get's not_held is a free name
    c.close()


def test_token_from_the_environment(nodes: List[FakeNode], monkeypatch: pytest.MonkeyPatch) -> None:
    n = node(nodes, lambda p, b: error("not_held", 404))
    monkeypatch.setenv("LEASEHOLD_TOKEN", "s3cret")
    c = leasehold.Client([n.addr])
    c.get("jobs/1")
    assert n.requests[-1].headers.get("Authorization") == "Bearer s3cret"
    c.close()
    c = leasehold.Client([n.addr], token="")
    c.get("jobs/1")
    assert "Authorization" not in n.requests[-1].headers
    c.close()


def test_no_endpoints_is_bad_request() -> None:
    with pytest.raises(leasehold.BadRequest):
        leasehold.Client([], token_env=None)


# -- the lease count ------------------------------------------------------


def test_the_lease_is_counted_from_the_send_plus_served(nodes: List[FakeNode]) -> None:
    n = node(nodes, granting(served_ms=200))
    n.delay = 0.5  # the answer takes 0.5 s more
    c = client_at([n.addr])
    before = time.monotonic()
    # A lease of seconds: held (renewed) until the release, however slow the machine.
    g = c.acquire("jobs/1", lease=10.0)
    after = time.monotonic()
    assert after - before >= 0.5
    sent = n.requests[0].at  # no earlier than the client's send
    assert before + 0.2 + 10.0 <= g.lease_ends() <= sent + 0.2 + 10.0 + 0.01
    n.delay = 0
    g.release()
    c.close()


def test_never_counted_past_the_lease_asked(nodes: List[FakeNode]) -> None:
    n = node(nodes, granting(ttl_ms=60000))
    c = client_at([n.addr])
    g = c.acquire("jobs/1", lease=10.0)
    # The fake got the acquire no earlier than its send: the lease asked
    # from there, not the 60 s the answer says.
    assert g.lease_ends() <= n.requests[0].at + 10.0
    g.release()
    c.close()


def test_a_grant_that_arrives_after_its_lease_is_released(nodes: List[FakeNode]) -> None:
    n = node(nodes, granting(ttl_ms=100))
    n.delay = 0.3
    c = client_at([n.addr])
    with pytest.raises(leasehold.ArrivedLate):
        c.acquire("jobs/1", lease=1.0)
    wait_for(lambda: bool(n.of("/v1/locks/release")), "released")
    c.close()


def test_renewals_keep_the_lock_and_count_from_their_send(nodes: List[FakeNode]) -> None:
    # Each renewal is answered 0.1 s after the fake got it, through node
    # 100 + its number: the lease the client counts can be matched to the
    # renewal it came from.
    answered = {"n": 0}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/renew":
            answered["n"] += 1
            time.sleep(0.1)
            return 200, {"lock": lock(body["name"], lease_ms=body["lease_ms"], node=100 + answered["n"]), "served_ms": 0}
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    # Renewed every 0.2 s, with a lease of seconds that no stall under load lapses.
    g = c.acquire("jobs/1", lease=6.0, renew_every=0.2)
    wait_for(lambda: len(n.of("/v1/locks/renew")) >= 5 or g.is_lost(), "renewed 5 times")
    assert not g.is_lost()

    # The lease as counted now and the renewal it came from, read on the
    # client's loop: as the one renewal set them.
    async def counted() -> Tuple[leasehold.Lock, float]:
        return g._guard.view, g._guard.lease_ends

    view, ends = c._run(counted())
    renewals = n.of("/v1/locks/renew")
    assert len(renewals) >= 5
    assert all(r.body["lease_ms"] == 6000 and r.body["id"] == g.id for r in renewals)
    k = view.node - 100
    assert 2 <= k <= len(renewals)
    # From the renewal's send (no later than the fake got it), not from its
    # answer 0.1 s later; and later than the renewal before it.
    assert ends <= renewals[k - 1].at + 6.0, f"counted {ends - renewals[k - 1].at:.3f} s from the renewal"
    assert ends > renewals[k - 2].at + 6.0
    g.release()
    assert g.loss is None
    c.close()


# -- loss -----------------------------------------------------------------


def test_a_refused_renewal_is_a_loss(nodes: List[FakeNode]) -> None:
    state = {"held": True}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/renew" and not state["held"]:
            return error("not_held", 404)
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    # Renewed every 0.2 s; a lease of seconds, so that only the refusal loses it
    # (a client that kept trying would lapse it 9 s after the send).
    g = c.acquire("jobs/1", lease=10.0, renew_every=0.2)
    state["held"] = False
    assert g.lost.wait(8)
    assert g.loss == leasehold.Loss.REFUSED
    with pytest.raises(leasehold.Lost):
        g.release()
    with pytest.raises(leasehold.Lost):
        g.check()
    c.close()


def test_a_lapse_is_a_loss_counted_from_the_send(nodes: List[FakeNode]) -> None:
    state = {"answer": True}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/renew" and not state["answer"]:
            return None
        if path == "/v1/locks/renew":
            return error("not_rebuilt", 503)  # never lost on a 503
        if path == "/v1/locks/acquire":
            time.sleep(0.5)  # the grant is answered 0.5 s after the fake got it
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    before = time.monotonic()
    # The lapse: 8 s - 3 s = 5 s after the send.
    g = c.acquire("jobs/1", lease=8.0, renew_every=1.0, lapse_margin=3.0)
    state["answer"] = False
    sent_by = n.of("/v1/locks/acquire")[0].at  # no earlier than the send
    # Counted from the send, not from the answer 0.5 s later.
    assert before + 8.0 <= g.lease_ends() <= sent_by + 8.0
    assert g.lost.wait(sent_by + 20.0 - time.monotonic())
    at = time.monotonic()
    assert g.loss == leasehold.Loss.LAPSED
    # Lost a margin before the lease ends, counted from the acquire's send:
    # never before; on time, with 2 s of slack for a slow machine (without
    # the margin it would lapse 3 s later).
    assert before + 5.0 - 0.05 <= at <= sent_by + 5.0 + 2.0
    with pytest.raises(leasehold.Lost):
        g.release()
    c.close()


def test_503_and_errors_never_lose_the_lock_before_the_lapse(nodes: List[FakeNode]) -> None:
    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/renew":
            return error("internal", 500)
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    before = time.monotonic()
    # The lapse: 6 s - 0.5 s = 5.5 s after the send; renewed every 0.3 s,
    # each renewal failing and tried again (a window of seconds for the
    # tries, however slow the machine).
    g = c.acquire("jobs/1", lease=6.0, renew_every=0.3, lapse_margin=0.5)
    sent_by = n.of("/v1/locks/acquire")[0].at  # no earlier than the send
    assert g.lost.wait(sent_by + 20.0 - time.monotonic())
    at = time.monotonic()
    assert g.loss == leasehold.Loss.LAPSED
    # Held until the lapse, however the renewals were answered; lost then
    # (with 2 s of slack for a slow machine).
    assert before + 5.5 - 0.05 <= at <= sent_by + 5.5 + 2.0
    assert len(n.of("/v1/locks/renew")) >= 3
    c.close()


def test_the_lapse_is_judged_on_the_clock_when_asked(nodes: List[FakeNode]) -> None:
    n = node(nodes, granting())
    c = client_at([n.addr])
    g = c.acquire("jobs/1", lease=10.0)
    g._guard._count.ends = time.monotonic() + 0.1  # as after a stall (the margin is 1 s)
    assert g.is_lost() and g.loss == leasehold.Loss.LAPSED
    c.close()


# -- release retries -----------------------------------------------------


def test_a_release_is_retried_until_the_lease_would_have_ended(nodes: List[FakeNode]) -> None:
    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/release":
            return error("no_leader", 503)
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    # A lease of seconds: tried again and again within it, however slow the machine.
    g = c.acquire("jobs/1", lease=5.0)
    g.release()  # the lease is over anyway: no error
    done = time.monotonic()
    # Retried until the lease ends, not on through the retry window (10 s):
    # seconds of slack for a slow machine.
    assert g.lease_ends() - 0.01 <= done < g.lease_ends() + 3.0
    assert len(n.of("/v1/locks/release")) >= 3
    c.close()


def test_a_release_gone_after_an_unanswered_attempt_counts_as_released(nodes: List[FakeNode]) -> None:
    calls = {"n": 0}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/release":
            calls["n"] += 1
            return None if calls["n"] == 1 else error("not_held", 404)
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    # The first attempt times out after 2 s; a lease of seconds leaves time
    # for the second however slow the machine.
    g = c.acquire("jobs/1", lease=10.0)
    g.release()
    assert calls["n"] == 2
    c.close()


# Leases of seconds below where the lease is not what is tested: an acquire
# slowed by load is not late.


def test_with_lock_releases_and_returns(nodes: List[FakeNode]) -> None:
    n = node(nodes, granting())
    c = client_at([n.addr])
    assert c.with_lock("jobs/1", lambda lost: 42, lease=10.0) == 42
    assert n.of("/v1/locks/release")
    with c.lock("jobs/1", lease=10.0) as g:
        assert g.fence == 7
    assert len(n.of("/v1/locks/release")) == 2
    c.close()


def test_a_set_is_released_in_one_call(nodes: List[FakeNode]) -> None:
    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/acquire" and "names" in body:
            locks = [
                lock(nm, lease_ms=body.get("lease_ms", 1000), fence=10 + i, id=f"01J0000000000000000000000{i}")
                for i, nm in enumerate(body["names"])
            ]
            return 200, {"lock": locks[0], "locks": locks, "served_ms": 0}
        if path == "/v1/locks/release" and "locks" in body:
            return 200, {"lock": lock(), "locks": [lock()], "served_ms": 0}
        return granting()(path, body)

    n = node(nodes, script)
    c = client_at([n.addr])
    with c.lock_all(["a", "b"], lease=10.0) as s:
        assert s.fences == [10, 11]
    releases = n.of("/v1/locks/release")
    assert len(releases) == 1 and [x["name"] for x in releases[0].body["locks"]] == ["a", "b"]
    c.close()


# -- asyncio -------------------------------------------------------------


def test_the_asyncio_twin(nodes: List[FakeNode]) -> None:
    state = {"held": True}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/locks/renew" and not state["held"]:
            return error("not_held", 404)
        return granting()(path, body)

    n = node(nodes, script)

    async def main() -> None:
        async with leasehold.aio.Client([n.addr], token_env=None) as c:
            async with c.lock("jobs/1", lease=10.0) as g:
                assert isinstance(g.lost, asyncio.Event) and not g.lost.is_set()
            assert n.of("/v1/locks/release")

            async def work(lost: asyncio.Event) -> None:
                state["held"] = False
                await asyncio.sleep(10)  # cancelled once the renewal is refused

            # Refused at the first renewal: Lost at once, long before the
            # work's 10 s or the lease's end (a lapse waits for that).
            t = time.monotonic()
            with pytest.raises(leasehold.Lost):
                await c.with_lock("jobs/2", work, lease=10.0, renew_every=0.2)
            assert time.monotonic() - t < 5

    asyncio.run(main())


def test_with_lock_releases_when_the_work_raises(nodes: List[FakeNode]) -> None:
    n = node(nodes, granting())
    c = client_at([n.addr])

    def work(lost: threading.Event) -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        c.with_lock("jobs/1", work, lease=10.0)
    assert n.of("/v1/locks/release")
    c.close()

    async def main() -> None:
        async with leasehold.aio.Client([n.addr], token_env=None) as ac:
            async def awork(lost: asyncio.Event) -> None:
                raise ValueError("boom")

            with pytest.raises(ValueError):
                await ac.with_lock("jobs/2", awork, lease=10.0)

    asyncio.run(main())
    assert len(n.of("/v1/locks/release")) == 2


def test_a_sessions_renewal_moves_past_a_node_that_hangs(nodes: List[FakeNode]) -> None:
    """Each renewal attempt has a share of the time left for every endpoint
    not tried yet: a node that never answers renewals leaves time to renew
    through the other before the session's 3 s lease lapses."""
    session = {"id": "01JDQ6ZP3Q5B2M0W7R9T4X8Y70", "node": 1, "lease_ms": 3000, "ttl_ms": 3000}

    def opens_and_hangs(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path == "/v1/sessions/renew":
            return None
        return 200, {"session": session, "served_ms": 0}

    hanging = node(nodes, opens_and_hangs)
    serving = node(nodes, lambda p, b: (200, {"session": session, "served_ms": 0}))
    c = client_at([hanging.addr, serving.addr], start=0)
    s = c.open_session(ttl=3.0)
    time.sleep(6.0)
    assert not s.is_lost()
    assert serving.of("/v1/sessions/renew")
    s.close()
    c.close()


def test_a_sessions_lock_delay_goes_with_each_lock_unless_it_asks_its_own(nodes: List[FakeNode]) -> None:
    session = {"id": "01JDQ6ZP3Q5B2M0W7R9T4X8Y70", "node": 1, "lease_ms": 6000, "ttl_ms": 6000}

    def script(path: str, body: Dict[str, Any]) -> Optional[Answer]:
        if path.startswith("/v1/sessions/"):
            return 200, {"session": session, "served_ms": 0, "released": 0}
        return 200, {"lock": lock(body["name"]), "served_ms": 0}

    n = node(nodes, script)
    c = client_at([n.addr])
    s = c.open_session(ttl=6.0, lock_delay=4.0)
    s.acquire("a")
    s.acquire("b", lock_delay=1.5)
    asked = [r.body for r in n.of("/v1/locks/acquire")]
    assert [b.get("lock_delay_ms") for b in asked] == [4000, 1500]
    assert all("lease_ms" not in b and b.get("session") == session["id"] for b in asked)
    s.close()
    c.close()
