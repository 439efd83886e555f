# SPDX-License-Identifier: Apache-2.0
"""Seeded workload generators of the comparison, as JSONL request lines
(the replay's ``--trace`` format: ``arrival_s``, ``prompt_tokens``,
``output_tokens``, optional ``rank``).

Every generator is a pure function of its arguments: the same ``(dp,
seed)`` gives the same lines (``random.Random(seed)``, nothing else), and
rates are per rank so that a case means the same load per rank at every DP
size. Lengths and rates are sized against the replay's default cost model
(25 ms a step, 0.12 ms a prefill token, a 2,048-token budget: one rank
prefills ~7,500 tokens/s).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Line = dict[str, Any]


def _poisson(
    rng: random.Random, rate: float, start: float, end: float
) -> Iterator[float]:
    """Arrival times of a Poisson process of ``rate``/s in ``[start, end)``."""
    t = start + rng.expovariate(rate)
    while t < end:
        yield t
        t += rng.expovariate(rate)


def _line(arrival: float, prompt: int, output: int, rank: int | None = None) -> Line:
    line: Line = {"arrival_s": round(arrival, 4), "prompt_tokens": prompt,
                  "output_tokens": output}  # fmt: skip
    if rank is not None:
        line["rank"] = rank
    return line


def starvation(dp: int, seed: int, cap: int = 16, span_s: float = 30.0) -> list[Line]:
    """Rank 0 filled to ``cap`` with long outputs at t=0 while short requests
    arrive on every other rank: the case where a global freeze starves the
    ranks that have room.

    Rank 0: ``cap`` requests, prompt 256, output 1,000-1,400 tokens. Ranks
    1..dp-1: a short request (prompt 192-320, output 12-20) every 0.3 s on
    average (a jittered clock, each rank its own phase) for ``span_s``.
    Unlike the old fixed trace, each DP size and seed draws its own.
    """
    if dp < 2:
        raise ValueError(f"starvation needs dp >= 2, got {dp}")
    rng = random.Random(f"starvation/{dp}/{seed}")
    lines = [_line(0.0, 256, rng.randint(1000, 1400), 0) for _ in range(cap)]
    for rank in range(1, dp):
        t = rng.uniform(0.0, 0.3)
        while t < span_s:
            lines.append(_line(t, rng.randint(192, 320), rng.randint(12, 20), rank))
            t += rng.uniform(0.2, 0.4)
    return sorted(lines, key=lambda x: (x["arrival_s"], x.get("rank", 0)))


def long_prompts(dp: int, seed: int, rate_per_rank: float = 0.5,
                 span_s: float = 30.0) -> list[Line]:  # fmt: skip
    """Long prompts among chat turns: 30 % prompts of 4,096-12,288 tokens
    (2-6 chunks of the 2,048-token budget: chunked prefill runs next to
    decodes for several steps), output 64-256; 70 % chat turns (prompt
    200-800, output 32-256). Poisson arrivals, ``rate_per_rank`` x ``dp``
    per second: ~19 % of a rank's prefill capacity on average, in bursts
    (at 1.2 per rank a DP 4 run of ``off`` met the goodput SLO for almost
    nothing: every mode fails, nothing is compared)."""
    rng = random.Random(f"long-prompts/{dp}/{seed}")
    lines = []
    for t in _poisson(rng, rate_per_rank * dp, 0.0, span_s):
        if rng.random() < 0.3:
            lines.append(_line(t, rng.randint(4096, 12288), rng.randint(64, 256)))
        else:
            lines.append(_line(t, rng.randint(200, 800), rng.randint(32, 256)))
    return lines


#: The KV-bound case's per-rank cache and model length (tokens): 24,576
#: tokens hold ~7 of its ~3,200-token requests, well under the cap of 16.
KV_CACHE_TOKENS = 24576
KV_MAX_MODEL_LEN = 8192


def kv_bound(dp: int, seed: int, rate_per_rank: float = 0.5,
             span_s: float = 30.0) -> list[Line]:  # fmt: skip
    """KV-bound saturation: prompts 1,500-3,500 and outputs 300-900 tokens
    at ``rate_per_rank`` x ``dp`` per second. A request decodes for ~20
    modeled s, so a rank is asked to run ~10 at once; with
    ``--kv-cache-tokens`` :data:`KV_CACHE_TOKENS` ~7 fit, not the cap of 16,
    and the cache stays full (vLLM preempts). At 0.8 per rank a DP 4 run of
    ``off`` had a TTFT p50 of 11 s (every mode fails the goodput SLO); at
    0.3 the cache did not bind (TTFT p99 0.6 s)."""
    rng = random.Random(f"kv-bound/{dp}/{seed}")
    return [
        _line(t, rng.randint(1500, 3500), rng.randint(300, 900))
        for t in _poisson(rng, rate_per_rank * dp, 0.0, span_s)
    ]


def on_off(dp: int, seed: int, on_s: float = 4.0, off_s: float = 8.0,
           cycles: int = 3) -> list[Line]:  # fmt: skip
    """On/off bursts: ``cycles`` x (``on_s`` at 4 requests/s per rank, then
    ``off_s`` at 0.1/s), the built-in mix's lengths (70 % chat: prompt
    100-600, output 16-96; 30 % long: prompt 1,000-3,000, output 200-480).
    A burst overfills every rank; the quiet gap drains them."""
    rng = random.Random(f"on-off/{dp}/{seed}")
    lines = []
    for c in range(cycles):
        t0 = c * (on_s + off_s)
        for rate, a, b in ((4.0, t0, t0 + on_s), (0.1, t0 + on_s, t0 + on_s + off_s)):
            for t in _poisson(rng, rate * dp, a, b):
                if rng.random() < 0.3:
                    lines.append(
                        _line(t, rng.randint(1000, 3000), rng.randint(200, 480))
                    )
                else:
                    lines.append(_line(t, rng.randint(100, 600), rng.randint(16, 96)))
    return lines


GENERATORS = {
    "starvation": starvation,
    "long-prompts": long_prompts,
    "kv-bound": kv_bound,
    "on-off": on_off,
}


def write_jsonl(lines: list[Line], path: Path) -> Path:
    """Write ``lines`` as JSONL to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
