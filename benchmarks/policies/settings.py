# SPDX-License-Identifier: Apache-2.0
"""What the comparison runs, as data: our settings, each peer's documented
default and its knob sweep, the SLO pair of the goodput, the seeds.

To add a mode after a merge (a new peer mode, a new balance policy), add a
row here: nothing else names modes. A peer family's sweep should have as
many points as :data:`OURS` (the issue's "a sweep as large as ours"):
:func:`check_grids` says when it has not.
"""

from __future__ import annotations

from dataclasses import dataclass

#: vLLM as configured, balance off: every relative figure is against it.
BASELINE = "off"

#: Our settings (balance scheduling's opt-in points), the family judged.
OURS: tuple[str, ...] = (
    "on",
    "on+max-frozen:64",
    "on+queued-leader+max-held:64",
    "on+queued-leader+max-held:16",
    "on+aligned+max-held:64",
    "on+aligned:64+max-held:64",
)

#: The one setting we recommend (docs/peer-policies.md), judged per cell.
RECOMMENDED = "on+queued-leader+max-held:64"


@dataclass(frozen=True)
class PeerFamily:
    """One peer's rule: its ``--mode`` at the source's documented defaults
    (None: the baseline is its default) and a sweep of its own knobs
    (``--mode`` entries, the grammar in ``replay/modes.py``)."""

    name: str
    default: str | None
    sweep: tuple[str, ...]


#: The peers (``vllm_ascend_balance/replay/peers/``, docs/peer-policies.md).
#: Sweeps: the knob the source documents as the delay bound (passes or
#: iterations) at 1/4, 1/2 and 2x its default, plus the second knob moved.
PEERS: tuple[PeerFamily, ...] = (
    PeerFamily(
        "sglang-delayer",
        "sglang-delayer",
        (
            "sglang-delayer:8",
            "sglang-delayer:15",
            "sglang-delayer:60",
            "sglang-delayer:30:20",
            "sglang-delayer:30:0:0:5000:4",
            "sglang-delayer:30:0:25",
        ),
    ),  # fmt: skip
    # SGLang's --prefill-decode-interval alone (SGLang #35017; off by
    # default): the values its PR and #40443 report (4, 8) and its Qwen3-VL
    # override (22).
    PeerFamily(
        "sglang-pdi",
        None,
        (
            "sglang-pdi:1",
            "sglang-pdi:2",
            "sglang-pdi:4",
            "sglang-pdi:8",
            "sglang-pdi:16",
            "sglang-pdi:22",
        ),
    ),  # fmt: skip
    PeerFamily(
        "trtllm-adp",
        "trtllm-adp",
        (
            "trtllm-adp:12:2",
            "trtllm-adp:25:5",
            "trtllm-adp:100:10",
            "trtllm-adp:50:0",
            "trtllm-adp:50:10:2:5",
            "trtllm-adp:200:20",
        ),
    ),  # fmt: skip
    PeerFamily(
        "vllm-align",
        "vllm-align",
        (
            "vllm-align:8",
            "vllm-align:15",
            "vllm-align:60",
            "vllm-align:30:1",
            "vllm-align:30:4",
            "vllm-align:4",
        ),
    ),
    PeerFamily(
        "atom-delayer",
        "atom-delayer",
        (
            "atom-delayer:8",
            "atom-delayer:15",
            "atom-delayer:60",
            "atom-delayer:30:1000",
            "atom-delayer:4",
            "atom-delayer:128",
        ),
    ),  # fmt: skip
    # vLLM's own DP prefill throttle (prefill_schedule_interval, vLLM #44558):
    # its default (1) is the baseline; needs vLLM 0.32+ (the main lane).
    PeerFamily(
        "vllm-interval",
        None,
        (
            "interval:2",
            "interval:3",
            "interval:4",
            "interval:8",
            "interval:16",
            "interval:32",
        ),
    ),
)

#: Workload seeds per case: each seed is a different sample of the case's
#: workload (see :mod:`.cases`); the intervals are across them.
SEEDS: tuple[int, ...] = (0, 1, 2)

#: The SLO pair of the goodput, in ms: TTFT <= 2,500 and TPOT <= 100. A
#: 100 ms TPOT is 10 tokens/s, about reading speed, the usual interactive
#: bar; 2.5 s TTFT is the chatbot SLO DistServe (OSDI '24) uses for its
#: larger model. Both sit between the cost model's typical p50 and p99 on
#: these workloads, so the SLO separates modes rather than passing or
#: failing all of them.
SLO_TTFT_MS = 2500.0
SLO_TPOT_MS = 100.0


def peer_modes(families: tuple[PeerFamily, ...] = PEERS) -> list[str]:
    """Every peer ``--mode`` entry: defaults, then sweeps, in table order."""
    defaults = [f.default for f in families if f.default]
    return defaults + [m for f in families for m in f.sweep]


def all_modes(quick: bool = False) -> list[str]:
    """The baseline, ours, then the peers (``quick``: peers at defaults
    only, no sweep), without repeats."""
    peers = [f.default for f in PEERS if f.default] if quick else peer_modes()
    return list(dict.fromkeys([BASELINE, *OURS, *peers]))


def check_grids(families: tuple[PeerFamily, ...] = PEERS) -> list[str]:
    """One line per family whose sweep is smaller than :data:`OURS`."""
    return [
        f"{f.name}: a sweep of {len(f.sweep)} point(s), ours has {len(OURS)}"
        for f in families
        if len(f.sweep) < len(OURS)
    ]
