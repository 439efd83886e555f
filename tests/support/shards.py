# SPDX-License-Identifier: Apache-2.0
"""The release lane in shards, by test file, so that scripts/test's two
workers share its length.

The release lane is the suite's long pole (every lane-independent test runs
there only). scripts/test, running every lane, queues it as
:data:`SHARDS` entries (``release:1`` ... ``release:3``), each a pytest session
on a list of test files; ``scripts/test --lane release`` alone still runs
the whole lane in one session.

The split is deterministic: the files' recorded pytest seconds on the
release lane (:data:`TABLE`; a file not in it counts :data:`DEFAULT_S`),
longest first, each onto the shard with the least so far (ties: the lower
shard, then the file name). Files that share a session-scoped deployment
(:data:`TOGETHER`) are one unit, so the deployment still starts once.
Every ``tests/test_*.py`` file is in exactly one shard (tests/test_shards.py
checks it by collecting each shard).

Command line (scripts/test uses the first)::

    python -m tests.support.shards list COUNT INDEX    # shard INDEX (1-based)
    python -m tests.support.shards table JUNIT.xml...  # a new TABLE, as JSON

``table`` sums pytest's per-test times (set-up, call and tear-down) per file
from the JUnit XML files of a run (``VAB_DURATIONS_DIR=DIR scripts/test``
writes one per lane and shard).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tests.support.lanes import REPO_ROOT

#: The release lane's recorded pytest seconds per test file.
TABLE = REPO_ROOT / "tests" / "data" / "release_durations.json"
#: How many shards scripts/test makes of the release lane (two workers take
#: them and the other lanes from one queue; scripts/test reads this line).
SHARDS = 3
#: Seconds counted for a test file not in :data:`TABLE` (a new file).
DEFAULT_S = 10.0
#: Test files that share a session-scoped server
#: (tests/support/shared_server.py): always in the same shard.
TOGETHER: tuple[tuple[str, ...], ...] = (
    ("tests/test_prometheus_scrape.py", "tests/test_serve_metrics.py"),
)


def suite_files(root: Path = REPO_ROOT) -> list[str]:
    """Every file pytest collects under ``tests/`` (its default
    ``test_*.py`` pattern), relative to ``root``, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.glob("tests/test_*.py"))


def load_table(path: Path = TABLE) -> dict[str, float]:
    return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}


def split(
    files: Sequence[str],
    seconds: Mapping[str, float],
    count: int,
    together: Iterable[Sequence[str]] = TOGETHER,
) -> list[list[str]]:
    """``files`` in ``count`` shards of about equal recorded seconds (module
    docstring); each shard's files sorted.

    Raises:
        ValueError: ``count`` < 1.
    """
    if count < 1:
        raise ValueError(f"shard count {count}: expected 1 or more")
    units: list[list[str]] = []
    grouped: set[str] = set()
    for group in together:
        present = [f for f in group if f in files]
        if present:
            units.append(present)
            grouped.update(present)
    units += [[f] for f in files if f not in grouped]

    def cost(unit: list[str]) -> float:
        return sum(seconds.get(f, DEFAULT_S) for f in unit)

    units.sort(key=lambda unit: (-cost(unit), unit[0]))
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for unit in units:
        index = min(range(count), key=lambda i: (loads[i], i))
        shards[index] += unit
        loads[index] += cost(unit)
    return [sorted(shard) for shard in shards]


def cover_problems(full: Sequence[str], shards: Sequence[Sequence[str]]) -> list[str]:
    """What is wrong with ``shards`` as a partition of ``full`` (test ids or
    files): each one missing, duplicated or unknown; empty when none."""
    seen: dict[str, int] = {}
    for shard in shards:
        for item in shard:
            seen[item] = seen.get(item, 0) + 1
    wanted = set(full)
    return (
        [f"missing: {item}" for item in full if item not in seen]
        + [f"in {n} shards: {item}" for item, n in seen.items() if n > 1]
        + [f"not in the lane: {item}" for item in seen if item not in wanted]
    )


def table_from_junit(paths: Iterable[Path], root: Path = REPO_ROOT) -> dict[str, float]:
    """Seconds per test file summed over JUnit XML reports (pytest's
    ``classname`` is the module's dotted path, then any class)."""
    files = set(suite_files(root))
    totals: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            parts = case.get("classname", "").split(".")
            for end in range(len(parts), 0, -1):
                name = "/".join(parts[:end]) + ".py"
                if name in files:
                    totals[name] = totals.get(name, 0.0) + float(case.get("time", 0))
                    break
    return {name: round(totals[name], 1) for name in sorted(totals)}


def main(argv: Sequence[str]) -> int:
    usage = "usage: shards.py list COUNT INDEX | table JUNIT.xml..."
    if len(argv) == 3 and argv[0] == "list":
        count, index = int(argv[1]), int(argv[2])
        if not 1 <= index <= count:
            print(f"shards.py: shard {index} of {count}: expected 1..{count}",
                  file=sys.stderr)  # fmt: skip
            return 2
        print("\n".join(split(suite_files(), load_table(), count)[index - 1]))
        return 0
    if len(argv) >= 2 and argv[0] == "table":
        print(json.dumps(table_from_junit(Path(p) for p in argv[1:]), indent=1))
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
