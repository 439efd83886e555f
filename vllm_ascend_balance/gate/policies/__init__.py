# SPDX-License-Identifier: Apache-2.0
"""The gate's freeze policies: one module and one class per
``balance_policy``, chosen by name.

A small registry (:data:`POLICIES`, :func:`make_policy`), the way vLLM's
``vllm/v1/core/sched/request_queue.py`` picks a request queue class by its
scheduling policy's name (``create_request_queue``). Each policy says:

- what a rank contributes to the gather beyond ``len(running)``
  (:meth:`GatePolicy.flags`; the contract contributes nothing, so its payload
  stays ``len(running)`` alone);
- whether the gate is frozen this step (:meth:`GatePolicy.decide`), from the
  exchange's summary of the gathered payload (:class:`Gathered`) and the
  policy's own run state, itself a function of the gathered summaries seen
  so far. Every rank receives the same payload, so every rank holds the same
  state and decides the same.

The run state restarts (:meth:`GatePolicy.restart`) when the DP group object
is replaced: a rank joining a new group has no history, so an empty one is
the only state every member can share.

The room: :mod:`.base` (what every policy reads), :mod:`.leader_at_cap`
(the contract, the class the others refine), then one module per opt-in
policy. A new policy is one module here, one line in :data:`POLICIES` and
its property test.

Nothing here touches a scheduler or a tensor; the mixin
(:class:`~vllm_ascend_balance.gate.scheduler.BalanceSchedulerMixin`) feeds it.
"""

from __future__ import annotations

from vllm_ascend_balance.gate.policies.aligned import Aligned
from vllm_ascend_balance.gate.policies.base import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_ALIGN_MIN_LOAD,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_BATCHED_WINDOW,
    DEFAULT_COHORT_WINDOW,
    DEFAULT_THROTTLED_WINDOW,
    NEVER,
    Gathered,
    Knobs,
)
from vllm_ascend_balance.gate.policies.batched import Batched
from vllm_ascend_balance.gate.policies.cohort import Cohort
from vllm_ascend_balance.gate.policies.leader_at_cap import GatePolicy
from vllm_ascend_balance.gate.policies.queued_leader import QueuedLeader
from vllm_ascend_balance.gate.policies.throttled import Throttled

__all__ = [
    "DEFAULT_ALIGN_DEADLINE",
    "DEFAULT_ALIGN_MIN_LOAD",
    "DEFAULT_ALIGN_WINDOW",
    "DEFAULT_BATCHED_WINDOW",
    "DEFAULT_COHORT_WINDOW",
    "DEFAULT_THROTTLED_WINDOW",
    "NEVER",
    "POLICIES",
    "Aligned",
    "Batched",
    "Cohort",
    "GatePolicy",
    "Gathered",
    "Knobs",
    "QueuedLeader",
    "Throttled",
    "WINDOWED",
    "make_policy",
]

#: The policies by ``balance_policy`` name; the first is the contract.
POLICIES: dict[str, type[GatePolicy]] = {
    cls.name: cls
    for cls in (GatePolicy, QueuedLeader, Aligned, Cohort, Batched, Throttled)
}
#: The policies that read ``balance_align_window`` and bound every hold by
#: ``balance_max_held_steps`` with a default deadline (``max_frozen_steps``
#: refused): every policy from ``aligned`` on.
WINDOWED: tuple[str, ...] = ("aligned", "cohort", "batched", "throttled")


def make_policy(name: str, knobs: Knobs) -> GatePolicy:
    """A fresh policy object of ``name`` (one per scheduler: it holds run
    state).

    Raises:
        KeyError: an unknown name (the configuration reader refuses one
            earlier, in one line).
    """
    return POLICIES[name](knobs)
