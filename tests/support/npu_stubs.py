# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for the NPU-only modules vllm-ascend imports, for the ascend lane.

The ascend lane (``scripts/fork.sh --lane ascend``) installs vllm-ascend's
Python code on a machine without an NPU. A few modules it imports cannot exist
here; this module stands in for exactly those, and nothing else:

``torch_npu`` (and what importing the real one adds to torch: ``torch.npu``,
``torch.version.cann``, ``torch.distributed.is_hccl_available``)
    Huawei's PyTorch backend: a compiled extension that needs the CANN
    runtime and an Ascend device. vllm-ascend imports it at the top of most
    modules and calls ``torch_npu.npu.*`` / ``torch_npu.npu_*`` kernels. On
    an NPU host ``import torch`` loads it by itself (torch's device-backend
    autoload entry point), and vllm-ascend relies on that (it imports
    ``torch.distributed.is_hccl_available`` without importing torch_npu), so
    the stand-in is imported right after torch is, the same way. HCCL is
    reported unavailable: there is none here.
``acl`` / ``acl.rt``
    pyACL, the CANN runtime's Python binding (device memory copies).
``mooncake.engine``
    Mooncake's transfer engine (a compiled RDMA/HCCS library) for KV
    transfer between NPU hosts.
``vllm_ascend._build_info``
    Written by vllm-ascend's setup.py when it builds the NPU kernels for one
    SoC; the lane copies the Python tree without running setup.py. It reports
    an A2 (910B) build, the SoC vllm-ascend itself assumes when the file has
    no SoC.

Every attribute of a stand-in is a ``MagicMock``: importing works, calling a
kernel returns a mock, nothing computes. vllm-ascend's own
``tests/ut/conftest.py`` stubs the same modules for its CPU unit tests.

The lane links this file into the venv's site-packages as ``vab_npu_stubs``
and a ``.pth`` imports it, so it is active in every Python process of the
venv, including the ones vLLM starts with the spawn method. It registers an
import finder placed *last* on ``sys.meta_path``: a stand-in is only created
when the import system found no real module of that name, and when the real
``torch_npu`` is importable the module does nothing at all.

It also sets ``VLLM_VERSION`` (if unset) to the installed vLLM's release
without its local part: the lane's vLLM is a ``VLLM_TARGET_DEVICE=empty``
source build that reports ``X.Y.Z+empty``, and vllm-ascend's
``vllm_version_is("X.Y.Z")`` compares PEP 440 versions, so without it every
release-specific branch of vllm-ascend would take the "other release" path.
vllm-ascend's docs ask source installs of vLLM to set ``VLLM_VERSION``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from typing import Any
from unittest.mock import MagicMock

# Top-level names (and their submodules) that get a stand-in when missing.
STUBBED_ROOTS = ("torch_npu", "acl", "mooncake")
# Single modules that get a stand-in when missing (their package is real).
STUBBED_MODULES = ("vllm_ascend._build_info",)


class _StubModule(types.ModuleType):
    """A module whose every missing attribute is one (cached) ``MagicMock``."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name in STUBBED_MODULES:
            return types.ModuleType(spec.name)
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        module.__dict__["__vab_npu_stub__"] = True
        if name == "vllm_ascend._build_info":
            module.__dict__["__device_type__"] = "A2"
            module.__dict__["__soc_version__"] = "ASCEND910B1"
        elif name == "torch_npu":
            # What the real torch_npu adds to torch when it is imported.
            import torch
            import torch.distributed

            npu = MagicMock(name="torch.npu")
            module.__dict__["npu"] = npu
            if not hasattr(torch, "npu"):
                torch.npu = npu  # type: ignore[attr-defined]
            if not hasattr(torch.version, "cann"):
                torch.version.cann = None  # type: ignore[attr-defined]
            # The real one names torch's PrivateUse1 backend "npu", so
            # torch.device("npu") parses (vLLM's DeviceConfig builds one);
            # nothing can be allocated on it here.
            if torch._C._get_privateuse1_backend_name() == "privateuseone":
                torch.utils.rename_privateuse1_backend("npu")
            if not hasattr(torch.distributed, "is_hccl_available"):
                torch.distributed.is_hccl_available = lambda: False  # type: ignore[attr-defined]


class _StubFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: only asked for modules nothing else found."""

    # Recognised by this flag, not by class: the module may be imported under
    # two names (``vab_npu_stubs`` by the .pth, ``tests.support.npu_stubs``
    # by the suite), i.e. two copies of this class.
    vab_npu_stub_finder = True

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        root = fullname.partition(".")[0]
        if root not in STUBBED_ROOTS and fullname not in STUBBED_MODULES:
            return None
        # Every stubbed name is a package, so any submodule import works.
        is_package = fullname not in STUBBED_MODULES
        spec = importlib.machinery.ModuleSpec(
            fullname, _StubLoader(), is_package=is_package
        )
        if is_package:
            spec.submodule_search_locations = []
        return spec


class _ThenImportTorchNpu(importlib.abc.Loader):
    """torch's own loader, then ``import torch_npu``, as torch's backend
    autoload does on an NPU host."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        import torch_npu  # noqa: F401


class _TorchHook(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` until torch is imported: finds torch with
    the other finders and wraps its loader (``_ThenImportTorchNpu``)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenImportTorchNpu(spec.loader)
        return spec


def _real_torch_npu() -> bool:
    return any(
        not getattr(finder, "vab_npu_stub_finder", False)
        and getattr(finder, "find_spec", None) is not None
        and finder.find_spec("torch_npu", None) is not None
        for finder in sys.meta_path
    )


def _pin_vllm_version() -> None:
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return
    os.environ.setdefault("VLLM_VERSION", version.split("+")[0])


def install() -> bool:
    """Register the stand-ins (once per process). False when the real
    ``torch_npu`` exists, i.e. on an NPU host: then nothing is changed."""
    if any(getattr(finder, "vab_npu_stub_finder", False) for finder in sys.meta_path):
        return True
    if _real_torch_npu():
        return False
    sys.meta_path.append(_StubFinder())
    if "torch" in sys.modules:
        import torch_npu  # noqa: F401
    else:
        sys.meta_path.insert(0, _TorchHook())
    _pin_vllm_version()
    return True


ACTIVE = install()


def is_stub(module: object) -> bool:
    """Whether ``module`` is one of this module's stand-ins."""
    return bool(getattr(module, "__vab_npu_stub__", False))
