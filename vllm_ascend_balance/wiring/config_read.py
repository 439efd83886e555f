# SPDX-License-Identifier: Apache-2.0
"""Read a ``VllmConfig`` into a
:class:`~vllm_ascend_balance.wiring.config.BalanceSetting`: the setting
carried to the engines where there is one, else what the user wrote (the
switch by :mod:`~vllm_ascend_balance.wiring.config_switch`, each option by
:mod:`~vllm_ascend_balance.wiring.config_values`), with the refusals and
warnings the module docstring of :mod:`~vllm_ascend_balance.wiring.config`
lists.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.wiring import config_switch as switch
from vllm_ascend_balance.wiring import config_values
from vllm_ascend_balance.wiring.config import (
    CARRIED_KEY,
    DEFAULT_STALL_WARNING_S,
    ENABLE_EXAMPLE,
    LEGACY_SETTING,
    NESTED,
    SWITCH,
    TOP,
    BalanceConfigError,
    BalanceSetting,
    example,
    keys,
    options,
    shown,
)
from vllm_ascend_balance.wiring.config_values import require_bool

logger = init_logger(__name__)


def read_stall_warning_s(vllm_config: Any) -> float | None:
    """``balance_stall_warning_s`` of ``vllm_config`` in seconds, None = off
    (for the engine process; the same value :func:`read_balance_setting`
    returns, without repeating its warnings).

    Raises:
        BalanceConfigError: the value is not a non-negative number.
    """
    return read_balance_setting(vllm_config, quiet=True).stall_warning_s


def _unknown_keys(section: Mapping[str, Any], where: str) -> list[str]:
    """One-line refusals for keys of ``section`` that look like balance
    settings but are not: ``balance_*`` keys this package does not know, and
    keys one typo away from a known one (which would leave it at its
    default, for the bound an unbounded gate)."""
    found = []
    known = keys()
    for key in section:
        if not isinstance(key, str) or key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if not close and not key.startswith("balance_"):
            continue
        hint = (
            f"did you mean {close[0]}? (e.g. {example(close[0], where)})"
            if close
            else f"the known ones are {', '.join(known)} (e.g. "
            f"{example('balance_max_frozen_steps', where)})"
        )
        found.append(f"{where}.{key} is not a balance scheduling setting: {hint}")
    return found


def _misplaced_section(additional: Mapping[str, Any]) -> str | None:
    """A one-line refusal for a top-level object other than
    ``scheduler_config`` that holds balance keys (``"scheduler_confg"``), or
    None. Other plugins own other top-level keys, so only a section holding
    our keys is refused: left alone, balance would silently stay off."""
    for key, value in additional.items():
        if key in ("scheduler_config", CARRIED_KEY) or not isinstance(value, Mapping):
            continue
        ours = [
            k
            for k in value
            if isinstance(k, str) and (k == SWITCH or k.startswith("balance_"))
        ]
        if ours:
            return (
                f"{TOP}.{key} holds balance scheduling settings ({', '.join(ours)}) "
                f'but they are read only under "scheduler_config": move them '
                f"there (e.g. {ENABLE_EXAMPLE})"
            )
    return None


def _options(
    additional: Mapping[str, Any], sched: Mapping[str, Any]
) -> dict[str, tuple[str, Any]]:
    """The options written, each with the section it is written in.

    Raises:
        BalanceConfigError: an option is written in both sections.
    """
    found: dict[str, tuple[str, Any]] = {}
    for key in options():
        places = [
            (w, s[key]) for w, s in ((NESTED, sched), (TOP, additional)) if key in s
        ]
        if len(places) > 1:
            raise BalanceConfigError(
                f"{key} is set both in {NESTED} and at the top level of {TOP}: "
                f"keep one, next to the switch you use (e.g. {example(key)})"
            )
        if places:
            found[key] = places[0]
    return found


def read_balance_setting(
    vllm_config: Any, environ: Mapping[str, str] | None = None, quiet: bool = False
) -> BalanceSetting:
    """Return the requested setting of ``vllm_config`` (a ``VllmConfig``),
    with ``environ`` (default ``os.environ``) for :data:`ENV_SETTING`; the
    setting carried under :data:`CARRIED_KEY` where the front-end left one.
    ``quiet``: log no deprecation or "does nothing" warnings (a second read
    of the same config).

    Raises:
        BalanceConfigError: the switch is not a JSON boolean, the environment
            variable is not ``0``/``1``/``true``/``false``,
            ``scheduler_config`` in ``additional_config`` is not a mapping,
            another top-level object holds balance keys, a key is one typo
            away from the switch; where balance is requested
            also: an option has a value of the wrong type or is written twice,
            or a ``balance_*`` key is unknown (see the module docstring).
    """
    additional = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(additional, Mapping):
        raise BalanceConfigError(
            f"{TOP} must be a JSON object, got {shown(additional)}: use e.g. "
            f"{ENABLE_EXAMPLE}"
        )
    carried = additional.get(CARRIED_KEY)
    if carried is not None:
        return _read_carried(carried)
    return read_user_setting(
        additional, os.environ if environ is None else environ, quiet
    )


def read_user_setting(
    additional: Mapping[str, Any], environ: Mapping[str, str], quiet: bool = False
) -> BalanceSetting:
    """:func:`read_balance_setting` of an ``additional_config`` as the user
    wrote it (no carried setting)."""
    sched = switch.scheduler_section(additional)
    misplaced = _misplaced_section(additional)
    if misplaced:
        raise BalanceConfigError(misplaced)
    unknown = _unknown_keys(sched, NESTED) + _unknown_keys(additional, TOP)
    switch_typos = [u for u in unknown if f"did you mean {SWITCH}?" in u]
    if switch_typos:
        raise BalanceConfigError(switch_typos[0])
    enabled, source = switch.read_enabled(additional, sched, environ, quiet)
    if not enabled:
        written = [k for k in options() if k in sched or k in additional]
        if (written or unknown) and not quiet:
            logger.warning(
                "balance scheduling is off (%s), so %s do nothing",
                source,
                ", ".join(written + [u.split(" ", 1)[0] for u in unknown]),
            )
        return BalanceSetting(False, source)
    if unknown:
        raise BalanceConfigError(unknown[0])
    where = TOP if source == LEGACY_SETTING else NESTED
    values = {
        key: config_values.READERS[key](value, at)
        if key in config_values.READERS
        else value
        for key, (at, value) in _options(additional, sched).items()
    }
    stall = values.pop("balance_stall_warning_s", DEFAULT_STALL_WARNING_S)
    gate = config_values.gate_settings(values, where)
    return BalanceSetting(True, source, gate, stall)


def _read_carried(carried: Any) -> BalanceSetting:
    """The setting under :data:`CARRIED_KEY`, checked as strictly as the
    user's (a hand-written one gets the same refusals)."""
    where = f"{TOP}.{CARRIED_KEY}"
    fields = {f.name for f in dataclasses.fields(BalanceSetting)}
    gate = carried.get("gate", {}) if isinstance(carried, Mapping) else None
    gate_fields = {f.name for f in dataclasses.fields(GateSettings)}
    if (
        not isinstance(carried, Mapping)
        or not set(carried) <= fields
        or not isinstance(gate, Mapping)
        or not set(gate) <= gate_fields
        or not isinstance(gate.get("knobs", {}), Mapping)
    ):
        raise BalanceConfigError(
            f"{where} is written by vllm-ascend-balance for its engine processes "
            f"and must not be set by hand, got {shown(carried)}: remove it and use "
            f"{ENABLE_EXAMPLE}"
        )
    enabled = require_bool(carried.get("enabled", False), f"{where}.enabled")
    stall = carried.get("stall_warning_s", DEFAULT_STALL_WARNING_S)
    values: dict[str, Any] = {
        "balance_policy": config_values.policy(gate.get("policy"), where),
        "balance_max_frozen_steps": config_values.max_frozen_steps(
            gate.get("max_frozen_steps"), where
        ),
        "balance_max_held_steps": config_values.max_held_steps(
            gate.get("max_held_steps"), where
        ),
        "balance_collective": config_values.collective(gate.get("collective"), where),
        **gate.get("knobs", {}),
    }
    return BalanceSetting(
        enabled,
        str(carried.get("source", where)),
        config_values.gate_settings(values, where),
        None if stall is None else config_values.stall_warning_s(stall, where),
    )
