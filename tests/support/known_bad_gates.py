# SPDX-License-Identifier: Apache-2.0
"""Known-bad gates for the lock-step property harness
(:mod:`tests.support.lockstep_policy`, which re-exports them): each breaks
one property of a policy's test, so its negative control can show that the
property is checked.

:func:`with_gate` puts a known-bad gate in front of the class a policy's
``make`` builds; :func:`local_view` (a gathered field read from this rank
alone), :func:`rule_gate` (a wrong policy class) and :class:`LeakyGate` (a
seam that ignores the freeze) are such gates; :func:`off_by_one` moves the
deadline one step late.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from vllm_ascend_balance.gate.policies import GatePolicy, Gathered, Knobs
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin

#: ``(base scheduler class, setting) -> the gate class under test``.
Make = Callable[[type, Any], type]


def with_gate(gate: type, compose: Make) -> Make:
    """``gate`` in front of the class ``compose`` makes (the same knobs)."""

    @functools.cache
    def make(base: type, s: Any) -> type:
        return type(f"{gate.__name__}{base.__name__}", (gate, compose(base, s)), {})

    return make


def off_by_one(compose: Make) -> Make:
    """Known-bad: the deadline one step late."""
    return lambda base, s: compose(
        base, dataclasses.replace(s, deadline=s.deadline + 1)
    )


def local_view(field: str, mine: Callable[[Any], Any]) -> type:
    """Known-bad: the gathered ``field`` replaced by ``mine(scheduler)``,
    this rank's own view."""

    def _balance_decide(self: Any, seen: Gathered) -> bool:
        own = dataclasses.replace(seen, **{field: mine(self)})
        return BalanceSchedulerMixin._balance_decide(self, own)

    return type(
        f"Local_{field}", (BalanceSchedulerMixin,), {"_balance_decide": _balance_decide}
    )


def rule_gate(rule: type[GatePolicy]) -> type:
    """Known-bad: the gate deciding by ``rule`` (a wrong policy class)."""

    def _balance_policy(self: Any) -> GatePolicy:
        if self._balance_rule is None:
            knobs = Knobs(None, self.balance_max_held_steps, self.balance_align_window)
            self._balance_rule = rule(knobs)
        return self._balance_rule

    namespace = {"_balance_policy": _balance_policy}
    return type(f"{rule.__name__}Gate", (BalanceSchedulerMixin,), namespace)


class LeakyGate(BalanceSchedulerMixin):
    """Known-bad: the seam ignores the freeze."""

    def _should_stop_admitting_waiting(self) -> bool:
        return False
