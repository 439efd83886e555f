# SPDX-License-Identifier: Apache-2.0
"""A peer admission policy inside the simulated fleet's step: gather every
rank's state, decide once, apply through the seam.

**What each system sees when it decides** (its information timing): the
peers whose rule runs inside the scheduler pass (SGLang's delayer and
interval, TensorRT-LLM's attention-DP balance, ATOM's delayer) decide on the
state after this step's arrivals, because their collective runs after the
pass took in new requests (SGLang: ``recv_requests`` then
``get_next_batch_to_run``; TensorRT-LLM: ``_fetch_new_requests`` then
``_schedule`` then ``_balance_adp_requests``; ATOM: the top of
``Scheduler.schedule``). vLLM #51199 reports a finished pass to its
coordinator, so it decides on the state gathered at the end of the previous
step (:attr:`~vllm_ascend_balance.replay.peers.PeerPolicy.sees_previous_step`).
The balance gate itself gathers right after ``_has_global_unfinished_reqs``,
at the end of a step, and its decision applies to the next one: the
previous step's state too (:mod:`.fleet`)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from vllm_ascend_balance.replay.peers import (
    PassHistory,
    RankState,
    make_policy,
    rank_state,
)
from vllm_ascend_balance.replay.peers.sglang_delayer import SGLangPrefillDelayer
from vllm_ascend_balance.replay.sim.sglang_rounds import SGLangRounds


class PeerStep:
    """A peer policy's side of each simulated step
    (:mod:`vllm_ascend_balance.replay.peers`): every rank's state gathered, one
    decision (every rank's instance would compute the same from the same
    vector: ``tests/test_peer_policies.py`` checks that property, with skewed
    clocks), applied through each scheduler's ``peer_hold`` and, on a step
    whose hold also covers chunks, ``throttle_prefills`` where ``schedule()``
    has it. ``rounds``: the SGLang variants, for SGLang's peers only
    (:mod:`.sglang_rounds`)."""

    def __init__(
        self,
        peer: str,
        scheds: Sequence[Any],
        timing: str = "source",
        rounds: SGLangRounds | None = None,
    ) -> None:
        self.scheds = scheds
        self.policy = make_policy(peer)
        sglang = isinstance(self.policy, SGLangPrefillDelayer)
        self.rounds = rounds if sglang else None
        #: ``timing`` "gate": decide on the previous step's end state whatever
        #: the source sees (what the real engine's peer gate can do).
        self.sees_previous = timing == "gate" or self.policy.sees_previous_step
        window = self.policy.prefill_bs_window
        self.histories = [PassHistory(window) for _ in scheds]
        self.holds: tuple[bool, ...] = (False,) * len(scheds)
        self.states: list[RankState] = []
        self.previous: list[RankState] | None = None
        self.had_work = [False] * len(scheds)
        params = inspect.signature(type(scheds[0]).schedule).parameters
        self.can_throttle = "throttle_prefills" in params
        self.throttle_chunks = False

    def gather(self, now_s: float) -> list[RankState]:
        """Every rank's state now (``now_s``: modeled seconds)."""
        return [
            rank_state(s, h, now_s)
            for s, h in zip(self.scheds, self.histories, strict=True)
        ]

    def decide(self, now_s: float) -> None:
        """The step's decision, after this step's arrivals."""
        self.states = self.gather(now_s)
        seen = self.states
        if self.sees_previous and self.previous is not None:
            seen = self.previous
        self.holds = self.policy.decide(seen)
        self.throttle_chunks = self.can_throttle and self.policy.holds_chunks()
        for rank, sched in enumerate(self.scheds):
            sched.peer_hold = self.holds[rank]
            self.histories[rank].deferred = False  # no pass yet this step
            self.histories[rank].extended = False

    def before_schedule(self, rank: int) -> bool:
        """Note the rank's prefill work; True: also throttle in-flight
        prefills."""
        sched = self.scheds[rank]
        self.had_work[rank] = self.histories[rank].before(sched, self.throttle_chunks)
        throttled = self.holds[rank] and self.throttle_chunks
        if self.rounds is not None:
            deferred = self.policy.holds_chunks()
            held = self.holds[rank]
            self.rounds.before_schedule(rank, sched, held, deferred, throttled)
        return throttled

    def after_schedule(self, rank: int, so: Any) -> None:
        sched = self.scheds[rank]
        extended = False
        for rid, n in so.num_scheduled_tokens.items():
            req = sched.requests.get(rid)
            # schedule() has already advanced num_computed_tokens.
            if req is not None and req.num_computed_tokens - n < req.num_prompt_tokens:
                extended = True
                break
        self.histories[rank].observe(
            self.holds[rank],
            self.had_work[rank],
            len(so.scheduled_new_reqs),
            len(sched.waiting),
            # A round whose hold covers chunks (SGLang's interval) skips the
            # delayer's negotiation: no attempt to record.
            attempted=None if self.policy.holds_chunks() else self.states[rank],
            extended=extended,
        )
        if self.rounds is not None:
            self.rounds.after_schedule(rank, sched, so)

    def end_step(self, now_s: float) -> None:
        """The state at the end of a step (after ``update_from_output``):
        what a policy that sees the previous step decides on next."""
        if self.sees_previous:
            self.previous = self.gather(now_s)
