# SPDX-License-Identifier: Apache-2.0
"""Peer policies on the simulated engine: real vLLM schedulers, the policy's
decision applied through the seam (``_should_stop_admitting_waiting``).

Per policy: every request finishes (no deadlock), every rank holds on the
same steps (lock step), no rank admits a new request on a step it holds, and
the policy did hold sometimes (so the check is not vacuous). Negative
control: a gate that ignores the hold admits while held and fails the check.
"""

from __future__ import annotations

from unittest import mock

import pytest

from vllm_ascend_balance.replay.peers import POLICIES, PeerGateMixin
from vllm_ascend_balance.replay.pipeline.workload import builtin_requests
from vllm_ascend_balance.replay.sim.fleet import SimOptions, SimResult, simulate

OPTS = SimOptions(dp_size=2, max_num_seqs=8, max_num_batched_tokens=1024)
REQUESTS = builtin_requests(seed=3, num_bursts=2, burst=(24, 30))
# Release (no throttle_prefills: holds through the seam only) and main (chunk
# holds through throttle_prefills too) cover both paths of the simulation.
pytestmark = pytest.mark.lane_scope("release", "main")
SPECS = [
    "sglang-delayer:8",
    "sglang-pdi:2",
    "trtllm-adp:8:2",
    "vllm-align:8:2",
    "atom-delayer:8",
]


def hold_errors(result: SimResult) -> list[str]:
    errors = []
    finished = sum(r.finish_step is not None for rs in result.rank_requests for r in rs)
    if finished != len(REQUESTS):
        errors.append(f"{finished}/{len(REQUESTS)} requests finished")
    held = admitted_free = 0
    for steps in zip(*result.rank_steps, strict=True):
        if len({s.frozen for s in steps}) > 1:
            errors.append(f"step {steps[0].step}: ranks held apart")
        for s in steps:
            held += s.frozen
            if s.frozen and s.new_requests:
                errors.append(f"step {s.step} rank {s.rank}: admitted while held")
            admitted_free += (not s.frozen) and s.new_requests > 0
    if not held or not admitted_free:
        errors.append(f"vacuous: {held} held rank-steps, {admitted_free} admitting")
    return errors


@pytest.mark.parametrize("spec", SPECS)
def test_peer_policy_holds_through_the_seam(spec: str) -> None:
    result = simulate(False, REQUESTS, OPTS, peer=spec)
    assert hold_errors(result) == []


def test_every_policy_is_exercised() -> None:
    assert {s.partition(":")[0] for s in SPECS} == set(POLICIES)


def test_negative_control_gate_ignoring_the_hold_fails() -> None:
    def upstream_only(self):
        return super(PeerGateMixin, self)._should_stop_admitting_waiting()

    with mock.patch.object(
        PeerGateMixin, "_should_stop_admitting_waiting", upstream_only
    ):
        result = simulate(False, REQUESTS, OPTS, peer="sglang-delayer:8")
    assert any("admitted while held" in e for e in hold_errors(result))
