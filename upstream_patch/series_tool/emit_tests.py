# SPDX-License-Identifier: Apache-2.0
"""``test_scheduler.py`` with the series' upstream tests appended, in the
release's own helpers' terms (``scheduler_cls=`` or a ``monkeypatch`` swap),
and the one argument ``create_scheduler()`` gains where a test needs it."""

from __future__ import annotations

import ast
import textwrap

from .constants import SEAM, TEST_REL, UTILS_REL
from .lanes import SeriesError
from .shapes import Shape
from .upstream_tests import (
    ASYNC_IMPORT,
    COUNT_DOC,
    COUNT_DOC_PAUSE,
    COUNT_MAKE_SWAP,
    COUNT_MAKE_WITH_CLS,
    KV_MAKE_SWAP,
    KV_MAKE_WITH_CLS,
    MAKE_SWAP,
    MAKE_WITH_CLS,
    OVERRIDE_DOC,
    OVERRIDE_DOC_COUPLED,
    PAUSE_BLOCK,
    TEST_ASYNC_KV_BODY,
    TEST_BODY,
    TEST_COUNT_BODY,
    TEST_KV_BODY,
    THROTTLE_MARK,
)

#: The ``create_scheduler()`` argument the kv scope test passes (0.34 on).
INFLIGHT_ARG = "max_num_inflight_kv_loads"


def patched_test(source: str, utils_source: str, shape: Shape | None = None) -> str:
    """``test_scheduler.py`` with the behaviour tests appended (and the
    ``AsyncScheduler`` import, where missing, among the ``vllm`` imports).
    ``shape`` (the release's, from :func:`patched_scheduler`) runs the step
    after a held one throttled too where ``schedule()`` records
    ``prefill_capacity_bound``, adds the exemption test where the release has
    ``kv_holding_waiting`` (with ``async_kv_waiting``: the held step starts no
    async KV load, at the running cap and below it) and, where the loop keeps
    the pause test inline, checks that ``PAUSED_NEW`` holds whatever an
    override returns."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    needed = ["pytest", "Request", "Scheduler", "create_requests", "create_scheduler"]
    if shape is not None and shape.kv_queue:
        needed += ["RequestStatus", "mock_kv"]
    pause = shape is not None and shape.pause_inline
    if pause:
        needed += ["PauseState"]
    for name in needed:
        if name not in names:
            raise SeriesError(f"{TEST_REL} does not import {name}: re-sync by hand")
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for helper_name in ["make_output"] + (
        ["_runner_output"] if shape is not None and shape.kv_queue else []
    ):
        if helper_name not in functions:
            raise SeriesError(f"{TEST_REL} has no {helper_name}(): re-sync by hand")
    lines = source.splitlines(keepends=True)
    if "AsyncScheduler" not in names:
        module = "vllm.v1.core.sched.async_scheduler"
        later = [
            n
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            and (n.module or "").startswith("vllm.")
            and (n.module or "") > module
        ]
        if not later:
            raise SeriesError(
                f"no vllm import to place AsyncScheduler by in {TEST_REL}"
            )
        lines.insert(later[0].lineno - 1, ASYNC_IMPORT)
    helper = _module_function(ast.parse(utils_source), "create_scheduler")
    params = {a.arg for a in helper.args.args + helper.args.kwonlyargs}
    if "async_scheduling" not in params:
        raise SeriesError(
            "create_scheduler() takes no async_scheduling: re-sync by hand"
        )
    with_cls = "scheduler_cls" in params
    text = "".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    swap = "" if with_cls else "monkeypatch: pytest.MonkeyPatch"
    # Where schedule() records prefill_capacity_bound and takes
    # throttle_prefills, the step after a held one also runs throttled.
    throttled = shape is not None and shape.coupled and shape.throttle_arg
    gate_params = ", ".join(
        ["async_scheduling: bool"]
        + ["throttle_prefills: bool"] * throttled
        + [swap] * (not with_cls)
    )
    queues = shape.queues if shape is not None else ["waiting"]
    text += TEST_BODY.format(
        seam=SEAM,
        gate_doc=_docstring(
            "Holds "
            + " and ".join(f"``self.{name}``" for name in queues)
            + " while closed.",
            "    ",
        ),
        throttle_mark=THROTTLE_MARK if throttled else "",
        override_doc=_docstring(
            OVERRIDE_DOC_COUPLED if throttled else OVERRIDE_DOC, "    "
        ),
        throttle_arg="throttle_prefills=throttle_prefills" if throttled else "",
        make=MAKE_WITH_CLS if with_cls else MAKE_SWAP,
        params=_params(gate_params, "test_should_stop_admitting_waiting_override"),
    )
    if shape is not None and shape.kv_queue:
        if shape.async_kv:
            name = "test_should_stop_admitting_waiting_kv_scope"
            body, kv_params = TEST_ASYNC_KV_BODY, "max_num_seqs: int"
            kv_seqs = f"\n        max_num_seqs=max_num_seqs,\n        {INFLIGHT_ARG}=2,"
        else:
            name = "test_should_stop_admitting_waiting_admits_kv_holding_requests"
            body, kv_params, kv_seqs = TEST_KV_BODY, "", ""
        kv_make = KV_MAKE_WITH_CLS if with_cls else KV_MAKE_SWAP
        text += body.format(
            kv_params=_params(", ".join(filter(None, [kv_params, swap])), name),
            kv_make=kv_make.format(kv_seqs=kv_seqs),
        )
    name = "test_should_stop_admitting_waiting_asked_once_per_schedule"
    text += TEST_COUNT_BODY.format(
        seam=SEAM,
        count_params=_params(swap, name),
        count_doc=_docstring(COUNT_DOC_PAUSE if pause else COUNT_DOC, "    "),
        count_make=COUNT_MAKE_WITH_CLS if with_cls else COUNT_MAKE_SWAP,
        pause_block=PAUSE_BLOCK if pause else "",
    )
    return text


def patched_utils(utils_source: str, shape: Shape | None = None) -> str | None:
    """``tests/v1/core/utils.py`` whose ``create_scheduler()`` takes
    ``max_num_inflight_kv_loads`` (into its ``SchedulerConfig``), where the
    kv scope test needs it (``shape.async_kv``) and the helper lacks it; else
    None (the helper is left alone). Placed after ``max_num_active_seqs``
    where the helper has it, as upstream's tests set the scheduler config
    before the scheduler is built."""
    if shape is None or not shape.async_kv:
        return None
    helper = _module_function(ast.parse(utils_source), "create_scheduler")
    args = helper.args.args + helper.args.kwonlyargs
    if any(a.arg == INFLIGHT_ARG for a in args):
        return None
    config = next(
        (
            node
            for node in ast.walk(helper)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "SchedulerConfig"
        ),
        None,
    )
    if config is None or not config.keywords:
        raise SeriesError(f"no SchedulerConfig(...) in {UTILS_REL}: re-sync by hand")
    after_arg = next((a for a in args if a.arg == "max_num_active_seqs"), args[-1])
    after_kw = next(
        (k for k in config.keywords if k.arg == "max_num_active_seqs"),
        config.keywords[-1],
    )
    lines = utils_source.splitlines(keepends=True)
    # Bottom up (the call is below the signature): one line each, as written.
    for node, text in (
        (after_kw, f"{INFLIGHT_ARG}={INFLIGHT_ARG},"),
        (after_arg, f"{INFLIGHT_ARG}: int | None = None,"),
    ):
        assert node.end_lineno is not None
        row = lines[node.lineno - 1]
        if node.end_lineno != node.lineno or not row.rstrip().endswith(","):
            raise SeriesError(
                f"create_scheduler() in {UTILS_REL} is not one argument a line: "
                "re-sync by hand"
            )
        indent = row[: len(row) - len(row.lstrip())]
        lines.insert(node.end_lineno, f"{indent}{text}\n")
    return "".join(lines)


def _docstring(text: str, indent: str) -> str:
    """A docstring's text between its quotes: ``text`` wrapped to 80 columns
    after ``indent`` and the opening quotes, continued at ``indent``."""
    lines = textwrap.wrap(
        text,
        width=80 - len(indent),
        initial_indent='"""',
        break_on_hyphens=False,
        break_long_words=False,
    )
    return f"\n{indent}".join(lines)[3:]


def _params(params: str, name: str) -> str:
    """``def name(params):``'s parameter text as ruff formats it: on the
    ``def`` line when that fits vLLM's 88 columns, else on a line of its own."""
    if len(f"def {name}({params}):") <= 88:
        return params
    # Split, a lone parameter gets ruff's magic trailing comma.
    return f"\n    {params}{'' if ',' in params else ','}\n"


def _module_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise SeriesError(f"no {name}() in {UTILS_REL}")
