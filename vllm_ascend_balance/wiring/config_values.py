# SPDX-License-Identifier: Apache-2.0
"""Each balance option's value, checked: the value as read, or a one-line
refusal naming the key, the fix and an example
(:class:`~vllm_ascend_balance.wiring.config.BalanceConfigError`).

One reader per option (:data:`READERS`, ``(value, where) -> value``; ``where``
is the section the key is written in), plus the checks across options
(:func:`one_bound`, :func:`aligned_only`). Used by
:mod:`~vllm_ascend_balance.wiring.config_read` for what the user wrote and for
the setting carried to the engines.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.wiring.config import (
    COLLECTIVES,
    DEADLINE_POLICIES,
    DEFAULT_COLLECTIVE,
    DEFAULT_POLICY,
    DEFAULT_STALL_WARNING_S,
    ENABLE_EXAMPLE,
    NEEDS_ALIGNED,
    POLICIES,
    READ_BY,
    BalanceConfigError,
    BalanceSetting,
    example,
    shown,
)


def require_bool(value: Any, setting: str) -> bool:
    """``value`` if it is a JSON boolean, else a refusal naming ``setting``."""
    if isinstance(value, bool):
        return value
    raise BalanceConfigError(
        f"{setting} must be a JSON boolean (true or false), got {shown(value)}: "
        f"use e.g. {ENABLE_EXAMPLE}"
    )


def _positive_int(value: Any, where: str, key: str, meaning: str, tail: str) -> int:
    # bool is an int subclass: true must not read as 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BalanceConfigError(
            f"{where}.{key} must be a positive JSON integer ({meaning}), got "
            f"{shown(value)}: use e.g. {example(key, where)}, or remove the key{tail}"
        )
    return value


def max_frozen_steps(value: Any, where: str) -> int | None:
    if value is None:
        return None
    return _positive_int(
        value,
        where,
        "balance_max_frozen_steps",
        "consecutive frozen steps before the gate opens for one step",
        " for the unbounded gate",
    )


def max_held_steps(value: Any, where: str) -> int | None:
    if value is None:
        return None
    return _positive_int(
        value,
        where,
        "balance_max_held_steps",
        "consecutive frozen steps holding a request before the gate opens for one step",
        "",
    )


def one_bound(frozen: int | None, held: int | None, where: str) -> None:
    if frozen is not None and held is not None:
        raise BalanceConfigError(
            f"{where} sets both balance_max_frozen_steps and "
            f"balance_max_held_steps: they are two bounds of the same fail-open, "
            f"keep one (e.g. {example('balance_max_held_steps')})"
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
            f"e.g. {example('balance_stall_warning_s', where)}"
        )
    return float(value) if value > 0 else None


def collective(value: Any, where: str) -> str:
    if value is None:
        return DEFAULT_COLLECTIVE
    if value not in COLLECTIVES:
        raise BalanceConfigError(
            f"{where}.balance_collective must be one of "
            f"{', '.join(shown(c) for c in COLLECTIVES)}, got {shown(value)}: "
            f"use e.g. {example('balance_collective', where)}, or remove the key "
            f"for the default all_gather"
        )
    return str(value)


def policy(value: Any, where: str) -> str:
    if value is None:
        return DEFAULT_POLICY
    if value not in POLICIES:
        close = (
            difflib.get_close_matches(value, list(POLICIES), n=1)
            if isinstance(value, str)
            else []
        )
        hint = f"did you mean {shown(close[0])}? " if close else ""
        raise BalanceConfigError(
            f"{where}.balance_policy must be one of "
            f"{', '.join(shown(p) for p in POLICIES)}, got {shown(value)}: "
            f"{hint}use e.g. {example('balance_policy', where)}, or remove the "
            f"key for the contract (leader_at_cap)"
        )
    return str(value)


def align_window(value: Any, where: str) -> int | None:
    if value is None:
        return None
    return _positive_int(
        value,
        where,
        "balance_align_window",
        "the most steps between two aligned prefill openings",
        " for the default",
    )


def align_min_load(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= 1
    ):
        raise BalanceConfigError(
            f"{where}.balance_align_min_load must be a JSON number from 0 to 1 "
            f"(the fill of the cap below which the aligned policy does not "
            f"align), got {shown(value)}: use e.g. "
            f"{example('balance_align_min_load', where)}, or remove the key"
        )
    return float(value)


def aligned_only(setting: BalanceSetting, where: str) -> BalanceSetting:
    """Refuses knobs the chosen policy would ignore; returns ``setting``."""
    if setting.policy in DEADLINE_POLICIES and setting.max_frozen_steps is not None:
        raise BalanceConfigError(
            f"{where}: balance_policy {shown(setting.policy)} bounds every hold "
            f"with balance_max_held_steps, not balance_max_frozen_steps: use e.g. "
            f"{example('balance_max_held_steps', where)} with that policy"
        )
    for key in NEEDS_ALIGNED:
        readers = READ_BY[key]
        if setting.policy in readers:
            continue
        if getattr(setting, key.removeprefix("balance_")) is not None:
            names = " and ".join(f'"{r}"' for r in readers)
            raise BalanceConfigError(
                f"{where}.{key} is read by balance_policy {names} only, but "
                f"the policy is {setting.policy!r}: use e.g. {example(key)}, or "
                f"remove the key"
            )
    return setting


READERS: dict[str, Callable[[Any, str], Any]] = {
    "balance_align_window": align_window,
    "balance_align_min_load": align_min_load,
    "balance_policy": policy,
    "balance_max_frozen_steps": max_frozen_steps,
    "balance_max_held_steps": max_held_steps,
    "balance_stall_warning_s": stall_warning_s,
    "balance_collective": collective,
}
