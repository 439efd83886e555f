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
import os
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


class StartupInterrupted(BaseException):
    """The first Ctrl-C or SIGTERM while the engines start (its argument: the
    signal, as a report names it). Not a ``KeyboardInterrupt``, which
    ``zmq_socket_ctx`` (``vllm/utils/network_utils.py``, around
    ``launch_core_engines``' wait for the engines' handshake) swallows with
    a debug line: start-up would then go on to wait for their READY, up to
    ``VLLM_ENGINE_READY_TIMEOUT_S`` (10 min), from engines that never got
    their handshake reply."""


class Interrupts:
    """Ctrl-C (SIGINT; SIGTERM likewise) handling of a replay, installed in
    the front-end's event loop by :meth:`install` (main thread only;
    elsewhere it changes nothing).

    The flag :attr:`interrupted` is set in the signal handler itself, so it
    is already set when the consequences of the Ctrl-C (engines that died
    of it) reach the front-end. The first Ctrl-C while the engines start
    (:meth:`engine_startup`, a blocking call) raises
    :class:`StartupInterrupted` there, which ``AsyncLLM`` start-up unwinds
    by stopping what it started; any other cancels the replay's main task
    (the running mode stops its engines and reports what it measured).
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
            raise StartupInterrupted(self.cause)
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    @contextlib.contextmanager
    def engine_startup(self) -> Iterator[None]:
        """Around ``AsyncLLM`` start-up: the engine processes are spawned
        with SIGINT blocked (a child inherits its parent thread's signal
        mask), so a Ctrl-C in the terminal, which reaches the whole process
        group, does not kill them mid-import with a ``KeyboardInterrupt``
        traceback each; the front-end alone handles it and stops them.

        Meanwhile another thread takes the SIGINT (and a SIGTERM, when the
        kernel picks another thread for it), and there CPython's C-level
        handler only marks it pending: the Python handler runs in the main
        thread alone, which sits in a C-level wait that nothing interrupts
        (vLLM's zmq poll for the engines, up to 10 min). So for the duration
        the signal wakeup fd is a pipe, and a relay thread reading it sends
        the main thread :data:`_NUDGE`, which that thread does not block: its
        wait fails with EINTR and the pending handler runs (pyzmq, like
        CPython, checks for signals before retrying). The relay consumes no
        signal; the wakeup fd set before gets every byte but the nudge's."""
        if not self._installed or threading.current_thread() is not (
            threading.main_thread()
        ):
            yield
            return
        # Start multiprocessing's resource tracker now if it is not running:
        # starting it unblocks SIGINT in the calling thread (it blocks, spawns
        # and unblocks), which would undo the mask below.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        read_fd, write_fd = os.pipe()  # not inherited by the engines (PEP 446)
        os.set_blocking(write_fd, False)  # set_wakeup_fd's requirement
        previous_nudge = signal.signal(_NUDGE, _ignore)
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        relay = threading.Thread(
            target=_relay,
            args=(read_fd, threading.main_thread().ident, previous_fd),
            name="replay-signal-relay",
            daemon=True,
        )
        relay.start()  # before the mask: a thread inherits it, and this one
        # must be free to take the SIGINT the main thread blocks.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {_NUDGE})
        try:
            self._starting = True
            yield
        finally:
            self._starting = False
            signal.set_wakeup_fd(previous_fd)
            os.close(write_fd)  # end of file: the relay drains and ends
            relay.join()
            os.close(read_fd)
            # Only now: a nudge still on its way must find a handler (None:
            # one set outside Python, which cannot be put back).
            if previous_nudge is not None:
                signal.signal(_NUDGE, previous_nudge)
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


#: The signal that wakes the main thread during engine start-up: ignored by
#: default, so one that lands after start-up harms nothing, and unused by
#: vLLM and by Python's own machinery.
_NUDGE = signal.SIGURG


def _ignore(signum: int, frame: Any) -> None:
    """The nudge's handler: its work is done once the wait fails with EINTR."""


def _relay(read_fd: int, main_ident: int | None, forward_fd: int) -> None:
    """Until end of file on ``read_fd`` (the signal wakeup fd's pipe): nudge
    the main thread for each stop signal, and hand the other bytes on to the
    wakeup fd that was set before (asyncio's, if any; -1: none)."""
    while data := os.read(read_fd, 512):
        if forward_fd != -1:
            rest = bytes(b for b in data if b != _NUDGE)
            with contextlib.suppress(OSError):  # full or closed: as it would be
                if rest:
                    os.write(forward_fd, rest)
        if main_ident is not None and any(b in _STOP_SIGNALS for b in data):
            signal.pthread_kill(main_ident, _NUDGE)


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
