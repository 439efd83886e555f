# SPDX-License-Identifier: Apache-2.0
"""``upstream_patch/series.py``, loaded once for the tests."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.support.lanes import REPO_ROOT

SERIES_PY = REPO_ROOT / "upstream_patch" / "series.py"


def _load() -> ModuleType:
    # series.py is a script (its code the series_tool package next to it),
    # not a module of this repository's packages: load it by path.
    spec = importlib.util.spec_from_file_location("vab_series_tool", SERIES_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


series = _load()
