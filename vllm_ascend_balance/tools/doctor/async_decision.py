# SPDX-License-Identifier: Apache-2.0
"""Whether ``vllm serve`` with given arguments runs async scheduling.

The scheduler class an engine builds is ``AsyncScheduler`` when
``scheduler_config.async_scheduling`` ends up true, else ``Scheduler``
(``SchedulerConfig.get_scheduler_cls``), so doctor's "scheduler class" line
needs the value vLLM settles on, not the flag as typed. The rules followed,
in the order vLLM applies them (``VllmConfig.__post_init__`` in
``vllm/config/vllm.py``, then the platform's ``check_and_update_config``):

- ``--async-scheduling`` with an executor that does not support it: vLLM
  refuses the configuration (:class:`ValueError`);
- ``--async-scheduling`` unset: on, unless the executor named by
  ``--distributed-executor-backend`` says it does not support it
  (``Executor.supports_async_scheduling()``, the class
  ``Executor.get_class`` would pick);
- the CPU platform then turns it off whatever was asked
  (``CpuPlatform.check_and_update_config`` in ``vllm/platforms/cpu.py``).

Not followed (doctor loads no model): pooling models and speculative
decoding methods that also turn it off.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

#: vLLM's names for its own executors (``Executor.get_class``).
BUILTIN_EXECUTORS = {
    "mp": "vllm.v1.executor.multiproc_executor.MultiprocExecutor",
    "uni": "vllm.v1.executor.uniproc_executor.UniProcExecutor",
    "external_launcher": "vllm.v1.executor.uniproc_executor."
    "ExecutorWithExternalLauncher",
    "ray": "vllm.v1.executor.ray_executor.RayDistributedExecutor",
}


def executor_class(backend: str) -> Any:
    """The executor class ``--distributed-executor-backend backend`` names.

    Raises:
        ValueError: it cannot be imported, or is not a vLLM ``Executor``
            (vLLM refuses it at start-up the same way).
    """
    qualname = BUILTIN_EXECUTORS.get(backend, backend)
    module_name, _, name = qualname.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"--distributed-executor-backend {backend!r} cannot be imported "
            f"({type(exc).__name__}: {exc}): name a vLLM Executor subclass as "
            f"package.module.ClassName, or one of {', '.join(BUILTIN_EXECUTORS)}"
        ) from None
    from vllm.v1.executor.abstract import Executor

    if not (isinstance(found, type) and issubclass(found, Executor)):
        raise ValueError(
            f"--distributed-executor-backend {backend!r} is not a subclass of "
            f"vLLM's Executor"
        )
    return found


def platform_is_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def async_scheduling(
    serve: argparse.Namespace, on_cpu: bool | None = None
) -> tuple[bool, str]:
    """``(async scheduling on, why)`` for ``vllm serve``'s parsed arguments
    ``serve`` (doctor's :func:`~vllm_ascend_balance.tools.doctor.cli.parse_serve_args`);
    ``on_cpu`` None: whether vLLM's current platform is the CPU one.

    Raises:
        ValueError: the executor named cannot be used (:func:`executor_class`).
    """
    asked = getattr(serve, "async_scheduling", None)
    backend = getattr(serve, "distributed_executor_backend", None)
    on, why = asked is not False, (
        "--async-scheduling" if asked else "--no-async-scheduling" if asked is False
        else "vLLM's default"
    )  # fmt: skip
    klass = executor_class(str(backend)) if backend is not None else None
    if klass is not None and not klass.supports_async_scheduling():
        if asked:
            raise ValueError(
                f"--async-scheduling: executor {klass.__qualname__} "
                f"(--distributed-executor-backend) does not support async "
                f"scheduling; drop --async-scheduling (vLLM refuses the pair)"
            )
        if asked is None:
            on, why = False, f"executor {klass.__qualname__} does not support it"
    if on and (platform_is_cpu() if on_cpu is None else on_cpu):
        on, why = False, "the CPU platform turns it off"
    return on, why
