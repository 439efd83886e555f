# SPDX-License-Identifier: Apache-2.0
"""The release lane's shards (tests/support/shards.py, used by scripts/test):
every test of the lane in exactly one shard, the shards about equal by the
recorded durations, the files sharing a server in one shard.

The real check collects the whole lane (``pytest --collect-only -q``, this
lane) and places every collected test by its file into the shards
scripts/test runs: the union is the lane, no test twice, and no test sits
in a file the split does not know. (A shard is a list of files given to
pytest, and which tests a file holds does not depend on the other files
given with it, so the lane is collected once, not once per shard.)
Negative controls: a split that drops a file, or puts one in two shards, is
reported by the same check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import shards
from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

FILES = [f"tests/test_{c}.py" for c in "abcdefg"]
SECONDS = {"tests/test_a.py": 100.0, "tests/test_b.py": 60.0, "tests/test_c.py": 50.0}


@pytest.mark.parametrize("count", [1, 2, 3])
def test_each_file_in_exactly_one_shard(count: int) -> None:
    files = shards.suite_files()
    split = shards.split(files, shards.load_table(), count)
    assert len(split) == count and all(split)
    assert shards.cover_problems(files, split) == []


def test_split_is_balanced_and_deterministic() -> None:
    split = shards.split(FILES, SECONDS, 2)
    assert split == shards.split(list(reversed(FILES)), SECONDS, 2)
    # Longest first onto the lighter shard: 100 | 60 + 50, then the four
    # unrecorded files (DEFAULT_S each) each onto the lighter one.
    assert split[0][0] == "tests/test_a.py" and "tests/test_b.py" in split[1]
    loads = [sum(SECONDS.get(f, shards.DEFAULT_S) for f in s) for s in split]
    assert max(loads) - min(loads) <= max(SECONDS.values())


def test_files_sharing_a_server_stay_together() -> None:
    files = shards.suite_files()
    for count in (2, 3, 5):
        for group in shards.TOGETHER:
            homes = {
                i for i, s in enumerate(shards.split(files, {}, count)) for f in group
                if f in s
            }  # fmt: skip
            assert len(homes) == 1, (count, group, homes)


def test_negative_controls_a_bad_split_is_reported() -> None:
    split = shards.split(FILES, SECONDS, 2)
    dropped = [split[0][1:], split[1]]
    assert shards.cover_problems(FILES, dropped) == [f"missing: {split[0][0]}"]
    twice = [split[0], split[1] + [split[0][0]]]
    assert shards.cover_problems(FILES, twice) == [f"in 2 shards: {split[0][0]}"]


def test_table_names_only_existing_files() -> None:
    """A renamed or removed test file leaves no stale entry behind."""
    stale = set(shards.load_table()) - set(shards.suite_files())
    assert not stale, f"{shards.TABLE.name} names files that do not exist: {stale}"


def test_table_from_junit(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_doctor" name="a" time="2.5"/>'
        '<testcase classname="tests.test_doctor" name="b" time="1.0"/>'
        '<testcase classname="tests.test_collectives.TestX" name="c" time="4"/>'
        "</testsuite></testsuites>"
    )
    assert shards.table_from_junit([report, report]) == {
        "tests/test_collectives.py": 8.0,
        "tests/test_doctor.py": 7.0,
    }


def test_bad_shard_index_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert shards.main(["list", "2", "3"]) == 2
    assert "shard 3 of 2: expected 1..2" in capsys.readouterr().err


def _collected_ids() -> list[str]:
    """The lane's test ids, as ``pytest --collect-only -q`` lists them."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q",
         "-p", "no:cacheprovider"],
        cwd=REPO_ROOT, env=env, text=True, timeout=600,  # hang guard only
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    return [
        ln for ln in proc.stdout.splitlines() if ln.startswith("tests/") and "::" in ln
    ]


def placed(ids: list[str], split: list[list[str]]) -> list[list[str]]:
    """``ids`` in the shards of ``split`` (lists of files), by their file."""
    return [[i for i in ids if i.split("::", 1)[0] in files] for files in split]


@pytest.mark.slow
def test_shards_collect_to_the_whole_lane() -> None:
    """scripts/test's shards (``shards.py list SHARDS N``) hold the lane's
    tests, each once."""
    split = shards.split(shards.suite_files(), shards.load_table(), shards.SHARDS)
    full = _collected_ids()
    assert full, "the lane collects no test"
    assert shards.cover_problems(full, placed(full, split)) == []


def test_negative_control_a_test_outside_the_split_is_reported() -> None:
    """A collected test in a file no shard lists (a test module the split's
    file list misses) is reported missing."""
    ids = ["tests/test_a.py::t1", "tests/test_b.py::t2", "tests/sub/test_c.py::t3"]
    split = [["tests/test_a.py"], ["tests/test_b.py"]]
    assert shards.cover_problems(ids, placed(ids, split)) == [
        "missing: tests/sub/test_c.py::t3"
    ]
