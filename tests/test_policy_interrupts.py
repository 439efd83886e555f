# SPDX-License-Identifier: Apache-2.0
"""An interrupt while ``compare_policies.py`` starts its replays
(``benchmarks/policies/interrupts.py``, ``runs.run_modes``): the contract is
that Ctrl-C or SIGTERM leaves no replay running.

The replay processes are stand-ins (a sleeping Python), started through the
real ``subprocess.Popen``; the signal is real, sent to this process right
after ``Popen`` returns, the window in which the run once lost its child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.policies import interrupts, runs
from benchmarks.policies.cases import Case

pytestmark = pytest.mark.lane_scope("release")


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    interrupts.install()
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_an_interrupt_inside_deferred_is_raised_when_it_ends(handlers: None) -> None:
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        with interrupts.deferred():  # nested: raised by the outer one
            os.kill(os.getpid(), signal.SIGINT)
        reached_the_end = True
    assert reached_the_end
    # Once raised, it is spent: the next block runs to its end.
    with interrupts.deferred():
        pass


def test_sigterm_right_after_popen_stops_that_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handlers: None
) -> None:
    real_popen = subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
        proc = real_popen(sleeper, **kwargs)
        started.append(proc)
        if len(started) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return proc

    monkeypatch.setattr(runs.subprocess, "Popen", popen)
    try:
        with pytest.raises(KeyboardInterrupt):
            runs.run_modes(Case("builtin", 4), 0, ["off", "on"], tmp_path, jobs=2)
        assert started, "no replay was started"
        # Stopped and reaped by the run itself, not left for anyone.
        assert [p.returncode for p in started] == [-signal.SIGTERM], (
            "the replay started before the SIGTERM was left running "
            "(or a second one was started after it)"
        )
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
