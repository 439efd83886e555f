# SPDX-License-Identifier: Apache-2.0
"""Progress lines of the replay on a stderr that is a file, not a terminal
(CI logs, ``| tee``, ``nohup``): one line as each run starts and ends, and
``still running`` lines in between.

The heartbeat interval is shortened (60 s in use) so a short run shows it;
nothing here asserts on how long anything takes.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from vllm_ascend_balance.replay.pipeline import progress

pytestmark = pytest.mark.lane_scope("release")


def _wait_for(path: Path, needle: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in path.read_text():
        assert time.monotonic() < deadline, f"no {needle!r} in {path.read_text()!r}"
        time.sleep(0.01)


def test_announced_writes_start_heartbeat_and_end_to_a_file(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    with log.open("w") as stream:
        assert not stream.isatty()
        with progress.announced("run 1/2: mode on", every_s=0.01, stream=stream) as st:
            _wait_for(log, "still running")  # the heartbeat, while the body runs
            st["status"] = "interrupted"
    lines = log.read_text().splitlines()
    assert lines[0] == "replay: run 1/2: mode on, started"
    assert re.fullmatch(r"replay: run 1/2: mode on, still running \(\d+ s\)", lines[1])
    assert re.fullmatch(
        r"replay: run 1/2: mode on, finished in \d+ s \(interrupted\)", lines[-1]
    )
    # Nothing after the end: the heartbeat thread stopped with the body.
    time.sleep(0.05)
    assert log.read_text().splitlines()[-1] == lines[-1]


def test_replay_prints_a_line_per_run_to_a_redirected_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vllm-ascend-balance replay --engine sim`` (a small built-in slice),
    stderr a file: every run of off, on is announced, started and finished,
    in run order, with heartbeat lines in between."""
    from vllm_ascend_balance.tools.cli import main

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)
    log = tmp_path / "stderr.log"
    with log.open("w") as stream:
        monkeypatch.setattr(sys, "stderr", stream)
        argv = ["replay", "--engine", "sim", "--dp", "2", "--max-num-seqs", "8"]
        argv += ["--duration", "5", "--repeat", "1", "--mode", "off,on"]
        assert main(argv) == 0
    text = log.read_text()
    line = r"^replay: (run \d/2: mode \S+) \(repetition \d\), (\w+)"
    runs = re.findall(line, text, re.M)
    events = [(what, event) for what, event in runs if event != "still"]
    assert events == [
        ("run 1/2: mode off", "started"),
        ("run 1/2: mode off", "finished"),
        ("run 2/2: mode on", "started"),
        ("run 2/2: mode on", "finished"),
    ], text
    assert re.search(r"^replay: run 1/2: .*finished in \d+ s$", text, re.M), text
    assert "still running" in text, text
