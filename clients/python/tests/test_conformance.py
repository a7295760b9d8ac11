"""The client conformance suite (clients/conformance/README.md): one case
per scenario of ../conformance/scenarios.json, each against a cluster of
its own, performed with the sync client; the scenarios without chaos are
performed with the asyncio client too."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from conformance import SCENARIOS, Cluster, Runner, scenarios

if not SCENARIOS.exists():
    raise RuntimeError(f"the conformance suite is missing: {SCENARIOS}")

ALL = scenarios()


def has_chaos(scenario: Dict[str, Any]) -> bool:
    return '"chaos"' in json.dumps(scenario["steps"])


CASES = [pytest.param(s, "sync", id=s["id"]) for s in ALL] + [
    pytest.param(s, "asyncio", id=f"asyncio-{s['id']}") for s in ALL if not has_chaos(s)
]


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
