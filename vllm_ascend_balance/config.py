# SPDX-License-Identifier: Apache-2.0
"""Read and validate the balance scheduling setting.

Three forms enable it, read with vllm-ascend's precedence (its
``AscendConfig``: the nested key, then the legacy top-level key, then the
environment variable), so a deployment that enables vllm-ascend's balance
scheduling enables this package's gate unchanged:

1. ``additional_config.scheduler_config.enable_balance_scheduling`` (a JSON
   boolean), e.g.::

       vllm serve MODEL --data-parallel-size 8 --additional-config \\
         '{"scheduler_config": {"enable_balance_scheduling": true}}'

2. the legacy top-level ``additional_config.enable_balance_scheduling``
   (deprecated, warns);
3. the environment variable ``VLLM_ASCEND_BALANCE_SCHEDULING`` (``1``/``0``,
   ``true``/``false``; deprecated, warns). It is read here, in every process
   that decides, rather than through ``AscendConfig``: an engine process whose
   ``AscendConfig`` is not initialised yet would otherwise miss it.

A lower-precedence form that disagrees is ignored with a warning, as
vllm-ascend ignores it. Where this package is stricter than vllm-ascend (a
JSON value that is not a boolean, e.g. ``"true"`` or ``1``, which vllm-ascend
would read as true), the value is refused with a one-line fix.

The opt-in bound against starvation is
``additional_config.scheduler_config.balance_max_frozen_steps`` (a positive
JSON integer N; absent or null = the unbounded contract): after N consecutive
frozen gathers the gate opens for one step (a "fail-open" step).

The stall warning is
``additional_config.scheduler_config.balance_stall_warning_s`` (seconds, a
positive JSON number; ``0`` turns it off; absent or null =
:data:`DEFAULT_STALL_WARNING_S`): a rank whose gather has waited that long
for its peers logs a warning, repeated at that interval, while it waits
(:mod:`~vllm_ascend_balance.stall`).

The opt-in log-depth collective is
``additional_config.scheduler_config.balance_collective``: ``"all_gather"``
(absent or null: the contract's all-gather of ``len(running)``) or
``"all_reduce_max"`` (the same decisions from ceil(log2 N) point-to-point
rounds instead of gloo's N-1 ring rounds; see
:mod:`~vllm_ascend_balance.collectives`).

The functions only read the ``VllmConfig`` they are given and the
environment mapping (``os.environ`` unless one is passed).
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

SETTING = "additional_config.scheduler_config.enable_balance_scheduling"
LEGACY_SETTING = "additional_config.enable_balance_scheduling"
ENV_SETTING = "VLLM_ASCEND_BALANCE_SCHEDULING"
_ENV_VALUES = {"1": True, "true": True, "0": False, "false": False}
ENABLE_EXAMPLE = (
    '--additional-config \'{"scheduler_config": {"enable_balance_scheduling": true}}\''
)
MAX_FROZEN_SETTING = "additional_config.scheduler_config.balance_max_frozen_steps"
MAX_FROZEN_EXAMPLE = (
    '--additional-config \'{"scheduler_config": {"enable_balance_scheduling": '
    'true, "balance_max_frozen_steps": 64}}\''
)
COLLECTIVE_SETTING = "additional_config.scheduler_config.balance_collective"
COLLECTIVE_EXAMPLE = (
    '--additional-config \'{"scheduler_config": {"enable_balance_scheduling": '
    'true, "balance_collective": "all_reduce_max"}}\''
)
STALL_SETTING = "additional_config.scheduler_config.balance_stall_warning_s"
STALL_EXAMPLE = (
    '--additional-config \'{"scheduler_config": {"enable_balance_scheduling": '
    'true, "balance_stall_warning_s": 60}}\''
)
#: Default stall warning threshold, seconds. On by default, and generous: in
#: a MoE deployment the ranks step in lock step, so a healthy gather waits
#: at most for the slowest peer's step (milliseconds to a few seconds, even
#: for a long prefill or a first-step graph compile); a minute without a
#: peer is a stall an operator wants to hear about, and otherwise sees
#: nowhere (/health stays 200 while every rank waits).
DEFAULT_STALL_WARNING_S = 60.0
#: The exchanges :mod:`~vllm_ascend_balance.collectives` implements; the
#: first is the contract's all-gather of ``len(running)``.
COLLECTIVES = ("all_gather", "all_reduce_max")
DEFAULT_COLLECTIVE = COLLECTIVES[0]
PD_DISAGGREGATED_ROLES = ("kv_producer", "kv_consumer")
#: The keys this package reads under ``additional_config.scheduler_config``.
KEYS = (
    "enable_balance_scheduling",
    "balance_max_frozen_steps",
    "balance_stall_warning_s",
    "balance_collective",
)


class BalanceConfigError(ValueError):
    """A balance scheduling setting that cannot work; the message names the
    setting and the fix, in one line."""


@dataclass(frozen=True)
class BalanceSetting:
    """What the configuration asks for.

    Attributes:
        enabled: whether balance scheduling is requested.
        source: where the value came from (:data:`SETTING`,
            :data:`LEGACY_SETTING`, :data:`ENV_SETTING` or ``"default"``).
        max_frozen_steps: :data:`MAX_FROZEN_SETTING`, the most consecutive
            frozen gathers before a fail-open step; None = unbounded (the
            contract as it is).
        stall_warning_s: :data:`STALL_SETTING`, seconds a gather may wait
            for its peers before the rank warns (and again every as many
            seconds); None = off.
        collective: :data:`COLLECTIVE_SETTING`, one of
            :data:`~vllm_ascend_balance.collectives.COLLECTIVES`.
    """

    enabled: bool
    source: str
    max_frozen_steps: int | None = None
    stall_warning_s: float | None = DEFAULT_STALL_WARNING_S
    collective: str = DEFAULT_COLLECTIVE


def _require_bool(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    raise BalanceConfigError(
        f"{setting} must be a JSON boolean (true or false), got {json.dumps(value)}: "
        f"use e.g. {ENABLE_EXAMPLE}"
    )


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


def _read_stall_warning_s(sched: dict[str, Any]) -> float | None:
    value = sched.get("balance_stall_warning_s")
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
            f"{STALL_SETTING} must be a positive JSON number of seconds (a "
            f"gather waiting that long for its DP peers logs a warning), or 0 "
            f"to turn the warning off, got {json.dumps(value, default=str)}: "
            f"use e.g. {STALL_EXAMPLE}"
        )
    return float(value) if value > 0 else None


def read_stall_warning_s(vllm_config: Any) -> float | None:
    """:data:`STALL_SETTING` of ``vllm_config`` in seconds, None = off (for
    the engine process, without re-reading the other settings and repeating
    their warnings).

    Raises:
        BalanceConfigError: the value is not a non-negative number.
    """
    additional = getattr(vllm_config, "additional_config", None) or {}
    return _read_stall_warning_s(_scheduler_section(additional))


def _read_collective(sched: dict[str, Any]) -> str:
    value = sched.get("balance_collective")
    if value is None:
        return DEFAULT_COLLECTIVE
    if value not in COLLECTIVES:
        raise BalanceConfigError(
            f"{COLLECTIVE_SETTING} must be one of "
            f"{', '.join(json.dumps(c) for c in COLLECTIVES)}, got "
            f"{json.dumps(value, default=str)}: use e.g. {COLLECTIVE_EXAMPLE}, "
            f"or remove the key for the default all_gather"
        )
    return str(value)


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


def read_balance_setting(
    vllm_config: Any, environ: Mapping[str, str] | None = None
) -> BalanceSetting:
    """Return the requested setting of ``vllm_config`` (a ``VllmConfig``),
    with ``environ`` (default ``os.environ``) for :data:`ENV_SETTING`.

    Raises:
        BalanceConfigError: a JSON value is not a boolean, the environment
            variable is not ``0``/``1``/``true``/``false``,
            ``scheduler_config`` in ``additional_config`` is not a mapping,
            :data:`MAX_FROZEN_SETTING` is not a positive integer,
            :data:`STALL_SETTING` is not a non-negative number,
            :data:`COLLECTIVE_SETTING` is not a known collective, or a key is
            one typo away from one of these settings.
    """
    additional = getattr(vllm_config, "additional_config", None) or {}
    sched = _scheduler_section(additional)
    _refuse_misspelled_keys(sched, "additional_config.scheduler_config", KEYS)
    _refuse_misspelled_keys(additional, "additional_config", KEYS[:1])
    max_frozen = _read_max_frozen_steps(sched)
    stall_warning_s = _read_stall_warning_s(sched)
    collective = _read_collective(sched)
    enabled, source = _read_enabled(
        additional, sched, os.environ if environ is None else environ
    )
    return BalanceSetting(enabled, source, max_frozen, stall_warning_s, collective)


def _read_env(environ: Mapping[str, str]) -> bool | None:
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


def _read_enabled(
    additional: Any, sched: dict[str, Any], environ: Mapping[str, str]
) -> tuple[bool, str]:
    """(enabled, source) by vllm-ascend's precedence: nested key, legacy key,
    environment variable."""
    forms: list[tuple[str, bool]] = []
    if sched.get("enable_balance_scheduling") is not None:
        nested = _require_bool(sched["enable_balance_scheduling"], SETTING)
        forms.append((SETTING, nested))
    if additional.get("enable_balance_scheduling") is not None:
        legacy = _require_bool(additional["enable_balance_scheduling"], LEGACY_SETTING)
        forms.append((LEGACY_SETTING, legacy))
    from_env = _read_env(environ)
    if from_env is not None:
        forms.append((ENV_SETTING, from_env))
    if not forms:
        return False, "default"
    source, enabled = forms[0]
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
