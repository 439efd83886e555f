# SPDX-License-Identifier: Apache-2.0
"""``scripts/cache_lock.sh``: two processes sharing one venv cache build one
at a time (a second ``scripts/lane.sh`` waits for the first instead of
deleting the venv it is installing into).

Each case runs real bash processes that source the script with a scratch
cache and record, in one shared log, when they enter and leave the locked
part; overlapping intervals mean two builders at once. The holder sleeps
inside the lock, so the waiter is certain to arrive while it is held: the
verdict is about ordering, not speed.

Negative control: the same pair with ``cache_lock`` replaced by a no-op
overlaps (the check would catch a lock that does not lock).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

SCRIPT = REPO_ROOT / "scripts" / "cache_lock.sh"
BUILDER = """
set -euo pipefail
cache={cache}
. {script}
{lock}
echo "enter $1" >> {log}
[ "$1" = first ] && touch {cache}/held
sleep {hold}
echo "leave $1" >> {log}
"""


def _pair(tmp: Path, lock: str) -> tuple[list[str], str]:
    log = tmp / "log"
    body = BUILDER.format(
        cache=tmp / "cache", script=SCRIPT, lock=lock, log=log, hold=2
    )
    (tmp / "cache").mkdir()
    first = subprocess.Popen(
        ["bash", "-c", body, "builder", "first"], stderr=subprocess.PIPE, text=True
    )
    held = tmp / "cache" / "held"
    for _ in range(600):  # the first builder is inside the lock
        if held.exists():
            break
        subprocess.run(["sleep", "0.05"], check=True)
    second = subprocess.run(
        ["bash", "-c", body, "builder", "second"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    first.wait(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    return log.read_text().split("\n")[:-1], second.stderr


def test_second_builder_waits_for_the_first(tmp_path: Path) -> None:
    events, stderr = _pair(tmp_path, "cache_lock lane-release")
    assert events == ["enter first", "leave first", "enter second", "leave second"]
    assert "another process is building lane-release; waiting" in stderr


def test_negative_control_without_the_lock_they_overlap(tmp_path: Path) -> None:
    events, _ = _pair(tmp_path, "true")
    assert events[:2] == ["enter first", "enter second"]
