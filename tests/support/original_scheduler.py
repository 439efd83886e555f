# SPDX-License-Identifier: Apache-2.0
"""The release's original (unpatched) ``Scheduler``/``AsyncScheduler``.

Loaded at run time from the lane's release sdist (``upstream_patch/series.py
sdist``), never copied into this repository. Used by the refactor-equivalence
tests and by the refactor table of ``benchmarks/bench_schedule_overhead.py``.
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
from tests.support.series_tool import series

SCHED_REL = Path("vllm/v1/core/sched")


def _exec_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def original_classes() -> tuple[type, type]:
    """(Scheduler, AsyncScheduler) of the unpatched release, from its sdist.

    Only scheduler.py differs between the sdist and the install (checked in
    test_upstream_series.py), so the original module imports everything else
    from the installed vLLM. The original AsyncScheduler is upstream's own
    async_scheduler.py executed again with the original module standing in for
    ``vllm.v1.core.sched.scheduler`` while it imports, so it subclasses the
    original Scheduler (reusing the installed class's methods would not work:
    their zero-argument ``super()`` is bound to the installed class).
    """
    tree = series.sdist(current_lane())
    original = _exec_module("vab_original_scheduler", tree / SCHED_REL / "scheduler.py")
    async_src = tree / SCHED_REL / "async_scheduler.py"
    assert async_src.read_bytes() == Path(installed_async_mod.__file__).read_bytes()
    with mock.patch.dict(sys.modules, {"vllm.v1.core.sched.scheduler": original}):
        original_async = _exec_module("vab_original_async_scheduler", async_src)
    return original.Scheduler, original_async.AsyncScheduler
