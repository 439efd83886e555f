# SPDX-License-Identifier: Apache-2.0
"""Wiring: the ``vllm.general_plugins`` entry point and conditional activation.

1. :func:`register` (front-end process, workers, engine cores; idempotent, no
   I/O) wraps ``EngineArgs.create_engine_config``; nothing else. Installing
   the package therefore changes nothing where balance is off.
2. When a config is created (front-end), it is validated, so a bad setting
   fails before engines start; where balance scheduling is requested,
   :func:`run_engine_core` becomes the outermost link of
   ``EngineCoreProc.run_engine_core`` (:mod:`~vllm_ascend_balance.wiring.engine_chain`).
   vLLM starts each engine process with that target; under spawn it is
   pickled by qualified name, so it is this module-level function.
   Before the config is created, where balance is requested, vllm-ascend is
   handed balance off through its own switches and this package's setting
   moves under its own key (:mod:`~vllm_ascend_balance.wiring.ascend_steering`).
3. :func:`run_engine_core` (engine process) resolves the link below it as
   vLLM would have, plans once (:mod:`~vllm_ascend_balance.wiring.activation_plan`,
   with the reach rule of :mod:`~vllm_ascend_balance.wiring.reach`) and,
   only when balance applies, hooks the gather onto vLLM's
   ``DPEngineCoreProc`` (:mod:`~vllm_ascend_balance.wiring.engine_hook`) and
   composes the gate mixin onto the scheduler class the config would have
   used (:mod:`~vllm_ascend_balance.wiring.composition`). Then the rest of the
   chain runs unchanged.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import vllm.v1.engine.core as engine_core_mod

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.observability import metrics_dirs, stats_carrier
from vllm_ascend_balance.wiring import ascend_steering, engine_chain
from vllm_ascend_balance.wiring.activation_plan import plan_activation
from vllm_ascend_balance.wiring.composition import planned_scheduler_cls
from vllm_ascend_balance.wiring.config import BalanceConfigError
from vllm_ascend_balance.wiring.engine_hook import install_gather_hook
from vllm_ascend_balance.wiring.json_flag import json_object
from vllm_ascend_balance.wiring.throttle_hook import install_throttle_hook

logger = init_logger(__name__)


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
        install_gather_hook(engine_core_mod.DPEngineCoreProc)
        if plan.throttles:
            install_throttle_hook(engine_core_mod.DPEngineCoreProc)
        vllm_config.scheduler_config.scheduler_cls = planned_scheduler_cls(plan)
        notes = "; ".join(
            plan.notes
            + ([ascend_steering.describe(plan.vllm_ascend)] if plan.vllm_ascend else [])
        )
        logger.info("balance scheduling active on DP rank %d: %s", dp_rank, notes)
    return next_link(*args, dp_rank=dp_rank, local_dp_rank=local_dp_rank, **kwargs)


def _check_early(create_engine_config: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``EngineArgs.create_engine_config``: a bad balance setting fails
    in the front-end, before any engine process starts; where balance is
    requested, vllm-ascend is handed balance off first
    (:func:`~vllm_ascend_balance.wiring.ascend_steering.steer_engine_args`), and
    where it activates :func:`run_engine_core` becomes the outermost link
    (after the platform and every plugin installed theirs, while creating
    the config); where it is requested but has no effect (DP size 1, a
    dense model), one warning says why."""

    @functools.wraps(create_engine_config)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _check_additional_config(self)
            ascend_steering.steer_engine_args(self, os.environ)
            vllm_config = create_engine_config(self, *args, **kwargs)
            # Steering read the user's config and logged its warnings: once.
            plan = plan_activation(vllm_config, quiet=True)
        except BalanceConfigError:
            _print_config_errors_in_one_line()
            raise
        if plan.active:
            engine_chain.install(run_engine_core)
        else:
            engine_chain.uninstall(run_engine_core)
            if plan.requested:
                # Said here: no engine runs this package's link to say it.
                logger.warning("balance scheduling: %s", plan.notes[-1])
        if plan.active:
            metrics_dirs.serve_from_front_end()
            if not getattr(self, "disable_log_stats", True):
                stats_carrier.install_front_end()
        return vllm_config

    checked.__vab_checked__ = True  # type: ignore[attr-defined]
    return checked


def _check_additional_config(engine_args: Any) -> None:
    """Refuse an ``--additional-config`` vLLM's parser kept as the raw
    string (not JSON), in one line: steering and vLLM's own start-up would
    otherwise fail on it with a stack.

    Raises:
        BalanceConfigError: the value is not a JSON object.
    """
    value = getattr(engine_args, "additional_config", None)
    if value is None or isinstance(value, Mapping):
        return
    try:
        json_object(value, "--additional-config")
    except ValueError as exc:
        raise BalanceConfigError(str(exc)) from None


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
