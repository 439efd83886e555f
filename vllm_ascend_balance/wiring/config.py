# SPDX-License-Identifier: Apache-2.0
"""The balance scheduling setting: its keys (the switch's three forms,
:data:`SETTING`, :data:`LEGACY_SETTING`, :data:`ENV_SETTING`; the options,
:data:`OPTIONS`), the value each takes, examples and
:class:`BalanceConfigError`. Each check returns the value or raises a
one-line :class:`BalanceConfigError` naming the key, the fix and an
example: one per option (:data:`READERS`, ``(value, where) -> value``,
``where`` the key's section), :func:`knob` for a policy's knob,
:func:`gate_settings` across options. Nothing here reads a ``VllmConfig``
(:mod:`~vllm_ascend_balance.wiring.config_read` does).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from vllm_ascend_balance.gate.policies import (
    POLICIES,
    RETIRED,
    RETIRED_KEYS,
    Knob,
    knob_owners,
)
from vllm_ascend_balance.gate.settings import (
    COLLECTIVES,
    DEFAULT_POLICY,
    MAX_BOUND_STEPS,
    GateSettings,
)

SWITCH = "enable_balance_scheduling"
NESTED = "additional_config.scheduler_config"
TOP = "additional_config"
SETTING = f"{NESTED}.{SWITCH}"
LEGACY_SETTING = f"{TOP}.{SWITCH}"
ENV_SETTING = "VLLM_ASCEND_BALANCE_SCHEDULING"
#: Which vllm-ascend versions read :data:`ENV_SETTING` (docs/install.md).
ENV_READ_BY = "vllm-ascend <= 0.23.0.post1 and main (until vllm-ascend #14706 lands)"
#: This package's own ``additional_config`` key: the setting as the
#: front-end read it, carried to the engine processes.
CARRIED_KEY = "vllm_ascend_balance"
#: Default stall warning threshold, seconds (docs/operating.md, "Faults").
DEFAULT_STALL_WARNING_S = 60.0
#: The gate's own options, with an example value each (:func:`options`).
GATE_OPTIONS: dict[str, Any] = {
    "balance_max_frozen_steps": 64,
    "balance_max_held_steps": 64,
    # The first opt-in policy of the registry.
    "balance_policy": next(n for n in POLICIES if n != DEFAULT_POLICY),
    "balance_stall_warning_s": 60,
    "balance_collective": "all_reduce_max",
}
MAX_FROZEN_SETTING = f"{NESTED}.balance_max_frozen_steps"
STALL_SETTING = f"{NESTED}.balance_stall_warning_s"
COLLECTIVE_SETTING = f"{NESTED}.balance_collective"


def options() -> dict[str, Any]:
    """Every option key read next to a switch, with an example value: the
    gate's, every policy's knobs, retired policies' keys (to be refused)."""
    found = dict(GATE_OPTIONS)
    for spec in POLICIES.values():
        for declared in spec.knobs:
            found.setdefault(declared.key, declared.default)
    for key in RETIRED_KEYS:
        found.setdefault(key, None)
    return found


#: The options of the built-in policies (:func:`options` at import).
OPTIONS = options()


def example(key: str = SWITCH, value: Any = None) -> str:
    """A ``--additional-config`` argument that sets ``key`` (to ``value`` or
    its example value; with the switch on, a knob with its policy) in the
    nested section, the preferred form (docs/install.md), wherever the user
    wrote the key: a fix never suggests the deprecated top-level switch."""
    section: dict[str, Any] = {SWITCH: True}
    owners = knob_owners(key)
    if owners:
        section["balance_policy"] = owners[0]
    if key != SWITCH:
        section[key] = options()[key] if value is None else value
    return f"--additional-config '{json.dumps({'scheduler_config': section})}'"


ENABLE_EXAMPLE = example()
MAX_FROZEN_EXAMPLE = example("balance_max_frozen_steps")
MAX_HELD_EXAMPLE = example("balance_max_held_steps")
COLLECTIVE_EXAMPLE = example("balance_collective")
STALL_EXAMPLE = example("balance_stall_warning_s")


class BalanceConfigError(ValueError):
    """A balance scheduling setting that cannot work; the message names the
    setting and the fix, in one line."""


def shown(value: Any) -> str:
    """``value`` as the user wrote it in JSON, for refusals."""
    return json.dumps(value, default=str)


def require_bool(value: Any, setting: str) -> bool:
    """``value`` if it is a JSON boolean, else a refusal naming ``setting``."""
    if isinstance(value, bool):
        return value
    raise BalanceConfigError(
        f"{setting} must be a JSON boolean (true or false), got {shown(value)}: "
        f"use e.g. {ENABLE_EXAMPLE}"
    )


def _steps(value: Any, where: str, key: str, meaning: str, tail: str) -> int | None:
    if value is None:
        return None
    # bool is an int subclass: true must not read as 1.
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_BOUND_STEPS
    ):
        raise BalanceConfigError(
            f"{where}.{key} must be a positive JSON integer up to "
            f"{MAX_BOUND_STEPS} ({meaning}), got {shown(value)}: use e.g. "
            f"{example(key)}, or remove the key{tail}"
        )
    return value


def max_frozen_steps(value: Any, where: str) -> int | None:
    return _steps(
        value,
        where,
        "balance_max_frozen_steps",
        "consecutive frozen steps before the gate opens for one step",
        " for the unbounded gate",
    )


def max_held_steps(value: Any, where: str) -> int | None:
    return _steps(
        value,
        where,
        "balance_max_held_steps",
        "the most steps the gate holds any request before its prefill completes",
        "",
    )


def stall_warning_s(value: Any, where: str) -> float | None:
    if value is None:
        return DEFAULT_STALL_WARNING_S
    # bool is an int subclass: true must not read as 1 s.
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise BalanceConfigError(
            f"{where}.balance_stall_warning_s must be a positive JSON number of "
            f"seconds (a gather waiting that long for its DP peers logs a "
            f"warning), or 0 to turn the warning off, got {shown(value)}: use "
            f"e.g. {example('balance_stall_warning_s')}"
        )
    return float(value) if value > 0 else None


def collective(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in COLLECTIVES:
        raise BalanceConfigError(
            f"{where}.balance_collective must be one of "
            f"{', '.join(shown(c) for c in COLLECTIVES)}, got {shown(value)}: "
            f"use e.g. {example('balance_collective')}, or remove the key "
            f"for the policy's own"
        )
    return str(value)


def policy(value: Any, where: str) -> str:
    if value is None:
        return DEFAULT_POLICY
    if isinstance(value, str) and value in RETIRED:
        instead = RETIRED[value]
        raise BalanceConfigError(
            f"{where}.balance_policy {shown(value)} was retired: use "
            f"{shown(instead)} (e.g. {example('balance_policy', instead)}), "
            f"or remove the key for the contract ({DEFAULT_POLICY})"
        )
    if value not in POLICIES:
        close = (
            difflib.get_close_matches(value, list(POLICIES), n=1)
            if isinstance(value, str)
            else []
        )
        # The example sets the suggestion, where there is one.
        hint = (
            f"did you mean {shown(close[0])}? use {example('balance_policy', close[0])}"
            if close
            else f"use e.g. {example('balance_policy')}"
        )
        raise BalanceConfigError(
            f"{where}.balance_policy must be one of "
            f"{', '.join(shown(p) for p in POLICIES)}, got {shown(value)}: "
            f"{hint}, or remove the key for the contract ({DEFAULT_POLICY})"
        )
    return str(value)


def knob(spec: Knob, value: Any, where: str) -> int | float:
    """A policy's knob, checked against its declaration (type, range)."""
    # bool is an int subclass: true must not read as 1.
    kinds = (int,) if spec.kind is int else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or (isinstance(value, float) and not math.isfinite(value))
        or not spec.low <= value <= spec.high
    ):
        kind = "integer" if spec.kind is int else "number"
        raise BalanceConfigError(
            f"{where}.{spec.key} must be a JSON {kind} from {spec.low:g} to "
            f"{spec.high:g} ({spec.doc}), got {shown(value)}: use e.g. "
            f"{example(spec.key)}, or remove the key for its default "
            f"{spec.default:g}"
        )
    return spec.kind(value)


def gate_settings(
    values: Mapping[str, Any], where: str, sections: Mapping[str, str] | None = None
) -> GateSettings:
    """The gate's settings from the options read (``values``: key -> value,
    the gate's options already checked; ``sections``: key -> the section it
    was written in, ``where`` for a key not in it), with the checks across
    options: one bound at most, no retired key, no knob the policy does not
    read; the policy's knobs checked by their declarations.

    Raises:
        BalanceConfigError: one line naming the key and the fix.
    """
    frozen = values.get("balance_max_frozen_steps")
    held = values.get("balance_max_held_steps")
    if frozen is not None and held is not None:
        raise BalanceConfigError(
            f"{where} sets both balance_max_frozen_steps and "
            f"balance_max_held_steps: they are two bounds of the same fail-open, "
            f"keep one (e.g. {example('balance_max_held_steps')})"
        )
    name = values.get("balance_policy") or DEFAULT_POLICY
    spec = POLICIES[name]
    knobs = []
    for key, value in values.items():
        at = (sections or {}).get(key, where)
        if key in RETIRED_KEYS:
            raise BalanceConfigError(
                f"{at}.{key} went with the retired balance_policy "
                f"{shown(RETIRED_KEYS[key])}: remove the key (its replacement, "
                f"{shown(RETIRED[RETIRED_KEYS[key]])}, has no such setting)"
            )
        owners = knob_owners(key)
        if not owners or value is None:
            continue
        own = next((k for k in spec.knobs if k.key == key), None)
        if own is None:
            names = " and ".join(shown(o) for o in owners)
            raise BalanceConfigError(
                f"{at}.{key} is read by balance_policy {names} only, but "
                f"the policy is {shown(name)}: use e.g. {example(key)}, or "
                f"remove the key"
            )
        knobs.append((key, knob(own, value, at)))
    collective = values.get("balance_collective")
    return GateSettings(name, tuple(knobs), frozen, held, collective)


READERS: dict[str, Callable[[Any, str], Any]] = {
    "balance_policy": policy,
    "balance_max_frozen_steps": max_frozen_steps,
    "balance_max_held_steps": max_held_steps,
    "balance_stall_warning_s": stall_warning_s,
    "balance_collective": collective,
}
