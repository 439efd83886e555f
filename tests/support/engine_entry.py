# SPDX-License-Identifier: Apache-2.0
"""Start an engine process as vLLM does, up to the moment upstream's
``run_engine_core`` would build the engine, and report what it would build.

vLLM starts each engine core with ``target=EngineCoreProc.run_engine_core``
(read in the front-end, pickled by name under spawn). :func:`spawn_entry`
does the same with a real spawned process. In the child, the bottom of the
chain (upstream's ``run_engine_core``) is replaced, before the target's
module is imported, by :func:`_record_choice`, which resolves exactly what
upstream's does at call time (the module-level ``DPEngineCoreProc``, the config's
``get_scheduler_cls()``) and writes it down instead of starting an engine
(no executor, no ZMQ handshake with a front-end: those cannot run without
one). Everything above it (this package's link, other plugins' wrappers,
vllm-ascend's patches) is the real code, re-created in the child by the
imports unpickling runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.support.processes import run_processes

#: vllm-ascend's balance patch module (its engine-class swap and gate).
ASCEND_PATCH_MODULE = "vllm_ascend.patch.platform.patch_balance_schedule"


def _record_choice(*args: Any, dp_rank: int = 0, **kwargs: Any) -> None:
    import sys

    import vllm.v1.engine.core as engine_core_mod

    from vllm_ascend_balance.wiring.engine_hook import gather_hook_installed

    engine_cls = engine_core_mod.DPEngineCoreProc
    scheduler_cls = kwargs["vllm_config"].scheduler_config.get_scheduler_cls()
    # vllm-ascend's own balance decision, asked the way its gate and its
    # engine-class swap ask it (read, never replaced, by the package).
    patch = sys.modules.get(ASCEND_PATCH_MODULE)
    ascend_enabled = None
    decider_is_theirs = None
    if patch is not None:
        # As vllm-ascend's BalanceScheduler.__init__ (main) and its platform
        # do in this process: its AscendConfig from this config and env.
        import importlib

        ascend_config = importlib.import_module("vllm_ascend.ascend_config")
        ascend_config.init_ascend_config(kwargs["vllm_config"])
        decider = patch._balance_scheduling_enabled
        ascend_enabled = bool(decider(kwargs["vllm_config"]))
        decider_is_theirs = decider.__module__ == ASCEND_PATCH_MODULE
    Path(kwargs.pop("_out")).write_text(
        json.dumps(
            {
                "engine_cls": f"{engine_cls.__module__}.{engine_cls.__qualname__}",
                "gather_hook": gather_hook_installed(engine_cls),
                "scheduler_mro": [
                    f"{k.__module__}.{k.__qualname__}" for k in scheduler_cls.__mro__
                ],
                "ascend_decides": ascend_enabled,
                "ascend_decider_theirs": decider_is_theirs,
                "env": os.environ.get("VLLM_ASCEND_BALANCE_SCHEDULING"),
                "modules": sorted(
                    m for m in sys.modules if m.startswith(("vllm_ascend", "tests."))
                ),
            }
        )
    )


def _child(target_name: str, vllm_config: Any, out: str) -> None:
    import importlib

    import vllm.v1.engine.core as engine_core_mod

    # The bottom link first; then the target is looked up by the name pickle
    # stored, which imports its module (and whatever that import installs).
    engine_core_mod.EngineCoreProc.run_engine_core = staticmethod(_record_choice)
    module_name, _, qualname = target_name.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    target(vllm_config=vllm_config, dp_rank=0, local_dp_rank=0, _out=out)


def spawn_entry(target: Any, vllm_config: Any, out: Path) -> dict[str, Any]:
    """Run ``target`` (what ``EngineCoreProc.run_engine_core`` holds in this
    process; passed to the child by the name pickle would store) in a spawned
    child; return what the engine would be built from."""
    name = f"{target.__module__}:{target.__qualname__}"
    joined = run_processes(_child, [(name, vllm_config, str(out))], 300)
    assert joined.hung == [] and joined.exitcodes == [0], joined
    return json.loads(out.read_text())
