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
- ``balance_max_held_steps``: the hold bound (a positive JSON integer N;
  instead of ``balance_max_frozen_steps``, never with it): no request is held
  more than N steps in all before its prefill completes; the gate opens for
  every rank while some rank's oldest hold is at N (docs/gate-contract.md,
  :mod:`~vllm_ascend_balance.gate.holds`). Absent: the policy's default
  (``throttled``: 64; the contract: none).
- ``balance_policy``: a name of the gate's policies
  (:data:`~vllm_ascend_balance.gate.policies.POLICIES`; absent or null: the
  contract, ``"leader_at_cap"``), and the knobs that policy declares (each a
  ``balance_*`` key with its type and range); a knob of another policy is
  refused, and so is a retired policy's name, naming its replacement.
- ``balance_stall_warning_s``: seconds (a positive JSON number; ``0`` turns
  it off; absent or null = :data:`DEFAULT_STALL_WARNING_S`): a rank whose
  gather has waited that long for its peers logs a warning, repeated at that
  interval, while it waits (:mod:`~vllm_ascend_balance.observability.stall`).
- ``balance_collective``: ``"all_gather"`` or ``"all_reduce_max"`` (absent
  or null: the policy's own; the contract's is the all-gather of
  ``len(running)``); see :mod:`~vllm_ascend_balance.gate.collectives`.

Where balance is requested, an unknown ``balance_*`` key, a value of the
wrong type or a key one typo away from a setting is refused in one line
naming the key, the known keys and an example of the key's own. Where it
is not requested, the options do nothing: they are not refused, a warning
says so (only the switch itself, and a near-miss of its name, are checked).
Either way, a top-level object other than ``scheduler_config`` holding the
switch or a ``balance_*`` key (``"scheduler_confg"``) is refused in one
line: balance would silently stay off. Other top-level objects, other
plugins', are not looked at.

Once the front-end has read the setting, it travels to the engine processes
under this package's own key (:data:`CARRIED_KEY`,
:mod:`~vllm_ascend_balance.wiring.ascend_steering`);
:func:`~vllm_ascend_balance.wiring.config_read.read_balance_setting` reads
that key first. The readers only read the ``VllmConfig`` they are given and
the environment mapping (``os.environ`` unless one is passed).

This module names the setting: its keys, options, defaults, examples, the
:class:`BalanceSetting` it is read into and the error. Reading it:
:mod:`~vllm_ascend_balance.wiring.config_read` (the entry points),
:mod:`~vllm_ascend_balance.wiring.config_switch` (the three forms) and
:mod:`~vllm_ascend_balance.wiring.config_values` (each option's value).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.gate import policies
from vllm_ascend_balance.gate.settings import GateSettings

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
PD_DISAGGREGATED_ROLES = ("kv_producer", "kv_consumer")
#: The gate's own options, with an example value each (for refusals'
#: examples); the policies' knobs come from the registry (:func:`options`).
GATE_OPTIONS: dict[str, Any] = {
    "balance_max_frozen_steps": 64,
    "balance_max_held_steps": 64,
    # The first opt-in policy of the registry.
    "balance_policy": next(
        name for name in policies.POLICIES if name != GateSettings().policy
    ),
    "balance_stall_warning_s": 60,
    "balance_collective": "all_reduce_max",
}
MAX_FROZEN_SETTING = f"{NESTED}.balance_max_frozen_steps"
MAX_HELD_SETTING = f"{NESTED}.balance_max_held_steps"
POLICY_SETTING = f"{NESTED}.balance_policy"
STALL_SETTING = f"{NESTED}.balance_stall_warning_s"
COLLECTIVE_SETTING = f"{NESTED}.balance_collective"


def options() -> dict[str, Any]:
    """Every option key read next to a switch, with an example value: the
    gate's, every registered policy's knobs (their defaults), and the keys
    of retired policies (read only to be refused)."""
    found = dict(GATE_OPTIONS)
    for policy in policies.POLICIES.values():
        for knob in policy.knobs:
            found.setdefault(knob.key, knob.default)
    for key in policies.RETIRED_KEYS:
        found.setdefault(key, None)
    return found


def keys() -> tuple[str, ...]:
    """Every key this package reads next to a switch."""
    return (SWITCH, *options())


#: The options of the built-in policies (:func:`options` at import).
OPTIONS = options()


def example(key: str = SWITCH, where: str = NESTED, value: Any = None) -> str:
    """A ``--additional-config`` argument that sets ``key`` (to ``value``, or
    its example value; with the switch on) in the section ``where``
    (:data:`NESTED` or :data:`TOP`); a policy's knob comes with that
    policy."""
    section: dict[str, Any] = {SWITCH: True}
    owners = policies.knob_owners(key)
    if owners:
        section["balance_policy"] = owners[0]
    if key != SWITCH:
        section[key] = options()[key] if value is None else value
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
        gate: the gate's settings (policy, knobs, bounds, collective), as
            every rank's gate and the simulated engine receive them.
        stall_warning_s: ``balance_stall_warning_s``, seconds a gather may
            wait for its peers before the rank warns (and again every as
            many seconds); None = off.
    """

    enabled: bool
    source: str
    gate: GateSettings = GateSettings()
    stall_warning_s: float | None = DEFAULT_STALL_WARNING_S

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
        """This setting as the JSON object carried under :data:`CARRIED_KEY`."""
        body = dataclasses.asdict(self)
        body["gate"]["knobs"] = dict(self.gate.knobs)
        return body


def shown(value: Any) -> str:
    """``value`` as the user wrote it in JSON, for refusals."""
    return json.dumps(value, default=str)
