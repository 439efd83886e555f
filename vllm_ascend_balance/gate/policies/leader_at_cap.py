# SPDX-License-Identifier: Apache-2.0
"""``leader_at_cap``, the contract and the default: a leader at the cap
freezes every rank. The base class every other policy refines."""

from __future__ import annotations

from typing import ClassVar

from vllm_ascend_balance.gate.policies.base import Gathered, Knobs


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
    #: The :class:`~vllm_ascend_balance.gate.policies.base.Gathered` field of
    #: each flag :meth:`flags` sends, in payload order.
    columns: ClassVar[tuple[str, ...]] = ("held", "queued")
    #: :meth:`flags` takes ``riding`` (the mixin scans its running requests
    #: for it only then).
    reads_chunks: ClassVar[bool] = False
    #: On a frozen step the ranks also defer prefill chunks in flight
    #: (``Scheduler.schedule(throttle_prefills=True)``); ``throttled`` only.
    holds_chunks: ClassVar[bool] = False

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self.run = 0
        self.failed_open = False
        self.sends_flags = knobs.max_held_steps is not None

    def flags(
        self,
        running: int,
        waiting: bool,
        cap: int,
        riding: bool = False,
        pending: bool = False,
    ) -> tuple[int, ...]:
        """This rank's 0/1 flags after ``len(running)`` in the payload,
        where :attr:`sends_flags`: ``(held, queued)``. ``riding`` (a long
        prefill chunk runs here next step) and ``pending`` (a prompt is
        still being prefilled here) are passed where :attr:`reads_chunks`
        only."""
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
