#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-rank cost of the gate's decision at a large DP size.

Every active step each rank runs one exchange, then its policy's
``decide()`` (:mod:`vllm_ascend_balance.gate.policies`) on the exchange's summary
of the gathered tensor. This times, per rank and per step, at ``--dp`` ranks
(default 256):

- ``decide``: the policy's decision given the summary, for each policy
  (the part that differs between policies);
- ``harness``: the timing loop's own call on the same inputs, doing
  nothing (the floor under ``decide``);
- ``summary``: the summary of a gathered ``(dp, 1 + flags)`` int64 tensor as
  :func:`~vllm_ascend_balance.gate.collectives.gather_extremes` computes it
  (max/min of the running column, "any" of each flag column): the same
  code for every policy, shown for scale.

Inputs: ``--cases`` gathered tensors drawn once from a seeded generator
(running counts near the cap, flags set at random), cycled so the decision
takes its different branches. Each figure is the median over ``--repeats``
blocks of ns per call; each measurement runs twice (A and A', the same
code and inputs) and the A'/A ratio is printed as the noise. Only ratios
and counts are for comparing; nothing is asserted.

    python benchmarks/bench_policy_decision.py            # DP 256
    python benchmarks/bench_policy_decision.py --quick --json decision.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

import torch  # noqa: E402

from vllm_ascend_balance.gate.policies import POLICIES, Gathered, Knobs, make_policy  # noqa: E402

CAP = 16
BUDGET_NS = 1000.0


def gathered_tensors(dp: int, width: int, cases: int, seed: int) -> list[torch.Tensor]:
    """``cases`` gathered tensors of shape ``(dp, width)`` (or ``(dp,)``)."""
    rng = random.Random(seed)
    # The fourth flag (``cohort``'s riding, ``batched``'s starved) from its
    # own stream, so the other policies' inputs stay the ones they always
    # had.
    chunks = random.Random(seed + 1)
    out = []
    for _ in range(cases):
        rows = []
        for _ in range(dp):
            running = min(CAP, max(0, int(rng.gauss(CAP * 0.7, CAP * 0.3))))
            waiting = rng.random() < 0.4
            below = running < CAP
            flags = [int(waiting and below), int(waiting and not below)]
            flags.append(int(below and not waiting))
            if width > 4:
                flags.append(int(chunks.random() < 0.1))
            rows.append([running, *flags][:width])
        tensor = torch.tensor(rows, dtype=torch.int64)
        out.append(tensor[:, 0].contiguous() if width == 1 else tensor)
    return out


def summary(gathered: torch.Tensor, columns: tuple[str, ...]) -> Gathered:
    """What ``gather_extremes`` computes from the received tensor, named by
    the policy's ``columns`` as the gate does."""
    if gathered.dim() == 1:
        return Gathered.of(int(gathered.max()), int(gathered.min()), CAP, ())
    running = gathered[:, 0]
    anyone = tuple(bool(x) for x in gathered[:, 1:].amax(dim=0).tolist())
    return Gathered.of(int(running.max()), int(running.min()), CAP, anyone, columns)


def per_call_ns(call: Callable[[int], object], calls: int, repeats: int) -> float:
    """Median over ``repeats`` blocks of ns per call."""
    samples = []
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for i in range(calls):
                call(i)
            samples.append((time.perf_counter_ns() - start) / calls)
    finally:
        gc.enable()
    return statistics.median(samples)


def measure(dp: int, cases: int, calls: int, repeats: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    knobs = Knobs(None, 64, 8, 0.5)
    for name in POLICIES:
        width = 1 + len(make_policy(name, knobs).flags(0, True, CAP))
        if name == "leader_at_cap":
            width = 1  # the contract's payload: len(running) alone
        tensors = gathered_tensors(dp, width, cases, seed=dp)
        policy = make_policy(name, knobs)
        columns = policy.columns
        seen = [summary(t, columns) for t in tensors]
        decide = policy.decide

        def run_decide(i: int, decide=decide, seen=seen) -> object:
            return decide(seen[i % cases])

        def run_summary(i: int, tensors=tensors, columns=columns) -> object:
            return summary(tensors[i % cases], columns)

        def run_nothing(i: int, seen=seen) -> object:
            return seen[i % cases]

        for what, call, n in (
            ("harness", run_nothing, calls),
            ("decide", run_decide, calls),
            ("summary", run_summary, max(1, calls // 20)),
        ):
            a = per_call_ns(call, n, repeats)
            a2 = per_call_ns(call, n, repeats)
            rows.append(
                {
                    "policy": name,
                    "what": what,
                    "dp": dp,
                    "ns": a,
                    "ns_again": a2,
                    "aa_ratio": a2 / a,
                    "of_1us": a / BUDGET_NS,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dp", type=int, default=256)
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--json", type=Path, help="write the rows to FILE")
    args = parser.parse_args(argv)
    calls, repeats = (200, 3) if args.quick else (args.calls, args.repeats)
    rows = measure(args.dp, args.cases, calls, repeats)
    print(
        f"gate decision per rank per step at DP {args.dp} "
        f"(median of {repeats} blocks; A/A = the same measurement again)"
    )
    print(
        "decide includes the harness's own call (the harness row: an empty "
        "call on the same inputs)"
    )
    print(f"{'policy':<15} {'what':<8} {'ns/call':>9} {'A/A':>6} {'of 1 us':>8}")
    for row in rows:
        print(
            f"{row['policy']:<15} {row['what']:<8} {row['ns']:>9.0f} "
            f"{row['aa_ratio']:>6.2f} {row['of_1us']:>8.2f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"benchmark": "bench_policy_decision", "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
