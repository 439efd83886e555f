# SPDX-License-Identifier: Apache-2.0
"""What each peer family runs, as data: its ``--mode`` at the source's
documented defaults and the sweep its tuned point is chosen from
(``vllm_ascend_balance/replay/pipeline/modes.py`` has the grammar).

Issue 55 asks for "peers' grids as large as the search ours had: count the
variants tried for ours and give each peer family as many tuned points".
Ours: :data:`PEER_POINTS` settings appeared in the comparison's committed
grids over the design (``git log -p`` of ``settings.py`` and of
``compare_policies.py``, every ``on...`` mode string), so each family's grid
has that many points, and every case of the full run runs whole grids
(DP 4 since 2026-12-06, DP 16 and 64 since 2026-12-07); a named case that
cuts (``cases.CUT_POINTS``) cuts ours and every family alike.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The settings of ours tried during the design: ``on``, ``max-frozen:64``,
#: ``queued-leader`` (held-step bounds 16 and 64), ``throttled`` (windows 8,
#: its default, 32), ``adp-balance`` (bounds 64 and 256), ``cohort`` (8, its
#: default, 32), ``batched`` and ``aligned`` (each at its default and 64):
#: 16 in all. Each peer family's grid, defaults included, has as many.
PEER_POINTS = 16


@dataclass(frozen=True)
class PeerFamily:
    """One peer's rule: its ``--mode`` at the source's documented defaults
    (None: the baseline is its default) and its other knob settings in
    priority order.

    The family's grid (what its tuned point is chosen from) is its
    default, then the sweep, cut to :data:`PEER_POINTS` points
    (``settings.grid``). A family whose default is the baseline (``off``)
    gets that many sweep points, the baseline being judged anyway.
    """

    name: str
    default: str | None
    sweep: tuple[str, ...]


#: The peers (``vllm_ascend_balance/replay/peers/``, docs/peer-policies.md).
#: Each sweep lists first the points its sources report as best, then the
#: delay bound moved around its default (the first six points are the
#: grid of the held-out run's freeze, ``b3a30e9``; a cut case keeps the
#: first ones), then the rest of the search.
PEERS: tuple[PeerFamily, ...] = (
    PeerFamily(
        "sglang-delayer",
        "sglang-delayer",  # 30 passes, SGLang's default
        (
            # The delayer with the interval at 4, the value sglang#35017
            # and #40443 report for decode speed with TTFT flat.
            "sglang-delayer:30:0:0:5000:4",
            # The pass bound at ~1/4 and 2x the default: the delayer's only
            # bound on a hold; no source reports a tuned value.
            "sglang-delayer:8",
            "sglang-delayer:60",
            "sglang-delayer:15",
            # The queue trigger (opt-in, sglang#34806 tests it at 0.8).
            "sglang-delayer:30:0:80",
            # The rest of the search: the bound wider, the interval with
            # other bounds and at 2 and 8, the token-usage watermark, the
            # queue trigger lower, the batch-size window.
            "sglang-delayer:4",
            "sglang-delayer:120",
            "sglang-delayer:15:0:0:5000:4",
            "sglang-delayer:60:0:0:5000:4",
            "sglang-delayer:30:0:0:5000:2",
            "sglang-delayer:30:0:0:5000:8",
            "sglang-delayer:30:50",
            "sglang-delayer:30:0:50",
            "sglang-delayer:30:0:0:5000:0:4",
            "sglang-delayer:30:0:0:5000:0:64",
        ),
    ),  # fmt: skip
    PeerFamily(
        "sglang-pdi",
        None,  # --prefill-decode-interval 0 (off) is SGLang's default
        (
            # sglang#40443: 4 and 8 rounds (1.38 -> 18.45 -> 32.05 tok/s
            # per request, TTFT flat); 22: its Qwen3-VL override.
            "sglang-pdi:4",
            "sglang-pdi:8",
            "sglang-pdi:22",
            # Below and between the reported points.
            "sglang-pdi:2",
            "sglang-pdi:16",
            "sglang-pdi:12",
            # The rest of the search, 1 to 64 rounds.
            "sglang-pdi:3",
            "sglang-pdi:6",
            "sglang-pdi:10",
            "sglang-pdi:32",
            "sglang-pdi:1",
            "sglang-pdi:5",
            "sglang-pdi:14",
            "sglang-pdi:18",
            "sglang-pdi:48",
            "sglang-pdi:64",
        ),
    ),  # fmt: skip
    PeerFamily(
        "trtllm-adp",
        "trtllm-adp",  # timeout_iters 50, batching_wait_iters 10
        (
            # No batching wait: the timeout alone (the rule's first stage).
            "trtllm-adp:50:0",
            # Both iteration knobs halved and doubled together.
            "trtllm-adp:25:5",
            "trtllm-adp:100:20",
            # The low-occupancy timeout of NVIDIA/TensorRT-LLM#17700
            # (off by default): at most 5 iterations while the least busy
            # rank has under 2 generation requests.
            "trtllm-adp:50:10:2:5",
            "trtllm-adp:12:2",
            # The rest of the search: each knob moved alone, a longer
            # timeout, the low-occupancy timeout at other thresholds.
            "trtllm-adp:25:0",
            "trtllm-adp:100:0",
            "trtllm-adp:12:0",
            "trtllm-adp:50:5",
            "trtllm-adp:50:20",
            "trtllm-adp:25:10",
            "trtllm-adp:100:10",
            "trtllm-adp:200:20",
            "trtllm-adp:50:10:1:5",
            "trtllm-adp:50:10:4:10",
        ),
    ),  # fmt: skip
    PeerFamily(
        "vllm-align",
        "vllm-align",  # 30 passes, lead 2: vLLM #51199's test plan
        (
            "vllm-align:8",
            "vllm-align:60",
            # The step lead moved: 1 releases sooner, 4 aligns more slack.
            "vllm-align:30:4",
            "vllm-align:30:1",
            "vllm-align:15",
            # The rest of the search: the bound wider, the lead with other
            # bounds, no lead and a lead of 8.
            "vllm-align:4",
            "vllm-align:120",
            "vllm-align:8:1",
            "vllm-align:8:4",
            "vllm-align:15:1",
            "vllm-align:15:4",
            "vllm-align:60:1",
            "vllm-align:60:4",
            "vllm-align:30:0",
            "vllm-align:30:8",
        ),
    ),  # fmt: skip
    PeerFamily(
        "atom-delayer",
        "atom-delayer",  # 30 passes, ATOM#930's default
        (
            "atom-delayer:8",
            "atom-delayer:60",
            # ROCm/ATOM#1670 raised its later tick bound from 30 to 200 for
            # DP attention benchmarks: a bound of that order.
            "atom-delayer:128",
            "atom-delayer:15",
            "atom-delayer:4",
            # The rest of the search: the pass bound from 2 to 256, the
            # wall-clock bound at 1 and 2 s.
            "atom-delayer:2",
            "atom-delayer:6",
            "atom-delayer:10",
            "atom-delayer:20",
            "atom-delayer:40",
            "atom-delayer:80",
            "atom-delayer:256",
            "atom-delayer:30:1000",
            "atom-delayer:128:1000",
            "atom-delayer:60:2000",
        ),
    ),  # fmt: skip
    # vLLM's own DP prefill throttle (prefill_schedule_interval, vLLM #44558,
    # which reports interval 2): its default (1) is the baseline; needs
    # vLLM 0.32+ (the main lane). 2-8 is the range its users run.
    PeerFamily(
        "vllm-interval",
        None,
        (
            "interval:2",
            "interval:4",
            "interval:8",
            "interval:3",
            "interval:16",
            "interval:6",
            # The rest of the search, 5 to 64 steps.
            "interval:5",
            "interval:7",
            "interval:10",
            "interval:12",
            "interval:14",
            "interval:20",
            "interval:24",
            "interval:32",
            "interval:48",
            "interval:64",
        ),
    ),  # fmt: skip
)
