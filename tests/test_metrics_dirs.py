# SPDX-License-Identifier: Apache-2.0
"""Stale front-end metrics directories (issue 19): a run killed with SIGKILL
leaves its ``vllm-ascend-balance-<pid>-*`` directory in the temp dir; the
next start removes it, and only directories whose owner is gone.

- :func:`metrics_dirs.remove_stale_dirs` on a directory holding a dead owner's,
  a live owner's, a pid-less and an unrelated directory: only the dead
  owner's goes (the others are the negative controls).
- The real cycle, in real processes with their own ``TMPDIR``: a front-end
  creates its directory and is SIGKILLed (the directory survives it); the
  next front-end's start removes it, keeps its own while it lives, and its
  normal exit removes its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ascend_balance.observability import metrics_dirs

pytestmark = pytest.mark.lane_scope("release")

HANG_GUARD_S = 120.0
FRONT_END = """
import os, sys, time
from vllm_ascend_balance.observability import metrics_dirs
metrics_dirs.serve_from_front_end()
print(os.environ[metrics_dirs.METRICS_DIR_ENV], flush=True)
if sys.argv[1] == "wait":
    time.sleep(600)
"""


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True,
                          timeout=HANG_GUARD_S)  # fmt: skip
    pid = int(proc.stdout)
    assert not metrics_dirs._pid_alive(pid)  # reaped, so gone (unless reused)
    return pid


def test_only_directories_of_gone_owners_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"vllm-ascend-balance-{_dead_pid()}-abc123"
    live = tmp_path / f"vllm-ascend-balance-{os.getpid()}-def456"
    no_pid = tmp_path / "vllm-ascend-balance-ghi789"
    other = tmp_path / "someone-else-1"
    for path in (dead, live, no_pid, other):
        path.mkdir()
        (path / "counter_balance-1.db").write_bytes(b"\0" * 8)
    assert metrics_dirs.remove_stale_dirs(str(tmp_path)) == [str(dead)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (live, no_pid, other)
    )
    assert metrics_dirs.remove_stale_dirs(str(tmp_path)) == []  # idempotent


def _front_end(tmp: Path, mode: str) -> subprocess.Popen[str]:
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop(metrics_dirs.PROMETHEUS_DIR_ENV, None)
    env.pop(metrics_dirs.METRICS_DIR_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-c", FRONT_END, mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_killed_runs_directory_is_removed_at_the_next_start(tmp_path: Path) -> None:
    killed = _front_end(tmp_path, "wait")
    assert killed.stdout is not None
    killed_dir = Path(killed.stdout.readline().strip())
    assert killed_dir.parent == tmp_path
    assert killed_dir.name.startswith(f"vllm-ascend-balance-{killed.pid}-")
    killed.send_signal(signal.SIGKILL)
    killed.wait(HANG_GUARD_S)
    assert killed_dir.is_dir(), "SIGKILL should have left the directory"

    nxt = _front_end(tmp_path, "wait")
    try:
        assert nxt.stdout is not None
        own = Path(nxt.stdout.readline().strip())
        assert not killed_dir.exists()
        assert own.is_dir()  # a live owner's directory stays
        # A third start while the second lives leaves the second's alone.
        third = _front_end(tmp_path, "exit")
        out, _ = third.communicate(timeout=HANG_GUARD_S)
        assert third.returncode == 0
        assert own.is_dir()
        assert not Path(out.strip()).exists()  # a normal exit cleans its own
    finally:
        nxt.kill()
        nxt.wait(HANG_GUARD_S)
    metrics_dirs.remove_stale_dirs(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
