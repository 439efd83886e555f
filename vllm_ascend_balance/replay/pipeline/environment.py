# SPDX-License-Identifier: Apache-2.0
"""The replay's process environment: its work directory, where vLLM's
logs go, and SIGTERM, which stops it as Ctrl-C does."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from vllm_ascend_balance.log_streams import vllm_logs_to_stderr
from vllm_ascend_balance.logger import init_logger

__all__ = [
    "Terminated",
    "crowded_cores",
    "interrupt_cause",
    "signal_name",
    "sigterm_as_ctrl_c",
    "vllm_logs_to_stderr",
    "work_dir",
]

logger = init_logger(__name__)


@contextlib.contextmanager
def work_dir(run_dir: str | None) -> Iterator[str]:
    """``--run-dir``, or a temporary directory removed on every exit path."""
    if run_dir is not None:
        yield run_dir
        return
    path = tempfile.mkdtemp(prefix="vab-replay-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def crowded_cores(dp: int, engine: str, cores: int | None = None) -> str | None:
    """A one-line warning when the real engine's ``dp`` engine processes
    (one per rank) crowd this machine's ``cores`` (default: the ones this
    process may run on), else None. More than two ranks a core: the
    documented ``--dp 4`` example runs on 2 cores; ``--dp 64`` there only
    overruns its pacing. A warning, not a refusal: a bigger machine later,
    or a patient user, may want it."""
    if engine == "sim":
        return None
    if cores is None:
        affinity = getattr(os, "sched_getaffinity", None)  # Linux only
        cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    if dp <= 2 * cores:
        return None
    return (
        f"replay: warning: --dp {dp} starts {dp} engine processes on {cores} "
        f"CPU core(s): runs will be slow and overrun their pacing; use "
        f"--engine sim for a large DP (up to 256)"
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises ``KeyboardInterrupt``
    (:func:`sigterm_as_ctrl_c`): every ``except KeyboardInterrupt`` that
    reports what was measured and cleans up serves both."""


def signal_name(signum: int) -> str:
    """How a report names a stop signal: ``Ctrl-C`` for SIGINT (what sends
    it, nearly always), else the signal's name (``SIGTERM``)."""
    if signum == signal.SIGINT:
        return "Ctrl-C"
    return signal.Signals(signum).name


def interrupt_cause(exc: KeyboardInterrupt) -> str:
    """The signal behind ``exc``, named by :func:`signal_name`."""
    return signal_name(signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread for the block
    (elsewhere, where no handler can be installed, this changes nothing).
    Without it SIGTERM kills the process outright: no report of the runs
    that finished, and the work directory left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        # None: a handler set outside Python, which cannot be put back.
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
