#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where two versions of the peers' "fits" rule answer differently.

The peer models read :func:`vllm_ascend_balance.replay.peers.state.admissible_now`
(how many waiting requests a rank's ``schedule()`` would admit now). This
runs the replay (simulated engine, deterministic) with this checkout's rule
and, on every call, also asks the rule of another checkout (``--before
DIR``, e.g. the commit before a fix) on the same scheduler. The run follows
this checkout's answers; up to the first disagreement both rules see the
same states, so 0 disagreements means the other rule's rows are these rows
(no need to run them again). That holds only if the two checkouts' packages
differ in the rule's module alone, which it checks first. Prints one line
per case, seed and mode: calls and disagreements. The cases and seeds are
the comparison's (``benchmarks/policies/cases.py``)::

    venv=$(scripts/lane.sh main)
    git worktree add /tmp/before <commit>
    $venv/bin/python benchmarks/compare_fits_rules.py --before /tmp/before \\
        --cases builtin-dp4 --seeds 9 10 --modes trtllm-adp,sglang-delayer
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from benchmarks.policies import cases  # noqa: E402
from benchmarks.policies.runs import base_args  # noqa: E402
from vllm_ascend_balance.replay.peers import state  # noqa: E402
from vllm_ascend_balance.replay.sim import sglang_rounds  # noqa: E402
from vllm_ascend_balance.tools.cli import main as cli  # noqa: E402

RULE = Path("vllm_ascend_balance/replay/peers/state.py")


def other_changes(here: Path, there: Path) -> list[str]:
    """The package files (``vllm_ascend_balance/**/*.py``) other than
    :data:`RULE` that differ between the checkouts ``here`` and ``there``:
    where any does, equal answers of the rule no longer mean equal rows."""
    names = {
        p.relative_to(root)
        for root in (here, there)
        for p in (root / "vllm_ascend_balance").rglob("*.py")
    }
    return sorted(
        str(n)
        for n in names - {RULE}
        if not (here / n).is_file()
        or not (there / n).is_file()
        or (here / n).read_bytes() != (there / n).read_bytes()
    )


def load_rule(checkout: Path) -> Any:
    """``admissible_now`` of the checkout ``checkout``, under another name."""
    path = checkout / RULE
    if not path.is_file():
        raise SystemExit(f"--before: {checkout} has no {RULE}")
    spec = importlib.util.spec_from_file_location("_fits_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.admissible_now


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, metavar="DIR", help="the other checkout")
    p.add_argument("--cases", nargs="+", required=True, help="case keys (kv-bound-dp4)")
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--modes", required=True, help="comma-separated peer modes")
    args = p.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    changed = other_changes(here, Path(args.before))
    if changed:
        raise SystemExit(
            f"--before: {args.before} differs from this checkout beyond {RULE} "
            f"({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}): "
            "equal answers would not mean equal rows; give a checkout that "
            "differs in the rule only"
        )
    before = load_rule(Path(args.before))
    after = state.admissible_now
    counts = [0, 0]

    def both(scheduler: Any) -> int:
        answer = after(scheduler)
        counts[0] += 1
        counts[1] += answer != before(scheduler)
        return answer

    # rank_state() looks it up at each call; sglang_rounds bound it at import
    state.admissible_now = both
    sglang_rounds.admissible_now = both
    total = [0, 0]
    with tempfile.TemporaryDirectory(prefix="vab-fits-") as tmp:
        for case in cases.select(args.cases, quick=False):
            for seed in args.seeds:
                replay = ["replay", *base_args(case, seed, Path(tmp))]
                for mode in args.modes.split(","):
                    counts[:] = [0, 0]
                    cli([*replay, "--mode", mode])
                    total[0] += counts[0]
                    total[1] += counts[1]
                    print(f"FITS {case.key} seed {seed} {mode}: {counts[0]} "
                          f"calls, {counts[1]} disagree", flush=True)  # fmt: skip
    print(f"FITS total: {total[0]} calls, {total[1]} disagree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
