# SPDX-License-Identifier: Apache-2.0
"""Join per-rank records into one run and put it on the modeled clock.

The modeled clock (seconds from the start of the workload) is defined by the
schedule alone, never by wall time, so two runs with the same schedule get
the same times:

- step ``k`` starts when step ``k-1`` ended, or later if it admits a request
  that arrived later (the engine was idle, or lagging behind the arrivals):
  ``start[k] = max(end[k-1], max(arrival of requests admitted in step k))``,
  ``end[k] = start[k] + step_ms[k] / 1000``; the first measured step's
  ``end[k-1]`` is 0;
- a request's arrival is the workload's ``arrival_s``.

Used by every engine that produces per-rank records.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.records import (
    RankRequest,
    RankStep,
    RequestRecord,
    Step,
)
from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest

logger = init_logger(__name__)

#: Request id of workload request ``i`` (vLLM may append ``-<suffix>``).
REQUEST_ID = "req-{}"
_REQUEST_ID = re.compile(r"^req-(\d+)(?:-|$)")


def request_index(request_id: str) -> int | None:
    """The workload index in a request id, or None (e.g. a warm-up request)."""
    match = _REQUEST_ID.match(request_id)
    return int(match.group(1)) if match else None


def join_run(
    workload: Sequence[ReplayRequest],
    routed_by_vllm: Sequence[bool],
    rank_steps: Sequence[Sequence[RankStep]],
    rank_requests: Sequence[Sequence[RankRequest]],
) -> tuple[list[Step], list[RequestRecord]]:
    """Steps (from the first workload admission on, on every rank) and one
    record per workload request.

    Args:
        workload: the requests, in index order.
        routed_by_vllm: per request, whether vLLM's router chose its rank.
        rank_steps, rank_requests: each rank's records (index = rank).
    """
    served: dict[int, RankRequest] = {}
    for records in rank_requests:
        for rec in records:
            index = request_index(rec.request_id)
            if index is not None and 0 <= index < len(workload):
                served[index] = rec
    first = min((r.admitted_step for r in served.values()), default=None)
    admitted_at: dict[int, float] = {}
    for index, rec in served.items():
        arrival = workload[index].arrival_s
        admitted_at[rec.admitted_step] = max(
            arrival, admitted_at.get(rec.admitted_step, arrival)
        )
    by_index = [{s.step: s for s in steps} for steps in rank_steps]
    common = set.intersection(*(set(d) for d in by_index)) if by_index else set()
    steps: list[Step] = []
    clock = 0.0
    for k in sorted(common):
        if first is None or k < first:
            continue  # warm-up, or the idle steps after it
        ranks = tuple(d[k] for d in by_index)
        start = max(clock, admitted_at.get(k, 0.0))
        clock = start + ranks[0].step_ms / 1000.0
        steps.append(Step(k, start, clock, ranks))
    requests = []
    for req, routed in zip(workload, routed_by_vllm, strict=True):
        found = served.get(req.index)
        requests.append(
            RequestRecord(
                index=req.index,
                arrival_s=req.arrival_s,
                rank=found.rank if found else None,
                routed_by_vllm=routed,
                admitted_step=found.admitted_step if found else None,
                first_token_step=found.first_token_step if found else None,
                finish_step=found.finish_step if found else None,
                output_tokens=found.output_tokens if found else 0,
                expected_tokens=req.output_tokens,
            )
        )
    return steps, requests
