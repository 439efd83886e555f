# SPDX-License-Identifier: Apache-2.0
"""``test_scheduler.py`` with the series' upstream tests appended, in the
release's own helpers' terms (``scheduler_cls=`` or a ``monkeypatch`` swap)."""

from __future__ import annotations

import ast

from .constants import SEAM, TEST_REL, UTILS_REL
from .lanes import SeriesError
from .shapes import Shape
from .upstream_tests import (
    ASYNC_IMPORT,
    COUNT_MAKE_SWAP,
    COUNT_MAKE_WITH_CLS,
    KV_MAKE_SWAP,
    KV_MAKE_WITH_CLS,
    MAKE_SWAP,
    MAKE_WITH_CLS,
    TEST_BODY,
    TEST_COUNT_BODY,
    TEST_HELD_BODY,
    TEST_KV_BODY,
)


def patched_test(source: str, utils_source: str, shape: Shape | None = None) -> str:
    """``test_scheduler.py`` with the behaviour tests appended (and the
    ``AsyncScheduler`` import, where missing, among the ``vllm`` imports).
    ``shape`` (the release's, from :func:`patched_scheduler`) adds the
    coupling pin where ``schedule()`` records ``prefill_capacity_bound`` and
    the exemption test where the release has ``kv_holding_waiting``."""
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
    gate_params = ", ".join(["async_scheduling: bool"] + [swap] * (not with_cls))
    pause = shape is not None and shape.pause_default
    text += TEST_BODY.format(
        seam=SEAM,
        gate_return=f"self.closed or super().{SEAM}()" if pause else "self.closed",
        make=MAKE_WITH_CLS if with_cls else MAKE_SWAP,
        params=_params(gate_params, "test_should_stop_admitting_waiting_override"),
    )
    if shape is not None and shape.coupled and shape.throttle_arg:
        name = "test_should_stop_admitting_waiting_held_step_is_capacity_bound"
        text += TEST_HELD_BODY.format(
            make=MAKE_WITH_CLS if with_cls else MAKE_SWAP,
            params=_params(gate_params, name),
        )
    if shape is not None and shape.kv_queue:
        name = "test_should_stop_admitting_waiting_admits_kv_holding_requests"
        text += TEST_KV_BODY.format(
            kv_params=_params(swap, name),
            kv_make=KV_MAKE_WITH_CLS if with_cls else KV_MAKE_SWAP,
        )
    name = "test_should_stop_admitting_waiting_asked_once_per_schedule"
    text += TEST_COUNT_BODY.format(
        seam=SEAM,
        count_params=_params(swap, name),
        count_make=COUNT_MAKE_WITH_CLS if with_cls else COUNT_MAKE_SWAP,
    )
    return text


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
