# SPDX-License-Identifier: Apache-2.0
"""The balance scheduler class: the gate mixin composed onto the scheduler
class a config would use, with the gate's settings as a class attribute.
"""

from __future__ import annotations

import functools
from typing import Any

from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin
from vllm_ascend_balance.gate.settings import GateSettings

_CONTRACT = GateSettings()


def compose_scheduler(base: type, settings: GateSettings = _CONTRACT) -> type:
    """``base`` with :class:`BalanceSchedulerMixin` in front, deciding by
    ``settings`` (one class per combination, so every engine core of a
    process gets the very same class, however the settings are passed)."""
    return _composed(base, settings)


@functools.cache
def _composed(base: type, settings: GateSettings) -> type:
    namespace: dict[str, Any] = {"__module__": __name__}
    if settings != _CONTRACT:
        namespace["balance_settings"] = settings
    return type(f"Balance{base.__name__}", (BalanceSchedulerMixin, base), namespace)


def planned_scheduler_cls(plan: Any) -> type:
    """The class :func:`~vllm_ascend_balance.wiring.activation.run_engine_core`
    sets for an active ``plan``
    (:class:`~vllm_ascend_balance.wiring.activation_plan.ActivationPlan`;
    doctor names it): :func:`compose_scheduler` over ``plan.scheduler_cls``
    with the plan's gate settings."""
    assert plan.scheduler_cls is not None, "an active plan resolved its class"
    return compose_scheduler(plan.scheduler_cls, plan.setting.gate)
