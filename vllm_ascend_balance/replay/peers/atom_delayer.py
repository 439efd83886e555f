# SPDX-License-Identifier: Apache-2.0
"""ROCm ATOM's cross-DP ``PrefillDelayer`` as merged in ROCm/ATOM#930.

Rule, from ``atom/model_engine/prefill_delayer.py`` (``should_allow_prefill``)
and its call at the top of ``Scheduler.schedule`` in
``atom/model_engine/scheduler.py``: every step each DP rank all-reduces
(MAX) whether its head waiting request can be admitted (it fits the KV
cache, which the simulation always sizes for it; the running cap is not
part of the check) and whether it cannot (an empty queue counts as
cannot). Then:

- the first decision of the process: allow;
- all or none prefillable: allow;
- mixed: deny while fewer than ``max_delay_passes`` passes were denied in a
  row and less than ``max_delay_ms`` passed since the first of them, then
  allow (fail-open).

The elapsed time is read from the gathered maximum of the ranks' clocks:
ATOM#930 read each rank's own clock, which can split the ranks' decision
when clocks skew (ATOM's later rewrite says so and removed it). Not
modelled: the token-usage low watermark (off by default).

A deny skips the prefill admission loop on every rank (ATOM#930 has no
chunked prefill, so there are no chunks in flight to hold). Every allow
resets the counter. The rewrite in ATOM#1611 (a fill-based coalescer) is a
different policy and is not modelled.

``--mode atom-delayer[:N[:MS]]``: N = ``ATOM_PREFILL_DELAYER_MAX_DELAY_PASSES``
(default 30), MS = ``ATOM_PREFILL_DELAYER_MAX_DELAY_MS`` (default 5000).
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
DEFAULT_MAX_DELAY_MS = 5000


class AtomPrefillDelayer(PeerPolicy):
    name = "atom-delayer"
    source = "ROCm/ATOM#930 atom/model_engine/prefill_delayer.py"
    usage = "atom-delayer[:MAX_DELAY_PASSES[:MAX_DELAY_MS]]"

    def __init__(self, params: str = "") -> None:
        self.max_delay_passes, self.max_delay_ms = parse_ints(
            params,
            type(self),
            [
                ("MAX_DELAY_PASSES", 1, UNBOUNDED, DEFAULT_MAX_DELAY_PASSES),
                ("MAX_DELAY_MS", 1, UNBOUNDED, DEFAULT_MAX_DELAY_MS),
            ],
        )
        self.delayed = 0
        self.first_delay_s = 0.0
        self.skip_first = True

    def _hold(self, gathered: Sequence[RankState]) -> bool:
        now_s = gathered_clock_s(gathered)
        flags = [s.waiting > 0 for s in gathered]
        if self.skip_first or all(flags) or not any(flags):
            self.skip_first = False
            self.delayed = 0
            return False
        if self.delayed == 0:
            self.first_delay_s = now_s
        elapsed_ms = 1000.0 * (now_s - self.first_delay_s)
        if self.delayed < self.max_delay_passes and elapsed_ms < self.max_delay_ms:
            self.delayed += 1
            return True
        self.delayed = 0
        return False

    def decide(self, gathered: Sequence[RankState]) -> tuple[bool, ...]:
        return (self._hold(gathered),) * len(gathered)
