# SPDX-License-Identifier: Apache-2.0
"""The replay's output: the comparison table, starvation and status lines,
the JSON file and the plot. Reads only records, metrics and the comparison.

Table cells are ``mean ±half the range`` of a mode's runs (its A/A noise);
the verdict columns judge each mode against the baseline (:mod:`.compare`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.compare import (
    Cell,
    Comparison,
    MetricSpec,
    Verdict,
)
from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus

logger = init_logger(__name__)


def _num(value: float, spec: MetricSpec) -> str:
    if spec.share:
        return f"{100 * value:.{spec.digits}f}%"
    return f"{value:,.{spec.digits}f}"


def format_cell(c: Cell, spec: MetricSpec) -> str:
    if c.mean is None:
        return "-"
    if c.half_range is None:
        return _num(c.mean, spec)
    return f"{_num(c.mean, spec)} ±{_num(c.half_range, spec)}"


def format_verdict(v: Verdict, base: Cell, spec: MetricSpec) -> str:
    if v.diff is None:
        return "-"
    if v.effect is None:
        return f"? {_signed(v.diff, spec)} (no band)"
    if not v.effect:
        return f"~ no effect ({_signed(v.diff, spec)} ±{_num(v.band or 0.0, spec)})"
    text = _signed(v.diff, spec)
    if not spec.share and base.mean:
        text += f" ({100 * v.diff / base.mean:+.0f}%)"
    return text


def _signed(diff: float, spec: MetricSpec) -> str:
    text = _num(diff, spec)
    return text if text.startswith("-") else "+" + text


def format_table(
    comparison: Comparison, specs: tuple[MetricSpec, ...], completed: dict[str, str]
) -> str:
    """One column per mode, one verdict column per non-baseline mode."""
    modes = comparison.modes
    base = modes[0].label
    heads = [m.label for m in modes] + [f"{m.label} vs {base}" for m in modes[1:]]
    rows: list[tuple[str, list[str]]] = [
        (
            "completed requests",
            [completed[m.label] for m in modes] + [""] * (len(modes) - 1),
        )
    ]
    for spec in specs:
        cells = comparison.cells[spec.label]
        verdicts = comparison.verdicts[spec.label]
        rows.append(
            (
                spec.label,
                [format_cell(cells[m.label], spec) for m in modes]
                + [
                    format_verdict(verdicts[m.label], cells[base], spec)
                    for m in modes[1:]
                ],
            )
        )
    w0 = max(len(label) for label, _ in rows)
    widths = [max(len(h), *(len(v[i]) for _, v in rows)) for i, h in enumerate(heads)]
    lines = [
        "  ".join(
            [" " * w0, *(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
        ),
        "  ".join(["-" * w0, *("-" * w for w in widths)]),
    ]
    for label, values in rows:
        cells_ = (v.rjust(w) for v, w in zip(values, widths, strict=True))
        lines.append("  ".join([label.ljust(w0), *cells_]))
    return "\n".join(lines)


def band_note(comparison: Comparison, repeat: int, *, deterministic: bool) -> str:
    if deterministic:
        return (
            "simulated engine: deterministic (same input and options, same "
            "numbers), so there is no run-to-run noise and every difference "
            "is the model's; --repeat reuses the first run."
        )
    if comparison.banded:
        return (
            f"±: half the range of the {repeat} runs of each mode (A/A noise; "
            "runs in ABBA order, each warmed up). vs: difference of the means "
            "± its 99% confidence half-width; '~ no effect' when inside it."
        )
    return (
        "no noise band (one run per mode): use --repeat 2 or more; '?' is not "
        "an effect."
    )


def starvation_lines(runs: dict[str, list[RunMetrics]]) -> list[str]:
    """One line per mode whose runs starved requests (worst run)."""
    lines = []
    for label, metrics in runs.items():
        worst = max(metrics, key=lambda m: m.starvation.requests, default=None)
        if worst is None or not worst.starvation.requests:
            continue
        s = worst.starvation
        lines.append(
            f"starvation ({label}): {s.requests} request(s) waited through >= "
            f"{s.threshold_steps} frozen steps, most on rank {s.rank} "
            f"({s.per_rank.get(s.rank or 0, 0)}); longest wait "
            f"{s.longest_wait_s:.1f} s (worst of {len(metrics)} run(s))"
        )
    return lines


def status_lines(runs: list[RunRecords]) -> list[str]:
    """One line per run that did not finish normally, with its whole cause
    (``interrupted by SIGTERM``, ``failed: <error>``)."""
    return [
        f"{r.mode.label} run {r.repeat + 1}: {r.status.value}"
        + (_cause(r) if r.cause else "")
        + ("" if r.measured else " (nothing measured)")
        for r in runs
        if r.status is not RunStatus.OK
    ]


def _cause(records: RunRecords) -> str:
    interrupted = records.status is RunStatus.INTERRUPTED
    return f" by {records.cause}" if interrupted else f": {records.cause}"


def run_json(records: RunRecords, metrics: RunMetrics | None) -> dict[str, Any]:
    """One run, JSON-able: status, metrics, per-request records, per-step
    running counts."""
    return {
        "mode": records.mode.label,
        "repeat": records.repeat,
        "status": records.status.value,
        "cause": records.cause,
        "scheduler_classes": sorted(
            {f"{s.scheduler_module}.{s.scheduler}" for s in records.starts}
        ),
        "wall": {
            "startup_s": round(records.wall_startup_s, 2),
            "run_s": round(records.wall_run_s, 2),
            "send_late_s": round(records.wall_send_late_s, 4),
        },
        "metrics": dataclasses.asdict(metrics) if metrics else None,
        "requests": [dataclasses.asdict(r) for r in records.requests],
        "timeline": {
            "step": [s.index for s in records.steps],
            "t_s": [round(s.end_s, 4) for s in records.steps],
            "running": [
                [s.ranks[r].running for s in records.steps]
                for r in range(records.dp_size)
            ],
            "frozen": [s.frozen for s in records.steps],
        },
    }


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=1, default=str))


def plot_running(path: Path, runs: list[RunRecords], cap: int) -> None:
    """Per-rank running counts over modeled time, one panel per run (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(runs), 1, figsize=(10, 3.2 * len(runs)), sharex=True, squeeze=False
    )
    for ax, run in zip(axes[:, 0], runs, strict=True):
        t = [s.end_s for s in run.steps]
        for rank in range(run.dp_size):
            series = [s.ranks[rank].running for s in run.steps]
            ax.step(t, series, where="post", lw=0.9, label=f"rank {rank}")
        ax.axhline(cap, color="k", ls="--", lw=0.8, label="cap")
        frozen_t = [s.end_s for s in run.steps if s.frozen]
        if frozen_t:
            ax.plot(frozen_t, [cap + 0.6] * len(frozen_t), "|", color="r", ms=4,
                    label="frozen step")  # fmt: skip
        ax.set_title(
            f"{run.mode.label} run {run.repeat + 1}: running requests per DP rank"
        )
        ax.set_ylabel("len(running)")
        ax.set_ylim(0, cap + 1.5)
        ax.legend(loc="upper right", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("modeled time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
