# SPDX-License-Identifier: Apache-2.0
"""Wiring: the ``vllm.general_plugins`` entry point and conditional activation.

1. :func:`register` (front-end process, workers, engine cores; idempotent, no
   I/O) wraps ``EngineArgs.create_engine_config``; nothing else. Installing
   the package therefore changes nothing where balance is off.
2. When a config is created (front-end), it is validated, so a bad setting
   fails before engines start; where balance scheduling is requested,
   :func:`run_engine_core` becomes the outermost link of
   ``EngineCoreProc.run_engine_core`` (:mod:`~vllm_ascend_balance.engine_chain`).
   vLLM starts each engine process with that target; under spawn it is
   pickled by qualified name, so it is this module-level function.
   Before the config is created, where balance is requested, vllm-ascend is
   handed balance off through its own switches and this package's setting
   moves under its own key (:mod:`~vllm_ascend_balance.ascend_steering`).
3. :func:`run_engine_core` (engine process) resolves the link below it as
   vLLM would have, plans once (:func:`plan_activation`) and, only when
   balance applies, hooks the gather onto vLLM's ``DPEngineCoreProc``
   (:mod:`~vllm_ascend_balance.engine`) and composes the gate mixin onto the
   scheduler class the config would have used. Then the rest of the chain
   runs unchanged.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import vllm.v1.engine.core as engine_core_mod
from vllm.v1.core.sched.scheduler import Scheduler

from vllm_ascend_balance import ascend_steering, engine_chain, metrics, stats_carrier
from vllm_ascend_balance.config import (
    COLLECTIVE_SETTING,
    DEFAULT_COLLECTIVE,
    DEFAULT_POLICY,
    MAX_FROZEN_SETTING,
    MAX_HELD_SETTING,
    POLICY_SETTING,
    SETTING,
    STALL_SETTING,
    BalanceConfigError,
    check_pd_mixed,
    read_balance_setting,
)
from vllm_ascend_balance.engine import install_gather_hook
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.policies import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_ALIGN_MIN_LOAD,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_COHORT_WINDOW,
)
from vllm_ascend_balance.scheduler import SEAM, BalanceSchedulerMixin

logger = init_logger(__name__)

SERIES_HINT = (
    "patch the installed vLLM with `vllm-ascend-balance patch-vllm` (it picks "
    "the series by vLLM's version), or install a vLLM branch carrying the "
    "upstream_patch/ series"
)


def has_seam(scheduler_cls: type = Scheduler) -> bool:
    """Whether ``scheduler_cls`` offers ``Scheduler._should_stop_admitting_waiting``."""
    return callable(getattr(scheduler_cls, SEAM, None))


def _code_names(code: Any) -> set[str]:
    """Names a code object loads (globals, attributes), nested code included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


def unreachable_gate(scheduler_cls: type) -> tuple[type, str] | None:
    """Whether the balance gate can act through ``scheduler_cls``'s
    ``schedule()``; None if it can, else ``(class, why)``.

    Rule (docs/design.md): walk the MRO down to ``Scheduler``; every class on
    the way that defines its own ``schedule()`` must either name the seam
    (``Scheduler._should_stop_admitting_waiting``) in its code, which ends
    the walk, or call ``super().schedule()``, which hands on to the next
    class; upstream's ``Scheduler.schedule()`` consults the seam. Code that
    cannot be inspected (not a Python function) is refused.
    """
    for klass in scheduler_cls.__mro__:
        if klass is Scheduler:
            return None
        method = klass.__dict__.get("schedule")
        if method is None:
            continue
        code = getattr(inspect.unwrap(method), "__code__", None)
        if code is None:
            return klass, "its schedule() is not Python code, so it cannot be checked"
        names = _code_names(code)
        if SEAM in names:
            return None
        if not {"super", "schedule"} <= names:
            return klass, (
                f"its own schedule() neither calls super().schedule() nor "
                f"Scheduler.{SEAM}(), so the gate's decision would never apply"
            )
    return None


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
            (:mod:`~vllm_ascend_balance.ascend_steering`); None: not
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
    ``policy`` (with the ``aligned`` policy's knobs, None = defaults),
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


def run_engine_core(
    *args: Any, dp_rank: int = 0, local_dp_rank: int = 0, **kwargs: Any
) -> Any:
    """This package's link of ``EngineCoreProc.run_engine_core`` (same
    signature), installed where balance activates: activate, then run the
    rest of the chain (what vLLM would have run without this package)
    unchanged.

    A bad setting ends the engine process with one ``error`` log line naming
    the setting and the fix (the front-end then reports the failed engine).
    """
    next_link = engine_chain.resolve_next(run_engine_core)
    vllm_config = kwargs["vllm_config"]
    try:
        plan = plan_activation(vllm_config)
    except BalanceConfigError as exc:
        logger.error("balance scheduling: %s", exc)
        raise SystemExit(1) from None
    if plan.requested:
        ascend_steering.hide_env(os.environ)
    if plan.active:
        assert plan.scheduler_cls is not None
        install_gather_hook(engine_core_mod.DPEngineCoreProc)
        vllm_config.scheduler_config.scheduler_cls = compose_scheduler(
            plan.scheduler_cls,
            plan.max_frozen_steps,
            plan.collective,
            plan.max_held_steps,
            plan.policy,
            plan.align_window,
            plan.align_min_load,
        )
        notes = "; ".join(
            plan.notes
            + ([ascend_steering.describe(plan.vllm_ascend)] if plan.vllm_ascend else [])
        )
        logger.info("balance scheduling active on DP rank %d: %s", dp_rank, notes)
    elif plan.requested and dp_rank == 0:
        logger.warning("balance scheduling: %s", plan.notes[-1])
    return next_link(*args, dp_rank=dp_rank, local_dp_rank=local_dp_rank, **kwargs)


def _check_early(create_engine_config: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``EngineArgs.create_engine_config``: a bad balance setting fails
    in the front-end, before any engine process starts; where balance is
    requested, vllm-ascend is handed balance off first
    (:func:`~vllm_ascend_balance.ascend_steering.steer_engine_args`), and
    where it activates :func:`run_engine_core` becomes the outermost link
    (after the platform and every plugin installed theirs, while creating
    the config)."""

    @functools.wraps(create_engine_config)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            ascend_steering.steer_engine_args(self, os.environ)
            vllm_config = create_engine_config(self, *args, **kwargs)
            plan = plan_activation(vllm_config)
        except BalanceConfigError:
            _print_config_errors_in_one_line()
            raise
        if plan.active:
            engine_chain.install(run_engine_core)
        else:
            engine_chain.uninstall(run_engine_core)
        if plan.active:
            metrics.serve_from_front_end()
            if not getattr(self, "disable_log_stats", True):
                stats_carrier.install_front_end()
        return vllm_config

    checked.__vab_checked__ = True  # type: ignore[attr-defined]
    return checked


def _print_config_errors_in_one_line() -> None:
    """Make an uncaught :class:`BalanceConfigError` print as one error line
    (``vllm serve`` would otherwise show the stack through vLLM's front-end);
    callers that catch the exception are unaffected. Idempotent."""
    previous = sys.excepthook
    if getattr(previous, "__vab_one_line__", False):
        return

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        if issubclass(exc_type, BalanceConfigError):
            logger.error("balance scheduling: %s", exc)
        else:
            previous(exc_type, exc, tb)

    hook.__vab_one_line__ = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def register() -> None:
    """``vllm.general_plugins`` entry point: wrap
    ``EngineArgs.create_engine_config`` (see :func:`_check_early`).
    Idempotent; decides nothing and leaves ``run_engine_core`` and
    ``DPEngineCoreProc`` alone, whatever order vLLM loads plugins in."""
    from vllm.engine.arg_utils import EngineArgs

    if not getattr(EngineArgs.create_engine_config, "__vab_checked__", False):
        engine_args: Any = EngineArgs
        engine_args.create_engine_config = _check_early(EngineArgs.create_engine_config)
