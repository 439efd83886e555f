# SPDX-License-Identifier: Apache-2.0
"""Metrics of one run, from its records alone, in modeled time.

Every time is read from :class:`~.records.RunRecords` (the modeled clock of
:mod:`.join`; request arrivals from the workload), never from a wall clock,
so runs whose modeled schedules are identical get identical metrics.

Latencies (per request, modeled milliseconds): TTFT = end of the step that
sampled its first token - arrival; TPOT = (end of its finishing step - end
of its first-token step) / (output tokens - 1). Shares of steps are over the
*active* steps; steps where every rank idles (dummy batches until the DP
ranks agree a wave is over) are counted apart (``idle_steps``).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.records import RequestRecord, RunRecords, Step

logger = init_logger(__name__)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated ``q``-th percentile (0-100); None when empty."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def _mean(values: list[float] | list[int]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class RankLatency:
    """One rank's requests: how many, TTFT p50/p99 and TPOT p50 (ms)."""

    rank: int
    requests: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None


@dataclass(frozen=True)
class Starvation:
    """Requests that waited (arrival to admission) through at least
    ``threshold_steps`` frozen steps: how many, the rank holding most of
    them, and the longest such wait (modeled seconds)."""

    threshold_steps: int
    requests: int = 0
    rank: int | None = None
    longest_wait_s: float = 0.0
    per_rank: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunMetrics:
    """All numbers of one run (modeled time; ``wall_*``: diagnostics)."""

    requests: int
    completed: int
    output_tokens: int
    makespan_s: float
    output_tokens_per_s: float | None
    requests_per_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    per_rank: tuple[RankLatency, ...]
    worst_rank: int | None  # the rank with the highest TTFT p50
    worst_rank_ttft_p50_ms: float | None
    worst_rank_ttft_p99_ms: float | None
    steps: int  # active steps
    idle_steps: int  # all-idle steps, not in the shares below
    step_ms_mean: float | None
    frozen_share: float | None
    mixed_share: float | None
    running_mean: float | None
    running_max: int | None
    spread_mean: float | None
    spread_max: int | None
    balance_ratio_mean: float | None  # mean over steps of mean/max running
    gathers_per_rank: tuple[int, ...]
    gathers_per_step: float | None  # over all measured steps
    starvation: Starvation
    wall_pacing_overrun: float | None
    wall_send_late_s: float


def _latencies(
    req: RequestRecord, end: dict[int, float]
) -> tuple[float | None, float | None]:
    """(TTFT, TPOT) of one finished request in ms, from step end times."""
    if req.first_token_step not in end:
        return None, None
    first = end[req.first_token_step]
    ttft = (first - req.arrival_s) * 1e3
    if req.finish_step not in end or req.output_tokens < 2:
        return ttft, None
    return ttft, (end[req.finish_step] - first) * 1e3 / (req.output_tokens - 1)


def starvation(
    steps: list[Step], requests: list[RequestRecord], threshold: int
) -> Starvation:
    """See :class:`Starvation`."""
    starts = [s.start_s for s in steps]
    index = {s.index: i for i, s in enumerate(steps)}
    frozen_before = [0]
    for s in steps:
        frozen_before.append(frozen_before[-1] + s.frozen)
    per_rank: Counter[int] = Counter()
    longest = 0.0
    for req in requests:
        if req.admitted_step not in index or req.rank is None:
            continue
        admitted = index[req.admitted_step]
        waited_from = bisect.bisect_left(starts, req.arrival_s)
        frozen = frozen_before[admitted] - frozen_before[min(waited_from, admitted)]
        if frozen >= threshold:
            per_rank[req.rank] += 1
            longest = max(longest, steps[admitted].start_s - req.arrival_s)
    if not per_rank:
        return Starvation(threshold)
    rank = per_rank.most_common(1)[0][0]
    return Starvation(threshold, sum(per_rank.values()), rank, longest, dict(per_rank))


def run_metrics(records: RunRecords, starvation_steps: int) -> RunMetrics:
    """The metrics of one run (see the module docstring)."""
    steps = records.steps
    active = [s for s in steps if not s.all_idle]
    end = {s.index: s.end_s for s in steps}
    done = [r for r in records.requests if r.done]
    ttft: dict[int, list[float]] = {}
    tpot: dict[int, list[float]] = {}
    for req in done:
        t1, t2 = _latencies(req, end)
        rank = req.rank if req.rank is not None else -1
        if t1 is not None:
            ttft.setdefault(rank, []).append(t1)
        if t2 is not None:
            tpot.setdefault(rank, []).append(t2)
    all_ttft = [x for xs in ttft.values() for x in xs]
    all_tpot = [x for xs in tpot.values() for x in xs]
    per_rank = tuple(
        RankLatency(
            r,
            len(ttft.get(r, [])),
            percentile(ttft.get(r, []), 50),
            percentile(ttft.get(r, []), 99),
            percentile(tpot.get(r, []), 50),
        )
        for r in range(records.dp_size)
    )
    ranked = [x for x in per_rank if x.ttft_p50_ms is not None]
    worst = max(ranked, key=lambda x: x.ttft_p50_ms or 0.0) if ranked else None
    finish = [end[r.finish_step] for r in done if r.finish_step in end]
    makespan = max(finish, default=0.0)
    out_tokens = sum(r.output_tokens for r in done)
    running = [[x.running for x in s.ranks] for s in active]
    spreads = [max(col) - min(col) for col in running]
    ratios = [sum(col) / len(col) / max(col) for col in running if max(col) > 0]
    # Gathers within the measured steps (warm-up excluded): one per step
    # when balance is on, on every rank.
    gathers = tuple(
        steps[-1].ranks[r].gathers - steps[0].ranks[r].gathers if steps else 0
        for r in range(records.dp_size)
    )
    wall = sum(max(x.wall_end - x.wall_start for x in s.ranks) for s in steps)
    overrun = sum(max(x.overrun_s for x in s.ranks) for s in steps)
    return RunMetrics(
        requests=len(records.requests),
        completed=len(done),
        output_tokens=out_tokens,
        makespan_s=makespan,
        output_tokens_per_s=out_tokens / makespan if makespan else None,
        requests_per_s=len(done) / makespan if makespan else None,
        ttft_p50_ms=percentile(all_ttft, 50),
        ttft_p99_ms=percentile(all_ttft, 99),
        tpot_p50_ms=percentile(all_tpot, 50),
        tpot_p99_ms=percentile(all_tpot, 99),
        per_rank=per_rank,
        worst_rank=worst.rank if worst else None,
        worst_rank_ttft_p50_ms=worst.ttft_p50_ms if worst else None,
        worst_rank_ttft_p99_ms=worst.ttft_p99_ms if worst else None,
        steps=len(active),
        idle_steps=len(steps) - len(active),
        step_ms_mean=_mean([s.ranks[0].step_ms for s in active]),
        frozen_share=_mean([float(s.frozen) for s in active]),
        mixed_share=_mean([float(s.mixed) for s in active]),
        running_mean=_mean([x for col in running for x in col]),
        running_max=max((max(col) for col in running), default=None),
        spread_mean=_mean(spreads),
        spread_max=max(spreads, default=None),
        balance_ratio_mean=_mean(ratios),
        gathers_per_rank=gathers,
        gathers_per_step=gathers[0] / (len(steps) - 1) if len(steps) > 1 else None,
        starvation=starvation(steps, records.requests, starvation_steps),
        wall_pacing_overrun=overrun / wall if wall else None,
        wall_send_late_s=records.wall_send_late_s,
    )
