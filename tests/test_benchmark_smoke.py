# SPDX-License-Identifier: Apache-2.0
"""The schedule() overhead benchmark still runs and prints its ratio tables
(balance vs plain, and the refactor table: patched vs original Scheduler).

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
# refactor table: "patch", waiting, orig ms, patched ms, ratio, model, verdict
REFACTOR_HEADER = re.compile(
    r"^schedule\(\) overhead of the seam refactor .*"
    r"patched Scheduler vs the release's original",
    re.MULTILINE,
)
REFACTOR_COLUMNS = re.compile(
    r"^\s*pair\s+waiting\s+orig ms\s+patched ms\s+ratio\s+model\s+verdict$",
    re.MULTILINE,
)
REFACTOR_ROW = re.compile(
    r"^\s*patch\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+(PASS|FAIL)"
)


def _run_quick(*flags: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "bench_schedule_overhead.py"),
            "--quick",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _assert_refactor_table(stdout: str) -> None:
    assert REFACTOR_HEADER.search(stdout), stdout
    assert REFACTOR_COLUMNS.search(stdout), stdout
    rows = [m for line in stdout.splitlines() if (m := REFACTOR_ROW.match(line))]
    # --quick: waiting queues 1 and 10, one patched-vs-original row each.
    assert sorted(int(m[1]) for m in rows) == [1, 10], stdout
    assert all(float(m[2]) > 0 for m in rows)
    assert re.search(r"refactor summary: \d+/2 rows within", stdout), stdout


def test_benchmark_quick_prints_both_ratio_tables():
    stdout = _run_quick()
    rows = [m for line in stdout.splitlines() if (m := ROW.match(line))]
    # --quick: DP sizes 2 and 4, waiting queues 1 and 10.
    assert {(int(m[1]), int(m[2])) for m in rows} == {
        (2, 1),
        (4, 1),
        (2, 10),
        (4, 10),
    }, stdout
    assert all(float(m[3]) > 0 for m in rows)
    assert "seam call:" in stdout
    assert re.search(r"^summary: \d+/4 rows within", stdout, re.MULTILINE), stdout
    # The refactor table comes after the balance table.
    _assert_refactor_table(stdout)
    assert stdout.index("overhead of balance scheduling") < stdout.index(
        "overhead of the seam refactor"
    )


def test_benchmark_refactor_flag_prints_only_the_refactor_table():
    stdout = _run_quick("--refactor")
    _assert_refactor_table(stdout)
    assert "overhead of balance scheduling" not in stdout, stdout
    assert not [line for line in stdout.splitlines() if ROW.match(line)], stdout
