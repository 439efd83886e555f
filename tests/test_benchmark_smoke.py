# SPDX-License-Identifier: Apache-2.0
"""The schedule() overhead benchmark still runs and prints its ratio table.

Only the shape of the output is checked: timings on a shared CI machine are
noise, so no ratio is asserted here (the benchmark itself prints verdicts).
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.lanes import REPO_ROOT

# dp, waiting, plain ms, balance ms, ratio, model, verdict
ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+(PASS|FAIL)"
)


def test_benchmark_quick_prints_a_ratio_table():
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "bench_schedule_overhead.py"),
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [m for line in result.stdout.splitlines() if (m := ROW.match(line))]
    # --quick: DP sizes 2 and 4, waiting queues 1 and 10.
    assert {(int(m[1]), int(m[2])) for m in rows} == {
        (2, 1),
        (4, 1),
        (2, 10),
        (4, 10),
    }, result.stdout
    assert all(float(m[3]) > 0 for m in rows)
    assert "seam call:" in result.stdout
    assert re.search(r"summary: \d+/4 rows within", result.stdout), result.stdout
