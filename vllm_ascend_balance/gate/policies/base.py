# SPDX-License-Identifier: Apache-2.0
"""What every policy reads: the gathered summary (:class:`Gathered`), the
knobs (:class:`Knobs`) and the defaults the policies share.

Nothing here decides; the policies (one module each in this package) do.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The deadline an ``aligned`` gate holds a request at most, in consecutive
#: frozen steps, where ``balance_max_held_steps`` is not set (never unbounded).
DEFAULT_ALIGN_DEADLINE = 64
#: ``balance_align_window``: the most steps between two aligned openings.
DEFAULT_ALIGN_WINDOW = 32
#: ``balance_align_window`` of ``cohort``: the most steps since the last
#: opening that a held request waits for an idle rank to get work (tuned on
#: the simulated engine, docs/peer-policies.md).
DEFAULT_COHORT_WINDOW = 16
#: ``balance_align_window`` of ``batched``: the most steps an opening waits
#: (reached when every rank is at the cap; shorter at a lower load). Tuned on
#: the simulated engine, seed 0 of the DP 16 cases (docs/peer-policies.md).
DEFAULT_BATCHED_WINDOW = 32
#: ``balance_align_window`` of ``throttled``: as ``batched``'s, half as long
#: (its holds already keep chunks off the steps between openings). Chosen on
#: the simulated engine, seeds 0-2, and checked on seeds 3-5
#: (docs/peer-policies.md, "throttled").
DEFAULT_THROTTLED_WINDOW = 16
#: ``since`` (``aligned``, ``cohort``) before any opening: the first
#: request is never held for alignment.
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
            least half its token budget). Only ``cohort`` and
            ``batched`` send it.
        starved: some rank has requests waiting and none running (it
            decodes nothing while held). Only ``batched`` and
            ``throttled`` send it.
        chunk: some rank below the cap has a prompt still being
            prefilled (a chunk in flight). Only ``throttled`` sends it.
    """

    leader: int
    lowest: int
    cap: int
    held: bool = False
    queued: bool = False
    idle: bool = False
    riding: bool = False
    starved: bool = False
    chunk: bool = False

    @classmethod
    def of(
        cls,
        leader: int,
        lowest: int,
        cap: int,
        anyone: tuple[bool, ...],
        columns: tuple[str, ...] | None = None,
    ) -> Gathered:
        """From the exchange's ``(max, min, any of each flag)``; ``columns``
        names the flags in payload order (the policy's
        :attr:`~vllm_ascend_balance.gate.policies.leader_at_cap.GatePolicy.columns`;
        None: this class's field order). ``anyone`` may be shorter than
        ``columns``: the contract without a bound sends no flags."""
        if columns is None:
            return cls(leader, lowest, cap, *anyone)
        return cls(leader, lowest, cap, **dict(zip(columns, anyone, strict=False)))


@dataclass(frozen=True)
class Knobs:
    """The settings a policy reads (class attributes of the gate, the same
    on every rank): the ``balance_*`` keys of the same names.
    ``align_window`` None: the reading policy's own default
    (:data:`DEFAULT_ALIGN_WINDOW`, :data:`DEFAULT_COHORT_WINDOW`,
    :data:`DEFAULT_BATCHED_WINDOW`, :data:`DEFAULT_THROTTLED_WINDOW`)."""

    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    align_window: int | None = None
    align_min_load: float = DEFAULT_ALIGN_MIN_LOAD
