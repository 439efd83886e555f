# SPDX-License-Identifier: Apache-2.0
"""The replay's process environment: its work directory and where vLLM's
logs go."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)


@contextlib.contextmanager
def work_dir(run_dir: str | None) -> Iterator[str]:
    """``--run-dir``, or a temporary directory removed on every exit path."""
    if run_dir is not None:
        yield run_dir
        return
    path = tempfile.mkdtemp(prefix="vab-replay-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def vllm_logs_to_stderr() -> Iterator[None]:
    """Route vLLM's logs to stderr for the run, so stdout carries the
    results. vLLM logs to ``VLLM_LOGGING_STREAM`` (default stdout): the
    spawned engine processes read it from the environment when they
    configure logging; the front-end configured its handler at import, so
    its stream is switched (``StreamHandler.setStream``). Left alone when the
    user set ``VLLM_LOGGING_STREAM`` or ``VLLM_LOGGING_CONFIG_PATH``."""
    if "VLLM_LOGGING_STREAM" in os.environ or os.environ.get(
        "VLLM_LOGGING_CONFIG_PATH"
    ):
        yield
        return
    os.environ["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"
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
        os.environ.pop("VLLM_LOGGING_STREAM", None)
        for handler, stream in moved:
            handler.setStream(stream)
