# SPDX-License-Identifier: Apache-2.0
"""The balance scheduler class: the gate mixin composed onto the scheduler
class a config would use, with the setting's knobs as class attributes.
"""

from __future__ import annotations

import functools
from typing import Any

from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.wiring.config import DEFAULT_COLLECTIVE, DEFAULT_POLICY


def compose_scheduler(
    base: type,
    max_frozen_steps: int | None = None,
    collective: str = DEFAULT_COLLECTIVE,
    max_held_steps: int | None = None,
    policy: str = DEFAULT_POLICY,
    align_window: int | None = None,
    align_min_load: float | None = None,
) -> type:
    """``base`` with :class:`BalanceSchedulerMixin` in front, bounded by
    ``max_frozen_steps`` or ``max_held_steps`` (at most one), freezing by
    ``policy`` (with the ``aligned`` and ``cohort`` knobs, None = defaults),
    exchanging by ``collective`` (one class per combination, so every engine
    core of a process gets the very same class).

    Raises:
        ValueError: both bounds given (the setting reader refuses that
            earlier, naming the keys).
    """
    if max_frozen_steps is not None and max_held_steps is not None:
        raise ValueError("compose_scheduler: give max_frozen_steps or max_held_steps")
    return _compose_scheduler(
        base,
        max_frozen_steps,
        collective,
        max_held_steps,
        policy,
        align_window,
        align_min_load,
    )


def planned_scheduler_cls(plan: Any) -> type:
    """The class :func:`~vllm_ascend_balance.wiring.activation.run_engine_core`
    sets for an active ``plan``
    (:class:`~vllm_ascend_balance.wiring.activation_plan.ActivationPlan`;
    doctor names it): :func:`compose_scheduler` over ``plan.scheduler_cls``
    with the plan's settings."""
    assert plan.scheduler_cls is not None, "an active plan resolved its class"
    return compose_scheduler(
        plan.scheduler_cls,
        plan.max_frozen_steps,
        plan.collective,
        plan.max_held_steps,
        plan.policy,
        plan.align_window,
        plan.align_min_load,
    )


@functools.cache
def _compose_scheduler(
    base: type,
    max_frozen_steps: int | None,
    collective: str,
    max_held_steps: int | None,
    policy: str,
    align_window: int | None,
    align_min_load: float | None,
) -> type:
    namespace: dict[str, Any] = {"__module__": __name__}
    if max_frozen_steps is not None:
        namespace["balance_max_frozen_steps"] = max_frozen_steps
    if max_held_steps is not None:
        namespace["balance_max_held_steps"] = max_held_steps
    if policy != DEFAULT_POLICY:
        namespace["balance_policy"] = policy
    if collective != DEFAULT_COLLECTIVE:
        namespace["balance_collective"] = collective
    if align_window is not None:
        namespace["balance_align_window"] = align_window
    if align_min_load is not None:
        namespace["balance_align_min_load"] = align_min_load
    return type(f"Balance{base.__name__}", (BalanceSchedulerMixin, base), namespace)
