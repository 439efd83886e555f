# SPDX-License-Identifier: Apache-2.0
"""Scheduler classes built at run time from vLLM's own sources, never copied
into this repository:

* :func:`original_classes`: the release's original (unpatched)
  ``Scheduler``/``AsyncScheduler``, from the lane's release sdist
  (``upstream_patch/series.py sdist``). Used by the refactor-equivalence
  tests and by the refactor table of ``benchmarks/bench_schedule_overhead.py``.
* :func:`classes_from_source`: the same pair from any variant of the
  installed (patched) ``scheduler.py`` text, for the known-bad variants the
  negative controls need (see :mod:`tests.support.seam_shapes`).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from unittest import mock

from vllm.v1.core.sched import async_scheduler as installed_async_mod

from tests.support.lanes import current_lane
from tests.support.scratch import process_tempdir
from tests.support.series_tool import series

SCHED_REL = Path("vllm/v1/core/sched")


def _exec_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_async(name: str, scheduler_module: ModuleType) -> tuple[type, type]:
    """(Scheduler, AsyncScheduler) where the AsyncScheduler is upstream's own
    installed ``async_scheduler.py`` executed again with ``scheduler_module``
    standing in for ``vllm.v1.core.sched.scheduler`` while it imports, so it
    subclasses that module's Scheduler (reusing the installed class's methods
    would not work: their zero-argument ``super()`` is bound to the installed
    class)."""
    with mock.patch.dict(
        sys.modules, {"vllm.v1.core.sched.scheduler": scheduler_module}
    ):
        async_module = _exec_module(f"{name}_async", Path(installed_async_mod.__file__))
    return scheduler_module.Scheduler, async_module.AsyncScheduler


def async_scheduler_over(name: str, scheduler_cls: type) -> type:
    """Upstream's installed ``AsyncScheduler`` re-executed over
    ``scheduler_cls`` (what vLLM builds when a plugin swapped the module-level
    ``Scheduler`` before ``async_scheduler`` was first imported, whatever the
    import order in this process was)."""
    import vllm.v1.core.sched.scheduler as installed_mod

    stand_in = ModuleType(name)
    stand_in.__dict__.update(vars(installed_mod))
    stand_in.Scheduler = scheduler_cls  # type: ignore[attr-defined]
    return _with_async(name, stand_in)[1]


@functools.cache
def original_classes() -> tuple[type, type]:
    """(Scheduler, AsyncScheduler) of the unpatched release, from its sdist.

    Only scheduler.py differs between the sdist and the install (checked in
    test_upstream_series.py), so the original module imports everything else
    from the installed vLLM.
    """
    tree = series.sdist(current_lane())
    async_src = tree / SCHED_REL / "async_scheduler.py"
    assert async_src.read_bytes() == Path(installed_async_mod.__file__).read_bytes()
    original = _exec_module("vab_original_scheduler", tree / SCHED_REL / "scheduler.py")
    scheduler, async_scheduler = _with_async("vab_original_scheduler", original)
    assert async_scheduler.__module__ == "vab_original_scheduler_async"
    return scheduler, async_scheduler


@functools.cache
def classes_from_source(name: str, source: str) -> tuple[type, type]:
    """(Scheduler, AsyncScheduler) from ``source``, a variant of the installed
    ``vllm/v1/core/sched/scheduler.py``, executed as module ``name``."""
    # Kept for the life of the process: tracebacks read their lines from it.
    path = process_tempdir(f"{name}-") / "scheduler.py"
    path.write_text(source)
    return _with_async(name, _exec_module(name, path))
