# SPDX-License-Identifier: Apache-2.0
"""``scripts/test``'s own command line: ``--help`` prints its usage and runs
nothing (it used to pass ``--help`` to pytest on every lane, after lint)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_runs_nothing(flag: str) -> None:
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts" / "test"), flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Set up (if needed) and run the whole suite")
    assert "scripts/test --lane release" in proc.stdout
    assert "SPDX" not in proc.stdout and "set -euo" not in proc.stdout
    # Nothing ran: no venv, no lint, no pytest.
    assert "==" not in proc.stdout + proc.stderr
