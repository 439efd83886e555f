# SPDX-License-Identifier: Apache-2.0
"""The package's commands print their results on stdout and vLLM's log lines
on stderr, on every lane (vLLM 0.27.1 logs to stdout by default).

``doctor`` runs as users run it (console script and ``python -m``) in a
subprocess with vLLM's INFO logging on, so there are log lines to route.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
#: A vLLM log line: "INFO 11-30 21:11:16 [file.py:53] ..." (level, date, time).
LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d ")
#: doctor's own lines: "label:   value" or "  - note".
REPORT_LINE = re.compile(r"^([a-zA-Z][a-zA-Z ]+:\s|  - )")
COMMANDS = {
    "console script": [str(BIN / "vllm-ascend-balance"), "doctor"],
    "python -m": [sys.executable, "-m", "vllm_ascend_balance", "doctor"],
}


def _doctor(cmd: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"VLLM_LOGGING_STREAM", "VLLM_LOGGING_CONFIG_PATH"}
    }
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only
        env=base | {"VLLM_LOGGING_LEVEL": "INFO"} | env,
    )


def _misplaced(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not REPORT_LINE.match(line)]


@pytest.mark.parametrize("how", COMMANDS)
def test_doctor_results_on_stdout_logs_on_stderr(how: str) -> None:
    result = _doctor(COMMANDS[how])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "seam present:" in result.stdout
    assert _misplaced(result.stdout) == [], result.stdout
    # vLLM did log (so the check above had something to keep out of stdout).
    assert [line for line in result.stderr.splitlines() if LOG_LINE.match(line)]


def test_an_explicit_logging_stream_wins_and_the_check_sees_it() -> None:
    """Negative control: a user's ``VLLM_LOGGING_STREAM=ext://sys.stdout``
    is respected, and the same check then finds vLLM's lines on stdout."""
    result = _doctor(COMMANDS["python -m"], VLLM_LOGGING_STREAM="ext://sys.stdout")
    assert result.returncode == 0, result.stderr[-3000:]
    misplaced = _misplaced(result.stdout)
    assert misplaced and all(LOG_LINE.match(line) for line in misplaced), misplaced
