# SPDX-License-Identifier: Apache-2.0
"""Whether an installed ``scheduler.py`` carries the whole seam, read from
its source (never imported: the vLLM may not import yet).

The seam is two things in ``class Scheduler``: the method
``_should_stop_admitting_waiting()`` and the call to it inside
``schedule()`` (the balance series' 0001, both hunks). A file holding only
the first (half a patch applied by hand) still imports and still has the
method, so a fresh import passes, yet the gate's answer is never asked:
balance scheduling has no effect. Hence the source check looks for both.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from vllm_ascend_balance.gate.seam import SEAM

SCHEDULER_REL = "vllm/v1/core/sched/scheduler.py"
PRESENT, ABSENT, PARTIAL = "present", "absent", "partial"


def seam_source(site: Path) -> str:
    """:data:`PRESENT` when ``site``'s ``scheduler.py`` defines the seam on
    ``Scheduler`` and ``schedule()`` calls it (directly or through
    ``self.<method>()`` calls of ``Scheduler``'s own methods), :data:`ABSENT`
    when it has neither, :data:`PARTIAL` when it has one without the other.
    An unreadable file is :data:`ABSENT`."""
    return seam_in_file(site / SCHEDULER_REL)


def seam_in_file(path: Path) -> str:
    """:func:`seam_source` of one ``scheduler.py`` (e.g. the file a fresh
    import loaded)."""
    defines, calls = seam_parts(path)
    if defines and calls:
        return PRESENT
    return PARTIAL if defines or calls else ABSENT


def partial_text(site: Path) -> str:
    """Which half of the seam ``site``'s ``scheduler.py`` holds, for a
    :data:`PARTIAL` file: ``"defines X() but its schedule() never calls
    it"``, or the other way round."""
    defines, _ = seam_parts(site / SCHEDULER_REL)
    if defines:
        return f"defines {SEAM}() but its schedule() never calls it"
    return f"calls {SEAM}() in schedule() but Scheduler does not define it"


def seam_parts(path: Path) -> tuple[bool, bool]:
    """(``Scheduler`` defines the seam, ``schedule()`` reaches a call of it)
    in ``path``; both False for a file that cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return False, False
    try:
        defines, calls = _scan(ast.parse(text))
    except SyntaxError:
        # Not Python we can parse (a bad edit): the text alone, less exact.
        defines = re.search(rf"^\s*def {SEAM}\(", text, re.MULTILINE) is not None
        calls = re.search(rf"self\.{SEAM}\(\)", text) is not None
    return defines, calls


def has_seam_source(site: Path) -> bool:
    """Whether ``site``'s ``scheduler.py`` carries the whole seam (read, not
    imported): :func:`seam_source` is :data:`PRESENT`."""
    return seam_source(site) == PRESENT


def defines_seam(site: Path) -> bool:
    """Whether ``site``'s ``scheduler.py`` holds any part of the seam (a
    patched file, whole or not), as opposed to a release's own file."""
    return seam_source(site) != ABSENT


def _scan(module: ast.Module) -> tuple[bool, bool]:
    """(``Scheduler`` defines the seam, ``schedule()`` reaches a call of it)."""
    scheduler = next(
        (
            node
            for node in module.body
            if isinstance(node, ast.ClassDef) and node.name == "Scheduler"
        ),
        None,
    )
    if scheduler is None:
        return False, False
    methods = {
        node.name: node
        for node in scheduler.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    # The methods schedule() runs, following self.<method>() calls, so a
    # release that moves the waiting loop into a helper still counts.
    seen: set[str] = set()
    todo = ["schedule"]
    while todo:
        name = todo.pop()
        if name in seen or name not in methods or name == SEAM:
            continue
        seen.add(name)
        todo.extend(_self_calls(methods[name]))
    calls = any(SEAM in _self_calls(methods[name]) for name in seen)
    return SEAM in methods, calls


def _self_calls(function: ast.AST) -> set[str]:
    return {
        node.func.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    }
