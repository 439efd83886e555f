# SPDX-License-Identifier: Apache-2.0
"""Next to vllm-ascend: hand it balance scheduling off, through its own settings.

vllm-ascend ships its own balance scheduling (a copied ``schedule()`` with
the gate inline, an engine class whose busy loop gathers), switched on by
the same three settings this package reads. Left alone, balance on would run
two gates and two gathers per step. This package neither patches nor reads
vllm-ascend's code. Where balance scheduling is requested, the front-end
rewrites what vllm-ascend documents as its switches before vLLM creates the
config (so before vllm-ascend's platform reads it) and before any engine
process starts (:func:`steer_engine_args`):

- ``additional_config.scheduler_config.enable_balance_scheduling`` becomes
  ``false``: the key vllm-ascend's ``AscendConfig`` reads first where it
  knows it (main, v0.27.1rc1), ignored where it does not (0.23.0.post1);
- the legacy top-level ``enable_balance_scheduling`` becomes ``false`` where
  it is written (the key 0.23.0.post1 reads first);
- ``VLLM_ASCEND_BALANCE_SCHEDULING`` becomes ``0`` where it is set: in the
  front-end's environment (engine and worker processes inherit it) and again
  in each engine process (:func:`hide_env`), for launchers that do not pass
  the environment on.

This package's decision, with its options, travels to the engine processes
under its own key (:data:`~vllm_ascend_balance.wiring.config.CARRIED_KEY`); nothing
the user wrote is lost, only moved. Every vllm-ascend release whose switches
are these (the ones its docs list) then reads balance as off: its scheduler
delegates to upstream's ``schedule()``, which asks this package's seam
override, and its engine class is not built. One gate runs, this package's.
A release that decided by some other input would show up as a second gate:
the gate's run-time tripwire and the coexistence tests are there for that.

vllm-ascend applies a few checks only when its own balance is on; they are
this package's now (:func:`check_exclusive`, and
:func:`~vllm_ascend_balance.wiring.activation_plan.check_pd_mixed`). Where
balance is not requested nothing here runs.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.wiring.config import (
    CARRIED_KEY,
    ENV_SETTING,
    OPTIONS,
    SETTING,
    SWITCH,
)
from vllm_ascend_balance.wiring.config_read import BalanceSetting, read_balance_setting

logger = init_logger(__name__)

ENV_OFF = "0"


@dataclass(frozen=True)
class Steered:
    """What the front-end hands vLLM (and so vllm-ascend) where balance is
    requested.

    Attributes:
        setting: this package's reading of what the user wrote.
        additional_config: the rewritten ``additional_config``: vllm-ascend's
            switches off, this package's setting under its own key.
        env: environment variables to set (``VLLM_ASCEND_BALANCE_SCHEDULING``
            to ``0`` where it was set).
    """

    setting: BalanceSetting
    additional_config: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)


def steer(
    additional_config: Mapping[str, Any] | None, environ: Mapping[str, str]
) -> Steered | None:
    """The rewrite of ``additional_config`` (and of ``environ``) for a
    requested balance setting; None where balance is not requested. Pure:
    neither argument is changed. Idempotent: steering a steered config gives
    the same config.

    Raises:
        BalanceConfigError: the setting is malformed
            (:func:`~vllm_ascend_balance.wiring.config_read.read_balance_setting`).
    """
    additional = dict(additional_config or {})
    holder = _Config(additional)
    setting = read_balance_setting(holder, environ)
    if not setting.enabled:
        return None
    steered = copy.deepcopy(additional)
    sched = steered.get("scheduler_config")
    sched = dict(sched) if isinstance(sched, Mapping) else {}
    for key in OPTIONS:
        sched.pop(key, None)
        steered.pop(key, None)
    sched[SWITCH] = False
    steered["scheduler_config"] = sched
    if SWITCH in steered:
        steered[SWITCH] = False
    steered[CARRIED_KEY] = setting.carried()
    env = {ENV_SETTING: ENV_OFF} if ENV_SETTING in environ else {}
    return Steered(setting, steered, env)


@dataclass
class _Config:
    additional_config: dict[str, Any]


def steer_engine_args(
    engine_args: Any, environ: MutableMapping[str, str]
) -> BalanceSetting | None:
    """Apply :func:`steer` to ``EngineArgs`` before it creates the config
    (``EngineArgs.create_engine_config``), and to ``environ`` (the
    front-end's ``os.environ``). Returns the requested setting, or None
    (nothing changed).

    Raises:
        BalanceConfigError: the setting is malformed.
    """
    steered = steer(getattr(engine_args, "additional_config", None), environ)
    if steered is None:
        return None
    engine_args.additional_config = steered.additional_config
    environ.update(steered.env)
    return steered.setting


def steer_vllm_config(
    vllm_config: Any, environ: MutableMapping[str, str]
) -> BalanceSetting | None:
    """:func:`steer_engine_args` for a ``VllmConfig`` built directly (the
    simulated engine, tests): what the front-end would have handed the
    engine processes."""
    steered = steer(getattr(vllm_config, "additional_config", None), environ)
    if steered is None:
        return None
    vllm_config.additional_config = steered.additional_config
    environ.update(steered.env)
    return steered.setting


def hide_env(environ: MutableMapping[str, str]) -> None:
    """In an engine process where balance activates: the environment form of
    vllm-ascend's switch reads off here too, whoever started the process."""
    if ENV_SETTING in environ:
        environ[ENV_SETTING] = ENV_OFF


def installed() -> str | None:
    """``"vllm-ascend X.Y.Z"`` where vllm-ascend is installed (from its
    distribution metadata; a source tree without metadata says so), else
    None. Imports nothing of vllm-ascend."""
    for name in ("vllm-ascend", "vllm_ascend"):
        try:
            return f"vllm-ascend {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    if importlib.util.find_spec("vllm_ascend") is not None:
        return "vllm-ascend (a source tree without version metadata)"
    return None


def describe(vllm_ascend: str) -> str:
    """One line for ``doctor`` and the engine log: what was done about it."""
    return (
        f"{vllm_ascend}: handed balance scheduling off through its own switches "
        f"({SETTING} and the legacy key false, {ENV_SETTING}=0 where set), so its "
        f"copied schedule() gate and its engine-side gather stay inactive; this "
        f"package's setting travels under additional_config.{CARRIED_KEY}"
    )


def _enabled(section: Any, key: str) -> bool:
    value = section.get(key) if isinstance(section, Mapping) else None
    return isinstance(value, Mapping) and bool(value.get("enabled"))


def check_exclusive(vllm_config: Any) -> str | None:
    """vllm-ascend settings that exclude balance scheduling (vllm-ascend
    refuses them itself only where its own config reads balance as on:
    ``platform.py``); the refusal text or None. Read as vllm-ascend reads
    them: the nested ``scheduler_config`` section first, then the legacy top
    level. ``profiling_chunk_config`` is not among them: its scheduler is
    judged like any ``scheduler_cls``, by whether its ``schedule()`` reaches
    the seam (:func:`~vllm_ascend_balance.wiring.reach.unreachable_gate`)."""
    additional = getattr(vllm_config, "additional_config", None) or {}
    sched = additional.get("scheduler_config")
    sched = sched if isinstance(sched, Mapping) else {}
    if _enabled(sched, "dyntra_lb_config"):
        return (
            "cannot run with vllm-ascend's dyntra_lb_config (DyntraLB balances "
            "PD-disaggregated decode nodes by its own schedule() copy, balance "
            "scheduling is PD-mixed only): disable one of them"
        )
    recompute = "recompute_scheduler_enable"
    value = sched[recompute] if recompute in sched else additional.get(recompute)
    if value:
        return (
            "cannot run with vllm-ascend's recompute_scheduler_enable (the "
            "recompute scheduler serves PD-disaggregated decode nodes, with its "
            "own schedule() copy; balance scheduling is PD-mixed only): disable "
            "one of them"
        )
    return None
