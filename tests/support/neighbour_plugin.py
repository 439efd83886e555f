# SPDX-License-Identifier: Apache-2.0
"""A second plugin that does to vLLM what vllm-ascend's patches do: at import
it wraps ``EngineCoreProc.run_engine_core`` (a module-level function, so a
spawned child re-creates the wrapper by importing this module, as vLLM's
pickled target requires) and, when called, swaps the module-level
``DPEngineCoreProc`` for its own subclass (as DyntraLB does). Used by the
coexistence tests to check this package composes with such a neighbour in
either plugin load order."""

from __future__ import annotations

from typing import Any

import vllm.v1.engine.core as engine_core_mod

_previous = engine_core_mod.EngineCoreProc.__dict__["run_engine_core"]
_previous_fn = _previous.__func__ if isinstance(_previous, staticmethod) else _previous


class NeighbourDPEngineCoreProc(engine_core_mod.DPEngineCoreProc):
    """The neighbour's engine class."""


def run_engine_core(*args: Any, **kwargs: Any) -> Any:
    engine_core_mod.DPEngineCoreProc = NeighbourDPEngineCoreProc
    return _previous_fn(*args, **kwargs)


engine_core_mod.EngineCoreProc.run_engine_core = staticmethod(run_engine_core)


def register() -> None:
    """Its plugin entry point: the work happens at import."""
