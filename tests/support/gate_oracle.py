# SPDX-License-Identifier: Apache-2.0
"""A reference model of the gate's contract, written from
``docs/gate-contract.md`` alone: it imports nothing of the package, and its
defaults (the chunk-holding policies' hold bounds, ``balance_align_window``,
``balance_timeout_iters``, ``balance_batching_wait_iters``) are read off
that page, so a change of any in the code alone is caught.

One :class:`GateOracle` follows one DP group through a trace, one active
step at a time:

1. :meth:`GateOracle.decide`: every rank's :class:`RankState` as the
   exchange reads it (after the step just run) -> the :class:`Expected`
   decision every rank must take (the policy proposes, then the gate's
   rules apply), advancing the run state;
2. :meth:`GateOracle.account`: what one rank's ``schedule()`` did on that
   step (a :class:`StepRun`) and the decision the rank actually took -> the
   requests it held; the oracle adds them to each request's hold count,
   which feeds the next step's hold age.

Readings of the page where it leaves room (each stated where it is used):

- ``throttled``'s ``since`` restarts where its rules say so (rules 2 and
  4, "open, ``since`` restarts"), not on a fail-open: the policy proposes
  from its own run state, then the gate's rules apply;
- when ``balance_max_frozen_steps`` is set, ``throttled`` and
  ``adp_balance`` have no hold bound ("at most one of the two bounds is
  set"; their 64 applies when neither is);
- ``adp_balance``'s counters advance by its rules on every step, a step a
  bound opens included (the policy proposes, then the gate's rules apply);
- a request's hold count ends when its prefill completes; a request
  preempted afterwards starts a new count (its recompute is a new prefill);
- the hold age counts a chunk in flight on a rank with a decode whatever
  the policy (the page defines it without reference to the policy).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The specification this model follows.
CONTRACT_PAGE = Path(__file__).resolve().parents[2] / "docs" / "gate-contract.md"

#: The policies the page specifies.
POLICIES = ("leader_at_cap", "queued_leader", "throttled", "adp_balance")
#: The policies that hold chunks.
CHUNK_POLICIES = ("throttled", "adp_balance")


def documented_default(pattern: str) -> int:
    """The integer the contract page states where ``pattern`` (a regular
    expression with one group) matches its text, line breaks read as
    spaces."""
    text = " ".join(CONTRACT_PAGE.read_text().split())
    found = re.search(pattern, text)
    assert found is not None, f"{CONTRACT_PAGE.name} no longer states {pattern!r}"
    return int(found.group(1))


def throttled_default_held() -> int:
    """``throttled``'s ``max_held_steps`` when none is set, as the page says."""
    return documented_default(r"for `throttled` (\d+) when neither bound is set")


def adp_balance_default_held() -> int:
    """``adp_balance``'s ``max_held_steps`` when none is set, as the page
    says."""
    return documented_default(r"for `adp_balance` (\d+) when neither bound is set")


def default_align_window() -> int:
    """``balance_align_window``'s default, as the page says."""
    return documented_default(r"`balance_align_window` \(default (\d+)\)")


def default_timeout_iters() -> int:
    """``balance_timeout_iters``'s default, as the page says."""
    return documented_default(r"`balance_timeout_iters` \(default (\d+)\)")


def default_batching_wait_iters() -> int:
    """``balance_batching_wait_iters``'s default, as the page says."""
    return documented_default(r"`balance_batching_wait_iters` \(default (\d+)\)")


@dataclass(frozen=True)
class RankState:
    """One rank's observable state at one moment.

    Attributes:
        running: ``len(running)``.
        cap: the admission cap.
        waiting: the requests in the held queues (``waiting``,
            ``skipped_waiting``, ``async_kv_waiting``; not
            ``kv_holding_waiting``).
        chunks: running requests with a prefill chunk in flight.
        decode: some running request is not a prefill chunk (vLLM's "a
            decode to run").
        paused: paused streaming sessions (they hold a slot under the cap).
    """

    running: int
    cap: int
    waiting: tuple[str, ...] = ()
    chunks: tuple[str, ...] = ()
    decode: bool = False
    paused: int = 0

    @property
    def held(self) -> bool:
        """A request is waiting and ``len(running)`` is below the cap."""
        return bool(self.waiting) and self.running < self.cap

    @property
    def queued(self) -> bool:
        """A request is waiting and ``len(running)`` is at the cap or above."""
        return bool(self.waiting) and self.running >= self.cap

    @property
    def starved(self) -> bool:
        """A request is waiting and nothing is running."""
        return bool(self.waiting) and self.running == 0

    @property
    def context(self) -> bool:
        """A prefill chunk in flight, or *held*."""
        return bool(self.chunks) or self.held

    @property
    def decoding(self) -> bool:
        """A decode to run, or nothing running and nothing waiting."""
        return self.decode or (self.running == 0 and not self.waiting)

    @property
    def below_cap(self) -> bool:
        """Room under the cap for one more request (the seam's moment)."""
        return self.running + self.paused < self.cap

    def holdable(self) -> tuple[str, ...]:
        """The requests the next step could hold: waiting on a rank below
        its cap, or a chunk in flight on a rank with a decode to run."""
        return (self.waiting if self.below_cap else ()) + (
            self.chunks if self.decode else ()
        )


@dataclass(frozen=True)
class View:
    """What every rank receives from one exchange."""

    cap: int
    leader: int
    lowest: int
    held: bool
    queued: bool
    starved: bool
    hold_age: int
    all_context: bool
    all_decoding: bool


@dataclass(frozen=True)
class Expected:
    """The decision of one step.

    Attributes:
        hold_waiting: hold admission (the seam answers True).
        hold_chunks: hold chunks (``schedule(throttle_prefills=True)`` on
            ranks with a decode).
        fail_open: a bound opened a step the policy would hold on.
        rule: which rule decided (for failure messages).
    """

    hold_waiting: bool
    hold_chunks: bool
    fail_open: bool
    rule: str

    def parts(self) -> tuple[bool, bool, bool]:
        return (self.hold_waiting, self.hold_chunks, self.fail_open)


@dataclass(frozen=True)
class StepRun:
    """What one rank's ``schedule()`` did on one step.

    Attributes:
        before: the rank's state right before ``schedule()`` (after the
            step's arrivals): what the seam saw, the chunks it could defer.
        seam_asked: ``schedule()`` asked the seam (vLLM asks it on steps
            that preempt nothing).
        throttled: it ran with ``throttle_prefills=True`` (at the gate's
            request).
        scheduled: the requests it gave tokens to.
        prefilled: the requests whose prefill completed on this step.
    """

    before: RankState
    seam_asked: bool
    throttled: bool
    scheduled: frozenset[str]
    prefilled: frozenset[str]


@dataclass
class GateOracle:
    """The contract for one DP group: one policy, at most one bound.

    Attributes:
        policy: a name of :data:`POLICIES`.
        max_held_steps: the hold bound as configured (None: unset).
        max_frozen_steps: the frozen-run bound (None: unset).
        align_window: ``throttled``'s ``W`` (None: the documented default).
        timeout_iters, batching_wait_iters: ``adp_balance``'s ``T`` and
            ``W`` (None: the documented defaults).
        holds: each request's hold count (current prefill).
        most_held: the largest hold count each request reached.
    """

    policy: str
    max_held_steps: int | None = None
    max_frozen_steps: int | None = None
    align_window: int | None = None
    timeout_iters: int | None = None
    batching_wait_iters: int | None = None
    holds: dict[str, int] = field(default_factory=dict)
    most_held: dict[str, int] = field(default_factory=dict)
    step: int = 0
    frozen_run: int = 0
    last_open: int | None = None
    adp_waiting: int = 0
    adp_batching: int = 0

    def __post_init__(self) -> None:
        assert self.policy in POLICIES, (
            f"{self.policy}: tests/support/gate_oracle.py has no rule for this "
            "policy; write it from docs/gate-contract.md (add the name to "
            "POLICIES, CHUNK_POLICIES if it holds chunks, and its rule in "
            "GateOracle.propose; CONTRIBUTING.md, 'Where does X go')"
        )
        assert self.max_held_steps is None or self.max_frozen_steps is None, (
            "at most one of the two bounds is set"
        )
        if self.align_window is None:
            self.align_window = default_align_window()
        if self.timeout_iters is None:
            self.timeout_iters = default_timeout_iters()
        if self.batching_wait_iters is None:
            self.batching_wait_iters = default_batching_wait_iters()

    @property
    def held_bound(self) -> int | None:
        """The hold bound in force: as configured, else the policy's
        documented default when no bound at all is configured."""
        if self.max_held_steps is not None:
            return self.max_held_steps
        if self.max_frozen_steps is not None:
            return None
        if self.policy == "throttled":
            return throttled_default_held()
        if self.policy == "adp_balance":
            return adp_balance_default_held()
        return None

    def restart(self) -> None:
        """The DP group object was replaced: the run state starts over
        (hold counts are per request, not run state)."""
        self.frozen_run = 0
        self.last_open = None
        self.adp_waiting = self.adp_batching = 0

    def view(self, ranks: Sequence[RankState]) -> View:
        caps = {r.cap for r in ranks}
        assert len(caps) == 1, f"ranks with different caps {caps}"
        return View(
            cap=caps.pop(),
            leader=max(r.running for r in ranks),
            lowest=min(r.running for r in ranks),
            held=any(r.held for r in ranks),
            queued=any(r.queued for r in ranks),
            starved=any(r.starved for r in ranks),
            hold_age=max(
                (self.holds.get(rid, 0) for r in ranks for rid in r.holdable()),
                default=0,
            ),
            all_context=all(r.context for r in ranks),
            all_decoding=all(r.decoding for r in ranks),
        )

    def propose(self, v: View) -> tuple[bool, bool, str]:
        """The policy's proposal: ``(hold admission, hold chunks, rule)``."""
        if self.policy == "leader_at_cap":
            return (v.leader == v.cap, False, "leader at cap")
        if self.policy == "queued_leader":
            return (v.queued, False, "queued")
        if self.policy == "adp_balance":
            return self.propose_adp(v)
        if not v.held:
            return (True, False, "nothing held")
        if v.starved:
            return (False, False, "starved")
        if v.queued:
            return (True, True, "queued")
        assert self.align_window is not None
        # ceil(W * (lowest / cap)^2), in integers.
        wait = -(-self.align_window * v.lowest * v.lowest // (v.cap * v.cap))
        since = math.inf if self.last_open is None else self.step - self.last_open
        if since < wait:
            return (True, True, f"since {since} < {wait}")
        return (False, False, f"since {since} >= {wait}")

    def propose_adp(self, v: View) -> tuple[bool, bool, str]:
        """``adp_balance``'s rules 1 and 2; advances its two counters."""
        assert self.timeout_iters is not None
        assert self.batching_wait_iters is not None
        if v.all_context:
            self.adp_waiting = 0
            if not v.all_decoding:
                return (False, False, "all context, not all decoding")
            if self.adp_batching < self.batching_wait_iters:
                self.adp_batching += 1
                return (True, True, f"batching {self.adp_batching}")
            self.adp_batching = 0
            return (False, False, "batched")
        self.adp_waiting += 1
        if not v.all_decoding or self.adp_waiting >= self.timeout_iters:
            waited, self.adp_waiting = self.adp_waiting, 0
            return (False, False, f"waited {waited}, all decoding {v.all_decoding}")
        return (True, True, f"waiting {self.adp_waiting} < {self.timeout_iters}")

    def decide(self, ranks: Sequence[RankState]) -> Expected:
        """The decision of the next step, from every rank's state at the
        exchange; advances the run state."""
        v = self.view(ranks)
        hold_waiting, hold_chunks, rule = self.propose(v)
        if not hold_waiting and self.policy == "throttled":
            self.last_open = self.step  # its rules 2 and 4: since restarts
        # Chunks only for alignment: a policy that declares it, a held rank.
        hold_chunks = hold_chunks and self.policy in CHUNK_POLICIES and v.held
        fail_open = False
        bound = self.held_bound
        if (hold_waiting or hold_chunks) and bound is not None and v.hold_age >= bound:
            hold_waiting = hold_chunks = False
            fail_open = True
            rule = f"hold age {v.hold_age} >= {bound}"
        frozen = self.max_frozen_steps
        if hold_waiting and frozen is not None and self.frozen_run >= frozen:
            hold_waiting = hold_chunks = False
            fail_open = True
            rule = f"frozen run {self.frozen_run} >= {frozen}"
        self.frozen_run = self.frozen_run + 1 if hold_waiting else 0
        self.step += 1
        return Expected(hold_waiting, hold_chunks, fail_open, rule)

    def account(self, hold_waiting: bool, run: StepRun) -> tuple[str, ...]:
        """The requests one rank held on one step, given the admission part
        of the decision it took and what its ``schedule()`` did; adds them
        to their hold counts and closes the counts of completed prefills."""
        before = run.before
        held: list[str] = []
        if hold_waiting and run.seam_asked and before.below_cap:
            held += [r for r in before.waiting if r not in run.scheduled]
        if run.throttled and before.decode:
            held += [r for r in before.chunks if r not in run.scheduled]
        for rid in held:
            count = self.holds[rid] = self.holds.get(rid, 0) + 1
            self.most_held[rid] = max(self.most_held.get(rid, 0), count)
        for rid in run.prefilled:
            self.holds.pop(rid, None)
        return tuple(held)
