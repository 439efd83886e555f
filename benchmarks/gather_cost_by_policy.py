#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sequential message rounds per active step for every gate policy, at DP 8
to 256 (the table of docs/gather-cost.md, "Rounds per policy").

Each policy's exchange follows from its signals: every signal combines by
an idempotent operation (max, min, any), so a policy runs the log-depth
``all_reduce_max`` unless it declares another exchange (the contract keeps
vllm-ascend's ``all_gather`` of ``len(running)``). The rounds are the
algorithms' counts (:func:`vllm_ascend_balance.gate.collectives.rounds`),
which ``bench_gather.py --rounds-dp 2-16`` confirms by counting each rank's
socket messages on real gloo groups; a count, so it has no noise. Also
printed: the values each rank sends (the payload's width), with and
without a hold bound.

    python benchmarks/gather_cost_by_policy.py
    python benchmarks/gather_cost_by_policy.py --markdown   # the docs table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from vllm_ascend_balance.gate import bound
from vllm_ascend_balance.gate.collectives import natural_collective, rounds
from vllm_ascend_balance.gate.policies import POLICIES
from vllm_ascend_balance.gate.settings import GateSettings

SIZES = (8, 16, 32, 64, 128, 256)


def rows() -> list[list[str]]:
    """One row per policy: name, exchange, values sent (bounded/unbounded),
    then rounds per step at each of :data:`SIZES`."""
    out = []
    for name, policy in POLICIES.items():
        collective = natural_collective(policy.collective)
        widths = []
        for settings in (GateSettings(name), GateSettings(name, max_held_steps=64)):
            layout = bound.plan(settings).layout
            width = (
                len(layout.quantities)
                if collective == "all_gather"
                else len(layout.signals)
            )
            widths.append(str(width))
        sent = " / ".join(dict.fromkeys(widths))
        out.append(
            [f"`{name}`", f"`{collective}`", sent]
            + [str(rounds(collective, n)) for n in SIZES]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="a markdown table")
    args = parser.parse_args(argv)
    head = ["policy", "exchange", "int64 values sent"] + [f"DP {n}" for n in SIZES]
    table = rows()
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|---|---|" + "---:|" * len(SIZES))
        for row in table:
            print("| " + " | ".join(row) + " |")
        return 0
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    for row in [head, *table]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
