# SPDX-License-Identifier: Apache-2.0
"""Apply the vllm-ascend main series (``downstream_patch/vllm-ascend/main/``)
to copies of a vllm-ascend checkout and run vllm-ascend's own balance tests
and pre-commit hooks on every tree, on vLLM with and without the admission
seam.

    VAB_VLLM_ASCEND_SRC=<checkout> python downstream_patch/apply_main.py \\
        [--keep] [--vllm-python PYTHON]...

1. Trees: the checkout (never modified; its HEAD should be
   ``.github/vllm-ascend-main.commit``) cloned into a scratch directory as
   it is (``main``) and with ``git am --keep-non-patch`` of the series'
   first one, two and three patches (``patch0``: the bug fix; ``patch1``:
   the seam path; ``patch2``: the copy deleted).
2. vLLMs: this Python's (the release lane: the vLLM the checkout pins, with
   its series applied) and that of ``scripts/lane.sh ascend-main-vllm``
   (``.github/vllm-ascend-main-vllm.commit``: the vLLM vllm-ascend main
   moved to; built on first use), or the Pythons given with
   ``--vllm-python``. Each vLLM gives two refs, stock and with the seam
   (:mod:`vllm_refs`).
3. Every tree on every ref: one pytest run of the balance unit test files
   (:data:`BALANCE_UTS`), the series' gate test (:data:`GATE_TEST`) and
   patch 0's env-switch tests (:data:`BUG_TESTS`; on ``main`` patch 0's test
   file is added to the tree, and they must fail), counted per group from
   its JUnit XML (:mod:`main_report`); one run of ``test_platform.py -k
   balance``. On a vLLM other than the one the tree pins, main's own tests
   not ported to it (:data:`PINNED_ONLY`) are left out and the vLLM modules
   its UT conftest imports but that vLLM lacks are stood in for
   (:mod:`ut_stubs`); both are reported.
4. Every tree: vllm-ascend's pre-commit hooks (:mod:`their_lint`) on the
   files the series changes (``main``: the files of the whole series).
5. ``patch2``'s ``patch_balance_schedule.py``: under 100 lines of code, no
   ``def schedule(``.

Prints the tables, then the JSON summary as the last line; exit status 0
only if every row (:func:`main_report.row_ok`), every tree's hooks and the
file check held.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import main_report
import their_lint
from tree_tools import (
    HERE,
    check_file,
    file_ok,
    git,
    report,
    run_pytest,
    scratch_dir,
    series_names,
)
from vllm_refs import ROOT, Ref, refs

SERIES_DIR = HERE / "vllm-ascend" / "main"
PIN_FILE = ROOT / ".github" / "vllm-ascend-main.commit"
#: Tree name -> how many patches of the series it applies.
TREES = {"main": 0, "patch0": 1, "patch1": 2, "patch2": 3}
BALANCE_UTS = [
    "tests/ut/patch/platform/test_patch_balance_schedule.py",
    "tests/ut/patch/platform/test_patch_dyntra_lb_core.py",
    "tests/ut/core/test_short_request_first_scheduler_install.py",
    "tests/ut/core/test_profiling_chunk.py",
    # Patch 2 drops an entry of profiling_config.py's symbol list.
    "tests/ut/test_profiling_config.py",
]
#: Main's own tests left out on a vLLM other than the tree's pin, and why.
PINNED_ONLY = {
    "tests/ut/core/test_profiling_chunk.py": "its fixture's MagicMock hf_config "
    "sends that vLLM's ModelConfig.uses_mrope into unbounded recursion (main's "
    "test, not yet ported; the series does not touch it)",
}
PLATFORM_RUN = ["tests/ut/test_platform.py", "-k", "balance"]
GATE_TEST = "tests/ut/patch/platform/test_balance_scheduler_gate.py"
BUG_FILE = "tests/ut/patch/platform/test_patch_balance_schedule.py"
BUG_COPY = "tests/ut/patch/platform/test_env_switch_of_patch0.py"
BUG_TESTS = (
    "test_env_switch_reaches_spawned_engine_core_entry",
    "test_balance_config_fallback_honours_env_last",
)
LANE = "ascend-main-vllm"


def fail(message: str) -> NoReturn:
    raise SystemExit(f"apply_main.py: {message}")


def source() -> Path:
    value = os.environ.get("VAB_VLLM_ASCEND_SRC")
    if not value:
        fail("VAB_VLLM_ASCEND_SRC is not set: point it at a vllm-ascend checkout")
    src = Path(value).expanduser().resolve()
    if not (src / "vllm_ascend" / "__init__.py").is_file():
        fail(f"VAB_VLLM_ASCEND_SRC={value} holds no vllm_ascend/ package")
    return src


def series() -> list[Path]:
    return [SERIES_DIR / name for name in series_names(SERIES_DIR)]


def make_tree(src: Path, dest: Path, patches: list[Path]) -> None:
    """A clone of ``src``'s HEAD at ``dest`` with ``patches`` applied."""
    result = subprocess.run(
        ["git", "clone", "-q", str(src), str(dest)], capture_output=True, text=True
    )
    if result.returncode:
        fail(f"git clone of {src} failed: {result.stderr.strip()}")
    if patches:
        result = git(
            dest, "am", "-q", "--keep-cr", "--keep-non-patch", *map(str, patches)
        )
        if result.returncode:
            fail(f"git am failed in {dest}: {result.stdout}{result.stderr}".strip())


def lane_python() -> str:
    """The Python of ``scripts/lane.sh ascend-main-vllm`` (built if needed)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "lane.sh"), LANE],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        fail(f"scripts/lane.sh {LANE} failed: {proc.stderr[-2000:]}")
    return str(Path(proc.stdout.strip().splitlines()[-1]) / "bin" / "python")


def tree_pin(tree: Path) -> str:
    pin = tree / ".github" / "vllm-release-tag.commit"
    return "".join(pin.read_text().split()) if pin.is_file() else ""


def _groups(bug_file: str) -> dict[str, Any]:
    def module(path: str) -> str:
        return path.removesuffix(".py").replace("/", ".")

    def in_files(paths: list[str]) -> Any:
        names = tuple(module(p) for p in paths)
        return lambda classname, _: classname.startswith(names)

    bug = module(bug_file)
    return {
        "balance UTs": in_files(BALANCE_UTS),
        "gate test": in_files([GATE_TEST]),
        "env switch": lambda classname, name: (
            classname.startswith(bug) and name.split("[")[0] in BUG_TESTS
        ),
    }


def run_row(tree_name: str, tree: Path, ref: Ref, junit: Path) -> dict[str, Any]:
    """One row: the two pytest runs of ``tree`` on ``ref``."""
    paths = [str(tree), str(HERE)]
    if ref.overlay is not None:
        paths.insert(0, str(ref.overlay))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    pinned = tree_pin(tree) == f"v{ref.version}"
    left_out = [] if pinned else [p for p in BALANCE_UTS if p in PINNED_ONLY]
    files = [p for p in BALANCE_UTS if p not in left_out]
    bug_file = BUG_FILE if tree_name != "main" else BUG_COPY
    has_gate = (tree / GATE_TEST).is_file()
    args = [*files, *([GATE_TEST] if has_gate else [])]
    args += [f"{bug_file}::{name}" for name in BUG_TESTS]
    proc, tail = run_pytest(
        tree, args, env, ref.python, junit, quiet_failures=tree_name == "main"
    )
    groups: dict[str, Any] = main_report.junit_counts(junit, _groups(bug_file))
    if not has_gate:
        groups["gate test"] = None
    platform, platform_tail = run_pytest(tree, PLATFORM_RUN, env, ref.python)
    groups["test_platform -k balance"] = summary_counts(platform_tail)
    return {
        "tree": tree_name,
        "version": ref.version,
        "seam": ref.kind == "seam",
        "seam_probed": ref.seam,
        "vllm": ref.vllm_file,
        "stood_in": list(ref.stood_in),
        "left_out": {p: PINNED_ONLY[p] for p in left_out},
        "returncode": proc.returncode if platform.returncode == 0 else -1,
        "summary": tail,
        "groups": groups,
    }


def summary_counts(tail: str) -> dict[str, int]:
    """Outcome counts from pytest's last line (``3 passed, 1 skipped ...``)."""
    found = re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail)
    return {("error" if k.startswith("error") else k): int(n) for n, k in found}


def changed_files(tree: Path, base: str, other: Path | None = None) -> list[str]:
    """Files ``tree``'s patches change since ``base`` (``other``: those of
    that tree's patches which exist in ``tree``)."""
    repo = other or tree
    names = git(repo, "diff", "--name-only", base, "HEAD").stdout.split()
    return [name for name in names if (tree / name).is_file()]


def lint_trees(trees: dict[str, Path], base: str) -> dict[str, list[dict[str, str]]]:
    bin_dir = their_lint.tools(trees["main"])
    last = trees[list(TREES)[-1]]
    results = {}
    for name, tree in trees.items():
        files = changed_files(tree, base, last if name == "main" else None)
        results[name] = their_lint.run(tree, files, bin_dir)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the scratch trees")
    parser.add_argument(
        "--vllm-python",
        action="append",
        help="another vLLM's Python to run on (repeatable; default: the "
        f"{LANE} lane's, built by scripts/lane.sh; this Python's own: only it)",
    )
    args = parser.parse_args()
    src = source()
    pinned = "".join(PIN_FILE.read_text().split())
    head = git(src, "rev-parse", "HEAD").stdout.strip()
    pythons = [sys.executable, *(args.vllm_python or [lane_python()])]
    pythons = list(dict.fromkeys(str(Path(p).absolute()) for p in pythons))
    all_refs = [ref for python in pythons for ref in refs(python)]
    patches = series()
    with scratch_dir("vab-downstream-main-", keep=args.keep) as scratch:
        trees = {}
        for name, count in TREES.items():
            trees[name] = scratch / name
            make_tree(src, trees[name], patches[:count])
        (trees["main"] / BUG_COPY).write_bytes(
            (trees["patch0"] / BUG_FILE).read_bytes()
        )
        rows: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory() as junit_dir:
            for ref in all_refs:
                for name, tree in trees.items():
                    key = f"{name}@{ref.version}-{ref.kind}"
                    junit = Path(junit_dir) / f"{key}.xml"
                    rows[key] = run_row(name, tree, ref, junit)
        lint = lint_trees(trees, head)
        file = check_file(trees["patch2"])
        summary: dict[str, Any] = {
            "source": str(src),
            "head": head,
            "pinned": pinned,
            "at_pin": head == pinned,
            "tree_vllm_pin": tree_pin(trees["main"]),
            "patches": [p.name for p in patches],
            "refs": [
                {
                    "version": r.version,
                    "kind": r.kind,
                    "python": r.python,
                    "overlay": str(r.overlay or ""),
                    "stood_in": list(r.stood_in),
                }
                for r in all_refs
            ],
            "rows": rows,
            "rows_ok": {key: main_report.row_ok(row) for key, row in rows.items()},
            "lint": lint,
            "lint_ok": {name: their_lint.ok(r) for name, r in lint.items()},
            "patch2_file": file,
        }
        summary["ok"] = bool(
            all(summary["rows_ok"].values())
            and all(summary["lint_ok"].values())
            and file_ok(file)
        )
        if args.keep:
            summary["scratch"] = str(scratch)
        print(main_report.table(rows))
        print(main_report.notes(rows))
        print()
        print(
            main_report.lint_table({n: their_lint.summary(r) for n, r in lint.items()})
        )
        return report(summary)


if __name__ == "__main__":
    sys.exit(main())
