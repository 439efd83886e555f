# SPDX-License-Identifier: Apache-2.0
"""The replay's plot for large DP sizes: a heatmap per run, plus per-rank TTFT.

With tens or hundreds of ranks, one line per rank (the small-DP plot) is
unreadable. For each run this draws ``len(running)`` as a heatmap, ranks on
the y axis and modeled time on the x axis (the steps resampled onto
:data:`COLUMNS` equal time bins: each bin shows the step in progress at its
start), with a strip above it marking the bins whose step the gate froze.
A last panel shows the distribution of per-rank TTFT: each rank's TTFT p50
and p99, sorted, one curve per run (a flat curve = every rank serves its
requests alike; a rising tail = a few ranks make their requests wait).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics
from vllm_ascend_balance.replay.pipeline.records import RunRecords

logger = init_logger(__name__)

#: Time bins of a heatmap.
COLUMNS = 600
#: From this DP size on, the replay plots heatmaps instead of one line per rank.
HEATMAP_MIN_DP = 16


def running_grid(
    records: RunRecords, columns: int = COLUMNS
) -> tuple[list[list[int]], list[bool], float]:
    """``(grid, frozen, end_s)``: ``grid[rank][c]`` = the rank's running count
    in the step in progress at the start of time bin ``c``; ``frozen[c]``
    whether that step was frozen; ``end_s`` the last step's end (modeled s).
    Bins before the first step, or in an idle gap, read 0 / not frozen."""
    steps = records.steps
    n = records.dp_size
    if not steps:
        return [[0] * columns for _ in range(n)], [False] * columns, 0.0
    end_s = steps[-1].end_s
    starts = [s.start_s for s in steps]
    grid = [[0] * columns for _ in range(n)]
    frozen = [False] * columns
    for c in range(columns):
        t = end_s * c / columns
        k = bisect.bisect_right(starts, t) - 1
        if k < 0 or t >= steps[k].end_s:
            continue
        step = steps[k]
        frozen[c] = step.frozen
        for r, rank in enumerate(step.ranks):
            grid[r][c] = rank.running
    return grid, frozen, end_s


def plot_heatmaps(
    path: Path,
    runs: Sequence[tuple[str, RunRecords, RunMetrics]],
    cap: int,
) -> None:
    """Write the PNG: one heatmap per ``(label, records, metrics)`` run, then
    the per-rank TTFT distribution of all runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(runs) + 1,
        1,
        figsize=(11, 3.4 * len(runs) + 3.2),
        squeeze=False,
        layout="constrained",
    )
    grids = [running_grid(records) for _, records, _ in runs]
    # One time axis for every run, so the runs line up.
    end_all = max((g[2] for g in grids), default=0.0) or 1.0
    image = None
    for ax, (label, records, _), (grid, frozen, end_s) in zip(
        axes[:-1, 0], runs, grids, strict=True
    ):
        n = records.dp_size
        image = ax.imshow(
            grid,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            extent=(0.0, end_s or end_all, -0.5, n - 0.5),
            vmin=0,
            vmax=cap,
            cmap="viridis",
        )
        marks = [end_s * (c + 0.5) / len(frozen) for c, f in enumerate(frozen) if f]
        if marks:
            ax.plot(
                marks,
                [n - 0.5 + n * 0.02] * len(marks),
                "|",
                color="r",
                ms=5,
                clip_on=False,
                label="frozen step",
            )
            ax.legend(loc="upper right", fontsize=7, bbox_to_anchor=(1.0, 1.14))
        ax.set_title(
            f"balance {label}: len(running) per DP rank (DP {n}, cap {cap})",
            loc="left",
        )
        ax.set_xlim(0.0, end_all)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("DP rank")
        ax.set_xlabel("modeled time (s)")
    if image is not None:
        fig.colorbar(image, ax=list(axes[:-1, 0]), label="len(running)")
    ax = axes[-1, 0]
    for label, _, metrics in runs:
        p50 = sorted(x.ttft_p50_ms for x in metrics.per_rank if x.ttft_p50_ms)
        p99 = sorted(x.ttft_p99_ms for x in metrics.per_rank if x.ttft_p99_ms)
        line = ax.plot(
            [i / max(1, len(p50) - 1) for i in range(len(p50))],
            p50,
            label=f"balance {label}: TTFT p50 per rank",
        )[0]
        ax.plot(
            [i / max(1, len(p99) - 1) for i in range(len(p99))],
            p99,
            ls="--",
            color=line.get_color(),
            label=f"balance {label}: TTFT p99 per rank",
        )
    ax.set_yscale("log")
    ax.set_xlabel("share of ranks (sorted by TTFT)")
    ax.set_ylabel("TTFT (ms, modeled)")
    ax.set_title("per-rank TTFT distribution", loc="left")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    plt.close(fig)
