# SPDX-License-Identifier: Apache-2.0
"""What the demo command prints: the served server (URL, curl, metrics,
doctor, log, the process group and how to clean it up), and why it stopped
when the server failed (the log's end, the kept log's path, then this
package's refusal, last, where the log holds one).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from vllm_ascend_balance.tools.demo import log as demo_log
from vllm_ascend_balance.tools.demo.command import curl_command
from vllm_ascend_balance.tools.demo.process import DemoServer

PROG = "vllm-ascend-balance demo"
#: How the printed doctor command starts (``scripts/serve`` sets
#: ``scripts/doctor``, which runs in the same venv from a checkout).
DOCTOR_ENV = "VAB_DEMO_DOCTOR"


def announce(server: DemoServer, dp: int, balance: str, active: bool) -> None:
    """The lines printed once ``/health`` answers (stdout)."""
    doctor = os.environ.get(DOCTOR_ENV) or "vllm-ascend-balance doctor"
    pgid = server.proc.pid
    series = (
        "vllm:balance_* series, one per DP rank"
        if active
        else "no vllm:balance_* series: balance is not active"
    )
    print(
        f"vLLM OpenAI server, DP {dp}, balance scheduling {balance} (CPU, "
        f"cost-model executor): {server.base_url}\n"
        f"  try:      {curl_command(server.base_url)}\n"
        f"  metrics:  {server.url('/metrics')}  ({series})\n"
        f"  doctor:   {doctor} {shlex.join(server.args)}\n"
        f"  log:      {server.log}\n"
        f"  server:   pid {pgid} (process group {pgid}; should this command be "
        f"killed, stop the server with: kill -TERM -- -{pgid})\n"
        f"Ctrl-C stops the server and every process it started.",
        flush=True,
    )


def failure(headline: str, log: Path | None, scratch: Path | None) -> Path | None:
    """Say why the server stopped (stderr): ``headline``, the end of
    ``log``, where the log is kept
    (:func:`~vllm_ascend_balance.tools.demo.log.keep_log`: ``scratch`` is
    removed at exit), and, last, this package's refusal if the log holds
    one. Returns the kept log's path (None: no log)."""
    print(f"{PROG}: {headline}", file=sys.stderr)
    if log is None or not log.exists():
        return None
    text = log.read_text(errors="replace")
    kept = demo_log.keep_log(log, scratch)
    end = demo_log.tail(text)
    if end:
        print(f"the last {len(end)} lines of the server's log:", file=sys.stderr)
        print("\n".join(end), file=sys.stderr)
    print(f"{PROG}: the server's log: {kept}", file=sys.stderr)
    for refusal in demo_log.refusals(text):
        print(f"{PROG}: refused: {refusal}", file=sys.stderr)
    sys.stderr.flush()
    return kept
