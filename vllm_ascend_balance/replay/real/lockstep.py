# SPDX-License-Identifier: Apache-2.0
"""The lock step of the replay's executors: every forward pass ends in an
all-gather across the DP ranks (as MoE dispatch/combine does), and lasts the
slowest rank's modeled cost, scaled to wall time.

The collective runs on a gloo group of the executors' own (loopback port
chosen by the front-end, rank 0 hosts the store), separate from the
engines' ``dp_group``, so it never interleaves with vLLM's or the balance
collectives on that group.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from vllm.distributed.utils import (
    stateless_destroy_torch_distributed_process_group,
    stateless_init_torch_distributed_process_group,
)

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.model.cost import ReplaySettings, lockstep_ms

logger = init_logger(__name__)

#: A gap between two forward passes longer than this (wall seconds, beyond
#: the step's budget) is the engine idling between waves, not loop overhead.
IDLE_GAP_S = 0.05


class LockStep:
    """One rank's side of the lock step (``size`` 1: no collective)."""

    def __init__(self, settings: ReplaySettings, rank: int, size: int) -> None:
        self.settings = settings
        self._group: Any = None
        if size > 1:
            kwargs: dict[str, Any] = {}
            params = inspect.signature(stateless_init_torch_distributed_process_group)
            if "timeout" in params.parameters:
                kwargs["timeout"] = timedelta(seconds=settings.lockstep_timeout_s)
            self._group = stateless_init_torch_distributed_process_group(
                "127.0.0.1", settings.lockstep_port, rank, size, backend="gloo",
                **kwargs,
            )  # fmt: skip
        self._costs = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
        self._prev_end: float | None = None

    def step_ms(self, cost_ms: float) -> float:
        """All-gather this rank's cost (microsecond resolution, so every
        rank computes the same maximum); the step's modeled milliseconds."""
        mine = torch.tensor([round(cost_ms * 1000)], dtype=torch.int64)
        if self._group is None:
            return int(mine) / 1000.0
        dist.all_gather(self._costs, mine, group=self._group)
        return lockstep_ms([int(c) / 1000.0 for c in self._costs])

    def pace(
        self,
        t0: float,
        step_ms: float,
        before_sleep: Callable[[float, bool], None] | None = None,
    ) -> tuple[float, float]:
        """Sleep so the step that entered at wall time ``t0`` lasts
        ``step_ms * time_scale``; return ``(wall end, overrun seconds)``.

        Back-to-back steps are paced from the previous step's end, so the
        engine loop's own overhead (scheduling, outputs, collectives) is
        absorbed into the modeled time while it is smaller than the budget;
        what exceeds it is the overrun. ``before_sleep(deadline,
        back_to_back)`` runs before the sleep (the modeled clock publishes
        the step there, so the front-end sees it while it runs).
        """
        budget = step_ms / 1000.0 * self.settings.time_scale
        now = time.monotonic()
        prev = self._prev_end
        overrun = 0.0
        back_to_back = prev is not None and t0 - prev <= budget + IDLE_GAP_S
        if back_to_back:
            assert prev is not None
            deadline = prev + budget
            overrun = max(0.0, now - deadline)
        else:
            deadline = t0 + budget
        if before_sleep is not None:
            before_sleep(deadline, back_to_back)
            now = time.monotonic()
        if deadline > now:
            time.sleep(deadline - now)
        end = max(deadline, time.monotonic())
        self._prev_end = end
        return end, overrun

    def close(self) -> None:
        if self._group is not None:
            group, self._group = self._group, None
            try:
                stateless_destroy_torch_distributed_process_group(group)
            except Exception:  # shutting down: the peers may be gone already
                logger.debug("replay executor: lock-step group teardown failed")
