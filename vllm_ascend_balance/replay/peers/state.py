# SPDX-License-Identifier: Apache-2.0
"""What a rank contributes to a peer policy's gather (:class:`RankState`),
how it is read off a real vLLM ``Scheduler`` (:func:`rank_state`), and what a
rank remembers of its own passes (:class:`PassHistory`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: SGLang's ``SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE`` default.
RECENT_PREFILL_BATCHES = 16


@dataclass(frozen=True)
class RankState:
    """What one DP rank contributes to a peer policy's gather.

    Attributes:
        waiting: ``len(scheduler.waiting)``: requests not yet admitted.
        running: ``len(scheduler.running)``.
        cap: the rank's running cap (``max_num_running_reqs``).
        prefilling: running requests whose prompt is not fully computed
            (in-flight chunked prefills).
        kv_usage_permille: KV cache blocks in use, per mille (an integer so
            every rank compares exactly the same numbers).
        max_prefill_batch_recent: the largest prefill attempt over the last
            window of attempts (SGLang's ``RecentPrefillBatchSizeTracker``:
            an admitting pass counts what it admitted, a prefillable pass
            that admitted nothing counts SGLang's estimate, see
            :meth:`PassHistory.observe`).
        max_prefill_batch_ever: the most new requests one pass admitted over
            the whole run (vLLM PR #51199's ``max_prefill_batch``).
        deferred: the rank's previous ``schedule()`` was held while it had
            prefill work (a waiting request or an in-flight chunk).
        capacity_bound: the last ``schedule()`` that was not held left
            requests waiting (vLLM's ``prefill_capacity_bound``).
        clock_ms: the rank's clock in milliseconds when it contributed (for
            wall-clock bounds: policies read :func:`gathered_clock_s`).
        fits: how many waiting requests the rank's ``schedule()`` would
            admit now, after its running cap, its token budget and its free
            KV blocks (:func:`admissible_now`); None: not known, then only
            the waiting count and the cap bound it (hand-written states).
        extended: the rank's previous pass scheduled prefill tokens (a new
            request or a chunk): SGLang's "extend batch".
    """

    waiting: int
    running: int
    cap: int
    prefilling: int = 0
    kv_usage_permille: int = 0
    max_prefill_batch_recent: int = 0
    max_prefill_batch_ever: int = 0
    deferred: bool = False
    capacity_bound: bool = False
    clock_ms: int = 0
    fits: int | None = None
    extended: bool = False

    @property
    def admissible(self) -> int:
        """New requests the rank can take this step (see :attr:`fits`)."""
        slots = min(self.waiting, max(0, self.cap - self.running))
        return slots if self.fits is None else min(slots, self.fits)

    @property
    def can_admit(self) -> bool:
        """The rank's head request passes its admission checks (slots, token
        budget, KV blocks): what SGLang calls prefillable since it
        negotiates after those checks (sgl-project/sglang#31835)."""
        return self.admissible > 0


def _prefilling(scheduler: Any) -> int:
    return sum(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running)


def _long_prefill_threshold(scheduler: Any) -> int:
    config = getattr(scheduler, "scheduler_config", None)
    return int(getattr(config, "long_prefill_token_threshold", 0) or 0)


def _running_loop(
    scheduler: Any, kv: Any, block: int, max_model_len: int | None
) -> tuple[int, int] | None:
    """The token budget left and the KV blocks taken by ``schedule()``'s
    running loop (vLLM ``Scheduler.schedule()``: each running request in
    order while budget remains, its new tokens capped by the budget, the
    long-prefill threshold and ``max_model_len``; ``allocate_slots`` without
    the watermark). None: the blocks do not fit, so vLLM would preempt."""
    budget = int(scheduler.max_num_scheduled_tokens)
    threshold = _long_prefill_threshold(scheduler)
    lookahead = int(getattr(scheduler, "num_lookahead_tokens", 0) or 0)
    free = kv.block_pool.get_num_free_blocks()
    grown = 0
    for req in scheduler.running:
        if budget <= 0:
            break
        computed = req.num_computed_tokens
        n = (
            getattr(req, "num_tokens_with_spec", req.num_tokens)
            + getattr(req, "num_output_placeholders", 0)
            - computed
        )
        if 0 < threshold < n:
            n = threshold
        n = min(n, budget)
        if max_model_len is not None:
            n = min(n, max_model_len - computed)
        if n <= 0:
            continue
        end = computed + n + lookahead
        if max_model_len is not None:
            end = min(end, max_model_len)
        held = len(kv.get_block_ids(req.request_id)[0])
        need = max(0, -(-end // block) - held)
        if grown + need > free:
            return None
        grown += need
        budget -= n
    return budget, grown


def admissible_now(scheduler: Any) -> int:
    """How many waiting requests vLLM's ``Scheduler.schedule()`` would admit
    if it ran now: the running requests take the token budget first (one
    token per decode, the rest of the budget for a chunk), then waiting
    requests in queue order while a slot, budget and KV blocks remain (stops
    at the first that does not fit, as ``schedule()``'s waiting loop does).

    A request takes the blocks of its first chunk; where the scheduler
    reserves the whole sequence at admission (``scheduler_reserve_full_isl``,
    on by default in every vLLM the lanes pin, 0.23.0 to 0.32.0:
    ``KVCacheManager.allocate_slots(..., full_sequence_must_fit=True)``) it
    is admitted only if the blocks of all its tokens (up to
    ``max_model_len``) are free, with the KV watermark once a request is
    running. Prefix caching is off in the simulation, so every block of a
    new request is a new block. The running loop goes first and takes the
    blocks its chunks and decodes cross into; where they do not fit, vLLM
    preempts, and a step that preempted admits nothing (``if not
    preempted_reqs`` before the waiting loop), so the count is 0.

    Returns:
        The number of requests at the head of ``scheduler.waiting`` that
        ``schedule()`` would admit (0 or more).
    """
    kv = scheduler.kv_cache_manager
    block = int(scheduler.block_size)
    max_model_len = int(getattr(scheduler, "max_model_len", 0)) or None
    taken = _running_loop(scheduler, kv, block, max_model_len)
    if taken is None:
        return 0
    budget, grown = taken
    slots = int(scheduler.max_num_running_reqs) - len(scheduler.running)
    free = kv.block_pool.get_num_free_blocks() - grown
    full_isl = bool(getattr(scheduler, "scheduler_reserve_full_isl", False))
    watermark = int(getattr(kv, "watermark_blocks", 0))
    threshold = _long_prefill_threshold(scheduler)
    count = 0
    for req in scheduler.waiting:
        if count >= slots or budget <= 0:
            break
        # vLLM applies the watermark only with a request scheduled already.
        headroom = watermark if (scheduler.running or count) else 0
        if full_isl:
            tokens = req.num_tokens
            if max_model_len is not None:
                tokens = min(tokens, max_model_len)
            if -(-tokens // block) + headroom > free:
                break
        n = req.num_tokens - req.num_computed_tokens  # a resumed one replays outputs
        if 0 < threshold < n:
            n = threshold
        n = min(n, budget)
        blocks = -(-(req.num_computed_tokens + n) // block)
        if blocks + headroom > free:
            break
        free -= blocks
        budget -= n
        count += 1
    return count


def sglang_attempt_estimate(state: RankState) -> int:
    """SGLang's size of a prefillable pass that admitted nothing
    (``PrefillDelayerSinglePassExecutor._estimate_attempted_prefill_bs``,
    sgl-project/sglang#34284): ``min(max(waiting, 1), max(cap - running, 1))``."""
    return min(max(state.waiting, 1), max(state.cap - state.running, 1))


@dataclass
class PassHistory:
    """What a rank remembers of its own ``schedule()`` passes for
    :class:`RankState` (kept by the engine, updated by :meth:`observe`).

    Args:
        window: SGLang's prefill-attempt window
            (``SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE``).
    """

    window: int = RECENT_PREFILL_BATCHES
    recent: deque[int] = field(init=False)
    ever: int = 0
    deferred: bool = False
    capacity_bound: bool = False
    extended: bool = False

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.window)

    def before(self, scheduler: Any, chunks_held: bool) -> bool:
        """Whether a hold defers prefill work on the rank (call just before
        ``schedule()``): a waiting request, or an in-flight chunk where the
        hold also throttles chunks (``chunks_held``)."""
        if scheduler.waiting:
            return True
        return chunks_held and _prefilling(scheduler) > 0

    def observe(
        self,
        held: bool,
        had_prefill_work: bool,
        admitted: int,
        waiting_after: int,
        *,
        attempted: RankState | None = None,
        extended: bool = False,
    ) -> None:
        """Record one pass: ``admitted`` new requests were scheduled,
        ``waiting_after`` remain waiting; ``attempted``: the rank's gathered
        state when it was prefillable this pass (SGLang then records a pass
        that admitted nothing with :func:`sglang_attempt_estimate`, since
        sgl-project/sglang#34284); ``extended``: the pass scheduled prefill
        tokens."""
        if admitted:
            self.recent.append(admitted)
            self.ever = max(self.ever, admitted)
        elif attempted is not None and attempted.can_admit:
            self.recent.append(sglang_attempt_estimate(attempted))
        self.deferred = held and had_prefill_work
        self.extended = extended
        if not held:
            self.capacity_bound = waiting_after > 0


def gathered_clock_s(gathered: Sequence[RankState]) -> float:
    """The gathered maximum of the ranks' clocks, in seconds: the same on
    every rank, whatever the skew between their local clocks."""
    return max(s.clock_ms for s in gathered) / 1000.0


def rank_state(
    scheduler: Any, history: PassHistory | None = None, clock_s: float = 0.0
) -> RankState:
    """The :class:`RankState` of a real vLLM ``Scheduler`` at the rank's
    clock ``clock_s`` (seconds)."""
    h = history or PassHistory()
    return RankState(
        waiting=len(scheduler.waiting),
        running=len(scheduler.running),
        cap=int(scheduler.max_num_running_reqs),
        prefilling=_prefilling(scheduler),
        kv_usage_permille=round(1000 * scheduler.kv_cache_manager.usage),
        max_prefill_batch_recent=max(h.recent, default=0),
        max_prefill_batch_ever=h.ever,
        deferred=h.deferred,
        capacity_bound=h.capacity_bound,
        clock_ms=round(1000 * clock_s),
        fits=admissible_now(scheduler),
        extended=h.extended,
    )
