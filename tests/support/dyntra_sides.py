# SPDX-License-Identifier: Apache-2.0
"""The two sides of the DyntraLB differential
(``tests/test_dyntra_override_differential.py``), built at run time from the
vllm-ascend checkout in ``$VAB_VLLM_ASCEND_SRC``, never copied here:

* the copy: the checkout's ``vllm_ascend/core/dyntra_lb_scheduler.py`` as it
  is (its own ``schedule()``), over the installed vLLM (the release lane's
  0.27.1, which carries the balance series: its default is stock);
* the override: the same file with patch 0003 of
  ``downstream_patch/vllm-ascend/main/`` applied, over the installed
  ``scheduler.py`` with the schedule-seams series of that release
  (``upstream_patch/schedule_seams/<tag>/``) applied.

Both are executed by file path under their own module names, so neither
replaces ``vllm_ascend.core.dyntra_lb_scheduler`` nor vLLM's modules in this
process. The override's vLLM imports are pointed at the seams-patched
scheduler only while its module executes (its methods keep the classes they
were defined with)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from unittest import mock

import vllm.v1.core.sched as sched_pkg
import vllm.v1.core.sched.scheduler as installed_scheduler

from tests.support.lanes import REPO_ROOT, current_lane, pin_tag
from tests.support.original_scheduler import classes_from_source
from tests.support.series_tool import series

DYNTRA_REL = "vllm_ascend/core/dyntra_lb_scheduler.py"
PATCH_0003 = next(
    (REPO_ROOT / "downstream_patch" / "vllm-ascend" / "main").glob("0003-*.patch")
)


def _exec(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look it up
    spec.loader.exec_module(module)
    return module


def _seam_patches(tag: str) -> list[Path]:
    sys.path.insert(0, str(series.ROOT / "upstream_patch"))
    from series_tool import seam_series

    return seam_series.seam_patches(tag)


def seams_scheduler_source(tag: str | None = None) -> str:
    """The installed ``scheduler.py`` (the balance series already applied,
    as the release lane installs it) with the schedule-seams series of
    ``tag`` (default: this lane's pin) applied."""
    tag = tag or pin_tag(current_lane())
    with tempfile.TemporaryDirectory(prefix="vab-dyntra-seams-") as scratch:
        target = Path(scratch) / series.SCHEDULER_REL
        target.parent.mkdir(parents=True)
        shutil.copy2(installed_scheduler.__file__, target)
        for patch in _seam_patches(tag):  # one by one: they stack on one file
            result = series.git_apply(
                Path(scratch), [patch], f"--include={series.SCHEDULER_REL}"
            )
            assert result.returncode == 0, (patch.name, result.stderr)
        return target.read_text()


def patched_dyntra_source(src: Path) -> str:
    """The checkout's ``dyntra_lb_scheduler.py`` with patch 0003 applied
    (only that file's hunks; patches 0-2 do not touch it)."""
    with tempfile.TemporaryDirectory(prefix="vab-dyntra-0003-") as scratch:
        target = Path(scratch) / DYNTRA_REL
        target.parent.mkdir(parents=True)
        shutil.copy2(src / DYNTRA_REL, target)
        result = series.git_apply(
            Path(scratch), [PATCH_0003], f"--include={DYNTRA_REL}"
        )
        assert result.returncode == 0, result.stderr
        return target.read_text()


def copy_module(src: Path) -> ModuleType:
    """The checkout's module, unmodified, over the installed vLLM."""
    return _exec("vab_dyntra_copy", src / DYNTRA_REL)


def override_module(src: Path, text: str | None = None) -> ModuleType:
    """Patch 0003's module (or ``text``, a variant of it) over the
    seams-patched ``Scheduler``/``AsyncScheduler``."""
    scheduler_source = seams_scheduler_source()
    scheduler, async_scheduler = classes_from_source(
        "vab_dyntra_seams_scheduler", scheduler_source
    )
    # A module object over the patched module's namespace (classes_from_source
    # does not register it): what the override's imports read.
    seams_mod = ModuleType(scheduler.__module__)
    seams_mod.__dict__.update(vars(scheduler)["schedule"].__globals__)
    async_mod = ModuleType("vab_dyntra_seams_async")
    async_mod.AsyncScheduler = async_scheduler  # type: ignore[attr-defined]
    name = "vab_dyntra_override" if text is None else "vab_dyntra_variant"
    path = Path(tempfile.mkdtemp(prefix=f"{name}-")) / "dyntra_lb_scheduler.py"
    path.write_text(patched_dyntra_source(src) if text is None else text)
    # `from vllm.v1.core.sched import scheduler` reads the package attribute;
    # `from ...scheduler import Scheduler` reads sys.modules: both redirected.
    with (
        mock.patch.dict(
            sys.modules,
            {
                "vllm.v1.core.sched.scheduler": seams_mod,
                "vllm.v1.core.sched.async_scheduler": async_mod,
            },
        ),
        mock.patch.object(sched_pkg, "scheduler", seams_mod),
    ):
        module = _exec(name, path)
    assert module.Scheduler is scheduler
    return module
