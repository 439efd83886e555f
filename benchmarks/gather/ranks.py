# SPDX-License-Identifier: Apache-2.0
"""The timed ranks of ``benchmarks/bench_gather.py``: ``dp_size`` spawned
processes on one real gloo DP group (vLLM's ``stateless_init_dp_group()``),
each with a real balance scheduler, timing the gather, the log-depth
exchange and upstream's DP sync in alternating blocks; the parent checks
that every rank gathered every payload."""

from __future__ import annotations

import gc
import inspect
import json
import logging
import multiprocessing
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm.config import ParallelConfig
from vllm.v1.engine.core import DPEngineCoreProc

from vllm_ascend_balance.gate import bound
from vllm_ascend_balance.gate.collectives import gather_rows, reduce_signals
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.gate.signals import layout

LOOPBACK = "127.0.0.1"
CAP = 16  # max_num_seqs; the payload is a rank's running count (< CAP)
#: The contract's signals (the largest and smallest running count), as the
#: log-depth exchange carries them.
EXTREMES = layout(())
#: The recommended opt-in's quantities (``throttled`` with its hold bound):
#: its rows on the all-gather (``balance_collective: all_gather``).
WIDE = bound.plan(GateSettings("throttled")).layout
BLOCK = 50  # calls per timed block; gather and sync blocks alternate
FALLBACK_SYNC_INTERVAL = 32  # upstream's literal before the setting existed
JOIN_TIMEOUT_S = 600  # hang guard only


def sync_interval(parallel_config: Any) -> tuple[int, str]:
    """Steps between upstream's DP syncs in the installed release, and where
    the number comes from (introspection, no version check)."""
    for owner in (parallel_config, DPEngineCoreProc):
        value = getattr(owner, "dp_sync_interval", None)
        if isinstance(value, int) and value > 0:
            name = owner.__name__ if isinstance(owner, type) else type(owner).__name__
            return value, f"{name}.dp_sync_interval"
    try:
        source = inspect.getsource(DPEngineCoreProc._has_global_unfinished_reqs)
    except (OSError, TypeError):
        source = ""
    match = re.search(r"step_counter\s*%\s*(\d+)", source)
    if match:
        return int(match[1]), "literal in DPEngineCoreProc._has_global_unfinished_reqs"
    return FALLBACK_SYNC_INTERVAL, "fallback"


def _rank_main(
    rank: int, parallel_config: Any, warmup: int, calls: int, out_path: str
) -> None:
    """One DP rank: build the scheduler and group, time both collectives."""
    logging.disable(logging.WARNING)
    from vllm.distributed.utils import (
        stateless_destroy_torch_distributed_process_group,
    )
    from vllm.v1.core.sched.scheduler import Scheduler

    from tests.support.scratch import exit_without_teardown
    from tests.support.vllm_objects import make_request, make_scheduler
    from vllm_ascend_balance.wiring.composition import compose_scheduler

    scheduler: Any = make_scheduler(
        compose_scheduler(Scheduler), max_num_seqs=CAP, num_blocks=400
    )
    # A distinct, non-empty payload per rank: rank + 1 running requests.
    for i in range(rank + 1):
        scheduler.add_request(make_request(f"r{rank}-{i}", 8, max_tokens=64))
    scheduler.schedule()
    payload = len(scheduler.running)

    parallel_config.data_parallel_rank = rank
    parallel_config.data_parallel_rank_local = rank
    group = parallel_config.stateless_init_dp_group()
    try:
        scheduler.dp_group = group
        # Bound through the instance: a staticmethod in older releases, an
        # instance method (it reads the config's timeout) in newer ones.
        sync = parallel_config.sync_dp_state

        def gather_once() -> None:
            scheduler.admission_gather()

        def sync_once() -> None:
            sync(group, has_unfinished=True, pending_pause=False)

        holder = type("Holder", (), {})()  # the log-depth exchange's buffers
        extremes: list[tuple[int, int]] = []

        def reduce_once() -> None:
            view = reduce_signals(holder, group, EXTREMES, (payload,), CAP)
            extremes.append((view.leader, view.lowest))

        # The recommended opt-in's quantities (len(running) first): the same
        # all_gather with a wider tensor per rank.
        wide = type("Holder", (), {"balance_gathered": None})()
        row = (payload, rank % 2, 0, 0, 0)
        assert len(row) == len(WIDE.quantities)

        def flags_once() -> None:
            gather_rows(wide, group, WIDE, row, CAP)

        for _ in range(warmup):
            gather_once()
            sync_once()
            reduce_once()
            flags_once()
        gc.collect()
        gc.freeze()
        gc.disable()  # no collection inside a timed call
        times: dict[str, list[int]] = {
            "gather": [],
            "sync": [],
            "reduce": [],
            "flags": [],
        }
        fns = {
            "gather": gather_once,
            "sync": sync_once,
            "reduce": reduce_once,
            "flags": flags_once,
        }
        clock = time.perf_counter_ns
        try:
            for block in range(max(calls // BLOCK, 1)):
                names = ("gather", "sync", "reduce", "flags")
                order = names[block % 4 :] + names[: block % 4]  # rotate
                for name in order:
                    fn, out = fns[name], times[name]
                    for _ in range(BLOCK):
                        start = clock()
                        fn()
                        out.append(clock() - start)
        finally:
            gc.enable()
            gc.unfreeze()
        vector = scheduler.balance_gathered.tolist()
        gathers = scheduler.balance_gathers
    finally:
        # As DPEngineCoreProc.shutdown() does; without it teardown lingers.
        stateless_destroy_torch_distributed_process_group(group)
    Path(out_path).write_text(
        json.dumps(
            {
                "rank": rank,
                "payload": payload,
                "vector": vector,
                "gathers": gathers,
                "gather_us": statistics.median(times["gather"]) / 1e3,
                "sync_us": statistics.median(times["sync"]) / 1e3,
                "reduce_us": statistics.median(times["reduce"]) / 1e3,
                "flags_us": statistics.median(times["flags"]) / 1e3,
                "extremes": sorted(set(extremes)),
                "samples": len(times["gather"]),
            }
        )
    )
    exit_without_teardown()  # torch's teardown may abort; our scratch goes


def run_dp(dp_size: int, warmup: int, calls: int) -> tuple[list[dict], Any]:
    """Spawn ``dp_size`` ranks on one real gloo DP group; their results."""
    parallel_config = ParallelConfig(
        data_parallel_size=dp_size, data_parallel_master_ip=LOOPBACK
    )
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="vab-bench-gather-") as tmp:
        paths = [Path(tmp) / f"rank{rank}.json" for rank in range(dp_size)]
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(rank, parallel_config, warmup, calls, str(paths[rank])),
                daemon=True,
            )
            for rank in range(dp_size)
        ]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        try:
            for proc in procs:
                proc.join(max(deadline - time.monotonic(), 0))
        finally:
            hung = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
            for rank in hung:
                procs[rank].kill()
                procs[rank].join()
        if hung:
            raise SystemExit(f"error: DP {dp_size}: ranks {hung} hung")
        codes = [proc.exitcode for proc in procs]
        if codes != [0] * dp_size:
            raise SystemExit(f"error: DP {dp_size}: rank exit codes {codes}")
        results = [json.loads(path.read_text()) for path in paths]
    # The gathers really crossed the processes: every rank holds every
    # rank's payload, in rank order, after warm-up plus timed calls.
    payloads = [r["payload"] for r in results]
    for r in results:
        if r["vector"] != payloads or r["gathers"] != warmup + r["samples"]:
            raise SystemExit(f"error: DP {dp_size}: rank {r['rank']} gathered {r}")
        # The log-depth exchange found the same extremes on every call.
        if r["extremes"] != [[max(payloads), min(payloads)]]:
            raise SystemExit(f"error: DP {dp_size}: rank {r['rank']} reduced {r}")
    return results, parallel_config
