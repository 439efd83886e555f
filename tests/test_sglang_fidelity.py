# SPDX-License-Identifier: Apache-2.0
"""The SGLang variants of the simulated engine (``--sglang-passes``,
``--sglang-defer``; docs/peer-policies.md, "Known limits"). Each oracle is
SGLang's documented scheduling (``Scheduler.get_next_batch_to_run``,
``_should_defer_prefill`` in ``python/sglang/srt/managers/scheduler.py``),
checked on what the simulated engine ran, and each test has its negative
control: the variant off (the default model) fails the same oracle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_ascend_balance.replay.model.outputs import Batch
from vllm_ascend_balance.replay.pipeline.cost import CostModel
from vllm_ascend_balance.replay.pipeline.options import parse
from vllm_ascend_balance.replay.pipeline.records import RankStep
from vllm_ascend_balance.replay.pipeline.workload import builtin_requests
from vllm_ascend_balance.replay.sim.build import SimOptions
from vllm_ascend_balance.replay.sim.fleet import simulate
from vllm_ascend_balance.replay.sim.sglang_rounds import batch_cost_ms

# Real schedulers: what a pass schedules differs by release.
pytestmark = pytest.mark.lane_scope("release", "main")

#: One burst at DP 2 with a small token budget: prompts run as several
#: chunks next to decodes, the case both variants change.
REQUESTS = builtin_requests(seed=3, num_bursts=1, burst=(24, 28))
OPTS = SimOptions(dp_size=2, max_num_seqs=8, max_num_batched_tokens=512)
INTERVAL = 2


def _steps(peer: str, **variant: str) -> list[list[RankStep]]:
    result = simulate(False, REQUESTS, replace(OPTS, **variant), peer=peer)
    done = sum(r.finish_step is not None for rs in result.rank_requests for r in rs)
    assert done == len(REQUESTS)
    return result.rank_steps


# ------------------------------------------- item 1: separate passes


def _one_mode_per_pass(rank_steps: list[list[RankStep]]) -> bool:
    """Without ``--enable-mixed-chunk`` a forward pass is an extend batch or
    a decode batch, never both: no rank's step has prefill tokens and
    decoding requests."""
    return not any(
        s.prefill_tokens > 0 and s.decode_requests > 0 for r in rank_steps for s in r
    )


@pytest.mark.parametrize("peer", ["sglang-delayer", f"sglang-pdi:{INTERVAL}"])
def test_prefill_first_runs_one_forward_mode_per_pass(peer: str) -> None:
    """``prefill-first``: a round whose rank runs prefill (a new request or
    a chunk in flight) runs none of its decodes. Control: the default
    (vLLM's mixed batch) mixes them."""
    assert _one_mode_per_pass(_steps(peer, sglang_passes="prefill-first"))
    assert not _one_mode_per_pass(_steps(peer))


def test_prefill_first_applies_to_sglang_peers_only() -> None:
    """The variant is SGLang's scheduling: another peer keeps vLLM's mixed
    batch with the option set."""
    steps = _steps("atom-delayer", sglang_passes="prefill-first")
    assert steps == _steps("atom-delayer")


def test_two_pass_costs_a_prefill_pass_and_a_decode_pass() -> None:
    """``two-pass``: a batch with prefill tokens and decodes costs what a
    prefill-only pass and a decode-only pass cost, each paying the fixed
    cost of a forward pass; a batch of one kind is one pass. Control: the
    default costs the mixed batch as one pass."""
    cost = CostModel()
    mixed = Batch(prefill_tokens=700, decode_requests=5, decode_context_tokens=4000)
    two = cost.rank_cost_ms(700, 0, 0) + cost.rank_cost_ms(0, 5, 4000)
    assert batch_cost_ms(cost, mixed, two_pass=True) == pytest.approx(two)
    assert batch_cost_ms(cost, mixed) != pytest.approx(two)
    for one in (replace(mixed, prefill_tokens=0), replace(mixed, decode_requests=0)):
        assert batch_cost_ms(cost, one, two_pass=True) == batch_cost_ms(cost, one)


# ------------------------------------- item 2: every rank deferred


def _no_prefill_in_deferred_rounds(rank_steps: list[list[RankStep]]) -> bool:
    """``_arm_prefill_decode_interval``: after a round in which any rank ran
    an extend batch (the gathered ``is_extend_in_batch``), the next N
    rounds run no prefill on any rank, chunks in flight included, whatever
    the rank's decodes (``_should_defer_prefill`` has no per-rank test)."""
    rounds = list(zip(*rank_steps, strict=True))
    extended = [any(s.prefill_tokens > 0 for s in r) for r in rounds]
    for k, ext in enumerate(extended):
        if ext and any(extended[k + 1 : k + 1 + INTERVAL]):
            return False
    return any(extended)


def test_every_rank_defers_every_chunk_in_flight() -> None:
    """``every-rank``: a deferred round holds every rank's chunk in flight.
    Control: the default holds chunks through vLLM's prefill throttle,
    which lets a chunk run on a rank without decodes or one whose last
    pass left requests waiting."""
    peer = f"sglang-pdi:{INTERVAL}"
    assert _no_prefill_in_deferred_rounds(_steps(peer, sglang_defer="every-rank"))
    assert not _no_prefill_in_deferred_rounds(_steps(peer))


def test_every_rank_keeps_decodes_running_in_deferred_rounds() -> None:
    """A deferred round skips the prefill batch only: the rank runs its
    decode batch (``update_running_batch``), so decoding requests still
    produce tokens on the rounds after an extend."""
    steps = _steps(f"sglang-pdi:{INTERVAL}", sglang_defer="every-rank")
    rounds = list(zip(*steps, strict=True))
    after_extend = [
        rounds[k + 1]
        for k in range(len(rounds) - 1)
        if any(s.prefill_tokens > 0 for s in rounds[k])
    ]
    assert any(s.decode_requests > 0 for r in after_extend for s in r)


def test_variants_are_refused_on_the_real_engine() -> None:
    """The real engine runs no SGLang variant: a set option is a one-line
    error there, not a silent no-op."""
    for argv in (["--sglang-passes", "two-pass"], ["--sglang-defer", "every-rank"]):
        with pytest.raises(ValueError, match="--engine sim"):
            parse(["--engine", "asyncllm", "--mode", "off,sglang-pdi:4", *argv])
        assert parse(["--engine", "sim", *argv])
