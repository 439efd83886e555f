# SPDX-License-Identifier: Apache-2.0
"""``batched``: admission closed by default, opened for every rank together
after a batching wait that follows the load, every hold bounded by a
deadline (opt-in; issue 44)."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_BATCHED_WINDOW,
    Gathered,
    Knobs,
)
from vllm_ascend_balance.gate.policies.cohort import Cohort


def batching_wait(window: int, running: int, cap: int) -> int:
    """The steps an opening waits for more prefills, at this load:
    ``ceil(window * running / cap)`` for a gathered running count (the
    smallest or the largest), so 0 with nothing running and ``window`` at
    the cap. Integers only, so every rank computes the same from the same
    gathered count."""
    if cap <= 0:
        return 0
    return -(-window * max(0, min(running, cap)) // cap)


class Batched(Cohort):
    """``batched``: new requests enter only on opening steps, which every
    rank with room and work takes together, and at load an opening waits
    a few steps so that more prefills share it.

    Why: a lock-step step lasts as long as its slowest rank, so every step
    with a prefill in it slows every rank's decode. ``cohort`` opens as
    soon as every rank with room has work, which under sustained load is
    nearly every step: prefills stay scattered. TensorRT-LLM's attention-DP
    balance waits ``batching_wait_iters`` after the ranks are in sync; the
    wait here grows with the gathered running counts, so a light load
    (where the wait would only cost TTFT) barely waits, and a full one
    waits up to ``W`` steps.

    Per gather, from the gathered flags ``(held, queued, idle, starved)``
    and the smallest and largest running counts ``lowest`` and ``leader``,
    with :func:`batching_wait` ``B(n) = ceil(W * n / cap)``:

    1. nothing is held anywhere: frozen (closed by default; not counted
       by the deadline);
    2. some rank has requests waiting and none running (``starved``):
       open, a hold would leave it with nothing to run (TensorRT-LLM
       releases then too);
    3. a rank at the cap has a queue: frozen (``queued_leader``);
    4. no rank below the cap is idle: open once ``B(lowest)`` gathers or
       more passed since the last opening, else frozen (the batching wait:
       every rank can prefill, so it waits only as long as the least
       loaded rank's decode work makes worth it);
    5. some rank below the cap is idle: open once ``B(leader)`` gathers
       passed since the last opening, else frozen (the idle rank may get
       work soon; the wait follows the busiest rank, so it is short at a
       light load and ``W`` when a rank is full).

    ``W`` is ``align_window`` (default :data:`DEFAULT_BATCHED_WINDOW`).
    Deadline: a frozen gather on which some rank holds a request counts;
    after ``max_held_steps`` (default :data:`DEFAULT_ALIGN_DEADLINE`)
    consecutive such gathers the gate opens for one step (a fail-open).

    Attributes:
        since: gathers since the last opening that had a request to admit
            (this one included; ``NEVER`` before the first).
    """

    name: ClassVar[str] = "batched"
    columns: ClassVar[tuple[str, ...]] = ("held", "queued", "idle", "starved")
    #: No riding rule: openings on another rank's chunk steps start new
    #: prompts out of step with the other ranks' (docs/peer-policies.md).
    reads_chunks: ClassVar[bool] = False

    def __init__(self, knobs: Knobs) -> None:
        super().__init__(
            Knobs(
                None,
                knobs.max_held_steps or DEFAULT_ALIGN_DEADLINE,
                knobs.align_window or DEFAULT_BATCHED_WINDOW,
                knobs.align_min_load,
            )
        )

    def flags(
        self, running: int, waiting: bool, cap: int, riding: bool = False
    ) -> tuple[int, ...]:
        below = running < cap
        return (
            int(waiting and below),
            int(waiting and not below),
            int(below and not waiting),
            int(waiting and not running),
        )

    def decide(self, seen: Gathered) -> bool:
        self.since += 1
        if not seen.held:
            return self._closed()
        wait = batching_wait(self._window, seen.lowest, seen.cap)
        if seen.starved:
            frozen = False
        elif seen.queued:
            frozen = True
        elif not seen.idle:
            frozen = self.since < wait
        else:
            frozen = self.since < batching_wait(self._window, seen.leader, seen.cap)
        self.failed_open = False
        if frozen:
            if self.run >= self._deadline:
                self.failed_open = True
                self.run = 0
                frozen = False
            else:
                self.run += 1
        else:
            self.run = 0
        if not frozen:
            self.since = 0
        return frozen
