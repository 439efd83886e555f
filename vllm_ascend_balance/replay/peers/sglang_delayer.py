# SPDX-License-Identifier: Apache-2.0
"""SGLang's cross-DP ``PrefillDelayer`` (``--enable-prefill-delayer``) and
its prefill/decode interval (``--prefill-decode-interval``).

**The delayer**, from ``python/sglang/srt/managers/prefill_delayer.py``
(``PrefillDelayer._negotiate_should_allow_prefill_pure``), the newest
stored version: seven gathered fields, the ``RecentPrefillBatchSizeTracker``
of sgl-project/sglang#34284, both deny cases bounded by the pass limit
(#32880), the negotiation after the KV and token-budget admission checks
(#31835). Each pass every DP rank all-gathers whether it is *prefillable*
(its head request passed those checks, :attr:`RankState.can_admit`, or it
continues a chunked prefill), whether it is under the token-usage low
watermark, its running count, its recent largest prefill attempt, its queue
length and its elapsed wait. Then, on every rank alike:

- none prefillable: allow;
- a prefillable rank under the watermark: allow (``token_watermark``);
- mixed: deny while fewer than ``max_delay_passes - 1`` passes were denied
  in a row, then allow (``wait_timeout``);
- all prefillable: deny (same bound) while the *slot condition* holds (the
  fullest rank has fewer free slots than the largest recent prefill
  attempt) or the opt-in *queue condition* holds (the longest queue is
  shorter than ``min(int(max running * ratio), largest attempt)``, until the
  smallest gathered elapsed wait reaches ``max_delay_ms``); the first such
  delay of the process is let through (``skip_first_delayer``); else allow.

A deny means no rank admits a new request this pass; in-flight chunked
prefills continue (``add_chunked_req`` runs before the waiting loop). Every
allow resets the counter and the wait clock. Not modelled: the idle-engine
coalescing (``--enable-prefill-idle-coalescing``, off by default) and
``--prefill-max-requests`` (unset by default).

**The interval**, from ``Scheduler._should_defer_prefill`` and
``_arm_prefill_decode_interval`` in ``python/sglang/srt/managers/scheduler.py``
(sgl-project/sglang#35017): after any extend batch (under DP attention the
gathered ``is_extend_in_batch``, so one flag for every rank) no prefill for
N rounds, chunk continuations included; a deferred round skips
``get_new_batch_prefill``, so the delayer does not negotiate in it.

``--mode sglang-delayer[:N[:W[:Q[:MS[:PDI[:WIN]]]]]]``: N =
``max_delay_passes`` (default 30), W = token-usage low watermark in per
cent (default 0: off), Q = ``--prefill-delayer-queue-min-ratio`` in per
cent (default 0: off), MS = ``--prefill-delayer-max-delay-ms`` (default
5000), PDI = ``--prefill-decode-interval`` (default 0: off), WIN =
``SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE`` (default 16).
``--mode sglang-pdi:PDI``: the interval without the delayer.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_ascend_balance.replay.peers.base import (
    RECENT_PREFILL_BATCHES,
    UNBOUNDED,
    PeerPolicy,
    PolicyError,
    RankState,
    parse_ints,
)

DEFAULT_MAX_DELAY_PASSES = 30
DEFAULT_MAX_DELAY_MS = 5000


def prefillable(state: RankState) -> bool:
    """SGLang's per-rank flag: a request the rank could admit now, or a
    chunked prefill in flight."""
    return state.can_admit or state.prefilling > 0


class SGLangPrefillDelayer(PeerPolicy):
    name = "sglang-delayer"
    source = (
        "sgl-project/sglang prefill_delayer.py (+ #31835, #32880, #34284), "
        "scheduler.py _should_defer_prefill (#35017)"
    )
    usage = "sglang-delayer[:N[:WATERMARK%[:QUEUE%[:MAX_DELAY_MS[:PDI[:WINDOW]]]]]]"
    delayer = True

    def __init__(self, params: str = "") -> None:
        # A watermark or queue ratio of 0 % is never met: the defaults, "off".
        (
            self.max_delay_passes,
            watermark,
            queue_ratio,
            self.max_delay_ms,
            self.interval,
            self.prefill_bs_window,
        ) = parse_ints(
            params,
            type(self),
            [
                ("N (max delay passes)", 1, UNBOUNDED, DEFAULT_MAX_DELAY_PASSES),
                ("WATERMARK%", 0, 100, 0),
                ("QUEUE_RATIO%", 0, UNBOUNDED, 0),
                ("MAX_DELAY_MS", 1, UNBOUNDED, DEFAULT_MAX_DELAY_MS),
                ("PDI (prefill-decode interval)", 0, UNBOUNDED, 0),
                ("WINDOW", 1, UNBOUNDED, RECENT_PREFILL_BATCHES),
            ],
        )
        self.watermark_permille = 10 * watermark
        self.queue_ratio_percent = queue_ratio
        self.delayed = 0
        # Each rank's clock (ms) when the delay began: every rank reports
        # its own elapsed wait and the smallest is used.
        self.wait_start_ms: tuple[int, ...] | None = None
        self.skip_first_delay = True
        self.interval_left = 0
        self.deferring = False

    def _allow(self) -> bool:
        self.delayed = 0
        self.wait_start_ms = None
        return False

    def _delay_or_allow(self, gathered: Sequence[RankState]) -> bool:
        if self.delayed < self.max_delay_passes - 1:
            self.delayed += 1
            if self.wait_start_ms is None:
                self.wait_start_ms = tuple(s.clock_ms for s in gathered)
            return True
        return self._allow()

    def _waited_ms(self, gathered: Sequence[RankState]) -> int:
        """The smallest of the ranks' elapsed waits (0 before a delay)."""
        if self.wait_start_ms is None:
            return 0
        return min(
            s.clock_ms - t0 for s, t0 in zip(gathered, self.wait_start_ms, strict=True)
        )

    def _queue_condition(self, gathered: Sequence[RankState]) -> bool:
        running = max(s.running for s in gathered)
        if not self.queue_ratio_percent or running == 0:
            return False
        largest = max(s.max_prefill_batch_recent for s in gathered)
        queue_min = min(running * self.queue_ratio_percent // 100, largest)
        if queue_min <= 0 or max(s.waiting for s in gathered) >= queue_min:
            return False
        return self._waited_ms(gathered) < self.max_delay_ms

    def _negotiate(self, gathered: Sequence[RankState]) -> bool:
        flags = [prefillable(s) for s in gathered]
        if not any(flags):
            return self._allow()
        wm = self.watermark_permille
        if any(
            f and s.kv_usage_permille < wm for f, s in zip(flags, gathered, strict=True)
        ):
            return self._allow()
        if not all(flags):
            return self._delay_or_allow(gathered)
        free = max(s.cap for s in gathered) - max(s.running for s in gathered)
        slot = free < max(s.max_prefill_batch_recent for s in gathered)
        if slot or self._queue_condition(gathered):
            if self.skip_first_delay:
                self.skip_first_delay = False
                return self._allow()
            return self._delay_or_allow(gathered)
        return self._allow()

    def _defer(self, gathered: Sequence[RankState]) -> bool:
        """``_arm_prefill_decode_interval`` after the last batch, then
        ``_should_defer_prefill`` for this round."""
        if self.interval and any(s.extended for s in gathered):
            self.interval_left = self.interval
        if self.interval_left == 0:
            return False
        self.interval_left -= 1
        return True

    def _hold(self, gathered: Sequence[RankState]) -> bool:
        self.deferring = self._defer(gathered)
        if self.deferring:
            return True
        return self.delayer and self._negotiate(gathered)

    def holds_chunks(self) -> bool:
        return self.deferring

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        return (self._hold(gathered),) * len(gathered)


class SGLangPrefillDecodeInterval(SGLangPrefillDelayer):
    """``--prefill-decode-interval N`` alone (no ``--enable-prefill-delayer``)."""

    name = "sglang-pdi"
    source = "sgl-project/sglang scheduler.py _should_defer_prefill (#35017)"
    usage = "sglang-pdi:PDI"
    delayer = False

    def __init__(self, params: str = "") -> None:
        if not params:
            raise PolicyError(
                f"--mode {self.name}: the interval is required, e.g. {self.name}:4 "
                f"(SGLang's default 0 is off: use off)"
            )
        (interval,) = parse_ints(
            params, type(self), [("PDI (prefill-decode interval)", 1, UNBOUNDED, 0)]
        )
        super().__init__(
            f"{DEFAULT_MAX_DELAY_PASSES}:0:0:{DEFAULT_MAX_DELAY_MS}:{interval}"
        )
