# SPDX-License-Identifier: Apache-2.0
"""``benchmarks/real_vs_peers.py``: our setting against each peer from a
replay's JSON, with the replay's own 99 % band.

Synthetic runs: a difference far outside the runs' scatter is an effect
with its percentage, one inside it is ``~`` (the control), the A/A pair is
printed as the noise reference, and a mode that is not in the run is a
one-line error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

SCRIPT = REPO_ROOT / "benchmarks" / "real_vs_peers.py"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    values = {
        "off": [100.0, 101.0],
        "ours": [70.0, 71.0],  # 30 below the peer: far outside 1-wide runs
        "peer": [100.0, 101.0],
        "close": [70.5, 71.5],  # 0.5 above ours: inside the band
        "off'": [100.5, 100.5],
    }
    metric = {m: {"values": v} for m, v in values.items()}
    frozen = {m: {"values": [0.5, 0.5]} for m in values}
    names = ("TPOT p50 (ms)", "TPOT p99 (ms)", "TTFT p50 (ms)", "TTFT p99 (ms)")
    metrics = {name: metric for name in (*names, "output tokens/s")}
    metrics["steps frozen"] = frozen
    path = tmp_path / "out.json"
    path.write_text(json.dumps({"comparison": {"metrics": metrics}}))
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_effect_band_and_the_aa_pair(tmp_path: Path) -> None:
    result = _run(tmp_path, "--ours", "ours", "--against", "peer,close")
    assert result.returncode == 0, result.stderr
    header, _, tpot, *_ = result.stdout.splitlines()
    assert header.endswith("| ours vs peer | ours vs close | off' vs off |")
    cells = [c.strip() for c in tpot.split("|")[1:-1]]
    assert cells[-3] == "-30.0 (-30 %)"
    assert cells[-2].startswith("~ (-0.5 ±")
    assert cells[-1].startswith("~ (+0.0 ±")
    assert "steps frozen (%) | 50.0 ±0.0" in result.stdout


def test_unknown_mode_is_one_line(tmp_path: Path) -> None:
    result = _run(tmp_path, "--ours", "ours", "--against", "nope")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "--ours/--against: no mode 'nope' in the run "
        "(['off', 'ours', 'peer', 'close', \"off'\"])"
    ]


@pytest.mark.parametrize(
    ("content", "wrong"),
    [
        (None, "cannot be read (No such file or directory)"),
        ("{}", "no comparison.metrics object"),
        ("not json", "not JSON"),
        ('{"comparison": {"metrics": {}}}', "metrics has no 'TPOT p50 (ms)'"),
    ],
)
def test_a_file_that_is_not_a_replays_json_is_one_line(
    tmp_path: Path, content: str | None, wrong: str
) -> None:
    """A missing file or one that is not a replay's ``--json`` output is
    refused in one line naming the file, what is wrong and what to do,
    exit 2 (were FileNotFoundError and KeyError stacks). Control: the
    well-formed file of the tests above is read (``_run``)."""
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(path), "--ours", "on", "--against", "off"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"real_vs_peers.py: {path}: "), lines[0]
    assert wrong in lines[0], lines[0]
    assert lines[0].endswith("give the file scripts/replay --json OUT.json wrote")
