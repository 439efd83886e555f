# SPDX-License-Identifier: Apache-2.0
"""This package next to the result of its own vllm-ascend PR.

The downstream series (``downstream_patch/vllm-ascend/``) changes
vllm-ascend's balance patch: it gates through the seam where vLLM has it and
its engine hook calls ``scheduler.balance_gather(dp_group)``. With this
package installed too, the outcome must be the same as next to the
unpatched vllm-ascend: one gate (this package's), one gather per step, no
``TypeError`` from a gather method of this package shadowing vllm-ascend's.

Each case applies the series to a scratch copy (the ``ascend`` lane: the
0.23.0.post1 series, history, on the release sdist; the ``ascend-main``
lane: patches 0 and 1 of the main series on the checkout in
``VAB_VLLM_ASCEND_SRC``), then runs this suite's coexistence tests with that
tree in place of the installed vllm-ascend, in a child pytest, and checks
that the composed class resolves vllm-ascend's ``balance_gather`` to
vllm-ascend's own method.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ascend_src
from tests.support.lanes import REPO_ROOT

pytestmark = [pytest.mark.lane_scope("ascend", "ascend-main"), pytest.mark.multiproc]

COEXISTENCE = [
    "tests/test_coexistence.py",
    "-k",
    # The unsteered negative controls assume vllm-ascend's copied
    # schedule(), which the series replaces: not part of this check.
    "one_gate_ours or (simulated_fleet_one_gate and not unsteered) "
    "or short_request_first",
]
PROBE = """
import importlib, inspect
from vllm.platforms import current_platform
current_platform.pre_register_and_update()
patch = importlib.import_module("vllm_ascend.patch.platform.patch_balance_schedule")
from vllm_ascend_balance.wiring.composition import compose_scheduler
cls = compose_scheduler(patch.BalanceScheduler)
method = getattr(cls, "balance_gather", None)
print("RESOLVES", getattr(method, "__module__", None))
print("FILE", inspect.getsourcefile(patch))
"""


def _lane() -> str:
    return os.environ.get("VAB_LANE", "")


def _patched_tree(tmp: Path) -> tuple[Path, Path]:
    """(the patched vllm-ascend tree, the PYTHONPATH entry that serves it)."""
    sys.path.insert(0, str(REPO_ROOT / "downstream_patch"))
    try:
        if _lane() == "ascend-main":
            import apply_main  # type: ignore[import-not-found]

            src = ascend_src.source_dir()
            if src is None:
                pytest.skip(f"needs {ascend_src.ENV} (vllm-ascend main)")
            tree = tmp / "vllm-ascend"
            count = apply_main.TREES["patch1"]  # the bug fix, then the seam path
            apply_main.make_tree(src, tree, apply_main.series()[:count])
            return tree, ascend_src.make_overlay(tree, tmp / "overlay")
        import apply  # type: ignore[import-not-found]

        tree = tmp / "vllm-ascend"
        apply.make_repo(apply.sdist_tree(), tree, apply.ascend_version())
        apply.apply_series(
            tree, apply.HERE / "vllm-ascend" / f"v{apply.ascend_version()}"
        )
        # Ahead of the installed copy: its dist-info (entry points) stays.
        return tree, tree
    finally:
        sys.path.remove(str(REPO_ROOT / "downstream_patch"))


def _env(entry: Path) -> dict[str, str]:
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _lane() == "ascend-main":
        rest = [p for p in rest if "overlays" not in p]  # the lane's own overlay
    env["PYTHONPATH"] = os.pathsep.join([str(entry), *rest])
    return env


def _probe(tree: Path, env: dict[str, str]) -> dict[str, str]:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    lines = dict(
        line.split(" ", 1)
        for line in probe.stdout.splitlines()
        if line.startswith(("RESOLVES ", "FILE "))
    )
    # The patched copy is the one imported (through the overlay's link).
    assert tree.resolve() in Path(lines["FILE"]).resolve().parents, lines
    return lines


@pytest.mark.skipif(
    _lane() not in ("ascend", "ascend-main"),
    reason="needs vllm-ascend's Python code (the ascend and ascend-main lanes)",
)
@pytest.mark.timeout(900)
def test_the_gate_does_not_shadow_the_patched_vllm_ascend(tmp_path: Path) -> None:
    """On the composed class, vllm-ascend's ``balance_gather(dp_group)``
    (which the series' engine hook calls) is vllm-ascend's own method, not
    this package's gather (the ``TypeError`` of a zero-argument override)."""
    tree, entry = _patched_tree(tmp_path)
    lines = _probe(tree, _env(entry))
    assert lines["RESOLVES"].startswith("vllm_ascend."), lines


@pytest.mark.skipif(
    _lane() != "ascend-main",
    reason="the coexistence run next to the series is for vllm-ascend main's "
    "(the ascend-main lane); the 0.23.0.post1 series is history and applies "
    "to no branch",
)
@pytest.mark.timeout(3000)
def test_one_gate_next_to_the_patched_vllm_ascend(tmp_path: Path) -> None:
    tree, entry = _patched_tree(tmp_path)
    env = _env(entry)
    assert _probe(tree, env)["RESOLVES"].startswith("vllm_ascend.")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *COEXISTENCE],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=2700,
    )
    tail = run.stdout[-4000:]
    assert run.returncode == 0, tail
    assert " passed" in tail and "TypeError" not in run.stdout, tail
