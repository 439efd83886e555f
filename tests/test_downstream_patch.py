# SPDX-License-Identifier: Apache-2.0
"""The vllm-ascend half of Phase 2B: ``downstream_patch/apply.py`` applies the
series to vllm-ascend's release sdist with ``git am`` and runs vllm-ascend's
own unit tests for the balance patch and the platform against the result.

Runs on the ascend lane (vllm-ascend installed); skipped elsewhere.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.downstream_apply import TIMEOUT, run_apply

pytestmark = [
    pytest.mark.lane_scope("ascend"),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm_ascend") is None,
        reason="vllm-ascend is not installed: its unit tests need the ascend "
        "lane (scripts/fork.sh --lane ascend)",
    ),
    pytest.mark.slow,  # copies and commits the sdist tree, three pytest/python runs
]


# Three interpreter runs over vllm-ascend's tree: about 4 min on a quiet
# 2-core machine.
@pytest.mark.timeout(TIMEOUT)
def test_series_applies_and_vllm_ascend_unit_tests_pass() -> None:
    summary = run_apply("apply.py")
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
