#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-rank cost of the gate's decision at a large DP size.

Every active step each rank runs one exchange, then the gate's decision
(:func:`~vllm_ascend_balance.gate.bound.step`: the policy's pure
``decide()``, then the gate's own bounds) on the exchange's view. This
times, per rank and per step, at ``--dp`` ranks (default 256):

- ``decide``: the gate's decision given the view, for each policy (the
  part that differs between policies), its run state carried from call to
  call as on a rank;
- ``harness``: the timing loop's own call on the same inputs, doing
  nothing (the floor under ``decide``);
- ``summary``: the view of a gathered ``(dp, quantities)`` int64 tensor as
  :func:`~vllm_ascend_balance.gate.collectives.gather_rows` computes it
  (:func:`~vllm_ascend_balance.gate.signals.combine` of its rows): the
  all-gather's cost at this size, shown for scale (the log-depth exchange
  combines as it receives);
- ``ledger``: the hold ledger's age of one rank
  (:meth:`~vllm_ascend_balance.gate.holds.HoldLedger.oldest`) at the cap,
  with holds on record: the gate's own work where a hold bound applies.

Inputs: ``--cases`` gathered tensors drawn once from a seeded generator
(running counts near the cap, requests waiting at random), cycled so the
decision takes its different branches. Each figure is the median over
``--repeats`` blocks of ns per call; each measurement runs twice (A and
A', the same code and inputs) and the A'/A ratio is printed as the noise.
Only ratios and counts are for comparing; nothing is asserted.

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

from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402

from vllm_ascend_balance.gate import bound  # noqa: E402
from vllm_ascend_balance.gate.holds import HoldLedger  # noqa: E402
from vllm_ascend_balance.gate.policies import POLICIES  # noqa: E402
from vllm_ascend_balance.gate.settings import DEFAULT_POLICY, GateSettings  # noqa: E402
from vllm_ascend_balance.gate.signals import Layout, View, combine  # noqa: E402

CAP = 16
BUDGET_NS = 1000.0
#: Where a hold bound applies (every opt-in policy, as recommended).
MAX_HELD = 64


def gathered_tensors(
    dp: int, layout: Layout, cases: int, seed: int
) -> list[torch.Tensor]:
    """``cases`` gathered tensors of shape ``(dp, quantities)`` (``(dp,)``
    for ``len(running)`` alone), each column the quantity ``layout`` names."""
    rng = random.Random(seed)
    out = []
    for _ in range(cases):
        rows = []
        for _ in range(dp):
            running = min(CAP, max(0, int(rng.gauss(CAP * 0.7, CAP * 0.3))))
            waiting = rng.random() < 0.4
            values = {
                "running": running,
                "held": int(waiting and running < CAP),
                "queued": int(waiting and running >= CAP),
                "starved": int(waiting and running == 0),
                "hold_age": rng.randint(0, MAX_HELD) if waiting else 0,
                # adp_balance's: a chunk in flight or held; a decode to run.
                "context": int(rng.random() < 0.2 or (waiting and running < CAP)),
                "decoding": int(running > 0 or not waiting),
            }
            rows.append([values[q] for q in layout.quantities])
        tensor = torch.tensor(rows, dtype=torch.int64)
        out.append(tensor[:, 0].contiguous() if tensor.shape[1] == 1 else tensor)
    return out


def summary(gathered: torch.Tensor, layout: Layout) -> View:
    """What ``gather_rows`` computes from the received tensor."""
    size = gathered.shape[0]
    rows = gathered.reshape(size, -1).tolist()
    return combine(layout, rows, CAP, size)


def ledger_rank() -> tuple[HoldLedger, SimpleNamespace]:
    """One rank at the cap with a decode, a chunk in flight and four
    requests waiting, half of its requests with holds on record."""
    running = [
        SimpleNamespace(request_id=f"r{i}", is_prefill_chunk=i == 0) for i in range(CAP)
    ]
    waiting = [SimpleNamespace(request_id=f"w{i}") for i in range(4)]
    rank = SimpleNamespace(running=running, waiting=waiting, max_num_running_reqs=CAP)
    ledger = HoldLedger()
    ledger.holds = {r.request_id: 3 for r in (running + waiting)[::2]}
    return ledger, rank


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
    for name in POLICIES:
        held = None if name == DEFAULT_POLICY else MAX_HELD
        plan = bound.plan(GateSettings(name, max_held_steps=held))
        layout = plan.layout
        tensors = gathered_tensors(dp, layout, cases, seed=dp)
        seen = [summary(t, layout) for t in tensors]
        state = [plan.initial]

        def run_decide(i: int, plan=plan, seen=seen, state=state) -> object:
            state[0], decision, _ = bound.step(plan, state[0], seen[i % cases])
            return decision

        def run_summary(i: int, tensors=tensors, layout=layout) -> object:
            return summary(tensors[i % cases], layout)

        def run_nothing(i: int, seen=seen) -> object:
            return seen[i % cases]

        ledger, rank = ledger_rank()
        kept = dict(ledger.holds)

        def run_ledger(i: int, ledger=ledger, rank=rank, kept=kept) -> object:
            ledger.holds = kept  # oldest() forgets nothing here: same input
            return ledger.oldest(rank)

        for what, call, n in (
            ("harness", run_nothing, calls),
            ("decide", run_decide, calls),
            ("summary", run_summary, max(1, calls // 20)),
            ("ledger", run_ledger, calls),
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
