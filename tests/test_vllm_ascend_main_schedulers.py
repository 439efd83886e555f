# SPDX-License-Identifier: Apache-2.0
"""vllm-ascend main's other schedulers next to balance (the table in
docs/vllm-ascend-schedulers.md), one test per row, on the vLLM it pins (the
release lane) with the checkout in ``$VAB_VLLM_ASCEND_SRC``.

- short-request-first and batch-job-aware (queues, no ``schedule()`` copy):
  this package's gate composed onto them freezes admission, and opens in the
  queue's own order;
- profiling-chunk (its own ``schedule()`` copy): the gate cannot reach it
  and the package's static check refuses it (main, and with the series of
  ``downstream_patch/vllm-ascend/main/``, which leaves that copy alone); a
  copy that asks the seam would compose (checked by introspection);
- DyntraLB and recompute (their own ``schedule()`` copies, PD-disaggregated
  decode nodes only): the static check refuses them.

Real vLLM schedulers; vllm-ascend's ``AscendConfig`` (not initialised
offline) is replaced by the few settings each scheduler reads.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest

from tests.support import vllm_ascend_src

pytestmark = [
    pytest.mark.lane_scope("release"),
    pytest.mark.slow,  # imports vllm-ascend's scheduler modules from source
]

SRC = vllm_ascend_src.activate_or_skip()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import vllm.v1.core.sched.scheduler as scheduler_mod  # noqa: E402

# vllm_ascend.core modules only (no platform patches); they bind the
# module-level Scheduler at import, which is upstream's in this process.
from vllm_ascend.ascend_config import BatchJobSchedConfig  # noqa: E402
from vllm_ascend.core import batch_job_aware_scheduler as bja  # noqa: E402
from vllm_ascend.core import dyntra_lb_scheduler as dyntra  # noqa: E402
from vllm_ascend.core import recompute_scheduler as recompute  # noqa: E402
from vllm_ascend.core import scheduler_profiling_chunk as profiling  # noqa: E402
from vllm_ascend.core import short_request_first_scheduler as srf  # noqa: E402

from tests.support.differential import FakeGroup  # noqa: E402
from tests.support.vllm_objects import (  # noqa: E402
    make_request,
    make_scheduler,
    make_vllm_config,
)
from vllm_ascend_balance.gate.scheduler import SEAM, admission_cap  # noqa: E402
from vllm_ascend_balance.wiring.composition import compose_scheduler  # noqa: E402
from vllm_ascend_balance.wiring.reach import unreachable_gate  # noqa: E402

BLOCK_SIZE = 16


def gate(sched: Any, others: list[int]) -> None:
    """This package's gather with the other ranks' running counts scripted
    (``dist.all_gather`` replaced; this rank's own slot is real)."""

    def all_gather(slots: list[torch.Tensor], local: torch.Tensor, group: Any = None):
        for i, slot in enumerate(slots):
            slot.copy_(local if i == 0 else torch.tensor([others[i - 1]]))

    sched.dp_group = FakeGroup(len(others) + 1)
    name = (
        "admission_gather" if hasattr(sched, "admission_gather") else "balance_gather"
    )
    with mock.patch.object(dist, "all_gather", all_gather):
        getattr(sched, name)()


def admitted(sched: Any) -> list[str]:
    return [r.req_id for r in sched.schedule().scheduled_new_reqs]


def add(sched: Any, rid: str, prompt_len: int) -> None:
    sched.add_request(make_request(rid, prompt_len, 4, BLOCK_SIZE))


def freeze_then_open(sched: Any) -> tuple[list[str], list[str]]:
    """One request running (cap 2), a long then a short one waiting: a step
    with another rank at the cap, then an open step."""
    add(sched, "r0", 8)
    gate(sched, [0])
    assert admitted(sched) == ["r0"]
    add(sched, "long", 300)
    add(sched, "short", 8)
    cap = admission_cap(sched)
    gate(sched, [cap])
    assert sched.balance_frozen
    frozen = admitted(sched)
    gate(sched, [0])
    return frozen, admitted(sched)


def config(**kwargs: Any) -> Any:
    return make_vllm_config(
        max_num_seqs=2,
        max_num_batched_tokens=512,
        num_blocks=128,
        data_parallel_size=2,
        **kwargs,
    )


# --------------------------------------------------------------------------
# Queues without a schedule() copy: compose
# --------------------------------------------------------------------------


def test_short_request_first_composes() -> None:
    """SRF is a waiting queue (``install_short_request_first_waiting_queue``,
    also how vllm-ascend's BalanceScheduler installs it) and its async class
    adds no ``schedule()``: the gate freezes admission, and the open step
    admits in SRF order (the short request first; FCFS would admit ``long``).
    """
    assert unreachable_gate(srf.ShortRequestFirstAsyncScheduler) is None
    sched = make_scheduler(
        compose_scheduler(scheduler_mod.Scheduler), vllm_config=config()
    )
    srf.install_short_request_first_waiting_queue(
        sched, threshold=64, long_max_wait_ms=0.0
    )
    frozen, opened = freeze_then_open(sched)
    assert frozen == []
    assert opened == ["short"]
    # Control: the same steps without SRF admit FCFS.
    fcfs = make_scheduler(
        compose_scheduler(scheduler_mod.Scheduler), vllm_config=config()
    )
    assert freeze_then_open(fcfs) == ([], ["long"])


def _batch_job_scheduler(cls: type) -> Any:
    ascend = SimpleNamespace(
        scheduler_config=SimpleNamespace(
            batch_job_sched_config=BatchJobSchedConfig({"enabled": True})
        )
    )
    with (
        mock.patch("vllm_ascend.ascend_config.init_ascend_config", return_value=ascend),
        mock.patch("vllm_ascend.ascend_config.get_ascend_config", return_value=ascend),
    ):
        return make_scheduler(cls, vllm_config=config())


def test_batch_job_aware_composes() -> None:
    """Batch-job-aware is a waiting queue plus a ``schedule()`` that calls
    ``super().schedule()``: the gate reaches upstream's seam through it and
    freezes admission; the open step admits again."""
    for cls in (bja.BatchJobAwareScheduler, bja.BatchJobAwareAsyncScheduler):
        assert unreachable_gate(cls) is None, cls
    sched = _batch_job_scheduler(compose_scheduler(bja.BatchJobAwareScheduler))
    assert isinstance(sched.waiting, bja.BatchJobAwareRequestQueue)
    frozen, opened = freeze_then_open(sched)
    assert frozen == []
    assert opened, "the open step admits from the batch-job queue"


# --------------------------------------------------------------------------
# Schedulers with their own schedule() copy
# --------------------------------------------------------------------------

PROFILING_ASKS_SEAM = SEAM in inspect.getsource(
    profiling.ProfilingChunkScheduler.schedule
)


def _profiling_scheduler(cls: type) -> Any:
    cfg = SimpleNamespace(
        enabled=True, smooth_factor=0.8, min_chunk=256, max_fit_chunk=30
    )
    ascend = SimpleNamespace(
        scheduler_config=SimpleNamespace(profiling_chunk_config=cfg)
    )
    with (
        mock.patch("vllm_ascend.ascend_config.init_ascend_config", return_value=ascend),
        mock.patch("vllm_ascend.ascend_config.get_ascend_config", return_value=ascend),
    ):
        return make_scheduler(cls, vllm_config=config())


def test_profiling_chunk_composes_only_where_its_copy_asks_the_seam() -> None:
    """The copy never asks the seam (main, and the series leaves it alone),
    so a frozen gate admits anyway, and the package's static check refuses
    the class. Were the copy to ask the seam once per call, the check would
    pass and the gate would freeze admission."""
    sched = _profiling_scheduler(compose_scheduler(profiling.ProfilingChunkScheduler))
    frozen, opened = freeze_then_open(sched)
    refused = unreachable_gate(profiling.ProfilingChunkScheduler)
    if PROFILING_ASKS_SEAM:
        assert refused is None
        assert frozen == [] and opened
    else:
        assert refused is not None and refused[0] is profiling.ProfilingChunkScheduler
        assert frozen, "a copy that never asks the seam admits through a frozen gate"


@pytest.mark.parametrize(
    "cls",
    [
        dyntra.DyntraLBScheduler,
        dyntra.AsyncDyntraLBScheduler,
        recompute.RecomputeScheduler,
        recompute.AsyncRecomputeScheduler,
        recompute.DyntraLBRecomputeScheduler,
        recompute.AsyncDyntraLBRecomputeScheduler,
    ],
    ids=lambda cls: cls.__name__,
)
def test_decode_node_schedulers_are_refused(cls: type) -> None:
    """DyntraLB and recompute (PD-disaggregated decode nodes only, where
    vllm-ascend refuses balance scheduling) carry their own ``schedule()``
    that never asks the seam: the package's static check names the class."""
    refused = unreachable_gate(cls)
    assert refused is not None
    assert issubclass(cls, refused[0]) and "schedule" in vars(refused[0])
