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
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from vllm_ascend_balance.scheduler import SEAM


class PolicyError(ValueError):
    """A peer policy's parameters that do not parse or are out of range."""


@dataclass(frozen=True)
class RankState:
    """What one DP rank contributes to a peer policy's gather.

    Attributes:
        waiting: ``len(scheduler.waiting)``: requests not yet admitted.
        running: ``len(scheduler.running)``.
        cap: the rank's running cap (``max_num_running_reqs``).
        prefilling: running requests whose prompt is not fully computed
            (in-flight chunked prefills).
        kv_usage_permille: KV cache blocks in use, per mille (an integer so
            every rank compares exactly the same numbers).
        max_prefill_batch_recent: the most new requests one step admitted,
            over the last :data:`RECENT_PREFILL_BATCHES` steps that admitted
            any (SGLang's ``max_prefill_bs`` window).
        max_prefill_batch_ever: the same over the whole run (vLLM PR
            #51199's ``max_prefill_batch``).
        deferred: the rank's previous ``schedule()`` was held while it had
            prefill work (a waiting request or an in-flight chunk).
        capacity_bound: the last ``schedule()`` that was not held left
            requests waiting (vLLM's ``prefill_capacity_bound``).
        clock_ms: the rank's clock in milliseconds when it contributed (for
            wall-clock bounds: policies read :func:`gathered_clock_s`).
    """

    waiting: int
    running: int
    cap: int
    prefilling: int = 0
    kv_usage_permille: int = 0
    max_prefill_batch_recent: int = 0
    max_prefill_batch_ever: int = 0
    deferred: bool = False
    capacity_bound: bool = False
    clock_ms: int = 0

    @property
    def can_admit(self) -> bool:
        """The rank has a new request to admit and room to run it: what
        SGLang calls a rank with a prefillable request."""
        return self.waiting > 0 and self.running < self.cap


#: SGLang's ``SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE`` default.
RECENT_PREFILL_BATCHES = 16


def _prefilling(scheduler: Any) -> int:
    return sum(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running)


@dataclass
class PassHistory:
    """What a rank remembers of its own ``schedule()`` passes for
    :class:`RankState` (kept by the engine, updated by :meth:`observe`)."""

    recent: deque[int] = field(
        default_factory=lambda: deque(maxlen=RECENT_PREFILL_BATCHES)
    )
    ever: int = 0
    deferred: bool = False
    capacity_bound: bool = False

    def before(self, scheduler: Any, chunks_held: bool) -> bool:
        """Whether a hold defers prefill work on the rank (call just before
        ``schedule()``): a waiting request, or an in-flight chunk where the
        hold also throttles chunks (``chunks_held``)."""
        if scheduler.waiting:
            return True
        return chunks_held and _prefilling(scheduler) > 0

    def observe(
        self, held: bool, had_prefill_work: bool, admitted: int, waiting_after: int
    ) -> None:
        """Record one pass: ``admitted`` new requests were scheduled and
        ``waiting_after`` remain waiting."""
        if admitted:
            self.recent.append(admitted)
            self.ever = max(self.ever, admitted)
        self.deferred = held and had_prefill_work
        if not held:
            self.capacity_bound = waiting_after > 0


def gathered_clock_s(gathered: Sequence[RankState]) -> float:
    """The gathered maximum of the ranks' clocks, in seconds: the same on
    every rank, whatever the skew between their local clocks."""
    return max(s.clock_ms for s in gathered) / 1000.0


def rank_state(
    scheduler: Any, history: PassHistory | None = None, clock_s: float = 0.0
) -> RankState:
    """The :class:`RankState` of a real vLLM ``Scheduler`` at the rank's
    clock ``clock_s`` (seconds)."""
    h = history or PassHistory()
    return RankState(
        waiting=len(scheduler.waiting),
        running=len(scheduler.running),
        cap=int(scheduler.max_num_running_reqs),
        prefilling=_prefilling(scheduler),
        kv_usage_permille=round(1000 * scheduler.kv_cache_manager.usage),
        max_prefill_batch_recent=max(h.recent, default=0),
        max_prefill_batch_ever=h.ever,
        deferred=h.deferred,
        capacity_bound=h.capacity_bound,
        clock_ms=round(1000 * clock_s),
    )


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
    :class:`~vllm_ascend_balance.scheduler.BalanceSchedulerMixin`'s use of
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
