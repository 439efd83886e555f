# SPDX-License-Identifier: Apache-2.0
"""Whether vLLM is here for a command that runs it, said in one line.

The package depends on no ``vllm`` wheel (it would pull the CUDA build), so
a command may meet no vLLM at all, or one whose own import fails (no torch
beside it, a torch its build does not match, a missing library: an
``ImportError``, ``OSError``, ``AttributeError`` or ``RuntimeError`` from
inside vLLM). Either is one line naming the fix, never vLLM's traceback.
"""

from __future__ import annotations

import importlib.util


def not_installed(command: str) -> str:
    """The line for a Python environment with no ``vllm`` package."""
    return (
        f"vLLM is not installed in this Python environment; `{command}` "
        "runs it: install a vLLM with the seam (docs/install.md)"
    )


def does_not_import(cause: str, fix: str) -> str:
    """The line for an installed vLLM whose import raised ``cause``
    (``"ModuleNotFoundError: No module named 'torch'"``)."""
    return f"vLLM is installed but does not import ({cause}); {fix}"


#: The fix where doctor is not the command saying it.
SEE_DOCTOR = (
    "repair that install (`vllm-ascend-balance doctor` names the torch it needs)"
)


def cause_of(exc: BaseException) -> str:
    """``exc`` as ``Type: first line``."""
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def import_error() -> str | None:
    """What importing ``vllm.logger`` in this process raised (its
    :func:`cause_of`), or None once imported (which configures vLLM's
    logging, as the commands need before they log)."""
    try:
        import vllm.logger  # noqa: F401
    except Exception as exc:  # whatever vLLM's import raises, said in one line
        return cause_of(exc)
    return None


def import_problem(command: str) -> str | None:
    """Why vLLM cannot run here for ``command`` (one line), or None once
    ``vllm.logger`` is imported."""
    if importlib.util.find_spec("vllm") is None:
        return not_installed(command)
    cause = import_error()
    return does_not_import(cause, SEE_DOCTOR) if cause else None
