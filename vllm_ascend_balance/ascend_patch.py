# SPDX-License-Identifier: Apache-2.0
"""vllm-ascend's own balance patch: find it, judge it, neutralise it.

vllm-ascend imports ``vllm_ascend.patch.platform.patch_balance_schedule``
unconditionally (its platform's ``pre_register_and_update`` and its general
plugins). That module swaps the module-level ``Scheduler`` for its
``BalanceScheduler`` (a copy of ``Scheduler.schedule()`` with the gate
inline) and wraps ``EngineCoreProc.run_engine_core`` to build its own
``BalanceDPEngineCoreProc``, whose busy loop gathers too. Both decide
through one module-level function, ``_balance_scheduling_enabled(vllm_config)``,
looked up at call time, and they read the same setting this package reads.
Left alone, balance on would run two gates and two gathers per step.

So where balance scheduling is requested, every engine process replaces that
function by one that returns False (:func:`neutralise`), before anything
calls it: vllm-ascend's ``BalanceScheduler`` then delegates ``schedule()``
to upstream (``super().schedule()``, which asks this package's seam) and
its engine class is never built. What else the file does stays (e.g. the
0.23 preemption guard on PD-disaggregated prefill nodes, which balance never
runs on: ``config.check_pd_mixed``).

Whether a given vllm-ascend's patch can be neutralised this way is judged
from its source (:func:`assess`), without importing it (its import needs an
NPU): every balance decision in it must go through that function. A patch
that decides elsewhere is refused with its version named.

Nothing here imports ``vllm_ascend`` unless it is installed and balance
scheduling is requested in an engine process.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

PATCH_MODULE = "vllm_ascend.patch.platform.patch_balance_schedule"
DECIDER = "_balance_scheduling_enabled"
_PATCH_FILE = Path("patch", "platform", "patch_balance_schedule.py")
_NEUTRALISED = "__vab_neutralised__"


class AscendPatchError(RuntimeError):
    """vllm-ascend's balance patch cannot be neutralised safely; the message
    names the version and what to do, in one line."""


@dataclass(frozen=True)
class AscendPatch:
    """vllm-ascend's balance patch as installed.

    Attributes:
        version: the installed vllm-ascend distribution version.
        path: the patch module's source file.
        problem: why it cannot be neutralised, or None when it can.
    """

    version: str
    path: Path
    problem: str | None

    def describe(self) -> str:
        """One line for ``doctor`` and the engine log."""
        if self.problem is not None:
            return f"vllm-ascend {self.version}: {self.problem}"
        return (
            f"vllm-ascend {self.version}'s balance patch neutralised in engine "
            f"processes ({DECIDER} -> False): its copied schedule() gate and "
            f"its DP engine class stay inactive"
        )


def installed_version() -> str | None:
    """The installed vllm-ascend version, or None."""
    for name in ("vllm-ascend", "vllm_ascend"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def find_patch() -> AscendPatch | None:
    """vllm-ascend's balance patch if vllm-ascend is installed and ships one.

    Reads the file next to the ``vllm_ascend`` package without importing it
    (``find_spec`` of the submodule would run vllm-ascend's package
    ``__init__`` files, which import every platform patch).
    """
    module = sys.modules.get(PATCH_MODULE)
    path: Path | None = None
    if module is not None and getattr(module, "__file__", None):
        path = Path(module.__file__)  # type: ignore[arg-type]
    else:
        spec = importlib.util.find_spec("vllm_ascend")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / _PATCH_FILE
    if not path.is_file():
        return None
    version = installed_version() or "(unknown version)"
    return AscendPatch(version, path, assess(path.read_text()))


def _names(node: ast.AST) -> set[str]:
    """Every name and attribute name used under ``node``."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def _bases(cls: ast.ClassDef) -> set[str]:
    return {
        b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases
    }


def assess(source: str) -> str | None:
    """Whether a vllm-ascend balance patch (its source) can be neutralised by
    replacing ``_balance_scheduling_enabled``; None if it can, else why.

    The rule: the module defines ``_balance_scheduling_enabled``; every
    function that builds or names its ``DPEngineCoreProc`` subclass calls it;
    every class with a ``balance_gather`` sets ``_balance_enabled`` from it in
    ``__init__`` and returns early from ``balance_gather`` unless
    ``_balance_enabled``. Mirrors both shapes vllm-ascend has shipped
    (0.23.0.post1: a copied ``run_engine_core``; main: a wrapper that swaps
    the module-level ``DPEngineCoreProc``).
    """
    tree = ast.parse(source)
    top = {getattr(n, "name", None): n for n in tree.body}
    if not isinstance(top.get(DECIDER), ast.FunctionDef):
        return f"its balance patch has no {DECIDER}() to decide through"
    engines = {
        n.name
        for n in tree.body
        if isinstance(n, ast.ClassDef) and "DPEngineCoreProc" in _bases(n)
    }
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name != DECIDER:
            used = _names(node)
            if used & engines and DECIDER not in used:
                engine = sorted(used & engines)[0]
                return f"its {node.name}() builds {engine} without asking {DECIDER}()"
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        gather = methods.get("balance_gather")
        if gather is None:
            continue
        init = methods.get("__init__")
        if init is None or DECIDER not in _names(init):
            return f"its {cls.name}.__init__ does not decide through {DECIDER}()"
        first = gather.body[0] if gather.body else None
        if not (
            isinstance(first, ast.If)
            and "_balance_enabled" in _names(first.test)
            and isinstance(first.body[0], ast.Return)
        ):
            return f"its {cls.name}.balance_gather() does not return early if disabled"
    return None


def _never_enabled(*args: Any, **kwargs: Any) -> bool:
    """Stand-in for vllm-ascend's ``_balance_scheduling_enabled``: this
    package's gate is the one that runs (:mod:`vllm_ascend_balance.ascend_patch`)."""
    return False


setattr(_never_enabled, _NEUTRALISED, True)


def neutralise() -> AscendPatch | None:
    """In an engine process where balance scheduling is requested: import
    vllm-ascend's balance patch (as its platform does anyway) and make its
    ``_balance_scheduling_enabled`` return False. Idempotent; None when
    vllm-ascend (or its patch) is not installed.

    Raises:
        AscendPatchError: the installed patch decides elsewhere too.
    """
    patch = find_patch()
    if patch is None:
        return None
    if patch.problem is not None:
        raise AscendPatchError(refusal(patch))
    module = importlib.import_module(PATCH_MODULE)
    decider = getattr(module, DECIDER, None)
    if not getattr(decider, _NEUTRALISED, False):
        _originals[PATCH_MODULE] = decider
        module.__dict__[DECIDER] = _never_enabled
    return patch


_originals: dict[str, Any] = {}


def restore() -> None:
    """Undo :func:`neutralise` in this process (tests that run vllm-ascend's
    own gate after one that activated balance in-process)."""
    module = sys.modules.get(PATCH_MODULE)
    original = _originals.pop(PATCH_MODULE, None)
    if module is not None and original is not None:
        module.__dict__[DECIDER] = original


def is_neutralised() -> bool:
    """Whether vllm-ascend's balance patch, if loaded, is neutralised here."""
    module = sys.modules.get(PATCH_MODULE)
    decider = getattr(module, DECIDER, None)
    return module is None or getattr(decider, _NEUTRALISED, False)


def refusal(patch: AscendPatch) -> str:
    """The one-line refusal for a patch that cannot be neutralised."""
    return (
        f"vllm-ascend {patch.version}'s balance patch cannot be neutralised "
        f"safely ({patch.problem}), so two gates would run: use a vllm-ascend "
        f"whose patch decides only through {DECIDER}(), or "
        f"uninstall vllm-ascend-balance to run vllm-ascend's own gate"
    )


def check_exclusive(vllm_config: Any) -> str | None:
    """vllm-ascend settings that exclude balance scheduling (mirrors the
    check in vllm-ascend's ``ascend_config.py``, which vllm-ascend applies
    only when its own config reads balance as on); the refusal text or None."""
    additional = getattr(vllm_config, "additional_config", None) or {}
    profiling = additional.get("profiling_chunk_config")
    if isinstance(profiling, dict) and profiling.get("enabled"):
        return (
            "cannot run with vllm-ascend's profiling_chunk_config (its scheduler "
            "chooses chunk sizes by its own schedule() copy): disable one of them"
        )
    return None
