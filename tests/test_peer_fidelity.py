# SPDX-License-Identifier: Apache-2.0
"""Fidelity of the peer models to their sources (issue 44, items 1-4, 6,
7, 9): each test names the source behaviour it checks and FAILS ON THE
OLD MODEL (the behaviour before the fix, said per test). The scripted
decision tests are pure logic; the ones on real vLLM schedulers build them
as the simulated engine does (nothing is mocked)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.v1.request import RequestStatus

from tests.support.model_outputs import fake_model_output
from vllm_ascend_balance.replay.model.tiny_moe import write_tiny_moe_model
from vllm_ascend_balance.replay.peers import (
    PassHistory,
    PeerPolicy,
    RankState,
    make_policy,
    state,
)
from vllm_ascend_balance.replay.peers.state import admissible_now
from vllm_ascend_balance.replay.peers.trtllm_adp import context_requests
from vllm_ascend_balance.replay.pipeline.workload import builtin_requests
from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest
from vllm_ascend_balance.replay.sim.adp_routing import AdpRouter, route_requests
from vllm_ascend_balance.replay.sim.build import (
    PromptPool,
    SimOptions,
    build_schedulers,
    make_request,
)
from vllm_ascend_balance.replay.sim.fleet import simulate
from vllm_ascend_balance.replay.sim.peer_step import PeerStep

# Real schedulers: their admission checks (budget, blocks) differ by release.
pytestmark = pytest.mark.lane_scope("release", "main")

CAP = 8
READY = RankState(waiting=2, running=3, cap=CAP)
BUSY = RankState(waiting=0, running=5, cap=CAP)


def holds(policy: PeerPolicy, script: Sequence[Sequence[RankState]], dt=0.05) -> list:
    out = []
    for i, states in enumerate(script):
        gathered = [replace(s, clock_ms=round(1000 * i * dt)) for s in states]
        out.append(policy.decide(gathered)[0])
    return out


# ------------------------------------------------- item 1: SGLang's window


def test_rejected_prefillable_pass_is_recorded() -> None:
    """sgl-project/sglang#34284: a prefillable pass that admitted nothing
    enters the recent-prefill window with ``min(max(waiting, 1),
    max(cap - running, 1))``. Old model: only admitting passes were
    recorded (the window stayed empty here)."""
    h = PassHistory()
    h.observe(True, True, 0, 2, attempted=READY)
    assert list(h.recent) == [2]
    h.observe(False, True, 0, 7, attempted=replace(READY, waiting=7, running=7))
    assert list(h.recent) == [2, 1]
    # not prefillable (nothing fits): nothing recorded; vLLM's "ever" keeps
    # counting admissions only
    h.observe(False, False, 0, 0, attempted=replace(READY, fits=0))
    assert list(h.recent) == [2, 1] and h.ever == 0


def test_window_size_is_a_knob() -> None:
    """``SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE`` (the sixth
    field). Old model: fixed at 16."""
    assert make_policy("sglang-delayer:30:0:0:5000:0:4").prefill_bs_window == 4
    h = PassHistory(4)
    for n in (9, 1, 1, 1, 1):
        h.observe(False, True, n, 0)
    assert max(h.recent) == 1


# ------------------------------------------- item 2: "can prefill" fits


def test_prefillable_means_it_fits() -> None:
    """sgl-project/sglang#31835 negotiates after the KV and token-budget
    checks; TensorRT-LLM counts only the context its scheduler fitted. A
    rank whose head request does not fit is not prefillable, so [that
    rank, a busy one] is "none" (allow), not "mixed" (delay). Old model:
    ``waiting > 0 and running < cap`` alone (held here)."""
    stuck = replace(READY, fits=0)
    assert not stuck.can_admit and context_requests(stuck) == 0
    assert holds(make_policy("sglang-delayer:3"), [[stuck, BUSY]] * 2) == [False] * 2
    # control: the same rank with room is prefillable, the pair mixed
    assert holds(make_policy("sglang-delayer:3"), [[READY, BUSY]] * 2) == [True] * 2


def _schedulers(
    tmp: Path,
    n: int,
    budget: int,
    peer: bool = False,
    kv_tokens: int | None = None,
    max_model_len: int = 4096,
) -> list[Any]:
    opts = SimOptions(
        dp_size=n, max_num_seqs=CAP, max_num_batched_tokens=budget,
        max_model_len=max_model_len, longest_request_tokens=min(1024, max_model_len),
        kv_cache_tokens=kv_tokens,
    )  # fmt: skip
    return build_schedulers(
        opts, False, write_tiny_moe_model(tmp / "m", 4096), peer_gate=peer
    )


def _add(sched: Any, index: int, prompt: int) -> None:
    req = ReplayRequest(index, 0.0, prompt, 8)
    sched.add_request(make_request(f"r{index}", req, PromptPool(4096)))


def test_admissible_matches_schedule(tmp_path: Path) -> None:
    """:func:`admissible_now` on a real vLLM scheduler: a chunk in flight
    that takes the whole token budget leaves no room for a waiting request
    (``schedule()`` admits none), while a free slot and a waiting request
    made the old model call the rank prefillable."""
    (sched,) = _schedulers(tmp_path, 1, budget=64)
    _add(sched, 0, 500)
    assert admissible_now(sched) == 1  # negative control: it fits
    sched.schedule()  # 64 of 500 prompt tokens: a chunk in flight
    _add(sched, 1, 100)
    assert admissible_now(sched) == 0
    assert len(sched.schedule().scheduled_new_reqs) == 0


def test_admissible_needs_the_whole_prompt_where_vllm_reserves_it(
    tmp_path: Path,
) -> None:
    """Where the scheduler reserves the whole sequence at admission
    (``scheduler_reserve_full_isl``, on in every pinned vLLM), a waiting request
    whose first chunk fits the free blocks but whose prompt does not is not
    admitted: :func:`admissible_now` agrees with ``schedule()`` (the old
    model counted the first chunk's blocks only and said 1)."""
    (sched,) = _schedulers(tmp_path, 1, budget=64, kv_tokens=1024)
    block = int(sched.block_size)
    free_tokens = sched.kv_cache_manager.block_pool.get_num_free_blocks() * block
    _add(sched, 0, free_tokens + block)  # its first 64 tokens fit, not all
    full = bool(getattr(sched, "scheduler_reserve_full_isl", False))
    assert admissible_now(sched) == (0 if full else 1)
    assert admissible_now(sched) == len(sched.schedule().scheduled_new_reqs)


def _admitted(sched: Any, step: int) -> tuple[int, bool]:
    """Run ``schedule()`` and the fake model: how many requests that were
    waiting it scheduled (new or resumed), and whether it preempted one."""
    waiting = {r.request_id for r in sched.waiting}
    running = list(sched.running)
    out = sched.schedule()
    preempted = any(r.status == RequestStatus.PREEMPTED for r in running)
    sched.update_from_output(out, fake_model_output(sched, out, step))
    return len(waiting & set(out.num_scheduled_tokens)), preempted


#: The walks' scheduler settings: vLLM's defaults in the simulation, then
#: the settings ``admissible_now`` reads that the simulation leaves at 0 or
#: out of reach (a long-prefill threshold, a KV watermark, a
#: ``max_model_len`` near the longest request).
WALKS = {
    "defaults": {},
    "threshold": {"threshold": 48},
    "watermark": {"watermark_blocks": 4},
    "max_model_len": {"max_model_len": 416},
}


def _walk(tmp: Path, rule: Any, walk: str = "defaults") -> tuple[int, int, int, int]:
    """A seeded random walk of one real scheduler near its KV limit (64
    blocks, prompts up to 400 tokens, at most 40 output tokens, a 128-token
    budget, the settings of :data:`WALKS`); before every ``schedule()``,
    ``rule`` predicts how many waiting requests it admits. Returns (steps,
    wrong predictions, steps where a request waits and a running request's
    next token needs a new block, steps whose ``schedule()`` preempted)."""
    config = WALKS[walk]
    (sched,) = _schedulers(
        tmp, 1, budget=128, kv_tokens=1024,
        max_model_len=config.get("max_model_len", 4096),
    )  # fmt: skip
    if "threshold" in config:
        sched.scheduler_config.long_prefill_token_threshold = config["threshold"]
    if "watermark_blocks" in config:
        sched.kv_cache_manager.watermark_blocks = config["watermark_blocks"]
    block = int(sched.block_size)
    rng = random.Random(7)
    steps = wrong = crossing = preempting = 0
    index = 0
    for step in range(600):
        for _ in range(rng.choice((0, 0, 1, 2))):
            req = ReplayRequest(index, 0.0, rng.randint(8, 400), rng.randint(1, 40))
            sched.add_request(make_request(f"r{index}", req, PromptPool(4096)))
            index += 1
        held = sched.kv_cache_manager.get_block_ids
        crossing += bool(sched.waiting) and any(
            len(held(r.request_id)[0]) * block <= r.num_computed_tokens
            for r in sched.running
        )
        predicted = rule(sched)
        admitted, preempted = _admitted(sched, step)
        wrong += predicted != admitted
        preempting += preempted
        steps += 1
    return steps, wrong, crossing, preempting


def _first_chunk_blind(sched: Any) -> int:
    """The known-bad rule (the one before the fix): the running loop's
    tokens, none of its blocks."""
    real = state._running_loop

    def tokens_only(s: Any, kv: Any, block: int, max_len: int | None) -> Any:
        unbounded = SimpleNamespace(get_num_free_blocks=lambda: 1 << 30)
        no_limit = SimpleNamespace(block_pool=unbounded, get_block_ids=kv.get_block_ids)
        return real(s, no_limit, block, max_len)[0], 0

    state._running_loop = tokens_only
    try:
        return admissible_now(sched)
    finally:
        state._running_loop = real


@pytest.mark.parametrize("walk", list(WALKS))
def test_admissible_counts_the_running_loop_s_blocks(tmp_path: Path, walk: str) -> None:
    """``schedule()``'s running loop allocates first: a chunk or a decode
    crossing a block boundary takes a block, and a step that must preempt
    admits nothing (vLLM skips the waiting loop after a preemption). Over a
    random walk near the KV limit, with each of :data:`WALKS`,
    :func:`admissible_now` predicts every step's admissions exactly
    (oracle: the real ``schedule()``). Negative control: the rule without
    the running loop's blocks, which is what the rule before the fix
    computed (11 wrong on the default walk on vLLM 0.27.1 and 0.32.0, as
    the rule of commit 62c45e7), mispredicts on every walk (9 to 14)."""
    steps, wrong, crossing, preempting = _walk(tmp_path / "a", admissible_now, walk)
    # the cases are exercised: 102-328 crossing steps; 7 or 59 preempting
    # steps (none with the watermark, which keeps the blocks back)
    assert steps == 600 and crossing >= 50, crossing
    assert preempting >= 5 or walk == "watermark", preempting
    assert wrong == 0
    _, blind_wrong, _, _ = _walk(tmp_path / "b", _first_chunk_blind, walk)
    assert blind_wrong > 0


# ------------------------------------ item 3/9: TensorRT-LLM's own router


def test_adp_router_rule() -> None:
    """``DefaultADPRouter``: strict-rank requests first; expected =
    min(max(ceil((active + new) / R), max active), cap); a min-heap on
    (active tokens, active requests), longest prompt first; a rank at
    expected takes nothing more, and what no rank takes stays queued."""
    # rank 0: 3 active (300 tokens), rank 1: 1 active (900 tokens)
    placed, expected = route_requests(
        [3, 1], [300, 900], [(10, None), (50, None), (20, 1), (40, None)], 4
    )
    # strict first: rank 1 -> 2 active; ceil((5 + 3) / 2) = 4
    assert expected == 4
    # longest first: 50 -> rank 0 (fewer tokens), then rank 0 is at 4;
    # 40 and 10 -> rank 1
    assert placed == {0: [1], 1: [2, 3, 0]}
    full, _ = route_requests([4, 4], [0, 0], [(10, None)], 4)
    assert full == {0: [], 1: []}  # queued: every rank at the cap


def test_adp_router_routes_only_the_head_of_its_queue() -> None:
    """Each iteration TensorRT-LLM fetches at most R x cap - active
    requests, first in first out, and sorts only those by prompt length: a
    long prompt behind that window waits its turn. Negative control: the
    whole backlog routed (the old model) hands the long prompt out first."""
    from types import SimpleNamespace

    from vllm_ascend_balance.replay.pipeline.workload_types import ReplayRequest

    def sched(active: int) -> SimpleNamespace:
        reqs = [SimpleNamespace(num_prompt_tokens=10)] * active
        return SimpleNamespace(running=reqs, waiting=[], max_num_running_reqs=4)

    def req(i: int, prompt: int) -> ReplayRequest:
        return ReplayRequest(index=i, arrival_s=0.0, prompt_tokens=prompt,
                             output_tokens=1, rank=None, origin="test")  # fmt: skip

    router = AdpRouter(2)
    queue = [req(0, 10), req(1, 20), req(2, 5000)]
    for r in queue:
        router.enqueue(r)
    # 2 x 4 - 6 active = 2 fetched: r0 and r1; the long r2 stays queued.
    out = router.dispatch([sched(3), sched(3)])
    assert sorted(r.index for _, r in out) == [0, 1]
    assert [r.index for r in router.queue] == [2]
    # Control: the whole backlog sorted, longest first, gives r2 a rank.
    placed, _ = route_requests([3, 3], [30, 30], [(10, None), (20, None),
                                                  (5000, None)], 4)  # fmt: skip
    assert 2 in placed[0] + placed[1]


def test_trtllm_rows_build_no_rank_backlog() -> None:
    """TensorRT-LLM keeps one global queue and hands a rank a request only
    while it is below the expected active count (at most its cap), so no
    rank's running + waiting exceeds the cap. Old model: vLLM's router
    with per-rank queues (a rank backlog beyond the cap on this burst)."""
    reqs = builtin_requests(seed=3, num_bursts=1, burst=(40, 44))
    opts = SimOptions(dp_size=2, max_num_seqs=CAP, max_num_batched_tokens=1024)
    result = simulate(False, reqs, opts, peer="trtllm-adp:8:2")
    assert max(s.running + s.waiting for r in result.rank_steps for s in r) <= CAP
    finished = sum(r.finish_step is not None for rs in result.rank_requests for r in rs)
    assert finished == len(reqs)
    # control: the same burst behind vLLM's router queues past the cap
    result = simulate(False, reqs, opts, peer="sglang-delayer:8")
    assert max(s.running + s.waiting for r in result.rank_steps for s in r) > CAP


def test_routing_trtllm_adp_puts_every_mode_behind_its_router() -> None:
    """``--routing trtllm-adp``: ``off`` and the gate behind TensorRT-LLM's
    router too (the question "how much of its result is placement"), so
    the same burst builds no rank backlog. Control: the same modes behind
    vLLM's router queue past the cap."""
    reqs = builtin_requests(seed=3, num_bursts=1, burst=(40, 44))
    opts = SimOptions(dp_size=2, max_num_seqs=CAP, max_num_batched_tokens=1024)
    adp = replace(opts, routing="trtllm-adp")
    for balance in (False, True):
        result = simulate(balance, reqs, adp)
        steps = [s for r in result.rank_steps for s in r]
        assert max(s.running + s.waiting for s in steps) <= CAP
        assert not any(result.routed_by_vllm)
        done = sum(r.finish_step is not None for rs in result.rank_requests for r in rs)
        assert done == len(reqs)
        control = simulate(balance, reqs, opts)
        steps = [s for r in control.rank_steps for s in r]
        assert max(s.running + s.waiting for s in steps) > CAP


def test_peer_router_shared_puts_the_peer_behind_vllms_router() -> None:
    """``--peer-router shared``: TensorRT-LLM's rule runs behind vLLM's
    router (its admission rule apart from its router), so the burst that
    its own router keeps within the cap builds a rank backlog, as every
    other mode's does. Control: the default (``own``) keeps it within."""
    reqs = builtin_requests(seed=3, num_bursts=1, burst=(40, 44))
    opts = SimOptions(dp_size=2, max_num_seqs=CAP, max_num_batched_tokens=1024)
    for router, backlog in (("shared", True), ("own", False)):
        result = simulate(
            False, reqs, replace(opts, peer_router=router), peer="trtllm-adp:8:2"
        )
        steps = [s for r in result.rank_steps for s in r]
        assert (max(s.running + s.waiting for s in steps) > CAP) is backlog, router
        assert any(result.routed_by_vllm) is backlog, router
        done = sum(r.finish_step is not None for rs in result.rank_requests for r in rs)
        assert done == len(reqs)


def test_trtllm_low_occupancy_timeout() -> None:
    """NVIDIA/TensorRT-LLM#17700: while the least busy rank has fewer than
    M real generation requests, the hold's timeout is L (0: released at
    the first check). Old model: only ``timeout_iters``."""
    light = RankState(waiting=0, running=1, cap=CAP)
    script = [[READY, light]] * 3
    assert holds(make_policy("trtllm-adp:50:10:2:0"), script) == [False] * 3
    assert holds(make_policy("trtllm-adp:50:10:2:2"), script) == [True, False, True]
    assert holds(make_policy("trtllm-adp:50:10"), script) == [True] * 3  # control


# ------------------------------------------- item 4: information timing


def _seen(tmp: Path, peer: str, timing: str = "source") -> RankState:
    """What the policy decides on when a request arrives at rank 0 in the
    step being decided (the previous step ended with nothing queued)."""
    scheds = _schedulers(tmp, 2, budget=256, peer=True)
    step = PeerStep(peer, scheds, timing)
    seen: list[Sequence[RankState]] = []
    decide = step.policy.decide
    step.policy.decide = lambda g: (seen.append(g), decide(g))[1]  # type: ignore[method-assign]
    step.end_step(0.0)
    _add(scheds[0], 0, 100)
    step.decide(0.0)
    return seen[0][0]


def test_vllm_align_decides_on_the_previous_step(tmp_path: Path) -> None:
    """vLLM #51199 reports a finished pass to its coordinator: it decides
    on the state gathered at the end of the previous step, not on this
    step's arrivals. Old model: every peer saw this step's arrivals."""
    assert _seen(tmp_path, "vllm-align").waiting == 0


def test_in_pass_peers_see_this_steps_arrivals(tmp_path: Path) -> None:
    """SGLang's, TensorRT-LLM's and ATOM's rules negotiate inside the pass,
    after it took in new requests (the control for the test above)."""
    for peer in ("sglang-delayer", "trtllm-adp", "atom-delayer"):
        assert _seen(tmp_path, peer).waiting == 1, peer


def test_peer_timing_gate_decides_on_the_previous_step(tmp_path: Path) -> None:
    """``--peer-timing gate``: every peer decides where the gate gathers
    (the real engine's peer gate can do no other), so the simulated engine
    can measure what that timing costs a peer."""
    for peer in ("sglang-delayer", "trtllm-adp", "atom-delayer"):
        assert _seen(tmp_path, peer, "gate").waiting == 0, peer


# --------------------------------- item 6: SGLang's prefill-decode interval


def test_prefill_decode_interval() -> None:
    """``_arm_prefill_decode_interval`` / ``_should_defer_prefill``
    (sgl-project/sglang#35017): after any rank's extend batch, N rounds
    with no prefill, chunks included; the delayer does not negotiate in a
    deferred round. Old model: no such setting (the mode did not parse)."""
    pdi = make_policy("sglang-pdi:2")
    ext = replace(BUSY, extended=True)
    got = []
    for states in ([READY, ext], [READY, BUSY], [READY, BUSY], [READY, BUSY]):
        got.append((pdi.decide(states)[0], pdi.holds_chunks()))
    assert got == [(True, True), (True, True), (False, False), (False, False)]
    # with the delayer: a deferred round leaves its counter alone
    both = make_policy("sglang-delayer:3:0:0:5000:1")
    assert holds(both, [[READY, ext], [READY, BUSY], [READY, BUSY]]) == [
        True, True, True,
    ]  # fmt: skip
    assert both.delayed == 2  # type: ignore[attr-defined]


# ------------------------------------------ item 7: the newest delayer


def test_queue_trigger_and_gathered_wall_clock() -> None:
    """The queue condition (``--prefill-delayer-queue-min-ratio``): every
    rank prefillable, the longest queue (2) under min(int(max running x
    ratio), largest recent attempt) = min(5, 4): delay (after the first
    skipped one), until the SMALLEST gathered elapsed wait reaches
    ``max_delay_ms``. Old model: no queue trigger."""
    a = replace(READY, running=10, cap=16, max_prefill_batch_recent=4)
    policy = make_policy("sglang-delayer:1000:0:50:300")
    out = []
    for i in range(6):
        # rank 1's clock runs twice as fast: its elapsed wait crosses 300 ms
        # a step before rank 0's, and the smallest elapsed wait decides
        gathered = [replace(a, clock_ms=100 * i), replace(a, clock_ms=200 * i)]
        out.append(policy.decide(gathered)[0])
    # skip-first, then delays from step 1 until rank 0 has waited 300 ms
    assert out == [False, True, True, True, False, True]


# ------------------------------------------ item 8: vLLM's own baseline


def test_vllm_rows_use_the_current_front_end_score() -> None:
    """Every mode but ``trtllm-adp`` is routed by the installed vLLM's
    ``DPLBAsyncMPClient.get_core_engine_for_request``, which on these
    lanes scores ``max(clients * in-flight, waiting + running)`` plus
    ``waiting * 6 * max(0, kv - 0.5)`` (vllm-project/vllm#49204). Under the
    older ``waiting * 4 + running`` score, [1 waiting + 1 running] (5)
    would lose to [3 running] (3); under the current one it wins (2 < 3)."""
    from vllm_ascend_balance.replay.sim.routing import Router

    router = Router("vllm", 2, 0.2)
    fields = len(router._state.lb_engines[0])
    router._state.lb_engines = [[1, 1, 0.0][:fields], [0, 3, 0.0][:fields]]
    assert router.route("a", 0, None) == 0
    # the KV term: 2 waiting at 90 % KV cost 2 + 2 * 6 * 0.4 = 6.8 > 3
    router = Router("vllm", 2, 0.2)
    router._state.lb_engines = [[2, 0, 0.9][:fields], [0, 3, 0.0][:fields]]
    assert router.route("b", 0, None) == (1 if fields == 3 else 0)
