# SPDX-License-Identifier: Apache-2.0
"""Test-only replay variants and a harness that runs ``replay`` in its own
session and cleans up every process it started.

:class:`GatherInScheduleExecutor` is the negative control of the collective
safety tests: it moves the balance gather into ``Scheduler.schedule()``
(the first deadlock in docs/design.md). A rank that has
drained its requests runs dummy batches and never enters ``schedule()``, so
the ranks that still schedule wait in the gather for it while it waits for
them in the next forward pass's collective: the deployment hangs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm.logger import init_logger

from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.ipc_sockets import BASE_PATH_ENV
from vllm_ascend_balance.replay.real.engine import run_slug
from vllm_ascend_balance.replay.real.executor import CostModelExecutor
from vllm_ascend_balance.replay.real.recorder import RankFile, rank_file, read_rank_file

logger = init_logger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
GATHER_IN_SCHEDULE_EXECUTOR = "tests.support.replay_variants.GatherInScheduleExecutor"


class GatherInScheduleMixin:
    """Gathers at the top of ``schedule()`` (wrong); the engine hook's call
    only injects ``dp_group`` (it sets the attribute before calling)."""

    def admission_gather(self) -> None:
        return None

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        BalanceSchedulerMixin.admission_gather(self)  # type: ignore[arg-type]
        return super().schedule(*args, **kwargs)  # type: ignore[misc]


class GatherInScheduleExecutor(CostModelExecutor):
    """The replay executor, plus: compose :class:`GatherInScheduleMixin` over
    the scheduler class. Runs in ``EngineCore.__init__`` after activation
    chose the balance scheduler and before the scheduler is built."""

    def _init_executor(self) -> None:
        super()._init_executor()
        sched_config = self.vllm_config.scheduler_config
        base = sched_config.get_scheduler_cls()
        sched_config.scheduler_cls = type(
            f"GatherInSchedule{base.__name__}", (GatherInScheduleMixin, base), {}
        )


# ---------------------------------------------------------------- harness
@dataclass
class ReplayProcess:
    """Outcome of one ``replay`` subprocess."""

    returncode: int | None  # None: did not exit before the timeout
    stdout: str
    stderr: str
    timed_out: bool
    interrupted_rc: int | None  # exit status after SIGINT, when timed out
    leftover_pids: list[int]  # processes of the session alive at the end
    json: dict[str, Any] | None


def session_pids(sid: int) -> list[int]:
    """Live processes whose session id is ``sid`` (from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # After "pid (comm)": state ppid pgrp session tty_nr ... (proc(5)).
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def _kill_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_gone(sid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = session_pids(sid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def run_replay(
    args: list[str],
    *,
    timeout: float,
    json_path: Path | None = None,
    interrupt_grace: float = 60.0,
    started: Callable[[], bool] | None = None,
    startup_timeout: float = 600.0,
    tmpdir: Path | None = None,
) -> ReplayProcess:
    """Run ``python -m vllm_ascend_balance.tools.cli replay ARGS`` in a new session.

    When it has not exited after ``timeout`` seconds (a hang; counted from
    the first time ``started()`` is true when given, at most
    ``startup_timeout`` s after the start), send it SIGINT
    (Ctrl-C) and give it ``interrupt_grace`` seconds to stop its engines and
    print what it measured. Whatever of the session is still alive afterwards
    is reported in ``leftover_pids``, then killed by pid so a failing test
    leaves nothing behind. ``tmpdir``: the replay's ``TMPDIR``, as in a new
    shell (no ``VLLM_RPC_BASE_PATH`` from the suite's process).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
        env.pop(BASE_PATH_ENV, None)
    cmd = [sys.executable, "-m", "vllm_ascend_balance.tools.cli", "replay", *args]
    if json_path is not None:
        cmd += ["--json", str(json_path)]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    sid = proc.pid
    timed_out = False
    interrupted_rc = None
    try:
        finished: tuple[str, str] | None = None
        if started is not None:
            # The hang clock starts once the engines are up: start-up time
            # follows the host's load, a hang does not.
            limit = time.monotonic() + startup_timeout
            while finished is None and not started() and time.monotonic() < limit:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    finished = proc.communicate(timeout=1.0)
        out, err = finished or proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=interrupt_grace)
            interrupted_rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    leftover = _wait_gone(sid, 15.0)
    if leftover:
        _kill_pids(leftover, signal.SIGKILL)
        _wait_gone(sid, 10.0)
    data = None
    if json_path is not None and json_path.exists():
        data = json.loads(json_path.read_text())
    return ReplayProcess(
        None if timed_out else proc.returncode,
        out,
        err,
        timed_out,
        interrupted_rc,
        leftover,
        data,
    )


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_rank_at_cap(cap: int) -> list[dict[str, Any]]:
    """DP 2 rows: rank 0 gets ``cap + 2`` long requests at once (it stays at
    the cap); rank 1 a short request every 0.3 modeled s, which a gate holds
    while rank 0 is at the cap (``cap + 10`` requests in all)."""
    rows = [
        {"arrival_s": 0.0, "prompt_tokens": 64, "output_tokens": 60, "rank": 0}
        for _ in range(cap + 2)
    ]
    rows += [
        {"arrival_s": round(0.1 + 0.3 * i, 3), "prompt_tokens": 32,
         "output_tokens": 4, "rank": 1}
        for i in range(8)
    ]  # fmt: skip
    return sorted(rows, key=lambda r: r["arrival_s"])


def skewed_waves(
    dp_size: int,
    *,
    waves: int,
    gap_s: float,
    heavy: int,
    heavy_tokens: tuple[int, int] = (24, 48),
) -> list[dict[str, Any]]:
    """JSONL rows: ``waves`` waves ``gap_s`` modeled seconds apart. In wave
    w the heavy rank is ``w % dp_size``: it gets ``heavy`` requests with
    ``heavy_tokens`` outputs; the next rank gets one short request; the
    other ranks none (they only run dummy batches until the wave ends)."""
    rows: list[dict[str, Any]] = []
    for w in range(waves):
        base = w * gap_s
        hot = w % dp_size
        lo, hi = heavy_tokens
        for i in range(heavy):
            rows.append(
                {
                    "arrival_s": round(base + 0.01 * i, 3),
                    "prompt_tokens": 64 + 97 * ((w + i) % 7),
                    "output_tokens": lo + (hi - lo) * ((w * 7 + i * 3) % 5) // 4,
                    "rank": hot,
                }
            )
        rows.append(
            {
                "arrival_s": round(base + 0.005, 3),
                "prompt_tokens": 32,
                "output_tokens": 2 + w % 3,
                "rank": (hot + 1) % dp_size,
            }
        )
    rows.sort(key=lambda r: r["arrival_s"])
    return rows


def load_run_records(run_dir: Path, mode: str, dp_size: int) -> dict[int, RankFile]:
    """Each rank's records of the first run of ``mode`` kept in ``run_dir``."""
    return {
        rank: read_rank_file(rank_file(run_dir / f"{run_slug(mode)}-1", rank))
        for rank in range(dp_size)
    }
