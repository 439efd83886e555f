# SPDX-License-Identifier: Apache-2.0
"""The schedule() overhead benchmark still runs and writes its ratio tables
(balance vs plain, and the refactor table: patched vs original Scheduler) as
JSON; its instruction-count mode says in one line when valgrind is missing,
and the counting method (differencing two call counts under cachegrind) is
exact on a small program.

Only the shape of the output is checked: timings on a shared CI machine are
noise, so no ratio is asserted here (the benchmark itself prints verdicts).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import instruction_count
from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

SCRIPT = REPO_ROOT / "benchmarks" / "bench_schedule_overhead.py"
VALGRIND = shutil.which("valgrind") or "valgrind"


def _run(*flags: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *flags],
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
        cwd=REPO_ROOT,
        **kwargs,
    )


def _run_quick(tmp_path: Path, *flags: str) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "overhead.json"
    result = _run("--quick", "--json", str(out), *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, json.loads(out.read_text())


def _assert_refactor_table(table: dict[str, Any]) -> None:
    # --quick: waiting queues 1 and 10, one patched-vs-original row each.
    assert [row["waiting"] for row in table["rows"]] == [1, 10], table
    for row in table["rows"]:
        assert row["original_s"] > 0 and row["patched_s"] > 0 and row["ratio"] > 0
        assert row["verdict"].split()[0] in {"PASS", "FAIL"}
        assert row["seam_calls"] >= 1
    assert table["seam_ns"]["patched"] > 0


def test_benchmark_quick_writes_both_ratio_tables(tmp_path: Path) -> None:
    stdout, data = _run_quick(tmp_path)
    assert data["count"] == "time" and data["goal"] == 1.01
    balance = data["balance"]
    # --quick: DP sizes 2 and 4, waiting queues 1 and 10.
    assert {(r["dp"], r["waiting"]) for r in balance["rows"]} == {
        (2, 1),
        (4, 1),
        (2, 10),
        (4, 10),
    }, balance
    assert all(r["ratio"] > 0 and r["plain_s"] > 0 for r in balance["rows"])
    assert set(balance["seam_ns"]) == {"plain", "balance"}
    _assert_refactor_table(data["refactor"])
    # The printed tables: balance first, then refactor.
    assert stdout.index("overhead of balance scheduling") < stdout.index(
        "overhead of the seam refactor"
    )


def test_benchmark_refactor_flag_writes_only_the_refactor_table(
    tmp_path: Path,
) -> None:
    stdout, data = _run_quick(tmp_path, "--refactor")
    assert "balance" not in data, data
    _assert_refactor_table(data["refactor"])
    assert "overhead of balance scheduling" not in stdout, stdout


def test_count_instructions_without_valgrind_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()  # a PATH with no valgrind on it
    result = _run("--count", "instructions", "--quick", env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == instruction_count.MISSING
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--runs", "--repeats"])
def test_count_instructions_refuses_fewer_than_one_run_or_repeat(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import bench_schedule_overhead

    with pytest.raises(SystemExit) as exit_info:
        bench_schedule_overhead.main(["--count", "instructions", flag, "0"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"{flag} must be >= 1")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_differencing_two_call_counts_gives_the_per_call_count() -> None:
    """The counting method on a small program: a loop of K and of 2K
    iterations under cachegrind; the difference / K is the same in two
    independent runs and does not include interpreter start-up."""

    def per_iteration() -> float:
        totals = []
        for n in (2000, 4000):
            with TemporaryOut() as out:
                subprocess.run(
                    [
                        VALGRIND, "--tool=cachegrind", "--cache-sim=no",
                        f"--cachegrind-out-file={out}", sys.executable, "-S", "-c",
                        f"x = 0\nfor i in range({n}): x += i",
                    ],
                    capture_output=True, check=True, timeout=600,
                    env={"PYTHONHASHSEED": "0"},
                )  # fmt: skip
                totals.append(instruction_count._total_ir(out))
        # Start-up is millions of instructions: the difference removes it.
        assert totals[0] > 1_000_000
        return (totals[1] - totals[0]) / 2000

    first, second = per_iteration(), per_iteration()
    assert 10 < first < 10_000, first
    assert abs(first - second) / first < 1e-3, (first, second)


class TemporaryOut:
    """A temporary file path for cachegrind's output."""

    def __enter__(self) -> Path:
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        return Path(self._dir.name) / "cachegrind.out"

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()
