# SPDX-License-Identifier: Apache-2.0
"""``leader_at_cap``, the contract and the default: a leader at the cap
freezes every rank."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.gate.policies.base import OPEN, Decision, Policy
from vllm_ascend_balance.gate.signals import View

_FROZEN = Decision(True, False, "leader_at_cap")


def decide(state: None, view: View, knobs: Mapping[str, Any]) -> tuple[None, Decision]:
    """Hold admission while ``max(len(running)) == cap`` (``==``, not
    ``>=``: vllm-ascend's ``balance_flag``)."""
    return None, _FROZEN if view.leader == view.cap else OPEN


POLICY = Policy(
    name="leader_at_cap",
    summary="a leader at the cap freezes admission on every rank",
    signals=(),
    decide=decide,
    source="vllm-ascend vllm_ascend/patch/platform/patch_balance_schedule.py",
    # vllm-ascend's gate all-gathers len(running): the contract keeps it.
    collective="all_gather",
)
