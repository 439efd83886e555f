# SPDX-License-Identifier: Apache-2.0
"""How long each request admitted to RUNNING waited while the balance gate held.

``vllm:request_queue_time_seconds`` (vLLM's own) is a request's whole wait;
this is the part of it the balance gate is responsible for, per engine:

- **held seconds**: wall time (``time.monotonic``) the request spent in
  WAITING while the gate's decision was *frozen*;
- **held steps**: how many frozen gathers it waited through (the replay's
  "frozen steps waited through", ``--starvation-steps``).

Driven from the engine's gather hook (:mod:`~vllm_ascend_balance.engine`),
right after each gather, with the scheduler: nothing runs inside
``schedule()`` and the scheduler class is not touched. A gather's decision
(``scheduler.balance_frozen``) governs the step that follows it, so at each
gather :class:`HeldWait`

1. closes the previous step: if the previous decision was frozen, every
   request it held gains the wall time between the two gathers;
2. observes admissions: every request in ``running`` now that was not at
   the previous gather was admitted to RUNNING during that step; its entry
   (0 steps and 0 s when it has none: never held, or it reached
   ``running`` by a path that skips ``waiting``) is observed once and
   dropped;
3. if this gather froze the gate, every request in ``waiting`` (and a
   ``skipped_waiting`` queue where the release keeps one) is held through
   the step that follows: its entry gains 1 step, and its seconds at the
   next gather. A request that arrives during a frozen step is credited
   from the next frozen gather on, so held seconds never exceed the
   engine-side queue time;
4. drops the entries of requests in none of ``waiting``,
   ``skipped_waiting``, ``kv_holding_waiting`` (where a held request waits
   for its KV load: the gate does not hold that queue, so the entry gains
   nothing there but is kept) and ``running``: finished or aborted while
   waiting. Done at every frozen gather, and at an open one only when
   there are more entries than queued requests (so stale entries are
   bounded by one freeze's worth and go once the queues drain).

So ``_count`` is the admissions to RUNNING seen at gathers; a preempted
request admitted again counts again, with what it was held since its
preemption. Not seen: a request admitted and finished within one step
(one output token, e.g. a prefill-only request): it is never in
``running`` at a gather. Steps in which this rank was itself at the cap
count as held too (the replay counts the same way): the freeze is the
gate's decision, whichever rank led.

Cost per gather: a set of ``running``'s ids (O(running)), and at a frozen
gather one pass over the waiting queues (O(waiting)); measured by
``benchmarks/bench_held_wait.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

#: Queues whose requests the gate holds (the first is every release's).
HELD_QUEUES = ("waiting", "skipped_waiting")
#: Queues where a request keeps its entry but the gate does not hold it.
KEPT_QUEUES = ("kv_holding_waiting",)


def _queues(scheduler: Any, names: tuple[str, ...]) -> Iterable[Any]:
    for name in names:
        queue = getattr(scheduler, name, None)
        if queue is not None:
            yield queue


def _queued(scheduler: Any) -> int:
    """Requests in every queue an entry may sit in (``len`` only: O(1))."""
    return sum(len(q) for q in _queues(scheduler, HELD_QUEUES + KEPT_QUEUES))


class HeldWait:
    """Held-wait entries of one engine's scheduler and the observations not
    yet exported.

    Args:
        clock: monotonic seconds (tests pass a modeled clock).

    Attributes:
        seconds: held seconds of each request admitted since the last
            :meth:`take`, float >= 0.
        steps: held steps of the same requests, same order, int >= 0.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, list[float]] = {}  # id -> [steps, seconds]
        self._held: list[list[float]] = []  # entries the last decision held
        self._running: set[str] = set()
        self._last_gather = 0.0
        self.seconds: list[float] = []
        self.steps: list[int] = []

    @property
    def pending(self) -> int:
        """Requests with an entry (held at least once, not admitted yet)."""
        return len(self._entries)

    def after_gather(self, scheduler: Any) -> None:
        """Advance by one gather (module docstring, steps 1-4); reads
        ``scheduler.running``, its waiting queues and ``balance_frozen``."""
        now = self._clock()
        if self._held:
            elapsed = now - self._last_gather
            for held in self._held:
                held[1] += elapsed
            self._held = []
        self._last_gather = now

        entries = self._entries
        entry: list[float] | None
        running = {r.request_id for r in scheduler.running}
        for request_id in running - self._running:
            entry = entries.pop(request_id, None)
            self.steps.append(0 if entry is None else int(entry[0]))
            self.seconds.append(0.0 if entry is None else entry[1])
        self._running = running

        frozen = bool(scheduler.balance_frozen)
        if not frozen and (not entries or len(entries) <= _queued(scheduler)):
            return
        kept: dict[str, list[float]] = {}
        for queue in _queues(scheduler, HELD_QUEUES):
            for request in queue:
                request_id = request.request_id
                entry = entries.get(request_id)
                if frozen:
                    if entry is None:
                        entry = [0.0, 0.0]
                    entry[0] += 1
                    self._held.append(entry)
                if entry is not None:
                    kept[request_id] = entry
        if entries:
            for queue in _queues(scheduler, KEPT_QUEUES):
                for request in queue:
                    entry = entries.get(request.request_id)
                    if entry is not None:
                        kept[request.request_id] = entry
        self._entries = kept

    def take(self) -> tuple[list[float], list[int]]:
        """The observations since the previous call: ``(seconds, steps)``,
        one value per admitted request in each list."""
        seconds, steps = self.seconds, self.steps
        self.seconds, self.steps = [], []
        return seconds, steps
