# SPDX-License-Identifier: Apache-2.0
"""One command's run in a forked child of a preloaded process: the helper
behind tests/support/doctor_runs.py and tests/support/upstream_forks.py.

Both pay a vLLM import once in a parent and fork a child per run; the child
must look like a fresh command to what it runs and to the test reading it:
stdin empty, stdout and stderr in files of its own, an exit status of its
own, a crash written out as a traceback rather than lost with the child.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path


def fork_run(target: Callable[[], int | None], out: Path, err: Path) -> int:
    """Fork; the child reads stdin from ``/dev/null``, writes stdout and
    stderr to ``out`` and ``err`` (created or truncated), calls ``target``
    and exits with its status (``None`` is 0; ``SystemExit`` its code; any
    other exception 1, its traceback in ``err``). Returns the child's pid,
    for ``os.waitpid``; never returns in the child.
    """
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _redirect(out, err)
        code = _status(target)
    finally:
        os._exit(code)


def _redirect(out: Path, err: Path) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for stream, path in ((1, out), (2, err)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, stream)
        os.close(fd)


def _status(target: Callable[[], int | None]) -> int:
    try:
        code = target()
    except SystemExit as exc:  # argparse, vLLM's parser (exit 2)
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a crash is a result: the test reads the traceback
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return int(code or 0)
