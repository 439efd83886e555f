# SPDX-License-Identifier: Apache-2.0
"""The simulated fleet's lock-step loop: :func:`simulate` steps N real vLLM
schedulers in one process, one ``DPEngineCoreProc.run_busy_loop`` iteration
per rank per step (what is real and what is modeled:
:mod:`vllm_ascend_balance.replay.sim`).

Time is modeled only (no pacing): a request's first token and finish are the
end of the step that produced them. Same input and options, same numbers.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin, admission_cap
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.model.cost import lockstep_ms
from vllm_ascend_balance.replay.model.outputs import Batch, OutputModel
from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model
from vllm_ascend_balance.replay.pipeline.join import REQUEST_ID
from vllm_ascend_balance.replay.pipeline.records import (
    GatherRecord,
    RankRequest,
    RankStart,
    RankStep,
    split_gathered,
)
from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest
from vllm_ascend_balance.replay.sim.adp_routing import AdpRouter
from vllm_ascend_balance.replay.sim.build import (
    PromptPool,
    SimOptions,
    build_schedulers,
    dp_sync_rule,
    make_request,
)
from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard
from vllm_ascend_balance.replay.sim.peer_step import PeerStep
from vllm_ascend_balance.replay.sim.routing import Router
from vllm_ascend_balance.replay.sim.sglang_rounds import SGLangRounds, batch_cost_ms

__all__ = [
    "SimOptions",
    "SimResult",
    "should_throttle_prefills",
    "simulate",
]

logger = init_logger(__name__)


def should_throttle_prefills(interval: int | None, step_counter: int) -> bool:
    """vLLM's ``DPEngineCoreProc._should_throttle_prefills()``: with
    ``prefill_schedule_interval`` N > 1, new prefills wait on every engine
    step whose wave step counter is not a multiple of N. The counter is the
    one ``_has_global_unfinished_reqs`` increments once per busy-loop
    iteration that steps (dummy batches included) and ``run_busy_loop``
    resets when a wave ends, so it is the same on every rank."""
    return interval is not None and interval > 1 and step_counter % interval != 0


@dataclass
class SimResult:
    """What one simulated run produced besides its records.

    Attributes:
        rank_steps: the per-rank records, index = rank (for :func:`join_run`).
        rank_requests: each rank's request records.
        routed_by_vllm: per workload request, whether the balancer chose its
            rank (not pinned, ``vllm`` routing).
        starts: each rank's start record.
        gathers: each rank's gather records (kept for DP <=
            :data:`GATHER_RECORDS_MAX_DP` only: N values per rank per step).
        board_gathers: gathers the DP-group stand-in served, per rank.
        steps: lock-step iterations run.
        wall_build_s, wall_run_s: wall seconds building the schedulers and
            stepping them.
    """

    rank_steps: list[list[RankStep]]
    rank_requests: list[list[RankRequest]]
    routed_by_vllm: list[bool]
    starts: list[RankStart]
    gathers: list[list[GatherRecord]]
    board_gathers: list[int]
    steps: int
    wall_build_s: float
    wall_run_s: float

    @property
    def rank_step_count(self) -> int:
        return self.steps * len(self.rank_steps)


#: Above this DP size no per-gather records are kept (each holds N values).
GATHER_RECORDS_MAX_DP = 8


def simulate(
    balance: bool,
    requests: Sequence[ReplayRequest],
    opts: SimOptions,
    *,
    bounds: dict[str, int] | None = None,
    peer: str | None = None,
    work_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> SimResult:
    """Replay ``requests`` (index order = workload order) on the simulated
    engine with balance on or off.

    Args:
        balance: the ``enable_balance_scheduling`` setting.
        bounds: more keys of the balance setting's ``scheduler_config``
            (``balance_max_frozen_steps`` or ``balance_max_held_steps``;
            :meth:`~vllm_ascend_balance.replay.pipeline.modes.Mode.bounds`).
        peer: a peer policy's ``--mode`` entry
            (:mod:`~vllm_ascend_balance.replay.peers`), balance off.
        work_dir: where the tiny model directory goes (a temporary one when
            None).
        progress: called after each step with the number of requests that
            finished in it.
    """
    t_build = time.perf_counter()
    if requests and opts.longest_request_tokens is None:
        longest = max(r.prompt_tokens + r.output_tokens for r in requests)
        opts = dataclasses.replace(opts, longest_request_tokens=longest)
    with tempfile.TemporaryDirectory(prefix="vab-sim-") as tmp:
        model_dir = write_tiny_moe_model(
            (work_dir or Path(tmp)) / "model", opts.max_model_len
        )
        extra = dict(bounds or {}) if balance else {}
        scheds = build_schedulers(
            opts, balance, model_dir, extra, peer_gate=peer is not None
        )
    n = opts.dp_size
    sgl = SGLangRounds(opts.sglang_passes, opts.sglang_defer)
    peers = PeerStep(peer, scheds, opts.peer_timing, sgl) if peer is not None else None
    two_pass = peers is not None and peers.rounds is not None and sgl.two_pass
    peer_routing = peers.policy.routing if peers and opts.peer_router == "own" else None
    cls = type(scheds[0])
    cap = admission_cap(scheds[0])
    # The gate's class, not any balance_gather(): vllm-ascend's own
    # BalanceScheduler has one too (taking its DP group).
    gating = isinstance(scheds[0], BalanceSchedulerMixin)
    keep_gathers = gating and n <= GATHER_RECORDS_MAX_DP
    board = GatherBoard(n)
    groups = [BoardGroup(board, r) for r in range(n)]
    sync_interval, sync_first = dp_sync_rule(scheds[0].vllm_config)
    interval = opts.prefill_schedule_interval
    router = Router(opts.routing, n, opts.stats_interval_s)
    # TensorRT-LLM's router (one global queue): its rows, or every row.
    adp = AdpRouter(n) if "trtllm-adp" in (opts.routing, peer_routing) else None
    models = [OutputModel(r) for r in range(n)]
    prompts = PromptPool(opts.max_model_len)
    cost = opts.cost
    starts = [RankStart(r, cls.__name__, cls.__module__, cap, n) for r in range(n)]
    wall_build_s = time.perf_counter() - t_build

    t_run = time.perf_counter()
    order = sorted(requests, key=lambda r: (r.arrival_s, r.index))
    rank_steps: list[list[RankStep]] = [[] for _ in range(n)]
    rank_requests: list[list[RankRequest]] = [[] for _ in range(n)]
    gathers: list[list[GatherRecord]] = [[] for _ in range(n)]
    routed = [False] * len(requests)
    total = len(order)
    now = 0.0
    nxt = 0
    step = 0
    engines_running = False
    step_counter = 0
    unfinished = [False] * n
    idle = Batch()
    while True:
        if not engines_running and not any(unfinished) and not (adp and adp.queue):
            if nxt >= total:
                break
            # Every engine idle: nothing runs until the next request arrives.
            now = max(now, order[nxt].arrival_s)
        router.publish(now, scheds)
        while nxt < total and order[nxt].arrival_s <= now:
            req = order[nxt]
            nxt += 1
            if adp is not None:
                adp.enqueue(req)
                continue
            rid = REQUEST_ID.format(req.index)
            rank = router.route(rid, req.index, req.rank)
            routed[req.index] = opts.routing == "vllm" and req.rank is None
            scheds[rank].add_request(make_request(rid, req, prompts))
            unfinished[rank] = True
        for rank, req in adp.dispatch(scheds) if adp is not None else ():
            scheds[rank].add_request(
                make_request(REQUEST_ID.format(req.index), req, prompts)
            )
            unfinished[rank] = True
        if not engines_running:
            # START_DP_WAVE wakes every engine; the wave's step counter restarts.
            engines_running = True
            step_counter = 0

        if peers is not None:
            peers.decide(now)
        batches: list[Batch] = []
        pending: list[tuple[int, Any, Any]] = []
        for rank, sched in enumerate(scheds):
            batch = idle
            if sched.has_requests():
                throttle = gating and sched.balance_throttles()
                throttle = throttle or should_throttle_prefills(interval, step_counter)
                if peers is not None:
                    throttle = peers.before_schedule(rank) or throttle
                so = sched.schedule(throttle) if throttle else sched.schedule()
                if peers is not None:
                    peers.after_schedule(rank, so)
                batch, output, done = models[rank].step(so, step)
                pending.append((rank, so, output))
                rank_requests[rank].extend(done)
                if so.total_num_scheduled_tokens == 0:
                    batch = Batch(new_requests=batch.new_requests)  # dummy
            batches.append(batch)
        costs = [batch_cost_ms(cost, b, two_pass) for b in batches]
        step_ms = lockstep_ms(costs)
        for rank, sched in enumerate(scheds):
            b = batches[rank]
            rank_steps[rank].append(
                RankStep(
                    step=step,
                    rank=rank,
                    cost_ms=costs[rank],
                    step_ms=step_ms,
                    running=len(sched.running),
                    waiting=len(sched.waiting),
                    prefill_tokens=b.prefill_tokens,
                    decode_requests=b.decode_requests,
                    new_requests=b.new_requests,
                    frozen=bool(getattr(sched, "balance_frozen", False))
                    or bool(getattr(sched, "peer_hold", False)),
                    gathers=int(getattr(sched, "balance_gathers", 0)),
                    dummy=b.prefill_tokens == 0 and b.decode_requests == 0,
                )
            )
        now += step_ms / 1000.0
        finished = 0
        for rank, so, output in pending:
            outs = scheds[rank].update_from_output(so, output)
            for eco in outs.values():
                for o in eco.outputs:
                    if o.finish_reason is not None:
                        finished += 1
                        router.finished(o.request_id)
        for rank, sched in enumerate(scheds):
            unfinished[rank] = sched.has_unfinished_requests()
        if peers is not None:
            peers.end_step(now)
        step_counter += 1
        if (sync_first and step_counter == 1) or step_counter % sync_interval == 0:
            engines_running = any(unfinished)
        if gating:
            board.post([s.admission_payload() for s in scheds])
            for rank, sched in enumerate(scheds):
                sched.dp_group = groups[rank]
                sched.admission_gather()
                if keep_gathers:
                    vector, flags = split_gathered(sched.balance_gathered)
                    gathers[rank].append(
                        GatherRecord(
                            rank,
                            sched.balance_gathers,
                            board.values[rank],
                            vector,
                            bool(sched.balance_frozen),
                            cap,
                            flags,
                        )
                    )
        step += 1
        if progress is not None:
            progress(finished)
    for rank, model in enumerate(models):
        rank_requests[rank].extend(model.unfinished())
    return SimResult(
        rank_steps=rank_steps,
        rank_requests=rank_requests,
        routed_by_vllm=routed,
        starts=starts,
        gathers=gathers,
        board_gathers=list(board.gathers),
        steps=step,
        wall_build_s=wall_build_s,
        wall_run_s=time.perf_counter() - t_run,
    )
