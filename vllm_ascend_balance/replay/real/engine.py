# SPDX-License-Identifier: Apache-2.0
"""The real engine of the replay: a vLLM ``AsyncLLM`` DP deployment on CPU.

Started the way ``vllm serve`` starts it: ``AsyncLLM`` with
``data_parallel_size`` N spawns the DP coordinator and one
``DPEngineCoreProc`` per rank; our plugin is activated by vLLM through its
``vllm.general_plugins`` entry point, balance scheduling by
``additional_config``. The executor is
:class:`~vllm_ascend_balance.replay.real.executor.CostModelExecutor`, which writes
the per-rank records this engine joins into
:class:`~vllm_ascend_balance.replay.pipeline.records.RunRecords`.

One run: start the deployment; warm it up (a few short requests per rank,
not measured, so no run pays the front-end's or the engines' first-request
cost); send the workload at its arrival times on the engines' modeled
clock (:mod:`.modeled_clock`: when rank 0's modeled time reaches
``arrival_s``, so a loaded host's slower steps do not crowd more arrivals
into each step) as token prompts, with ``ignore_eos`` and ``max_tokens`` =
the request's output length; stop the deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model
from vllm_ascend_balance.replay.pipeline.join import REQUEST_ID, join_run
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
from vllm_ascend_balance.replay.pipeline.paths import claim, run_slug
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest, Workload
from vllm_ascend_balance.replay.real.checks import check_recording
from vllm_ascend_balance.replay.real.deployment import (
    engine_args,
    one_line,
    prompt_ids,
    route,
)
from vllm_ascend_balance.replay.real.interrupts import (
    Interrupts,
    StartupInterrupted,
    reap_children,
)
from vllm_ascend_balance.replay.real.modeled_clock import (
    ClockBoard,
    clock_path,
    modeled_now,
)
from vllm_ascend_balance.replay.real.recorder import rank_file, read_rank_file

logger = init_logger(__name__)

#: Warm-up requests: short, pinned to each rank in turn.
WARMUP_PROMPT_TOKENS = 32
WARMUP_OUTPUT_TOKENS = 4
#: How often the sender reads the modeled clock while waiting (wall s).
CLOCK_POLL_S = 0.002


class AsyncLLMEngine:
    """:class:`~vllm_ascend_balance.replay.pipeline.engine.ReplayEngine` on a real
    ``AsyncLLM`` deployment (see the module docstring)."""

    def run(
        self, workload: Workload, mode: Mode, options: ReplayOptions, repeat: int
    ) -> RunRecords:
        work = Path(options.run_dir) if options.run_dir else None
        if work is None:
            raise ValueError("AsyncLLMEngine needs options.run_dir (a work dir)")
        claim(work / "model")  # ours: a later run may replace it
        run_dir = work / f"{run_slug(mode.label)}-{repeat + 1}"
        shutil.rmtree(run_dir, ignore_errors=True)  # an earlier run's records
        claim(run_dir)
        records = RunRecords(mode, repeat, options.dp)
        if mode.peer:  # no seam or bad knobs: one line here, not an engine's trace
            from vllm.v1.core.sched.scheduler import Scheduler

            from vllm_ascend_balance.replay.real.peer_gate import peer_scheduler_class

            peer_scheduler_class(Scheduler, mode.peer, lambda: 0.0)
        routes = [route(r, options) for r in workload.requests]
        late = asyncio.run(
            _deploy_and_send(workload, mode, options, run_dir, routes, records)
        )
        records.wall_send_late_s = late
        files = [read_rank_file(rank_file(run_dir, r)) for r in range(options.dp)]
        check_recording(files, records)
        records.starts = [s for f in files for s in f.starts[:1]]
        records.gathers = [f.gathers for f in files]
        records.steps, records.requests = join_run(
            workload.requests,
            [r is None for r in routes],
            [f.steps for f in files],
            [f.requests for f in files],
        )
        return records


async def _deploy_and_send(
    workload: Workload,
    mode: Mode,
    options: ReplayOptions,
    run_dir: Path,
    routes: list[int | None],
    records: RunRecords,
) -> float:
    """Start, warm up, replay, stop; sets ``records.status``/``cause`` and
    the wall diagnostics; returns the largest send lateness (wall s)."""
    from tqdm import tqdm
    from vllm.v1.engine.async_llm import AsyncLLM

    interrupts = Interrupts()
    interrupts.install()
    model = write_tiny_moe_model(run_dir.parent / "model", options.max_model_len)
    # Engine processes are spawned and configure vLLM logging from the env;
    # both are restored afterwards (the caller may start other vLLM servers).
    saved_env = os.environ.get("VLLM_LOGGING_LEVEL")
    vllm_logger = logging.getLogger("vllm")
    saved_level = vllm_logger.level
    os.environ["VLLM_LOGGING_LEVEL"] = options.log_level
    vllm_logger.setLevel(options.log_level)
    llm: Any = None
    late = 0.0
    started = time.monotonic()
    # Before the engines start: rank 0's executor maps it at start-up.
    board = ClockBoard(clock_path(run_dir), create=True)
    try:
        args = engine_args(options, mode, run_dir, model)
        with interrupts.engine_startup():
            llm = AsyncLLM.from_engine_args(args)
        records.wall_startup_s = time.monotonic() - started
        await _warm_up(llm, options)
        with tqdm(
            total=len(workload.requests),
            desc=f"{mode.label} run {records.repeat + 1}",
            unit="req",
            disable=None,  # no bar when stderr is not a terminal
            file=sys.stderr,
        ) as bar:
            late = await _send_all(llm, workload.requests, routes, options, bar, board)
        # Shut down idle engines: SIGTERM does not interrupt a rank blocked
        # in the lock-step collective of a dummy batch whose peer already
        # exited, and vLLM would force-kill it after its grace period.
        await _wave_end(options)
    except (asyncio.CancelledError, KeyboardInterrupt, StartupInterrupted):
        records.status = RunStatus.INTERRUPTED
    except Exception as exc:  # start-up failure, or an engine died
        records.status, records.cause = RunStatus.FAILED, one_line(exc)
    finally:
        if interrupts.interrupted:  # engines that died of the Ctrl-C
            records.status, records.cause = RunStatus.INTERRUPTED, interrupts.cause
        records.wall_run_s = time.monotonic() - started
        if llm is not None:
            try:
                llm.shutdown()
            except Exception:  # already dead: fall through to the reaper
                logger.debug("AsyncLLM.shutdown failed", exc_info=True)
        reaped = reap_children()
        if reaped:
            logger.debug("reaped leftover processes %s", reaped)
        interrupts.uninstall()
        board.close()
        vllm_logger.setLevel(saved_level)
        if saved_env is None:
            os.environ.pop("VLLM_LOGGING_LEVEL", None)
        else:
            os.environ["VLLM_LOGGING_LEVEL"] = saved_env
    return late


async def _generate(
    llm: Any, request_id: str, ids: list[int], max_tokens: int, rank: int | None
) -> None:
    from vllm.inputs import tokens_input
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    params = SamplingParams(
        max_tokens=max_tokens,
        ignore_eos=True,
        output_kind=RequestOutputKind.DELTA,
        detokenize=False,
    )
    async for _ in llm.generate(
        tokens_input(ids), params, request_id, data_parallel_rank=rank
    ):
        pass


async def _warm_up(llm: Any, options: ReplayOptions) -> None:
    """``options.warmup`` short requests per rank, then the idle steps that
    end their wave, so the workload starts on an idle, warm deployment."""
    if options.warmup == 0:
        return
    await asyncio.gather(
        *(
            _generate(
                llm,
                f"warmup-{rank}-{i}",
                prompt_ids(-1 - i, WARMUP_PROMPT_TOKENS),
                WARMUP_OUTPUT_TOKENS,
                rank,
            )
            for rank in range(options.dp)
            for i in range(options.warmup)
        )
    )
    await _wave_end(options)


async def _wave_end(options: ReplayOptions) -> None:
    """Wait until the DP ranks have agreed that the wave is over: vLLM's DP
    sync (``_has_global_unfinished_reqs``) all-reduces at least every 32
    steps, and the ranks run dummy batches until then (twice that, for loop
    overhead on a busy host)."""
    await asyncio.sleep(64 * options.cost.step_ms / 1e3 * options.time_scale + 0.5)


async def _send_all(
    llm: Any,
    requests: list[ReplayRequest],
    routes: list[int | None],
    options: ReplayOptions,
    bar: Any,
    board: ClockBoard,
) -> float:
    """Send every request when the engines' modeled clock reaches its
    arrival (:func:`~.modeled_clock.modeled_now`) and wait for all; the
    first failure (an engine died) raises. Returns the largest send
    lateness (wall s: modeled lateness times the time scale)."""
    late = 0.0
    in_flight = 0
    gates = [asyncio.Event() for _ in requests]

    async def dispatch() -> None:
        nonlocal late, in_flight
        scale = options.time_scale
        board.start(time.monotonic() + 0.2)  # a lead: the first ones on time
        for i in sorted(range(len(requests)), key=lambda k: requests[k].arrival_s):
            due = requests[i].arrival_s
            while True:
                now = modeled_now(
                    board.snapshot(), time.monotonic(), in_flight > 0, scale
                )
                if now >= due:
                    break
                await asyncio.sleep(min(max((due - now) * scale, 1e-4), CLOCK_POLL_S))
            late = max(late, (now - due) * scale)
            in_flight += 1
            gates[i].set()

    async def one(i: int, req: ReplayRequest, rank: int | None) -> None:
        nonlocal in_flight
        await gates[i].wait()
        ids = prompt_ids(req.index, req.prompt_tokens)
        try:
            await _generate(
                llm, REQUEST_ID.format(req.index), ids, req.output_tokens, rank
            )
        finally:
            in_flight -= 1
        bar.update(1)

    tasks = [asyncio.create_task(dispatch())] + [
        asyncio.create_task(one(i, r, rank))
        for i, (r, rank) in enumerate(zip(requests, routes, strict=True))
    ]
    try:
        pending: set[asyncio.Task] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(
                pending, return_when=asyncio.FIRST_EXCEPTION
            )
            for task in done:
                task.result()  # raises the first failure
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
    return late
