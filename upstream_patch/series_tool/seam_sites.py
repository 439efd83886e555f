# SPDX-License-Identifier: Apache-2.0
"""Where the schedule seams go in a release's ``Scheduler.schedule()``, read
by AST (never by line numbers or copied text), for the schedule-seams series
(``upstream_patch/schedule_seams/``).

Each finder names the one statement a seam is placed by and refuses, with a
one-line :class:`SeriesError` naming what it looked for, a tree where that
statement is missing or not unique: such a release needs its sites re-read
by hand before the series can be re-synced for it."""

from __future__ import annotations

import ast
from typing import NamedTuple

from .constants import SCHEDULER_REL
from .lanes import SeriesError
from .shapes import class_method


class Sites(NamedTuple):
    """The statements the three seams are placed by (one release)."""

    schedule: ast.FunctionDef
    # A: the waiting loop's stale-output check; the ask goes right after it
    # and its body (the release's way to skip a request) is SKIP's action.
    stale_check: ast.If
    # C: the running loop's ``self._preempt_request(...)`` statement (None
    # once seam C replaced it).
    preempt_call: ast.Expr | None
    # B: the running loop's ``max_model_len`` cap, and the waiting loop's
    # last token-budget cap (its ``assert num_new_tokens > 0`` if any).
    running_cap: ast.stmt
    waiting_cap: ast.stmt
    # The waiting loop pads decodes to the speculative size (0.27 on).
    pads_spec_decode: bool
    # The waiting cap's block tests ``num_new_tokens == 0`` after it (0.28
    # on); 0.27.x tests it only after the encoder and Mamba caps, so B's 0
    # needs its own test there.
    zero_checked: bool
    # The release's class that the enum goes above, and its first import.
    scheduler_class: ast.ClassDef
    first_import: ast.stmt


#: The waiting loop's token-budget cap, by release (either, exactly once).
BUDGET_CAPS = (
    "min(num_new_tokens, request_token_budget)",
    "min(num_new_tokens, token_budget)",
)


def _one(found: list, what: str) -> ast.AST:
    if len(found) != 1:
        raise SeriesError(
            f"{SCHEDULER_REL}: expected one {what} in Scheduler.schedule(), "
            f"found {len(found)}: re-read the seam sites by hand"
        )
    return found[0]


def _loops(schedule: ast.FunctionDef) -> tuple[ast.While, ast.While]:
    """(running loop, waiting loop): the top-level ``while`` over
    ``self.running`` with ``req_index``, and the ``while`` directly inside the
    ``if`` that tests ``preempted_reqs`` (the waiting loop's guard)."""
    running = _one(
        [
            s
            for s in schedule.body
            if isinstance(s, ast.While) and "req_index" in ast.unparse(s.test)
        ],
        "running loop (while req_index < len(self.running) ...)",
    )
    guard = _one(
        [
            s
            for s in schedule.body
            if isinstance(s, ast.If) and "not preempted_reqs" in ast.unparse(s.test)
        ],
        "waiting-loop guard (if not preempted_reqs ...)",
    )
    waiting = _one(
        [s for s in ast.iter_child_nodes(guard) if isinstance(s, ast.While)],
        "waiting loop",
    )
    assert isinstance(running, ast.While) and isinstance(waiting, ast.While)
    return running, waiting


def _assigns_num_new_tokens(node: ast.AST, needle: str) -> bool:
    return (
        isinstance(node, ast.Assign)
        and [ast.unparse(t) for t in node.targets] == ["num_new_tokens"]
        and needle in ast.unparse(node.value)
    )


def _in_body(loop: ast.While, node: ast.stmt) -> list[ast.stmt]:
    """The statement list of ``loop`` (at any depth) that holds ``node``."""
    for parent in ast.walk(loop):
        for field in ("body", "orelse"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and node in block:
                return block
    raise SeriesError(f"{SCHEDULER_REL}: lost a statement's block")


def find_sites(source: str) -> Sites:
    """The seam sites of ``source`` (a release's ``scheduler.py``, with or
    without the balance patch 0001)."""
    tree = ast.parse(source)
    schedule = class_method(tree, "Scheduler", "schedule")
    running, waiting = _loops(schedule)
    stale = _one(
        [
            s
            for s in waiting.body
            if isinstance(s, ast.If)
            and "num_stale_output_tokens" in ast.unparse(s.test)
            and isinstance(s.body[-1], ast.Continue)
        ],
        "stale-output check in the waiting loop",
    )
    calls = [
        s
        for s in ast.walk(running)
        if isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and ast.unparse(s.value.func)
        in ("self._preempt_request", "self._evict_running_request")
    ]
    preempt = _one(calls, "preemption call in the running loop")
    assert isinstance(preempt, ast.Expr) and isinstance(preempt.value, ast.Call)
    running_cap = _one(
        [s for s in running.body if _assigns_num_new_tokens(s, "self.max_model_len")],
        "max_model_len cap on num_new_tokens in the running loop",
    )
    # 0.28 on caps by the request's own budget; 0.27.x by the step's.
    budget = _one(
        [
            s
            for s in ast.walk(waiting)
            if any(_assigns_num_new_tokens(s, cap) for cap in BUDGET_CAPS)
        ],
        f"token-budget cap ({' or '.join(BUDGET_CAPS)}) in the waiting loop",
    )
    assert isinstance(budget, ast.stmt)
    block = _in_body(waiting, budget)
    after = block[block.index(budget) + 1 : block.index(budget) + 2]
    waiting_cap = (
        after[0]
        if after
        and isinstance(after[0], ast.Assert)
        and "num_new_tokens" in ast.unparse(after[0])
        else budget
    )
    rest = block[block.index(budget) + 1 :]
    zero_checked = any(
        isinstance(s, ast.If) and ast.unparse(s.test) == "num_new_tokens == 0"
        for s in rest
    )
    pads = any(
        isinstance(n, ast.Assign)
        and [ast.unparse(t) for t in n.targets] == ["pad_spec_decode"]
        for n in ast.walk(waiting)
    )
    scheduler_class = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler"
    )
    first_import = next(n for n in tree.body if isinstance(n, ast.Import))
    assert isinstance(stale, ast.If)
    assert isinstance(running_cap, ast.stmt)
    return Sites(
        schedule=schedule,
        stale_check=stale,
        preempt_call=(
            preempt
            if ast.unparse(preempt.value.func) == "self._preempt_request"
            else None
        ),
        running_cap=running_cap,
        waiting_cap=waiting_cap,
        pads_spec_decode=pads,
        zero_checked=zero_checked,
        scheduler_class=scheduler_class,
        first_import=first_import,
    )
