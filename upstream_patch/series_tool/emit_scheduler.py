# SPDX-License-Identifier: Apache-2.0
"""``scheduler.py`` with the hook, for either loop shape: the method and its
docstring above ``schedule()``, the ask before the WAITING loop, its use in
the loop, and the comment at the ``prefill_capacity_bound`` assignment."""

from __future__ import annotations

import ast
import textwrap

from .constants import FLAG, PAUSE_TERM, SCHEDULER_REL, SEAM
from .lanes import SeriesError
from .shapes import (
    Shape,
    breaks,
    capacity_bound_update,
    class_method,
    comment_start,
    find_pause_loop,
    is_cap_test,
    unknown_loop,
    waiting_loop_guards,
)
from .texts import COUPLING_COMMENT, EXEMPT_KV, HOOK_DOC, PAUSE_DOC


def _comment(text: str, indent: str) -> str:
    """``text`` as ``#`` lines at ``indent``, wrapped to 80 columns."""
    return "".join(
        f"{line}\n"
        for line in textwrap.wrap(
            text,
            width=80,
            initial_indent=indent + "# ",
            subsequent_indent=indent + "# ",
            break_on_hyphens=False,
        )
    )


def _patched_pause_loop(
    source: str,
    schedule: ast.FunctionDef,
    loop: ast.While,
    cap: ast.Assign,
    tests: list[ast.Compare],
) -> tuple[str, Shape]:
    """The 0.34 shape: the loop's ``_pause_state == PauseState.UNPAUSED``
    tests become ``not stop_admitting_waiting``, a flag set once before the
    loop to the pause test or the hook (asked only when unpaused, default
    False): an override cannot lift ``PAUSED_NEW``. ``kv_holding_waiting``
    still drains while it holds; ``async_kv_waiting`` starts no load."""
    update = capacity_bound_update(schedule)
    guards = waiting_loop_guards(schedule, loop)
    shape = Shape(
        kv_queue="request_queue",
        queues=["waiting", "async_kv_waiting"],
        # The guard skips PAUSED_ALL; the flag's pause test, PAUSED_NEW.
        skipped=[reason for reason in guards if reason == "preempt"] + ["paused"],
        cap=next(
            node.attr
            for node in ast.walk(cap.value)
            if isinstance(node, ast.Attribute) and node.attr.startswith("max_num_")
        ),
        counts_streaming="num_waiting_for_streaming_input" in ast.unparse(loop),
        coupled=update is not None,
        throttle_arg="throttle_prefills"
        in {a.arg for a in schedule.args.args + schedule.args.kwonlyargs},
        local_cadence="self.local_prefill_interval" in ast.unparse(schedule),
        pause_inline=True,
        async_kv="self.async_kv_waiting" in ast.unparse(loop),
    )
    lines = source.splitlines(keepends=True)
    # Bottom up, so the line numbers above each change stay valid.
    if update is not None:
        lines.insert(
            update.lineno - 1,
            _comment(COUPLING_COMMENT.format(seam=SEAM), " " * update.col_offset),
        )
    for test in sorted(tests, key=lambda t: (t.lineno, t.col_offset), reverse=True):
        if test.end_lineno != test.lineno or test.end_col_offset is None:
            raise SeriesError(
                f"a PauseState test spans lines in {SCHEDULER_REL} "
                f"(line {test.lineno}): re-sync by hand"
            )
        row = lines[test.lineno - 1]
        text = row.encode()
        lines[test.lineno - 1] = (
            text[: test.col_offset]
            + f"not {FLAG}".encode()
            + text[test.end_col_offset :]
        ).decode()
    start = comment_start(lines, loop.lineno)
    ind = " " * loop.col_offset
    # As ruff formats it: the one-line form is past 88 columns at any depth
    # the loop can sit at.
    lines.insert(
        start,
        f"{ind}{FLAG} = (\n{ind}    {PAUSE_TERM}\n{ind}    or self.{SEAM}()\n{ind})\n",
    )
    lines.insert(
        comment_start(lines, schedule.lineno),
        _hook_def(
            PAUSE_DOC.format(skipped=shape.skipped_text(rst=True), cap=shape.cap),
            " " * schedule.col_offset,
            "False",
        ),
    )
    return "".join(lines), shape


def _hook_def(doc: str, indent: str, default: str) -> str:
    """The hook's ``def``: a Google-style docstring (``doc``'s paragraphs
    re-wrapped to 80 columns, a ``Returns:`` section indented under its
    heading and followed by a blank line, as ruff's D413 in vLLM's lint
    config asks) and the one-line body ``return <default>``."""
    body = indent + "    "
    out = [f"{indent}def {SEAM}(self) -> bool:\n"]
    paragraphs = doc.split("\n\n")
    for number, paragraph in enumerate(paragraphs):
        lead = '"""' if number == 0 else ""
        first, _, rest = paragraph.partition("\n")
        if first.endswith(":") and rest:  # a section: heading, indented text
            out.append(f"{body}{first}\n")
            out.append(_fill(" ".join(rest.split()), body + "    ") + "\n")
            if number == len(paragraphs) - 1:
                out.append("\n")
        else:
            out.append(_fill(lead + " ".join(paragraph.split()), body) + "\n")
        if number < len(paragraphs) - 1:
            out.append("\n")
    out.append(f'{body}"""\n{body}return {default}\n\n')
    return "".join(out)


def _fill(text: str, indent: str) -> str:
    return textwrap.fill(
        text,
        width=80,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


def patched_scheduler(source: str) -> tuple[str, Shape]:
    """``scheduler.py`` with the hook: (patched text, what the release's
    loop looks like). Found by AST, so it fits any release whose WAITING
    loop stops on ``if <count> >= (or ==) self.max_num_*: break``."""
    if SEAM in source:
        raise SeriesError(f"{SCHEDULER_REL} already has {SEAM}()")
    tree = ast.parse(source)
    schedule = class_method(tree, "Scheduler", "schedule")
    for loop in ast.walk(schedule):
        if not isinstance(loop, ast.While):
            continue
        cap = next((s for s in loop.body if breaks(s) and is_cap_test(s.test)), None)
        if cap is not None:
            break
    else:
        paused = find_pause_loop(schedule)
        if paused is not None:
            return _patched_pause_loop(source, schedule, *paused)
        raise SeriesError(unknown_loop(schedule))
    before_cap = loop.body[: loop.body.index(cap)]
    # Where the release drains a queue of requests that already hold KV
    # blocks, the loop picks it as `<queue> = self.kv_holding_waiting`; the
    # hook then holds only the other queue (new requests).
    queue = next(
        (
            s.targets[0].id
            for s in before_cap
            if isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Name)
            and ast.unparse(s.value) == "self.kv_holding_waiting"
        ),
        None,
    )
    held = (
        ["waiting"]
        if queue
        else sorted(
            {
                node.attr
                for node in ast.walk(loop.test)
                if isinstance(node, ast.Attribute) and node.attr.endswith("waiting")
            },
            key=lambda name: (name != "waiting", name),
        )
        or ["waiting"]
    )
    (cap_attr,) = {
        node.attr
        for node in ast.walk(cap.test)
        if isinstance(node, ast.Attribute) and node.attr.startswith("max_num_")
    }
    update = capacity_bound_update(schedule)
    shape = Shape(
        kv_queue=queue,
        queues=held,
        skipped=waiting_loop_guards(schedule, loop),
        cap=cap_attr,
        counts_streaming="num_waiting_for_streaming_input"
        in "".join(ast.unparse(s) for s in [*before_cap, cap]),
        coupled=update is not None,
        throttle_arg="throttle_prefills"
        in {a.arg for a in schedule.args.args + schedule.args.kwonlyargs},
        local_cadence="self.local_prefill_interval" in ast.unparse(schedule),
    )
    lines = source.splitlines(keepends=True)
    # Bottom up, so the line numbers above each insertion stay valid.
    if update is not None:
        lines.insert(
            update.lineno - 1,
            _comment(COUPLING_COMMENT.format(seam=SEAM), " " * update.col_offset),
        )
    body = " " * cap.body[0].col_offset
    at = " " * cap.col_offset
    honour = f"{FLAG} and {queue} is self.waiting" if queue else FLAG
    assert cap.end_lineno is not None
    lines.insert(cap.end_lineno, f"{at}if {honour}:\n{body}break\n")
    start = comment_start(lines, loop.lineno)
    ind = " " * loop.col_offset
    lines.insert(start, f"{ind}{FLAG} = self.{SEAM}()\n")
    facts = {
        "queues": " and ".join(f"``self.{name}``" for name in held),
        "exempt": EXEMPT_KV if queue else "",
        "skipped": shape.skipped_text(rst=True),
        "cap_doc": shape.cap_text(rst=True),
    }
    lines.insert(
        comment_start(lines, schedule.lineno),
        _hook_def(HOOK_DOC.format(**facts), " " * schedule.col_offset, "False"),
    )
    return "".join(lines), shape
