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

from vllm_ascend_balance.gate.policies import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_ALIGN_MIN_LOAD,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_BATCHED_WINDOW,
    DEFAULT_COHORT_WINDOW,
    DEFAULT_THROTTLED_WINDOW,
    POLICIES,
)
from vllm_ascend_balance.gate.scheduler import SEAM
from vllm_ascend_balance.wiring import ascend_steering
from vllm_ascend_balance.wiring.config import (
    COLLECTIVE_SETTING,
    DEFAULT_COLLECTIVE,
    DEFAULT_POLICY,
    MAX_FROZEN_SETTING,
    MAX_HELD_SETTING,
    POLICY_SETTING,
    SETTING,
    STALL_SETTING,
    BalanceConfigError,
)
from vllm_ascend_balance.wiring.config_read import read_balance_setting
from vllm_ascend_balance.wiring.config_switch import check_pd_mixed
from vllm_ascend_balance.wiring.reach import can_throttle, has_seam, unreachable_gate

SERIES_HINT = (
    "patch the installed vLLM with `vllm-ascend-balance patch-vllm` (it picks "
    "the series by vLLM's version), or install a vLLM branch carrying the "
    "upstream_patch/ series"
)


@dataclass
class ActivationPlan:
    """What :func:`run_engine_core` will do for a config.

    Attributes:
        requested: the setting asks for balance scheduling.
        active: balance will be activated (hook + mixin).
        source: where the setting came from.
        scheduler_cls: the scheduler class the config would use without us.
        max_frozen_steps: the bounded-freeze setting (None = unbounded).
        max_held_steps: the held-step bound (None = not set).
        policy: the ``balance_policy`` setting.
        collective: the ``balance_collective`` setting.
        align_window, align_min_load: the ``aligned`` policy's
            ``balance_align_*`` settings (None = its defaults).
        vllm_ascend: the installed vllm-ascend (``"vllm-ascend X.Y.Z"``),
            handed balance off wherever balance is requested
            (:mod:`~vllm_ascend_balance.wiring.ascend_steering`); None: not
            installed.
        notes: human-readable reasons (why inactive, what composes).
    """

    requested: bool
    active: bool
    source: str
    scheduler_cls: type | None = None
    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    policy: str = DEFAULT_POLICY
    collective: str = DEFAULT_COLLECTIVE
    align_window: int | None = None
    align_min_load: float | None = None
    vllm_ascend: str | None = None
    notes: list[str] = field(default_factory=list)


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


def plan_activation(vllm_config: Any) -> ActivationPlan:
    """Decide, from a ``VllmConfig``, whether balance scheduling activates.

    Raises:
        BalanceConfigError: the setting is malformed, or requested where it
            cannot work (PD-disaggregated ``kv_role``, a vllm-ascend setting
            that excludes it, vLLM without the seam, a ``scheduler_cls`` that
            is not a ``Scheduler`` subclass or whose ``schedule()`` does not
            reach the seam, see :func:`unreachable_gate`).
    """
    setting = read_balance_setting(vllm_config)
    plan = ActivationPlan(
        setting.enabled,
        False,
        setting.source,
        max_frozen_steps=setting.max_frozen_steps,
        max_held_steps=setting.max_held_steps,
        policy=setting.policy,
        collective=setting.collective,
        align_window=setting.align_window,
        align_min_load=setting.align_min_load,
    )
    if not setting.enabled:
        plan.notes.append(f"{SETTING} is off: vLLM runs untouched")
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
    unreachable = unreachable_gate(base)
    if unreachable is not None:
        klass, why = unreachable
        raise BalanceConfigError(
            f"{SETTING} cannot act through scheduler_cls {base.__qualname__}: "
            f"{klass.__module__}.{klass.__qualname__}: {why}; use a scheduler_cls "
            f"whose schedule() calls super().schedule(), or unset --scheduler-cls"
        )
    if POLICIES[setting.policy].holds_chunks and not can_throttle(base):
        raise BalanceConfigError(
            f"{POLICY_SETTING} {setting.policy!r} holds prefill chunks through "
            f"Scheduler.schedule(throttle_prefills), which {base.__qualname__} "
            f"of the installed vLLM lacks (vLLM 0.27 or later has it): use "
            f'"batched", or upgrade vLLM'
        )
    plan.active = True
    bound, held = setting.max_frozen_steps, setting.max_held_steps
    plan.notes.append(
        f"freeze bounded: after {held} consecutive frozen steps that held a "
        f"request the gate opens for one step ({MAX_HELD_SETTING})"
        if held is not None
        else "freeze unbounded (leader at cap freezes every rank until it drains)"
        if bound is None
        else f"freeze bounded: after {bound} consecutive frozen steps the gate "
        f"opens for one step ({MAX_FROZEN_SETTING})"
    )
    if setting.policy != DEFAULT_POLICY:
        plan.notes.append(f"policy {policy_line(setting)} ({POLICY_SETTING})")
    stall = setting.stall_warning_s
    plan.notes.append(
        "stall warning off"
        if stall is None
        else f"stall warning after {stall:g} s in a gather ({STALL_SETTING})"
    )
    if setting.collective != DEFAULT_COLLECTIVE:
        plan.notes.append(
            f"collective {setting.collective} (log-depth, {COLLECTIVE_SETTING})"
        )
    plan.notes.append(
        f"gate on {base.__name__} (its schedule() reaches Scheduler.{SEAM}), "
        f"gather after DPEngineCoreProc._has_global_unfinished_reqs, "
        f"DP size {dp_size}"
    )
    return plan


def policy_line(setting: Any) -> str:
    """What the policy of ``setting`` (a ``BalanceSetting`` or an
    :class:`ActivationPlan`) does, in a few words, for notes and doctor."""
    if setting.policy == "queued_leader":
        return "queued_leader: freeze only while a rank at the cap has requests waiting"
    if setting.policy == "throttled":
        window = setting.align_window or DEFAULT_THROTTLED_WINDOW
        deadline = setting.max_held_steps or DEFAULT_ALIGN_DEADLINE
        return (
            f"throttled: new requests and prefill chunks in flight wait for a "
            f"step every rank with room takes together, after a wait of up to "
            f"{window} steps that grows with the least loaded rank's running "
            f"count (none while a rank is starved); no hold past {deadline} "
            f"held steps"
        )
    if setting.policy == "batched":
        window = setting.align_window or DEFAULT_BATCHED_WINDOW
        deadline = setting.max_held_steps or DEFAULT_ALIGN_DEADLINE
        return (
            f"batched: new requests wait for a step every rank with room takes "
            f"together, after a wait of up to {window} steps that grows with "
            f"the least loaded rank's running count (none while a rank is "
            f"starved or a long chunk runs); no hold past {deadline} held steps"
        )
    if setting.policy == "cohort":
        window = setting.align_window or DEFAULT_COHORT_WINDOW
        deadline = setting.max_held_steps or DEFAULT_ALIGN_DEADLINE
        return (
            f"cohort: new requests wait for a step every rank with room takes "
            f"together (a long chunk in flight, every such rank has work, or "
            f"{window} steps since the last opening); no hold past {deadline} "
            f"held steps"
        )
    if setting.policy != "aligned":
        return f"{setting.policy}: a leader at the cap freezes every rank"
    window = setting.align_window or DEFAULT_ALIGN_WINDOW
    load = setting.align_min_load
    load = DEFAULT_ALIGN_MIN_LOAD if load is None else load
    deadline = setting.max_held_steps or DEFAULT_ALIGN_DEADLINE
    return (
        f"aligned: queued-leader freeze, and above {load:g} of the cap prefills "
        f"open together at most every {window} steps; no hold past {deadline} "
        f"held steps"
    )
