# SPDX-License-Identifier: Apache-2.0
"""The gather under vLLM 0.34's fault-tolerance early return, on real gloo
groups across real processes (issue 45).

From 0.34, ``DPEngineCoreProc._has_global_unfinished_reqs`` returns True
right after its all-reduce when fault tolerance is on and the DP
coordinator is disabled (``ft_sentinel.coordinator_disabled``: a
``scale_down`` committed dead ranks), instead of the all-reduced answer.
The package's hook wraps the whole method and gathers after it returns,
whichever ``return`` it took, so that path cannot make ranks disagree on
the number of gathers.

Two ranks, spawned; the engine is vLLM's ``DPEngineCoreProc`` allocated
without ``__init__`` and given what the method reads (as in
``tests/test_gather_cadence.py``); rank 0 takes the early-return path
(``enable_fault_tolerance`` on, a sentinel whose ``coordinator_disabled``
is True: only the attribute the method reads is stubbed, there is no FT
machinery to run here), rank 1 does not. Every step each rank calls the
method once, as ``run_busy_loop`` does.

- The package's hook: both ranks finish, gather once per step, receive the
  same vectors; rank 0's answers show the early return was taken.
- Negative control: a hook that skips the gather when the method left by
  the fault-tolerance return (the gather placed before that ``return``)
  leaves rank 1 in a gather rank 0 never joins: it hangs (or gloo fails it
  once rank 0 exits) and never finishes its steps.

No timed assertions: the timeouts only detect hangs.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.processes import run_processes
from tests.support.scratch import exit_without_teardown

pytestmark = [pytest.mark.lane_scope("fork"), pytest.mark.multiproc]

STEPS = 12
CAP = 2
JOIN_TIMEOUT_S = 240.0  # hang guard only
NEGATIVE_TIMEOUT_S = 90.0  # hang guard only (the known-bad run must hang)


def _has_ft_return() -> bool:
    from vllm.v1.engine.core import DPEngineCoreProc

    source = inspect.getsource(DPEngineCoreProc._has_global_unfinished_reqs)
    return "coordinator_disabled" in source


def _skips_on_ft_return(engine_cls: type) -> None:
    """Known-bad hook: gathers only when the method did not take the
    fault-tolerance return (as a gather placed inside the method, before
    that ``return``, would)."""
    from vllm_ascend_balance.wiring.engine_hook import HOOKED, gather_after_sync

    original = engine_cls.__dict__[HOOKED]

    def _has_global_unfinished_reqs(self: Any, local_unfinished: bool) -> bool:
        result = original(self, local_unfinished)
        if not (self.enable_fault_tolerance and self.ft_sentinel.coordinator_disabled):
            gather_after_sync(self, bool(result))
        return result

    setattr(engine_cls, HOOKED, _has_global_unfinished_reqs)


def _rank_main(rank: int, parallel_config: Any, bad: bool, out_path: str) -> None:
    from vllm.distributed.utils import (
        stateless_destroy_torch_distributed_process_group,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import DPEngineCoreProc

    from tests.support.model_outputs import fake_model_output
    from tests.support.vllm_objects import make_request, make_scheduler
    from vllm_ascend_balance.wiring import composition
    from vllm_ascend_balance.wiring.engine_hook import install_gather_hook

    parallel_config.data_parallel_rank = rank
    parallel_config.data_parallel_rank_local = rank
    group = parallel_config.stateless_init_dp_group()
    scheduler: Any = make_scheduler(
        composition.compose_scheduler(Scheduler), max_num_seqs=CAP
    )
    if bad:
        _skips_on_ft_return(DPEngineCoreProc)
    else:
        install_gather_hook(DPEngineCoreProc)
    engine: Any = DPEngineCoreProc.__new__(DPEngineCoreProc)  # no __init__
    engine.scheduler = scheduler
    engine.dp_group = group
    engine.step_counter = 0
    engine.pending_pause = False
    engine.ignore_start_dp_wave = False
    engine.dp_sync_interval = getattr(parallel_config, "dp_sync_interval", None)
    engine.vllm_config = SimpleNamespace(parallel_config=parallel_config)
    engine.enable_fault_tolerance = rank == 0
    engine.ft_sentinel = SimpleNamespace(coordinator_disabled=rank == 0)

    records = []
    # Rank 0 gets one request, rank 1 three (cap 2): rank 1 leads at the cap.
    for i in range(1 if rank == 0 else 3):
        scheduler.add_request(make_request(f"r{rank}-{i}", 8, STEPS + 8))
    for index in range(STEPS):
        output = scheduler.schedule()
        scheduler.update_from_output(
            output, fake_model_output(scheduler, output, index)
        )
        answer = engine._has_global_unfinished_reqs(scheduler.has_requests())
        gathered = scheduler.balance_gathered
        records.append(
            {
                "answer": bool(answer),
                "gathers": scheduler.balance_gathers,
                "vector": None if gathered is None else gathered.tolist(),
                "frozen": bool(scheduler.balance_frozen),
            }
        )
    Path(out_path).write_text(json.dumps(records))
    stateless_destroy_torch_distributed_process_group(group)
    exit_without_teardown()


def _run(tmp_path: Path, bad: bool, timeout: float) -> Any:
    from vllm.config import ParallelConfig

    config = ParallelConfig(data_parallel_size=2, data_parallel_master_ip="127.0.0.1")
    paths = [tmp_path / f"rank{rank}.json" for rank in range(2)]
    joined = run_processes(
        _rank_main,
        [(rank, config, bad, str(paths[rank])) for rank in range(2)],
        timeout,
    )
    return joined, paths


@pytest.fixture(autouse=True)
def _needs_the_ft_return() -> None:
    if not _has_ft_return():
        pytest.skip("this release's _has_global_unfinished_reqs has no FT return")


def test_gather_stays_in_step_when_one_rank_takes_the_ft_return(tmp_path: Path):
    joined, paths = _run(tmp_path, bad=False, timeout=JOIN_TIMEOUT_S)
    assert not joined.hung, f"ranks {joined.hung} hung"
    assert joined.exitcodes == [0, 0]
    ranks = [json.loads(path.read_text()) for path in paths]
    for records in ranks:
        assert [r["gathers"] for r in records] == list(range(1, STEPS + 1))
    assert [r["vector"] for r in ranks[0]] == [r["vector"] for r in ranks[1]]
    assert [r["frozen"] for r in ranks[0]] == [r["frozen"] for r in ranks[1]]
    assert any(r["frozen"] for r in ranks[0])  # rank 1 led at the cap
    # Rank 0 took the FT return: True on every step, sync steps included.
    assert all(r["answer"] for r in ranks[0])


def test_negative_control_gather_skipped_on_the_ft_return_hangs(tmp_path: Path):
    joined, paths = _run(tmp_path, bad=True, timeout=NEGATIVE_TIMEOUT_S)
    # Rank 1 waits in a gather rank 0 never joins: it hangs, or gloo fails
    # it once rank 0 has exited; either way it never finishes its steps.
    assert 1 in joined.hung or joined.exitcodes[1] != 0, joined
    assert not paths[1].exists()
