# SPDX-License-Identifier: Apache-2.0
"""A stalled DP peer is reported (issue 19): the stall watchdog on real gloo
groups across real spawned processes.

Two spawned processes each play one DP rank, built as in
tests/test_gather_cadence.py: vLLM's own ``stateless_init_dp_group()``, a
real ``Scheduler`` with the balance mixin, vLLM's ``DPEngineCoreProc`` with
the package's hook, stepped as ``run_busy_loop`` does. The engine's config
sets ``balance_stall_warning_s`` to :data:`THRESHOLD_S`; each rank writes
its metrics files to a shared directory and its ``vllm.vllm_ascend_balance``
log records to a file.

- Stalled peer: after a few steps rank 1 parks, the test SIGSTOPs it and
  lets rank 0 enter the next gather, where it waits. Rank 0 must log a
  WARNING naming DP rank 0 and its wait so far, the first within the
  threshold plus one interval (= the threshold) of the gather's start,
  by its own clock, and again while the stall lasts; the gauge
  ``vllm:balance_gather_wait_seconds{engine="0"}`` must read at least the
  threshold meanwhile. After SIGCONT every rank finishes its steps, rank 0
  logs that the gather completed and the gauge returns to 0.
- Negative control: the same run without the stop logs no stall warning on
  any rank and the gauge never reaches the threshold.

Timeouts are hang guards only; the one timed bound is the one above, read
from the warning's own numbers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.processes import join_processes, start_processes
from tests.support.scratch import exit_without_teardown
from vllm_ascend_balance.wiring import config, config_read

pytestmark = [
    # Release only: the stalled-peer runs measure the watchdog (ours) on torch's
    # gloo; the setting tests read stand-in configs. No vLLM code decides.
    pytest.mark.lane_scope("release"),
    pytest.mark.multiproc,
]

# Seconds. Loose enough that a loaded host's scheduling delays (a healthy
# gather's wait, the watchdog thread's wake-up) stay far inside it: the
# watchdog's sampling interval scales with it (first warning within 2x).
THRESHOLD_S = 3.0
STEPS = 12
STOP_AT = 6  # rank 1 parks before this step's gather
HANG_GUARD_S = 240.0
WARNING = re.compile(r"DP rank (\d+) has waited ([0-9.]+) s in the balance gather")
WAIT_GAUGE = "vllm:balance_gather_wait_seconds"


def _rank_main(rank: int, parallel_config: Any, workdir: str, park: bool) -> None:
    """One DP rank (module docstring)."""
    import logging

    from vllm.distributed.utils import (
        stateless_destroy_torch_distributed_process_group,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import DPEngineCoreProc

    from tests.support.model_outputs import fake_model_output
    from tests.support.vllm_objects import make_request, make_scheduler
    from vllm_ascend_balance.observability import metrics_dirs
    from vllm_ascend_balance.wiring import composition
    from vllm_ascend_balance.wiring.engine_hook import install_gather_hook

    work = Path(workdir)
    os.environ[metrics_dirs.METRICS_DIR_ENV] = str(work / "metrics")
    handler = logging.FileHandler(work / f"rank{rank}.log")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    package_logger = logging.getLogger("vllm.vllm_ascend_balance")
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)

    parallel_config.data_parallel_rank = rank
    parallel_config.data_parallel_rank_local = rank
    group = parallel_config.stateless_init_dp_group()
    scheduler: Any = make_scheduler(
        composition.compose_scheduler(Scheduler), max_num_seqs=3, num_blocks=400
    )
    install_gather_hook(DPEngineCoreProc)
    engine: Any = DPEngineCoreProc.__new__(DPEngineCoreProc)  # no executor, no ZMQ
    engine.scheduler = scheduler
    engine.dp_group = group
    engine.dp_rank = rank
    engine.step_counter = 0
    engine.pending_pause = False
    engine.ignore_start_dp_wave = False
    # 0.34 reads it after its all-reduce (fault tolerance off here).
    engine.enable_fault_tolerance = False
    engine.dp_sync_interval = getattr(parallel_config, "dp_sync_interval", None)
    engine.vllm_config = SimpleNamespace(
        parallel_config=parallel_config,
        additional_config={
            "scheduler_config": {
                "enable_balance_scheduling": True,
                "balance_stall_warning_s": THRESHOLD_S,
            }
        },
    )
    for i in range(4):
        scheduler.add_request(make_request(f"r{rank}-{i}", 8, 40))
    for index in range(STEPS):
        if park and rank == 1 and index == STOP_AT:
            # The test stops this process here, then creates "go".
            (work / "parked").touch()
            while not (work / "go").exists():
                time.sleep(0.02)
        output = scheduler.schedule()
        scheduler.update_from_output(output, fake_model_output(scheduler, output))
        engine._has_global_unfinished_reqs(scheduler.has_requests())
    watchdog = engine._balance_watchdog
    # Two samples after the last gather: the gauge is back at 0.
    time.sleep(2 * THRESHOLD_S)
    watchdog.stop()
    (work / f"rank{rank}.json").write_text(
        json.dumps(
            {"warnings": watchdog.warnings, "gathers": scheduler.balance_gathers}
        )
    )
    handler.flush()
    stateless_destroy_torch_distributed_process_group(group)
    exit_without_teardown()


def _wait_gauges(metrics_dir: Path) -> dict[str, float]:
    """``engine`` label -> current value of the wait gauge."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return {
        sample.labels["engine"]: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == WAIT_GAUGE
    }


def _warnings(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    return [
        (int(m.group(1)), float(m.group(2))) for m in WARNING.finditer(path.read_text())
    ]


def _start(tmp_path: Path, park: bool) -> list[Any]:
    from vllm.config import ParallelConfig

    (tmp_path / "metrics").mkdir()
    parallel_config = ParallelConfig(
        data_parallel_size=2, data_parallel_master_ip="127.0.0.1"
    )
    return start_processes(
        _rank_main, [(rank, parallel_config, str(tmp_path), park) for rank in (0, 1)]
    )


def _poll(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"hang guard: {what}")


def test_stalled_peer_is_reported(tmp_path: Path) -> None:
    procs = _start(tmp_path, park=True)
    try:
        _poll(lambda: (tmp_path / "parked").exists(), "rank 1 never parked")
        os.kill(procs[1].pid, signal.SIGSTOP)
        (tmp_path / "go").touch()
        log0 = tmp_path / "rank0.log"
        seen = _poll(
            lambda: len(_warnings(log0)) >= 2 and _warnings(log0), "no warning"
        )
        gauge = _wait_gauges(tmp_path / "metrics").get("0", 0.0)
    finally:
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGCONT)
    joined = join_processes(procs, HANG_GUARD_S)
    assert not joined.hung and joined.exitcodes == [0, 0], joined

    (rank, first), (_, second) = seen[:2]
    assert rank == 0
    assert THRESHOLD_S <= first <= 2 * THRESHOLD_S, seen  # threshold + 1 interval
    assert second >= 2 * THRESHOLD_S, seen  # repeated while the wait lasts
    assert gauge >= THRESHOLD_S, gauge
    text = log0.read_text()
    assert "WARNING balance scheduling: DP rank 0 has waited" in text
    assert "DP rank 0: the stalled gather completed" in text
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["gathers"] == results[1]["gathers"] == STEPS
    assert results[1]["warnings"] == 0  # the stopped rank never waited
    assert _wait_gauges(tmp_path / "metrics") == {"0": 0.0, "1": 0.0}


def test_negative_control_healthy_run_warns_nothing(tmp_path: Path) -> None:
    procs = _start(tmp_path, park=False)
    joined = join_processes(procs, HANG_GUARD_S)
    assert not joined.hung and joined.exitcodes == [0, 0], joined
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result == {"warnings": 0, "gathers": STEPS}
        assert _warnings(tmp_path / f"rank{rank}.log") == []
    assert all(v < THRESHOLD_S for v in _wait_gauges(tmp_path / "metrics").values())


# --------------------------------------------------------------------------
# The setting (validated like balance_max_frozen_steps) and the thread


def _config(value: Any) -> Any:
    section: dict[str, Any] = {"enable_balance_scheduling": True}
    if value != "absent":
        section["balance_stall_warning_s"] = value
    return SimpleNamespace(additional_config={"scheduler_config": section})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("absent", config.DEFAULT_STALL_WARNING_S),
        (None, config.DEFAULT_STALL_WARNING_S),
        (0, None),
        (0.0, None),
        (0.5, 0.5),
        (60, 60.0),
    ],
)
def test_stall_setting_accepted(value: Any, expected: float | None) -> None:
    assert config_read.read_stall_warning_s(_config(value)) == expected
    assert config_read.read_balance_setting(_config(value)).stall_warning_s == expected


@pytest.mark.parametrize("value", [-1, -0.5, True, False, "60", [], {}, float("inf")])
def test_stall_setting_bad_value_is_a_one_line_error(value: Any) -> None:
    with pytest.raises(config.BalanceConfigError) as info:
        config_read.read_balance_setting(_config(value))
    message = str(info.value)
    assert "\n" not in message
    for needle in (config.STALL_SETTING, "or 0", config.STALL_EXAMPLE):
        assert needle in message, (needle, message)


def test_a_misspelled_stall_key_is_refused() -> None:
    cfg = _config("absent")
    cfg.additional_config["scheduler_config"]["balance_stall_warning"] = 5
    with pytest.raises(config.BalanceConfigError, match="balance_stall_warning_s"):
        config_read.read_balance_setting(cfg)


def test_watchdog_off_starts_no_thread() -> None:
    """Negative control for the setting's ``0``: no thread, so nothing can
    ever be reported (and nothing costs more than the two writes)."""
    from vllm_ascend_balance.observability.stall import StallWatchdog

    before = threading.active_count()
    dog = StallWatchdog(dp_rank=3, threshold_s=None)
    dog.started = time.monotonic() - 3600.0  # an hour-long "wait"
    assert threading.active_count() == before
    dog.stop()
    assert dog.warnings == 0
