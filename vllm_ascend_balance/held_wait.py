# SPDX-License-Identifier: Apache-2.0
"""How long each request admitted from WAITING was held by the balance gate.

The replay reports starved requests (waited through >= N frozen steps); a
live server needs the same number on ``/metrics``. For each request, from
the moment it enters WAITING (``Scheduler.add_request``) to its first
admission (it appears in ``SchedulerOutput.scheduled_new_reqs``), this
measures

- **held seconds**: wall time (``time.monotonic``) during which the gate's
  decision was *frozen*. A decision holds from the gather that takes it to
  the next gather, so the gate's frozen time is the sum of those intervals;
  a request's held seconds are the part of its wait that overlaps them
  (vLLM's own ``vllm:request_queue_time_seconds`` is the whole wait);
- **held steps**: ``schedule()`` calls made while frozen during its wait
  (the replay's "frozen steps waited through").

Cost: no per-waiting-request work per step. Two running totals (frozen
seconds, held steps) advance at each gather and each ``schedule()``; a
request records both totals when it enters WAITING (an attribute on the
``Request``, so an aborted request leaves nothing behind) and the
difference is taken at its admission: O(admitted) per step.

Scope: the first admission of a request. A preempted request going back to
WAITING, or a streaming session's next chunk, is not measured again
(vLLM's queue time is also measured to the first admission). The
observations wait in :attr:`HeldWait.seconds` and :attr:`HeldWait.steps`
until the metrics take them (:meth:`HeldWait.take`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

#: The ``Request`` attribute holding ``(frozen seconds, held steps)`` at the
#: moment the request entered WAITING.
MARK = "_vab_held_mark"


class HeldWait:
    """The gate's frozen-time and held-step totals, and the held wait of each
    admitted request.

    Args:
        clock: monotonic seconds (tests pass a modeled clock).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: Frozen wall time up to the last gather, seconds.
        self.frozen_s = 0.0
        #: ``schedule()`` calls made while the gate was frozen.
        self.held_steps = 0
        #: Held seconds per admitted request, not yet taken.
        self.seconds: list[float] = []
        #: Held steps per admitted request, not yet taken.
        self.steps: list[int] = []
        self._since: float | None = None  # start of the current frozen decision

    def frozen_clock(self) -> float:
        """Frozen seconds so far, the current frozen decision included."""
        since = self._since
        if since is None:
            return self.frozen_s
        return self.frozen_s + (self.clock() - since)

    def decided(self, frozen: bool) -> None:
        """At each gather: the previous decision ends, ``frozen`` begins."""
        now = self.clock()
        if self._since is not None:
            self.frozen_s += now - self._since
        self._since = now if frozen else None

    def queued(self, request: Any) -> None:
        """``request`` entered WAITING (a new request)."""
        setattr(request, MARK, (self.frozen_clock(), self.held_steps))

    def scheduled(
        self, requests: Mapping[str, Any], scheduler_output: Any, frozen: bool
    ) -> None:
        """After one ``schedule()`` (``frozen``: the decision it ran under):
        observe the requests it admitted for the first time, then count the
        step if it was held. ``requests`` is ``Scheduler.requests``."""
        new = scheduler_output.scheduled_new_reqs
        if new:
            now: float | None = None
            for data in new:
                request = requests.get(data.req_id)
                mark = None if request is None else vars(request).pop(MARK, None)
                if mark is None:  # not queued through add_request, or seen
                    continue
                if now is None:
                    now = self.frozen_clock()
                self.seconds.append(max(now - mark[0], 0.0))
                self.steps.append(self.held_steps - mark[1])
        if frozen:
            self.held_steps += 1

    def take(self) -> tuple[list[float], list[int]]:
        """The observations since the last call (seconds, steps)."""
        seconds, steps = self.seconds, self.steps
        self.seconds, self.steps = [], []
        return seconds, steps
