# SPDX-License-Identifier: Apache-2.0
"""The engine stage of the replay: workload + mode + options -> records.

An engine runs one workload once in one mode and returns
:class:`~vllm_ascend_balance.replay.pipeline.records.RunRecords`; everything after it
(metrics, comparison, report) reads only those records, so a new engine is a
new class registered in :data:`.registry.ENGINES`, nothing else.

Contract of :meth:`ReplayEngine.run`:

- never raises for a failure of the deployment or a Ctrl-C (SIGINT/SIGTERM):
  the returned records carry :class:`~.records.RunStatus` and a one-line
  cause, and whatever was measured;
- raises :class:`RecordingError` when its recording did not work (e.g. the
  recording scheduler never attached): numbers would silently be zeros;
- leaves no process behind.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.registry import ENGINES

if TYPE_CHECKING:
    from vllm_ascend_balance.replay.pipeline.modes import Mode
    from vllm_ascend_balance.replay.pipeline.options import ReplayOptions
    from vllm_ascend_balance.replay.pipeline.records import RunRecords
    from vllm_ascend_balance.replay.pipeline.workload_types import Workload

__all__ = ["ENGINES", "RecordingError", "ReplayEngine", "load_engine"]

logger = init_logger(__name__)


class RecordingError(RuntimeError):
    """The engine ran but its records cannot be trusted (one line)."""


class ReplayEngine(Protocol):
    """One run of a workload in one mode (see the module docstring)."""

    def run(
        self, workload: Workload, mode: Mode, options: ReplayOptions, repeat: int
    ) -> RunRecords:
        """Run ``workload`` once in ``mode``; ``repeat`` is the repetition
        index (0-based; for records and file names)."""
        ...


def load_engine(name: str) -> ReplayEngine:
    """An instance of the engine registered as ``name``."""
    module, _, cls = ENGINES[name].partition(":")
    engine: ReplayEngine = getattr(importlib.import_module(module), cls)()
    return engine
