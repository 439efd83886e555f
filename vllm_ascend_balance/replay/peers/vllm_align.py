# SPDX-License-Identifier: Apache-2.0
"""vLLM's proposed adaptive prefill alignment (vllm-project/vllm#51199).

Rule, from the PR's ``vllm/v1/engine/prefill_alignment.py``
(``PrefillAlignmentCoordinator``) and its ``schedule(throttle_prefills)``
changes: prefill is throttled by default on every rank; each step every
rank reports its previous pass (did it defer prefill work, did its last
admitting pass leave requests waiting, ``len(running)``, its largest
prefill batch so far) to the DP coordinator, which decides from all ranks'
reports and releases one unthrottled pass, applied ``target_step_lead``
steps later on every rank:

- no rank deferred: nothing to release (the delay counter resets);
- a rank left requests waiting on its last admitting pass: release
  (``capacity_force_allow``);
- some but not all ranks deferred: delay or release;
- all deferred: release unless the fullest rank has fewer free slots than
  the largest prefill batch seen (the first such delay is let through),
  else delay or release;
- delay or release: count a delay; the ``max_delay_passes``-th one, or one
  MS (5 s) after the first, releases instead (fail-open; read from the
  gathered maximum of the ranks' clocks).

While a release is pending no new decision is made. The PR exchanges the
reports through the coordinator process, not a collective; here the same
decision is made from the gathered reports. A throttled pass also holds
in-flight chunked prefills (``holds_in_flight_chunks``). Not modelled: the
re-send and missing-rank timers (no rank is lost in the simulation).

The reports reach the coordinator after a pass, so every decision here is
made on the state gathered at the end of the previous step
(:attr:`sees_previous_step`), not on the state after this step's arrivals.

``--mode vllm-align[:D[:L[:MS]]]``: D = ``--prefill-alignment-max-delay-passes``
(default 30), L = ``--prefill-alignment-target-step-lead`` (default 2), MS =
the fail-open wall-clock bound in ms (the PR's constant, 5000).
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_ascend_balance.replay.peers.base import (
    UNBOUNDED,
    PeerPolicy,
    RankState,
    gathered_clock_s,
    parse_ints,
)

DEFAULT_MAX_DELAY_PASSES = 30
DEFAULT_TARGET_STEP_LEAD = 2
DEFAULT_MAX_DELAY_MS = 5000


class VllmPrefillAlignment(PeerPolicy):
    name = "vllm-align"
    source = "vllm-project/vllm#51199 vllm/v1/engine/prefill_alignment.py"
    usage = "vllm-align[:MAX_DELAY_PASSES[:TARGET_STEP_LEAD[:MAX_DELAY_MS]]]"
    holds_in_flight_chunks = True
    sees_previous_step = True

    def __init__(self, params: str = "") -> None:
        self.max_delay_passes, self.lead, self.max_delay_ms = parse_ints(
            params,
            type(self),
            [
                ("MAX_DELAY_PASSES", 1, UNBOUNDED, DEFAULT_MAX_DELAY_PASSES),
                ("TARGET_STEP_LEAD", 0, UNBOUNDED, DEFAULT_TARGET_STEP_LEAD),
                ("MAX_DELAY_MS", 1, UNBOUNDED, DEFAULT_MAX_DELAY_MS),
            ],
        )
        self.step = 0
        self.release_at: int | None = None
        self.delayed = 0
        self.first_delay_s: float | None = None
        self.skip_first_delay = True

    def _release(self) -> None:
        self.release_at = self.step + self.lead
        self.delayed = 0
        self.first_delay_s = None

    def _delay_or_release(self, now_s: float) -> None:
        if self.first_delay_s is None:
            self.first_delay_s = now_s
        self.delayed += 1
        if (
            self.delayed >= self.max_delay_passes
            or 1000.0 * (now_s - self.first_delay_s) >= self.max_delay_ms
        ):
            self._release()

    def _coordinate(self, gathered: Sequence[RankState], now_s: float) -> None:
        deferred = sum(s.deferred for s in gathered)
        if deferred == 0:
            self.delayed = 0
            self.first_delay_s = None
        elif any(s.capacity_bound for s in gathered):
            self._release()
        elif deferred < len(gathered):
            self._delay_or_release(now_s)
        else:
            free = max(s.cap for s in gathered) - max(s.running for s in gathered)
            if free < max(s.max_prefill_batch_ever for s in gathered):
                if self.skip_first_delay:
                    self.skip_first_delay = False
                    self._release()
                else:
                    self._delay_or_release(now_s)
            else:
                self._release()

    def _hold(self, gathered: Sequence[RankState], now_s: float) -> bool:
        if self.release_at is None:
            self._coordinate(gathered, now_s)
        if self.release_at is not None and self.step >= self.release_at:
            self.release_at = None  # applied now; the next report acknowledges it
            return False
        return True

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        hold = self._hold(gathered, gathered_clock_s(gathered))
        self.step += 1
        return (hold,) * len(gathered)
