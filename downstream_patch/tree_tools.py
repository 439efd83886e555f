# SPDX-License-Identifier: Apache-2.0
"""What ``apply.py`` (the release series on the sdist) and ``apply_main.py``
(the main series on a checkout) share: git with a fixed identity, the series
file, vllm-ascend's unit tests run against a patched tree, and the checks on
the patched ``patch_balance_schedule.py``.

Imported as a sibling module (both scripts run with this directory first on
``sys.path``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PATCHED_FILE = Path("vllm_ascend/patch/platform/patch_balance_schedule.py")
MAX_LINES = 100
# Fixed identity and dates: the same series gives the same commits.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "vllm-ascend-balance downstream",
    "GIT_AUTHOR_EMAIL": "downstream@localhost",
    "GIT_COMMITTER_NAME": "vllm-ascend-balance downstream",
    "GIT_COMMITTER_EMAIL": "downstream@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git -C repo *args`` with :data:`GIT_ENV`; output captured, never
    raises on a non-zero exit."""
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
    )


def series_names(series_dir: Path) -> list[str]:
    """The patch file names listed in ``series_dir/series``, in order
    (blank lines and ``#`` comments skipped, as ``quilt`` reads it)."""
    return [
        line.strip()
        for line in (series_dir / "series").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def run_pytest(
    tree: Path,
    args: list[str],
    env: dict[str, str],
    python: str = sys.executable,
    junit: Path | None = None,
    quiet_failures: bool = False,
) -> tuple[subprocess.CompletedProcess[str], str]:
    """vllm-ascend's pytest ``args`` run by ``python`` in ``tree`` with
    ``-p ut_stubs`` (``env`` must put this directory on ``PYTHONPATH``),
    writing a JUnit XML file to ``junit`` if given: (the process, its last
    stdout line: pytest's summary). A failing run's output tail goes to
    stdout unless ``quiet_failures`` (a run expected to fail)."""
    cmd = [python, "-m", "pytest", "-p", "ut_stubs", "-q", "-p", "no:cacheprovider"]
    if junit is not None:
        cmd.append(f"--junitxml={junit}")
    proc = subprocess.run(
        [*cmd, *args], cwd=tree, env=env, capture_output=True, text=True
    )
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode and not quiet_failures:
        sys.stdout.write(proc.stdout[-6000:] + proc.stderr[-3000:])
    return proc, tail


def code_lines(text: str) -> int:
    """Lines of ``text`` (Python source) that hold code: not blank, not a
    comment, not inside a module, class or function docstring."""
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(
            node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                end = body[0].end_lineno or body[0].lineno
                doc_lines.update(range(body[0].lineno, end + 1))
    return sum(
        1
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#") and number not in doc_lines
    )


def check_file(tree: Path) -> dict[str, Any]:
    """The patched ``patch_balance_schedule.py``: ``lines`` (all),
    ``code_lines`` (:func:`code_lines`: the docstrings on where the gather
    runs are kept on purpose and do not count), ``under_limit`` (fewer than
    :data:`MAX_LINES` code lines), ``copies_schedule`` (still defines
    ``schedule``)."""
    text = (tree / PATCHED_FILE).read_text()
    code = code_lines(text)
    return {
        "lines": len(text.splitlines()),
        "code_lines": code,
        "under_limit": code < MAX_LINES,
        "copies_schedule": "def schedule(" in text,
    }


def file_ok(check: dict[str, Any]) -> bool:
    """A :func:`check_file` result within the limits: short, no copy."""
    return bool(check["under_limit"] and not check["copies_schedule"])


@contextmanager
def scratch_dir(prefix: str, *, keep: bool) -> Iterator[Path]:
    """A fresh temporary directory, removed afterwards unless ``keep``."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def report(summary: dict[str, Any]) -> int:
    """Print ``summary`` as the last stdout line (JSON); the exit status."""
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1
