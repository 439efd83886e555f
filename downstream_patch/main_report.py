# SPDX-License-Identifier: Apache-2.0
"""What ``apply_main.py`` makes of its runs: per-group test counts from a
run's JUnit XML, what each group must show on each row, and the Markdown
tables it prints.

A row is one tree (``main``, ``patch0``, ``patch1``, ``patch2``: main with
the first 0..3 patches of the series) on one vLLM ref (a release, stock or
with the seam). Its groups: ``balance UTs`` (vllm-ascend's balance-related
unit test files), ``gate test`` (the series' end-to-end gate test),
``env switch`` (patch 0's test of the environment switch, on ``main`` taken
from patch 0 into the tree: it must fail there) and ``test_platform -k
balance`` (a run of its own). Imported as a sibling module.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUTCOMES = ("passed", "failed", "error", "skipped")


def junit_counts(
    path: Path, groups: dict[str, Callable[[str, str], bool]]
) -> dict[str, dict[str, int]]:
    """Outcome counts per group; a test case (``classname``, ``name``)
    counts in every group whose predicate accepts it."""
    counts: dict[str, dict[str, int]] = {group: {} for group in groups}
    if not path.is_file():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        outcome = next((o for o in ("failure", "error", "skipped") if o in tags), "")
        outcome = {"failure": "failed", "": "passed"}.get(outcome, outcome)
        for group, accepts in groups.items():
            if accepts(case.get("classname", ""), case.get("name", "")):
                counts[group][outcome] = counts[group].get(outcome, 0) + 1
    return counts


def gate_expected(tree: str, seam: bool) -> str:
    """``absent`` (main, patch 0: no such test), ``ran`` (patch 1 on both
    refs, patch 2 with the seam), ``skipped`` (patch 2 without the seam,
    where balance is refused)."""
    if tree in ("main", "patch0"):
        return "absent"
    return "ran" if seam or tree == "patch1" else "skipped"


def gate_status(counts: dict[str, int] | None) -> str:
    """``ran`` (passed, nothing failed; patch 1 without the seam skips its
    seam-only cases), ``skipped`` (all skipped), ``absent``, else ``bad``."""
    if counts is None:
        return "absent"
    if counts.get("passed") and not (set(counts) - {"passed", "skipped"}):
        return "ran"
    if counts.get("skipped") and not (set(counts) - {"skipped"}):
        return "skipped"
    return "bad"


def bug_ok(tree: str, counts: dict[str, int]) -> bool:
    """Patch 0's env-switch test fails on ``main`` (its env-on cases; the
    env-off controls pass) and passes on every patched tree."""
    if tree == "main":
        return counts.get("failed", 0) > 0 and counts.get("passed", 0) > 0
    return counts.get("passed", 0) > 0 and set(counts) == {"passed"}


def suite_ok(counts: dict[str, int]) -> bool:
    return (
        counts.get("passed", 0) > 0
        and not counts.get("failed")
        and not counts.get("error")
    )


def row_ok(row: dict[str, Any]) -> bool:
    """Every check of a row (see the module docstring)."""
    groups = row["groups"]
    return bool(
        row["seam_probed"] == row["seam"]
        and row["returncode"] in (0, 1)
        and suite_ok(groups["balance UTs"])
        and suite_ok(groups["test_platform -k balance"])
        and gate_status(groups["gate test"]) == gate_expected(row["tree"], row["seam"])
        and bug_ok(row["tree"], groups["env switch"])
    )


def _cell(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "-"
    return ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o)) or "-"


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    head = [
        "tree",
        "vLLM",
        "seam",
        "balance UTs",
        "test_platform -k balance",
        "gate test",
        "env-switch test",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows.values():
        groups = row["groups"]
        gate = groups["gate test"]
        cells = [
            row["tree"],
            row["version"],
            str(row["seam"]),
            _cell(groups["balance UTs"]),
            _cell(groups["test_platform -k balance"]),
            f"{gate_status(gate)} ({_cell(gate)})" if gate else "absent",
            _cell(groups["env switch"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(rows: dict[str, dict[str, Any]]) -> str:
    """Per vLLM: the modules stood in for and the tests left out, if any."""
    seen: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for row in rows.values():
        seen.setdefault(
            row["version"], (tuple(row["stood_in"]), tuple(row["left_out"]))
        )
    lines = []
    for version, (stood_in, left_out) in seen.items():
        if stood_in or left_out:
            lines.append(
                f"vLLM {version}: stood in for: {', '.join(stood_in) or 'none'}; "
                f"left out: {', '.join(left_out) or 'none'}"
            )
    return "\n".join(lines)


def lint_table(lint: dict[str, str]) -> str:
    """One line per tree: its pre-commit summary."""
    lines = ["| tree | vllm-ascend's pre-commit on the files the series changes |"]
    lines.append("|---|---|")
    lines += [f"| {tree} | {cell} |" for tree, cell in lint.items()]
    return "\n".join(lines)
