# SPDX-License-Identifier: Apache-2.0
"""Whether vLLM's plugin loader will load this package, said in one line.

Everything the package does in a server starts from its
``vllm.general_plugins`` entry point; a process whose loader skips it runs
stock vLLM, balance setting or not, and nothing in the package runs there to
say so. The operator tools (``doctor``, the demo) check it instead, as
vLLM's loader decides it (``load_plugins_by_group`` in
``vllm/plugins/__init__.py``): every entry point of the group is loaded
unless ``VLLM_PLUGINS`` is set, and then only those whose name is in it
(``vllm/envs.py``: the variable split on ``,``, nothing stripped).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping

ENTRY_POINT_GROUP = "vllm.general_plugins"
ENTRY_POINT_TARGET = "vllm_ascend_balance.wiring.activation:register"


def entry_point_name() -> str | None:
    """The name this package's entry point is installed under
    (``ascend_balance``, from ``pyproject.toml``); None: not installed."""
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value == ENTRY_POINT_TARGET:
            return ep.name
    return None


def allowlist(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """``VLLM_PLUGINS`` as vLLM reads it (``vllm/envs.py``): None when unset
    (every plugin loads), else the names split on ``,``."""
    environ = os.environ if environ is None else environ
    value = environ.get("VLLM_PLUGINS")
    return None if value is None else value.split(",")


def load_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why vLLM will not load this package's plugin in a process with
    ``environ`` (default ``os.environ``), in one line with the fix; None:
    it will."""
    name = entry_point_name()
    if name is None:
        return (
            f"this package's {ENTRY_POINT_GROUP} entry point is not installed "
            "in this Python environment, so vLLM never loads it: pip install "
            "vllm-ascend-balance into the venv of `vllm serve`"
        )
    allowed = allowlist(environ)
    if allowed is None or name in allowed:
        return None
    given = ",".join(allowed)
    others = [n.strip() for n in allowed if n.strip() and n.strip() != name]
    spaced = any(n.strip() == name for n in allowed)
    why = f" (vLLM strips no spaces around {name!r})" if spaced else ""
    return (
        f"VLLM_PLUGINS={given} leaves out this package's plugin {name!r}, so "
        f"vLLM will not load it and balance scheduling stays off{why}: set "
        f"VLLM_PLUGINS={','.join([*others, name])} or unset it"
    )
