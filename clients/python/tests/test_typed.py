"""The package is typed (it ships ``py.typed``): ``mypy --strict`` finds
nothing in it. mypy comes with the test extra; without it this fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


def test_the_package_passes_mypy_strict() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "src"],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mypy --strict src:\n{done.stdout}{done.stderr}"
