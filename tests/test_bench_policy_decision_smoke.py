# SPDX-License-Identifier: Apache-2.0
"""The policy-decision benchmark still runs and writes its rows as JSON.

Only the shape of the output is checked: timings on a shared machine are
noise, so nothing here asserts a duration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT
from vllm_ascend_balance.gate.policies import POLICIES

pytestmark = pytest.mark.lane_scope("release")


def test_bench_policy_decision_quick_writes_the_rows(tmp_path: Path) -> None:
    out = tmp_path / "decision.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "bench_policy_decision.py"),
            "--quick",
            "--dp",
            "16",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["benchmark"] == "bench_policy_decision"
    rows = {(row["policy"], row["what"]) for row in data["rows"]}
    assert rows == {
        (name, what)
        for name in POLICIES
        for what in ("harness", "decide", "summary", "ledger")
    }
    assert all(row["dp"] == 16 and row["ns"] > 0 for row in data["rows"])
