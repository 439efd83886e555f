# SPDX-License-Identifier: Apache-2.0
"""Loggers that print through vLLM's own logging configuration."""

from __future__ import annotations

from typing import Any

from vllm.logger import init_logger as _vllm_init_logger


def init_logger(name: str) -> Any:
    """``vllm.logger.init_logger`` for a module of this package.

    vLLM configures handler, level and format for the ``vllm`` logger tree
    only; a logger outside it drops INFO (so "balance scheduling active"
    would never show) and prints warnings unformatted. Placing ours under
    ``vllm.`` makes them behave like vLLM's own (``VLLM_LOGGING_LEVEL``,
    ``VLLM_CONFIGURE_LOGGING``).
    """
    return _vllm_init_logger(f"vllm.{name}")
