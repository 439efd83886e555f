# SPDX-License-Identifier: Apache-2.0
"""SIGTERM stops a replay as Ctrl-C (SIGINT) does, in real processes: the
runs that finished are reported, the work directory is removed, exit status
1; a signal between runs reads as the next run interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_ascend_balance.replay.pipeline import cli
from vllm_ascend_balance.replay.pipeline.environment import Terminated
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.pipeline.report import status_lines

pytestmark = pytest.mark.lane_scope("release")

REPO_ROOT = Path(__file__).resolve().parent.parent
#: How long a signalled process gets to stop (a hang guard, not a timing).
LIMIT_S = 60.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def test_sigterm_to_the_simulated_replay_reports_what_finished(tmp_path: Path) -> None:
    """SIGTERM once the first run finished: exit 1, that run's numbers on
    stdout, the second run reported interrupted by SIGTERM, no work
    directory left in TMPDIR. Negative control: without
    ``sigterm_as_ctrl_c`` the process dies of the signal (-15), prints
    nothing on stdout and leaves ``vab-replay-*`` behind. The second run
    (balance on, DP 32) takes seconds; the signal follows the line at once,
    and lands in it or just before it (both read alike: the next test)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "vllm_ascend_balance", "replay", "--engine", "sim"]
    cmd += ["--dp", "32", "--repeat", "1", "--mode", "off,on"]
    proc = subprocess.Popen(
        cmd,
        stdout=PIPE,
        stderr=PIPE,
        text=True,
        env={**_env(), "TMPDIR": str(tmp)},
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("replay: run 1/2: mode off") and "finished" in line:
                proc.send_signal(signal.SIGTERM)
                break
        else:
            pytest.fail("no first run finished:\n" + "".join(seen[-20:]))
        try:
            out, err = proc.communicate(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {LIMIT_S:g} s after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err[-3000:]
    assert "completed requests" in out, err[-3000:]
    assert "on run 1: interrupted by SIGTERM (nothing measured)" in out, out
    assert sorted(p.name for p in tmp.glob("vab-*")) == []


class _Engine:
    """Every run completes at once (no records needed by the loop)."""

    def run(self, workload: Any, mode: Mode, options: Any, repeat: int) -> RunRecords:
        return RunRecords(mode, repeat, options.dp)


@pytest.mark.parametrize("when", ["announcing run 2", "ending run 1"])
def test_a_signal_between_runs_reads_as_the_next_run_interrupted(
    when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (or Ctrl-C) outside the engine, as the replay announces a
    run's start or end, keeps every finished run and reports the next as
    interrupted by it. Negative control: a loop that lets it out (as before)
    fails here."""
    real = cli.announced

    @contextlib.contextmanager
    def announced(what: str) -> Iterator[dict[str, str]]:
        if when == "announcing run 2" and what.startswith("run 2/"):
            raise Terminated
        with real(what) as state:
            yield state
        if when == "ending run 1" and what.startswith("run 1/"):
            raise Terminated

    monkeypatch.setattr(cli, "announced", announced)
    order = [(Mode("off"), 0), (Mode("on", True), 0), (Mode("off"), 1)]
    options = SimpleNamespace(dp=2)
    try:
        runs = cli._run_in_order(_Engine(), None, options, order)  # type: ignore[arg-type]
    except KeyboardInterrupt:  # not to pytest, which would end the session
        pytest.fail("the signal left the run loop: no report")
    assert runs is not None
    assert [(r.mode.label, r.status, r.cause) for r in runs] == [
        ("off", RunStatus.OK, None),
        ("on", RunStatus.INTERRUPTED, "SIGTERM"),
    ]
    assert status_lines(runs) == ["on run 1: interrupted by SIGTERM (nothing measured)"]
