# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance replay``: one workload, balance off vs on, on a real
vLLM DP deployment on CPU with a cost-model executor (no weights).

Exit status: 0 when every mode completed every request, 1 when a mode was
interrupted or failed (the table then shows what was measured, the cause is
printed in full) or an output could not be written after the run, 2 for bad
input or options (one line on stderr, no traceback, before any engine
starts). Results go to stdout; progress, notes and vLLM's logs (unless
``VLLM_LOGGING_STREAM`` or ``VLLM_LOGGING_CONFIG_PATH`` is set) to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.costmodel import CostModel
from vllm_ascend_balance.replay.runner import (
    EXECUTOR,
    ROUTINGS,
    Interrupts,
    ModeRun,
    RunOptions,
)
from vllm_ascend_balance.replay.workload import Workload, WorkloadError, load_workload

logger = init_logger(__name__)

_DEFAULT_COST = CostModel()

DESCRIPTION = (
    "Replay one workload with balance scheduling off and on, on a real vLLM "
    "data-parallel deployment on CPU whose executor models step time (no "
    "weights, no accelerator), and compare throughput, latency and per-rank "
    "load. Exit status: 0 all requests completed, 1 a mode was interrupted "
    "or failed, 2 bad input or options."
)

#: Float options that must be finite: (dest, CLI spelling, lower bound,
#: bound included).
_FLOAT_OPTIONS = (
    ("start", "--start", 0.0, True),
    ("duration", "--duration", 0.0, False),
    ("rate_scale", "--rate-scale", 0.0, False),
    ("time_scale", "--time-scale", 0.0, False),
    ("step_ms", "--step-ms", 0.0, True),
    ("prefill_token_ms", "--prefill-token-ms", 0.0, True),
    ("decode_req_ms", "--decode-req-ms", 0.0, True),
    ("decode_kv_ms_per_1k", "--decode-kv-ms-per-1k", 0.0, True),
)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except unset (None) and off (False) ones."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action) or ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = _HelpFormatter
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
        help="shorten requests longer than --max-model-len and raise zero "
        "token counts to 1, instead of rejecting the input",
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
        metavar="N",
        help="per-rank running cap (the balance gate's cap)",
    )
    d.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        metavar="N",
        help="per-rank token budget per step (chunked prefill)",
    )
    d.add_argument(
        "--max-model-len",
        type=int,
        default=16384,
        metavar="N",
        help="model length: prompt + output tokens of any request",
    )
    c = parser.add_argument_group("cost model (modeled milliseconds per forward pass)")
    c.add_argument(
        "--step-ms",
        type=float,
        default=_DEFAULT_COST.step_ms,
        metavar="MS",
        help="fixed cost of any forward pass, dummy batches included",
    )
    c.add_argument(
        "--prefill-token-ms",
        type=float,
        default=_DEFAULT_COST.prefill_token_ms,
        metavar="MS",
        help="per prefill token",
    )
    c.add_argument(
        "--decode-req-ms",
        type=float,
        default=_DEFAULT_COST.decode_req_ms,
        metavar="MS",
        help="per decoding request",
    )
    c.add_argument(
        "--decode-kv-ms-per-1k",
        type=float,
        default=_DEFAULT_COST.decode_kv_ms_per_1k,
        metavar="MS",
        help="per 1000 context tokens read by decoding requests",
    )
    c.add_argument(
        "--time-scale",
        type=float,
        default=0.5,
        metavar="X",
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
        help="vLLM log level (front-end and engines; vLLM logs go to stderr)",
    )
    # Tests substitute executor variants (e.g. the deadlock negative control).
    parser.add_argument("--executor", default=EXECUTOR, help=argparse.SUPPRESS)


def _check_numbers(args: argparse.Namespace) -> None:
    """Integer bounds, and finite float options (no ``nan``/``inf``)."""
    if args.dp < 1:
        raise WorkloadError(f"--dp must be >= 1, got {args.dp}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        value = getattr(args, name)
        if value < 1:
            raise WorkloadError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.limit is not None and args.limit < 1:
        raise WorkloadError(f"--limit must be >= 1, got {args.limit}")
    for dest, option, low, inclusive in _FLOAT_OPTIONS:
        value = getattr(args, dest)
        if value is None:
            continue
        ok = math.isfinite(value) and (value >= low if inclusive else value > low)
        if not ok:
            bound = f">= {low:g}" if inclusive else f"> {low:g}"
            raise WorkloadError(
                f"{option} must be a finite number {bound}, got {value}"
            )


def _check_output_file(option: str, value: str, suffixes: set[str] | None) -> None:
    path = Path(value)
    if path.is_dir():
        raise WorkloadError(f"{option} {value}: is a directory")
    parent = path.parent
    if not parent.is_dir():
        raise WorkloadError(f"{option} {value}: directory {parent} does not exist")
    if suffixes is not None and path.suffix.lstrip(".").lower() not in suffixes:
        raise WorkloadError(
            f"{option} {value}: unsupported image format {path.suffix or '(none)'} "
            f"(use one of {', '.join('.' + x for x in sorted(suffixes))})"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise WorkloadError(f"{option} {value}: not writable")
    _probe_writable(option, value, parent)


def _probe_writable(option: str, value: str, directory: Path) -> None:
    """Create (and remove) a file in ``directory``: the one sure test."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".vab-write-test-"):
            pass
    except OSError as exc:
        raise WorkloadError(
            f"{option} {value}: cannot write in {directory} "
            f"({exc.strerror or type(exc).__name__})"
        ) from None


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output path is usable, before any engine starts: its directory
    exists and a file can be created there (``--run-dir`` itself is created
    by the run when missing)."""
    if args.json:
        _check_output_file("--json", args.json, None)
    if args.plot:
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise WorkloadError(
                "--plot needs matplotlib (pip install matplotlib)"
            ) from None
        formats = set(Figure().canvas.get_supported_filetypes())
        _check_output_file("--plot", args.plot, formats)
    if args.run_dir:
        run_dir = Path(args.run_dir)
        if run_dir.exists():
            if not run_dir.is_dir():
                raise WorkloadError(f"--run-dir {args.run_dir}: not a directory")
            _probe_writable("--run-dir", args.run_dir, run_dir)
        elif not run_dir.parent.is_dir():
            raise WorkloadError(
                f"--run-dir {args.run_dir}: directory {run_dir.parent} does not exist"
            )
        else:
            _probe_writable("--run-dir", args.run_dir, run_dir.parent)


def _options(args: argparse.Namespace, work_dir: str) -> RunOptions:
    cost = CostModel(
        step_ms=args.step_ms,
        prefill_token_ms=args.prefill_token_ms,
        decode_req_ms=args.decode_req_ms,
        decode_kv_ms_per_1k=args.decode_kv_ms_per_1k,
    )  # checked by _check_numbers
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


@contextlib.contextmanager
def _work_dir(run_dir: str | None) -> Iterator[str]:
    """``--run-dir``, or a temporary directory removed on every exit path."""
    if run_dir is not None:
        yield run_dir
        return
    path = tempfile.mkdtemp(prefix="vab-replay-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _vllm_logs_to_stderr() -> Iterator[None]:
    """Route vLLM's logs to stderr for the run, so stdout carries the
    results. vLLM logs to ``VLLM_LOGGING_STREAM`` (default stdout): the
    spawned engine processes read it from the environment when they
    configure logging; the front-end configured its handler at import, so
    its stream is switched (``StreamHandler.setStream``). Left alone when the
    user set ``VLLM_LOGGING_STREAM`` or ``VLLM_LOGGING_CONFIG_PATH``."""
    if "VLLM_LOGGING_STREAM" in os.environ or os.environ.get(
        "VLLM_LOGGING_CONFIG_PATH"
    ):
        yield
        return
    os.environ["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"
    moved: list[tuple[logging.StreamHandler, Any]] = []
    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (
            sys.stdout,
            sys.__stdout__,
        ):
            moved.append((handler, handler.setStream(sys.stderr)))
    try:
        yield
    finally:
        os.environ.pop("VLLM_LOGGING_STREAM", None)
        for handler, stream in moved:
            handler.setStream(stream)


async def _run_modes(
    modes: list[bool], workload: Workload, opts: RunOptions
) -> list[ModeRun]:
    from tqdm import tqdm

    from vllm_ascend_balance.replay.runner import run_mode

    runs: list[ModeRun] = []
    interrupts = Interrupts()
    interrupts.install()
    try:
        for balance in modes:
            with tqdm(
                total=len(workload.requests),
                desc=f"balance {'on' if balance else 'off'}",
                unit="req",
                disable=None,  # no bar when stderr is not a terminal
                file=sys.stderr,
            ) as bar:
                run = await run_mode(balance, workload.requests, opts, bar, interrupts)
            # Engines that died of the Ctrl-C may have been seen first.
            if interrupts.interrupted:
                run.status = "interrupted"
            runs.append(run)
            if run.status != "ok":
                break  # interrupted or failed: report what we have
    finally:
        interrupts.uninstall()
    return runs


def _error(message: str) -> None:
    print(f"vllm-ascend-balance replay: error: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        _check_numbers(args)
        _check_outputs(args)
    except WorkloadError as exc:
        _error(str(exc))
        return 2
    try:
        with _work_dir(args.run_dir) as work_dir:
            return _run(args, work_dir)
    except KeyboardInterrupt:  # outside the run (e.g. while reporting)
        print("replay: interrupted", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, work_dir: str) -> int:
    from vllm_ascend_balance.replay import report

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
    except (WorkloadError, ValueError) as exc:
        _error(str(exc))
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
        print(f"replay: --clip adjusted {workload.clipped} request(s)", file=sys.stderr)

    modes = {"off": [False], "on": [True], "both": [False, True]}[args.mode]
    started = time.monotonic()
    runs: list[ModeRun] = []
    with _vllm_logs_to_stderr():
        try:
            runs = asyncio.run(_run_modes(modes, workload, opts))
        except KeyboardInterrupt:
            # Ctrl-C before the replay's own handler was installed.
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
    sys.stderr.flush()
    print()
    print(report.results_header(summary, opts))
    table = report.format_table(metrics)
    if table:
        print(table)
    for line in report.status_lines(metrics):
        print(line)
    if not metrics:
        print("nothing was measured (interrupted)")
    if workload.attribution:
        print(workload.attribution)
    sys.stdout.flush()
    write_failed = False
    outputs: list[tuple[str, Any]] = []
    if args.json:
        outputs.append(("--json", lambda: report.write_json(Path(args.json), payload)))
    if args.plot and report.measured_modes(metrics):
        outputs.append(
            (
                "--plot",
                lambda: report.plot_running(
                    Path(args.plot), report.measured_modes(metrics), opts.max_num_seqs
                ),
            )
        )
    for option, write in outputs:
        try:
            write()
        except (OSError, ValueError) as exc:
            _error(f"{option}: could not write ({exc})")
            write_failed = True
    for m in metrics:
        if m["mode"] == "on" and m["steps"] and not any(m["gathers_per_rank"]):
            print(
                "replay: warning: balance was requested but no rank gathered: "
                "is the vllm-ascend-balance entry point installed in this "
                "environment? (vllm-ascend-balance doctor)",
                file=sys.stderr,
            )
    ok = len(runs) == len(modes) and all(
        r.status == "ok" and all(x.done for x in r.results) for r in runs
    )
    return 0 if ok and not write_failed else 1
