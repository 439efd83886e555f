# SPDX-License-Identifier: Apache-2.0
"""Typed records of a replay run: what an engine stage hands to the metrics.

Two levels:

- per rank, as an engine process writes them (:class:`RankStart`,
  :class:`RankStep`, :class:`RankRequest`, :class:`GatherRecord`), one JSON
  line each (:mod:`~vllm_ascend_balance.replay.real.recorder`);
- per run, joined across ranks and put on the modeled clock
  (:class:`RunRecords`: :class:`Step` and :class:`RequestRecord`), which is
  all :mod:`.metrics` reads. Any engine (the real ``AsyncLLM`` deployment, a
  simulated one) produces a :class:`RunRecords`.

Step indices are global: the lock step makes step ``k`` the same forward
pass on every rank. Times named ``*_s`` are modeled seconds from the start of
the workload; ``wall_*`` fields are diagnostics, never used by the metrics.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.modes import Mode

logger = init_logger(__name__)


class RunStatus(enum.Enum):
    """How a run ended; the cause, if any, is :attr:`RunRecords.cause`."""

    OK = "ok"
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM
    FAILED = "failed"  # an engine or the deployment failed


@dataclass(frozen=True)
class RankStart:
    """A rank is up: its scheduler class (name and module) and cap."""

    rank: int
    scheduler: str
    scheduler_module: str
    cap: int
    dp_size: int


@dataclass(frozen=True)
class RankStep:
    """One rank's part of one lock-step forward pass.

    Attributes:
        step: global step index.
        cost_ms: this rank's modeled cost; ``step_ms``: the step's (max over
            ranks).
        running, waiting: ``len`` of the scheduler's queues when the forward
            pass ran (after this step's ``schedule()``).
        prefill_tokens, decode_requests: the batch, as the cost model sees it.
        new_requests: requests admitted from WAITING by this step.
        frozen: the balance gate's decision this step's ``schedule()`` used.
        gathers: balance gathers of this rank so far.
        dummy: a dummy batch (the rank had nothing scheduled).
        wall_start, wall_end: ``time.monotonic()`` (diagnostics).
        overrun_s: wall seconds by which the step overran its paced budget.
    """

    step: int
    rank: int
    cost_ms: float
    step_ms: float
    running: int
    waiting: int
    prefill_tokens: int
    decode_requests: int
    new_requests: int
    frozen: bool
    gathers: int
    dummy: bool
    wall_start: float = 0.0
    wall_end: float = 0.0
    overrun_s: float = 0.0


@dataclass(frozen=True)
class RankRequest:
    """One request as the rank that served it saw it (step indices; None
    when it did not get that far)."""

    request_id: str
    rank: int
    admitted_step: int
    first_token_step: int | None
    finish_step: int | None
    output_tokens: int


@dataclass(frozen=True)
class GatherRecord:
    """One balance gather of one rank: ``n`` (gathers so far), ``local``
    (this rank's ``len(running)`` sent), ``gathered`` (the running counts,
    index = DP rank; empty on the log-depth exchange, which keeps no
    per-rank rows), ``frozen`` (the decision), ``cap``, ``flags``: each
    rank's further quantities (the policy's layout after ``len(running)``,
    :class:`~vllm_ascend_balance.gate.signals.Layout`) where it gathers
    them, else None; and ``sent``: this rank's quantities as it sent them,
    in the layout's order (None where not recorded)."""

    rank: int
    n: int
    local: int
    gathered: list[int]
    frozen: bool
    cap: int
    flags: list[list[int]] | None = None
    sent: list[int] | None = None


def split_gathered(gathered: Any) -> tuple[list[int], list[list[int]] | None]:
    """``balance_gathered`` (shape ``(dp,)`` or ``(dp, 1 + flags)``) as the
    running counts and the flag rows (None for the contract's payload);
    ``([], None)`` where nothing was all-gathered (the log-depth exchange)."""
    if gathered is None:
        return [], None
    if gathered.dim() == 1:
        return [int(x) for x in gathered.tolist()], None
    return [int(x) for x in gathered[:, 0].tolist()], gathered[:, 1:].tolist()


@dataclass(frozen=True)
class Step:
    """One forward pass of the deployment on the modeled clock.

    Attributes:
        index: global step index.
        start_s, end_s: modeled seconds; every rank starts at ``start_s`` and
            rank r's own work ends at ``start_s + ranks[r].cost_ms / 1e3``.
        ranks: the ranks' records, index = DP rank.
    """

    index: int
    start_s: float
    end_s: float
    ranks: tuple[RankStep, ...]

    @property
    def slowest(self) -> RankStep:
        return max(self.ranks, key=lambda r: r.cost_ms)

    @property
    def frozen(self) -> bool:
        return any(r.frozen for r in self.ranks)

    @property
    def mixed(self) -> bool:
        """The slowest rank ran prefill and decode in the same batch."""
        s = self.slowest
        return s.prefill_tokens > 0 and s.decode_requests > 0

    @property
    def all_idle(self) -> bool:
        """Every rank ran a dummy batch with nothing queued (the steps vLLM
        runs until the DP ranks agree the wave is over)."""
        return all(r.dummy and r.running == 0 and r.waiting == 0 for r in self.ranks)


@dataclass(frozen=True)
class RequestRecord:
    """One request of the workload, joined with what its rank recorded.

    Attributes:
        index: position in the workload.
        arrival_s: modeled arrival (from the workload, not measured).
        rank: the rank that served it (None: never scheduled).
        routed_by_vllm: its rank was chosen by vLLM's DP load balancer (not
            pinned by the replay).
        admitted_step, first_token_step, finish_step: step indices, or None.
        output_tokens: tokens generated; ``expected_tokens``: asked for.
    """

    index: int
    arrival_s: float
    rank: int | None
    routed_by_vllm: bool
    admitted_step: int | None
    first_token_step: int | None
    finish_step: int | None
    output_tokens: int
    expected_tokens: int

    @property
    def done(self) -> bool:
        return self.finish_step is not None and self.output_tokens >= max(
            1, self.expected_tokens
        )


@dataclass
class RunRecords:
    """Everything one run of one mode recorded (also when it stopped early).

    Attributes:
        mode: the mode run; ``repeat``: which repetition (0-based).
        dp_size: DP ranks.
        status, cause: how the run ended and why (one line, or None; an
            interrupted run's: the signal, ``Ctrl-C`` or ``SIGTERM``).
        steps: the measured steps, in order (warm-up steps excluded).
        requests: one per workload request, in workload order.
        starts: each rank's start record (index = rank; missing if a rank
            never started).
        gathers: each rank's balance gathers (index = rank).
        wall_startup_s, wall_run_s: wall seconds (diagnostics).
        wall_send_late_s: the largest delay of a request's send behind its
            scheduled wall time (front-end lateness; diagnostics).
    """

    mode: Mode
    repeat: int
    dp_size: int
    status: RunStatus = RunStatus.OK
    cause: str | None = None
    steps: list[Step] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    starts: list[RankStart] = field(default_factory=list)
    gathers: list[list[GatherRecord]] = field(default_factory=list)
    wall_startup_s: float = 0.0
    wall_run_s: float = 0.0
    wall_send_late_s: float = 0.0

    @property
    def measured(self) -> bool:
        """Whether the run measured anything (a deployment that never came
        up, or stopped before its first step, did not)."""
        return bool(self.steps) or any(r.done for r in self.requests)
