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
import shutil
import tempfile
from pathlib import Path


def process_tempdir(prefix: str) -> Path:
    """A new directory under the temp dir, removed when this process exits
    (``atexit``; a process killed by a signal leaves it, as ``mkdtemp``
    would)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
