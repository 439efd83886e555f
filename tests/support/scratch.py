# SPDX-License-Identifier: Apache-2.0
"""Scratch directories that live as long as the test process, and no longer.

Some helpers write files that must outlive the call that made them (a tiny
model directory every config of the process points at; a scheduler variant's
source, which tracebacks read lines from), so they cannot use a context
manager or a fixture's ``tmp_path``. Each such directory is removed when the
process exits; a suite run used to leave hundreds of them in the temp dir.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import NoReturn

_made: list[Path] = []


def process_tempdir(prefix: str) -> Path:
    """A new directory under the temp dir, removed when this process exits
    (``atexit``, or :func:`exit_without_teardown`; a process killed by a
    signal leaves it, as ``mkdtemp`` would)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if not _made:
        atexit.register(_remove_made)
    _made.append(path)
    return path


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End a spawned rank with ``os._exit(code)``, after removing its scratch
    directories, which ``os._exit`` would leave (it skips ``atexit``).

    Why ``os._exit`` at all: interpreter teardown of torch's store and gloo
    threads occasionally aborts ("terminate called without an active
    exception") after all work is done; skipping C++ static destructors keeps
    exit code 0 meaning "this rank finished its steps".
    """
    _remove_made()
    os._exit(code)


def _remove_made() -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
