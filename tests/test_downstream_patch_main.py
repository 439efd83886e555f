# SPDX-License-Identifier: Apache-2.0
"""The vllm-ascend main series (``downstream_patch/vllm-ascend/main/``):
``downstream_patch/apply_main.py`` applies it to a copy of the checkout in
``$VAB_VLLM_ASCEND_SRC`` and runs vllm-ascend's own balance-scheduling unit
tests for main, + patch 1 and + both on vLLM 0.27.1 without the admission
seam and with it: no failure on any of the six rows, and the series'
end-to-end gate test (a real ``BalanceScheduler``'s ``schedule()``) run, not
skipped, on every row where balance can run (patch 1 on both refs: the copy
path and the seam path; patch 2 on the seam ref), skipped on patch 2 without
the seam (balance refused at config time).

Runs on the release lane (the vLLM vllm-ascend main pins); skipped when
``$VAB_VLLM_ASCEND_SRC`` is unset.
"""

from __future__ import annotations

import pytest

from tests.support import vllm_ascend_src
from tests.support.downstream_apply import TIMEOUT, run_apply

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # three clones, 18 pytest runs of vllm-ascend's tests
]


@pytest.mark.timeout(TIMEOUT)
def test_series_applies_and_vllm_ascend_tests_pass_on_both_vllm_refs() -> None:
    vllm_ascend_src.require()
    summary = run_apply("apply_main.py")
    assert summary["ok"], summary
    assert set(summary["runs"]) == {
        f"{tree}@{ref}"
        for tree in ("main", "patch1", "patch2")
        for ref in ("stock", "seam")
    }
    for key, runs in summary["runs"].items():
        *suites, gate = runs
        for run in suites:
            # The vLLM each run imported is the ref it claims.
            assert run["seam"] is key.endswith("@seam"), (key, run)
            assert run["returncode"] == 0 and run["counts"]["passed"] > 0, (key, run)
            assert not run["counts"].get("failed"), (key, run)
    assert summary["gate"] == {
        "main@stock": "absent",
        "main@seam": "absent",
        "patch1@stock": "ran",
        "patch1@seam": "ran",
        "patch2@stock": "skipped",
        "patch2@seam": "ran",
    }, summary["gate"]
    # patch 1's seam tests ran on the seam ref and skipped on stock.
    assert summary["runs"]["patch1@stock"][0]["counts"].get("skipped", 0) > summary[
        "runs"
    ]["patch1@seam"][0]["counts"].get("skipped", 0)
    assert summary["patch2_file"]["under_limit"], summary["patch2_file"]
    assert not summary["patch2_file"]["copies_schedule"], summary["patch2_file"]
