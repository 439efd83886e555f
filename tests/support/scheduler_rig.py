# SPDX-License-Identifier: Apache-2.0
"""One real vLLM scheduler driven through a generated workload, for the
gate's property tests.

A :class:`Rig` holds one real ``Scheduler`` or ``AsyncScheduler`` (of a
gated class or upstream's own), adds the :class:`Scenario`'s requests at
their arrival steps and runs a step as the engine does: ``schedule()``
(throttled where the gate asks, :meth:`Rig.throttles`), then
``update_from_output`` with the suite's fake model
(:func:`~tests.support.model_outputs.fake_model_output`).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from tests.support.model_outputs import fake_model_output
from tests.support.vllm_objects import make_request, make_scheduler
from vllm_ascend_balance.gate.scheduler import admission_cap

BASES = (Scheduler, AsyncScheduler)
BLOCK_SIZE = 8

#: ``(arrival_step, prompt_len, max_tokens)``.
Req = tuple[int, int, int]


@functools.cache
def takes_throttle() -> bool:
    """The installed ``Scheduler.schedule`` takes ``throttle_prefills``."""
    return "throttle_prefills" in inspect.signature(Scheduler.schedule).parameters


@dataclass(frozen=True)
class Scenario:
    """A generated workload. ``requests[i] = (arrival_step, prompt_len,
    max_tokens)``; ``horizon`` steps are run."""

    base: type
    cap: int
    num_blocks: int
    budget: int
    horizon: int
    requests: tuple[Req, ...]


@st.composite
def scenarios(draw: st.DrawFn, min_horizon: int = 1, max_horizon: int = 12) -> Scenario:
    horizon = draw(st.integers(min_horizon, max_horizon))
    n = draw(st.integers(1, 12))
    requests = tuple(
        (
            draw(st.integers(0, horizon - 1)),
            draw(st.integers(1, 56)),
            draw(st.integers(1, 24)),
        )
        for _ in range(n)
    )
    return Scenario(
        base=draw(st.sampled_from(BASES)),
        cap=draw(st.integers(1, 6)),
        # 8-token blocks: 10 blocks hold the longest request (56 + 24 tokens),
        # few requests at once, so decodes run out of blocks and upstream
        # preempts.
        num_blocks=draw(st.one_of(st.integers(10, 16), st.integers(10, 40))),
        budget=draw(st.sampled_from([32, 64, 128, 256])),
        horizon=horizon,
        requests=requests,
    )


def normalize(output: Any) -> dict[str, Any]:
    """The parts of a ``SchedulerOutput`` that say what was scheduled."""
    cached = output.scheduled_cached_reqs

    def blocks(block_ids: Any) -> Any:
        return None if block_ids is None else tuple(tuple(b) for b in block_ids)

    return {
        "new": [
            (r.req_id, r.num_computed_tokens, blocks(r.block_ids))
            for r in output.scheduled_new_reqs
        ],
        "cached": [
            (req_id, computed, blocks(new_blocks))
            for req_id, computed, new_blocks in zip(
                cached.req_ids,
                cached.num_computed_tokens,
                cached.new_block_ids,
                strict=True,
            )
        ],
        "resumed": sorted(getattr(cached, "resumed_req_ids", ()) or ()),
        "num_scheduled_tokens": dict(output.num_scheduled_tokens),
        "total": output.total_num_scheduled_tokens,
        "preempted": sorted(output.preempted_req_ids or ()),
        "finished": sorted(output.finished_req_ids),
    }


class Rig:
    """One real scheduler of class ``cls`` driven through a scenario; its
    requests are named ``{prefix}{i}``."""

    def __init__(self, cls: type, scenario: Scenario, prefix: str = "req-") -> None:
        self.scenario = scenario
        self.prefix = prefix
        self.scheduler: Any = make_scheduler(
            cls,
            max_num_seqs=scenario.cap,
            num_blocks=scenario.num_blocks,
            max_num_batched_tokens=scenario.budget,
            block_size=BLOCK_SIZE,
        )
        assert admission_cap(self.scheduler) == scenario.cap

    def add(self, req_id: str, prompt_len: int, max_tokens: int) -> None:
        self.scheduler.add_request(
            make_request(req_id, prompt_len, max_tokens, BLOCK_SIZE)
        )

    def arrive(self, step: int) -> list[str]:
        """Add the requests arriving at ``step``; their ids."""
        added = []
        for i, (arrival, prompt_len, max_tokens) in enumerate(self.scenario.requests):
            if arrival == step:
                added.append(f"{self.prefix}{i}")
                self.add(added[-1], prompt_len, max_tokens)
        return added

    def throttles(self) -> bool:
        """As the engine hook asks (``wiring/throttle_hook.py``): a gated
        class says whether this step defers chunks, where the installed
        ``schedule()`` can."""
        asks = getattr(self.scheduler, "balance_throttles", None)
        return asks is not None and takes_throttle() and bool(asks())

    def run(self, step: int, throttle: bool) -> Any:
        """One ``schedule()`` (throttled or not) and its model output; the
        ``SchedulerOutput``."""
        sched = self.scheduler
        output = (
            sched.schedule(throttle_prefills=True) if throttle else sched.schedule()
        )
        sched.update_from_output(output, fake_model_output(sched, output, step))
        return output

    def schedule(self, step: int) -> dict[str, Any]:
        output = self.run(step, self.throttles())
        return normalize(output)

    def step(self, step: int) -> dict[str, Any]:
        self.arrive(step)
        return self.schedule(step)

    def queued(self) -> dict[str, RequestStatus]:
        """Status of every known request that is not running."""
        running = {r.request_id for r in self.scheduler.running}
        return {
            req_id: req.status
            for req_id, req in self.scheduler.requests.items()
            if req_id not in running and not req.is_finished()
        }


@st.composite
def counts_near(draw: st.DrawFn, cap: int, size: int, top: int) -> list[int]:
    """``size`` running counts in ``[0, top]``, biased to the interesting
    values ``cap`` and ``cap - 1``."""
    value = st.one_of(
        st.just(min(cap, top)), st.just(max(min(cap - 1, top), 0)), st.integers(0, top)
    )
    return draw(st.lists(value, min_size=size, max_size=size))


def hypothesis_settings(max_examples: int, negative: bool) -> settings:
    """Positive runs explore randomly; negative controls are derandomized and
    skip shrinking (only that they fail matters)."""
    return settings(
        max_examples=max_examples * (4 if negative else 1),
        deadline=None,
        database=None,
        derandomize=negative,
        phases=(Phase.explicit, Phase.generate) if negative else tuple(Phase),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
