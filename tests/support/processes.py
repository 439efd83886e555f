# SPDX-License-Identifier: Apache-2.0
"""Spawn test processes (ranks), join them against a hang guard, kill what
hung: the one place tests start processes with ``multiprocessing``."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Joined:
    """Outcome of :func:`run_processes`: which processes hung (killed) and
    every exit code (index = position in the argument list)."""

    hung: list[int]
    exitcodes: list[int | None]


def run_processes(
    target: Callable[..., Any], args: Sequence[tuple], timeout: float
) -> Joined:
    """Run ``target(*args[i])`` in one spawned daemon process per ``args``
    entry, wait up to ``timeout`` seconds in all (a hang guard, not a timed
    assertion), kill the ones still alive."""
    return join_processes(start_processes(target, args), timeout)


def start_processes(
    target: Callable[..., Any], args: Sequence[tuple]
) -> list[multiprocessing.process.BaseProcess]:
    """Start ``target(*args[i])`` in one spawned daemon process per ``args``
    entry (for a test that signals them before :func:`join_processes`)."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=a, daemon=True) for a in args]
    for proc in procs:
        proc.start()
    return list(procs)


def join_processes(
    procs: Sequence[multiprocessing.process.BaseProcess], timeout: float
) -> Joined:
    """Wait up to ``timeout`` seconds in all for ``procs`` (a hang guard),
    kill the ones still alive (SIGKILL ends a stopped process too)."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(deadline - time.monotonic(), 0))
    hung = [i for i, proc in enumerate(procs) if proc.is_alive()]
    for i in hung:
        procs[i].kill()
        procs[i].join()
    return Joined(hung, [proc.exitcode for proc in procs])
