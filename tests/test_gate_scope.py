# SPDX-License-Identifier: Apache-2.0
"""Which waiting requests a frozen rank holds: the evidence for the seam's
scope (issue 18, item 2).

Where the release keeps requests that already hold KV blocks in their own
queue (``kv_holding_waiting``: their KV arrived by an async KV load), two
scopes are possible for a frozen step:

* **new only** (what the series ships): the seam stops admission from
  ``waiting`` only; KV-holding requests still drain, as under vLLM's own
  ``PauseState.PAUSED_NEW``.
* **all waiting queues** (the earlier series): the KV-holding ones are held
  too, built here from the installed source by dropping the
  ``and <queue> is self.waiting`` half of the honour check (0.34 on: a
  break at the top of the loop while the seam holds;
  ``tests/support/seam_shapes.all_queues_source``).

The balance contract is "no rank admits a *new* WAITING request"; a
KV-holding request is not new work (its prefill is done remotely), and
holding it keeps its blocks allocated on the frozen rank. The scenario
measures what that costs: a frozen rank (the package's own gate, frozen for
the whole run) with two decoding requests whose KV grows, two requests whose
KV is loaded by vLLM's ``NixlConnector`` (scheduler side, runs on CPU) and
two new requests, on a KV cache that fits the decoders' growth only once the
KV-holding requests have finished. Asserted on ``SchedulerOutput``s:
``preempted_req_ids`` and the scheduled request ids (len(running)).

Releases without a KV-holding queue skip: there the question does not arise.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import vllm.v1.core.sched.scheduler as installed_scheduler
from vllm.config import KVTransferConfig
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import KVConnectorOutput

from tests.support.model_outputs import fake_model_output
from tests.support.original_scheduler import classes_from_source
from tests.support.seam_shapes import all_queues_source
from tests.support.vllm_objects import make_request, make_scheduler, make_vllm_config
from vllm_ascend_balance.gate.scheduler import BalanceSchedulerMixin

pytestmark = [
    # why: kv_holding_waiting and the installed schedule()'s seam check
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.skipif(
        "kv_holding_waiting" not in inspect.getsource(Scheduler.__init__),
        reason="this release has no kv_holding_waiting queue: the scope question "
        "does not arise",
    ),
]

BLOCK = 16
FROZEN_STEPS = 40


@dataclass
class Run:
    preempted: set[str]
    running: list[int]  # requests scheduled per frozen step (= len(running))
    kv_holding_done: bool  # both KV-holding requests finished while frozen
    new_admitted: set[str]


def _frozen(base: type) -> type:
    cls = type(f"Balance{base.__name__}", (BalanceSchedulerMixin, base), {})
    return cls


def _all_queues_scheduler() -> type:
    source = Path(installed_scheduler.__file__).read_text()
    variant = all_queues_source(source)
    sched, _ = classes_from_source("vab_scope_all_queues", variant)
    return sched


def _remote_prefill(request_id: str, prompt_len: int) -> Any:
    request = make_request(request_id, prompt_len, max_tokens=4, block_size=BLOCK)
    request.kv_transfer_params = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "prefill-engine",
        "remote_request_id": f"prefill-{request_id}",
        "remote_block_ids": list(range(prompt_len // BLOCK)),
        "remote_host": "localhost",
        "remote_port": 1234,
        "tp_size": 1,
    }
    return request


def run_frozen_rank(base: type) -> Run:
    config = make_vllm_config(
        max_num_seqs=4,
        max_num_batched_tokens=512,
        block_size=BLOCK,
        # The decoders (180-token prompts) fill 12 blocks each and cross into
        # a 13th after 13 steps; the KV-holding requests hold 5 each: all of
        # it does not fit, the decoders alone do (28 blocks after 40 steps).
        num_blocks=36,
    )
    config.kv_transfer_config = KVTransferConfig(
        kv_connector="NixlConnector", kv_role="kv_consumer"
    )
    config.cache_config.kv_cache_layout = "LBNHC"  # as upstream's connector tests
    scheduler = make_scheduler(_frozen(base), vllm_config=config)
    step = 0

    def advance(**kv: set[str]) -> Any:
        nonlocal step
        output = scheduler.schedule()
        result = fake_model_output(scheduler, output, step)
        if kv:
            result.kv_connector_output = KVConnectorOutput(**kv)
        scheduler.update_from_output(output, result)
        step += 1
        return output

    decoders = [make_request(f"dec{i}", 180, max_tokens=200) for i in range(2)]
    for request in decoders:
        scheduler.add_request(request)
    advance()  # gate open: the decoders are admitted
    loading = [_remote_prefill(f"kv{i}", 64) for i in range(2)]
    for request in loading:
        scheduler.add_request(request)
    advance()  # their KV load starts; they wait holding blocks
    assert all(r in scheduler.kv_holding_waiting for r in loading)

    scheduler.balance_frozen = True  # a leader elsewhere sits at the cap
    for request in [make_request(f"new{i}", 32) for i in range(2)]:
        scheduler.add_request(request)
    run = Run(set(), [], False, set())
    loaded = {r.request_id for r in loading}
    for index in range(FROZEN_STEPS):
        output = advance(finished_recving=loaded) if index == 0 else advance()
        run.preempted |= set(output.preempted_req_ids or ())
        run.running.append(len(output.num_scheduled_tokens))
        run.new_admitted |= {
            r.req_id for r in output.scheduled_new_reqs if r.req_id.startswith("new")
        }
    run.kv_holding_done = all(r.is_finished() for r in loading)
    return run


def test_new_only_scope_drains_kv_holding_requests_without_preemption():
    """The shipped scope: on a rank frozen for 40 steps, the two KV-holding
    requests run and finish, no new request is admitted, and the decoders'
    growth preempts nobody (fails on the all-queues scope: see below)."""
    run = run_frozen_rank(Scheduler)
    print(f"new only:   {run}")
    assert run.new_admitted == set()
    assert run.kv_holding_done
    assert run.preempted == set()
    assert max(run.running) == 4 and run.running[-1] == 2


def test_all_queues_scope_preempts_on_the_frozen_rank():
    """The other choice, same scenario: the KV-holding requests sit on their
    blocks for the whole freeze, a decoder is preempted for want of blocks
    and, being a WAITING request again, stays out while frozen, so the frozen
    rank runs fewer requests than before (len(running) 2 -> 1)."""
    run = run_frozen_rank(_all_queues_scheduler())
    print(f"all queues: {run}")
    assert run.new_admitted == set()
    assert not run.kv_holding_done
    assert run.preempted
    assert max(run.running) == 2 and run.running[-1] == 1
