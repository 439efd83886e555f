# SPDX-License-Identifier: Apache-2.0
"""The gather benchmark still runs (real spawned ranks on a gloo group) and
prints its table.

Only the shape of the output is checked: timings on a shared CI machine are
noise, so nothing here asserts a duration or a ratio.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.multiproc

HEADER = re.compile(r"^per-step cost of the balance gather \(", re.MULTILINE)
SYNC = re.compile(r"^upstream DP sync: .* every (\d+) steps", re.MULTILINE)
COLUMNS = re.compile(
    r"^\s*dp\s+calls\s+gather us/step\s+sync us/call\s+sync us/step\s+"
    r"gather/sync(?:\s+% of [\d.]+ ms){3}\s+note$",
    re.MULTILINE,
)
# dp, calls, gather us, sync us/call, sync us/step, gather/sync, 3 shares
ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+x"
    r"(?:\s+[\d.]+%){3}"
)


def test_bench_gather_quick_prints_the_table():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_gather.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stdout = result.stdout
    assert HEADER.search(stdout), stdout
    assert (match := SYNC.search(stdout)) and int(match[1]) > 0, stdout
    assert COLUMNS.search(stdout), stdout
    rows = [m for line in stdout.splitlines() if (m := ROW.match(line))]
    # --quick: DP 2 only.
    assert [int(m[1]) for m in rows] == [2], stdout
    assert float(rows[0][3]) > 0
    assert re.search(r"^reading: .* [\d.]+ ms step", stdout, re.MULTILINE), stdout
