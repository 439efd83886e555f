# SPDX-License-Identifier: Apache-2.0
"""The gate's decision: the policy's, then the gate's own rules, which no
policy can opt out of (:func:`step`, pure).

1. **Chunks only for alignment.** Prefill chunks in flight are deferred
   only by a policy that declares ``holds_chunks``
   (:class:`~vllm_ascend_balance.gate.policies.base.Policy`), and only on a
   step where some rank below its cap has requests waiting (``held``): a
   deferred chunk waits for an opening it can share, never for nothing.
2. **The hold bound** (``max_held_steps`` N, or the policy's default): a
   step that would hold anything opens instead, for every rank, while some
   rank's hold age (:mod:`~vllm_ascend_balance.gate.holds`: the most steps
   any request it could hold again was held) has reached N. So no request
   is held more than N steps before its prefill completes (reason
   ``deadline``).
3. **The frozen-run bound** (``max_frozen_steps`` N): after N consecutive
   steps that held admission, one step opens (reason ``frozen_bound``).

Both bounds read gathered values and the run state only, so every rank
opens on the same step. The state restarts (:data:`GateState` ``initial``)
on every member when the DP group is replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.gate.policies import POLICIES, Decision, Policy
from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.gate.signals import Layout, View, layout

_DEADLINE = Decision(False, False, "deadline")
_FROZEN_BOUND = Decision(False, False, "frozen_bound")


@dataclass(frozen=True)
class GateState:
    """The gate's run state: the policy's and the frozen run's length."""

    policy: Any
    frozen_run: int = 0


@dataclass(frozen=True)
class Plan:
    """A gate's settings resolved against its policy (made once per
    scheduler class): what to exchange and the numbers to decide by."""

    policy: Policy
    knobs: Mapping[str, Any]
    max_held_steps: int | None
    max_frozen_steps: int | None
    layout: Layout

    @property
    def initial(self) -> GateState:
        return GateState(self.policy.initial)


def plan(settings: GateSettings) -> Plan:
    """Resolve ``settings``: the policy, every knob's value, the hold bound
    (the policy's default where none is set) and the exchange's signals
    (the policy's, ``held`` for a chunk-holding policy, ``hold_age`` where
    a hold bound applies).

    Raises:
        KeyError: an unknown policy (the configuration reader refuses one
            earlier, in one line).
    """
    policy = POLICIES[settings.policy]
    held = settings.max_held_steps
    if held is None and settings.max_frozen_steps is None:
        held = policy.default_max_held_steps
    names = list(policy.signals)
    if policy.holds_chunks:
        names.append("held")
    if held is not None:
        names.append("hold_age")
    return Plan(
        policy,
        policy.knob_values(dict(settings.knobs)),
        held,
        settings.max_frozen_steps,
        layout(names),
    )


def step(plan_: Plan, state: GateState, view: View) -> tuple[GateState, Decision, bool]:
    """One step's decision from the gathered ``view``: ``(next state,
    decision, failed_open)``, where ``failed_open`` says a bound opened a
    step the policy would have held."""
    pstate, decision = plan_.policy.decide(state.policy, view, plan_.knobs)
    if decision.hold_chunks and not (plan_.policy.holds_chunks and view.held):
        decision = Decision(decision.hold_waiting, False, decision.reason)
    holds = decision.hold_waiting or decision.hold_chunks
    bound = plan_.max_held_steps
    if holds and bound is not None and view.hold_age >= bound:
        return GateState(pstate, 0), _DEADLINE, True
    run = state.frozen_run
    frozen_bound = plan_.max_frozen_steps
    if frozen_bound is not None:
        if not decision.hold_waiting:
            run = 0
        elif run >= frozen_bound:
            return GateState(pstate, 0), _FROZEN_BOUND, True
        else:
            run += 1
    return GateState(pstate, run), decision, False
