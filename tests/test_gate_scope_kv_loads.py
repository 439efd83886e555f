# SPDX-License-Identifier: Apache-2.0
"""The gate with ``--max-num-inflight-kv-loads`` (vLLM 0.34 on): a frozen
step starts no async KV load, and every waiting-count read of the package
sees the queue those requests wait in (issue 45).

From 0.34, requests that may load their KV asynchronously wait in their own
queue, ``async_kv_waiting``, when ``--max-num-inflight-kv-loads`` is set;
the WAITING loop may start their loads even past the running cap (a load
takes no running slot until its KV arrives). The series holds that queue
on a held step, as ``PauseState.PAUSED_NEW`` does: no new async load
starts, and ``kv_holding_waiting`` still drains (``tests/test_gate_scope.py``).

Real ``Scheduler`` with the package's gate composed on, vLLM's
``NixlConnector`` as KV consumer (scheduler side only, runs on CPU; as
upstream's connector tests configure it), remote-prefill requests. The
frozen decision is set by hand (``balance_frozen``), as the gather would
set it when a leader elsewhere sits at the cap.

Negative control: the patched file with the second seam test (the
``loads_only`` branch) reverted to always taking ``async_kv_waiting``
starts the loads while frozen, so the check fails on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import vllm.v1.core.sched.scheduler as installed_scheduler
from vllm.config import KVTransferConfig
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from tests.support.model_outputs import fake_model_output
from tests.support.original_scheduler import classes_from_source
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin, has_held_waiting
from vllm_ascend_balance.gate.settings import GateSettings

pytestmark = [
    pytest.mark.lane_scope("fork"),
    pytest.mark.skipif(
        not hasattr(Scheduler, "_admits_inflight_kv_load"),
        reason="this release has no --max-num-inflight-kv-loads",
    ),
]

BLOCK = 16
LOADS_ONLY_SEAM = "elif take_async_kv and not stop_admitting_waiting:"


def _gated(base: type) -> type:
    return type(f"Balance{base.__name__}", (BalanceSchedulerMixin, base), {})


def _loads_past_the_gate() -> type:
    source = Path(installed_scheduler.__file__).read_text()
    assert source.count(LOADS_ONLY_SEAM) == 1, "the installed series changed"
    variant = source.replace(LOADS_ONLY_SEAM, "elif take_async_kv:")
    sched, _ = classes_from_source("vab_loads_past_gate", variant)
    return sched


def _remote(request_id: str) -> Any:
    request = make_request(request_id, 3 * BLOCK, max_tokens=4, block_size=BLOCK)
    request.kv_transfer_params = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "prefill-engine",
        "remote_request_id": f"prefill-{request_id}",
        "remote_block_ids": [0, 1, 2],
        "remote_host": "localhost",
        "remote_port": 1234,
        "tp_size": 1,
    }
    return request


def _scheduler(base: type) -> Any:
    config = make_vllm_config(max_num_seqs=1, block_size=BLOCK, num_blocks=64)
    config.kv_transfer_config = KVTransferConfig(
        kv_connector="NixlConnector", kv_role="kv_consumer"
    )
    config.cache_config.kv_cache_layout = "LBNHC"
    config.scheduler_config.max_num_inflight_kv_loads = 2
    return make_scheduler(_gated(base), vllm_config=config)


def _loads_started_while_frozen(base: type) -> tuple[list[str], Any]:
    """Cap 1, one local request running (the batch is full, where 0.34
    starts async loads past the cap), then frozen with two remote prefills
    and one new request queued: the ids whose load started while frozen."""
    scheduler = _scheduler(base)
    scheduler.add_request(make_request("local", BLOCK, max_tokens=40))
    output = scheduler.schedule()
    scheduler.update_from_output(output, fake_model_output(scheduler, output, 0))
    scheduler.balance_frozen = True
    remote = [_remote("kv0"), _remote("kv1")]
    for request in remote:
        scheduler.add_request(request)
    scheduler.add_request(make_request("new", BLOCK))
    assert [r.request_id for r in scheduler.async_kv_waiting] == ["kv0", "kv1"]
    assert has_held_waiting(scheduler)
    for step in range(1, 6):
        output = scheduler.schedule()
        assert set(output.num_scheduled_tokens) == {"local"}
        scheduler.update_from_output(output, fake_model_output(scheduler, output, step))
    started = [
        r.request_id for r in remote if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    ]
    return started, scheduler


def test_frozen_step_starts_no_async_kv_load():
    started, scheduler = _loads_started_while_frozen(Scheduler)
    assert started == []
    assert [r.request_id for r in scheduler.async_kv_waiting] == ["kv0", "kv1"]
    # Open again: the loads start (past the cap, as the release does).
    scheduler.balance_frozen = False
    scheduler.schedule()
    assert all(
        scheduler.requests[rid].status == RequestStatus.WAITING_FOR_REMOTE_KVS
        for rid in ("kv0", "kv1")
    )


def test_negative_control_loads_past_the_gate_are_caught():
    started, _ = _loads_started_while_frozen(_loads_past_the_gate())
    assert started == ["kv0", "kv1"]


def test_payload_sees_async_kv_waiting():
    """The opt-in rules' signals read every held queue: a rank whose only
    queued requests wait in ``async_kv_waiting`` reports them (``waiting``
    alone would say nothing is held)."""
    scheduler = _scheduler(Scheduler)
    cls = type(scheduler)
    cls.balance_settings = GateSettings("throttled")  # a class of this test's
    scheduler.add_request(_remote("kv0"))
    assert not scheduler.waiting and scheduler.async_kv_waiting
    payload = scheduler.admission_payload()
    quantities = dict(zip(cls.balance_plan().layout.quantities, payload, strict=True))
    assert quantities == {
        "running": 0,
        "held": 1,
        "queued": 0,
        "starved": 1,
        "hold_age": 0,
    }
