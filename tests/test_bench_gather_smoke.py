# SPDX-License-Identifier: Apache-2.0
"""The gather benchmark still runs (real spawned ranks on a gloo group) and
writes its table as JSON.

Only the shape of the output is checked: timings on a shared CI machine are
noise, so nothing here asserts a duration or a ratio.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.multiproc,
]


def test_bench_gather_quick_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "gather.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "bench_gather.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["benchmark"] == "bench_gather"
    assert data["sync_interval"] > 0 and data["sync_interval_source"]
    # --quick: DP 2 only.
    assert [row["dp"] for row in data["rows"]] == [2], data
    (row,) = data["rows"]
    assert row["gather_us_per_step"] > 0 and row["sync_us_per_step"] > 0
    assert row["calls"] > 0 and len(row["share_of_step"]) == 3
    assert data["reading"].startswith("reading: ")
    # The table is printed too, with the same reading line.
    assert data["reading"] in result.stdout
