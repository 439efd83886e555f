# SPDX-License-Identifier: Apache-2.0
"""Where an SGLang round differs from vLLM's mixed step, as opt-in variants
of the SGLang peers on the simulated engine (``--sglang-passes``,
``--sglang-defer``; their defaults leave every model unchanged).

Both follow ``Scheduler.get_next_batch_to_run`` in
``python/sglang/srt/managers/scheduler.py`` (sgl-project/sglang
``d51c1c21d1ac``), where a round runs one forward batch:

- **Separate passes.** Without ``--enable-mixed-chunk`` (SGLang's default)
  a prefill batch wins the round whenever ``get_new_batch_prefill`` forms
  one (an in-flight chunk is added first, ``add_chunked_req``, before any
  waiting request), and the rank's running requests decode only in a round
  with no prefill batch. ``prefill-first`` models that: in a round where a
  rank runs prefill, none of its decodes is scheduled. ``two-pass`` keeps
  vLLM's mixed batch but costs a step with both prefill tokens and decodes
  as two passes, one more ``step_ms`` (:func:`batch_cost_ms`): the price of
  a second pass without SGLang's stall of the decodes.
- **Every rank deferred.** ``_should_defer_prefill`` skips
  ``get_new_batch_prefill`` on every rank in a deferred round, chunks in
  flight included, whatever the rank runs. The default model holds chunks
  through vLLM's prefill throttle (``Scheduler.schedule(throttle_prefills=
  True)``), which defers a chunk only on a rank that has decodes and whose
  last undeferred pass was not capacity-bound; ``every-rank`` holds every
  chunk in flight on every rank.

A request is left out of one ``schedule()`` call the way vLLM's own
pipeline-parallel decode cadence leaves it out
(``Request.next_decode_eligible_step``): it stays running, with its slot
and its KV blocks, and is eligible again at the next call. Whether a
rank's pass runs prefill is read off its state before the call
(:meth:`SGLangRounds.prefills`); where vLLM then schedules none, the next
round's decodes run, as SGLang's would.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllm_ascend_balance.replay.model.outputs import Batch
from vllm_ascend_balance.replay.peers.state import admissible_now
from vllm_ascend_balance.replay.pipeline.cost import CostModel


def batch_cost_ms(cost: CostModel, batch: Batch, two_pass: bool = False) -> float:
    """One rank's modeled cost of ``batch`` (milliseconds); ``two_pass``: a
    batch with both prefill tokens and decodes runs as a prefill pass and a
    decode pass, each paying the fixed ``step_ms``."""
    ms = cost.rank_cost_ms(
        batch.prefill_tokens, batch.decode_requests, batch.decode_context_tokens
    )
    if two_pass and batch.prefill_tokens and batch.decode_requests:
        ms += cost.step_ms
    return ms


def in_prefill(request: Any) -> bool:
    """vLLM's own flag: the request's prompt (or its recompute after a
    preemption) is not fully computed."""
    return bool(request.is_prefill_chunk)


def skip_this_call(scheduler: Any, requests: Iterable[Any]) -> None:
    """Leave ``requests`` out of the scheduler's next ``schedule()`` only
    (it increments ``current_step`` first, then skips a running request
    whose ``next_decode_eligible_step`` is still ahead)."""
    step = scheduler.current_step + 2
    for req in requests:
        req.next_decode_eligible_step = max(req.next_decode_eligible_step, step)


class SGLangRounds:
    """The variants an SGLang peer's run uses (see the module docstring).

    Args:
        passes: ``"mixed"`` (vLLM's mixed batch, the default),
            ``"two-pass"`` or ``"prefill-first"``.
        defer: ``"throttle"`` (vLLM's prefill throttle, the default) or
            ``"every-rank"``.
    """

    def __init__(self, passes: str = "mixed", defer: str = "throttle") -> None:
        self.two_pass = passes == "two-pass"
        self.prefill_first = passes == "prefill-first"
        self.every_rank = defer == "every-rank"
        self.stalled: set[int] = set()
        #: Ranks whose last stall of their decodes ran no prefill.
        self.missed: set[int] = set()

    def before_schedule(
        self, rank: int, scheduler: Any, held: bool, deferred: bool, throttled: bool
    ) -> None:
        """Leave out of this round's ``schedule()`` what SGLang would not run
        on the rank. ``held``: its new requests are held this round;
        ``deferred``: a round of the prefill-decode interval; ``throttled``:
        the call passes vLLM's prefill throttle."""
        running = scheduler.running
        if deferred and self.every_rank:
            skip_this_call(scheduler, [r for r in running if in_prefill(r)])
            return  # no prefill batch: the decodes run
        # After a stall whose prefill vLLM did not schedule, the decodes run
        # (SGLang forms no prefill batch then), so no rank stalls forever.
        if (
            self.prefill_first
            and rank not in self.missed
            and self.prefills(scheduler, held, deferred, throttled)
        ):
            skip_this_call(scheduler, [r for r in running if not in_prefill(r)])
            self.stalled.add(rank)

    def after_schedule(self, rank: int, scheduler: Any, so: Any) -> None:
        """Note whether a stall of the rank's decodes ran prefill (``so``:
        the ``SchedulerOutput``; ``schedule()`` has advanced
        ``num_computed_tokens``)."""
        prefilled = False
        for rid, n in so.num_scheduled_tokens.items():
            req = scheduler.requests.get(rid)
            if req is not None and req.num_computed_tokens - n < req.num_tokens - 1:
                prefilled = True
                break
        if rank in self.stalled and not prefilled:
            self.missed.add(rank)
        else:
            self.missed.discard(rank)
        self.stalled.discard(rank)

    @staticmethod
    def prefills(scheduler: Any, held: bool, deferred: bool, throttled: bool) -> bool:
        """Whether the rank's ``schedule()`` runs prefill: a chunk in flight
        (in a deferred round, unless vLLM's throttle defers it), or, admission
        not held, a waiting request that vLLM admits (:func:`admits`)."""
        running = scheduler.running
        if any(in_prefill(r) for r in running):
            # vLLM's throttle defers a chunk only on a rank with decodes whose
            # last undeferred pass was not capacity-bound.
            bound = bool(getattr(scheduler, "prefill_capacity_bound", False))
            decodes = any(not in_prefill(r) for r in running)
            if not (deferred and throttled and decodes and not bound):
                return True
        return not held and admits(scheduler)


def admits(scheduler: Any) -> bool:
    """Whether ``schedule()`` admits the head waiting request
    (:func:`admissible_now`, which applies vLLM's whole-sequence
    reservation where the scheduler has it)."""
    return admissible_now(scheduler) > 0
