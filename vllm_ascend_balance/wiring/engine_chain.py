# SPDX-License-Identifier: Apache-2.0
"""This package's link in the chain of ``EngineCoreProc.run_engine_core`` wrappers.

Several plugins wrap ``EngineCoreProc.run_engine_core`` (vllm-ascend's
balance and profiling-chunk patches, DyntraLB, ...), each capturing the
function it found. vLLM starts every engine process with
``target=EngineCoreProc.run_engine_core``, read in the front-end
(``vllm/v1/engine/utils.py``). Under the spawn start method that target is
pickled by module and qualified name: the child imports the target's module,
whose import re-creates the wrappers below it, and calls it.

This package adds its link only where balance scheduling is requested, in
the front-end once the engine config exists (every plugin and the platform
have installed theirs by then), as the outermost link. It remembers the link
it wraps twice: in memory (a forked child inherits it) and as the name the
spawn start method would have pickled (:data:`NEXT_ENV`, inherited by the
engine processes). In the engine process :func:`resolve_next` returns that
link as unpickling would have, so the chain below this package's link is
exactly the chain vLLM would have run without it. Balance off: no link.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import vllm.v1.engine.core as engine_core_mod

NEXT_ENV = "VAB_RUN_ENGINE_CORE_NEXT"

# What the class attribute held before this package's link (a staticmethod
# or, as vllm-ascend 0.23 leaves it, a plain function), and its callable.
_next_attr: Any = None
_next: Callable[..., Any] | None = None


def _as_function(attr: Any) -> Callable[..., Any]:
    return attr.__func__ if isinstance(attr, staticmethod) else attr


def current_target() -> Callable[..., Any]:
    """What vLLM would start an engine process with right now."""
    return _as_function(engine_core_mod.EngineCoreProc.__dict__["run_engine_core"])


def pickled_name(fn: Callable[..., Any]) -> str:
    """``module:qualname``, the reference pickle stores for a function."""
    return f"{fn.__module__}:{fn.__qualname__}"


def install(link: Callable[..., Any]) -> None:
    """Make ``link`` the outermost ``run_engine_core`` (front-end process).
    Idempotent: a link already outermost is not wrapped again."""
    global _next_attr, _next
    attr = engine_core_mod.EngineCoreProc.__dict__["run_engine_core"]
    if _as_function(attr) is link:
        return
    _next_attr, _next = attr, _as_function(attr)
    os.environ[NEXT_ENV] = pickled_name(_next)
    engine_core_mod.EngineCoreProc.run_engine_core = staticmethod(link)


def uninstall(link: Callable[..., Any]) -> None:
    """Put back what :func:`install` wrapped, exactly as it was, if ``link``
    is still outermost (a later config in this process turned balance off)."""
    global _next_attr, _next
    if current_target() is link and _next_attr is not None:
        engine_core_mod.EngineCoreProc.run_engine_core = _next_attr
        os.environ.pop(NEXT_ENV, None)
        _next_attr, _next = None, None


def resolve_next(link: Callable[..., Any]) -> Callable[..., Any]:
    """The link below ``link`` (engine process).

    In memory when this process installed it or was forked from one that
    did; else by :data:`NEXT_ENV`, imported and looked up as ``pickle``
    would (which runs the same module imports, so the same wrappers install
    below it); else what the class holds now, if that is not ``link``.

    Raises:
        RuntimeError: the chain cannot be resolved without calling ``link``
            itself again.
    """
    found: Callable[..., Any] | None = _next
    if found is None and os.environ.get(NEXT_ENV):
        module_name, _, qualname = os.environ[NEXT_ENV].partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        found = _as_function(obj)
    if found is None:
        found = current_target()
    if found is link:
        raise RuntimeError(
            f"balance scheduling: cannot find the run_engine_core below "
            f"{pickled_name(link)} ({NEXT_ENV}={os.environ.get(NEXT_ENV)!r})"
        )
    return found
