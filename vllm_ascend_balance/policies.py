# SPDX-License-Identifier: Apache-2.0
"""The gate's freeze policies: one class per ``balance_policy``, chosen by name.

A small registry (:data:`POLICIES`, :func:`make_policy`), the way vLLM's
``vllm/v1/core/sched/request_queue.py`` picks a request queue class by its
scheduling policy's name (``create_request_queue``). Each policy says:

- what a rank contributes to the gather beyond ``len(running)``
  (:meth:`GatePolicy.flags`; the contract contributes nothing, so its payload
  stays ``len(running)`` alone);
- whether the gate is frozen this step (:meth:`GatePolicy.decide`), from the
  exchange's summary of the gathered payload (:class:`Gathered`) and the
  policy's own run state, itself a function of the gathered summaries seen
  so far. Every rank receives the same payload, so every rank holds the same
  state and decides the same.

The run state restarts (:meth:`GatePolicy.restart`) when the DP group object
is replaced: a rank joining a new group has no history, so an empty one is
the only state every member can share.

Nothing here touches a scheduler or a tensor; the mixin
(:class:`~vllm_ascend_balance.scheduler.BalanceSchedulerMixin`) feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

#: The deadline an ``aligned`` gate holds a request at most, in consecutive
#: frozen steps, where ``balance_max_held_steps`` is not set (never unbounded).
DEFAULT_ALIGN_DEADLINE = 64
#: ``balance_align_window``: the most steps between two aligned openings.
DEFAULT_ALIGN_WINDOW = 32
#: ``balance_align_window`` of ``cohort``: the most steps since the last
#: opening that a held request waits for an idle rank to get work (tuned on
#: the simulated engine, docs/peer-policies.md).
DEFAULT_COHORT_WINDOW = 16
#: :attr:`Aligned.since` before any opening: the first request is never
#: held for alignment.
NEVER = 1 << 30
#: ``balance_align_min_load``: the fill (running / cap) below which
#: alignment is off. 0: the window alone follows the load (tuned on the
#: simulated engine, docs/operating.md).
DEFAULT_ALIGN_MIN_LOAD = 0.0


@dataclass(frozen=True, slots=True)
class Gathered:
    """What every rank learns from one exchange (the same on every rank).

    Attributes:
        leader: the largest ``len(running)`` in the group.
        lowest: the smallest ``len(running)``.
        cap: this rank's admission cap (the same configuration on every rank).
        held: some rank has requests waiting and ``len(running)`` below the
            cap (it could admit, the gate would hold it).
        queued: some rank is at the cap with requests waiting.
        idle: some rank is below the cap with nothing waiting (it cannot
            take part in an aligned prefill). Only ``aligned`` and
            ``cohort`` send it.
        riding: some rank runs a long prefill chunk next step anyway (at
            least half its token budget). Only ``cohort`` sends it.
    """

    leader: int
    lowest: int
    cap: int
    held: bool = False
    queued: bool = False
    idle: bool = False
    riding: bool = False

    @classmethod
    def of(
        cls, leader: int, lowest: int, cap: int, anyone: tuple[bool, ...]
    ) -> Gathered:
        """From the exchange's ``(max, min, any of each flag)``."""
        return cls(leader, lowest, cap, *anyone)


@dataclass(frozen=True)
class Knobs:
    """The settings a policy reads (class attributes of the gate, the same
    on every rank): the ``balance_*`` keys of the same names.
    ``align_window`` None: the reading policy's own default
    (:data:`DEFAULT_ALIGN_WINDOW`, :data:`DEFAULT_COHORT_WINDOW`)."""

    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    align_window: int | None = None
    align_min_load: float = DEFAULT_ALIGN_MIN_LOAD


class GatePolicy:
    """``leader_at_cap``, the contract: frozen while ``max(running) == cap``
    (``==``, not ``>=``), optionally bounded.

    Bounds (at most one): ``max_frozen_steps`` N opens the gate for one step
    (a *fail-open*) after N consecutive frozen gathers;
    ``max_held_steps`` N does so after N consecutive frozen gathers on which
    some rank held a request (a frozen gather that holds nothing neither
    counts nor restarts the run).

    Attributes:
        run: consecutive frozen gathers counted by the bound so far.
        failed_open: the last decision was a fail-open.
        sends_flags: the payload carries :meth:`flags` (else it is
            ``len(running)`` alone and the rank's queues are not read).
        reads_chunks: :meth:`flags` takes the rank's ``riding`` flag.
    """

    name: ClassVar[str] = "leader_at_cap"
    #: :meth:`flags` takes ``riding`` (the mixin scans its running requests
    #: for it only then).
    reads_chunks: ClassVar[bool] = False

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self.run = 0
        self.failed_open = False
        self.sends_flags = knobs.max_held_steps is not None

    def flags(
        self, running: int, waiting: bool, cap: int, riding: bool = False
    ) -> tuple[int, ...]:
        """This rank's 0/1 flags after ``len(running)`` in the payload,
        where :attr:`sends_flags`: ``(held, queued)``. ``riding`` (a long
        prefill chunk runs here next step) is passed where
        :attr:`reads_chunks` only."""
        below = running < cap
        return int(waiting and below), int(waiting and not below)

    def closes(self, seen: Gathered) -> bool:
        """The freeze condition, before the bound."""
        return seen.leader == seen.cap

    def decide(self, seen: Gathered) -> bool:
        """Frozen this step? Updates the run state (pure in ``seen``)."""
        self.failed_open = False
        if not self.closes(seen):
            self.run = 0
            return False
        return self.keep_frozen(seen.held)

    def keep_frozen(self, held: bool) -> bool:
        """The bound's verdict on a gather the policy would freeze: False
        opens the gate for this step (a fail-open)."""
        bound, counts = self.knobs.max_frozen_steps, True
        if self.knobs.max_held_steps is not None:
            bound, counts = self.knobs.max_held_steps, held
        if not counts:
            return True
        if bound is not None and self.run >= bound:
            self.failed_open = True
            self.run = 0
            return False
        self.run += 1
        return True

    def restart(self) -> None:
        """A new DP group: forget the run (module docstring)."""
        self.run = 0


class QueuedLeader(GatePolicy):
    """``queued_leader``: frozen only while some rank at the cap has
    requests waiting. A leader at the cap with nothing waiting has no
    admission to align the others with (docs/peer-policies.md)."""

    name: ClassVar[str] = "queued_leader"

    def __init__(self, knobs: Knobs) -> None:
        super().__init__(knobs)
        self.sends_flags = True

    def closes(self, seen: Gathered) -> bool:
        return seen.queued


class Aligned(QueuedLeader):
    """``aligned``: the queued-leader freeze, plus prefill alignment above a
    load, every hold bounded by a deadline.

    Per gather, from the gathered flags ``(held, queued, idle)`` and the
    load ``(leader + lowest) / (2 * cap)``:

    1. a rank at the cap has a queue: frozen (``queued_leader``);
    2. nothing is held anywhere, or the load is below ``align_min_load``:
       open (alignment off);
    3. no rank below the cap is idle (every rank that can admit has
       something to prefill): open, all prefill in the same step;
    4. ``W`` gathers or more since the last opening that had a request to
       admit: open; ``W`` grows with the load, from 1 at
       ``align_min_load`` to ``align_window`` at a full cap, so a light
       load waits little;
    5. else frozen.

    Deadline: a frozen gather on which some rank holds a request counts;
    after ``max_held_steps`` (default :data:`DEFAULT_ALIGN_DEADLINE`)
    consecutive such gathers the gate opens (a fail-open), so no request
    waits behind the gate more than that many consecutive frozen steps,
    whichever rule froze it.

    Attributes:
        since: gathers since the last opening that had a request to admit
            (this one included; :data:`NEVER` before the first).
    """

    name: ClassVar[str] = "aligned"

    def __init__(self, knobs: Knobs) -> None:
        knobs = Knobs(
            None,
            knobs.max_held_steps or DEFAULT_ALIGN_DEADLINE,
            knobs.align_window or DEFAULT_ALIGN_WINDOW,
            knobs.align_min_load,
        )
        super().__init__(knobs)
        self.since = NEVER
        self._deadline: int = knobs.max_held_steps  # type: ignore[assignment]

    def flags(
        self, running: int, waiting: bool, cap: int, riding: bool = False
    ) -> tuple[int, ...]:
        below = running < cap
        return (
            int(waiting and below),
            int(waiting and not below),
            int(below and not waiting),
        )

    def window(self, seen: Gathered) -> int | None:
        """Steps between aligned openings at this load; None: alignment off."""
        load = (seen.leader + seen.lowest) / (2 * seen.cap) if seen.cap else 1.0
        low = self.knobs.align_min_load
        if load < low:
            return None
        if low >= 1:
            return 1
        window: int = self.knobs.align_window  # type: ignore[assignment]
        return 1 + int((window - 1) * (load - low) / (1 - low))

    def closes(self, seen: Gathered) -> bool:
        """Rules 1-5 of the class docstring (reads :attr:`since`)."""
        if seen.queued:
            return True
        if not seen.held or not seen.idle:
            return False
        window = self.window(seen)
        return window is not None and self.since < window

    def decide(self, seen: Gathered) -> bool:
        # GatePolicy.decide with closes() and the held bound inlined: this
        # runs on every rank at every step (benchmarks/bench_policy_decision.py).
        self.since += 1
        held = seen.held
        if seen.queued:
            frozen = True
        elif not held or not seen.idle:
            frozen = False
        else:
            window = self.window(seen)
            frozen = window is not None and self.since < window
        self.failed_open = False
        if not frozen:
            self.run = 0
        elif held:
            if self.run >= self._deadline:
                self.failed_open = True
                self.run = 0
                frozen = False
            else:
                self.run += 1
        if held and not frozen:
            self.since = 0
        return frozen

    def restart(self) -> None:
        super().restart()
        self.since = NEVER


class Cohort(QueuedLeader):
    """``cohort``: admission closed by default; new requests enter only on
    opening steps, which every rank with room and work takes together.

    Why: a lock-step step lasts as long as its slowest rank, so a prefill
    on one rank slows every rank's decode. Prefills scattered over many
    steps make many slow steps; the same prefills in one step make one.
    ``aligned`` was open by default and decided on the previous step's
    gather, so a request arriving on a quiet deployment was admitted alone
    before any rank had seen it. Here a request waits at least one step,
    and the gate opens when the step is worth taking together.

    Per gather, from the gathered flags ``(held, queued, idle, riding)``:

    1. nothing is held anywhere: frozen (closed by default; no request
       waits because of it, so the deadline does not count it);
    2. some rank will run a long prefill chunk next step anyway
       (``riding``: an in-flight prompt with at least half the token
       budget left): open, the other ranks' prefills ride along on a
       step that is slow anyway;
    3. a rank at the cap has a queue: frozen (``queued_leader``: it cannot
       join, the others wait until it can);
    4. no rank below the cap is idle (every rank that can admit has
       something to prefill): open, all prefill in the same step;
    5. ``W`` (``align_window``) gathers or more since the last opening
       that had a request to admit: open; else frozen.

    Deadline: as ``aligned``, a frozen gather on which some rank holds a
    request counts; after ``max_held_steps`` (default
    :data:`DEFAULT_ALIGN_DEADLINE`) consecutive such gathers the gate opens
    for one step (a fail-open), whichever rule froze it.

    Attributes:
        since: gathers since the last opening that had a request to admit
            (this one included; :data:`NEVER` before the first).
    """

    name: ClassVar[str] = "cohort"
    reads_chunks: ClassVar[bool] = True

    def __init__(self, knobs: Knobs) -> None:
        knobs = Knobs(
            None,
            knobs.max_held_steps or DEFAULT_ALIGN_DEADLINE,
            knobs.align_window or DEFAULT_COHORT_WINDOW,
            knobs.align_min_load,
        )
        super().__init__(knobs)
        self.since = NEVER
        self._deadline: int = knobs.max_held_steps  # type: ignore[assignment]
        self._window: int = knobs.align_window  # type: ignore[assignment]

    def flags(
        self, running: int, waiting: bool, cap: int, riding: bool = False
    ) -> tuple[int, ...]:
        below = running < cap
        return (
            int(waiting and below),
            int(waiting and not below),
            int(below and not waiting),
            int(riding),
        )

    def decide(self, seen: Gathered) -> bool:
        self.since += 1
        held = seen.held
        if not held:
            return self._closed()
        if seen.riding:
            frozen = False
        elif seen.queued:
            frozen = True
        elif not seen.idle:
            frozen = False
        else:
            frozen = self.since < self._window
        self.failed_open = False
        if frozen:
            if self.run >= self._deadline:
                self.failed_open = True
                self.run = 0
                frozen = False
            else:
                self.run += 1
        else:
            self.run = 0
        if not frozen:
            self.since = 0
        return frozen

    def _closed(self) -> bool:
        """Rule 1: nothing held, so nothing waits on this freeze; the run
        neither counts it nor restarts."""
        self.failed_open = False
        return True

    def restart(self) -> None:
        super().restart()
        self.since = NEVER


#: The policies by ``balance_policy`` name; the first is the contract.
POLICIES: dict[str, type[GatePolicy]] = {
    cls.name: cls for cls in (GatePolicy, QueuedLeader, Aligned, Cohort)
}


def make_policy(name: str, knobs: Knobs) -> GatePolicy:
    """A fresh policy object of ``name`` (one per scheduler: it holds run
    state).

    Raises:
        KeyError: an unknown name (the configuration reader refuses one
            earlier, in one line).
    """
    return POLICIES[name](knobs)
