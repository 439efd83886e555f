# SPDX-License-Identifier: Apache-2.0
"""The replay's process environment: its work directory and where vLLM's
logs go."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

from vllm_ascend_balance.log_streams import vllm_logs_to_stderr
from vllm_ascend_balance.logger import init_logger

__all__ = ["vllm_logs_to_stderr", "work_dir"]

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
