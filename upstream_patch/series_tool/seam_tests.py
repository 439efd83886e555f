# SPDX-License-Identifier: Apache-2.0
"""The upstream tests of the schedule-seams series: a new
``tests/v1/core/test_scheduler_seams.py`` that each patch of the series
extends with its seam's tests (the file as of patch N holds the tests of
seams 1..N, and imports only what they use).

The tests pass scheduler subclasses to upstream's ``create_scheduler()``
(``scheduler_cls=``; where the helper lacks it, as on 0.29, the test swaps
the class the helper's module names with ``monkeypatch``), assert only on
``SchedulerOutput``s, request states and what the subclass recorded, and
call ``super()`` for what they do not override, so the defaults run too.
Negative controls (``tests/test_schedule_seams_series.py``): each seam's
tests fail with its call sites removed, and with its default changed."""

from __future__ import annotations

HEADER = '''\
{license}"""Scheduler seams a subclass overrides: each default keeps the scheduler's
behaviour, and each override is honoured where its docstring says."""

from typing import Any, TypeVar

import pytest

from vllm.v1.core.sched.scheduler import {scheduler_names}
from vllm.v1.request import Request, RequestStatus

from .test_scheduler import make_output
from .utils import create_requests, create_scheduler

pytestmark = pytest.mark.cpu_test

_S = TypeVar("_S", bound=Scheduler)

'''
HELPER_WITH_CLS = """
def _create_scheduler(scheduler_cls: type[_S], **kwargs: Any) -> _S:
    scheduler = create_scheduler(scheduler_cls=scheduler_cls, **kwargs)
    assert isinstance(scheduler, scheduler_cls)
    return scheduler
"""
HELPER_SWAP = """
def _create_scheduler(
    monkeypatch: pytest.MonkeyPatch, scheduler_cls: type[_S], **kwargs: Any
) -> _S:
    # This release's create_scheduler() builds the Scheduler its module names.
    monkeypatch.setitem(create_scheduler.__globals__, "Scheduler", scheduler_cls)
    scheduler = create_scheduler(**kwargs)
    assert isinstance(scheduler, scheduler_cls)
    return scheduler
"""

# {mp}: ", monkeypatch: pytest.MonkeyPatch" or ""; {mp_arg}: "monkeypatch, "
# or "" (the helper's first argument where it swaps the class).
TESTS = {
    "A": '''

class AdmissionRecorder(Scheduler):
    """Records each _waiting_admission() call; answers from ``decisions``,
    else as the default does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []
        self.decisions: dict[str, Admission] = {{}}

    def _waiting_admission(self, request: Request) -> Admission:
        self.asked.append(request.request_id)
        decision = self.decisions.get(request.request_id)
        if decision is None:
            return super()._waiting_admission(request)
        return decision


@pytest.mark.parametrize("decision", [Admission.SKIP, Admission.STOP])
def test_waiting_admission(decision: Admission{mp}):
    """SKIP leaves the request waiting while the loop admits the requests
    behind it, and it is admitted next step; STOP ends the step's admissions
    at it. Each waiting request is asked once per step."""
    scheduler = _create_scheduler({mp_arg}AdmissionRecorder)
    requests = create_requests(num_requests=4)
    ids = [request.request_id for request in requests]
    for request in requests:
        scheduler.add_request(request)
    scheduler.decisions[ids[1]] = decision

    output = scheduler.schedule()
    admitted = [req.req_id for req in output.scheduled_new_reqs]
    held = [ids[1]] if decision == Admission.SKIP else ids[1:]
    assert admitted == [rid for rid in ids if rid not in held]
    assert scheduler.asked == (ids if decision == Admission.SKIP else ids[:2])
    assert all(requests[ids.index(rid)].status == RequestStatus.WAITING for rid in held)
    scheduler.update_from_output(output, make_output(scheduler))

    scheduler.decisions.clear()
    scheduler.asked.clear()
    output = scheduler.schedule()
    assert [req.req_id for req in output.scheduled_new_reqs] == held
    assert scheduler.asked == held
''',
    "C": '''

class FinishingEvictor(Scheduler):
    """Records each preemption victim; finishes it instead of preempting it
    while ``finish_victims`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finish_victims = False
        self.victims: list[str] = []

    def _evict_running_request(self, victim: Request, timestamp: float) -> None:
        self.victims.append(victim.request_id)
        if self.finish_victims:
            self.finish_requests(victim.request_id, RequestStatus.FINISHED_ABORTED)
        else:
            super()._evict_running_request(victim, timestamp)


@pytest.mark.parametrize("finish_victims", [False, True])
def test_evict_running_request(finish_victims: bool{mp}):
    """Two running requests outgrow the KV cache: the last one is evicted,
    once, and preempted by default. An override that finishes it instead
    frees its blocks and reports it finished, not preempted; either way the
    step admits no waiting request."""
    scheduler = _create_scheduler({mp_arg}FinishingEvictor, num_blocks=5, block_size=16)
    first, victim = create_requests(num_requests=2, num_tokens=32, block_size=16)
    for request in (first, victim):
        scheduler.add_request(request)
    output = scheduler.schedule()
    assert len(output.scheduled_new_reqs) == 2
    scheduler.update_from_output(output, make_output(scheduler))

    scheduler.finish_victims = finish_victims
    (waiting,) = create_requests(num_requests=1, req_ids=["waiting"])
    scheduler.add_request(waiting)
    output = scheduler.schedule()
    assert scheduler.victims == [victim.request_id]
    assert set(output.num_scheduled_tokens) == {{first.request_id}}
    assert output.scheduled_new_reqs == []
    assert waiting.status == RequestStatus.WAITING
    if finish_victims:
        assert victim.status == RequestStatus.FINISHED_ABORTED
        assert victim.request_id in output.finished_req_ids
        assert not output.preempted_req_ids
    else:
        assert victim.status == RequestStatus.PREEMPTED
        assert output.preempted_req_ids == {{victim.request_id}}
''',
    "B": '''

class TokenCapper(Scheduler):
    """Caps each request's tokens at ``cap`` (None: as the default does),
    recording what it is asked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cap: int | None = None
        self.asked: list[tuple[str, int]] = []

    def _cap_num_new_tokens(self, request: Request, num_new_tokens: int) -> int:
        self.asked.append((request.request_id, num_new_tokens))
        capped = super()._cap_num_new_tokens(request, num_new_tokens)
        return capped if self.cap is None else min(capped, self.cap)


def test_cap_num_new_tokens_chunks_prefill({mp_nofirst}):
    """A cap chunks a prefill, first in the waiting loop, then in the running
    loop; each step asks once, with the tokens left."""
    scheduler = _create_scheduler({mp_arg}TokenCapper)
    scheduler.cap = 32
    (request,) = create_requests(num_requests=1, num_tokens=80)
    scheduler.add_request(request)
    for left in (80, 48, 16):
        scheduler.asked.clear()
        output = scheduler.schedule()
        assert scheduler.asked == [(request.request_id, left)]
        assert output.num_scheduled_tokens == {{request.request_id: min(left, 32)}}


def test_cap_num_new_tokens_zero_defers({mp_nofirst}):
    """A cap of 0 leaves a running request unscheduled and a waiting one
    queued for the step; both are scheduled once the cap lifts."""
    scheduler = _create_scheduler({mp_arg}TokenCapper)
    running, waiting = create_requests(num_requests=2, req_ids=["running", "waiting"])
    scheduler.add_request(running)
    output = scheduler.schedule()
    scheduler.update_from_output(output, make_output(scheduler))

    scheduler.cap = 0
    scheduler.asked.clear()
    scheduler.add_request(waiting)
    output = scheduler.schedule()
    assert output.num_scheduled_tokens == {{}}
    assert [rid for rid, _ in scheduler.asked] == ["running", "waiting"]
    assert running.status == RequestStatus.RUNNING
    assert waiting.status == RequestStatus.WAITING

    scheduler.cap = None
    output = scheduler.schedule()
    assert output.num_scheduled_tokens == {{"running": 1, "waiting": 10}}
''',
}


def license_lines(upstream_test: str) -> str:
    """The leading ``# SPDX-`` lines of one of the release's own test files:
    a new file in vLLM's tree carries the project's header, read from the
    release at run time rather than written here."""
    lines = upstream_test.splitlines(keepends=True)
    head = [line for line in lines[:4] if line.startswith("# SPDX-")]
    if not head:
        raise ValueError("the release's test file starts with no SPDX lines")
    return "".join(head)


def test_file(seams: list[str], with_cls: bool, license: str) -> str:
    """``tests/v1/core/test_scheduler_seams.py`` holding the tests of
    ``seams`` (letters, in series order); ``with_cls``: the release's
    ``create_scheduler()`` takes ``scheduler_cls``; ``license``: its header
    lines (:func:`license_lines`)."""
    names = ["Admission", "Scheduler"] if "A" in seams else ["Scheduler"]
    text = HEADER.format(license=license, scheduler_names=", ".join(names))
    text += HELPER_WITH_CLS if with_cls else HELPER_SWAP
    facts = {
        "mp": "" if with_cls else ", monkeypatch: pytest.MonkeyPatch",
        "mp_nofirst": "" if with_cls else "monkeypatch: pytest.MonkeyPatch",
        "mp_arg": "" if with_cls else "monkeypatch, ",
    }
    for seam in seams:
        text += TESTS[seam].format(**facts)
    return "".join(_layout(line) for line in text.splitlines(keepends=True))


def _layout(line: str) -> str:
    """``line`` as ruff formats it: a call statement past vLLM's 88 columns
    (where the swapped helper's extra argument pushes it) gets its arguments
    on a line of their own."""
    if len(line) <= 89 or not line.rstrip().endswith(")"):
        return line
    indent = line[: len(line) - len(line.lstrip())]
    head, _, args = line.rstrip()[:-1].partition("(")
    return f"{head}(\n{indent}    {args}\n{indent})\n"
