# SPDX-License-Identifier: Apache-2.0
"""The vllm-ascend main series (``downstream_patch/vllm-ascend/main/``):
``downstream_patch/apply_main.py`` applies it to copies of the checkout in
``$VAB_VLLM_ASCEND_SRC`` and runs vllm-ascend's own balance-scheduling unit
tests and pre-commit hooks on main, + patch 0, + patches 0-1 and + all three,
each on the release lane's vLLM and on the vLLM vllm-ascend main moved to
(``.github/vllm-ascend-main-vllm.commit``), stock and with the seam: no
failure on any row, the series' end-to-end gate test run where balance can
run (patch 1 on every ref: the copy path and the seam path; patch 2 with the
seam) and skipped on patch 2 without the seam (balance refused at config
time), patch 0's env-switch test failing on main and passing on every
patched tree, their hooks clean on every tree.

The hooks' negative control: a nested ``with`` (ruff's SIM117, which their
``pyproject.toml`` selects) added to a scratch clone fails ``ruff-check``.

Runs on the release lane (the vLLM vllm-ascend main pins); skipped when
``$VAB_VLLM_ASCEND_SRC`` is unset.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import vllm_ascend_src
from tests.support.downstream_apply import TIMEOUT, run_apply
from tests.support.lanes import REPO_ROOT, pin_tag

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # four clones, 32 pytest runs of vllm-ascend's tests
]

TREES = ("main", "patch0", "patch1", "patch2")


def _next_vllm() -> str:
    pin = REPO_ROOT / ".github" / "vllm-ascend-main-vllm.commit"
    return "".join(pin.read_text().split()).removeprefix("v")


@pytest.mark.timeout(TIMEOUT)
def test_series_applies_and_vllm_ascend_tests_pass_on_every_ref() -> None:
    vllm_ascend_src.require()
    summary = run_apply("apply_main.py")
    assert summary["ok"], summary
    versions = {pin_tag("release").removeprefix("v"), _next_vllm()}
    keys = {
        f"{tree}@{version}-{kind}"
        for tree in TREES
        for version in versions
        for kind in ("stock", "seam")
    }
    assert set(summary["rows"]) == keys
    for key, row in summary["rows"].items():
        # The vLLM each run imported is the ref it claims.
        assert row["seam_probed"] is key.endswith("-seam"), (key, row)
        assert summary["rows_ok"][key], (key, row)
        gate = row["groups"]["gate test"]
        if row["tree"] == "patch1" and not row["seam"]:
            assert gate["skipped"] > 0  # the seam-only cases
        if row["tree"] == "main":
            assert row["groups"]["env switch"]["failed"] > 0, row
    assert all(summary["lint_ok"].values()), summary["lint"]
    assert summary["patch2_file"]["under_limit"], summary["patch2_file"]
    assert not summary["patch2_file"]["copies_schedule"], summary["patch2_file"]


def test_their_hooks_catch_a_nested_with(tmp_path: Path) -> None:
    src = vllm_ascend_src.require()
    sys.path.insert(0, str(REPO_ROOT / "downstream_patch"))
    try:
        import their_lint  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO_ROOT / "downstream_patch"))
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", str(src), str(tree)], check=True)
    bad = tree / "tests" / "ut" / "test_nested_with.py"
    bad.write_text(
        "from unittest.mock import patch\n\n\n"
        "def test_x():\n"
        '    with patch("os.sep", "/"):\n'
        '        with patch("os.altsep", None):\n'
        "            pass\n"
    )
    files = [str(bad.relative_to(tree))]
    results = their_lint.run(tree, files, their_lint.tools(tree))
    by_hook = {r["hook"]: r for r in results}
    assert by_hook["ruff-check"]["status"] == "failed", results
    assert "SIM117" in by_hook["ruff-check"]["detail"]
    assert not their_lint.ok(results)
    bad.write_text(
        "from unittest.mock import patch\n\n\n"
        "def test_x():\n"
        '    with patch("os.sep", "/"), patch("os.altsep", None):\n'
        "        pass\n"
    )
    assert their_lint.ok(their_lint.run(tree, files, their_lint.tools(tree)))
