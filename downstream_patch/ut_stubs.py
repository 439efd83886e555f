# SPDX-License-Identifier: Apache-2.0
"""A pytest plugin (``-p ut_stubs``) for running vllm-ascend's unit tests in
the ascend lane: its ``tests/ut/conftest.py`` imports vllm-ascend's worker
patches, which import vision models that need ``torchvision``; the lane
installs vllm-ascend's Python code only, so a stand-in module is registered
when the real one is absent (nothing under test calls it).

The same conftest import reaches vllm-ascend's attention backend, which
imports vLLM modules a newer vLLM than the tree pins has moved
(:data:`VLLM_STAND_INS`: on vLLM 0.29.0 the tree at
``.github/vllm-ascend-main.commit`` lacks only these). Each is stood in for
only when this vLLM has no such module; no balance-scheduling code imports
them. ``apply_main.py`` reports, per vLLM, which ones were stood in for."""

from __future__ import annotations

import importlib.util
import sys
from unittest.mock import MagicMock

_MODULES = (
    "torchvision",
    "torchvision.io",
    "torchvision.ops",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.transforms.v2",
    "torchvision.transforms.v2.functional",
)

#: vLLM modules the tree's attention code imports at conftest time, stood in
#: for where this vLLM has no such module (see the module docstring).
VLLM_STAND_INS = ("vllm.model_executor.layers.attention.pcp",)


def _absent(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:  # a parent package is absent too
        return True


def _stand_in(name: str) -> None:
    module = MagicMock(name=name)
    module.__spec__ = importlib.util.spec_from_loader(name, loader=None)
    module.__path__ = []
    sys.modules[name] = module


STOOD_IN = [name for name in VLLM_STAND_INS if _absent(name)]
for _name in STOOD_IN:
    _stand_in(_name)

if importlib.util.find_spec("torchvision") is None:
    for name in _MODULES:
        module = MagicMock(name=name)
        module.__spec__ = importlib.util.spec_from_loader(name, loader=None)
        module.__path__ = []
        # transformers reads the version of a torchvision it finds (no
        # distribution metadata here: the module's own attribute).
        module.__version__ = "0.0.0"
        sys.modules[name] = module
