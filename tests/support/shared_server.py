# SPDX-License-Identifier: Apache-2.0
"""One real balance-on ``vllm serve`` DP 2 server per pytest session, for the
tests that only need one (a server start is 40-90 s on 2 shared cores).

The server is the demo's (:func:`vllm_ascend_balance.tools.demo.server.running_server`:
``python -m vllm.entrypoints.openai.api_server``, DP 2 on 127.0.0.1, the tiny
MoE model served as ``tiny-moe``, the replay's cost-model executor,
``--max-num-seqs 4``, max model length 1024) with the bounded freeze on
(``balance_max_frozen_steps`` 2, so frozen gathers, fail-open steps and held
admissions all move) and vLLM's stats summary every second (INFO).

Shared by, and only by:

- ``tests/test_serve_metrics.py::test_balance_series_on_vllm_serve`` (the
  balance series on ``/metrics``; it checks the differences its own load
  made, so another test's earlier load does not count);
- ``tests/test_prometheus_scrape.py`` (a real Prometheus scraping it).

The other real deployments cannot share it: the balance-off and bad-setting
servers of test_serve_metrics, and the fault trials (a rank slowed, stopped,
killed), differ in their setting or end the server; test_demo's start its
own by the demo command (Ctrl-C stops it) or with ``--disable-log-stats``
(series at start-up: no request before); test_deployments' shapes are other
deployments (headless rank, two API servers, external load balancing); the
replay's (test_replay_e2e, test_replay_sim_validate, test_collective_safety)
are ``AsyncLLM`` deployments the replay starts per run, with the run's record
directory in their config.

Started by the first test that asks for it (lazily:
``request.getfixturevalue``, so a test can start its own server first and
both start together), stopped at the end of the session; the stop fails the
session's teardown if any process of the server survives.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from vllm_ascend_balance.tools.demo import server as demo

#: The shared server's balance settings (``additional_config.scheduler_config``).
BOUNDED = {"enable_balance_scheduling": True, "balance_max_frozen_steps": 2}
MAX_NUM_SEQS = 4


@pytest.fixture(scope="session")
def bounded_balance_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[demo.DemoServer]:
    """The session's balance-on, bounded ``vllm serve`` DP 2 (module
    docstring), healthy."""
    env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="1", VLLM_LOGGING_LEVEL="INFO")
    with demo.running_server(
        tmp_path_factory.mktemp("shared-server"),
        scheduler_config=BOUNDED,
        max_num_seqs=MAX_NUM_SEQS,
        env=env,
    ) as server:
        yield server
