# SPDX-License-Identifier: Apache-2.0
"""What both ways of measuring ``schedule()`` share: the scheduler under
test (cap, budget, the gathered vector a DP rank holds), the seam-call
count, the refactor pair's sanity check and the JSON writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from vllm.v1.core.sched.scheduler import Scheduler

from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import SEAM, admission_cap

GOAL = 1.01
CAP = 256  # max_num_seqs: admission stops at the cap with long queues
BUDGET = 8192  # token budget: never the limiting factor below
PROMPT_LEN = 16  # one block per request; keeps schedule() admission-bound


def build(cls: type, dp_size: int | None, num_blocks: int = 20_000) -> Any:
    sched = make_scheduler(
        cls,
        vllm_config=make_vllm_config(
            max_num_seqs=CAP, max_num_batched_tokens=BUDGET, num_blocks=num_blocks
        ),
    )
    if dp_size is not None:
        # What admission_gather() leaves behind on a rank whose group has
        # dp_size ranks, the busiest of them one below the cap: not frozen.
        cap = admission_cap(sched)
        gathered = torch.arange(dp_size, dtype=torch.int64) % cap
        gathered[-1] = cap - 1
        sched.balance_gathered = gathered
        sched.balance_frozen = int(gathered.max()) == cap
        assert not sched.balance_frozen
    return sched


def seam_calls_per_schedule(cls: type, waiting: int, dp_size: int | None = 2) -> int:
    """How many times one schedule() of this row calls the seam (untimed)."""
    counter = {"calls": 0}

    def counting(self: Any) -> bool:
        counter["calls"] += 1
        return cls._should_stop_admitting_waiting(self)

    counting_cls = type("Counting", (cls,), {SEAM: counting})
    sched = build(counting_cls, dp_size)
    for i in range(waiting):
        sched.add_request(make_request(f"c-{i}", PROMPT_LEN, max_tokens=8))
    sched.schedule()
    return counter["calls"]


def check_refactor_pair(original_cls: type) -> None:
    """Never measure the patched class against itself (or an original that
    already has the seam): that would report a meaningless 1.000."""
    if original_cls is Scheduler or hasattr(original_cls, SEAM):
        raise SystemExit("error: the 'original' Scheduler is not the unpatched one")
    if not hasattr(Scheduler, SEAM):
        raise SystemExit("error: the installed Scheduler is not patched")


def write_json(path: Path, data: dict[str, Any]) -> None:
    """The printed tables as JSON (times in seconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
