# SPDX-License-Identifier: Apache-2.0
"""The switch: whether balance scheduling is on, read from its three forms
with vllm-ascend's precedence (the nested key, the legacy top-level key, the
environment variable; see :mod:`~vllm_ascend_balance.wiring.config`), and
where it may be on (PD-mixed deployments only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.wiring.config import (
    ENABLE_EXAMPLE,
    ENV_SETTING,
    LEGACY_SETTING,
    NESTED,
    PD_DISAGGREGATED_ROLES,
    SETTING,
    SWITCH,
    BalanceConfigError,
    shown,
)
from vllm_ascend_balance.wiring.config_values import require_bool

logger = init_logger(__name__)

_ENV_VALUES = {"1": True, "true": True, "0": False, "false": False}


def scheduler_section(additional: Mapping[str, Any]) -> Mapping[str, Any]:
    sched = additional.get("scheduler_config", {})
    if sched is None:
        return {}
    if not isinstance(sched, Mapping):
        raise BalanceConfigError(
            f"{NESTED} must be a JSON object, got {shown(sched)}: use e.g. "
            f"{ENABLE_EXAMPLE}"
        )
    return sched


def read_env(environ: Mapping[str, str]) -> bool | None:
    raw = environ.get(ENV_SETTING)
    if raw is None:
        return None
    value = _ENV_VALUES.get(raw.strip().lower())
    if value is None:
        raise BalanceConfigError(
            f"{ENV_SETTING}={raw!r} is not 1, 0, true or false: unset it and use "
            f"{ENABLE_EXAMPLE}"
        )
    return value


def read_enabled(
    additional: Mapping[str, Any],
    sched: Mapping[str, Any],
    environ: Mapping[str, str],
    quiet: bool,
) -> tuple[bool, str]:
    """(enabled, source) by vllm-ascend's precedence: nested key, legacy key,
    environment variable."""
    forms: list[tuple[str, bool]] = []
    if sched.get(SWITCH) is not None:
        forms.append((SETTING, require_bool(sched[SWITCH], SETTING)))
    if additional.get(SWITCH) is not None:
        forms.append((LEGACY_SETTING, require_bool(additional[SWITCH], LEGACY_SETTING)))
    from_env = read_env(environ)
    if from_env is not None:
        forms.append((ENV_SETTING, from_env))
    if not forms:
        return False, "default"
    source, enabled = forms[0]
    if quiet:
        return enabled, source
    if source != SETTING:
        logger.warning(
            "%s is deprecated; use %s instead (%s)", source, SETTING, ENABLE_EXAMPLE
        )
    for ignored, value in forms[1:]:
        if value != enabled:
            logger.warning(
                "balance scheduling: %s=%s is ignored, %s=%s takes precedence",
                ignored,
                json.dumps(value),
                source,
                json.dumps(enabled),
            )
    return enabled, source


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
