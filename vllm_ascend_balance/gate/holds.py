# SPDX-License-Identifier: Apache-2.0
"""The gate's account of what it held on this rank (:class:`HoldLedger`).

A *hold* is one step on which the gate kept one request from work it could
otherwise have done:

- the step's ``schedule()`` asked the seam, the gate answered "stop
  admitting", the rank was below its admission cap, and the request was in
  one of :data:`~vllm_ascend_balance.gate.signals.HELD_QUEUES`; or
- the step ran ``schedule(throttle_prefills=True)`` at the gate's request
  and deferred the request's prefill chunk in flight (vLLM defers
  ``is_prefill_chunk`` requests while the rank has a decode to run).

A request's holds add up until its prefill completes (it leaves the held
queues and has no chunk left); the ledger forgets it then. Its *hold age*
(:meth:`HoldLedger.oldest`) is the largest count among the requests the next
step could hold again: waiting on a rank below its cap, or with a chunk in
flight on a rank with a decode to run. The gate exchanges each rank's age
(combined by max) and opens a step for every rank when it reaches the hold
bound (:mod:`~vllm_ascend_balance.gate.bound`), so no request is held more
than ``max_held_steps`` steps in all.

Cost per gather: nothing while no hold is on record; else one pass over the
held queues and ``running`` (``benchmarks/bench_policy_decision.py``).
"""

from __future__ import annotations

from typing import Any

from vllm_ascend_balance.gate.signals import HELD_QUEUES, admission_cap


def _requests(scheduler: Any, name: str) -> Any:
    return getattr(scheduler, name, None) or ()


def _below_cap(scheduler: Any) -> bool:
    """The rank could admit: running requests plus paused streaming sessions
    (upstream's own stop condition) below the admission cap."""
    active = len(scheduler.running) + getattr(
        scheduler, "num_waiting_for_streaming_input", 0
    )
    return active < admission_cap(scheduler)


def _has_decode(running: Any) -> bool:
    return any(not getattr(r, "is_prefill_chunk", False) for r in running)


class HoldLedger:
    """One rank's holds, per request id.

    Attributes:
        holds: request id -> holds so far, for requests not yet past their
            prefill.
        waiting_held: the seam held this step's admission with the rank
            below its cap (set by :meth:`note_waiting_held`).
        deferred: ids of the chunks this step's ``schedule()`` defers at the
            gate's request (set by :meth:`note_deferred`).
        saved_capacity_bound: vLLM's ``prefill_capacity_bound`` as it was
            before the gate cleared it to defer chunks; restored after the
            step (None: not cleared).
    """

    def __init__(self) -> None:
        self.holds: dict[str, int] = {}
        self.waiting_held = False
        self.deferred: tuple[str, ...] = ()
        self.saved_capacity_bound: bool | None = None

    def note_waiting_held(self, scheduler: Any) -> None:
        """The seam is holding this ``schedule()`` call's admission."""
        self.waiting_held = _below_cap(scheduler)

    def note_deferred(self, scheduler: Any) -> bool:
        """Before a ``schedule()`` the gate throttles: record the chunks it
        will defer and clear vLLM's ``prefill_capacity_bound`` for this one
        call (restored by :meth:`close_step`: vLLM's own escape for
        ``prefill_schedule_interval`` is left as it was). Returns whether
        anything is deferred (no decode to run, or no chunk: nothing)."""
        running = scheduler.running
        chunks = tuple(
            r.request_id for r in running if getattr(r, "is_prefill_chunk", False)
        )
        if not chunks or not _has_decode(running):
            return False
        self.deferred = chunks
        if getattr(scheduler, "prefill_capacity_bound", False):
            self.saved_capacity_bound = True
            scheduler.prefill_capacity_bound = False
        return True

    def close_step(self, scheduler: Any) -> None:
        """After the step: add its holds, restore vLLM's flag."""
        holds = self.holds
        if self.waiting_held:
            for name in HELD_QUEUES:
                for r in _requests(scheduler, name):
                    holds[r.request_id] = holds.get(r.request_id, 0) + 1
        for rid in self.deferred:
            holds[rid] = holds.get(rid, 0) + 1
        if self.saved_capacity_bound is not None:
            # The deferring step left vLLM's flag untouched: put back ours.
            scheduler.prefill_capacity_bound = self.saved_capacity_bound
        self.waiting_held = False
        self.deferred = ()
        self.saved_capacity_bound = None

    def oldest(self, scheduler: Any) -> int:
        """The largest hold count among requests the next step could hold
        again (module docstring); forgets requests past their prefill."""
        if not self.holds:
            return 0
        holds = self.holds
        kept: dict[str, int] = {}
        age = 0
        running = scheduler.running
        below = _below_cap(scheduler)
        for name in HELD_QUEUES:
            for r in _requests(scheduler, name):
                n = holds.get(r.request_id)
                if n:
                    kept[r.request_id] = n
                    if below and n > age:
                        age = n
        decode = _has_decode(running)
        for r in running:
            if getattr(r, "is_prefill_chunk", False):
                n = holds.get(r.request_id)
                if n:
                    kept[r.request_id] = n
                    if decode and n > age:
                        age = n
        self.holds = kept
        return age
