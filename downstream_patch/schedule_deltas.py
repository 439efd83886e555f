# SPDX-License-Identifier: Apache-2.0
"""Measure what vllm-ascend's copies of vLLM's ``Scheduler.schedule()`` (and
``update_from_output()``) change against upstream's (read with ``ast`` and
``difflib``; nothing is imported from either tree).

    VAB_VLLM_ASCEND_SRC=<checkout> python downstream_patch/schedule_deltas.py \\
        [--run VERSION|SCHEDULER_PY] [--versions V1,V2,...] [--quiet]

Every copy (a method longer than ``copies.COPY_LINES`` in ``copies.FILES``,
balance's own copy left out) is compared with the same method of upstream's
``Scheduler`` at each of ``--versions`` (release sdists, fetched once and
cached by ``upstream_patch/series_tool/sdist.py``; a path to a
``scheduler.py`` is taken as is). Source is compared per logical line:
comments, docstrings and formatting dropped (each statement, or a compound
statement's header, re-printed by ``ast.unparse``). The version(s) with the
smallest diff is the copy's *base*.

The hunks printed are against ``--run`` (default: the release lane's vLLM,
the one the copies run on), with their line ranges in upstream's file and in
the copy. Each hunk gets the first of these classes that it shows (the
others it also shows follow, ``+``-joined):

* ``behaviour``: the copy's own statements that name its mechanism
  (:data:`BEHAVIOUR`): what it changes on purpose.
* ``drift``: the copy side holds only statements some upstream version has
  (stale upstream code), or the hunk lacks statements upstream added after
  the base (their first version and line there are printed).
* ``compat``: own statements that only shield the copy from vLLM versions
  (``getattr``/``callable``/``cast`` probes) or log (:data:`COMPAT`).
* ``variant``: any other own statement: a rewrite to the same effect.

The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import os
import re
import sys
import tokenize
from pathlib import Path

import copies

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "upstream_patch"))
from series_tool.lanes import lane_tag  # noqa: E402
from series_tool.sdist import fetch_sdist  # noqa: E402

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
VERSIONS = "0.21.0,0.22.1,0.23.0,0.24.0,0.25.1,0.26.0,0.27.0,0.27.1,0.28.0,0.29.0"
SKIP_FILES = ("vllm_ascend/patch/platform/patch_balance_schedule.py",)
# The schedulers' own mechanisms (behaviour) and their version shims and
# diagnostics (compat), by the names they use; an own statement that matches
# neither is a ``variant`` (a rewrite to the same effect: a renamed local, a
# dropped annotation), which the design note checks by hand.
BEHAVIOUR = re.compile(
    r"recompute|preempt(ed)?_req_data|(^|[^_])transfer_config|preempt_hook|offloaded|"
    r"_apply_load_balance_modifications|_can_admit_waiting_request|"
    r"partial_group_hit|_get_computed_blocks_for_connector|selected_local|"
    r"time_budget|profiling_chunk|predicted_chunk|target_latency|max_model_len"
)
COMPAT = re.compile(
    r"getattr\(|callable\(|cast\(|_scheduler_output_supports|diagnostics|"
    r"print_scheduler_summary|^logger\.|scheduler_output_kwargs|"
    r"supports_partial_tail|_get_connector_computed_blocks|"
    r"_record_prefix_cache_stats|_has_pending_deliverable_output"
)
STRUCTURE = re.compile(
    r"^(else:|continue|break|request_queue\.pop_request\(\)|"
    r"step_skipped_waiting\.prepend_request\(request\))$"
)
Line = tuple[str, int, int]


def upstream_file(spec: str) -> tuple[str, Path]:
    """(label, path) of upstream's scheduler.py: a path, or a version's sdist."""
    if spec.endswith(".py"):
        return spec, Path(spec)
    version = spec.removeprefix("v")
    return version, fetch_sdist("vllm", version) / SCHEDULER


def find_method(text: str, cls: str, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def canon(raw: list[str], tokens: list[str]) -> str:
    """One logical line re-printed by ``ast`` (a compound statement's header
    without its body); the tokens joined if it does not parse alone."""
    text = "\n".join(raw).strip()
    head = text.split(None, 1)[0].rstrip(":")
    if head in ("else", "try", "finally"):
        return head + ":"
    pre, post, elif_ = "", "", head == "elif"
    if text.endswith(":"):
        pre = "try: pass\n" if head == "except" else ""
        post = " pass"
        text = "if" + text[4:] if elif_ else text
    try:
        node: ast.AST = ast.parse(pre + text + post).body[-1]
    except SyntaxError:
        return " ".join(tokens)
    if head == "except":
        node = node.handlers[0]  # type: ignore[attr-defined]
    if post:
        for field in ("body", "orelse", "finalbody", "handlers"):
            if hasattr(node, field):
                setattr(node, field, [])
    out = ast.unparse(node).strip()
    return "el" + out if elif_ else out


def logical_lines(text: str, fn: ast.FunctionDef) -> list[Line]:
    """(canonical statement, first line, last line) per logical line of
    ``fn``; comments, blank lines and docstrings dropped."""
    seg = text.splitlines()[fn.lineno - 1 : fn.end_lineno]
    out: list[Line] = []
    toks: list[str] = []
    kinds: list[int] = []
    start = end = 0
    for tok in tokenize.generate_tokens(io.StringIO("\n".join(seg) + "\n").readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            seg[row - 1] = seg[row - 1][:col]
            continue
        if tok.type in (tokenize.NL, tokenize.INDENT):
            continue
        if tok.type in (tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NEWLINE:
            if toks and kinds != [tokenize.STRING]:
                line = canon(seg[start - 1 : end], toks)
                out.append((line, fn.lineno + start - 1, fn.lineno + end - 1))
            toks, kinds, start = [], [], 0
            continue
        start = start or tok.start[0]
        end = tok.end[0]
        toks.append(tok.string)
        kinds.append(tok.type)
    return out


def opcodes(up: list[Line], cp: list[Line]) -> list[tuple[str, int, int, int, int]]:
    matcher = difflib.SequenceMatcher(
        None, [s for s, *_ in up], [s for s, *_ in cp], autojunk=False
    )
    return [op for op in matcher.get_opcodes() if op[0] != "equal"]


def span(lines: list[Line], i: int, j: int) -> str:
    if j > i:
        return f"{lines[i][1]}-{lines[j - 1][2]}"
    return f"before {lines[i][1]}" if i < len(lines) else "at end"


def classify(
    up_side: list[str], cp_side: list[str], base: set[str], seen: set[str]
) -> tuple[str, list[str]]:
    """The hunk's class (the first of behaviour, drift, compat, variant that
    it shows; the others it also shows ``+``-joined after it) and the
    upstream statements it lacks that are newer than the base."""
    own = [s for s in cp_side if s not in seen and not STRUCTURE.match(s)]
    newer = [s for s in up_side if s not in base]
    kinds = []
    if any(BEHAVIOUR.search(s) for s in own):
        kinds.append("behaviour")
    if any(COMPAT.search(s) and not BEHAVIOUR.search(s) for s in own):
        kinds.append("compat")
    if any(not COMPAT.search(s) and not BEHAVIOUR.search(s) for s in own):
        kinds.append("variant")
    if newer or not own:
        kinds.insert(1 if kinds[:1] == ["behaviour"] else 0, "drift")
    return "+".join(kinds), newer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=lane_tag("release", ROOT))
    parser.add_argument("--versions", default=VERSIONS)
    parser.add_argument("--quiet", action="store_true", help="counts only")
    args = parser.parse_args()
    value = os.environ.get("VAB_VLLM_ASCEND_SRC")
    if not value:
        raise SystemExit("schedule_deltas.py: VAB_VLLM_ASCEND_SRC is not set")
    src = Path(value)
    specs = args.versions.split(",")
    if args.run not in specs and args.run.removeprefix("v") not in specs:
        specs.append(args.run)
    uptexts = dict(upstream_file(s) for s in specs)
    run_label = upstream_file(args.run)[0]
    upstream: dict[str, dict[str, list[Line]]] = {}
    for label, path in uptexts.items():
        text = path.read_text()
        upstream[label] = {}
        for name in copies.METHODS:
            fn = find_method(text, "Scheduler", name)
            upstream[label][name] = logical_lines(text, fn) if fn else []
    summary: dict[str, object] = {"run": run_label, "copies": []}
    for rel in copies.FILES:
        if rel in SKIP_FILES or not (src / rel).is_file():
            continue
        for row in copies.methods(src / rel):
            cls, name, lines = str(row["class"]), str(row["method"]), row["lines"]
            if int(str(lines)) <= copies.COPY_LINES:
                print(f"{cls}.{name}: {lines} lines, not a copy  [{rel}]")
                summary["copies"].append({"copy": f"{cls}.{name}", "lines": lines})  # type: ignore[attr-defined]
                continue
            text = (src / rel).read_text()
            fn = find_method(text, cls, name)
            assert fn is not None
            cp = logical_lines(text, fn)
            sizes = {}
            for label, methods in upstream.items():
                ops = opcodes(methods[name], cp)
                sizes[label] = sum(i2 - i1 + j2 - j1 for _, i1, i2, j1, j2 in ops)
            best = min(sizes.values())
            base = [label for label, size in sizes.items() if size == best]
            base_lines = {s for b in base for s, *_ in upstream[b][name]}
            seen = {s for m in upstream.values() for s, *_ in m[name]}
            first: dict[str, tuple[str, int]] = {}
            for label, methods in upstream.items():
                for s, lo, _ in methods[name]:
                    first.setdefault(s, (label, lo))
            up = upstream[run_label][name]
            print(
                f"\n{cls}.{name}  [{rel}:{fn.lineno}-{fn.end_lineno}, {lines} lines,"
                f" {len(cp)} statements]"
            )
            print(
                "  diff size (statements) by version: "
                + ", ".join(f"{k} {v}" for k, v in sizes.items())
            )
            print(f"  base: {'='.join(base)}; hunks against {run_label}:")
            counts: dict[str, int] = {}
            hunks = []
            for tag, i1, i2, j1, j2 in opcodes(up, cp):
                up_side = [s for s, *_ in up[i1:i2]]
                cp_side = [s for s, *_ in cp[j1:j2]]
                kind, newer = classify(up_side, cp_side, base_lines, seen)
                primary = kind.split("+")[0]
                counts[primary] = counts.get(primary, 0) + 1
                where = f"upstream {span(up, i1, i2)}, copy {span(cp, j1, j2)}"
                since = sorted(
                    {"v{}:{}".format(*first[s]) for s in newer if s in first}
                )
                hunks.append(
                    {
                        "class": kind,
                        "upstream": span(up, i1, i2),
                        "copy": span(cp, j1, j2),
                        "newer_than_base": since,
                    }
                )
                print(
                    f"  [{kind}] {tag} {where}"
                    + (
                        f"; upstream statements new in {', '.join(since)}"
                        if since
                        else ""
                    )
                )
                if not args.quiet:
                    for s in up_side:
                        print(f"      - {s[:160]}")
                    for s in cp_side:
                        print(f"      + {s[:160]}")
            print(f"  counts: {json.dumps(counts, sort_keys=True)}")
            summary["copies"].append(
                {  # type: ignore[attr-defined]
                    "copy": f"{cls}.{name}",
                    "file": rel,
                    "lines": lines,
                    "statements": len(cp),
                    "base": base,
                    "sizes": sizes,
                    "counts": counts,
                    "hunks": hunks,
                }
            )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
