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
   ``true``/``false``; deprecated, warns).

A lower-precedence form that disagrees is ignored with a warning, as
vllm-ascend ignores it. Where this package is stricter than vllm-ascend (a
JSON value that is not a boolean, e.g. ``"true"`` or ``1``, which vllm-ascend
would read as true), the value is refused with a one-line fix.

The options (:data:`OPTIONS`) are read where they are written: next to the
nested switch (``additional_config.scheduler_config``) or next to the legacy
one (the top level of ``additional_config``), whichever form enables
balance; an option written in both places is refused, so nothing is
silently ignored.

- ``balance_max_frozen_steps``: the opt-in bound against starvation (a
  positive JSON integer N; absent or null = the unbounded contract): after N
  consecutive frozen gathers the gate opens for one step (a "fail-open" step).
- ``balance_max_held_steps``: the opt-in held-step bound (a positive JSON
  integer N; instead of ``balance_max_frozen_steps``, never with it): the
  same fail-open, after N consecutive frozen gathers on which some rank held
  a request (WAITING non-empty, below the cap); frozen gathers that hold
  nothing do not count (:class:`~vllm_ascend_balance.scheduler.BalanceSchedulerMixin`).
- ``balance_policy``: ``"leader_at_cap"`` (absent or null: the contract,
  a leader at the cap freezes every rank), ``"queued_leader"`` (freeze
  only while a rank at the cap has requests waiting; opt-in) or
  ``"aligned"`` (that freeze plus prefill alignment across ranks above a
  load, every hold bounded by ``balance_max_held_steps``, default 64;
  opt-in, :class:`~vllm_ascend_balance.policies.Aligned`) or ``"cohort"``
  (admission closed by default, opened for every rank together; the same
  deadline; opt-in, :class:`~vllm_ascend_balance.policies.Cohort`).
- ``balance_align_window`` (a positive JSON integer; default 32 for
  ``aligned``, 16 for ``cohort``) and ``balance_align_min_load`` (a JSON
  number from 0 to 1, default 0; ``aligned`` only): the most steps between
  two openings, and the fill below which ``aligned`` does not align;
  refused with a policy that does not read them.
- ``balance_stall_warning_s``: seconds (a positive JSON number; ``0`` turns
  it off; absent or null = :data:`DEFAULT_STALL_WARNING_S`): a rank whose
  gather has waited that long for its peers logs a warning, repeated at that
  interval, while it waits (:mod:`~vllm_ascend_balance.stall`).
- ``balance_collective``: ``"all_gather"`` (absent or null: the contract's
  all-gather of ``len(running)``) or ``"all_reduce_max"`` (the same
  decisions from ceil(log2 N) point-to-point rounds instead of gloo's N-1
  ring rounds; see :mod:`~vllm_ascend_balance.collectives`).

Where balance is requested, an unknown ``balance_*`` key, a value of the
wrong type or a key one typo away from a setting is refused in one line
naming the key, the known keys and an example of the key's own. Where it
is not requested, the options do nothing: they are not refused, a warning
says so (only the switch itself, and a near-miss of its name, are checked).

Once the front-end has read the setting, it travels to the engine processes
under this package's own key (:data:`CARRIED_KEY`,
:mod:`~vllm_ascend_balance.ascend_steering`); :func:`read_balance_setting`
reads that key first. The functions only read the ``VllmConfig`` they are
given and the environment mapping (``os.environ`` unless one is passed).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance import policies
from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

SWITCH = "enable_balance_scheduling"
NESTED = "additional_config.scheduler_config"
TOP = "additional_config"
SETTING = f"{NESTED}.{SWITCH}"
LEGACY_SETTING = f"{TOP}.{SWITCH}"
ENV_SETTING = "VLLM_ASCEND_BALANCE_SCHEDULING"
#: Which vllm-ascend versions read :data:`ENV_SETTING` (deprecated there):
#: every release up to 0.23.0.post1 and its main branch (read 2026-12-02).
#: vllm-ascend #14706, open, removes it; this package keeps reading it as
#: long as a vllm-ascend it supports does, and follows #14706 once it lands.
ENV_READ_BY = "vllm-ascend <= 0.23.0.post1 and main (until vllm-ascend #14706 lands)"
_ENV_VALUES = {"1": True, "true": True, "0": False, "false": False}
#: This package's own ``additional_config`` key: the setting as the
#: front-end read it, carried to the engine processes.
CARRIED_KEY = "vllm_ascend_balance"
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
#: The freeze conditions the gate implements; the first is the contract.
POLICIES = tuple(policies.POLICIES)
DEFAULT_POLICY = POLICIES[0]
PD_DISAGGREGATED_ROLES = ("kv_producer", "kv_consumer")
#: The options, with an example value each (for refusals' examples).
OPTIONS: dict[str, Any] = {
    "balance_max_frozen_steps": 64,
    "balance_max_held_steps": 64,
    "balance_policy": "queued_leader",
    "balance_stall_warning_s": 60,
    "balance_collective": "all_reduce_max",
    "balance_align_window": policies.DEFAULT_ALIGN_WINDOW,
    "balance_align_min_load": policies.DEFAULT_ALIGN_MIN_LOAD,
}
#: Keys whose example sets ``balance_policy`` too (they need it).
NEEDS_ALIGNED = ("balance_align_window", "balance_align_min_load")
#: The policies that read each of :data:`NEEDS_ALIGNED` (refused with any
#: other policy).
READ_BY: dict[str, tuple[str, ...]] = {
    "balance_align_window": ("aligned", "cohort"),
    "balance_align_min_load": ("aligned",),
}
#: The policies whose holds are bounded by ``balance_max_held_steps`` (a
#: default deadline; ``balance_max_frozen_steps`` refused).
DEADLINE_POLICIES = ("aligned", "cohort")
#: Every key this package reads next to a switch.
KEYS = (SWITCH, *OPTIONS)
MAX_FROZEN_SETTING = f"{NESTED}.balance_max_frozen_steps"
MAX_HELD_SETTING = f"{NESTED}.balance_max_held_steps"
POLICY_SETTING = f"{NESTED}.balance_policy"
STALL_SETTING = f"{NESTED}.balance_stall_warning_s"
COLLECTIVE_SETTING = f"{NESTED}.balance_collective"


def example(key: str = SWITCH, where: str = NESTED) -> str:
    """A ``--additional-config`` argument that sets ``key`` (with the switch
    on) in the section ``where`` (:data:`NESTED` or :data:`TOP`)."""
    section: dict[str, Any] = {SWITCH: True}
    if key in NEEDS_ALIGNED:
        section["balance_policy"] = "aligned"
    if key != SWITCH:
        section[key] = OPTIONS[key]
    body = section if where == TOP else {"scheduler_config": section}
    return f"--additional-config '{json.dumps(body)}'"


ENABLE_EXAMPLE = example()
MAX_FROZEN_EXAMPLE = example("balance_max_frozen_steps")
MAX_HELD_EXAMPLE = example("balance_max_held_steps")
COLLECTIVE_EXAMPLE = example("balance_collective")
STALL_EXAMPLE = example("balance_stall_warning_s")


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
        max_frozen_steps: ``balance_max_frozen_steps``, the most consecutive
            frozen gathers before a fail-open step; None = unbounded (the
            contract as it is).
        max_held_steps: ``balance_max_held_steps``, the most consecutive
            frozen gathers that held a request before a fail-open step;
            None = not set. Never set together with ``max_frozen_steps``.
        policy: ``balance_policy``, one of :data:`POLICIES`.
        stall_warning_s: ``balance_stall_warning_s``, seconds a gather may
            wait for its peers before the rank warns (and again every as
            many seconds); None = off.
        collective: ``balance_collective``, one of :data:`COLLECTIVES`.
        align_window: ``balance_align_window``, steps; None = the default.
        align_min_load: ``balance_align_min_load``, a fraction of the cap;
            None = the default.
    """

    enabled: bool
    source: str
    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    policy: str = DEFAULT_POLICY
    stall_warning_s: float | None = DEFAULT_STALL_WARNING_S
    collective: str = DEFAULT_COLLECTIVE
    align_window: int | None = None
    align_min_load: float | None = None

    def carried(self) -> dict[str, Any]:
        """This setting as the JSON object carried under :data:`CARRIED_KEY`."""
        return dataclasses.asdict(self)


def _shown(value: Any) -> str:
    return json.dumps(value, default=str)


def _require_bool(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    raise BalanceConfigError(
        f"{setting} must be a JSON boolean (true or false), got {_shown(value)}: "
        f"use e.g. {ENABLE_EXAMPLE}"
    )


def _scheduler_section(additional: Mapping[str, Any]) -> Mapping[str, Any]:
    sched = additional.get("scheduler_config", {})
    if sched is None:
        return {}
    if not isinstance(sched, Mapping):
        raise BalanceConfigError(
            f"{NESTED} must be a JSON object, got {_shown(sched)}: use e.g. "
            f"{ENABLE_EXAMPLE}"
        )
    return sched


def _positive_int(value: Any, where: str, key: str, meaning: str, tail: str) -> int:
    # bool is an int subclass: true must not read as 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BalanceConfigError(
            f"{where}.{key} must be a positive JSON integer ({meaning}), got "
            f"{_shown(value)}: use e.g. {example(key, where)}, or remove the key{tail}"
        )
    return value


def _max_frozen_steps(value: Any, where: str) -> int | None:
    if value is None:
        return None
    return _positive_int(
        value,
        where,
        "balance_max_frozen_steps",
        "consecutive frozen steps before the gate opens for one step",
        " for the unbounded gate",
    )


def _max_held_steps(value: Any, where: str) -> int | None:
    if value is None:
        return None
    return _positive_int(
        value,
        where,
        "balance_max_held_steps",
        "consecutive frozen steps holding a request before the gate opens for one step",
        "",
    )


def _one_bound(frozen: int | None, held: int | None, where: str) -> None:
    if frozen is not None and held is not None:
        raise BalanceConfigError(
            f"{where} sets both balance_max_frozen_steps and "
            f"balance_max_held_steps: they are two bounds of the same fail-open, "
            f"keep one (e.g. {example('balance_max_held_steps')})"
        )


def _stall_warning_s(value: Any, where: str) -> float | None:
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
            f"warning), or 0 to turn the warning off, got {_shown(value)}: use "
            f"e.g. {example('balance_stall_warning_s', where)}"
        )
    return float(value) if value > 0 else None


def _collective(value: Any, where: str) -> str:
    if value is None:
        return DEFAULT_COLLECTIVE
    if value not in COLLECTIVES:
        raise BalanceConfigError(
            f"{where}.balance_collective must be one of "
            f"{', '.join(_shown(c) for c in COLLECTIVES)}, got {_shown(value)}: "
            f"use e.g. {example('balance_collective', where)}, or remove the key "
            f"for the default all_gather"
        )
    return str(value)


def _policy(value: Any, where: str) -> str:
    if value is None:
        return DEFAULT_POLICY
    if value not in POLICIES:
        raise BalanceConfigError(
            f"{where}.balance_policy must be one of "
            f"{', '.join(_shown(p) for p in POLICIES)}, got {_shown(value)}: "
            f"use e.g. {example('balance_policy', where)}, or remove the key "
            f"for the contract (leader_at_cap)"
        )
    return str(value)


def _align_window(value: Any, where: str) -> int | None:
    if value is None:
        return None
    return _positive_int(
        value,
        where,
        "balance_align_window",
        "the most steps between two aligned prefill openings",
        " for the default",
    )


def _align_min_load(value: Any, where: str) -> float | None:
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
            f"align), got {_shown(value)}: use e.g. "
            f"{example('balance_align_min_load', where)}, or remove the key"
        )
    return float(value)


def _aligned_only(setting: BalanceSetting, where: str) -> BalanceSetting:
    """Refuses knobs the chosen policy would ignore; returns ``setting``."""
    if setting.policy in DEADLINE_POLICIES and setting.max_frozen_steps is not None:
        raise BalanceConfigError(
            f"{where}: balance_policy {_shown(setting.policy)} bounds every hold "
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


_READERS: dict[str, Callable[[Any, str], Any]] = {
    "balance_align_window": _align_window,
    "balance_align_min_load": _align_min_load,
    "balance_policy": _policy,
    "balance_max_frozen_steps": _max_frozen_steps,
    "balance_max_held_steps": _max_held_steps,
    "balance_stall_warning_s": _stall_warning_s,
    "balance_collective": _collective,
}


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
    for key in section:
        if not isinstance(key, str) or key in KEYS:
            continue
        close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.85)
        if not close and not key.startswith("balance_"):
            continue
        hint = (
            f"did you mean {close[0]}? (e.g. {example(close[0], where)})"
            if close
            else f"the known ones are {', '.join(KEYS)} (e.g. "
            f"{example('balance_max_frozen_steps', where)})"
        )
        found.append(f"{where}.{key} is not a balance scheduling setting: {hint}")
    return found


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
    if sched.get(SWITCH) is not None:
        forms.append((SETTING, _require_bool(sched[SWITCH], SETTING)))
    if additional.get(SWITCH) is not None:
        forms.append(
            (LEGACY_SETTING, _require_bool(additional[SWITCH], LEGACY_SETTING))
        )
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
                json.dumps(value),
                source,
                json.dumps(enabled),
            )
    return enabled, source


def _options(
    additional: Mapping[str, Any], sched: Mapping[str, Any]
) -> dict[str, tuple[str, Any]]:
    """The options written, each with the section it is written in.

    Raises:
        BalanceConfigError: an option is written in both sections.
    """
    found: dict[str, tuple[str, Any]] = {}
    for key in OPTIONS:
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
            ``scheduler_config`` in ``additional_config`` is not a mapping, a
            key is one typo away from the switch; where balance is requested
            also: an option has a value of the wrong type or is written twice,
            or a ``balance_*`` key is unknown (see the module docstring).
    """
    additional = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(additional, Mapping):
        raise BalanceConfigError(
            f"{TOP} must be a JSON object, got {_shown(additional)}: use e.g. "
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
    sched = _scheduler_section(additional)
    unknown = _unknown_keys(sched, NESTED) + _unknown_keys(additional, TOP)
    switch_typos = [u for u in unknown if f"did you mean {SWITCH}?" in u]
    if switch_typos:
        raise BalanceConfigError(switch_typos[0])
    enabled, source = _read_enabled(additional, sched, environ, quiet)
    if not enabled:
        written = [k for k in OPTIONS if k in sched or k in additional]
        if (written or unknown) and not quiet:
            logger.warning(
                "balance scheduling is off (%s), so %s do nothing",
                source,
                ", ".join(written + [u.split(" ", 1)[0] for u in unknown]),
            )
        return BalanceSetting(False, source)
    if unknown:
        raise BalanceConfigError(unknown[0])
    values = {
        key: _READERS[key](value, where)
        for key, (where, value) in _options(additional, sched).items()
    }
    frozen, held = (
        values.get("balance_max_frozen_steps"),
        values.get("balance_max_held_steps"),
    )
    _one_bound(frozen, held, TOP)
    setting = BalanceSetting(
        True,
        source,
        max_frozen_steps=frozen,
        max_held_steps=held,
        policy=values.get("balance_policy", DEFAULT_POLICY),
        stall_warning_s=values.get("balance_stall_warning_s", DEFAULT_STALL_WARNING_S),
        collective=values.get("balance_collective", DEFAULT_COLLECTIVE),
        align_window=values.get("balance_align_window"),
        align_min_load=values.get("balance_align_min_load"),
    )
    return _aligned_only(setting, TOP if source == LEGACY_SETTING else NESTED)


def _read_carried(carried: Any) -> BalanceSetting:
    """The setting under :data:`CARRIED_KEY`, checked as strictly as the
    user's (a hand-written one gets the same refusals)."""
    where = f"{TOP}.{CARRIED_KEY}"
    fields = {f.name for f in dataclasses.fields(BalanceSetting)}
    if not isinstance(carried, Mapping) or not set(carried) <= fields:
        raise BalanceConfigError(
            f"{where} is written by vllm-ascend-balance for its engine processes "
            f"and must not be set by hand, got {_shown(carried)}: remove it and use "
            f"{ENABLE_EXAMPLE}"
        )
    enabled = _require_bool(carried.get("enabled", False), f"{where}.enabled")
    stall = carried.get("stall_warning_s", DEFAULT_STALL_WARNING_S)
    frozen = _max_frozen_steps(carried.get("max_frozen_steps"), where)
    held = _max_held_steps(carried.get("max_held_steps"), where)
    _one_bound(frozen, held, where)
    setting = BalanceSetting(
        enabled,
        str(carried.get("source", where)),
        max_frozen_steps=frozen,
        max_held_steps=held,
        policy=_policy(carried.get("policy"), where),
        stall_warning_s=None if stall is None else _stall_warning_s(stall, where),
        collective=_collective(carried.get("collective"), where),
        align_window=_align_window(carried.get("align_window"), where),
        align_min_load=_align_min_load(carried.get("align_min_load"), where),
    )
    return _aligned_only(setting, where)


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
