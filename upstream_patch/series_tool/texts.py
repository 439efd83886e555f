# SPDX-License-Identifier: Apache-2.0
"""The series' prose, in the release's own terms once formatted: the commit
message (both loop shapes) and its trailer, the hook's docstring (both
shapes, Google style) and the comment at the ``prefill_capacity_bound``
assignment."""

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
PAUSE_DOC = """Whether to hold this step's admissions from the waiting queues.

Experimental, no compatibility guarantee. Asked once per ``schedule()``
call, before the waiting loop; not on steps that {skipped}. True holds
``self.waiting`` and ``self.async_kv_waiting``: no async KV load starts, as
its request would join ``self.kv_holding_waiting``, which still drains, and
be admitted within the same hold. ``{cap}`` still caps admission. Must be
cheap and run no collectives (some steps skip the call).

Returns:
    True to hold this step (default: False)."""
PAUSE_MESSAGE = """\
Scheduler.schedule() gives a subclass no way to keep requests waiting
for a step. vllm-ascend's balance scheduling (a data-parallel admission
gate: once one DP rank's running set is full, no rank admits a waiting
request in that step) carries a full copy of schedule() to add that one
condition, and re-syncs the copy by hand on every vLLM release.

The waiting loop already holds requests under PauseState.PAUSED_NEW, by
two `self._pause_state == PauseState.UNPAUSED` tests. This adds
Scheduler._should_stop_admitting_waiting() to that decision: one flag,
set once per schedule() call right before the loop, is the pause test or
the hook, which is not asked on steps that {skipped}. The default
returns False, so every SchedulerOutput is unchanged, and the pause test
stays inline: no override, whether it calls super() or not, can lift pause(mode="wait").
The admission cap, {cap_text}, is computed apart and stays as it is: an
override can hold a step, never admit past the cap.

Scope, as under PAUSED_NEW: a held step admits nothing from self.waiting
(requests without KV blocks, new or preempted) and starts no load from
self.async_kv_waiting (with --max-num-inflight-kv-loads, at the running
cap or below it): a load started during a hold would put its request in
self.kv_holding_waiting, which still drains, so it would be admitted
within the same hold. Requests in self.kv_holding_waiting hold KV blocks
already and still drain: holding them would keep their blocks allocated
on the held rank while admitting no new work.
{coupling}
Tests in tests/v1/core/test_scheduler.py, with gating subclasses passed to
create_scheduler(), asserting on SchedulerOutputs and request states:
{tests}.
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
({throttles}) still admits: a held rank catches up. Kept
on purpose; a comment says so where the flag is set.
"""
# vLLM's AI-assisted contribution rule asks for this trailer on the commit;
# the submitter's DCO Signed-off-by: follows it at export time
# (docs/upstream-patch.md, "Submitting the upstream PR").
TRAILERS = "Co-authored-by: Claude"
# The docstring an override author reads (releases before 0.34): which
# queues, when it is asked, which cap wins, what an override must not do.
HOOK_DOC = """Whether to stop admitting waiting requests for the rest of this call.

Experimental, no compatibility guarantee. Asked at most once per call,
before the waiting loop; not on steps that {skipped}. True holds
{queues}{exempt}. The cap ({cap_doc}) is checked first, so an override
cannot admit past it. Must be cheap and run no collectives (some steps skip
the call).

Returns:
    True to hold the rest of this call's admissions (default: False)."""
EXEMPT_KV = "; ``self.kv_holding_waiting`` still drains"
COUPLING_COMMENT = (
    "A step that {seam}() held counts as capacity-bound too (its requests are "
    "left waiting): the next throttled step admits."
)
