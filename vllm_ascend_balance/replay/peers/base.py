# SPDX-License-Identifier: Apache-2.0
"""What every peer admission policy shares: the per-rank state it gathers,
the policy interface, and the scheduler mixin that applies its decision
through the seam.

A peer policy is another project's answer to the problem balance scheduling
solves (DP ranks of an MoE model stepping in lock step while admissions pile
up unevenly), re-implemented from its documentation and source for the
replay's simulated engine. Each policy follows the same shape as balance:

1. every rank contributes a :class:`RankState` to a collective over the DP
   group once per engine step, at the point its source gathers (see each
   module);
2. every rank's policy instance computes, from that gathered vector only,
   which ranks hold their **new** WAITING requests this step
   (:meth:`PeerPolicy.decide`); the state a policy keeps between steps is a
   function of the gathered vectors only (wall-clock bounds read the
   gathered maximum of the ranks' clocks, never the local clock), so every
   rank reaches the same decision (the lock-step property the tests check);
3. a holding rank's scheduler answers True from
   ``Scheduler._should_stop_admitting_waiting()`` (:class:`PeerGateMixin`),
   the upstream seam: requests already running and KV-holding requests are
   untouched; in-flight chunked prefills too, except for a policy whose
   source also holds them (:attr:`PeerPolicy.holds_in_flight_chunks`).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from vllm_ascend_balance.gate.seam import SEAM
from vllm_ascend_balance.replay.peers.state import (
    RECENT_PREFILL_BATCHES,
    PassHistory,
    RankState,
    gathered_clock_s,
    rank_state,
)

__all__ = [
    "RECENT_PREFILL_BATCHES",
    "UNBOUNDED",
    "PassHistory",
    "PeerGateMixin",
    "PeerPolicy",
    "PolicyError",
    "RankState",
    "compose_peer_gate",
    "gathered_clock_s",
    "parse_ints",
    "rank_state",
]


class PolicyError(ValueError):
    """A peer policy's parameters that do not parse or are out of range."""


class PeerPolicy(ABC):
    """One rank's instance of a peer policy.

    Subclasses set :attr:`name` (the ``--mode`` prefix) and :attr:`source`
    (where the rule comes from), parse their parameters in ``__init__`` and
    implement :meth:`decide`.
    """

    name: ClassVar[str]
    source: ClassVar[str]
    #: The ``--mode`` parameter grammar, for error messages.
    usage: ClassVar[str]
    #: The source also holds in-flight chunked prefills (the simulated
    #: engine then passes ``throttle_prefills`` where ``schedule()`` has it).
    holds_in_flight_chunks: ClassVar[bool] = False
    #: The source decides on the previous step's state (its reports are
    #: sent after a pass and applied later), not on the state after this
    #: step's arrivals (see
    #: :class:`~vllm_ascend_balance.replay.sim.peer_step.PeerStep`).
    sees_previous_step: ClassVar[bool] = False
    #: The simulated engine's routing for this policy's runs: None = the
    #: replay's ``--routing``; ``"trtllm-adp"`` = TensorRT-LLM's own
    #: attention-DP router with one global queue
    #: (:mod:`~vllm_ascend_balance.replay.sim.adp_routing`).
    routing: ClassVar[str | None] = None
    #: SGLang's prefill-attempt window the engine keeps per rank.
    prefill_bs_window: int = RECENT_PREFILL_BATCHES

    @abstractmethod
    def __init__(self, params: str = "") -> None:
        """``params``: the ``--mode`` entry after ``NAME:`` (e.g. ``30:5000``).

        Raises:
            PolicyError: malformed or out-of-range parameters.
        """

    @abstractmethod
    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        """Which ranks hold their new WAITING requests this step.

        Args:
            gathered: every rank's state, index = DP rank (the same vector on
                every rank).

        Returns:
            One bool per rank, True = hold. Called once per engine step; the
            instance's own state advances with each call.
        """

    def holds_chunks(self) -> bool:
        """Whether this step's hold (the last :meth:`decide`) also holds
        in-flight chunked prefills (default: :attr:`holds_in_flight_chunks`)."""
        return self.holds_in_flight_chunks

    def snapshot(self) -> tuple[Any, ...]:
        """The instance's state between steps (for the lock-step property:
        every rank's instance must have the same snapshot after the same
        gathered vectors)."""
        return tuple(sorted(vars(self).items()))


#: The upper limit of a parameter that has none.
UNBOUNDED = 10**9


def parse_ints(
    text: str, policy: type[PeerPolicy], params: Sequence[tuple[str, int, int, int]]
) -> list[int]:
    """The ``len(params)`` integer parameters of ``text`` (``A:B``), each
    ``(name, minimum, maximum, default)``: given ones range-checked, the
    rest their defaults.

    Raises:
        PolicyError: too many fields, an empty field, a non-integer or a value
            out of range, naming the parameter.
    """
    fields = text.split(":") if text else []
    if len(fields) > len(params) or not all(
        f.isascii() and f.isdigit() for f in fields
    ):
        raise PolicyError(
            f"--mode {policy.name}:{text}: expected {policy.usage} "
            f"(non-negative integers)"
        )
    values = [int(f) for f in fields]
    for value, (name, low, high, _) in zip(values, params, strict=False):
        if not low <= value <= high:
            raise PolicyError(
                f"--mode {policy.name}:{text}: {name} must be in [{low}, {high}], "
                f"got {value}"
            )
    return values + [default for *_, default in params[len(values) :]]


class PeerGateMixin:
    """Holds new WAITING admissions while :attr:`peer_hold` is set.

    Composed in front of vLLM's ``Scheduler`` by :func:`compose_peer_gate`;
    the simulated engine sets :attr:`peer_hold` from the policy's decision
    before each ``schedule()``. Mirrors
    :class:`~vllm_ascend_balance.gate.scheduler.BalanceSchedulerMixin`'s use of
    the seam (``Scheduler._should_stop_admitting_waiting``).
    """

    peer_hold: bool = False

    def _should_stop_admitting_waiting(self) -> bool:
        if self.peer_hold:
            return True
        return bool(getattr(super(), SEAM)())


@functools.cache
def compose_peer_gate(base: type) -> type:
    """``base`` with :class:`PeerGateMixin` in front."""
    if not hasattr(base, SEAM):
        raise PolicyError(
            f"{base.__name__} has no {SEAM}(): peer modes need the upstream "
            f"seam (a patched vLLM; see upstream_patch/)"
        )
    return type(f"PeerGate{base.__name__}", (PeerGateMixin, base), {})
