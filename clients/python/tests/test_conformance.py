"""The client conformance suite (clients/conformance/README.md): one case
per scenario of ../conformance/scenarios.json and flavour of the client
(sync, and asyncio through ``leasehold.aio``), each against a cluster of
its own."""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest

from conformance import SCENARIOS, Cluster, Runner, scenarios

if not SCENARIOS.exists():
    raise RuntimeError(f"the conformance suite is missing: {SCENARIOS}")

ALL = scenarios()

CASES = [pytest.param(s, "sync", id=s["id"]) for s in ALL] + [
    pytest.param(s, "asyncio", id=f"asyncio-{s['id']}") for s in ALL
]


def test_conformance_only_matches_a_scenario() -> None:
    """A CONFORMANCE_ONLY that names no scenario runs none: that is a
    failure, not a pass."""
    assert ALL, f"no scenario's id contains CONFORMANCE_ONLY={os.environ.get('CONFORMANCE_ONLY')!r}"


@pytest.mark.parametrize("scenario,flavour", CASES)
def test_scenario(scenario: Dict[str, Any], flavour: str) -> None:
    env: Dict[str, str] = scenario.get("env", {})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    cluster = Cluster(scenario.get("cluster", {}))
    runner = None
    try:
        cluster.start()
        runner = Runner(scenario, cluster, flavour)
        runner.run()
    finally:
        if runner is not None:
            runner.close()
        cluster.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
