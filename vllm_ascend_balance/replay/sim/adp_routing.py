# SPDX-License-Identifier: Apache-2.0
"""TensorRT-LLM's attention-DP router in the simulated engine: one global
queue, requests handed to a rank only while it is below the expected
active count.

Rule, from ``tensorrt_llm/_torch/pyexecutor/scheduler/adp_router.py``
(``DefaultADPRouter.route_requests`` and ``_balance_requests_across_ranks``),
run once per iteration on the state every rank all-gathers (active
requests, active prompt tokens):

1. requests with a target rank (``attention_dp_rank``; here the JSONL
   ``rank``) go there first while that rank is below
   ``max_num_active_requests``; the others, and those whose rank is full,
   are balanced;
2. ``expected = min(max(ceil((active + new) / R), max active),
   max_num_active_requests)`` over the R ranks;
3. the ranks below ``expected`` enter a min-heap on (active prompt tokens,
   active requests, rank); requests, longest prompt first, go to the top of
   the heap, which re-enters while still below ``expected``.

Each iteration routes only the head of the global queue: at most
``R x max_num_active_requests - active`` requests, first in first out
(``PyExecutor._fetch_new_requests`` and the executor request queue's
``_get_from_waiting_queue``); only those are sorted by prompt length. A
request no rank takes stays in the global queue, in order, for the next
iteration (the executor's waiting queue). A rank's active requests here are
its running and waiting requests (what it was handed); its active tokens
their prompt lengths (``py_orig_prompt_len``). ``max_num_active_requests``
is the rank's running cap. Not modelled: the KV-cache-aware router
(``enable_kv_cache_aware_routing``, off by default; prefix caching is off
in the simulation).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest


def _active(sched: Any) -> tuple[int, int]:
    """(active requests, active prompt tokens) of one rank."""
    reqs = [*sched.running, *sched.waiting]
    return len(reqs), sum(r.num_prompt_tokens for r in reqs)


def route_requests(
    active: Sequence[int],
    tokens: Sequence[int],
    new: Sequence[tuple[int, int | None]],
    max_active: int,
) -> tuple[dict[int, list[int]], int]:
    """``DefaultADPRouter.route_requests`` on plain numbers.

    Args:
        active: active requests per rank.
        tokens: active prompt tokens per rank.
        new: (prompt tokens, target rank or None) per queued request, in
            queue order.
        max_active: ``max_num_active_requests``.

    Returns:
        ({rank: [indices into ``new``]}, expected active requests per rank).
        An index in no list stays queued.
    """
    ranks = len(active)
    counts = list(active)
    load = list(tokens)
    out: dict[int, list[int]] = {r: [] for r in range(ranks)}
    rest: list[int] = []
    for i, (_, target) in enumerate(new):
        if target is not None and counts[target] < max_active:
            counts[target] += 1
            out[target].append(i)
        else:
            rest.append(i)
    expected = min(max(-(-(sum(counts) + len(rest)) // ranks), max(counts)), max_active)
    heap = [(load[r], counts[r], r) for r in range(ranks) if counts[r] < expected]
    heapq.heapify(heap)
    # Stable: equal prompts keep queue order (Python's sort is stable).
    for i in sorted(rest, key=lambda i: -new[i][0]):
        if not heap:
            break
        t, c, r = heapq.heappop(heap)
        out[r].append(i)
        if c + 1 < expected:
            heapq.heappush(heap, (t + new[i][0], c + 1, r))
    return out, expected


class AdpRouter:
    """The global queue and :func:`route_requests`, once per step."""

    def __init__(self, dp_size: int) -> None:
        self.dp_size = dp_size
        self.queue: list[ReplayRequest] = []

    def enqueue(self, req: ReplayRequest) -> None:
        self.queue.append(req)

    def dispatch(self, scheds: Sequence[Any]) -> list[tuple[int, ReplayRequest]]:
        """The (rank, request) pairs handed out this step, in hand-out
        order; the rest stay queued."""
        if not self.queue:
            return []
        stats = [_active(s) for s in scheds]
        cap = int(scheds[0].max_num_running_reqs)
        room = self.dp_size * cap - sum(a for a, _ in stats)
        new = [(r.prompt_tokens, r.rank) for r in self.queue[: max(room, 0)]]
        placed, _ = route_requests(
            [a for a, _ in stats], [t for _, t in stats], new, cap
        )
        taken = {i: rank for rank, idx in placed.items() for i in idx}
        out = [(taken[i], self.queue[i]) for i in sorted(taken)]
        self.queue = [r for i, r in enumerate(self.queue) if i not in taken]
        return out
