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
    """The package logs under vLLM's ``vllm`` logger (vllm_ascend_balance/
    logger.py), which vLLM's logging config stops from propagating to the
    root logger in some releases: hand caplog's handler to it then, so tests
    read each record once."""
    vllm_logger = logging.getLogger("vllm")
    if vllm_logger.propagate:  # records reach caplog through the root logger
        yield
        return
    vllm_logger.addHandler(caplog.handler)
    yield
    vllm_logger.removeHandler(caplog.handler)


@pytest.fixture(autouse=True)
def _process_state_restored():
    """vllm-ascend's balance patch changes the process at import (the
    module-level ``Scheduler``), and steering sets
    ``VLLM_ASCEND_BALANCE_SCHEDULING`` to ``0`` in the process that creates a
    balance config, as a front-end wants. A test that does either in-process
    must not leave it so for the tests after it."""
    import vllm.v1.core.sched.scheduler as sched_mod

    from vllm_ascend_balance.config import ENV_SETTING

    scheduler = sched_mod.Scheduler
    env = os.environ.get(ENV_SETTING)
    yield
    sched_mod.Scheduler = scheduler
    if env is None:
        os.environ.pop(ENV_SETTING, None)
    else:
        os.environ[ENV_SETTING] = env


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Skip the ``e2e`` tests (whole ``AsyncLLM`` deployments) where vLLM has
    no platform it can run on here, with the reason in the -ra summary;
    everything else runs."""
    e2e = [item for item in items if item.get_closest_marker("e2e")]
    if not e2e:
        return
    from tests.support.lanes import platform_unusable_reason

    reason = platform_unusable_reason()
    if reason:
        for item in e2e:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_report_header(config: pytest.Config) -> str:
    from vllm.platforms import current_platform

    return f"vLLM platform: {type(current_platform).__name__}"
