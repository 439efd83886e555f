# SPDX-License-Identifier: Apache-2.0
"""How long each request admitted to RUNNING waited while the balance gate held.

``vllm:request_queue_time_seconds`` (vLLM's own) is a request's whole wait;
this is the part of it the balance gate is responsible for, per engine:

- **held seconds**: wall time (``time.monotonic``) the request spent in
  WAITING while the gate's decision was *frozen*;
- **held steps**: how many frozen gathers it waited through (the replay's
  "frozen steps waited through", ``--starvation-steps``).

Driven from the engine's gather hook (:mod:`~vllm_ascend_balance.wiring.engine_hook`),
right after each gather, with the scheduler: nothing runs inside
``schedule()`` and the scheduler class is not touched. A gather's decision
(``scheduler.balance_frozen``) governs the step that follows it. A request
held at a frozen gather stays in ``waiting`` until the gate opens (the seam
stops the whole WAITING queue), so the frozen gathers a request waits
through are consecutive ones in the count of frozen gathers: the tracker
keeps two running totals, frozen gathers so far and their seconds (each
decision's seconds: the wall time to the next gather), and per request only
the totals at its first frozen gather (its *mark*). At each gather it

1. closes the previous step: if the previous decision was frozen, the
   wall time between the two gathers is added to the frozen seconds;
2. observes admissions: every request in ``running`` now that was not at
   the previous gather was admitted to RUNNING during that step; it is
   observed once with the totals now minus its mark (0 steps and 0 s
   without a mark: never held, or it reached ``running`` by a path that
   skips ``waiting``);
3. if this gather froze the gate: marks every request in ``waiting`` (and
   ``skipped_waiting`` / ``async_kv_waiting`` where the release keeps
   them) that has no
   mark yet, with the totals before this decision, and counts the
   decision. A request that arrives during a frozen step is counted from
   the next frozen gather on, so held seconds never exceed the
   engine-side queue time. A marked request found in
   ``kv_holding_waiting`` instead (it left ``waiting`` while the gate was
   open, to wait for its KV load: a queue the gate does not hold) has its
   held wait settled at what it was then;
4. drops the marks of requests in none of those queues (finished or
   aborted while waiting) when there are more marks than queued requests:
   stale marks are bounded and go once the queues drain.

So ``_count`` is the admissions to RUNNING seen at gathers; a preempted
request admitted again counts again, with what it was held since its
preemption. Not seen: a request admitted and finished within one step
(one output token, e.g. a prefill-only request): it is never in
``running`` at a gather. Steps in which this rank was itself at the cap
count as held too (the replay counts the same way): the freeze is the
gate's decision, whichever rank led.

Cost per gather: a set of ``running``'s ids (O(running)), and at a frozen
gather one membership test per waiting request (O(waiting)); measured by
``benchmarks/bench_held_wait.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from vllm_ascend_balance.gate.signals import HELD_QUEUES

#: Queues where a request keeps its entry but the gate does not hold it.
KEPT_QUEUES = ("kv_holding_waiting",)


def _queues(scheduler: Any, names: tuple[str, ...]) -> Iterable[Any]:
    for name in names:
        queue = getattr(scheduler, name, None)
        if queue is not None:
            yield queue


class HeldWait:
    """Held-wait marks of one engine's scheduler and the observations not
    yet exported.

    Args:
        clock: monotonic seconds (tests pass a modeled clock).

    Attributes:
        seconds: held seconds of each request admitted since the last
            :meth:`take`, float >= 0.
        steps: held steps of the same requests, same order, int >= 0.
        frozen_gathers: frozen decisions seen so far.
        frozen_seconds: their seconds, up to the last gather.
        held_queues: the scheduler queues the gate holds (:data:`HELD_QUEUES`).
        kept_queues: those where a held request's wait is settled
            (:data:`KEPT_QUEUES`).
    """

    held_queues: ClassVar[tuple[str, ...]] = HELD_QUEUES
    kept_queues: ClassVar[tuple[str, ...]] = KEPT_QUEUES

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # id -> (frozen_gathers, frozen_seconds) at the request's first
        # frozen gather in WAITING.
        self._marks: dict[str, tuple[int, float]] = {}
        # id -> (steps, seconds) held, for requests that left WAITING for a
        # queue the gate does not hold.
        self._settled: dict[str, tuple[int, float]] = {}
        self._running: set[str] = set()
        self._last_gather = 0.0
        self._frozen = False  # the previous gather's decision
        self.frozen_gathers = 0
        self.frozen_seconds = 0.0
        self.seconds: list[float] = []
        self.steps: list[int] = []

    @property
    def pending(self) -> int:
        """Requests held at least once and not admitted yet."""
        return len(self._marks) + len(self._settled)

    def after_gather(self, scheduler: Any) -> None:
        """Advance by one gather (module docstring, steps 1-4); reads
        ``scheduler.running``, its waiting queues and ``balance_frozen``."""
        now = self._clock()
        if self._frozen:
            self.frozen_seconds += now - self._last_gather
        self._last_gather = now
        marks, settled = self._marks, self._settled

        running = {r.request_id for r in scheduler.running}
        for request_id in running - self._running:
            mark = marks.pop(request_id, None)
            if mark is not None:
                self.steps.append(self.frozen_gathers - mark[0])
                self.seconds.append(self.frozen_seconds - mark[1])
            else:
                steps, seconds = settled.pop(request_id, (0, 0.0))
                self.steps.append(steps)
                self.seconds.append(seconds)
        self._running = running

        self._frozen = frozen = bool(scheduler.balance_frozen)
        if frozen:
            current = (self.frozen_gathers, self.frozen_seconds)
            for queue in _queues(scheduler, self.held_queues):
                for request in queue:
                    if request.request_id not in marks:
                        marks[request.request_id] = current
            if marks:
                for queue in _queues(scheduler, self.kept_queues):
                    for request in queue:
                        mark = marks.pop(request.request_id, None)
                        if mark is not None:
                            settled[request.request_id] = (
                                current[0] - mark[0],
                                current[1] - mark[1],
                            )
            self.frozen_gathers += 1
        every = self.held_queues + self.kept_queues
        if len(marks) + len(settled) > sum(len(q) for q in _queues(scheduler, every)):
            self._drop_stale(scheduler)

    def _drop_stale(self, scheduler: Any) -> None:
        queued = {
            request.request_id
            for queue in _queues(scheduler, self.held_queues + self.kept_queues)
            for request in queue
        }
        self._marks = {k: v for k, v in self._marks.items() if k in queued}
        self._settled = {k: v for k, v in self._settled.items() if k in queued}

    def take(self) -> tuple[list[float], list[int]]:
        """The observations since the previous call: ``(seconds, steps)``,
        one value per admitted request in each list."""
        seconds, steps = self.seconds, self.steps
        self.seconds, self.steps = [], []
        return seconds, steps
