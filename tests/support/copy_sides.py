# SPDX-License-Identifier: Apache-2.0
"""The two sides of a copy-vs-override differential (DyntraLB's
``tests/test_dyntra_override_differential.py`` and its siblings), built at
run time from the vllm-ascend checkout in ``$VAB_VLLM_ASCEND_SRC``, never
copied here:

* the copy: one of the checkout's scheduler modules as it is (its own
  ``schedule()``), over the installed vLLM (the release lane's 0.27.1, which
  carries the balance series: its default is stock);
* the override: the same file with one patch of
  ``downstream_patch/vllm-ascend/main/`` applied, over the installed
  ``scheduler.py`` with the schedule-seams series of that release
  (``upstream_patch/schedule_seams/<tag>/``) applied.

Both are executed by file path under their own module names, so neither
replaces the checkout's module nor vLLM's modules in this process. The
override's vLLM imports are pointed at the seams-patched scheduler only
while its module executes (its methods keep the classes they were defined
with)."""

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
from tests.support.scratch import process_tempdir
from tests.support.series_tool import series

MAIN_PATCHES = REPO_ROOT / "downstream_patch" / "vllm-ascend" / "main"


def downstream_patch(number: str) -> Path:
    """Patch ``number`` (``"0003"``) of ``downstream_patch/vllm-ascend/main/``."""
    return next(MAIN_PATCHES.glob(f"{number}-*.patch"))


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
    with tempfile.TemporaryDirectory(prefix="vab-seams-") as scratch:
        target = Path(scratch) / series.SCHEDULER_REL
        target.parent.mkdir(parents=True)
        shutil.copy2(installed_scheduler.__file__, target)
        for patch in _seam_patches(tag):  # one by one: they stack on one file
            result = series.git_apply(
                Path(scratch), [patch], f"--include={series.SCHEDULER_REL}"
            )
            assert result.returncode == 0, (patch.name, result.stderr)
        return target.read_text()


def patched_source(src: Path, rel: str, patch: Path) -> str:
    """The checkout's ``rel`` with ``patch`` applied (only that file's
    hunks: the earlier patches of the series do not touch the copies)."""
    with tempfile.TemporaryDirectory(prefix="vab-copy-patch-") as scratch:
        target = Path(scratch) / rel
        target.parent.mkdir(parents=True)
        shutil.copy2(src / rel, target)
        result = series.git_apply(Path(scratch), [patch], f"--include={rel}")
        assert result.returncode == 0, result.stderr
        return target.read_text()


def copy_module(src: Path, rel: str) -> ModuleType:
    """The checkout's module ``rel``, unmodified, over the installed vLLM."""
    return _exec(f"vab_copy_{Path(rel).stem}", src / rel)


def override_module(
    src: Path, rel: str, patch: Path, text: str | None = None
) -> ModuleType:
    """``rel`` with ``patch`` applied (or ``text``, a variant of it) over the
    seams-patched ``Scheduler``/``AsyncScheduler``."""
    scheduler_source = seams_scheduler_source()
    scheduler, async_scheduler = classes_from_source(
        "vab_seams_scheduler", scheduler_source
    )
    # A module object over the patched module's namespace (classes_from_source
    # does not register it): what the override's imports read.
    seams_mod = ModuleType(scheduler.__module__)
    seams_mod.__dict__.update(vars(scheduler)["schedule"].__globals__)
    async_mod = ModuleType("vab_seams_async")
    async_mod.AsyncScheduler = async_scheduler  # type: ignore[attr-defined]
    stem = Path(rel).stem
    name = f"vab_override_{stem}" if text is None else f"vab_variant_{stem}"
    path = process_tempdir(f"{name}-") / Path(rel).name
    path.write_text(patched_source(src, rel, patch) if text is None else text)
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


def variant_module(src: Path, rel: str, patch: Path, old: str, new: str) -> ModuleType:
    """A known-bad variant of the override, for a negative control: ``rel``
    with ``patch`` applied and ``old`` replaced by ``new`` (which must occur)."""
    text = patched_source(src, rel, patch)
    bad = text.replace(old, new)
    assert bad != text, f"{old!r} is not in the patched {rel}"
    return override_module(src, rel, patch, bad)
