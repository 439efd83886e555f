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
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
PATCHED_FILE = Path("vllm_ascend/patch/platform/patch_balance_schedule.py")
MAX_LINES = 100
TEST_RUNS: list[list[str]] = [
    ["tests/ut/patch/platform/test_patch_balance_schedule.py"],
    ["tests/ut/test_platform.py", "-k", "balance"],
]
# Fixed identity and dates: the same series gives the same commits.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "vllm-ascend-balance downstream",
    "GIT_AUTHOR_EMAIL": "downstream@localhost",
    "GIT_COMMITTER_NAME": "vllm-ascend-balance downstream",
    "GIT_COMMITTER_EMAIL": "downstream@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


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


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
    )


def make_repo(sdist: Path, repo: Path, version: str) -> None:
    shutil.copytree(sdist, repo, ignore=shutil.ignore_patterns(".complete"))
    for args in (
        ("init", "-q"),
        ("add", "-Af"),
        ("commit", "-q", "-m", f"vllm-ascend {version} (release sdist)"),
    ):
        result = git(repo, *args)
        if result.returncode:
            raise SystemExit(f"git {args[0]} failed: {result.stderr}")


def apply_series(repo: Path, series_dir: Path) -> list[str]:
    names = [
        line.strip()
        for line in (series_dir / "series").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    result = git(repo, "am", "-q", "--keep-cr", *[str(series_dir / n) for n in names])
    if result.returncode:
        git(repo, "am", "--abort")
        raise SystemExit(f"git am failed: {result.stdout}{result.stderr}")
    return names


def check_file(repo: Path) -> dict[str, object]:
    text = (repo / PATCHED_FILE).read_text()
    lines = len(text.splitlines())
    return {
        "lines": lines,
        "under_limit": lines < MAX_LINES,
        "copies_schedule": "def schedule(" in text,
    }


def run_tests(repo: Path) -> list[dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(HERE)])}
    results = []
    for args in TEST_RUNS:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "ut_stubs",
            "-q",
            "-p",
            "no:cacheprovider",
            *args,
        ]
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        tail = proc.stdout.strip().splitlines()[-1:] or [""]
        results.append(
            {"args": args, "returncode": proc.returncode, "summary": tail[0]}
        )
        if proc.returncode:
            sys.stdout.write(proc.stdout[-6000:] + proc.stderr[-3000:])
    return results


def guard_traces(repo: Path, sdist: Path) -> dict[str, object]:
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
    scratch = Path(tempfile.mkdtemp(prefix="vab-downstream-"))
    repo = scratch / f"vllm_ascend-{version}"
    try:
        sdist = sdist_tree()
        make_repo(sdist, repo, version)
        patches = apply_series(repo, series_dir)
        summary: dict[str, object] = {
            "tree": str(repo),
            "patches": patches,
            "file": check_file(repo),
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
        file_ok = (
            summary["file"]["under_limit"] and not summary["file"]["copies_schedule"]
        )  # type: ignore[index]
        tests_ok = all(t["returncode"] == 0 for t in summary.get("tests", []))  # type: ignore[union-attr]
        summary["ok"] = bool(file_ok and tests_ok and guard_ok)
        print(json.dumps(summary))
        return 0 if summary["ok"] else 1
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
