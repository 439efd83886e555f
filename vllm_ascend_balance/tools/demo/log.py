# SPDX-License-Identifier: Apache-2.0
"""Reading the demo server's log: its end, this package's refusals, and
keeping it past the demo's scratch directory.

vLLM's start-up banner, its config dump and a failing front-end's stack
all land after the one line in which this package refuses a setting
(``activation`` logs ``balance scheduling: <what and the fix>`` at ERROR,
in the API server or an engine core); the demo prints that line last
(:func:`refusals`), and keeps the log a failed start wrote
(:func:`keep_log`) so that the path it names exists after it exits.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

#: vLLM's log line (``(APIServer pid=1) ERROR 12-04 08:22:52 [file.py:416]
#: message``) carrying this package's refusal (activation.py's
#: ``logger.error("balance scheduling: %s", ...)``).
REFUSAL = re.compile(r"\bERROR\b[^\[]*\[[^\]]*\] (balance scheduling: .*\S)\s*$")
#: Colours vLLM adds when a terminal is attached (not on a file, but a
#: ``VLLM_LOGGING_COLOR`` setting could force them).
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TAIL_LINES = 40


def tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``text``."""
    return text.splitlines()[-lines:]


def refusals(text: str) -> list[str]:
    """This package's refusal messages in a server log, each once, in order
    of first appearance (every rank logs the same one)."""
    found: list[str] = []
    for line in text.splitlines():
        match = REFUSAL.search(ANSI.sub("", line))
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


def keep_log(log: Path, scratch: Path | None) -> Path:
    """Where ``log`` can be read after the demo exits: ``log`` itself, or,
    when it lies in ``scratch`` (a directory removed at exit), a copy in
    the system's temporary directory (``vab-demo-*.log``, never removed by
    the demo)."""
    if scratch is None or not log.is_relative_to(scratch):
        return log
    handle, name = tempfile.mkstemp(prefix="vab-demo-", suffix=".log")
    with open(handle, "wb") as out, log.open("rb") as source:
        shutil.copyfileobj(source, out)
    return Path(name)
