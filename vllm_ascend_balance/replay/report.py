# SPDX-License-Identifier: Apache-2.0
"""Metrics of a replay mode, the side-by-side table, JSON and plot.

Every time below is modeled: wall seconds divided by ``time_scale``. Request
times come from the front-end (arrival = scheduled send time); per-step and
per-rank numbers come from the engine processes' records
(:mod:`.recorder`), joined by step index (the lock step makes step ``k`` the
same forward pass on every rank).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.recorder import read_records
from vllm_ascend_balance.replay.runner import ModeRun

logger = init_logger(__name__)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated ``q``-th percentile (0-100); None when empty."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass
class RankTimeline:
    """Per-step per-rank series (steps joined across ranks).

    Attributes:
        t: modeled seconds at each step's end, shape ``(steps,)``.
        running: ``running[r][k]`` = rank r's ``len(running)`` at step k.
        frozen: rank 0's gate decision per step.
        mixed: whether the step's slowest rank mixed prefill and decode.
        step_ms: modeled step time per step.
        over_s: wall seconds each step overran its pacing budget (max over ranks).
    """

    t: list[float]
    running: list[list[int]]
    frozen: list[bool]
    mixed: list[bool]
    step_ms: list[float]
    over_s: list[float]


def timeline(
    records: dict[int, list[dict[str, Any]]], t0: float, scale: float
) -> RankTimeline:
    steps = {r: [x for x in recs if x["k"] == "step"] for r, recs in records.items()}
    n = min((len(s) for s in steps.values()), default=0)
    ranks = sorted(steps)
    first = steps[ranks[0]][:n] if ranks else []
    return RankTimeline(
        t=[(x["t1"] - t0) / scale for x in first],
        running=[[x["run"] for x in steps[r][:n]] for r in ranks],
        frozen=[bool(x["frozen"]) for x in first],
        mixed=[bool(x["mixed"]) for x in first],
        step_ms=[float(x["step_ms"]) for x in first],
        over_s=[max(steps[r][k]["over"] for r in ranks) for k in range(n)],
    )


def gathers_per_rank(records: dict[int, list[dict[str, Any]]]) -> list[int]:
    """Each rank's balance gathers: its ``final`` record, else the last
    gather record (a rank killed before shutdown)."""
    out = []
    for rank in sorted(records):
        recs = records[rank]
        final = [x for x in recs if x["k"] == "final"]
        if final:
            out.append(int(final[-1]["gathers"]))
        else:
            gathers = [x["n"] for x in recs if x["k"] == "gather"]
            out.append(max(gathers, default=0))
    return out


def mode_metrics(run: ModeRun, dp_size: int, time_scale: float) -> dict[str, Any]:
    """All numbers of one mode (JSON-able)."""
    records = read_records(run.run_dir, dp_size)
    tl = timeline(records, run.t0, time_scale)
    done = [r for r in run.results if r.done]
    ttft = [(r.first - r.sent) / time_scale * 1e3 for r in done if r.first is not None]
    tpot = [
        (r.finish - r.first) / time_scale * 1e3 / (r.output_tokens - 1)
        for r in done
        if r.first is not None and r.finish is not None and r.output_tokens > 1
    ]
    finish = [r.finish for r in done if r.finish is not None]
    makespan = (max(finish) - run.t0) / time_scale if finish else 0.0
    out_tokens = sum(r.output_tokens for r in done)
    steps = len(tl.t)
    spreads, ratios, all_running = [], [], []
    for k in range(steps):
        col = [tl.running[r][k] for r in range(len(tl.running))]
        all_running.extend(col)
        spreads.append(max(col) - min(col))
        if max(col) > 0:
            ratios.append(sum(col) / len(col) / max(col))
    gathers = gathers_per_rank(records)
    starts = [x for recs in records.values() for x in recs if x["k"] == "start"]
    budget_s = sum(tl.step_ms) / 1e3 * time_scale

    def mean(xs: list[float] | list[int]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return {
        "mode": run.mode,
        "status": run.status,
        "startup_s": round(run.startup_s, 2),
        "requests": len(run.results),
        "completed": len(done),
        "output_tokens": out_tokens,
        "makespan_s": makespan,
        "output_tokens_per_s": out_tokens / makespan if makespan else None,
        "requests_per_s": len(done) / makespan if makespan else None,
        "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99)},
        "tpot_ms": {"p50": percentile(tpot, 50), "p99": percentile(tpot, 99)},
        "steps": steps,
        "step_ms_mean": mean(tl.step_ms),
        "running": {
            "mean": mean(all_running),
            "max": max(all_running, default=None),
            "spread_mean": mean(spreads),
            "spread_max": max(spreads, default=None),
            "balance_ratio_mean": mean(ratios),
            "per_rank_mean": [mean(series) for series in tl.running],
        },
        "frozen_step_share": mean([float(f) for f in tl.frozen]),
        "mixed_slowest_step_share": mean([float(m) for m in tl.mixed]),
        "gathers_per_rank": gathers,
        "gathers_equal": len(set(gathers)) <= 1,
        "gathers_per_step": gathers[0] / steps if steps and gathers else 0.0,
        "cap": starts[0]["cap"] if starts else None,
        "scheduler_classes": sorted({x["scheduler"] for x in starts}),
        "pacing_overrun_share": sum(tl.over_s) / budget_s if budget_s else None,
        "timeline": {
            "t_s": [round(t, 4) for t in tl.t],
            "running": tl.running,
            "frozen": tl.frozen,
        },
        "requests_detail": [
            {
                "index": r.index,
                "rank": r.rank,
                "arrival_s": (r.sent - run.t0) / time_scale,
                "ttft_ms": (r.first - r.sent) / time_scale * 1e3 if r.first else None,
                "e2e_ms": (r.finish - r.sent) / time_scale * 1e3 if r.finish else None,
                "output_tokens": r.output_tokens,
                "expected_tokens": r.expected_tokens,
                "error": r.error,
            }
            for r in run.results
        ],
    }


# ------------------------------------------------------------------ table
def _fmt(value: Any, digits: int = 1, pct: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if pct:
        return f"{100 * value:.{digits}f}%"
    if isinstance(value, int):
        return str(value)
    return f"{value:,.{digits}f}"


TABLE_ROWS: list[tuple[str, Any]] = [
    ("completed requests", lambda m: f"{m['completed']}/{m['requests']}"),
    ("output tokens/s", lambda m: _fmt(m["output_tokens_per_s"])),
    ("requests/s", lambda m: _fmt(m["requests_per_s"], 2)),
    ("TTFT p50 (ms)", lambda m: _fmt(m["ttft_ms"]["p50"], 0)),
    ("TTFT p99 (ms)", lambda m: _fmt(m["ttft_ms"]["p99"], 0)),
    ("TPOT p50 (ms)", lambda m: _fmt(m["tpot_ms"]["p50"], 1)),
    ("TPOT p99 (ms)", lambda m: _fmt(m["tpot_ms"]["p99"], 1)),
    ("running/rank mean", lambda m: _fmt(m["running"]["mean"], 2)),
    ("running/rank max", lambda m: _fmt(m["running"]["max"])),
    ("running spread mean (max-min)", lambda m: _fmt(m["running"]["spread_mean"], 2)),
    ("running spread max", lambda m: _fmt(m["running"]["spread_max"])),
    ("balance ratio mean/max", lambda m: _fmt(m["running"]["balance_ratio_mean"], 3)),
    ("steps frozen", lambda m: _fmt(m["frozen_step_share"], 1, pct=True)),
    (
        "steps slowest rank mixed P+D",
        lambda m: _fmt(m["mixed_slowest_step_share"], 1, pct=True),
    ),
    ("balance gathers/step", lambda m: _fmt(m["gathers_per_step"], 2)),
    (
        "gathers per rank",
        lambda m: ",".join(str(g) for g in m["gathers_per_rank"]) or "-",
    ),
    ("steps", lambda m: _fmt(m["steps"])),
    ("mean step (ms)", lambda m: _fmt(m["step_ms_mean"], 1)),
    ("makespan (s)", lambda m: _fmt(m["makespan_s"], 1)),
    ("pacing overrun", lambda m: _fmt(m["pacing_overrun_share"], 1, pct=True)),
]


def measured(m: dict[str, Any]) -> bool:
    """Whether a mode measured anything (a mode whose deployment never came
    up, or that stopped before its first step, did not)."""
    return bool(m["steps"] or m["completed"])


def measured_modes(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in metrics if measured(m)]


def results_header(summary: dict[str, Any], opts: Any) -> str:
    """The line that opens the results on stdout."""
    return (
        f"=== replay results: {summary['requests']} requests, {summary['source']}, "
        f"DP {opts.dp_size}, cap {opts.max_num_seqs}/rank, time scale "
        f"{opts.time_scale:g} ==="
    )


def format_table(metrics: list[dict[str, Any]]) -> str:
    """Side-by-side text table, one column per mode that measured something
    (:func:`measured`); empty when none did."""
    metrics = measured_modes(metrics)
    if not metrics:
        return ""
    heads = [f"balance {m['mode']}" for m in metrics]
    rows = [(label, [fn(m) for m in metrics]) for label, fn in TABLE_ROWS]
    # The cause of a failure can be long: the table shows its kind, the
    # caller prints the whole line (see :func:`status_lines`).
    statuses = [m["status"].split(":")[0] for m in metrics]
    if any(s != "ok" for s in statuses):
        rows.insert(0, ("status", statuses))
    w0 = max(len(label) for label, _ in rows)
    widths = [
        max(len(h), *(len(vals[i]) for _, vals in rows)) for i, h in enumerate(heads)
    ]
    lines = [
        "  ".join(
            [" " * w0, *(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
        ),
        "  ".join(["-" * w0, *("-" * w for w in widths)]),
    ]
    for label, vals in rows:
        lines.append(
            "  ".join(
                [
                    label.ljust(w0),
                    *(v.rjust(w) for v, w in zip(vals, widths, strict=True)),
                ]
            )
        )
    return "\n".join(lines)


def status_lines(metrics: list[dict[str, Any]]) -> list[str]:
    """One line per mode that did not finish normally, with its whole cause
    (and whether it measured anything: such a mode has no table column)."""
    return [
        f"balance {m['mode']}: {m['status']}"
        + ("" if measured(m) else " (nothing measured)")
        for m in metrics
        if m["status"] != "ok"
    ]


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=1, default=str))


def plot_running(path: Path, metrics: list[dict[str, Any]], cap: int) -> None:
    """Per-rank running counts over modeled time, one panel per mode (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(metrics), 1, figsize=(10, 3.2 * len(metrics)), sharex=True, squeeze=False
    )
    for ax, m in zip(axes[:, 0], metrics, strict=True):
        tl = m["timeline"]
        for rank, series in enumerate(tl["running"]):
            ax.step(tl["t_s"], series, where="post", lw=0.9, label=f"rank {rank}")
        ax.axhline(cap, color="k", ls="--", lw=0.8, label="cap")
        frozen_t = [t for t, f in zip(tl["t_s"], tl["frozen"], strict=True) if f]
        if frozen_t:
            ax.plot(
                frozen_t,
                [cap + 0.6] * len(frozen_t),
                "|",
                color="r",
                ms=4,
                label="frozen step",
            )
        ax.set_title(f"balance {m['mode']}: running requests per DP rank")
        ax.set_ylabel("len(running)")
        ax.set_ylim(0, cap + 1.5)
        ax.legend(loc="upper right", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("modeled time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
