# SPDX-License-Identifier: Apache-2.0
"""The WAITING-loop shapes ``resync`` knows, read by AST off a release's
``Scheduler.schedule()``: the cap check (``if <count> >= self.max_num_*:
break``, v0.23.0 to v0.33.0) or the 0.34 loop (a cap assignment and
``PauseState.UNPAUSED`` tests), and what the hook's text says about it."""

from __future__ import annotations

import ast
from typing import NamedTuple

from .constants import SCHEDULER_REL
from .lanes import SeriesError


def breaks(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.If)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Break)
        and not stmt.orelse
    )


def is_cap_test(test: ast.expr) -> bool:
    """``<count> >= self.max_num_*`` or ``<count> == self.max_num_*``."""
    return any(
        isinstance(op, (ast.GtE, ast.Eq))
        and isinstance(right, ast.Attribute)
        and isinstance(right.value, ast.Name)
        and right.value.id == "self"
        and right.attr.startswith("max_num_")
        for node in ast.walk(test)
        if isinstance(node, ast.Compare)
        for op, right in zip(node.ops, node.comparators, strict=True)
    )


def class_method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise SeriesError(f"no {cls}.{name}() in {SCHEDULER_REL}")


def comment_start(lines: list[str], lineno: int) -> int:
    """0-based index of the first line of the comment block right above line
    ``lineno`` (1-based) at the same indentation, or of that line itself."""
    row = lineno - 1
    indent = lines[row][: len(lines[row]) - len(lines[row].lstrip())]
    while row > 0 and lines[row - 1].startswith(indent + "#"):
        row -= 1
    return row


class Shape(NamedTuple):
    """What the hook's text says about one release, read off its source."""

    kv_queue: str | None  # the loop's variable for self.kv_holding_waiting
    queues: list[str]  # the queues the hook holds (``self.<name>``)
    skipped: list[str]  # when the waiting loop does not run
    cap: str  # the attribute the inline cap check compares with
    counts_streaming: bool  # the cap counts paused streaming sessions
    coupled: bool  # schedule() records prefill_capacity_bound
    throttle_arg: bool  # schedule() takes throttle_prefills
    local_cadence: bool  # the release has the local prefill_schedule_interval
    # The loop tests ``self._pause_state == PauseState.UNPAUSED`` (0.34 on):
    # its flag becomes that test or the hook, the hook asked only unpaused.
    pause_inline: bool = False
    # The release starts async KV loads from ``self.async_kv_waiting`` under
    # --max-num-inflight-kv-loads (0.34 on): a held step starts none.
    async_kv: bool = False

    def skipped_text(self, rst: bool) -> str:
        quote = "``" if rst else ""
        words = []
        for reason in self.skipped:
            if reason == "preempt":
                words.append("preempt")
            elif reason == "PAUSED_ALL":
                words.append(f"under {quote}PauseState.PAUSED_ALL{quote}")
            else:
                words.append("while the scheduler is paused")
        return " or ".join(words)

    def cap_text(self, rst: bool) -> str:
        quote = "``" if rst else ""
        if not self.counts_streaming:
            return f"{quote}{self.cap}{quote}"
        if rst:
            return f"``{self.cap}``, counting paused streaming sessions"
        return f"{self.cap} (running requests plus paused streaming sessions)"


def waiting_loop_guards(schedule: ast.FunctionDef, loop: ast.While) -> list[str]:
    """Why the waiting loop may not run: the test of the ``if`` around it."""
    guard = next(
        (
            node
            for node in ast.walk(schedule)
            if isinstance(node, ast.If)
            and any(child is loop for stmt in node.body for child in ast.walk(stmt))
            and "preempted_reqs" in ast.unparse(node.test)
        ),
        None,
    )
    if guard is None:
        raise SeriesError(
            f"no `if not preempted_reqs ...` around the waiting loop of "
            f"Scheduler.schedule() in {SCHEDULER_REL}: re-sync by hand"
        )
    test = ast.unparse(guard.test)
    reasons = ["preempt"]
    if "PAUSED_ALL" in test:
        reasons.append("PAUSED_ALL")
    elif "UNPAUSED" in test:
        reasons.append("paused")
    return reasons


def capacity_bound_update(schedule: ast.FunctionDef) -> ast.If | None:
    """The ``if ...: self.prefill_capacity_bound = ...`` of ``schedule()``."""
    for node in ast.walk(schedule):
        if isinstance(node, ast.If) and any(
            isinstance(stmt, ast.Assign)
            and ast.unparse(stmt.targets[0]) == "self.prefill_capacity_bound"
            for stmt in node.body
        ):
            return node
    return None


def pause_tests(loop: ast.While) -> list[ast.Compare]:
    """The ``self._pause_state == PauseState.UNPAUSED`` tests in ``loop``."""
    return [
        node
        for node in ast.walk(loop)
        if isinstance(node, ast.Compare)
        and ast.unparse(node) == "self._pause_state == PauseState.UNPAUSED"
    ]


def find_pause_loop(
    schedule: ast.FunctionDef,
) -> tuple[ast.While, ast.Assign, list[ast.Compare]] | None:
    """The 0.34 WAITING loop: ``while True:`` whose cap is an assignment
    (``loads_only = (<count> >= self.max_num_* or token_budget <= 0)``) and
    which picks its queue under ``_pause_state == PauseState.UNPAUSED``
    tests, or None."""
    for loop in ast.walk(schedule):
        if not isinstance(loop, ast.While):
            continue
        cap = next(
            (
                s
                for s in loop.body
                if isinstance(s, ast.Assign)
                and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)
                and is_cap_test(s.value)
            ),
            None,
        )
        tests = pause_tests(loop)
        if cap is not None and tests:
            return loop, cap, tests
    return None


def unknown_loop(schedule: ast.FunctionDef) -> str:
    """The one-line error for a WAITING loop of a shape resync does not know."""
    loops = [
        f"`while {ast.unparse(n.test)}:` at line {n.lineno}"
        for n in ast.walk(schedule)
        if isinstance(n, ast.While)
    ]
    where = ", ".join(loops) or "no while loop"
    return (
        f"unknown WAITING-loop shape in Scheduler.schedule() of {SCHEDULER_REL} "
        f"(loops: {where}): neither `if <count> >= self.max_num_*: break` nor "
        f"`<flag> = (<count> >= self.max_num_* ...)` with "
        f"`self._pause_state == PauseState.UNPAUSED` tests; re-sync by hand"
    )
