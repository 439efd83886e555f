# SPDX-License-Identifier: Apache-2.0
"""``aligned``: the queued-leader freeze plus prefill alignment across ranks
above a load, every hold bounded by a deadline (opt-in)."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import (
    DEFAULT_ALIGN_DEADLINE,
    DEFAULT_ALIGN_WINDOW,
    NEVER,
    Gathered,
    Knobs,
)
from vllm_ascend_balance.gate.policies.leader_at_cap import GatePolicy
from vllm_ascend_balance.gate.policies.queued_leader import QueuedLeader


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
    columns: ClassVar[tuple[str, ...]] = ("held", "queued", "idle")

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
        self,
        running: int,
        waiting: bool,
        cap: int,
        riding: bool = False,
        pending: bool = False,
    ) -> tuple[int, ...]:
        held, queued = GatePolicy.flags(self, running, waiting, cap)
        return held, queued, int(running < cap and not waiting)

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
