# SPDX-License-Identifier: Apache-2.0
"""The vllm-ascend main series (``downstream_patch/vllm-ascend/main/``):
``downstream_patch/apply_main.py`` applies it to a copy of the checkout in
``$VAB_VLLM_ASCEND_SRC`` and runs vllm-ascend's own balance-scheduling unit
tests on vLLM 0.27.1 without the admission seam (patch 1: the copy path) and
with it (patch 1: the seam path; patch 2, which deletes the copy).

Runs on the release lane (the vLLM vllm-ascend main pins); skipped when
``$VAB_VLLM_ASCEND_SRC`` is unset.
"""

from __future__ import annotations

import pytest

from tests.support import vllm_ascend_src
from tests.support.downstream_apply import TIMEOUT, run_apply

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # two clones, three or more pytest runs of vllm-ascend's tests
]


@pytest.mark.timeout(TIMEOUT)
def test_series_applies_and_vllm_ascend_tests_pass_on_both_vllm_refs() -> None:
    vllm_ascend_src.require()
    summary = run_apply("apply_main.py")
    assert summary["ok"], summary
    assert set(summary["runs"]) == {"patch1@stock", "patch1@seam", "patch2@seam"}
    for key, runs in summary["runs"].items():
        for run in runs:
            # The vLLM each run imported is the ref it claims.
            assert run["seam"] is key.endswith("@seam"), (key, run)
            assert run["returncode"] == 0 and run["counts"]["passed"] > 0, (key, run)
    # patch 1's seam tests ran on the seam ref and skipped on stock.
    assert summary["runs"]["patch1@stock"][0]["counts"].get("skipped", 0) > summary[
        "runs"
    ]["patch1@seam"][0]["counts"].get("skipped", 0)
    assert summary["patch2_file"]["under_limit"], summary["patch2_file"]
    assert not summary["patch2_file"]["copies_schedule"], summary["patch2_file"]
