# SPDX-License-Identifier: Apache-2.0
"""A peer admission policy inside the simulated fleet's step: gather every
rank's state, decide once, apply through the seam."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from vllm_ascend_balance.replay.peers import PassHistory, make_policy, rank_state


class PeerStep:
    """A peer policy's side of each simulated step
    (:mod:`vllm_ascend_balance.replay.peers`): every rank's state gathered, one
    decision (every rank's instance would compute the same from the same
    vector: ``tests/test_peer_policies.py`` checks that property, with skewed
    clocks), applied through each scheduler's ``peer_hold`` and, for a policy
    that holds chunks, ``throttle_prefills`` where ``schedule()`` has it."""

    def __init__(self, peer: str, scheds: Sequence[Any]) -> None:
        self.scheds = scheds
        self.policy = make_policy(peer)
        self.histories = [PassHistory() for _ in scheds]
        self.holds: tuple[bool, ...] = (False,) * len(scheds)
        self.had_work = [False] * len(scheds)
        params = inspect.signature(type(scheds[0]).schedule).parameters
        self.throttle_chunks = (
            self.policy.holds_in_flight_chunks and "throttle_prefills" in params
        )

    def decide(self, now_s: float) -> None:
        states = [
            rank_state(s, h, now_s)
            for s, h in zip(self.scheds, self.histories, strict=True)
        ]
        self.holds = self.policy.decide(states)
        for rank, sched in enumerate(self.scheds):
            sched.peer_hold = self.holds[rank]
            self.histories[rank].deferred = False  # no pass yet this step

    def before_schedule(self, rank: int) -> bool:
        """Note the rank's prefill work; True: also throttle in-flight
        prefills."""
        sched = self.scheds[rank]
        self.had_work[rank] = self.histories[rank].before(sched, self.throttle_chunks)
        return self.holds[rank] and self.throttle_chunks

    def after_schedule(self, rank: int, so: Any) -> None:
        self.histories[rank].observe(
            self.holds[rank],
            self.had_work[rank],
            len(so.scheduled_new_reqs),
            len(self.scheds[rank].waiting),
        )
