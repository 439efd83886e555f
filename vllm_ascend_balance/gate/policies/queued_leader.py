# SPDX-License-Identifier: Apache-2.0
"""``queued_leader``: the contract's freeze, only while a rank at the cap
has requests waiting (opt-in)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.gate.policies.base import OPEN, Decision, Policy
from vllm_ascend_balance.gate.signals import View

_FROZEN = Decision(True, False, "queued_leader")


def decide(state: None, view: View, knobs: Mapping[str, Any]) -> tuple[None, Decision]:
    """Hold admission while some rank at its cap has requests waiting: a
    leader at the cap with nothing waiting has no admission to align the
    others with."""
    return None, _FROZEN if view.queued else OPEN


POLICY = Policy(
    name="queued_leader",
    summary="freeze only while a rank at the cap has requests waiting",
    signals=("queued",),
    decide=decide,
)
