# SPDX-License-Identifier: Apache-2.0
"""Apply the downstream series to vllm-ascend's release sdist and run
vllm-ascend's own unit tests for the balance patch and the platform.

    python downstream_patch/apply.py [--keep] [--no-tests]

1. The vllm-ascend sdist of ``.github/vllm-ascend.version``, from the cache
   (``upstream_patch/series.py sdist --project vllm-ascend`` fetches it).
2. A scratch copy made a git repository (one commit: the sdist), then
   ``git am`` of ``downstream_patch/vllm-ascend/v<version>/series``, as
   ``scripts/fork.sh`` does for vLLM.
3. Checks on the patched ``patch_balance_schedule.py``: under 100 lines, no
   ``def schedule(``.
4. vllm-ascend's ``tests/ut/patch/platform/test_patch_balance_schedule.py``
   and ``tests/ut/test_platform.py -k balance``, run by this Python (the
   ascend lane's venv) with ``PYTHONPATH`` at the patched tree, so it shadows
   the installed ``vllm_ascend``; vllm-ascend's ``tests/ut/conftest.py``
   stubs apply as in its CI.

5. The prefill-node preemption guard on a real scheduler, release vs patched
   tree (``guard_trace.py``): the same steps, no preemption when guarded.

The last line of stdout is a JSON summary; exit status 0 only if every step
passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import tree_tools

ROOT = Path(__file__).resolve().parents[1]
HERE = tree_tools.HERE
TEST_RUNS: list[list[str]] = [
    ["tests/ut/patch/platform/test_patch_balance_schedule.py"],
    ["tests/ut/test_platform.py", "-k", "balance"],
]


def ascend_version() -> str:
    return "".join((ROOT / ".github" / "vllm-ascend.version").read_text().split())


def sdist_tree() -> Path:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "upstream_patch" / "series.py"),
            "sdist",
            "--project",
            "vllm-ascend",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(out.strip().splitlines()[-1])


def make_repo(sdist: Path, repo: Path, version: str) -> None:
    shutil.copytree(sdist, repo, ignore=shutil.ignore_patterns(".complete"))
    for args in (
        ("init", "-q"),
        ("add", "-Af"),
        ("commit", "-q", "-m", f"vllm-ascend {version} (release sdist)"),
    ):
        result = tree_tools.git(repo, *args)
        if result.returncode:
            raise SystemExit(f"git {args[0]} failed: {result.stderr}")


def apply_series(repo: Path, series_dir: Path) -> list[str]:
    names = tree_tools.series_names(series_dir)
    result = tree_tools.git(
        repo, "am", "-q", "--keep-cr", *[str(series_dir / n) for n in names]
    )
    if result.returncode:
        tree_tools.git(repo, "am", "--abort")
        raise SystemExit(f"git am failed: {result.stdout}{result.stderr}")
    return names


def run_tests(repo: Path) -> list[dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(HERE)])}
    results = []
    for args in TEST_RUNS:
        proc, tail = tree_tools.run_pytest(repo, args, env)
        results.append({"args": args, "returncode": proc.returncode, "summary": tail})
    return results


def guard_traces(repo: Path, sdist: Path) -> dict[str, Any]:
    """The prefill-node guard's trace (``guard_trace.py``) with the release's
    code and with the patched tree: equal, preemptions only unguarded."""
    traces = {}
    for name, tree in (("release", sdist), ("patched", repo)):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tree)])}
        proc = subprocess.run(
            [sys.executable, str(HERE / "guard_trace.py")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise SystemExit(f"guard_trace.py failed on {name}: {proc.stderr[-3000:]}")
        traces[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert traces[name]["module"].startswith(str(tree)), traces[name]["module"]
    release, patched = traces["release"], traces["patched"]

    def preemptions(steps: list) -> int:
        return sum(len(preempted) for _, preempted in steps)

    return {
        "equal": release["guarded"] == patched["guarded"]
        and release["unguarded"] == patched["unguarded"],
        "preemptions_guarded": preemptions(patched["guarded"]),
        "preemptions_unguarded": preemptions(patched["unguarded"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the scratch tree")
    parser.add_argument("--no-tests", action="store_true")
    args = parser.parse_args()
    version = ascend_version()
    series_dir = HERE / "vllm-ascend" / f"v{version}"
    with tree_tools.scratch_dir("vab-downstream-", keep=args.keep) as scratch:
        repo = scratch / f"vllm_ascend-{version}"
        sdist = sdist_tree()
        make_repo(sdist, repo, version)
        patches = apply_series(repo, series_dir)
        summary: dict[str, Any] = {
            "tree": str(repo),
            "patches": patches,
            "file": tree_tools.check_file(repo),
        }
        if not args.no_tests:
            summary["tests"] = run_tests(repo)
            summary["guard"] = guard = guard_traces(repo, sdist)
            guard_ok = (
                guard["equal"]
                and guard["preemptions_guarded"] == 0
                and guard["preemptions_unguarded"] > 0
            )
        else:
            guard_ok = True
        tests_ok = all(t["returncode"] == 0 for t in summary.get("tests", []))
        summary["ok"] = bool(
            tree_tools.file_ok(summary["file"]) and tests_ok and guard_ok
        )
        return tree_tools.report(summary)


if __name__ == "__main__":
    sys.exit(main())
