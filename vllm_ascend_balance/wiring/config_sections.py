# SPDX-License-Identifier: Apache-2.0
"""Where balance keys sit in an ``additional_config`` as the user wrote it:
the nested section (:func:`scheduler_section`), a misplaced one
(:func:`misplaced_section`), each option's section
(:func:`written_options`) and the keys that look like balance settings but
are not (:func:`unknown_keys`). Values are not checked here
(:mod:`~vllm_ascend_balance.wiring.config` does);
:mod:`~vllm_ascend_balance.wiring.config_read` reads the setting from these.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.gate.policies import RETIRED_KEYS
from vllm_ascend_balance.wiring.config import (
    CARRIED_KEY,
    ENABLE_EXAMPLE,
    NESTED,
    SWITCH,
    TOP,
    BalanceConfigError,
    example,
    options,
    shown,
)


def scheduler_section(additional: Mapping[str, Any]) -> Mapping[str, Any]:
    """``additional_config.scheduler_config`` ({} where absent or null).

    Raises:
        BalanceConfigError: it is not a JSON object.
    """
    sched = additional.get("scheduler_config", {})
    if sched is None:
        return {}
    if not isinstance(sched, Mapping):
        raise BalanceConfigError(
            f"{NESTED} must be a JSON object, got {shown(sched)}: use e.g. "
            f"{ENABLE_EXAMPLE}"
        )
    return sched


def misplaced_section(additional: Mapping[str, Any]) -> str | None:
    """A one-line refusal for a top-level object other than
    ``scheduler_config`` holding balance keys (``"scheduler_confg"``), or
    None; other plugins' top-level objects are not looked at."""
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


def written_options(
    additional: Mapping[str, Any], sched: Mapping[str, Any]
) -> dict[str, tuple[str, Any]]:
    """The options written, each as ``(section, value)``: :data:`NESTED`
    (``sched``) or :data:`TOP`.

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


def unknown_keys(
    section: Mapping[str, Any], where: str, prefixless: bool = False
) -> list[str]:
    """One-line refusals for keys of ``section`` that look like balance
    settings but are not: unknown ``balance_*`` keys, keys one typo away
    from a known one (which would leave it at its default) and, where
    ``prefixless`` (the nested section, whose other keys are vllm-ascend's
    few; the top level holds any plugin's), a known option without its
    ``balance_`` prefix (``max_frozen_steps``)."""
    found = []
    known = (SWITCH, *options())  # retired keys too: refused on their own
    current = [k for k in known if k not in RETIRED_KEYS]
    for key in section:
        if not isinstance(key, str) or key in known:
            continue
        close = difflib.get_close_matches(key, current, n=1, cutoff=0.85)
        if prefixless and f"balance_{key}" in current:
            close = [f"balance_{key}"]
        if not close and not key.startswith("balance_"):
            continue
        hint = (
            f"did you mean {close[0]}? (e.g. {example(close[0])})"
            if close
            else f"the known ones are {', '.join(current)} (e.g. "
            f"{example('balance_max_frozen_steps')})"
        )
        found.append(f"{where}.{key} is not a balance scheduling setting: {hint}")
    return found
