# SPDX-License-Identifier: Apache-2.0
"""The vllm-ascend half of Phase 2B: ``downstream_patch/apply.py`` applies the
series to vllm-ascend's release sdist with ``git am`` and runs vllm-ascend's
own unit tests for the balance patch and the platform against the result.

Runs on the ascend lane (vllm-ascend installed); skipped elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.lane_scope("ascend"),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm_ascend") is None,
        reason="vllm-ascend is not installed: its unit tests need the ascend "
        "lane (scripts/fork.sh --lane ascend)",
    ),
    pytest.mark.slow,  # copies and commits the sdist tree, three pytest/python runs
]

ROOT = Path(__file__).resolve().parents[1]


# Three interpreter runs over vllm-ascend's tree: about 4 min on a quiet
# 2-core machine, past pytest's default 600 s hang guard under load.
@pytest.mark.timeout(1800)
def test_series_applies_and_vllm_ascend_unit_tests_pass() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "downstream_patch" / "apply.py")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"]
    assert summary["file"]["lines"] < 100, summary["file"]
    assert not summary["file"]["copies_schedule"], summary["file"]
    assert len(summary["tests"]) == 2
    for run in summary["tests"]:
        assert run["returncode"] == 0 and " passed" in run["summary"], run
    # The re-homed prefill-node guard behaves as the copy's did.
    assert summary["guard"]["equal"], summary["guard"]
    assert summary["guard"]["preemptions_guarded"] == 0
    assert summary["guard"]["preemptions_unguarded"] > 0
