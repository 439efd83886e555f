# SPDX-License-Identifier: Apache-2.0
"""Loggers that print through vLLM's own logging configuration."""

from __future__ import annotations

import logging


def init_logger(name: str) -> logging.Logger:
    """The logger ``vllm.<name>`` for a module of this package (mirrors
    ``vllm.logger.init_logger``, which is ``logging.getLogger(name)``).

    vLLM configures handler, level and format for the ``vllm`` logger tree
    only; a logger outside it drops INFO (so "balance scheduling active"
    would never show) and prints warnings unformatted. Placing ours under
    ``vllm.`` makes them behave like vLLM's own (``VLLM_LOGGING_LEVEL``,
    ``VLLM_CONFIGURE_LOGGING``). Not importing ``vllm.logger`` here keeps
    commands that never touch vLLM (``--help``) from importing vLLM and
    torch (seconds); every path that logs has imported vLLM, which configures
    the tree on import.
    """
    return logging.getLogger(f"vllm.{name}")
