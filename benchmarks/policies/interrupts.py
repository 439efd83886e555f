# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C and SIGTERM for ``compare_policies.py``: one line, nothing left.

SIGTERM is taken as Ctrl-C, so that either unwinds the run: the replays
still running are stopped (``runs._stop``), the work directory and OUT's
lock are removed, and the rows written so far stay in OUT.json (written
after every case and seed). Without this, SIGTERM left the lock file, the
work directory and the replay running, and Ctrl-C printed a traceback.

:func:`deferred` holds an interrupt back while a replay is started and
recorded: one that landed between ``Popen`` returning and the process
being recorded left that replay running, unknown to ``runs._stop``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

_depth = 0
_pending = False


def _as_ctrl_c(signum: int, frame: object) -> None:
    global _pending
    if _depth:
        _pending = True
        return
    raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """Run the block whole: Ctrl-C or SIGTERM arriving inside it is raised
    as ``KeyboardInterrupt`` when it ends (once :func:`run_interruptible`
    has installed the handlers; before that, signals act as Python's
    defaults do)."""
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            _pending = False
            raise KeyboardInterrupt


def install() -> None:
    """Take SIGTERM and Ctrl-C (SIGINT) as ``KeyboardInterrupt``, deferred
    inside :func:`deferred`."""
    signal.signal(signal.SIGTERM, _as_ctrl_c)
    signal.signal(signal.SIGINT, _as_ctrl_c)


def run_interruptible(main: Callable[[], int], name: str) -> NoReturn:
    """``sys.exit(main())``; an interrupt exits 1 with one line naming ``name``."""
    install()
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(
            f"{name}: interrupted; OUT.json keeps the cases and seeds that finished"
        )
