# SPDX-License-Identifier: Apache-2.0
"""The end of a replay: metrics of every run, the comparison, and what is
printed (stdout) and written (``--json``, ``--plot``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline import report
from vllm_ascend_balance.replay.pipeline.compare import METRICS, compare, rank_metrics
from vllm_ascend_balance.replay.pipeline.heatmap import HEATMAP_MIN_DP, plot_heatmaps
from vllm_ascend_balance.replay.pipeline.metrics import RunMetrics, run_metrics
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions, pacing
from vllm_ascend_balance.replay.pipeline.records import RunRecords
from vllm_ascend_balance.replay.pipeline.workload_types import Workload

logger = init_logger(__name__)

#: Per-rank TTFT rows are printed up to this DP size (the worst rank always).
MAX_RANK_ROWS = 8


def print_results(
    options: ReplayOptions,
    workload: Workload,
    runs: list[RunRecords],
    payload: dict[str, Any],
) -> bool:
    """Print the results and write the outputs; False if an output could not
    be written (the cause is printed)."""
    modes = options.modes()
    measured = [r for r in runs if r.measured]
    metrics = {id(r): run_metrics(r, options.starvation_steps) for r in measured}
    by_mode: dict[str, list[RunMetrics]] = {m.label: [] for m in modes}
    for r in measured:
        by_mode[r.mode.label].append(metrics[id(r)])
    specs = METRICS
    if options.dp <= MAX_RANK_ROWS:
        specs += rank_metrics(options.dp)
    comparison = compare(modes, by_mode, specs)
    sys.stderr.flush()
    print()
    print(
        f"=== replay results: {len(workload.requests)} requests, {workload.source}, "
        f"DP {options.dp}, cap {options.max_num_seqs}/rank, {pacing(options)}, "
        f"{options.repeat} run(s) per mode ==="
    )
    if measured:
        completed = {
            # Runs that completed alike print once.
            m.label: " ".join(
                sorted({f"{x.completed}/{x.requests}" for x in by_mode[m.label]})
            )
            or "-"
            for m in modes
        }
        print(report.format_table(comparison, specs, completed))
        deterministic = options.engine == "sim"
        print(report.band_note(comparison, options.repeat, deterministic=deterministic))
    else:
        print("nothing was measured (interrupted)")
    for line in report.starvation_lines(by_mode) + report.status_lines(runs):
        print(line)
    if workload.attribution:
        print(workload.attribution)
    sys.stdout.flush()
    _warn_no_gathers(measured, metrics)
    payload["runs"] = [report.run_json(r, metrics.get(id(r))) for r in runs]
    payload["comparison"] = {
        "banded": comparison.banded,
        "baseline": modes[0].label,
        "metrics": {
            label: {
                mode: {
                    "values": list(comparison.cells[label][mode].values),
                    **(
                        {
                            "diff": v.diff,
                            "band": v.band,
                            "effect": v.effect,
                        }
                        if (v := comparison.verdicts[label].get(mode))
                        else {}
                    ),
                }
                for mode in comparison.cells[label]
            }
            for label in comparison.cells
        },
    }
    return _write_outputs(options, payload, measured)


def _warn_no_gathers(runs: list[RunRecords], metrics: dict[int, RunMetrics]) -> None:
    for r in runs:
        if r.mode.balance and r.steps and not any(metrics[id(r)].gathers_per_rank):
            print(
                "replay: warning: balance was requested but no rank gathered: "
                "is the vllm-ascend-balance entry point installed in this "
                "environment? (vllm-ascend-balance doctor)",
                file=sys.stderr,
            )
            return


def _write_outputs(
    options: ReplayOptions, payload: dict[str, Any], measured: list[RunRecords]
) -> bool:
    ok = True
    if options.json:
        try:
            report.write_json(Path(options.json), payload)
        except (OSError, ValueError) as exc:
            print(f"replay: error: --json: could not write ({exc})", file=sys.stderr)
            ok = False
    if options.plot and measured:
        first = [r for r in measured if r.repeat == 0] or measured
        try:
            if options.dp >= HEATMAP_MIN_DP:  # one line per rank is unreadable
                plot_heatmaps(
                    Path(options.plot),
                    [
                        (r.mode.label, r, run_metrics(r, options.starvation_steps))
                        for r in first
                    ],
                    options.max_num_seqs,
                )
            else:
                report.plot_running(Path(options.plot), first, options.max_num_seqs)
        except (OSError, ValueError) as exc:
            print(f"replay: error: --plot: could not write ({exc})", file=sys.stderr)
            ok = False
    return ok
