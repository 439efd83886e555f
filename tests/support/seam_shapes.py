# SPDX-License-Identifier: Apache-2.0
"""Where the admission cap and the seam sit in ``Scheduler.schedule()``, read
from vLLM's own ``scheduler.py`` text with :mod:`ast`, and the known-bad
variants of the patched file that the negative controls load.

The series' shape (every release): the seam is asked once per ``schedule()``
call, ``stop_admitting_waiting = self._should_stop_admitting_waiting()``
right before the WAITING loop; the loop keeps the release's own cap check
inline, ``[assignments it reads] if <cap test>: break``, and right after it
``if stop_admitting_waiting[ and <queue> is self.waiting]: break``; the
seam's default returns False. Two variants of the patched text are built
here:

* :func:`old_shape_source`: the shape this project first proposed, with the
  cap check moved *into* the overridable method (its default body) and the
  loop calling only the method, on every admission attempt. A pure refactor
  too, but an override that returns False removes the cap.
* :func:`inline_cap_mutant_source`: the new shape with the inline check's
  ``>=`` (``==`` in releases that compare for equality) turned into ``>``,
  i.e. a patch that did not keep the release's condition byte for byte.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

SEAM = "_should_stop_admitting_waiting"


def method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls}.{name} not found")


def cap_attributes(node: ast.AST) -> set[str]:
    """``self.max_num_*`` names on the right of a ``>=``/``==`` comparison."""
    caps = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Compare):
            for op, right in zip(sub.ops, sub.comparators, strict=True):
                if (
                    isinstance(op, (ast.GtE, ast.Eq))
                    and isinstance(right, ast.Attribute)
                    and isinstance(right.value, ast.Name)
                    and right.value.id == "self"
                    and right.attr.startswith("max_num_")
                ):
                    caps.add(right.attr)
    return caps


def _breaks(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.If)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Break)
        and not stmt.orelse
    )


def _calls_seam(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Call)
        and not test.args
        and isinstance(test.func, ast.Attribute)
        and test.func.attr == SEAM
        and isinstance(test.func.value, ast.Name)
        and test.func.value.id == "self"
    )


def _seam_flag(body: list[ast.stmt], loop: ast.While) -> str | None:
    """The name bound to ``self._should_stop_admitting_waiting()`` right
    before ``loop`` in ``body`` (the once-per-call ask), if any; from 0.34
    the value is ``<pause test> or self._should_stop_admitting_waiting()``."""
    index = body.index(loop)
    prior = body[index - 1] if index else None
    if not (
        isinstance(prior, ast.Assign)
        and len(prior.targets) == 1
        and isinstance(prior.targets[0], ast.Name)
    ):
        return None
    value = prior.value
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        value = value.values[-1]
    return prior.targets[0].id if _calls_seam(value) else None


def _reads_flag(test: ast.expr, flag: str) -> bool:
    """``if <flag>`` or ``if <flag> and <queue> is self.waiting``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[0]
    return isinstance(test, ast.Name) and test.id == flag


@dataclass
class StopCondition:
    """The WAITING loop's cap check: ``feeding`` assignments, then
    ``check`` (``if test: break``); ``seam_ask`` is the once-per-call
    ``<flag> = self._should_stop_admitting_waiting()`` right before the loop
    and ``seam_check`` the ``if <flag>...: break`` right after the cap check
    (both None in a release without the seam)."""

    feeding: list[ast.stmt]
    check: ast.If
    seam_check: ast.If | None
    seam_ask: ast.Assign | None = None

    @property
    def test(self) -> ast.expr:
        return self.check.test

    @property
    def cap(self) -> str:
        (cap,) = cap_attributes(self.check.test)
        return cap


def stop_condition(source: str) -> StopCondition:
    """The cap check of ``Scheduler.schedule()``'s WAITING loop in ``source``."""
    schedule = method(ast.parse(source), "Scheduler", "schedule")
    parents = {
        id(child): node
        for node in ast.walk(schedule)
        for field in ("body", "orelse")
        if isinstance(getattr(node, field, None), list)
        for child in getattr(node, field)
    }
    for loop in ast.walk(schedule):
        if not isinstance(loop, ast.While):
            continue
        body = getattr(parents.get(id(loop)), "body", [])
        flag = _seam_flag(body, loop) if loop in body else None
        for index, stmt in enumerate(loop.body):
            if isinstance(stmt, ast.If) and _breaks(stmt) and cap_attributes(stmt.test):
                read = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
                feeding = [
                    prior
                    for prior in loop.body[:index]
                    if isinstance(prior, ast.Assign)
                    and {t.id for t in prior.targets if isinstance(t, ast.Name)} & read
                ]
                after = loop.body[index + 1] if index + 1 < len(loop.body) else None
                seam_check = (
                    after
                    if flag is not None
                    and isinstance(after, ast.If)
                    and _breaks(after)
                    and _reads_flag(after.test, flag)
                    else None
                )
                ask = body[body.index(loop) - 1] if seam_check else None
                assert ask is None or isinstance(ask, ast.Assign)
                return StopCondition(feeding, stmt, seam_check, ask)
    raise AssertionError("no cap stop condition in the WAITING loop")


def _segment(lines: list[str], node: ast.stmt) -> str:
    assert node.end_lineno is not None
    return textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))


def old_shape_source(source: str) -> str:
    """``source`` (the patched file) rewritten to the old shape: the inline
    cap check (and the assignments it reads) removed from the loop, the
    check after it asking the seam on every attempt, and the seam's
    ``return False`` replaced by the cap check, ``return <cap test>``."""
    lines = source.splitlines(keepends=True)
    found = stop_condition(source)
    assert found.seam_check is not None, "the source has no seam after the cap"
    seam_if = found.seam_check
    assert seam_if.end_lineno is not None
    head = lines[seam_if.lineno - 1]
    indent_if = head[: len(head) - len(head.lstrip())]
    lines[seam_if.lineno - 1 : seam_if.end_lineno] = [
        f"{indent_if}if self.{SEAM}():\n{indent_if}    break\n"
    ]
    seam = method(ast.parse(source), "Scheduler", SEAM)
    ret = seam.body[-1]
    assert isinstance(ret, ast.Return) and isinstance(ret.value, ast.Constant)
    assert ret.value.value is False, "the seam's default must return False"
    assert seam.end_lineno is not None and seam.end_lineno < found.check.lineno
    indent = " " * ret.col_offset
    body = "".join(_segment(lines, stmt) for stmt in found.feeding)
    body += f"return {ast.get_source_segment(source, found.test)}\n"
    start = min(stmt.lineno for stmt in [*found.feeding, found.check])
    assert found.check.end_lineno is not None
    # The later region first, so the earlier line numbers stay valid.
    del lines[start - 1 : found.check.end_lineno]
    lines[ret.lineno - 1 : ret.end_lineno] = [textwrap.indent(body, indent)]
    return "".join(lines)


def inline_cap_mutant_source(source: str) -> str:
    """``source`` with the inline cap check's ``>=`` (or ``==``, the
    comparison of older releases) turned into ``>``: one more admission past
    the cap either way."""
    found = stop_condition(source)
    lines = source.splitlines(keepends=True)
    row = found.check.lineno - 1
    (op,) = [op for op in (" >= ", " == ") if lines[row].count(op) == 1]
    lines[row] = lines[row].replace(op, " > ")
    return "".join(lines)


# --------------------------------------------------------------------------
# 0.34 on: the seam replaces the loop's ``PauseState.UNPAUSED`` tests
# --------------------------------------------------------------------------

PAUSE_TEST = "self._pause_state == PauseState.UNPAUSED"
FLAG_TEST = "not stop_admitting_waiting"


@dataclass
class PauseLoop:
    """The 0.34 WAITING loop (``while True:``): ``cap`` is the assignment
    that compares with ``self.max_num_*`` (``loads_only = ...``); ``pause``
    the release's ``_pause_state == PauseState.UNPAUSED`` tests in it;
    ``flag`` the series' ``not stop_admitting_waiting`` tests that replace
    them; ``seam_ask`` the once-per-call ask right before the loop."""

    loop: ast.While
    cap_assign: ast.Assign
    pause: list[ast.Compare]
    flag: list[ast.UnaryOp]
    seam_ask: ast.Assign | None

    @property
    def cap(self) -> str:
        (cap,) = cap_attributes(self.cap_assign.value)
        return cap


def pause_loop(source: str) -> PauseLoop | None:
    """The 0.34-shaped WAITING loop of ``source``, or None (older shape)."""
    schedule = method(ast.parse(source), "Scheduler", "schedule")
    for loop in ast.walk(schedule):
        if not isinstance(loop, ast.While):
            continue
        cap = next(
            (
                s
                for s in loop.body
                if isinstance(s, ast.Assign) and cap_attributes(s.value)
            ),
            None,
        )
        pause = [
            n
            for n in ast.walk(loop)
            if isinstance(n, ast.Compare) and ast.unparse(n) == PAUSE_TEST
        ]
        flag = [
            n
            for n in ast.walk(loop)
            if isinstance(n, ast.UnaryOp) and ast.unparse(n) == FLAG_TEST
        ]
        if cap is None or not (pause or flag):
            continue
        ask = None
        for node in ast.walk(schedule):
            body = getattr(node, "body", None)
            if isinstance(body, list) and loop in body:
                flag_name = _seam_flag(body, loop)
                ask = body[body.index(loop) - 1] if flag_name else None
        assert ask is None or isinstance(ask, ast.Assign)
        return PauseLoop(loop, cap, pause, flag, ask)
    return None


def release_cap(source: str) -> str:
    """The attribute the WAITING loop's cap compares with, either shape."""
    found = pause_loop(source)
    return found.cap if found is not None else stop_condition(source).cap


def all_queues_source(source: str) -> str:
    """The patched file whose held step also holds ``kv_holding_waiting``
    (the scope the series decided against): the older shape drops the
    ``and <queue> is self.waiting`` half of its honour check; the 0.34
    shape breaks out of the loop at its top while the seam holds."""
    honour = "stop_admitting_waiting and request_queue is self.waiting"
    found = pause_loop(source)
    if found is None:
        assert source.count(honour) == 1, "the installed series changed"
        return source.replace(honour, "stop_admitting_waiting")
    assert found.seam_ask is not None and len(found.flag) == 2, "series changed"
    lines = source.splitlines(keepends=True)
    first = found.loop.body[0]
    indent = " " * first.col_offset
    lines.insert(
        first.lineno - 1, f"{indent}if stop_admitting_waiting:\n{indent}    break\n"
    )
    return "".join(lines)


def pause_cap_mutant_source(source: str) -> str:
    """The patched 0.34 file with the cap assignment's ``>=`` turned into
    ``>``: one more admission past the cap."""
    found = pause_loop(source)
    assert found is not None
    lines = source.splitlines(keepends=True)
    assign = found.cap_assign
    assert assign.end_lineno is not None
    rows = [
        row
        for row in range(assign.lineno - 1, assign.end_lineno)
        if " >= self.max_num_" in lines[row]
    ]
    (row,) = rows
    lines[row] = lines[row].replace(" >= self.max_num_", " > self.max_num_", 1)
    return "".join(lines)
