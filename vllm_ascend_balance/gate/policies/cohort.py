# SPDX-License-Identifier: Apache-2.0
"""``cohort``: admission closed by default and opened for every rank
together, every hold bounded by a deadline (opt-in; issue 44)."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_COHORT_WINDOW,
    NEVER,
    Gathered,
    Knobs,
)
from vllm_ascend_balance.gate.policies.leader_at_cap import GatePolicy
from vllm_ascend_balance.gate.policies.queued_leader import QueuedLeader


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
    columns: ClassVar[tuple[str, ...]] = ("held", "queued", "idle", "riding")
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
        self,
        running: int,
        waiting: bool,
        cap: int,
        riding: bool = False,
        pending: bool = False,
    ) -> tuple[int, ...]:
        held, queued = GatePolicy.flags(self, running, waiting, cap)
        return held, queued, int(running < cap and not waiting), int(riding)

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
        return self._bounded(frozen)

    def _bounded(self, frozen: bool) -> bool:
        """The deadline's verdict on a held gather the rules would freeze
        (False: a fail-open); an opening restarts :attr:`since`."""
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
