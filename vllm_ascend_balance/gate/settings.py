# SPDX-License-Identifier: Apache-2.0
"""What the gate is told to do: :class:`GateSettings`, one object that travels
from the configuration reader to every rank's gate and to the simulated
engine, and the gate's own defaults.

Nothing here reads a configuration; :mod:`~vllm_ascend_balance.wiring.config`
builds a :class:`GateSettings` from one, and
:mod:`~vllm_ascend_balance.wiring.composition` hands it to the scheduler class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: ``balance_policy`` when none is set: the contract (a leader at the cap
#: freezes every rank).
DEFAULT_POLICY = "leader_at_cap"
#: ``balance_collective`` values: the all-gather of the payload, or the
#: log-depth exchange of its combined values
#: (:mod:`~vllm_ascend_balance.gate.collectives`).
COLLECTIVES = ("all_gather", "all_reduce_max")
#: The largest ``max_frozen_steps`` and ``max_held_steps``, in steps. The
#: bounds are compared with step counters in Python; only ``hold_age`` (at
#: most the hold bound) travels in the int64 exchange, far below its limit.
#: So the limit is operational: the longest wait a policy's knob may ask
#: (``adp_balance``'s ``balance_timeout_iters``) stays reachable under the
#: hold bound, while a larger N (over 10 minutes at 10 ms a step) would be
#: no bound at all in practice.
MAX_BOUND_STEPS = 65536


@dataclass(frozen=True)
class GateSettings:
    """One gate's settings, the same on every rank (hashable: one composed
    scheduler class per distinct settings).

    Attributes:
        policy: a name of :data:`~vllm_ascend_balance.gate.policies.POLICIES`.
        knobs: the policy's knobs that the configuration sets, as
            ``(key, value)`` pairs (keys are the ``balance_*`` setting names
            the policy declares); a knob left out takes its declared default.
        max_frozen_steps: the frozen-run bound: after this many consecutive
            steps on which the gate held admission, one open step; None: off.
        max_held_steps: the hold bound: no request is held more than this
            many steps before its prefill completes; None: the policy's
            declared ``default_max_held_steps``
            (:class:`~vllm_ascend_balance.gate.policies.base.Policy`),
            which may be None (off).
        collective: one of :data:`COLLECTIVES`, or None: the policy's own
            (:func:`~vllm_ascend_balance.gate.collectives.natural_collective`).
    """

    policy: str = DEFAULT_POLICY
    knobs: tuple[tuple[str, Any], ...] = ()
    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    collective: str | None = None

    def knob(self, key: str, default: Any = None) -> Any:
        """The value set for ``key``, else ``default``."""
        for name, value in self.knobs:
            if name == key:
                return value
        return default
