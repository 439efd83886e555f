# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C and SIGTERM for ``compare_policies.py``: one line, nothing left.

SIGTERM is taken as Ctrl-C, so that either unwinds the run: the replays
still running are stopped (``runs._stop``), the work directory and OUT's
lock are removed, and the rows written so far stay in OUT.json (written
after every case and seed). Without this, SIGTERM left the lock file, the
work directory and the replay running, and Ctrl-C printed a traceback.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import NoReturn


def _as_ctrl_c(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_interruptible(main: Callable[[], int], name: str) -> NoReturn:
    """``sys.exit(main())``; an interrupt exits 1 with one line naming ``name``."""
    signal.signal(signal.SIGTERM, _as_ctrl_c)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(
            f"{name}: interrupted; OUT.json keeps the cases and seeds that finished"
        )
