# SPDX-License-Identifier: Apache-2.0
"""The held-wait benchmark still runs and writes its rows as JSON.

Only the shape of the output is checked: timings on a shared CI machine are
noise, so nothing here asserts a duration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")


def test_bench_held_wait_quick_writes_the_rows(tmp_path: Path) -> None:
    out = tmp_path / "held.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "bench_held_wait.py"),
            "--quick",
            "--running",
            "8",
            "--waiting",
            "50",
            "--json",
            str(out),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["benchmark"] == "bench_held_wait"
    assert (data["running"], data["waiting"]) == (8, 50)
    assert [row["frozen"] for row in data["rows"]] == [True, False]
    assert all(row["us_per_gather"] > 0 for row in data["rows"])
    assert "us per gather" in result.stdout
