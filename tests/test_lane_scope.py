# SPDX-License-Identifier: Apache-2.0
"""The suite's lane selection (``tests/conftest.py``): a test runs on the
lanes its ``lane_scope`` marker names, is deselected (not skipped) on the
others, the selection is printed with its counts, and a test without the
marker (or naming an unknown lane) fails the collection.

Each case is a real pytest session in a subprocess, on a scratch directory
whose ``conftest.py`` is this suite's (imported, so its hooks run as they do
here), with small test files written for the case.

Negative controls: the unmarked test and the misspelled lane must each make
the session fail (pytest's usage-error exit 4), naming the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

CONFTEST = "from tests.conftest import *  # noqa: F403\n"
FILES = {
    "test_everywhere.py": (
        "import pytest\n"
        "pytestmark = pytest.mark.lane_scope('release', 'main', 'fork', 'ascend')\n"
        "def test_a(): pass\n"
    ),
    "test_release_only.py": (
        "import pytest\n"
        "pytestmark = pytest.mark.lane_scope('release')\n"
        "def test_b(): pass\n"
        "@pytest.mark.lane_scope('main')\n"
        "def test_c_overrides_the_module(): pass\n"
    ),
}


def _session(tmp: Path, lane: str, files: dict[str, str], *args: str):
    for name, text in {"conftest.py": CONFTEST, **files}.items():
        (tmp / name).write_text(text)
    env = dict(os.environ, VAB_LANE=lane)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("lane", "ran", "line"),
    [
        (
            "release",
            {"test_a", "test_b"},
            "selects 2 of 3 collected tests, deselects 1",
        ),
        ("main", {"test_a", "test_c_overrides_the_module"}, "selects 2 of 3"),
    ],
)
def test_each_lane_runs_its_scope(
    tmp_path: Path, lane: str, ran: set[str], line: str
) -> None:
    proc = _session(tmp_path, lane, FILES)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    passed = {
        ln.split("::")[-1] for ln in proc.stdout.splitlines() if ln.startswith("PASSED")
    }
    assert passed == ran, proc.stdout[-3000:]
    assert f"lane {lane}: lane_scope {line}" in proc.stdout
    assert "deselected" in proc.stdout and "skipped" not in proc.stdout


def test_negative_control_an_undeclared_test_fails_the_collection(
    tmp_path: Path,
) -> None:
    bad = {
        "test_unmarked.py": "def test_x(): pass\n",
        "test_misspelled.py": (
            "import pytest\n@pytest.mark.lane_scope('relase')\ndef test_y(): pass\n"
        ),
    }
    proc = _session(tmp_path, "release", {**FILES, **bad})
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "test_unmarked.py::test_x: no lane_scope marker" in proc.stderr
    assert (
        "test_misspelled.py::test_y: lane_scope('relase',): expected one or more "
        "of release, main, fork, ascend" in proc.stderr
    )
    assert "2 test(s) do not" in proc.stderr
