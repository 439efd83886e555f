# SPDX-License-Identifier: Apache-2.0
"""Run one of ``downstream_patch/``'s apply scripts (``apply.py``,
``apply_main.py``) as its users do and read its JSON summary (the last line
of its stdout)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Up to 32 pytest runs over vllm-ascend's tree (apply_main.py: four trees on
# two vLLMs, each stock and with the seam), after building the second
# vLLM's venv on first use: about 16 min on a 2-core machine under light
# load, far past pytest's default 600 s hang guard; twice that under load.
TIMEOUT = 5400


def run_apply(script: str, *args: str) -> dict[str, Any]:
    """``python downstream_patch/<script> *args`` by this Python; asserts it
    exited 0 (the output tail in the message) and returns its summary."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "downstream_patch" / script), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
