# SPDX-License-Identifier: Apache-2.0
"""What a policy is: a name, its knobs, the signals it reads and a pure
decision (:class:`Policy`); what it decides (:class:`Decision`).

A policy never bounds its own holds: the gate does, for every policy alike
(:mod:`~vllm_ascend_balance.gate.bound`). A policy keeps no mutable state:
``decide(state, view, knobs)`` returns the next state with the decision, so
the same gathered views give the same decisions on every rank, and a test
can replay any trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.gate.signals import View


@dataclass(frozen=True)
class Knob:
    """One setting a policy reads.

    Attributes:
        key: its ``additional_config.scheduler_config`` key (``balance_*``).
        kind: ``int`` or ``float`` (a JSON integer or number).
        default: its value when the configuration leaves it out.
        low, high: its closed range.
        doc: one line: what it means, with its unit.
    """

    key: str
    kind: type
    default: int | float
    low: int | float
    high: int | float
    doc: str


@dataclass(frozen=True)
class Decision:
    """What one step's gate decides, the same on every rank.

    Attributes:
        hold_waiting: no rank admits a request from the held queues
            (:data:`~vllm_ascend_balance.gate.signals.HELD_QUEUES`) this step.
        hold_chunks: ranks with a decode to run also defer the prefill chunks
            they have in flight (vLLM's ``schedule(throttle_prefills=True)``);
            only for a policy that declares :attr:`Policy.holds_chunks`.
        reason: why, one word (the metrics' and the logs' label).
    """

    hold_waiting: bool
    hold_chunks: bool = False
    reason: str = "open"


#: The open decision.
OPEN = Decision(False, False, "open")

#: ``(state, view, knobs) -> (state, decision)``; ``knobs``: every declared
#: knob's value (defaults filled in).
Decide = Callable[[Any, View, Mapping[str, Any]], tuple[Any, Decision]]


@dataclass(frozen=True)
class Policy:
    """A ``balance_policy``: declared once, in its own module, and listed in
    :data:`~vllm_ascend_balance.gate.policies.POLICIES`; the configuration
    reader, ``doctor``, the activation notes, the replay's ``--mode`` and
    the simulated engine read everything about it from here.

    Attributes:
        name: the ``balance_policy`` value.
        summary: what it does, one line (``doctor``, the activation notes).
        signals: the :data:`~vllm_ascend_balance.gate.signals.SIGNALS` its
            decision reads (``leader`` and ``lowest`` always come).
        decide: the decision (:data:`Decide`), pure.
        initial: the state at start and whenever the DP group is replaced.
        knobs: the settings it reads, in ``--mode`` order.
        holds_chunks: it may defer prefill chunks in flight (needs a vLLM
            whose ``Scheduler.schedule`` takes ``throttle_prefills``).
        default_max_held_steps: the hold bound when the configuration sets
            none (None: unbounded unless configured).
        source: where the rule comes from (a file, a PR), for credit.
        collective: the exchange it runs on where ``balance_collective``
            is unset (None: the log-depth ``all_reduce_max``).
    """

    name: str
    summary: str
    signals: tuple[str, ...]
    decide: Decide
    initial: Any = None
    knobs: tuple[Knob, ...] = ()
    holds_chunks: bool = False
    default_max_held_steps: int | None = None
    source: str = ""
    collective: str | None = None

    def knob_values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared knob's value: ``given``'s, else the default."""
        return {k.key: given.get(k.key, k.default) for k in self.knobs}

    @property
    def mode_name(self) -> str:
        """Its name in the replay's ``--mode`` grammar (``-`` for ``_``)."""
        return self.name.replace("_", "-")
