# SPDX-License-Identifier: Apache-2.0
"""ROCm ATOM's cross-DP ``PrefillDelayer`` as merged in ROCm/ATOM#930.

Rule, from ``atom/model_engine/prefill_delayer.py`` (``should_allow_prefill``)
and its call at the top of ``Scheduler.schedule`` in
``atom/model_engine/scheduler.py``: every step each DP rank all-reduces
(MAX) whether its head waiting request can be admitted (it fits the KV
cache; the running cap is not part of the check), whether it cannot, and
whether it is prefillable under the token-usage low watermark. Then:

- a prefillable rank under the watermark: allow;
- the first decision of the process: allow;
- all or none prefillable: allow;
- mixed: deny while fewer than ``max_delay_passes`` passes were denied in a
  row and less than ``max_delay_ms`` passed since the first of them, then
  allow (fail-open).

A deny skips the prefill admission loop on every rank (ATOM#930 has no
chunked prefill, so there are no chunks in flight to hold). Every allow
resets the counter. The rewrite in ATOM#1611 (a fill-based coalescer) is a
different policy and is not modelled.

``--mode atom-delayer[:N[:MS]]``: N = ``ATOM_PREFILL_DELAYER_MAX_DELAY_PASSES``
(default 30), MS = ``ATOM_PREFILL_DELAYER_MAX_DELAY_MS`` (default 5000).
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_ascend_balance.replay.peers.base import PeerPolicy, RankState, parse_ints

DEFAULT_MAX_DELAY_PASSES = 30
DEFAULT_MAX_DELAY_MS = 5000


class AtomPrefillDelayer(PeerPolicy):
    name = "atom-delayer"
    source = "ROCm/ATOM#930 atom/model_engine/prefill_delayer.py"
    usage = "atom-delayer[:MAX_DELAY_PASSES[:MAX_DELAY_MS]]"

    def __init__(self, params: str = "") -> None:
        values = parse_ints(params, type(self), 2)
        self.max_delay_passes = values[0] if values else DEFAULT_MAX_DELAY_PASSES
        self.max_delay_ms = values[1] if len(values) > 1 else DEFAULT_MAX_DELAY_MS
        self.delayed = 0
        self.first_delay_s = 0.0
        self.skip_first = True

    def _hold(self, gathered: Sequence[RankState], now_s: float) -> bool:
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

    def decide(self, gathered: Sequence[RankState], now_s: float) -> tuple[bool, ...]:
        return (self._hold(gathered, now_s),) * len(gathered)
