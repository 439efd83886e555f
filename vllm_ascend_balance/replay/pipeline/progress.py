# SPDX-License-Identifier: Apache-2.0
"""Progress lines on stderr for long replay work, terminal or not.

A replay run takes minutes (engine start-up, warm-up, the workload, the
wave's end) and the tqdm bar only shows on a terminal; in CI logs, under
``| tee`` or ``nohup`` a person would see nothing but vLLM's warnings. So
every run announces itself (``run k/N: mode M, started`` ... ``finished in
S s``) and, while it runs, a daemon thread prints ``still running`` at least
every :data:`HEARTBEAT_S` seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: Longest silence on stderr during a run, seconds.
HEARTBEAT_S = 60.0


def _emit(line: str, stream: TextIO) -> None:
    # On a terminal a tqdm bar may be drawn: tqdm.write clears and redraws
    # it instead of leaving half a bar before our line.
    if stream.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            tqdm.write(line, file=stream)
            return
    print(line, file=stream, flush=True)


@contextmanager
def announced(
    what: str,
    prefix: str = "replay",
    every_s: float | None = None,
    stream: TextIO | None = None,
) -> Iterator[dict[str, str]]:
    """Print ``{prefix}: {what}, started``, a ``still running`` line every
    ``every_s`` seconds (default :data:`HEARTBEAT_S`) while the body runs,
    and ``finished in S s`` when it ends.

    Yields a dict whose ``"status"`` the body may set; it is appended to the
    finishing line (e.g. ``interrupted``). The stream is ``sys.stderr`` as
    of the call, so a redirected stderr gets the lines.
    """
    out = stream if stream is not None else sys.stderr
    interval = HEARTBEAT_S if every_s is None else every_s
    state: dict[str, str] = {}
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            elapsed = time.monotonic() - started
            _emit(f"{prefix}: {what}, still running ({elapsed:.0f} s)", out)

    _emit(f"{prefix}: {what}, started", out)
    thread = threading.Thread(target=beat, name="replay-progress", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join()
        elapsed = time.monotonic() - started
        status = state.get("status")
        _emit(
            f"{prefix}: {what}, finished in {elapsed:.0f} s"
            + (f" ({status})" if status else ""),
            out,
        )
