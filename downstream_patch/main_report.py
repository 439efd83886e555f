# SPDX-License-Identifier: Apache-2.0
"""What ``apply_main.py`` makes of its runs: whether a row passed, the end-to-end
gate test's status per row, and the Markdown table it prints.

A row's results are one dict per pytest run (``returncode``, ``counts`` by
outcome, ``seam``), the gate test's last (``returncode`` None where the tree
has no such file). Imported as a sibling module.
"""

from __future__ import annotations

from typing import Any

# Rows where balance scheduling can run and the series carries the gate test
# (main has no such test; patch 2 refuses balance on a vLLM without the seam).
GATE_ROWS = {"patch1@stock", "patch1@seam", "patch2@seam"}


def passed(runs: list[dict[str, Any]]) -> bool:
    """Every run but the gate test passed (no failure or error, at least one
    test passed) and the gate test, where present, failed nothing."""
    *suites, gate = runs
    return (
        all(
            run["returncode"] == 0
            and run["counts"].get("passed", 0) > 0
            and not run["counts"].get("failed")
            and not run["counts"].get("error")
            for run in suites
        )
        and gate["returncode"] in (0, None)
        and not gate["counts"].get("failed")
    )


def gate_status(run: dict[str, Any]) -> str:
    """``ran`` (passed, nothing skipped), ``skipped`` (all skipped),
    ``absent`` (no such file in the tree) or ``bad``."""
    counts = run["counts"]
    if run["returncode"] is None:
        return "absent"
    if run["returncode"] == 0 and counts.get("passed") and not counts.get("skipped"):
        return "ran"
    if run["returncode"] == 0 and counts.get("skipped") and not counts.get("passed"):
        return "skipped"
    return "bad"


def gate_ok(key: str, status: str) -> bool:
    if key in GATE_ROWS:
        return status == "ran"
    return status in ("absent", "skipped")


def _counts(counts: dict[str, int]) -> str:
    # Deselected tests (the -k filter) are not outcomes.
    shown = [f"{n} {k}" for k, n in sorted(counts.items()) if k != "deselected"]
    return ", ".join(shown) or "-"


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """The rows as a Markdown table: tree@ref, whether that vLLM has the
    seam, each run's pytest counts, the gate test's status."""
    names = ["balance UTs", "test_platform -k balance", "gate test"]
    head = ["row", "seam", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, results in runs.items():
        cells = [key, str(results[0]["seam"])]
        for run in results[:-1]:
            counts = run["counts"]
            cells.append(_counts(counts))
        gate = results[-1]
        detail = _counts(gate["counts"])
        status = gate_status(gate)
        cells.append(f"{status} ({detail})" if detail else status)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
