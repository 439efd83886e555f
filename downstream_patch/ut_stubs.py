# SPDX-License-Identifier: Apache-2.0
"""A pytest plugin (``-p ut_stubs``) for running vllm-ascend's unit tests in
the ascend lane: its ``tests/ut/conftest.py`` imports vllm-ascend's worker
patches, which import vision models that need ``torchvision``; the lane
installs vllm-ascend's Python code only, so a stand-in module is registered
when the real one is absent (nothing under test calls it)."""

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

if importlib.util.find_spec("torchvision") is None:
    for name in _MODULES:
        module = MagicMock(name=name)
        module.__spec__ = importlib.util.spec_from_loader(name, loader=None)
        module.__path__ = []
        # transformers reads the version of a torchvision it finds (no
        # distribution metadata here: the module's own attribute).
        module.__version__ = "0.0.0"
        sys.modules[name] = module
