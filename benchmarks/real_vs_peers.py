# SPDX-License-Identifier: Apache-2.0
"""One setting against the peers on the real engine, from a replay's JSON.

``scripts/replay --json OUT.json`` compares every mode against the first
(``off``); a user choosing between our setting and a peer's wants them
against each other. This prints, as a Markdown table, every mode's mean ±
half the range of its runs and, for ``--ours`` against each other mode
named in ``--against``, the difference of the means with the replay's own
99 % band (``vllm_ascend_balance.replay.pipeline.compare.judge``: pooled
variance, Student's t; ``~`` inside the band). An A/A pair in the run
(``off`` and ``off'``) is printed the same way, as the noise reference.

    python benchmarks/real_vs_peers.py OUT.json --ours on+throttled+max-held:64 \\
        --against trtllm-adp:50:0,interval:2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from vllm_ascend_balance.replay.pipeline.compare import Cell, judge

METRICS = (
    "TPOT p50 (ms)",
    "TPOT p99 (ms)",
    "TTFT p50 (ms)",
    "TTFT p99 (ms)",
    "output tokens/s",
    "steps frozen",
)


def fmt(value: float, scale: float = 1.0) -> str:
    """``value`` (``scale``: of the figure it belongs to) to 0 decimals from
    1,000, else 1."""
    return f"{value:,.0f}" if abs(scale) >= 1000 else f"{value:,.1f}"


def versus(ours: Cell, other: Cell) -> str:
    """``diff (pct)`` beyond the band, ``~ (diff ±band)`` inside it."""
    verdict = judge(other, ours)
    if verdict.diff is None or other.mean is None:
        return "-"
    scale = other.mean
    diff = fmt(verdict.diff, scale)
    if not diff.startswith("-"):
        diff = "+" + diff
    if verdict.band is None:
        return f"? {diff} (no band)"
    if not verdict.effect:
        return f"~ ({diff} ±{fmt(verdict.band, scale)})"
    if not other.mean:
        return diff
    return f"{diff} ({100 * verdict.diff / other.mean:+.0f} %)"


class InputError(ValueError):
    """The JSON file cannot be read as a replay's ``--json`` output: one
    line naming the file, what is wrong and what to do."""


#: What to do about a file that is not a replay's comparison.
FIX = "give the file scripts/replay --json OUT.json wrote"


def load(path: Path) -> dict:
    """``path`` read as a replay's ``--json`` output (``summary.py``'s
    payload): a ``comparison.metrics`` object holding every metric of
    :data:`METRICS`, each ``{mode: {"values": [...]}}``.

    Raises:
        InputError: the file cannot be read, is not JSON, or lacks that
            comparison (one line naming the file and the fix).
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(
            f"{path}: cannot be read ({exc.strerror or exc}): {FIX}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc}): {FIX}") from None
    metrics = data.get("comparison") if isinstance(data, dict) else None
    metrics = metrics.get("metrics") if isinstance(metrics, dict) else None
    if not isinstance(metrics, dict):
        raise InputError(f"{path}: no comparison.metrics object: {FIX}")
    for name in METRICS:
        by_mode = metrics.get(name)
        if (
            not isinstance(by_mode, dict)
            or not by_mode
            or not all(
                isinstance(cell, dict) and isinstance(cell.get("values"), list)
                for cell in by_mode.values()
            )
        ):
            raise InputError(
                f"{path}: comparison.metrics has no {name!r} values per mode "
                f"(an interrupted run measures nothing): {FIX}"
            )
    return data


def table(data: dict, ours: str, against: list[str]) -> str:
    metrics = data["comparison"]["metrics"]
    modes = list(metrics[METRICS[0]])
    for name in (ours, *against):
        if name not in modes:
            raise SystemExit(f"--ours/--against: no mode {name!r} in the run ({modes})")
    aa = [m for m in modes if m.endswith("'")]
    pairs = [(ours, a) for a in against] + [(m, m.rstrip("'")) for m in aa]
    head = ["metric", *modes, *(f"{a} vs {b}" for a, b in pairs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric in METRICS:
        # Shares (steps frozen) are printed in percent.
        k = 100.0 if metric == "steps frozen" else 1.0
        cells = {
            m: Cell(tuple(k * v for v in metrics[metric][m]["values"])) for m in modes
        }
        row = [metric + (" (%)" if k != 1.0 else "")]
        for m in modes:
            c = cells[m]
            mean = c.mean or 0.0
            half = "" if c.half_range is None else f" ±{fmt(c.half_range, mean)}"
            row.append(fmt(mean, mean) + half)
        row += [versus(cells[a], cells[b]) for a, b in pairs]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", type=Path, help="a replay's --json output")
    parser.add_argument("--ours", required=True, help="our mode, as labelled")
    parser.add_argument("--against", required=True, help="comma-separated modes")
    args = parser.parse_args(argv)
    try:
        data = load(args.json)
    except InputError as exc:
        print(f"real_vs_peers.py: {exc}", file=sys.stderr)
        return 2
    print(table(data, args.ours, [m for m in args.against.split(",") if m]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
