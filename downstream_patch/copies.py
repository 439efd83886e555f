# SPDX-License-Identifier: Apache-2.0
"""Count the copies of vLLM's ``Scheduler`` methods a vllm-ascend checkout
carries (read with ``ast``; nothing is imported).

    VAB_VLLM_ASCEND_SRC=<checkout> python downstream_patch/copies.py [SCHEDULER_PY]

For each scheduler class of vllm-ascend that defines its own ``schedule()``
or ``update_from_output()``: the method's length in lines (``def`` to its
last line, comments and docstring included), whether it calls
``super()``'s method and whether it names vLLM's
``_should_stop_admitting_waiting`` seam. A method longer than
:data:`COPY_LINES` is counted as a copy of upstream's (the wrappers are a few
lines); a copy that does not name the seam is one the gate cannot reach.
With ``SCHEDULER_PY`` (an upstream ``vllm/v1/core/sched/scheduler.py``), the
same for upstream's ``Scheduler``, for scale. The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

FILES = (
    "vllm_ascend/patch/platform/patch_balance_schedule.py",
    "vllm_ascend/core/recompute_scheduler.py",
    "vllm_ascend/core/dyntra_lb_scheduler.py",
    "vllm_ascend/core/scheduler_profiling_chunk.py",
    "vllm_ascend/core/batch_job_aware_scheduler.py",
    "vllm_ascend/core/short_request_first_scheduler.py",
)
METHODS = ("schedule", "update_from_output")
SEAM = "_should_stop_admitting_waiting"
COPY_LINES = 40


def methods(path: Path) -> list[dict[str, object]]:
    text = path.read_text()
    rows = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in METHODS:
                source = ast.get_source_segment(text, item) or ""
                rows.append(
                    {
                        "class": node.name,
                        "method": item.name,
                        "lines": (item.end_lineno or item.lineno) - item.lineno + 1,
                        "calls_super": f"super().{item.name}(" in source,
                        "asks_seam": SEAM in source,
                    }
                )
    return rows


def main() -> int:
    value = os.environ.get("VAB_VLLM_ASCEND_SRC")
    if not value:
        raise SystemExit("copies.py: VAB_VLLM_ASCEND_SRC is not set")
    src = Path(value)
    table = []
    for rel in FILES:
        for row in methods(src / rel):
            table.append({"file": rel, **row})
    copies = [r for r in table if int(str(r["lines"])) > COPY_LINES]
    for row in table:
        print(
            f"{row['class']}.{row['method']}: {row['lines']} lines"
            f"{' (calls super)' if row['calls_super'] else ''}"
            f"{' (asks the seam)' if row['asks_seam'] else ''}  [{row['file']}]"
        )
    summary: dict[str, object] = {
        "copies": [f"{r['class']}.{r['method']}" for r in copies],
        "copied_lines": sum(int(str(r["lines"])) for r in copies),
        "blind_to_seam": [
            f"{r['class']}.{r['method']}"
            for r in copies
            if r["method"] == "schedule" and not r["asks_seam"]
        ],
        "rows": table,
    }
    if len(sys.argv) > 1:
        upstream = [r for r in methods(Path(sys.argv[1])) if r["class"] == "Scheduler"]
        summary["upstream"] = upstream
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
