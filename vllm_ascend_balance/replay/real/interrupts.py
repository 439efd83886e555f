# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C (SIGINT) and SIGTERM during a replay, and the process safety net.

A replay stops like this on either signal: the running deployment stops its
engines, the run's records say ``INTERRUPTED``, and the front-end prints what
was measured (exit 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.environment import signal_name

logger = init_logger(__name__)


#: Signals that stop a replay like Ctrl-C (SIGTERM: ``kill`` of the
#: front-end; the engines are stopped and the work dir removed).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Ctrl-C (SIGINT; SIGTERM likewise) handling of a replay, installed in
    the front-end's event loop by :meth:`install` (main thread only;
    elsewhere it changes nothing).

    The flag :attr:`interrupted` is set in the signal handler itself, so it
    is already set when the consequences of the Ctrl-C (engines that died
    of it) reach the front-end. The first Ctrl-C while the engines start
    (:meth:`engine_startup`, a blocking call) raises ``KeyboardInterrupt``
    there, which ``AsyncLLM`` start-up unwinds by stopping what it started;
    any other cancels the replay's main task (the running mode stops its
    engines and reports what it measured).
    """

    def __init__(self) -> None:
        self.interrupted = False
        #: The first stop signal, as a report names it (``Ctrl-C``, ``SIGTERM``).
        self.cause: str | None = None
        self._raised = False
        self._starting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._previous: dict[int, Any] = {}
        self._installed = False

    def install(self) -> None:
        """Take over SIGINT and SIGTERM for the current task (call inside the
        running loop)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._previous = {
            sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS
        }
        self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)
            self._installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self.interrupted:
            self.cause = signal_name(signum)
        self.interrupted = True
        if self._starting and not self._raised:
            self._raised = True
            raise KeyboardInterrupt
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    @contextlib.contextmanager
    def engine_startup(self) -> Iterator[None]:
        """Around ``AsyncLLM`` start-up: the engine processes are spawned
        with SIGINT blocked (a child inherits its parent thread's signal
        mask), so a Ctrl-C in the terminal, which reaches the whole process
        group, does not kill them mid-import with a ``KeyboardInterrupt``
        traceback each; the front-end alone handles it and stops them. A
        helper thread that does not block SIGINT receives it meanwhile, so
        the front-end's handler still runs promptly."""
        if not self._installed:
            yield
            return
        # Start multiprocessing's resource tracker now if it is not running:
        # starting it unblocks SIGINT in the calling thread (it blocks, spawns
        # and unblocks), which would undo the mask below.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        stop = threading.Event()
        receiver = threading.Thread(
            target=stop.wait, name="replay-sigint-receiver", daemon=True
        )
        receiver.start()
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._starting = True
            yield
        finally:
            self._starting = False
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
            stop.set()
            receiver.join()


def reap_children(grace_s: float = 5.0) -> list[int]:
    """Terminate, then kill, every child process this process started and
    that is still alive (engine cores, DP coordinator); return their pids.
    A safety net after ``AsyncLLM.shutdown()``, which normally stops them."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
    return [c.pid for c in children if c.pid is not None]
