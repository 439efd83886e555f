# SPDX-License-Identifier: Apache-2.0
"""Results on stdout, vLLM's logs on stderr, for this package's commands.

vLLM writes its log lines to ``VLLM_LOGGING_STREAM``, whose default is
stdout, so a command's report would be interleaved with ``INFO``/``WARNING``
lines. This module imports neither vLLM nor torch: ``doctor`` must run where
vLLM is missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

STREAM_ENV = "VLLM_LOGGING_STREAM"
CONFIG_ENV = "VLLM_LOGGING_CONFIG_PATH"


@contextlib.contextmanager
def vllm_logs_to_stderr() -> Iterator[None]:
    """Route vLLM's logs to stderr while the block runs.

    Sets ``VLLM_LOGGING_STREAM=ext://sys.stderr`` (read by vLLM when it first
    configures logging, in this process or in processes it spawns) and moves
    handlers of the ``vllm`` logger that already write to stdout (vLLM was
    imported earlier in this process) with ``StreamHandler.setStream``. Both
    are restored on exit. Left alone when the user set ``VLLM_LOGGING_STREAM``
    or ``VLLM_LOGGING_CONFIG_PATH``: an explicit choice wins.
    """
    if STREAM_ENV in os.environ or os.environ.get(CONFIG_ENV):
        yield
        return
    os.environ[STREAM_ENV] = "ext://sys.stderr"
    moved: list[tuple[logging.StreamHandler, Any]] = []
    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (
            sys.stdout,
            sys.__stdout__,
        ):
            moved.append((handler, handler.setStream(sys.stderr)))
    try:
        yield
    finally:
        os.environ.pop(STREAM_ENV, None)
        for handler, stream in moved:
            handler.setStream(stream)
