# SPDX-License-Identifier: Apache-2.0
"""The one build step pyproject.toml cannot declare: the upstream patch
series (``upstream_patch/vX.Y.Z/``, outside the package) copied into the
wheel as package data, ``vllm_ascend_balance/upstream_patch/``, so that
``vllm-ascend-balance patch-vllm`` works from an installed wheel. Everything
else is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithSeries(build_py):
    """``build_py`` plus each ``upstream_patch/v*/series`` and the patches it
    lists. Skipped for editable installs: the package then finds the series
    in the checkout (vllm_ascend_balance.tools.patch.series.series_root)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "vllm_ascend_balance" / "upstream_patch"
        for series in sorted((ROOT / "upstream_patch").glob("v*/series")):
            names = [
                line.strip()
                for line in series.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")
            ]
            target = dest / series.parent.name
            target.mkdir(parents=True, exist_ok=True)
            for name in ["series", *names]:
                shutil.copy2(series.parent / name, target / name)


setup(cmdclass={"build_py": BuildPyWithSeries})
