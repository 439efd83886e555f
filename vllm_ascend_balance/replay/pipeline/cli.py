# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance replay``: workload -> engine -> records -> metrics
-> comparison -> report.

Every mode runs ``--repeat`` times in alternating order (ABBA...: mode order
reversed on every other repetition, so neither mode always runs first or
last), each run on a deployment warmed up before measuring.

Exit status: 0 when every run completed every request, 1 when a run was
interrupted (Ctrl-C or SIGTERM: the same) or failed (the table then shows
what was measured, the cause is printed in full) or an output could not be
written, 2 for bad input or options (one line on stderr, no traceback,
before any engine starts).
Results go to stdout; progress (a line as each run starts and ends, and at
least one a minute while it runs, terminal or not), notes and vLLM's logs (unless
``VLLM_LOGGING_STREAM`` or ``VLLM_LOGGING_CONFIG_PATH`` is set) to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from vllm_ascend_balance.ipc_sockets import own_ipc_dir
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline import options as replay_options
from vllm_ascend_balance.replay.pipeline.engine import (
    RecordingError,
    ReplayEngine,
    load_engine,
)
from vllm_ascend_balance.replay.pipeline.environment import (
    crowded_cores,
    interrupt_cause,
    sigterm_as_ctrl_c,
    vllm_logs_to_stderr,
    work_dir,
)
from vllm_ascend_balance.replay.pipeline.modes import Mode
from vllm_ascend_balance.replay.pipeline.options import ReplayOptions, pacing
from vllm_ascend_balance.replay.pipeline.paths import check_outputs
from vllm_ascend_balance.replay.pipeline.progress import announced
from vllm_ascend_balance.replay.pipeline.records import RunRecords, RunStatus
from vllm_ascend_balance.replay.pipeline.workload_types import Workload

logger = init_logger(__name__)

add_arguments = replay_options.add_arguments


def run_order(modes: list[Mode], repeat: int) -> list[tuple[Mode, int]]:
    """``(mode, repetition)`` in run order: ABBA... (ABC CBA ABC ...)."""
    order: list[tuple[Mode, int]] = []
    for i in range(repeat):
        order += [(m, i) for m in (modes if i % 2 == 0 else modes[::-1])]
    return order


def _error(message: str) -> None:
    print(f"vllm-ascend-balance replay: error: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        options = replay_options.from_namespace(args)
        check_outputs(options)
        workload = options.load_workload()
    except ValueError as exc:  # WorkloadError, ModeError, OutputPathError
        _error(str(exc))
        return 2
    crowded = crowded_cores(options.dp, options.engine)
    if crowded:
        print(crowded, file=sys.stderr)
    if options.run_dir and options.engine == "sim":
        # Its records stay in memory: an empty DIR would look like a failure.
        print(
            f"replay: --run-dir {options.run_dir}: --engine sim writes nothing "
            "there (its results are the report and --json)",
            file=sys.stderr,
        )
    own_ipc_dir()
    try:
        with sigterm_as_ctrl_c(), work_dir(options.run_dir) as work:
            return _run(dataclasses.replace(options, run_dir=work), workload)
    except KeyboardInterrupt as exc:  # before the first run, or while reporting
        print(f"replay: interrupted by {interrupt_cause(exc)}", file=sys.stderr)
        return 1


def _run_in_order(
    engine: ReplayEngine,
    workload: Workload,
    options: ReplayOptions,
    order: list[tuple[Mode, int]],
) -> list[RunRecords] | None:
    """The runs of ``order`` until one does not end OK; None when a
    recording failed (said on stderr). A Ctrl-C or SIGTERM outside the
    engine (announcing a run, between runs) stops the replay as one inside
    it does: the run under way, or the next, reads interrupted, and every
    finished one is kept."""
    runs: list[RunRecords] = []
    try:
        for k, (mode, i) in enumerate(order, 1):
            # What the run reads as if the signal lands before the engine returns.
            runs.append(RunRecords(mode, i, options.dp, RunStatus.INTERRUPTED))
            what = f"run {k}/{len(order)}: mode {mode.label} (repetition {i + 1})"
            with announced(what) as progress:
                try:
                    runs[-1] = engine.run(workload, mode, options, i)
                except RecordingError as exc:
                    progress["status"] = "recording failed"
                    _error(f"{mode.label} run {i + 1}: {exc}")
                    return None
                except KeyboardInterrupt as exc:
                    runs[-1].cause = interrupt_cause(exc)
                if runs[-1].status is not RunStatus.OK:
                    progress["status"] = runs[-1].status.value
            if runs[-1].status is not RunStatus.OK:
                break  # interrupted or failed: report what we have
    except KeyboardInterrupt as exc:
        cause = interrupt_cause(exc)
        if runs and runs[-1].status is not RunStatus.OK:
            runs[-1].cause = runs[-1].cause or cause
        elif len(runs) < len(order):  # between runs: the next one never began
            mode, i = order[len(runs)]
            runs.append(RunRecords(mode, i, options.dp, RunStatus.INTERRUPTED, cause))
        else:  # after the last run: nothing is lost
            print(f"replay: interrupted by {cause}", file=sys.stderr)
    return runs


def _run(options: ReplayOptions, workload: Workload) -> int:
    from vllm_ascend_balance.replay.pipeline.summary import print_results

    summary = workload.summary()
    shared = " (peers too)" if options.peer_router == "shared" else ""
    if options.peer_timing == "gate" or options.engine != "sim":
        shared += ", peers decide on the previous step"
    if (options.sglang_passes, options.sglang_defer) != ("mixed", "throttle"):
        shared += f", SGLang {options.sglang_passes} + {options.sglang_defer}"
    print(
        f"replay: {summary['requests']} requests from {summary['source']} over "
        f"{summary['span_s']:g} modeled s; DP {options.dp}, cap "
        f"{options.max_num_seqs}/rank, routing {options.routing}{shared}, modes "
        f"{options.mode} x {options.repeat}, {pacing(options)}",
        file=sys.stderr,
    )
    if workload.clipped:
        print(f"replay: --clip adjusted {workload.clipped} request(s)", file=sys.stderr)
    engine = load_engine(options.engine)
    started = time.monotonic()
    order = run_order(options.modes(), options.repeat)
    with vllm_logs_to_stderr():
        runs = _run_in_order(engine, workload, options, order)
    if runs is None:
        return 1
    payload: dict[str, Any] = {
        "workload": summary,
        "options": dataclasses.asdict(options),
        "wall_s": round(time.monotonic() - started, 1),
        "attribution": workload.attribution,
    }
    ok = print_results(options, workload, runs, payload)
    complete = len(runs) == options.repeat * len(options.modes()) and all(
        r.status is RunStatus.OK and all(q.done for q in r.requests) for r in runs
    )
    return 0 if ok and complete else 1
