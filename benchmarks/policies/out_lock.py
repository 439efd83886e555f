# SPDX-License-Identifier: Apache-2.0
"""One writer per output: ``compare_policies.py`` runs that share an OUT.

A run reuses the rows of its OUT.json and rewrites it after every case and
seed, so two runs on one OUT (two partial runs both left at the temporary
directory's default) would each overwrite the other's rows. The second run
is refused in one line instead; a run stopped early leaves no stale lock
(``fcntl.flock`` dies with its process).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def lock_path(out: Path) -> Path:
    """The lock file of ``out`` (OUT without suffix): in the temporary
    directory, so a checkout's ``benchmarks/results`` gains no file."""
    key = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"vab-policies-{key}.lock"


@contextlib.contextmanager
def sole_writer(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the block.

    Raises:
        SystemExit: another run holds it (one line naming OUT and the fix).
    """
    path = lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SystemExit(
                f"another compare_policies.py run is writing {out}.json; wait "
                "for it, or give this run its own --out"
            ) from None
        # The holder before us may have unlinked the file after we opened it:
        # a lock on that inode would not exclude a third run, so take it anew.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        # Unlinked while held, so no file is left in the temporary directory.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
