# SPDX-License-Identifier: Apache-2.0
"""The demo server's command line: its ``vllm serve`` arguments, program,
model directory and environment, and the request and commands it prints.

Importing this module imports neither vLLM nor torch (the demo command
checks its arguments before anything heavy starts).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_ascend_balance.loopback_ports import free_loopback_port
from vllm_ascend_balance.wiring.json_flag import json_object

EXECUTOR = "vllm_ascend_balance.replay.real.executor.CostModelExecutor"
#: ``--additional-config`` key of the executor's settings (the replay's own,
#: ``replay.model.cost.REPLAY_CONFIG_KEY``; repeated so that importing this
#: module stays light).
REPLAY_KEY = "vllm_ascend_balance_replay"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SERVED_MODEL_NAME = "tiny-moe"
HOST = "127.0.0.1"
DEFAULT_PORT = 8000
MAX_PORT = 65535
BALANCE_ON: Mapping[str, Any] = {"enable_balance_scheduling": True}
MAX_MODEL_LEN = 1024
#: Wall seconds per modeled second of the cost model: short steps, still
#: long enough for requests to overlap on a 2-core machine.
TIME_SCALE = 0.2
#: How ``vllm serve`` spells the flag (its parser also takes underscores).
ADDITIONAL_CONFIG_FLAGS = ("--additional-config", "--additional_config")


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now and outside the kernel's ephemeral
    range (:func:`vllm_ascend_balance.loopback_ports.free_loopback_port`)."""
    return free_loopback_port()


def split_additional_config(
    extra_args: Sequence[str],
) -> tuple[dict[str, Any], list[str]]:
    """``(the --additional-config objects of extra_args merged in order,
    the other arguments)``. The demo merges them into its own object rather
    than let the last one replace it: vLLM keeps only the last
    ``--additional-config``, and the executor's block would be lost.
    (vLLM's dotted form, ``--additional-config.key value``, is left in the
    arguments: vLLM merges it itself.)

    Raises:
        ValueError: a value is not a JSON object (one line naming
            ``--additional-config`` and the fix) or is missing.
    """
    merged: dict[str, Any] = {}
    rest: list[str] = []
    items = iter(extra_args)
    for arg in items:
        flag, eq, value = arg.partition("=")
        if flag not in ADDITIONAL_CONFIG_FLAGS:
            rest.append(arg)
            continue
        if not eq:
            following = next(items, None)
            if following is None:
                raise ValueError(
                    "--additional-config needs a value: a JSON object, e.g. "
                    '--additional-config \'{"scheduler_config": '
                    '{"enable_balance_scheduling": true}}\''
                )
            value = following
        merge_into(merged, json_object(value, "--additional-config"))
    return merged, rest


def merge_into(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` merged into ``base`` (in place, returned): objects key by
    key, any other value replaced."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge_into(base[key], value)
        else:
            base[key] = dict(value) if isinstance(value, Mapping) else value
    return base


def serve_args(
    dp: int,
    port: int,
    model_dir: Path,
    run_dir: Path,
    *,
    scheduler_config: Mapping[str, Any] = BALANCE_ON,
    max_num_seqs: int = 4,
    lockstep_port: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``vllm serve``'s arguments of the demo server (without the program).

    Args:
        dp: ``--data-parallel-size`` (>= 1).
        port: the HTTP port on :data:`HOST`.
        model_dir: a directory holding the tiny MoE ``config.json``
            (:func:`write_model`).
        run_dir: where the executor writes its per-rank step records.
        scheduler_config: the balance settings
            (``additional_config.scheduler_config``); default balance on.
        max_num_seqs: ``--max-num-seqs``, the admission cap of each rank.
        lockstep_port: the executors' own gloo port; default a free one.
        extra_args: more ``vllm serve`` arguments, appended (the last of a
            repeated flag wins, as in vLLM's parser), except
            ``--additional-config``: merged into the demo's own object
            (:func:`split_additional_config`), so one of them turns balance
            off or sets its options and the executor keeps its block.

    Raises:
        ValueError: ``dp`` < 1, or an ``--additional-config`` of
            ``extra_args`` is not a JSON object.
    """
    if dp < 1:
        raise ValueError(f"--dp must be >= 1, got {dp}: use e.g. --dp 2")
    user, rest = split_additional_config(extra_args)
    settings = {
        "run_dir": str(run_dir),
        "lockstep_port": lockstep_port or free_port(),
        "time_scale": TIME_SCALE,
        # Room for every running request at full length: no preemption.
        "kv_cache_tokens": 64 * MAX_MODEL_LEN,
    }
    additional = merge_into(
        {"scheduler_config": dict(scheduler_config), REPLAY_KEY: settings}, user
    )
    return [
        "--model", str(model_dir),
        "--served-model-name", SERVED_MODEL_NAME,
        "--skip-tokenizer-init",
        "--data-parallel-size", str(dp),
        "--data-parallel-address", HOST,
        "--distributed-executor-backend", EXECUTOR,
        "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--dtype", "float32",
        "--host", HOST,
        "--port", str(port),
        "--additional-config", json.dumps(additional, separators=(",", ":")),
        *rest,
    ]  # fmt: skip


def serve_command(
    dp: int,
    port: int,
    model_dir: Path,
    extra_args: Sequence[str] = (),
    *,
    run_dir: Path | None = None,
    scheduler_config: Mapping[str, Any] = BALANCE_ON,
    max_num_seqs: int = 4,
    python: str = sys.executable,
) -> list[str]:
    """The command line of the demo server: ``python -m
    vllm.entrypoints.openai.api_server`` (:data:`SERVER_MODULE`) and
    :func:`serve_args` (``run_dir`` default: ``model_dir``'s sibling
    ``run``).

    Raises:
        ValueError: as :func:`serve_args`.
    """
    run = run_dir if run_dir is not None else model_dir.parent / "run"
    args = serve_args(
        dp,
        port,
        model_dir,
        run,
        scheduler_config=scheduler_config,
        max_num_seqs=max_num_seqs,
        extra_args=extra_args,
    )
    return [python, "-m", SERVER_MODULE, *args]


def write_model(directory: Path) -> Path:
    """The tiny MoE model directory (``config.json`` only) in ``directory``."""
    from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model

    return write_tiny_moe_model(directory, MAX_MODEL_LEN)


def server_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ``os.environ``) with this
    checkout importable in every spawned engine, INFO logs with a summary
    every 5 s, no hub access, and no inherited ``PROMETHEUS_MULTIPROC_DIR``
    (vLLM sets its own)."""
    env = dict(os.environ if base is None else base)
    # The folder holding vllm_ascend_balance/ (a checkout, or site-packages).
    package_root = str(Path(__file__).resolve().parents[3])
    path = env.get("PYTHONPATH", "")
    if package_root not in path.split(os.pathsep):
        env["PYTHONPATH"] = package_root + (os.pathsep + path if path else "")
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env.setdefault("VLLM_LOG_STATS_INTERVAL", "5")
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def completion_body(prompt: Sequence[int], max_tokens: int) -> dict[str, Any]:
    """The JSON body of a completion on the demo server (token-id prompt)."""
    return {
        "model": SERVED_MODEL_NAME,
        "prompt": list(prompt),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }


def complete(
    base_url: str, prompt: Sequence[int], max_tokens: int, timeout: float = 300
) -> dict[str, Any]:
    """POST :func:`completion_body` to ``base_url``'s ``/v1/completions``."""
    request = urllib.request.Request(
        f"{base_url}/v1/completions",
        data=json.dumps(completion_body(prompt, max_tokens)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        reply: dict[str, Any] = json.loads(resp.read())
    return reply


def curl_command(base_url: str) -> str:
    """A ``curl`` line that completes 8 tokens of a token-id prompt."""
    body = json.dumps(completion_body([11, 12, 13, 14], 8))
    return (
        f"curl -s {base_url}/v1/completions -H 'Content-Type: application/json' "
        f"-d {shlex.quote(body)}"
    )


def doctor_command(args: Sequence[str]) -> list[str]:
    """``vllm-ascend-balance doctor`` with ``vllm serve``'s ``args``."""
    return ["vllm-ascend-balance", "doctor", *args]
