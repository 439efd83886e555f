# SPDX-License-Identifier: Apache-2.0
"""What the comparison runs, as data: our settings, the peers' grids
(:mod:`.peer_grids`), the SLO pair of the goodput, the seeds.

To add a mode after a merge (a new peer mode, a new balance policy), add a
row here or in :mod:`.peer_grids`: nothing else names modes. A peer
family's grid should have :data:`PEER_POINTS` points, as many as the
settings of ours tried (issue 55): :func:`check_grids` says when it has not.
"""

from __future__ import annotations

import random

from .peer_grids import PEER_POINTS, PEERS, PeerFamily

#: vLLM as configured, balance off: every relative figure is against it.
BASELINE = "off"

#: Our settings (balance scheduling's opt-in points), the family judged,
#: in priority order (a case with fewer points keeps the first ones,
#: :func:`ours`): the throttled rule (the recommended setting, first so that
#: every cut grid runs it); TensorRT-LLM's attention-DP balance as this
#: gate's ``adp_balance`` policy, its hold bounded at 256 steps (about five
#: of its 50-step timeouts: near the source's unbounded hold, which led
#: TPOT at DP 16 on seed 0, docs/peer-policies.md) and at the gate's
#: default 64; the queued-leader rule; the throttled rule with its window
#: (default 16 steps) doubled; the contract (``on``). Every other opt-in
#: hold bounded at 64 steps (the gate's default, spelled out). Six points
#: kept of the 16 tried (:data:`PEER_POINTS`, each peer family's grid).
#: Fixed in one commit before the held-out run (:data:`FROZEN_AT`); ``on+throttled:8``
#: and ``on+max-frozen:64`` left for the two ``adp_balance`` points.
OURS: tuple[str, ...] = (
    "on+throttled+max-held:64",
    "on+adp-balance+max-held:256",
    "on+adp-balance+max-held:64",
    "on+queued-leader+max-held:64",
    "on+throttled:32+max-held:64",
    "on",
)

#: The one setting we recommend (docs/peer-policies.md, "Which setting wins
#: where"), the one the headline judges: ``throttled``, the lowest TPOT p99
#: of ours in most cases; queued-leader holds more cells where first tokens
#: decide (benchmarks/results/policies.md, "Each setting of ours alone").
RECOMMENDED = "on+throttled+max-held:64"


#: The one command that writes ``benchmarks/results/policies.{md,json}``.
COMMAND = "python benchmarks/compare_policies.py --jobs 1"
#: The one command that writes ``benchmarks/results/policies_heldout.*``.
HELD_OUT_COMMAND = f"{COMMAND} --held-out"

#: Workload seeds per case (the design seeds): each seed is a different
#: sample of the case's workload (see :mod:`.cases`); the intervals are
#: across them. All seen before the settings were fixed (:data:`SEEN_SEEDS`:
#: 0-2 throughout, 3-4 once); the held-out run draws :data:`HELD_OUT_COUNT`
#: others. Five since 2026-12-06 (issue 55: five or more per case); the
#: held-out run judges each peer family at the point tuned on this table
#: (``rivals.design_tuned``, stored in its record).
SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)

#: Every seed looked at before the current settings were fixed: 0-2
#: throughout the design, 3-5 once before ``throttled`` existed, 6-8 as the
#: held-out set of 2026-12-06 (``9c48487``).
SEEN_SEEDS: tuple[int, ...] = tuple(range(9))
#: Seeds every case can take: Azure at DP 16 reads 240 s of the trace per
#: seed (``cases.AZURE_WINDOW_S`` x DP/2), and the trace spans 3,502 s, so
#: 14 disjoint windows (``tests/test_policy_seeds.py`` checks it). The first
#: range written here (116) counted 30 s windows and let a draw pass the
#: trace's end; with 0-8 seen, the five unseen seeds are 9-13.
SEED_RANGE = range(14)
#: How many held-out seeds the held-out run draws.
HELD_OUT_COUNT = 5
#: The commit that fixed :data:`OURS` and :data:`RECOMMENDED` before the
#: held-out run ("" until then): the held-out seeds are drawn from it.
FROZEN_AT = "b3a30e912abb9d1d7c37425e49ec8c05ef0b7fce"


def is_held_out(seeds: list[int]) -> bool:
    """Whether ``seeds`` (in run order) are the held-out seeds drawn from
    :data:`FROZEN_AT`."""
    return bool(FROZEN_AT) and sorted(seeds) == held_out_seeds(FROZEN_AT)


def held_out_seeds(frozen_at: str, count: int = HELD_OUT_COUNT) -> list[int]:
    """``count`` seeds drawn with ``random.Random(frozen_at)`` from those of
    :data:`SEED_RANGE` not in :data:`SEEN_SEEDS`: chosen by no one, after
    the settings were fixed, and redrawn by anyone from the commit hash.

    Raises:
        ValueError: ``frozen_at`` is empty (the settings are not fixed).
    """
    if not frozen_at:
        raise ValueError("no FROZEN_AT commit: fix the settings in a commit first")
    unseen = [s for s in SEED_RANGE if s not in SEEN_SEEDS]
    return sorted(random.Random(frozen_at).sample(unseen, count))


#: The SLO pair of the goodput, in ms: TTFT <= 2,500 and TPOT <= 100. A
#: 100 ms TPOT is 10 tokens/s, about reading speed, the usual interactive
#: bar; 2.5 s TTFT is the chatbot SLO DistServe (OSDI '24) uses for its
#: larger model. Both sit between the cost model's typical p50 and p99 on
#: these workloads, so the SLO separates modes rather than passing or
#: failing all of them.
SLO_TTFT_MS = 2500.0
SLO_TPOT_MS = 100.0


def ours(points: int | None = None) -> list[str]:
    """Our settings a case runs: the first ``points`` of :data:`OURS`
    (default: all)."""
    return list(OURS[: len(OURS) if points is None else points])


def grid(family: PeerFamily, points: int | None = None) -> list[str]:
    """``family``'s grid: its default (if it is a mode of its own), then its
    sweep, ``points`` in all (default: :data:`PEER_POINTS`; a cut case
    gives the same ``points`` to ours)."""
    n = PEER_POINTS if points is None else points
    return [m for m in (family.default, *family.sweep) if m][:n]


def peer_modes(
    families: tuple[PeerFamily, ...] = PEERS, points: int | None = None
) -> list[str]:
    """Every peer ``--mode`` entry: defaults, then the rest of each grid, in
    table order."""
    defaults = [f.default for f in families if f.default]
    rest = [m for f in families for m in grid(f, points) if m != f.default]
    return defaults + rest


def all_modes(quick: bool = False, points: int | None = None) -> list[str]:
    """The baseline, ours, then the peers (``quick``: peers at defaults
    only, no sweep), without repeats."""
    peers = (
        [f.default for f in PEERS if f.default] if quick else peer_modes(points=points)
    )
    return list(dict.fromkeys([BASELINE, *ours(points), *peers]))


def check_grids(
    families: tuple[PeerFamily, ...] = PEERS, points: int | None = None
) -> list[str]:
    """One line per family whose grid has fewer than ``points`` points
    (default: :data:`PEER_POINTS`, the settings of ours tried)."""
    n = PEER_POINTS if points is None else points
    return [
        f"{f.name}: a grid of {len(grid(f, n))} point(s), the case's has {n}"
        for f in families
        if len(grid(f, n)) != n
    ]
