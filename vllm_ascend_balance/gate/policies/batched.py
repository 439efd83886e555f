# SPDX-License-Identifier: Apache-2.0
"""``batched``: admission closed by default, opened for every rank together
after a batching wait that follows the least loaded rank, every hold
bounded by a deadline (opt-in; issue 44)."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_BATCHED_WINDOW,
    Gathered,
    Knobs,
)
from vllm_ascend_balance.gate.policies.cohort import Cohort
from vllm_ascend_balance.gate.policies.leader_at_cap import GatePolicy


def batching_wait(window: int, running: int, cap: int) -> int:
    """The steps an opening waits for more prefills, at this load:
    ``ceil(window * (running / cap) ** 2)`` for the gathered smallest
    running count, so 0 while some rank runs nothing, a step or two while
    the least loaded rank is a quarter full, and ``window`` when every rank
    is at the cap (square: the decode work a wait protects grows with the
    load, and the TTFT it costs matters most where it protects little).
    Integers only, so every rank computes the same from the same gathered
    count."""
    if cap <= 0:
        return 0
    fill = max(0, min(running, cap))
    return -(-window * fill * fill // (cap * cap))


class Batched(Cohort):
    """``batched``: new requests enter only on opening steps, which every
    rank with room and work takes together; when every rank has decode work
    to protect, an opening waits a few steps so that more prefills share it.

    Why: a lock-step step lasts as long as its slowest rank, so every step
    with a prefill in it slows every rank's decode. ``cohort`` opens as
    soon as every rank with room has work, which under sustained load is
    nearly every step: prefills stay scattered. TensorRT-LLM's attention-DP
    balance waits ``batching_wait_iters`` once the ranks are in sync; here
    the wait follows the least loaded rank, so it is short while any rank
    has little to decode (the wait would cost TTFT and protect little) and
    ``W`` when every rank is full.

    Per gather, from the gathered flags ``(held, queued, starved, riding)``
    and the smallest running count ``lowest``, with :func:`batching_wait`
    ``B = ceil(W * (lowest / cap) ** 2)``:

    1. nothing is held anywhere: frozen (closed by default; not counted
       by the deadline);
    2. some rank has requests waiting and none running (``starved``), or
       runs a long prefill chunk next step anyway (``riding``): open; a
       hold would leave the starved rank idle, and a step slowed by a long
       chunk costs the others' prefills little (TensorRT-LLM releases a
       rank with an empty batch too);
    3. a rank at the cap has a queue: frozen (``queued_leader``);
    4. otherwise: open once ``B`` gathers or more passed since the last
       opening, else frozen (the batching wait).

    ``W`` is ``align_window`` (default :data:`DEFAULT_BATCHED_WINDOW`).
    Deadline: a frozen gather on which some rank holds a request counts;
    after ``max_held_steps`` (default :data:`DEFAULT_ALIGN_DEADLINE`)
    consecutive such gathers the gate opens for one step (a fail-open).
    Rule choices measured on the simulated engine (docs/peer-policies.md,
    "batched").

    Attributes:
        since: gathers since the last opening that had a request to admit
            (this one included; ``NEVER`` before the first).
    """

    name: ClassVar[str] = "batched"
    columns: ClassVar[tuple[str, ...]] = ("held", "queued", "starved", "riding")
    reads_chunks: ClassVar[bool] = True
    #: ``balance_align_window`` when none is set.
    default_window: ClassVar[int] = DEFAULT_BATCHED_WINDOW

    def __init__(self, knobs: Knobs) -> None:
        super().__init__(
            Knobs(
                None,
                knobs.max_held_steps or DEFAULT_ALIGN_DEADLINE,
                knobs.align_window or self.default_window,
                knobs.align_min_load,
            )
        )

    def flags(
        self,
        running: int,
        waiting: bool,
        cap: int,
        riding: bool = False,
        pending: bool = False,
    ) -> tuple[int, ...]:
        held, queued = GatePolicy.flags(self, running, waiting, cap)
        return held, queued, int(waiting and not running), int(riding)

    def decide(self, seen: Gathered) -> bool:
        self.since += 1
        if not seen.held:
            return self._closed()
        if seen.starved or seen.riding:
            frozen = False
        elif seen.queued:
            frozen = True
        else:
            frozen = self.since < batching_wait(self._window, seen.lowest, seen.cap)
        return self._bounded(frozen)
