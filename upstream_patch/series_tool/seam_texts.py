# SPDX-License-Identifier: Apache-2.0
"""The prose of the schedule-seams series: each seam's docstring (its
contract, in the release's own terms) and each patch's commit message.

Docstrings are Google style as vLLM's ruff config reads them: a summary line,
paragraphs, ``Args:`` and ``Returns:`` sections, a blank line after the last
section (D413). ``{cap}`` and the ``*_SCOPE`` fragments are filled per
release by :mod:`seam_emit`."""

from __future__ import annotations

# --- A: _waiting_admission -------------------------------------------------

ENUM_DOC = "What ``Scheduler._waiting_admission()`` does with a waiting request."
ENUM_MEMBERS = (
    ("ADMIT", "Go on with the request as the loop would without the seam."),
    ("SKIP", "Leave it queued, in its place, until the next step."),
    ("STOP", "End this step's admissions; it stays at the head of its queue."),
)

ADMISSION_SUMMARY = "Whether the waiting loop may go on with a request it took."
ADMISSION_BODY = (
    "Experimental, no compatibility guarantee. Asked once for each request "
    "the waiting loop takes from its queues, so at most once per request per "
    "step: after the release's blocked-status and stale-output checks, before "
    "the LoRA check and the prefix-cache lookup. {scope} ``{cap}`` still "
    "caps admission. Must be cheap and run no collectives (how many times it "
    "is asked varies by step and by rank)."
)
# 0.34 on: kv_holding_waiting still drains while paused or held.
ADMISSION_SCOPE_PAUSE = (
    "Not asked on steps that preempt nor under ``PauseState.PAUSED_ALL``; "
    "under ``PauseState.PAUSED_NEW`` or while "
    "``_should_stop_admitting_waiting()`` holds the step, only for requests "
    "in ``self.kv_holding_waiting``."
)
ADMISSION_SCOPE_PLAIN = (
    "Not asked on steps that preempt, while the scheduler is paused, nor once "
    "``_should_stop_admitting_waiting()`` holds the step."
)
ADMISSION_ARGS = (("request", "The request at the head of the queue being drained."),)
ADMISSION_RETURNS = (
    "``Admission.ADMIT`` to go on as without the seam (the default). "
    "``Admission.SKIP`` to leave the request queued, in its place, until the "
    "next step, as the loop skips a blocked request. ``Admission.STOP`` to "
    "end this step's admissions from every waiting queue."
)

# --- C: _evict_running_request ---------------------------------------------

EVICT_SUMMARY = "Evict the running request chosen as a preemption victim."
EVICT_BODY = (
    "Experimental, no compatibility guarantee. Asked once per victim in the "
    "running loop's preemption branch, in place of ``_preempt_request()``, "
    "after the victim was chosen and removed from ``self.running`` (under the "
    "priority policy, also from this step's scheduled requests, its budgets "
    "restored). Whatever an override does, the step counts as one that "
    "preempted: no waiting request is admitted in it, and if the victim is "
    "the request being scheduled, the loop stops trying it. An override "
    "must free the victim's KV blocks (the allocation that needed them is "
    "retried next), for example by finishing it through "
    "``finish_requests()``; a victim it does not preempt is not reported in "
    "``SchedulerOutput.preempted_req_ids``."
)
EVICT_ARGS = (
    ("victim", "The running request to evict; its status is still RUNNING."),
    ("timestamp", "This step's scheduling timestamp."),
)
# The release reports preemptions from _preempt_request() itself, so the seam
# returns nothing (the design note's bool would carry no information here).
EVICT_RETURNS = ""

# --- B: _cap_num_new_tokens --------------------------------------------------

CAP_SUMMARY = "Cap the number of tokens scheduled for a request in this step."
CAP_BODY = (
    "Experimental, no compatibility guarantee. Asked once per request per "
    "step that the running or the waiting loop is about to schedule, after "
    "the release's own caps (token budget, long-prefill threshold, "
    "``max_model_len``; in the waiting loop, chunked prefill) and before "
    "{after}, which may lower the result further; not for a request that "
    "starts an async KV load.{padding} Must be cheap and run no collectives."
)
CAP_AFTER = "the Mamba block alignment, the encoder budget and the MTP lookahead"
# 0.27.x has no MTP prefill lookahead and caps by the encoder budget first.
CAP_AFTER_NO_MTP = "the encoder budget and the Mamba block alignment"


def cap_after(source: str) -> str:
    """What B's docstring and message say comes after the cap, read off the
    release's ``scheduler.py`` (``source``)."""
    if "self._reserve_prefill_lookahead(" in source:
        return CAP_AFTER
    return CAP_AFTER_NO_MTP


CAP_PADDING = (
    " A decode padded to the speculative size and capped below it is "
    "scheduled unpadded (one token, or none for 0)."
)
CAP_ARGS = (
    ("request", "The request about to be scheduled."),
    ("num_new_tokens", "The number of tokens the release would schedule for it."),
)
CAP_RETURNS = (
    "Between 0 and ``num_new_tokens`` (the default). 0 schedules nothing for "
    "the request in this step, as when the release's own caps leave nothing: "
    "the running loop goes on with the next request, the waiting loop leaves "
    "the request queued."
)

# --- commit messages -------------------------------------------------------

TRAILERS = "Co-authored-by: Claude"

SUBJECTS = {
    "A": "[Core][Scheduler] Add a _waiting_admission() per-request admission seam",
    "C": "[Core][Scheduler] Add an _evict_running_request() preemption seam",
    "B": "[Core][Scheduler] Add a _cap_num_new_tokens() per-request token cap seam",
}

MESSAGES = {
    "A": """\
Out-of-tree schedulers that decide admission per request (a cross-rank
plan that admits only some waiting requests in a step, a per-step time
budget that ends admission once spent) carry a full copy of
Scheduler.schedule() to add one condition to the waiting loop, and
re-sync it by hand on every release.

This adds Scheduler._waiting_admission(request), returning a new
Admission enum: ADMIT (the default: the loop is unchanged), SKIP (the
request stays queued, in its place, until the next step, as the loop
skips a blocked request) or STOP (end this step's admissions). It is
asked once for each request the waiting loop takes from a queue, after
the blocked-status and stale-output checks and before the LoRA check
and the prefix-cache lookup; the admission cap is checked before it, as
before.

Tests in the new tests/v1/core/test_scheduler_seams.py, with a
recording subclass passed to create_scheduler(): SKIP leaves the
request waiting while the others are admitted and admits it next step,
STOP ends admission at that request, and each request is asked once
per step; the recorder defers to super(), so the default is exercised
too.
""",
    "C": """\
An out-of-tree scheduler that handles a preemption victim differently
(a disaggregated decode node that offloads the victim's KV through its
connector, or finishes it so that the prefill node recomputes it)
carries a full copy of Scheduler.schedule() for that one call.

This adds Scheduler._evict_running_request(victim, timestamp), asked
once per victim in the running loop's preemption branch in place of the
_preempt_request() call there. The default preempts as before, so every
SchedulerOutput is unchanged. The step still counts as one that
preempted (no waiting request is admitted), and a victim an override
does not preempt is not reported in preempted_req_ids (the report comes
from _preempt_request()).

Tests in tests/v1/core/test_scheduler_seams.py, on a cache two running
requests outgrow: the default preempts the last running request, asked
once; an override that finishes the victim instead frees its blocks,
reports it finished and not preempted, and no waiting request is
admitted in that step.
""",
    "B": """\
An out-of-tree scheduler that sizes prefill chunks itself (from a
latency model's predicted chunk, within a per-step time budget) carries
a full copy of Scheduler.schedule() to lower num_new_tokens before the
KV blocks are allocated, in both loops.

This adds Scheduler._cap_num_new_tokens(request, num_new_tokens), asked
once per request per step that the running or the waiting loop is about
to schedule, after the release's own caps and before {after}, which may
lower the result further. The default returns num_new_tokens, so every
SchedulerOutput is unchanged. A result of 0 schedules nothing for the
request in that step, as the release's own caps do.{padding}

Tests in tests/v1/core/test_scheduler_seams.py: a cap chunks a prefill
in the waiting loop and then in the running loop, each asked with the
tokens left; a cap of 0 keeps a running request unscheduled and a
waiting one queued for the step, and both are scheduled once it lifts.
""",
}
MESSAGE_PADDING = (
    " A decode padded to the speculative size and capped below it drops the "
    "padding, as the Mamba alignment does."
)
