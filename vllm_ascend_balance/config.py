# SPDX-License-Identifier: Apache-2.0
"""Read and validate the balance scheduling setting.

The setting is ``additional_config.scheduler_config.enable_balance_scheduling``
(a JSON boolean), e.g.::

    vllm serve MODEL --data-parallel-size 8 \\
        --additional-config '{"scheduler_config": {"enable_balance_scheduling": true}}'

The legacy top-level ``additional_config.enable_balance_scheduling`` is
accepted with a deprecation warning. When ``vllm_ascend`` is installed and its
``AscendConfig`` is initialised, its ``enable_balance_scheduling`` is read
first (mirrors ``_balance_scheduling_enabled`` in vllm-ascend's
``patch_balance_schedule.py``; the env var ``VLLM_ASCEND_BALANCE_SCHEDULING``
is left to ``AscendConfig``, which parses it centrally).

The opt-in bound against starvation is
``additional_config.scheduler_config.balance_max_frozen_steps`` (a positive
JSON integer N; absent or null = the unbounded contract): after N consecutive
frozen gathers the gate opens for one step (a "fail-open" step). It is read
from ``additional_config`` only (vllm-ascend's ``AscendConfig`` has no such
field).

The functions only read attributes of the ``VllmConfig`` they are given.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

SETTING = "additional_config.scheduler_config.enable_balance_scheduling"
LEGACY_SETTING = "additional_config.enable_balance_scheduling"
ENABLE_EXAMPLE = (
    '--additional-config \'{"scheduler_config": {"enable_balance_scheduling": true}}\''
)
MAX_FROZEN_SETTING = "additional_config.scheduler_config.balance_max_frozen_steps"
MAX_FROZEN_EXAMPLE = (
    '--additional-config \'{"scheduler_config": {"enable_balance_scheduling": '
    'true, "balance_max_frozen_steps": 64}}\''
)
PD_DISAGGREGATED_ROLES = ("kv_producer", "kv_consumer")
#: The keys this package reads under ``additional_config.scheduler_config``.
KEYS = ("enable_balance_scheduling", "balance_max_frozen_steps")


class BalanceConfigError(ValueError):
    """A balance scheduling setting that cannot work; the message names the
    setting and the fix, in one line."""


@dataclass(frozen=True)
class BalanceSetting:
    """What the configuration asks for.

    Attributes:
        enabled: whether balance scheduling is requested.
        source: where the value came from (``"AscendConfig"``, :data:`SETTING`,
            :data:`LEGACY_SETTING` or ``"default"``).
        max_frozen_steps: :data:`MAX_FROZEN_SETTING`, the most consecutive
            frozen gathers before a fail-open step; None = unbounded (the
            contract as it is).
    """

    enabled: bool
    source: str
    max_frozen_steps: int | None = None


def _require_bool(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    raise BalanceConfigError(
        f"{setting} must be a JSON boolean (true or false), got {json.dumps(value)}: "
        f"use e.g. {ENABLE_EXAMPLE}"
    )


def _from_ascend_config() -> bool | None:
    """``AscendConfig.enable_balance_scheduling`` if vllm_ascend is present
    and its config is initialised, else None."""
    try:
        from vllm_ascend.ascend_config import get_ascend_config
    except ImportError:
        return None
    try:
        ascend_config = get_ascend_config()
    except Exception:  # not initialised yet in this process: fall back
        return None
    for holder in (getattr(ascend_config, "scheduler_config", None), ascend_config):
        value = getattr(holder, "enable_balance_scheduling", None)
        if value is not None:
            return _require_bool(value, "AscendConfig.enable_balance_scheduling")
    return None


def _scheduler_section(additional: Any) -> dict[str, Any]:
    sched = additional.get("scheduler_config", {})
    if sched is None:
        return {}
    if not isinstance(sched, dict):
        raise BalanceConfigError(
            f"additional_config.scheduler_config must be a JSON object, got "
            f"{json.dumps(sched, default=str)}: use e.g. {ENABLE_EXAMPLE}"
        )
    return sched


def _read_max_frozen_steps(sched: dict[str, Any]) -> int | None:
    value = sched.get("balance_max_frozen_steps")
    if value is None:
        return None
    # bool is an int subclass: true must not read as 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BalanceConfigError(
            f"{MAX_FROZEN_SETTING} must be a positive JSON integer (consecutive "
            f"frozen steps before the gate opens for one step), got "
            f"{json.dumps(value, default=str)}: use e.g. {MAX_FROZEN_EXAMPLE}, "
            f"or remove the key for the unbounded gate"
        )
    return value


def _refuse_misspelled_keys(
    section: dict[str, Any], where: str, known: tuple[str, ...]
) -> None:
    """A key one typo away from a setting would silently leave it at its
    default (for the bound: an unbounded gate), so it is refused."""
    for key in section:
        if key in known or not isinstance(key, str):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if close:
            raise BalanceConfigError(
                f"{where}.{key} is not a balance scheduling setting: did you mean "
                f"{close[0]}? (e.g. {MAX_FROZEN_EXAMPLE})"
            )


def read_balance_setting(vllm_config: Any) -> BalanceSetting:
    """Return the requested setting of ``vllm_config`` (a ``VllmConfig``).

    Raises:
        BalanceConfigError: the value is not a boolean, ``scheduler_config`` in
            ``additional_config`` is not a mapping, the new and legacy keys
            disagree, :data:`MAX_FROZEN_SETTING` is not a positive integer, or
            a key is one typo away from one of these settings.
    """
    additional = getattr(vllm_config, "additional_config", None) or {}
    sched = _scheduler_section(additional)
    _refuse_misspelled_keys(sched, "additional_config.scheduler_config", KEYS)
    _refuse_misspelled_keys(additional, "additional_config", KEYS[:1])
    max_frozen = _read_max_frozen_steps(sched)
    enabled, source = _read_enabled(additional, sched)
    return BalanceSetting(enabled, source, max_frozen)


def _read_enabled(additional: Any, sched: dict[str, Any]) -> tuple[bool, str]:
    from_ascend = _from_ascend_config()
    if from_ascend is not None:
        return from_ascend, "AscendConfig"
    new = sched.get("enable_balance_scheduling")
    legacy = additional.get("enable_balance_scheduling")
    if new is not None:
        enabled = _require_bool(new, SETTING)
        if legacy is not None and _require_bool(legacy, LEGACY_SETTING) != enabled:
            raise BalanceConfigError(
                f"{SETTING}={json.dumps(enabled)} contradicts the deprecated "
                f"{LEGACY_SETTING}={json.dumps(legacy)}: remove the deprecated key"
            )
        return enabled, SETTING
    if legacy is not None:
        enabled = _require_bool(legacy, LEGACY_SETTING)
        logger.warning(
            "%s is deprecated; use %s instead (%s)",
            LEGACY_SETTING,
            SETTING,
            ENABLE_EXAMPLE,
        )
        return enabled, LEGACY_SETTING
    return False, "default"


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
