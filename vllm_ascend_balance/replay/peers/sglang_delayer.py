# SPDX-License-Identifier: Apache-2.0
"""SGLang's cross-DP ``PrefillDelayer`` (``--enable-prefill-delayer``).

Rule, from ``python/sglang/srt/managers/prefill_delayer.py``
(``PrefillDelayer._negotiate_should_allow_prefill_pure``) and the merged
changes to it: the starvation fix sgl-project/sglang#32880 (the "all
prefillable" delay bounded by the same pass limit) and #34284 (the slot
condition's ``max_prefill_bs`` over the last 16 prefill attempts). Each pass
every DP rank all-gathers whether it is *prefillable* (it has a request it
could admit, or is continuing a chunked prefill, as the newer
``add_chunked_req`` reports) and whether it is under the token-usage low
watermark. Then, on every rank alike:

- none prefillable: allow;
- a prefillable rank under the watermark: allow (``token_watermark``);
- mixed: deny while fewer than ``max_delay_passes - 1`` passes were denied
  in a row, then allow (``wait_timeout``);
- all prefillable: deny (same bound) only while the fullest rank has fewer
  free slots than the largest recent prefill batch (the slot condition;
  the first such delay of the process is let through, SGLang's
  ``skip_first_delayer``), else allow.

A deny means no rank admits a new request this pass; in-flight chunked
prefills continue (``add_chunked_req`` runs before the waiting loop). Every
allow resets the counter. Not modelled: the queue-ratio trigger
(``--prefill-delayer-queue-min-ratio``, off by default) and the wall-clock
bound that goes with it.

``--mode sglang-delayer[:N[:W]]``: N = ``--prefill-delayer-max-delay-passes``
(default 30), W = ``--prefill-delayer-token-usage-low-watermark`` in per
cent (default 0: off, never undercut).
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_ascend_balance.replay.peers.base import (
    UNBOUNDED,
    PeerPolicy,
    RankState,
    parse_ints,
)

DEFAULT_MAX_DELAY_PASSES = 30


def prefillable(state: RankState) -> bool:
    """SGLang's per-rank flag: a request the rank could admit now, or a
    chunked prefill in flight."""
    return state.can_admit or state.prefilling > 0


class SGLangPrefillDelayer(PeerPolicy):
    name = "sglang-delayer"
    source = "sgl-project/sglang prefill_delayer.py (+ #32880, #34284)"
    usage = "sglang-delayer[:MAX_DELAY_PASSES[:LOW_WATERMARK_PERCENT]]"

    def __init__(self, params: str = "") -> None:
        # A watermark of 0 % is never undercut: the default, "off".
        self.max_delay_passes, watermark = parse_ints(
            params,
            type(self),
            [
                ("MAX_DELAY_PASSES", 1, UNBOUNDED, DEFAULT_MAX_DELAY_PASSES),
                ("LOW_WATERMARK_PERCENT", 0, 100, 0),
            ],
        )
        self.watermark_permille = 10 * watermark
        self.delayed = 0
        self.skip_first_delay = True

    def _delay_or_allow(self) -> bool:
        if self.delayed < self.max_delay_passes - 1:
            self.delayed += 1
            return True
        self.delayed = 0
        return False

    def _hold(self, gathered: Sequence[RankState]) -> bool:
        flags = [prefillable(s) for s in gathered]
        if not any(flags):
            self.delayed = 0
            return False
        wm = self.watermark_permille
        if any(
            f and s.kv_usage_permille < wm for f, s in zip(flags, gathered, strict=True)
        ):
            self.delayed = 0
            return False
        if not all(flags):
            return self._delay_or_allow()
        free = max(s.cap for s in gathered) - max(s.running for s in gathered)
        if free < max(s.max_prefill_batch_recent for s in gathered):
            if self.skip_first_delay:
                self.skip_first_delay = False
                self.delayed = 0
                return False
            return self._delay_or_allow()
        self.delayed = 0
        return False

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        return (self._hold(gathered),) * len(gathered)
