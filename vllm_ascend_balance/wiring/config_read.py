# SPDX-License-Identifier: Apache-2.0
"""Read a ``VllmConfig`` into a :class:`BalanceSetting`: the setting carried
to the engines where the front-end left one
(:data:`~vllm_ascend_balance.wiring.config.CARRIED_KEY`), else what the user
wrote, the switch by vllm-ascend's precedence (the nested key, the legacy
top-level key, the environment variable; a lower form that disagrees is
ignored with a warning) and the options next to the switch that enables
balance. The refusals and warnings: docs/operating.md, "Refused at
startup"; each value is checked by :mod:`~vllm_ascend_balance.wiring.config`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.gate.settings import GateSettings
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.wiring.config import (
    CARRIED_KEY,
    DEFAULT_STALL_WARNING_S,
    ENABLE_EXAMPLE,
    ENV_SETTING,
    LEGACY_SETTING,
    NESTED,
    READERS,
    SETTING,
    SWITCH,
    TOP,
    BalanceConfigError,
    gate_settings,
    options,
    require_bool,
    shown,
)
from vllm_ascend_balance.wiring.config_sections import (
    misplaced_section,
    scheduler_section,
    unknown_keys,
    written_options,
)

logger = init_logger(__name__)

_ENV_VALUES = {"1": True, "true": True, "0": False, "false": False}


@dataclass(frozen=True)
class BalanceSetting:
    """What the configuration asks for.

    Attributes:
        enabled: whether balance scheduling is requested.
        source: where the value came from (the switch's form, e.g.
            :data:`~vllm_ascend_balance.wiring.config.SETTING`, or
            ``"default"``).
        gate: the gate's settings (policy, knobs, bounds, collective), as
            every rank's gate and the simulated engine receive them.
        stall_warning_s: ``balance_stall_warning_s``, seconds a gather may
            wait for its peers before the rank warns (and again every as
            many seconds); None = off.
        written: ``(option key, section)`` for each option the user wrote,
            the section :data:`~vllm_ascend_balance.wiring.config.NESTED` or
            :data:`~vllm_ascend_balance.wiring.config.TOP`
            (:meth:`setting_of`).
    """

    enabled: bool
    source: str
    gate: GateSettings = GateSettings()
    stall_warning_s: float | None = DEFAULT_STALL_WARNING_S
    written: tuple[tuple[str, str], ...] = ()

    def setting_of(self, key: str) -> str:
        """The full name of option ``key`` where the user wrote it (an option
        may sit at the top level next to the nested switch); the nested one
        where it was not written."""
        return f"{dict(self.written).get(key, NESTED)}.{key}"

    @property
    def policy(self) -> str:
        return self.gate.policy

    @property
    def max_frozen_steps(self) -> int | None:
        return self.gate.max_frozen_steps

    @property
    def max_held_steps(self) -> int | None:
        return self.gate.max_held_steps

    @property
    def collective(self) -> str | None:
        return self.gate.collective

    def carried(self) -> dict[str, Any]:
        """This setting as the JSON object carried under
        :data:`~vllm_ascend_balance.wiring.config.CARRIED_KEY`."""
        body = dataclasses.asdict(self)
        body["gate"]["knobs"] = dict(self.gate.knobs)
        body["written"] = dict(self.written)
        return body


def read_balance_setting(
    vllm_config: Any, environ: Mapping[str, str] | None = None, quiet: bool = False
) -> BalanceSetting:
    """Return the requested setting of ``vllm_config`` (a ``VllmConfig``),
    with ``environ`` (default ``os.environ``) for :data:`ENV_SETTING`; the
    setting carried under :data:`CARRIED_KEY` where the front-end left one.
    ``quiet``: log no deprecation or "does nothing" warnings (a second read
    of the same config).

    Raises:
        BalanceConfigError: the switch or the environment variable is not a
            boolean, a section is misplaced or not an object, a key is one
            typo away from the switch; where balance is requested also: an
            option's value is wrong or written twice, or a key is unknown.
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
    sched = scheduler_section(additional)
    misplaced = misplaced_section(additional)
    if misplaced:
        raise BalanceConfigError(misplaced)
    unknown = unknown_keys(sched, NESTED, prefixless=True) + unknown_keys(
        additional, TOP
    )
    switch_typos = [u for u in unknown if f"did you mean {SWITCH}?" in u]
    if switch_typos:
        raise BalanceConfigError(switch_typos[0])
    enabled, source = _read_enabled(additional, sched, environ, quiet)
    if not enabled:
        ignored = [k for k in options() if k in sched or k in additional]
        ignored += [u.split(" ", 1)[0] for u in unknown]
        if ignored and not quiet:
            logger.warning(
                "balance scheduling is off (%s), so %s %s nothing",
                source,
                ", ".join(ignored),
                "does" if len(ignored) == 1 else "do",
            )
        return BalanceSetting(False, source)
    if unknown:
        raise BalanceConfigError(unknown[0])
    where = TOP if source == LEGACY_SETTING else NESTED
    written = written_options(additional, sched)
    sections = {key: at for key, (at, _) in written.items()}
    values = {
        key: READERS[key](value, at) if key in READERS else value
        for key, (at, value) in written.items()
    }
    stall = values.pop("balance_stall_warning_s", DEFAULT_STALL_WARNING_S)
    gate = gate_settings(values, where, sections)
    return BalanceSetting(True, source, gate, stall, tuple(sorted(sections.items())))


def _read_carried(carried: Any) -> BalanceSetting:
    """The setting under :data:`CARRIED_KEY`, checked as strictly as the
    user's (a hand-written one gets the same refusals)."""
    where = f"{TOP}.{CARRIED_KEY}"
    fields = {f.name for f in dataclasses.fields(BalanceSetting)}
    gate = carried.get("gate", {}) if isinstance(carried, Mapping) else None
    gate_fields = {f.name for f in dataclasses.fields(GateSettings)}
    written = carried.get("written", {}) if isinstance(carried, Mapping) else None
    if (
        not isinstance(carried, Mapping)
        or not set(carried) <= fields
        or not isinstance(gate, Mapping)
        or not set(gate) <= gate_fields
        or not isinstance(gate.get("knobs", {}), Mapping)
        or not isinstance(written, Mapping)
        or not set(written) <= set(options())
        or not set(written.values()) <= {NESTED, TOP}
    ):
        raise BalanceConfigError(
            f"{where} is written by vllm-ascend-balance for its engine processes "
            f"and must not be set by hand, got {shown(carried)}: remove it and use "
            f"{ENABLE_EXAMPLE}"
        )
    enabled = require_bool(carried.get("enabled", False), f"{where}.enabled")
    stall = carried.get("stall_warning_s", DEFAULT_STALL_WARNING_S)
    values: dict[str, Any] = {
        f"balance_{name}": READERS[f"balance_{name}"](gate.get(name), where)
        for name in ("policy", "max_frozen_steps", "max_held_steps", "collective")
    }
    values.update(gate.get("knobs", {}))
    return BalanceSetting(
        enabled,
        str(carried.get("source", where)),
        gate_settings(values, where),
        None if stall is None else READERS["balance_stall_warning_s"](stall, where),
        tuple(sorted(written.items())),
    )


def read_stall_warning_s(vllm_config: Any) -> float | None:
    """``balance_stall_warning_s`` of ``vllm_config`` in seconds, None = off:
    :func:`read_balance_setting`'s, without repeating its warnings."""
    return read_balance_setting(vllm_config, quiet=True).stall_warning_s


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
    additional: Mapping[str, Any],
    sched: Mapping[str, Any],
    environ: Mapping[str, str],
    quiet: bool,
) -> tuple[bool, str]:
    """(enabled, source) by vllm-ascend's precedence: nested key, legacy key,
    environment variable."""
    forms: list[tuple[str, bool]] = []
    # null too is refused (docs/operating.md): read as absent, it would leave
    # balance off without a word where the user meant to say something.
    if SWITCH in sched:
        forms.append((SETTING, require_bool(sched[SWITCH], SETTING)))
    if SWITCH in additional:
        forms.append((LEGACY_SETTING, require_bool(additional[SWITCH], LEGACY_SETTING)))
    from_env = _read_env(environ)
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
                # The env var as the user set it ("1", not "true").
                environ[ENV_SETTING] if ignored == ENV_SETTING else json.dumps(value),
                source,
                json.dumps(enabled),
            )
    return enabled, source
