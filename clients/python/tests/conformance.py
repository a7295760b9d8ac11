"""The conformance runner's machinery (clients/conformance/README.md): the
cluster of a scenario, and its steps performed with the sync client."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import httpx

import asyncio

import leasehold
import leasehold.aio

PACKAGE = Path(__file__).resolve().parent.parent
REPO = PACKAGE.parent.parent
SCENARIOS = PACKAGE.parent / "conformance" / "scenarios.json"


def binary() -> str:
    """$LEASEHOLD_BIN, else target/debug/leasehold, else
    target/release/leasehold, from the repository's root."""
    env = os.environ.get("LEASEHOLD_BIN")
    if env:
        return env
    for build in ("debug", "release"):
        candidate = REPO / "target" / build / "leasehold"
        if candidate.exists():
            return str(candidate)
    raise RuntimeError("no leasehold binary: set LEASEHOLD_BIN, or build target/debug/leasehold")


def scenarios() -> List[Dict[str, Any]]:
    with open(SCENARIOS) as f:
        every: List[Dict[str, Any]] = json.load(f)["scenarios"]
    only = os.environ.get("CONFORMANCE_ONLY")
    if only:
        every = [s for s in every if only in s["id"]]
    return every


class StepFailed(AssertionError):
    pass


class Cluster:
    """The cluster of one scenario: started before its first step, stopped
    after its last."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        self.bin = binary()
        self.nodes_n = int(spec.get("nodes", 3))
        self.tls = bool(spec.get("tls", False))
        self.acl: Optional[str] = spec.get("acl")
        self.serve_args: List[Any] = list(spec.get("serve_args") or [])
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-conformance-"))
        self.up_dir = self.dir / "up"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.addrs: Dict[int, str] = {}

    @property
    def ca(self) -> Optional[str]:
        return str(self.dir / "tls" / "ca.pem") if self.tls else None

    def start(self) -> None:
        serve: List[str] = []
        if self.tls:
            subprocess.run(
                ["bash", str(REPO / "scripts" / "make-certs"), str(self.dir / "tls"), "node"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            tls = self.dir / "tls"
            serve += [
                "--tls-cert", str(tls / "node.pem"),
                "--tls-key", str(tls / "node-key.pem"),
                "--tls-ca", str(tls / "ca.pem"),
            ]
        if self.acl is not None:
            (self.dir / "acl.toml").write_text(self.acl)
            serve += ["--acl", str(self.dir / "acl.toml")]
        serve += [str(a) for a in self.serve_args]
        args = [
            self.bin, "up", "--nodes", str(self.nodes_n), "--base-port", "0",
            "--data-dir", str(self.up_dir),
        ]
        if serve:
            args += ["--"] + serve
        self.log = open(self.dir / "up.out", "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        up_json = self.up_dir / "up.json"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"leasehold up exited {self.proc.returncode}: {self.output()}")
            try:
                nodes = json.loads(up_json.read_text())["nodes"]
                if len(nodes) >= self.nodes_n:
                    self.addrs = {int(k): v["addr"] for k, v in nodes.items()}
                    break
            except (OSError, ValueError, KeyError, TypeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {up_json} within 30 s: {self.output()}")
            time.sleep(0.1)
        scheme = "https" if self.tls else "http"
        verify: Any = ssl.create_default_context(cafile=self.ca) if self.tls else True
        with httpx.Client(verify=verify, trust_env=False, timeout=2.0) as http:
            for node, addr in sorted(self.addrs.items()):
                while True:
                    try:
                        if http.get(f"{scheme}://{addr}/readyz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"node {node} not ready within 30 s: {self.output()}")
                    time.sleep(0.1)

    def output(self) -> str:
        try:
            return (self.dir / "up.out").read_text()[-2000:]
        except OSError:
            return ""

    def chaos(self, args: List[str]) -> None:
        env = dict(os.environ, LEASEHOLD_UP=str(self.up_dir))
        done = subprocess.run(
            [self.bin, "chaos", *args], env=env, capture_output=True, timeout=60
        )
        if done.returncode != 0:
            raise StepFailed(
                f"leasehold chaos {' '.join(args)} exited {done.returncode}: "
                f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}"
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def dead_endpoint() -> str:
    """A 127.0.0.1 port nothing listens on: bound, noted, closed."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


class Background:
    """A call started with ``background``, ended by ``await``."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()

        def run() -> None:
            try:
                self.result = call()
            except BaseException as e:  # noqa: BLE001 - judged by the await step
                self.error = e
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


class Watcher:
    """An observer noting every leader it is told of."""

    def __init__(self, client: Any, name: str) -> None:
        self.values: List[Optional[str]] = []
        self.observer = client.observe(name)
        self.stopped = False

        def run() -> None:
            try:
                for leader in self.observer:
                    if self.stopped:
                        return
                    self.values.append(None if leader is None else leader.data)
            except Exception:  # noqa: BLE001 - see below
                # The runner closes the client under a watch still waiting
                # at the end of a scenario; a failure before that is real.
                if not self.stopped:
                    raise

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def collapsed(self, nulls: bool) -> List[Optional[str]]:
        """The values noted, repeats in a row taken as one, and ``None``s
        (no leader, between two) left out unless ``nulls``."""
        out: List[Optional[str]] = []
        for v in list(self.values):
            if v is None and not nulls:
                continue
            if not out or out[-1] != v:
                out.append(v)
        return out


class Runner:
    """Performs a scenario's steps with the sync client."""

    def __init__(self, scenario: Dict[str, Any], cluster: Cluster, flavour: str = "sync") -> None:
        self.scenario = scenario
        self.cluster = cluster
        self.aio: Optional[AioLoop] = AioLoop() if flavour == "asyncio" else None
        self.clients: Dict[str, Any] = {}
        self.locks: Dict[str, Any] = {}
        self.sessions: Dict[str, Any] = {}
        self.background: Dict[str, Background] = {}
        self.watchers: Dict[str, Watcher] = {}
        self.vars: Dict[str, Any] = {}
        self.started: Dict[str, float] = {}
        self.session_of: Dict[str, str] = {}
        self.step_began = time.monotonic()

    # -- values ----------------------------------------------------------

    def speaker(self) -> int:
        # With --acl, any known token may read the cluster: the first one a
        # client of the scenario reads.
        envs = [s["token_env"] for s in self.scenario["steps"] if s.get("do") == "client" and s.get("token_env")]
        token = (os.environ.get(envs[0]) if envs else None) or ""
        client = leasehold.Client(
            [self.cluster.addrs[1]], token=token, token_env=None, tls_ca_file=self.cluster.ca
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    leader = client.cluster().get("leader")
                    if leader:
                        return int(leader)
                except leasehold.LeaseholdError:
                    pass
                if time.monotonic() > deadline:
                    raise StepFailed("no speaker named within 10 s")
                time.sleep(0.2)
        finally:
            client.close()

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, str) or not (value.startswith("{") and value.endswith("}")):
            return value
        inner = value[1:-1]
        if inner == "nodes":
            return sorted(self.cluster.addrs)
        if inner == "speaker":
            return self.speaker()
        if inner == "followers":
            s = self.speaker()
            return [n for n in sorted(self.cluster.addrs) if n != s]
        if inner.startswith("node:"):
            return self.locks[inner[5:]].node
        if inner.startswith("var:"):
            return self.vars[inner[4:]]
        return value

    # -- running ---------------------------------------------------------

    def run(self) -> None:
        for index, step in enumerate(self.scenario["steps"]):
            try:
                self.step(step)
            except StepFailed as e:
                raise StepFailed(
                    f"scenario {self.scenario['id']}, step {index} ({json.dumps(step)}): {e}"
                ) from None

    def close(self) -> None:
        for w in self.watchers.values():
            w.stopped = True
            w.observer.close()
        for held in self.locks.values():
            try:
                if hasattr(getattr(held, "held", held), "resign"):
                    if not held.is_lost():
                        held.resign()
                elif hasattr(getattr(held, "held", held), "release") and not held.is_lost():
                    held.release()
            except Exception:  # noqa: BLE001 - best effort at the end
                pass
        for c in self.clients.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass
        if self.aio is not None:
            self.aio.stop()

    def expecting(self, step: Dict[str, Any], call: Callable[[], Any]) -> Any:
        """Runs ``call``; its outcome must be ``expect`` (default ok)."""
        expect = step.get("expect", "ok")
        started = time.monotonic()
        try:
            result = call()
            error: Optional[BaseException] = None
        except leasehold.LeaseholdError as e:
            result, error = None, e
        took = time.monotonic() - started
        if "max_ms" in step and took * 1000 > step["max_ms"]:
            raise StepFailed(f"took {took * 1000:.0f} ms, more than {step['max_ms']} ms")
        return self.judge(expect, result, error)

    def judge(self, expect: str, result: Any, error: Optional[BaseException]) -> Any:
        if error is None:
            if expect != "ok":
                raise StepFailed(f"expected {expect}, the call succeeded")
            return result
        kind = type(error).__name__
        if expect != kind:
            raise StepFailed(f"expected {expect}, saw {kind}: {error}")
        return None

    def step(self, step: Dict[str, Any]) -> None:
        do = step["do"]
        self.step_began = time.monotonic()
        if "as" in step:
            self.started[step["as"]] = self.step_began
        handler = getattr(self, "do_" + do, None)
        if handler is None:
            raise StepFailed(f"the runner does not perform {do!r}")
        handler(step)

    # -- the client ------------------------------------------------------

    def do_client(self, step: Dict[str, Any]) -> None:
        endpoints = step["endpoints"]
        if endpoints == "all":
            addrs = [self.cluster.addrs[n] for n in sorted(self.cluster.addrs)]
        else:
            addrs = []
            for e in endpoints:
                if e == "dead":
                    addrs.append(dead_endpoint())
                elif e.startswith("node:"):
                    addrs.append(self.cluster.addrs[int(e[5:])])
                else:
                    raise StepFailed(f"unknown endpoint {e!r}")
        options: Dict[str, Any] = {"token_env": step.get("token_env")}
        if step.get("tls"):
            options["tls_ca_file"] = self.cluster.ca
        if "retry_for_ms" in step:
            options["retry_for"] = step["retry_for_ms"] / 1000.0
        if self.aio is not None:
            loop = self.aio
            make: Callable[[], Any] = lambda: AioClient(loop, leasehold.aio.Client(addrs, **options))
        else:
            make = lambda: leasehold.Client(addrs, **options)
        self.clients[step["as"]] = self.expecting(step, make)

    # -- locks -----------------------------------------------------------

    @staticmethod
    def lock_options(step: Dict[str, Any]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, name in (("lease_ms", "lease"), ("wait_ms", "wait"), ("renew_every_ms", "renew_every"),
                          ("lapse_margin_ms", "lapse_margin"), ("lock_delay_ms", "lock_delay")):
            if key in step:
                out[name] = step[key] / 1000.0
        for key in ("holder", "data", "shared", "permits"):
            if key in step:
                out[key] = step[key]
        return out

    def do_acquire(self, step: Dict[str, Any]) -> None:
        client = self.clients[step["client"]]
        options = self.lock_options(step)
        if "session" in step:
            session = self.sessions[step["session"]]
            options.pop("lease", None)
            if "as" in step:
                self.session_of[step["as"]] = step["session"]
            call: Callable[[], Any] = lambda: session.acquire(self.resolve(step["name"]), **options)
        elif "names" in step:
            call = lambda: client.acquire_all(self.resolve(step["names"]), **options)
        else:
            call = lambda: client.acquire(self.resolve(step["name"]), **options)
        self.call_or_background(step, call)

    def call_or_background(self, step: Dict[str, Any], call: Callable[[], Any]) -> None:
        if step.get("background"):
            self.background[step["as"]] = Background(call)
            return
        held = self.expecting(step, call)
        if held is not None and "as" in step:
            self.locks[step["as"]] = held

    def do_await(self, step: Dict[str, Any]) -> None:
        bg = self.background.pop(step["as"])
        if not bg.done.wait(step["within_ms"] / 1000.0):
            raise StepFailed(f"not done within {step['within_ms']} ms")
        error = bg.error
        if error is not None and not isinstance(error, leasehold.LeaseholdError):
            raise StepFailed(f"failed: {error!r}")
        held = self.judge(step.get("expect", "ok"), bg.result, error)
        if held is not None:
            self.locks[step["as"]] = held

    def do_release(self, step: Dict[str, Any]) -> None:
        held = self.locks[step["lock"]]
        if step["lock"] in self.session_of:
            session = self.sessions[self.session_of[step["lock"]]]
            self.expecting(step, lambda: session.release(held))
        elif hasattr(getattr(held, "held", held), "resign"):
            self.expecting(step, held.resign)
        else:
            self.expecting(step, held.release)

    def do_release_by_id(self, step: Dict[str, Any]) -> None:
        client = self.clients[step["client"]]
        held = self.locks[step["lock"]]
        self.expecting(step, lambda: client.release(held.view.name, held.view.id))

    def do_held(self, step: Dict[str, Any]) -> None:
        held = self.locks[step["lock"]]
        if held.is_lost():
            raise StepFailed(f"the lock is lost ({held.loss})")

    def do_lost(self, step: Dict[str, Any]) -> None:
        held = self.locks[step["lock"]]
        if not held.lost.wait(step["within_ms"] / 1000.0):
            raise StepFailed(f"no loss signalled within {step['within_ms']} ms")
        at = time.monotonic()
        loss = held.loss
        if loss is None:
            # The signal is also set by a release: that is no loss.
            raise StepFailed("the signal came from a release, not a loss")
        if "loss" in step:
            if loss.value != step["loss"]:
                raise StepFailed(f"expected loss {step['loss']}, saw {loss}")
        if "since" in step:
            since = (at - self.started[step["since"]]) * 1000
            if since < step.get("at_least_ms", 0) or since > step.get("at_most_ms", float("inf")):
                raise StepFailed(
                    f"the loss came {since:.0f} ms after {step['since']}, not within "
                    f"[{step.get('at_least_ms', 0)}, {step.get('at_most_ms')}]"
                )

    def do_mark(self, step: Dict[str, Any]) -> None:
        self.started[step["as"]] = time.monotonic()

    def do_remember(self, step: Dict[str, Any]) -> None:
        self.vars[step["as"]] = self.resolve(step["value"])

    def do_get(self, step: Dict[str, Any]) -> None:
        """With ``for_ms``, the get and its checks are repeated every 100 ms
        for that long."""
        client = self.clients[step["client"]]
        until = self.step_began + step.get("for_ms", 0) / 1000.0
        while True:
            lock = self.expecting(step, lambda: client.get(self.resolve(step["name"])))
            self.check_get(step, lock)
            if time.monotonic() >= until:
                return
            time.sleep(0.1)

    def check_get(self, step: Dict[str, Any], lock: Any) -> None:
        if step.get("free") and lock is not None:
            raise StepFailed(f"the name is held: {lock}")
        if step.get("free") is False and lock is None:
            raise StepFailed("the name is free")
        if "holder_lock" in step:
            want = self.locks[step["holder_lock"]].view.id
            if lock is None:
                raise StepFailed(f"the name is free, not held under {want}")
            ids = [lock.id] + [o.id for o in lock.others]
            if want not in ids:
                raise StepFailed(f"held under {ids}, not {want}")
        if "holders" in step:
            n = 0 if lock is None else lock.holders
            if n != step["holders"]:
                raise StepFailed(f"{n} holders, not {step['holders']}")
        if "ttl_at_least_ms" in step:
            if lock is None:
                raise StepFailed("the name is free")
            if lock.ttl_ms < step["ttl_at_least_ms"]:
                raise StepFailed(f"{lock.ttl_ms} ms left, less than {step['ttl_at_least_ms']}")

    def do_same_fence(self, step: Dict[str, Any]) -> None:
        a, b = self.locks[step["a"]].fence, self.locks[step["b"]].fence
        if a != b:
            raise StepFailed(f"fences differ: {a} and {b}")

    def do_fence_above(self, step: Dict[str, Any]) -> None:
        a, b = self.locks[step["a"]].fence, self.locks[step["b"]].fence
        if not a > b:
            raise StepFailed(f"fence {a} is not above {b}")

    def do_node_is_not(self, step: Dict[str, Any]) -> None:
        node = self.locks[step["lock"]].node
        if node == int(self.resolve(step["node"])):
            raise StepFailed(f"the lock is still recorded at node {node}")

    def do_sleep(self, step: Dict[str, Any]) -> None:
        time.sleep(step["ms"] / 1000.0)

    def do_list(self, step: Dict[str, Any]) -> None:
        """Asked again every 100 ms until the listing shows the step's locks
        and awaited names, for at most ``within_ms``."""
        client = self.clients[step["client"]]
        until = self.step_began + step.get("within_ms", 0) / 1000.0
        want = {"locks": step["locks"], "awaited": step["awaited"]}
        while True:
            listing = client.listing(step["prefix"], 1000)
            shown = {
                "locks": [l.name for l in listing.locks],
                "awaited": [
                    {"name": a.name, "waiters": a.waiters, "first": a.queue[0]["holder"] if a.queue else None}
                    for a in listing.awaited
                ],
            }
            if shown == want:
                return
            if time.monotonic() >= until:
                raise StepFailed(f"the listing shows {shown}, not {want}")
            time.sleep(0.1)

    def do_with_lock(self, step: Dict[str, Any]) -> None:
        client = self.clients[step["client"]]
        name = self.resolve(step["name"])
        options = self.lock_options(step)
        work_spec = step["work"]

        def work(lost: threading.Event) -> str:
            if work_spec == "return":
                return "done"
            if not isinstance(work_spec, dict):
                raise StepFailed(f"unknown work {work_spec!r}")
            if "chaos" in work_spec:
                self.do_chaos({"args": work_spec["chaos"]})
            elif work_spec.get("release_elsewhere"):
                lock = client.get(name)
                if lock is None:
                    raise StepFailed("the lock is not held while the work runs")
                client.release(name, lock.id)
            else:
                raise StepFailed(f"unknown work {work_spec!r}")
            if not lost.wait(work_spec.get("wait_cancel_ms", 0) / 1000.0):
                never_cancelled.append(True)
            return "stopped"

        never_cancelled: List[bool] = []
        self.expecting(step, lambda: client.with_lock(name, work, **options))
        if never_cancelled:
            raise StepFailed(
                f"the work was not cancelled within {work_spec.get('wait_cancel_ms')} ms"
            )

    # -- sessions --------------------------------------------------------

    def do_open_session(self, step: Dict[str, Any]) -> None:
        client = self.clients[step["client"]]
        ttl = step["ttl_ms"] / 1000.0 if "ttl_ms" in step else None
        session = self.expecting(step, lambda: client.open_session(ttl=ttl))
        if session is not None:
            self.sessions[step["as"]] = session

    def do_close_session(self, step: Dict[str, Any]) -> None:
        self.expecting(step, self.sessions[step["session"]].close)

    # -- election --------------------------------------------------------

    def do_campaign(self, step: Dict[str, Any]) -> None:
        client = self.clients[step["client"]]
        lease = step["lease_ms"] / 1000.0 if "lease_ms" in step else None
        give_up = step["give_up_after_ms"] / 1000.0 if "give_up_after_ms" in step else None
        self.call_or_background(
            step,
            lambda: client.campaign(self.resolve(step["name"]), step["value"], lease=lease, give_up_after=give_up),
        )

    def do_resign(self, step: Dict[str, Any]) -> None:
        self.expecting(step, self.locks[step["lock"]].resign)

    def do_leader(self, step: Dict[str, Any]) -> None:
        client = self.clients[step["client"]]
        leader = self.expecting(step, lambda: client.leader(self.resolve(step["name"])))
        if "value" in step:
            value = None if leader is None else leader.data
            if value != step["value"]:
                raise StepFailed(f"the leader's value is {value!r}, not {step['value']!r}")

    def do_observe(self, step: Dict[str, Any]) -> None:
        self.watchers[step["as"]] = Watcher(self.clients[step["client"]], self.resolve(step["name"]))

    def do_observed(self, step: Dict[str, Any]) -> None:
        watcher = self.watchers[step["as"]]
        want = step["values"]
        deadline = time.monotonic() + step["within_ms"] / 1000.0
        while True:
            seen = watcher.collapsed(None in want)
            if seen[-len(want):] == want:
                return
            if time.monotonic() > deadline:
                raise StepFailed(f"observed {seen}, which does not end with {want}")
            time.sleep(0.05)

    # -- chaos -----------------------------------------------------------

    def do_chaos(self, step: Dict[str, Any]) -> None:
        args = [self.resolve(a) for a in step["args"]]
        runs: List[List[str]] = [[]]
        for a in args:
            if isinstance(a, list):
                runs = [r + [str(v)] for r in runs for v in a]
            else:
                runs = [r + [str(a)] for r in runs]
        for r in runs:
            self.cluster.chaos(r)


# ---------------------------------------------------------------------------
# The asyncio client, driven from the runner's thread: every call is awaited
# on a loop of the runner's own; what the steps read (fence, node, loss,
# is_lost) the asyncio objects answer as they are.


class AioLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: Optional[float] = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class AioEvent:
    """An asyncio.Event waited for from the runner's thread."""

    def __init__(self, loop: AioLoop, event: "asyncio.Event") -> None:
        self.loop = loop
        self.event = event

    def wait(self, timeout: float) -> bool:
        async def waiting() -> bool:
            try:
                await asyncio.wait_for(self.event.wait(), timeout)
                return True
            except asyncio.TimeoutError:
                return False

        return bool(self.loop.run(waiting()))

    def is_set(self) -> bool:
        return self.event.is_set()


class AioHeld:
    """A guard, set, session lock or leadership of the asyncio client."""

    def __init__(self, loop: AioLoop, held: Any) -> None:
        self.loop = loop
        self.held = held

    def __getattr__(self, name: str) -> Any:
        return getattr(self.held, name)

    @property
    def view(self) -> Any:
        if isinstance(self.held, leasehold.aio.LockSet):
            return self.held.locks[0]
        return self.held.view

    @property
    def node(self) -> int:
        return int(self.view.node)

    @property
    def lost(self) -> AioEvent:
        return AioEvent(self.loop, self.held.lost)

    def release(self) -> None:
        self.loop.run(self.held.release())

    def resign(self) -> None:
        self.loop.run(self.held.resign())


class AioSession:
    def __init__(self, loop: AioLoop, session: "leasehold.aio.Session") -> None:
        self.loop = loop
        self.session = session

    def acquire(self, name: str, **options: Any) -> AioHeld:
        return AioHeld(self.loop, self.loop.run(self.session.acquire(name, **options)))

    def release(self, held: AioHeld) -> None:
        self.loop.run(self.session.release(held.held))

    def close(self) -> int:
        return int(self.loop.run(self.session.close()))


class AioObserver:
    def __init__(self, loop: AioLoop, observer: "leasehold.aio.Observer") -> None:
        self.loop = loop
        self.observer = observer
        self.closed = False

    def __iter__(self) -> "AioObserver":
        return self

    def __next__(self) -> Any:
        if self.closed:
            raise StopIteration
        return self.loop.run(self.observer.__anext__())

    def close(self) -> None:
        self.closed = True


class AioClient:
    """The sync runner's view of a ``leasehold.aio.Client``."""

    def __init__(self, loop: AioLoop, client: "leasehold.aio.Client") -> None:
        self.loop = loop
        self.client = client

    def acquire(self, name: str, **options: Any) -> AioHeld:
        return AioHeld(self.loop, self.loop.run(self.client.acquire(name, **options)))

    def acquire_all(self, names: List[str], **options: Any) -> AioHeld:
        return AioHeld(self.loop, self.loop.run(self.client.acquire_all(names, **options)))

    def get(self, name: str) -> Any:
        return self.loop.run(self.client.get(name))

    def listing(self, prefix: str, limit: int) -> Any:
        return self.loop.run(self.client.listing(prefix, limit))

    def release(self, name: str, id: str) -> Any:
        return self.loop.run(self.client.release(name, id))

    def cluster(self) -> Any:
        return self.loop.run(self.client.cluster())

    def open_session(self, **options: Any) -> AioSession:
        return AioSession(self.loop, self.loop.run(self.client.open_session(**options)))

    def campaign(self, name: str, value: str, **options: Any) -> AioHeld:
        return AioHeld(self.loop, self.loop.run(self.client.campaign(name, value, **options)))

    def leader(self, name: str) -> Any:
        return self.loop.run(self.client.leader(name))

    def observe(self, name: str) -> AioObserver:
        return AioObserver(self.loop, self.client.observe(name))

    def with_lock(self, name: str, work: Callable[[Any], Any], **options: Any) -> Any:
        loop = self.loop

        async def awork(lost: "asyncio.Event") -> Any:
            # The step's work blocks (a chaos command, a wait): it runs in a
            # thread, and sees the asyncio event through AioEvent.
            return await asyncio.get_running_loop().run_in_executor(None, work, AioEvent(loop, lost))

        return self.loop.run(self.client.with_lock(name, awork, **options))

    def close(self) -> None:
        self.loop.run(self.client.aclose())
