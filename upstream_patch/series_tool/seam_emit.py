# SPDX-License-Identifier: Apache-2.0
"""``scheduler.py`` with one more schedule seam: each ``add_*`` takes the
file as the previous patch of the series left it and returns it with that
seam's method (above ``schedule()``, after those already added) and its
call site(s), placed by :func:`seam_sites.find_sites`. Whole lines are
inserted or replaced, never re-flowed, so the hunks stay minimal, and every
emitted line is laid out as ``ruff format`` lays it out."""

from __future__ import annotations

import ast
import textwrap

from .constants import SCHEDULER_REL
from .lanes import SeriesError
from .seam_sites import find_sites
from .seam_texts import (
    ADMISSION_ARGS,
    ADMISSION_BODY,
    ADMISSION_RETURNS,
    ADMISSION_SCOPE_PAUSE,
    ADMISSION_SCOPE_PLAIN,
    ADMISSION_SUMMARY,
    CAP_ARGS,
    CAP_BODY,
    CAP_PADDING,
    CAP_RETURNS,
    CAP_SUMMARY,
    ENUM_DOC,
    ENUM_MEMBERS,
    EVICT_ARGS,
    EVICT_BODY,
    EVICT_RETURNS,
    EVICT_SUMMARY,
    cap_after,
)
from .shapes import Shape, class_method, comment_start

WIDTH = 80  # docstrings and comments, as the balance series wraps them
LINE = 88  # vLLM's ruff line length
# A padded decode's count is 1 + num_spec_tokens (the release's padding).
PADDED_CHANGED = "num_new_tokens != 1 + self.num_spec_tokens"


def _fill(text: str, first: str, rest: str | None = None) -> list[str]:
    return [
        line + "\n"
        for line in textwrap.wrap(
            text,
            width=WIDTH,
            initial_indent=first,
            subsequent_indent=first if rest is None else rest,
            break_on_hyphens=False,
            break_long_words=False,
        )
    ]


def method(
    signature: str,
    summary: str,
    body: str,
    args: tuple[tuple[str, str], ...],
    returns: str,
    code: list[str],
    indent: str = "    ",
) -> str:
    """A method: ``def <signature>:``, a Google-style docstring (summary,
    one paragraph, ``Args:``, ``Returns:`` when given, a blank line after the
    last section as vLLM's D413 asks) and ``code`` (lines, unindented)."""
    inner = indent + "    "
    out = [f"{indent}def {signature}:\n", f'{inner}"""{summary}\n', "\n"]
    out += _fill(body, inner)
    out += ["\n", f"{inner}Args:\n"]
    for name, text in args:
        out += _fill(f"{name}: {text}", inner + "    ", inner + "        ")
    if returns:
        out += ["\n", f"{inner}Returns:\n"]
        out += _fill(returns, inner + "    ")
    out += ["\n", f'{inner}"""\n']
    out += [f"{inner}{line}\n" if line else "\n" for line in code]
    return "".join(out) + "\n"


def _insert_method(source: str, text: str) -> str:
    """``text`` right above ``schedule()`` (after any seam already there)."""
    lines = source.splitlines(keepends=True)
    schedule = class_method(ast.parse(source), "Scheduler", "schedule")
    at = comment_start(lines, schedule.lineno)
    lines.insert(at, text)
    return "".join(lines)


def _lines_of(lines: list[str], node: ast.stmt) -> list[str]:
    assert node.end_lineno is not None
    return lines[node.lineno - 1 : node.end_lineno]


def add_admission(source: str, shape: Shape) -> str:
    """Seam A: the ``Admission`` enum, ``_waiting_admission()`` and its ask
    right after the waiting loop's stale-output check; SKIP does what that
    check does (the release's own way to skip a request)."""
    sites = find_sites(source)
    lines = source.splitlines(keepends=True)
    stale = sites.stale_check
    ind = " " * stale.col_offset
    skip = [
        line
        for node in stale.body
        for line in _lines_of(lines, node)
        if not line.lstrip().startswith("#")
    ]
    ask = [
        "\n",
        f"{ind}admission = self._waiting_admission(request)\n",
        f"{ind}if admission is Admission.STOP:\n",
        f"{ind}    break\n",
        f"{ind}if admission is Admission.SKIP:\n",
        *skip,
    ]
    assert stale.end_lineno is not None
    lines[stale.end_lineno : stale.end_lineno] = ask
    members = "".join(
        f"    # {doc}\n    {name} = enum.auto()\n" for name, doc in ENUM_MEMBERS
    )
    enum_class = f'class Admission(enum.Enum):\n    """{ENUM_DOC}"""\n\n{members}\n\n'
    at = comment_start(lines, sites.scheduler_class.lineno)
    lines.insert(at, enum_class)
    if "import enum\n" not in source:
        lines.insert(sites.first_import.lineno - 1, "import enum\n")
    scope = ADMISSION_SCOPE_PAUSE if shape.pause_inline else ADMISSION_SCOPE_PLAIN
    text = method(
        "_waiting_admission(self, request: Request) -> Admission",
        ADMISSION_SUMMARY,
        ADMISSION_BODY.format(scope=scope, cap=shape.cap),
        ADMISSION_ARGS,
        ADMISSION_RETURNS,
        ["return Admission.ADMIT"],
    )
    return _insert_method("".join(lines), text)


def _call(name: str, args: list[str], indent: str) -> list[str]:
    """``name(args)`` as ruff formats a call statement at ``indent``."""
    one = f"{indent}{name}({', '.join(args)})"
    if len(one) <= LINE:
        return [one]
    joined = f"{indent}    {', '.join(args)}"
    if len(joined) <= LINE:
        return [f"{indent}{name}(", joined, f"{indent})"]
    return [f"{indent}{name}(", *(f"{indent}    {a}," for a in args), f"{indent})"]


def add_evict(source: str, shape: Shape) -> str:
    """Seam C: ``_evict_running_request()`` in place of the running loop's
    ``_preempt_request()`` call, whose default makes that same call (its
    keyword arguments as the release passes them)."""
    del shape  # same text on every release
    sites = find_sites(source)
    if sites.preempt_call is None:
        raise SeriesError(f"{SCHEDULER_REL} already has _evict_running_request()")
    lines = source.splitlines(keepends=True)
    call = sites.preempt_call.value
    assert isinstance(call, ast.Call) and len(call.args) == 2
    victim, timestamp = (ast.unparse(a) for a in call.args)
    ind = " " * sites.preempt_call.col_offset
    new = _call("self._evict_running_request", [victim, timestamp], ind)
    assert sites.preempt_call.end_lineno is not None
    lines[sites.preempt_call.lineno - 1 : sites.preempt_call.end_lineno] = [
        line + "\n" for line in new
    ]
    # Laid out for the method body's depth (8 columns), then unindented.
    default = _call("self._preempt_request", default_args(call), " " * 8)
    text = method(
        "_evict_running_request(self, victim: Request, timestamp: float) -> None",
        EVICT_SUMMARY,
        EVICT_BODY,
        EVICT_ARGS,
        EVICT_RETURNS,
        [line[8:] for line in default],
    )
    return _insert_method("".join(lines), text)


def default_args(call: ast.Call) -> list[str]:
    """The default's arguments: the seam's parameters, then the release's
    keyword arguments to ``_preempt_request()``."""
    return ["victim", "timestamp", *(ast.unparse(k) for k in call.keywords)]


def add_cap(source: str, shape: Shape) -> str:
    """Seam B: ``_cap_num_new_tokens()`` asked after the running loop's
    ``max_model_len`` cap and after the waiting loop's token-budget cap; in
    the waiting loop a padded speculative decode capped below its padded
    size is scheduled unpadded."""
    del shape
    sites = find_sites(source)
    lines = source.splitlines(keepends=True)
    ask = "num_new_tokens = self._cap_num_new_tokens(request, num_new_tokens)\n"
    waiting = " " * sites.waiting_cap.col_offset
    block = [waiting + ask]
    if sites.pads_spec_decode:
        block += [
            f"{waiting}if pad_spec_decode and {PADDED_CHANGED}:\n",
            f"{waiting}    # A padded decode keeps all its rows or is not padded.\n",
            f"{waiting}    num_new_tokens = min(num_new_tokens, 1)\n",
            f"{waiting}    pad_spec_decode = False\n",
        ]
    if not sites.zero_checked:
        # Nothing later in this block stops a 0 from reaching allocate_slots.
        block += [
            f"{waiting}if num_new_tokens == 0:\n",
            f"{waiting}    # The request cannot be scheduled.\n",
            f"{waiting}    break\n",
        ]
    # Bottom up: the waiting loop is below the running loop.
    assert sites.waiting_cap.end_lineno is not None
    assert sites.running_cap.end_lineno is not None
    lines[sites.waiting_cap.end_lineno : sites.waiting_cap.end_lineno] = block
    running = " " * sites.running_cap.col_offset
    lines.insert(sites.running_cap.end_lineno, running + ask)
    text = method(
        "_cap_num_new_tokens(self, request: Request, num_new_tokens: int) -> int",
        CAP_SUMMARY,
        CAP_BODY.format(
            after=cap_after(source),
            padding=CAP_PADDING if sites.pads_spec_decode else "",
        ),
        CAP_ARGS,
        CAP_RETURNS,
        ["return num_new_tokens"],
    )
    return _insert_method("".join(lines), text)


#: The seams in series order: (letter, function).
SEAMS = (("A", add_admission), ("C", add_evict), ("B", add_cap))
