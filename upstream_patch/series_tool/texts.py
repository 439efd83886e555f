# SPDX-License-Identifier: Apache-2.0
"""The series' prose, in the release's own terms once formatted: the commit
message (both loop shapes), the hook's docstring (both shapes, Google style)
and the comment at the ``prefill_capacity_bound`` assignment."""

from __future__ import annotations

SUBJECT = "[Core][Scheduler] Add a _should_stop_admitting_waiting() admission hook"
MESSAGE = """\
Scheduler.schedule() gives a subclass no way to keep new requests waiting
for a step. vllm-ascend's balance scheduling (a data-parallel admission
gate: once one DP rank's running set is full, no rank admits a new waiting
request in that step) carries a full copy of schedule() to add that one
condition, and re-syncs the copy by hand on every vLLM release.

This adds Scheduler._should_stop_admitting_waiting(), asked at most once
per schedule() call, right before the waiting loop (not on steps that
{skipped}). Its answer is honoured in the loop right after the loop's own
admission-cap check, which stays first, inline and unchanged: an override
can end admission earlier but never admit past {cap_text}.
The default returns False: every SchedulerOutput is unchanged.
{scope}{coupling}
Tests in tests/v1/core/test_scheduler.py, with gating subclasses passed to
create_scheduler(), asserting on SchedulerOutputs only: {tests}.
"""
PAUSE_DOC = """Whether this step admits no request without KV blocks.

Asked once per ``schedule()`` call, before the waiting loop; not on steps
that {skipped}. True holds ``self.waiting`` and ``self.async_kv_waiting``;
``self.kv_holding_waiting`` still drains and ``{cap}`` still caps
admission. Overrides must call ``super()``, be cheap and run no
collectives (some steps skip the call).

Returns:
    True to hold this step; by default, whether ``PAUSED_NEW`` is set."""
PAUSE_MESSAGE = """\
Scheduler.schedule() gives a subclass no way to keep requests waiting
for a step. vllm-ascend's balance scheduling (a data-parallel admission
gate: once one DP rank's running set is full, no rank admits a waiting
request in that step) carries a full copy of schedule() to add that one
condition, and re-syncs the copy by hand on every vLLM release.

The waiting loop already has that condition: PauseState.PAUSED_NEW. This
moves its two `self._pause_state == PauseState.UNPAUSED` tests into
Scheduler._should_stop_admitting_waiting(), asked once per schedule()
call right before the loop (not on steps that {skipped}); the default is
the test it replaces, so PAUSED_NEW is its in-tree user and every
SchedulerOutput is unchanged. The admission cap, {cap_text}, is computed
apart and stays as it is: an override can hold a step, never admit past
the cap. Overrides call super().

Scope, as under PAUSED_NEW: a held step admits nothing from self.waiting
(requests without KV blocks, new or preempted) nor from
self.async_kv_waiting (no new async KV load starts, not even past the
running cap); self.kv_holding_waiting still drains: those requests hold
KV blocks already, and holding them would keep the blocks allocated on
the held rank while admitting no new work.
{coupling}
Tests in tests/v1/core/test_scheduler.py, with gating subclasses passed to
create_scheduler(), asserting on SchedulerOutputs only: {tests}.
"""
SCOPE_KV = """
Scope: only self.waiting is held. Requests in self.kv_holding_waiting (KV
already loaded, e.g. by an async KV load) are still admitted, as under
PauseState.PAUSED_NEW: holding them admits no new work but keeps their
blocks allocated, which adds KV pressure on the held rank.
"""
SCOPE_PLAIN = """
Scope: self.waiting and self.skipped_waiting, the waiting queues this
release has.
"""
COUPLING = """
Coupling with the prefill throttle: a held step leaves requests waiting,
so it is recorded as prefill_capacity_bound and the next throttled step
({throttles}) admits: a held rank catches up. Kept on
purpose; a comment says so where the flag is set.
"""
# The docstring an override author reads (releases before 0.34): which
# queues, when it is asked, which cap wins, what an override must not do.
HOOK_DOC = """Whether this ``schedule()`` call admits no more waiting requests.

Asked at most once per call, before the waiting loop; not on steps that
{skipped}. True holds {queues}{exempt}. The cap ({cap_doc}) is
checked first, so an override cannot admit past it. Must be cheap and run
no collectives (some steps skip the call). Experimental and private.

Returns:
    True to hold the rest of this call's admissions (default: False)."""
EXEMPT_KV = "; ``self.kv_holding_waiting`` still drains"
COUPLING_COMMENT = (
    "A step that {seam}() held counts as capacity-bound too (its requests are "
    "left waiting): the next throttled step admits."
)
