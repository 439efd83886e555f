# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance replay``: one workload, balance off vs on, on a real
vLLM DP deployment on CPU with a cost-model executor (no weights).

Exit status: 0 when every mode completed every request, 1 when a mode was
interrupted or failed (the table then shows what was measured), 2 for bad
input or options (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm.logger import init_logger

from vllm_ascend_balance.replay.costmodel import CostModel
from vllm_ascend_balance.replay.runner import EXECUTOR, ROUTINGS, ModeRun, RunOptions
from vllm_ascend_balance.replay.workload import Workload, WorkloadError, load_workload

logger = init_logger(__name__)

_DEFAULT_COST = CostModel()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    g = parser.add_argument_group("input")
    g.add_argument(
        "--trace",
        metavar="FILE",
        help="Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,"
        "GeneratedTokens) or JSONL ({arrival_s, prompt_tokens, "
        "output_tokens[, rank]} per line); default: built-in bursty mix",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the built-in workload")
    g.add_argument(
        "--start",
        type=float,
        default=0.0,
        metavar="S",
        help="skip requests arriving before S seconds into the trace",
    )
    g.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="only requests arriving within S seconds after --start",
    )
    g.add_argument(
        "--limit", type=int, default=None, metavar="N", help="at most N requests"
    )
    g.add_argument(
        "--rate-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="divide inter-arrival times by X (2 = twice the rate)",
    )
    g.add_argument(
        "--clip",
        action="store_true",
        help="shorten requests longer than --max-model-len instead of "
        "rejecting the input",
    )
    g.add_argument(
        "--routing",
        choices=ROUTINGS,
        default="vllm",
        help="vllm: vLLM's DP load balancer picks the rank; round-robin: "
        "request i goes to rank i %% N (JSONL 'rank' always pins)",
    )
    d = parser.add_argument_group("deployment")
    d.add_argument("--dp", type=int, default=2, help="data-parallel size")
    d.add_argument(
        "--mode",
        choices=("off", "on", "both"),
        default="both",
        help="balance scheduling off, on, or both on the same input",
    )
    d.add_argument(
        "--max-num-seqs",
        type=int,
        default=16,
        help="per-rank running cap (the balance gate's cap)",
    )
    d.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="per-rank token budget per step (chunked prefill)",
    )
    d.add_argument("--max-model-len", type=int, default=16384)
    c = parser.add_argument_group("cost model (modeled milliseconds per forward pass)")
    c.add_argument(
        "--step-ms",
        type=float,
        default=_DEFAULT_COST.step_ms,
        help="fixed cost of any forward pass, dummy batches included",
    )
    c.add_argument(
        "--prefill-token-ms",
        type=float,
        default=_DEFAULT_COST.prefill_token_ms,
        help="per prefill token",
    )
    c.add_argument(
        "--decode-req-ms",
        type=float,
        default=_DEFAULT_COST.decode_req_ms,
        help="per decoding request",
    )
    c.add_argument(
        "--decode-kv-ms-per-1k",
        type=float,
        default=_DEFAULT_COST.decode_kv_ms_per_1k,
        help="per 1000 context tokens read by decoding requests",
    )
    c.add_argument(
        "--time-scale",
        type=float,
        default=0.5,
        help="wall seconds per modeled second (smaller = faster run, "
        "until loop overhead exceeds the step budgets: see 'pacing "
        "overrun')",
    )
    o = parser.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", help="write all metrics to FILE")
    o.add_argument(
        "--plot",
        metavar="FILE.png",
        help="plot per-rank running counts over time for each mode",
    )
    o.add_argument(
        "--run-dir",
        metavar="DIR",
        help="keep the model dir and per-rank records in DIR "
        "(default: a temporary directory, removed)",
    )
    o.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="vLLM log level (front-end and engines)",
    )
    # Tests substitute executor variants (e.g. the deadlock negative control).
    parser.add_argument("--executor", default=EXECUTOR, help=argparse.SUPPRESS)


def _options(args: argparse.Namespace, work_dir: str) -> RunOptions:
    if args.dp < 1:
        raise WorkloadError(f"--dp must be >= 1, got {args.dp}")
    if args.time_scale <= 0:
        raise WorkloadError(f"--time-scale must be > 0, got {args.time_scale}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if getattr(args, name) < 1:
            raise WorkloadError(f"--{name.replace('_', '-')} must be >= 1")
    try:
        cost = CostModel(
            step_ms=args.step_ms,
            prefill_token_ms=args.prefill_token_ms,
            decode_req_ms=args.decode_req_ms,
            decode_kv_ms_per_1k=args.decode_kv_ms_per_1k,
        )
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None
    return RunOptions(
        dp_size=args.dp,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        time_scale=args.time_scale,
        cost=cost,
        routing=args.routing,
        work_dir=work_dir,
        executor=args.executor,
        log_level=args.log_level,
    )


async def _run_modes(
    modes: list[bool], workload: Workload, opts: RunOptions
) -> list[ModeRun]:
    from tqdm import tqdm

    from vllm_ascend_balance.replay.runner import run_mode

    runs: list[ModeRun] = []
    # Ctrl-C in a terminal reaches the engine processes too (same process
    # group), so the front-end may see them die before it sees its own
    # SIGINT; remember the signal to report "interrupted", not "failed".
    interrupted = False
    main_task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        if main_task is not None:
            main_task.cancel()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    for balance in modes:
        with tqdm(
            total=len(workload.requests),
            desc=f"balance {'on' if balance else 'off'}",
            unit="req",
            disable=None,  # no bar when stderr is not a terminal
            file=sys.stderr,
        ) as bar:
            run = await run_mode(balance, workload.requests, opts, bar)
        if interrupted:
            run.status = "interrupted"
        runs.append(run)
        if run.status != "ok":
            break  # interrupted or failed: report what we have
    return runs


def run(args: argparse.Namespace) -> int:
    from vllm_ascend_balance.replay import report

    keep = args.run_dir is not None
    work_dir = args.run_dir or tempfile.mkdtemp(prefix="vab-replay-")
    try:
        opts = _options(args, work_dir)
        workload = load_workload(
            args.trace,
            seed=args.seed,
            start_s=args.start,
            duration_s=args.duration,
            limit=args.limit,
            rate_scale=args.rate_scale,
            max_model_len=args.max_model_len,
            dp_size=args.dp,
            clip=args.clip,
        )
    except WorkloadError as exc:
        print(f"vllm-ascend-balance replay: error: {exc}", file=sys.stderr)
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        return 2

    summary = workload.summary()
    print(
        f"replay: {summary['requests']} requests from {summary['source']} over "
        f"{summary['span_s']:g} modeled s; DP {opts.dp_size}, cap "
        f"{opts.max_num_seqs}/rank, routing {opts.routing}, time scale "
        f"{opts.time_scale:g}",
        file=sys.stderr,
    )
    if workload.clipped:
        print(
            f"replay: --clip shortened {workload.clipped} request(s)", file=sys.stderr
        )

    modes = {"off": [False], "on": [True], "both": [False, True]}[args.mode]
    started = time.monotonic()
    runs: list[ModeRun] = []
    try:
        runs = asyncio.run(_run_modes(modes, workload, opts))
    except KeyboardInterrupt:
        # A second Ctrl-C during shutdown: engines were already told to stop;
        # report whatever was recorded.
        print("replay: interrupted", file=sys.stderr)
    metrics = [report.mode_metrics(r, opts.dp_size, opts.time_scale) for r in runs]
    payload: dict[str, Any] = {
        "workload": summary,
        "options": {
            k: (v.__dict__ if hasattr(v, "__dict__") else v)
            for k, v in opts.__dict__.items()
        },
        "wall_s": round(time.monotonic() - started, 1),
        "modes": metrics,
        "attribution": workload.attribution,
    }
    if metrics:
        print(report.format_table(metrics))
        for line in report.status_lines(metrics):
            print(line)
    if workload.attribution:
        print(workload.attribution)
    if args.json:
        report.write_json(Path(args.json), payload)
    if args.plot and metrics:
        report.plot_running(Path(args.plot), metrics, opts.max_num_seqs)
    for m in metrics:
        if m["mode"] == "on" and m["steps"] and not any(m["gathers_per_rank"]):
            print(
                "replay: warning: balance was requested but no rank gathered: "
                "is the vllm-ascend-balance entry point installed in this "
                "environment? (vllm-ascend-balance doctor)",
                file=sys.stderr,
            )
    if not keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    ok = len(runs) == len(modes) and all(
        r.status == "ok" and all(x.done for x in r.results) for r in runs
    )
    return 0 if ok else 1
