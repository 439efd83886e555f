# SPDX-License-Identifier: Apache-2.0
"""``queued_leader``: the contract's freeze, only while a rank at the cap
has requests waiting (opt-in)."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import Gathered, Knobs
from vllm_ascend_balance.gate.policies.leader_at_cap import GatePolicy


class QueuedLeader(GatePolicy):
    """``queued_leader``: frozen only while some rank at the cap has
    requests waiting. A leader at the cap with nothing waiting has no
    admission to align the others with (docs/peer-policies.md)."""

    name: ClassVar[str] = "queued_leader"

    def __init__(self, knobs: Knobs) -> None:
        super().__init__(knobs)
        self.sends_flags = True

    def closes(self, seen: Gathered) -> bool:
        return seen.queued
