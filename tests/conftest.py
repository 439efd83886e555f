# SPDX-License-Identifier: Apache-2.0
import logging
import os

import pytest

# Nothing in the suite may reach a model hub: models are local config dirs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


@pytest.fixture(autouse=True)
def _capture_vllm_logs(caplog: pytest.LogCaptureFixture):
    """vLLM's ``vllm`` logger does not propagate to the root logger, and the
    package logs under it (vllm_ascend_balance/logger.py): hand caplog's
    handler to it so tests can read those records."""
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(caplog.handler)
    yield
    vllm_logger.removeHandler(caplog.handler)
