# SPDX-License-Identifier: Apache-2.0
"""The activation plan: from a ``VllmConfig``, whether balance scheduling
activates, on which scheduler class, with which knobs, and the notes that
say why (logged by the engines, printed by ``doctor``).

Every refusal is a :class:`~vllm_ascend_balance.wiring.config.BalanceConfigError`
naming the setting and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

from vllm_ascend_balance.gate import bound
from vllm_ascend_balance.gate.collectives import natural_collective
from vllm_ascend_balance.gate.seam import SEAM
from vllm_ascend_balance.gate.settings import DEFAULT_POLICY
from vllm_ascend_balance.wiring import ascend_steering
from vllm_ascend_balance.wiring.config import SETTING, BalanceConfigError
from vllm_ascend_balance.wiring.config_read import BalanceSetting, read_balance_setting
from vllm_ascend_balance.wiring.reach import (
    can_throttle,
    has_seam,
    unreachable_gate,
    vllm_consults_seam,
)

SERIES_HINT = (
    "patch the installed vLLM with `vllm-ascend-balance patch-vllm` (it picks "
    "the series by vLLM's version), or install a vLLM branch carrying the "
    "upstream_patch/ series"
)
PARTIAL_HINT = (
    "restore vllm/v1/core/sched/scheduler.py (reinstall vLLM), then run "
    "`vllm-ascend-balance patch-vllm`"
)
PD_DISAGGREGATED_ROLES = ("kv_producer", "kv_consumer")


@dataclass
class ActivationPlan:
    """What :func:`run_engine_core` will do for a config.

    Attributes:
        requested: the setting asks for balance scheduling.
        active: balance will be activated (hook + mixin).
        setting: the setting read (its ``gate`` goes to the scheduler class).
        scheduler_cls: the scheduler class the config would use without us.
        vllm_ascend: the installed vllm-ascend (``"vllm-ascend X.Y.Z"``),
            handed balance off wherever balance is requested
            (:mod:`~vllm_ascend_balance.wiring.ascend_steering`); None: not
            installed.
        throttles: the policy's chunk holds reach vLLM (its ``schedule``
            takes ``throttle_prefills``): the throttle hook is installed.
        notes: human-readable reasons (why inactive, what composes).
    """

    requested: bool
    active: bool
    setting: BalanceSetting
    scheduler_cls: type | None = None
    vllm_ascend: str | None = None
    throttles: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.setting.source

    @property
    def policy(self) -> str:
        return self.setting.gate.policy

    @property
    def max_frozen_steps(self) -> int | None:
        return self.setting.gate.max_frozen_steps

    @property
    def max_held_steps(self) -> int | None:
        return self.setting.gate.max_held_steps

    @property
    def collective(self) -> str | None:
        return self.setting.gate.collective


def _resolve_scheduler_cls(vllm_config: Any) -> Any:
    """The scheduler class the config would use (``get_scheduler_cls()``),
    with an unresolvable ``scheduler_cls`` reported as a config error."""
    try:
        return vllm_config.scheduler_config.get_scheduler_cls()
    except (ImportError, AttributeError, ValueError) as exc:
        raise BalanceConfigError(
            f"scheduler_cls {vllm_config.scheduler_config.scheduler_cls!r} cannot "
            f"be imported ({type(exc).__name__}: {exc}): fix or unset --scheduler-cls"
        ) from None


def plan_activation(vllm_config: Any, quiet: bool = False) -> ActivationPlan:
    """Decide, from a ``VllmConfig``, whether balance scheduling activates.
    ``quiet``: the caller already read this config (steering it,
    :mod:`~vllm_ascend_balance.wiring.ascend_steering`), which logged the
    reading's warnings; they are not logged again.

    Raises:
        BalanceConfigError: the setting is malformed, or requested where it
            cannot work (PD-disaggregated ``kv_role``, a vllm-ascend setting
            that excludes it, vLLM without the seam, a ``scheduler_cls`` that
            is not a ``Scheduler`` subclass or whose ``schedule()`` does not
            reach the seam, see :func:`unreachable_gate`).
    """
    setting = read_balance_setting(vllm_config, quiet=quiet)
    plan = ActivationPlan(setting.enabled, False, setting)
    if not setting.enabled:
        # Named as the user wrote it (or not at all): the nested key is not
        # the one to change when the legacy key or the env var said false.
        said = f"{setting.source} is off" if setting.source != "default" else (
            f"{SETTING} is not set (off by default)"
        )  # fmt: skip
        plan.notes.append(f"{said}: vLLM runs untouched")
        return plan
    check_pd_mixed(vllm_config)
    exclusive = ascend_steering.check_exclusive(vllm_config)
    if exclusive is not None:
        raise BalanceConfigError(f"{SETTING} {exclusive}")
    plan.vllm_ascend = ascend_steering.installed()
    dp_size = vllm_config.parallel_config.data_parallel_size
    if dp_size <= 1:
        plan.notes.append(
            f"{SETTING} has no effect with data_parallel_size={dp_size}: "
            f"nothing activated"
        )
        return plan
    if not vllm_config.model_config.is_moe:
        plan.notes.append(
            f"{SETTING} has no effect for a non-MoE model (its DP ranks run "
            f"independently): nothing activated"
        )
        return plan
    base = _resolve_scheduler_cls(vllm_config)
    plan.scheduler_cls = base
    if not (isinstance(base, type) and issubclass(base, Scheduler)):
        raise BalanceConfigError(
            f"{SETTING} needs a vllm Scheduler subclass, but scheduler_cls is "
            f"{base!r}: unset --scheduler-cls or point it at a Scheduler subclass"
        )
    if not has_seam(base):
        raise BalanceConfigError(
            f"{SETTING} is set but the installed vLLM lacks "
            f"Scheduler.{SEAM}(): {SERIES_HINT}"
        )
    if not vllm_consults_seam():
        raise BalanceConfigError(
            f"{SETTING} is set but the installed vLLM's Scheduler.schedule() "
            f"never calls Scheduler.{SEAM}() (a partly applied patch): {PARTIAL_HINT}"
        )
    unreachable = unreachable_gate(base)
    if unreachable is not None:
        klass, why = unreachable
        raise BalanceConfigError(
            f"{SETTING} cannot act through scheduler_cls {base.__qualname__}: "
            f"{klass.__module__}.{klass.__qualname__}: {why}; use a scheduler_cls "
            f"whose schedule() calls super().schedule(), or unset --scheduler-cls"
        )
    plan.active = True
    plan.notes.extend(gate_lines(setting))
    if bound.plan(setting.gate).policy.holds_chunks:
        plan.throttles = can_throttle(base)
        if not plan.throttles:
            plan.notes.append(
                f"chunks in flight are not held: {base.__qualname__}.schedule() "
                f"of the installed vLLM takes no throttle_prefills (vLLM 0.27 "
                f"or later does); only admission waits "
                f"({setting.setting_of('balance_policy')})"
            )
    stall = setting.stall_warning_s
    plan.notes.append(
        "stall warning off"
        if stall is None
        else f"stall warning after {stall:g} s in a gather "
        f"({setting.setting_of('balance_stall_warning_s')})"
    )
    plan.notes.append(
        f"gate on {base.__name__} (its schedule() reaches Scheduler.{SEAM}), "
        f"gather after DPEngineCoreProc._has_global_unfinished_reqs, "
        f"DP size {dp_size}"
    )
    return plan


def gate_lines(setting: BalanceSetting) -> list[str]:
    """What the gate of ``setting`` does, a line per concern (the policy,
    its bound, its exchange), for the activation notes and ``doctor``."""
    resolved = bound.plan(setting.gate)
    policy = resolved.policy
    knobs = ", ".join(f"{k}={v:g}" for k, v in resolved.knobs.items())
    lines = [
        f"policy {policy.name}: {policy.summary}"
        + (f" ({knobs})" if knobs else "")
        + (
            f" ({setting.setting_of('balance_policy')})"
            if policy.name != DEFAULT_POLICY
            else ""
        )
    ]
    held, frozen = resolved.max_held_steps, resolved.max_frozen_steps
    if held is not None:
        given = setting.gate.max_held_steps is not None
        lines.append(
            f"holds bounded: no request is held more than {held} steps before "
            f"its prefill completes ("
            + (
                setting.setting_of("balance_max_held_steps")
                if given
                else f"the {policy.name} default"
            )
            + ")"
        )
    elif frozen is not None:
        lines.append(
            f"freeze bounded: after {frozen} consecutive frozen steps the gate "
            f"opens for one step ({setting.setting_of('balance_max_frozen_steps')})"
        )
    else:
        lines.append(
            "freeze unbounded (leader at cap freezes every rank until it drains)"
        )
    collective = setting.gate.collective or natural_collective(policy.collective)
    lines.append(
        f"exchange {collective}"
        + (
            f" ({setting.setting_of('balance_collective')})"
            if setting.gate.collective
            else ""
        )
    )
    return lines


def check_pd_mixed(vllm_config: Any) -> None:
    """Balance scheduling supports PD-mixed deployments only (mirrors the
    check in vllm-ascend's ``platform.py``).

    Raises:
        BalanceConfigError: ``kv_transfer_config.kv_role`` is a
            PD-disaggregated role (``kv_producer`` / ``kv_consumer``).
    """
    kv_transfer = getattr(vllm_config, "kv_transfer_config", None)
    role = getattr(kv_transfer, "kv_role", None)
    if role in PD_DISAGGREGATED_ROLES:
        raise BalanceConfigError(
            f"{SETTING} supports PD-mixed deployments only, but "
            f"kv_transfer_config.kv_role is {role!r}: disable balance scheduling "
            f"on PD-disaggregated instances or use kv_role 'kv_both'"
        )
