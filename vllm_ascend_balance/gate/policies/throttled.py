# SPDX-License-Identifier: Apache-2.0
"""``throttled``: ``batched``'s openings, and prefill chunks already in
flight held with new requests between them (opt-in; issue 44)."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import (
    DEFAULT_THROTTLED_WINDOW,
    Gathered,
)
from vllm_ascend_balance.gate.policies.batched import Batched, batching_wait


class Throttled(Batched):
    """``throttled``: new requests enter only on opening steps, as with
    ``batched``, and on the steps between them every rank with decodes to
    run also defers the prefill chunks it already has in flight.

    Why: ``batched`` stops only admission from WAITING. A long prompt
    admitted on an opening step is prefilled in chunks over the following
    steps, each chunk slowing every rank's decode (a lock-step step lasts
    as long as its slowest rank). TensorRT-LLM's attention-DP balance
    (``PyExecutor._balance_adp_requests``) holds in-flight context as well;
    vLLM has the same hold for its ``prefill_schedule_interval``
    (``DPEngineCoreProc._should_throttle_prefills()`` ->
    ``Scheduler.schedule(throttle_prefills=True)``, which defers prefill
    work while the rank has decodes). On a frozen step this gate asks
    vLLM's scheduler for exactly that
    (:meth:`~vllm_ascend_balance.gate.scheduler.BalanceSchedulerMixin.balance_throttles`).

    Per gather, from the gathered flags ``(held, queued, starved, chunk)``
    and the smallest running count ``lowest``, with
    ``B = batching_wait(W, lowest, cap)``
    (:func:`~vllm_ascend_balance.gate.policies.batched.batching_wait`):

    1. nothing is held anywhere: frozen; counted by the deadline if some
       rank below the cap has a prefill in flight (``chunk``: the hold
       delays it), else not (closed by default, nobody waits);
    2. some rank has requests waiting and none running (``starved``):
       open (a hold would leave it idle);
    3. a rank at the cap has a queue: frozen (``queued_leader``);
    4. otherwise: open once ``B`` gathers or more passed since the last
       opening, else frozen.

    Unlike ``batched`` there is no opening for a long chunk in flight
    (``riding``): that chunk is held too, and runs on the next opening
    with everyone's. ``W`` is ``align_window`` (default
    :data:`DEFAULT_THROTTLED_WINDOW`). Deadline: after ``max_held_steps``
    (default :data:`DEFAULT_ALIGN_DEADLINE`) consecutive counted gathers the
    gate opens for one step (a fail-open), so no request and no in-flight
    chunk waits longer. Needs a vLLM whose ``Scheduler.schedule`` takes
    ``throttle_prefills`` (activation refuses it otherwise). Rule choices
    measured on the simulated engine (docs/peer-policies.md, "throttled").
    """

    name: ClassVar[str] = "throttled"
    columns: ClassVar[tuple[str, ...]] = ("held", "queued", "starved", "chunk")
    holds_chunks: ClassVar[bool] = True
    default_window: ClassVar[int] = DEFAULT_THROTTLED_WINDOW

    def flags(
        self,
        running: int,
        waiting: bool,
        cap: int,
        riding: bool = False,
        pending: bool = False,
    ) -> tuple[int, ...]:
        held, queued, starved, _ = super().flags(running, waiting, cap)
        return held, queued, starved, int(pending and running < cap)

    def decide(self, seen: Gathered) -> bool:
        self.since += 1
        if not seen.held:
            return self._bounded(True) if seen.chunk else self._closed()
        if seen.starved:
            frozen = False
        elif seen.queued:
            frozen = True
        else:
            frozen = self.since < batching_wait(self._window, seen.lowest, seen.cap)
        return self._bounded(frozen)
