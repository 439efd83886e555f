# SPDX-License-Identifier: Apache-2.0
"""``--engine sim``: the replay's engine stage on the simulated engine.

:class:`SimEngine` is the second
:class:`~vllm_ascend_balance.replay.pipeline.engine.ReplayEngine`: it runs a workload in
one mode on N real vLLM schedulers stepped in lock step in this process
(:mod:`.fleet`) and hands the same
:class:`~vllm_ascend_balance.replay.pipeline.records.RunRecords` to the metrics as the
real ``AsyncLLM`` deployment, joined on the same modeled clock
(:func:`~vllm_ascend_balance.replay.pipeline.join.join_run`). It is deterministic: the
same workload and options give the same records, so ``--repeat`` runs are
identical.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.environment import interrupt_cause
from vllm_ascend_balance.replay.pipeline.join import join_run
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.pipeline.workload_types import Workload
from vllm_ascend_balance.replay.sim.fleet import SimOptions, simulate

logger = init_logger(__name__)

#: Runs with at least this many requests x ranks show a progress bar.
PROGRESS_MIN_WORK = 20_000


class SimEngineError(ValueError):
    """An option the simulated engine cannot honour (one line)."""


def sim_options(options: ReplayOptions, mode: Mode | None = None) -> SimOptions:
    """The simulated engine's options from the replay's."""
    return SimOptions(
        dp_size=options.dp,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        max_model_len=options.max_model_len,
        cost=options.cost,
        routing=options.routing,
        peer_router=options.peer_router,
        peer_timing=options.peer_timing,
        sglang_passes=options.sglang_passes,
        sglang_defer=options.sglang_defer,
        kv_cache_tokens=options.kv_cache_tokens,
        prefill_schedule_interval=mode.prefill_schedule_interval if mode else None,
    )


def check_mode(mode: Mode) -> None:
    """Refuse what the simulation cannot model with the installed vLLM.

    Raises:
        SimEngineError: ``interval:N`` where the installed
            ``Scheduler.schedule`` has no ``throttle_prefills`` parameter
            (the simulation passes vLLM's prefill throttle through it, as
            ``EngineCore.step`` does).
    """
    if mode.prefill_schedule_interval is None:
        return
    import inspect

    from vllm.v1.core.sched.scheduler import Scheduler

    if "throttle_prefills" not in inspect.signature(Scheduler.schedule).parameters:
        raise SimEngineError(
            f"--mode {mode.label}: the installed vLLM's Scheduler.schedule has no "
            f"throttle_prefills (no prefill_schedule_interval); use a vLLM "
            f"release that has it, or drop interval:N"
        )


class SimEngine:
    """:class:`~vllm_ascend_balance.replay.pipeline.engine.ReplayEngine` on N real
    schedulers in one process (see the module docstring).

    The simulation is deterministic, so a repetition (``--repeat``) of a
    mode already run on the same workload and options reuses its records
    instead of stepping the schedulers again (same numbers, no wall time)."""

    def __init__(self) -> None:
        self._done: dict[tuple[int, tuple[Any, ...], str], RunRecords] = {}

    def run(
        self, workload: Workload, mode: Mode, options: ReplayOptions, repeat: int
    ) -> RunRecords:
        check_mode(mode)
        key = (id(workload), mode.config, repr(options))
        earlier = self._done.get(key)
        if earlier is not None:
            return dataclasses.replace(earlier, mode=mode, repeat=repeat)
        records = self._run(workload, mode, options, repeat)
        if records.status is RunStatus.OK:
            self._done[key] = records
        return records

    def _run(
        self, workload: Workload, mode: Mode, options: ReplayOptions, repeat: int
    ) -> RunRecords:
        records = RunRecords(mode, repeat, options.dp)
        requests = workload.requests
        bar: Any = None
        if len(requests) * options.dp >= PROGRESS_MIN_WORK:
            from tqdm import tqdm

            bar = tqdm(
                total=len(requests),
                desc=f"sim DP {options.dp} balance {mode.label}",
                unit="req",
                file=sys.stderr,
                mininterval=1.0,
                disable=None,  # only on a terminal
            )
        try:
            result = simulate(
                mode.balance,
                requests,
                sim_options(options, mode),
                bounds=mode.bounds(options.balance_max_frozen_steps),
                peer=mode.peer,
                progress=bar.update if bar is not None else None,
            )
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the pipeline's)
            records.status = RunStatus.INTERRUPTED
            records.cause = interrupt_cause(exc)
            return records
        finally:
            if bar is not None:
                bar.close()
        records.starts = result.starts
        records.gathers = result.gathers
        records.wall_startup_s = result.wall_build_s
        records.wall_run_s = result.wall_run_s
        records.steps, records.requests = join_run(
            requests, result.routed_by_vllm, result.rank_steps, result.rank_requests
        )
        return records
