# SPDX-License-Identifier: Apache-2.0
"""The upstream tests the series appends to ``tests/v1/core/test_scheduler.py``
(templates; :mod:`.emit_tests` fills them for one release)."""

from __future__ import annotations

TEST_BODY = '''

class _AdmissionGate:
    """Admits no request from ``self.waiting`` while ``closed`` is set."""

    closed = False

    def {seam}(self) -> bool:
        return {gate_return}


class GatedScheduler(_AdmissionGate, Scheduler):
    pass


class GatedAsyncScheduler(_AdmissionGate, AsyncScheduler):
    pass


def _run_two_then_hold(scheduler: Scheduler) -> tuple[list[Request], set[str]]:
    """Runs two of five requests, then holds one step with three waiting:
    the running requests are scheduled, no waiting one is admitted."""
    requests = create_requests(num_requests=5)
    running = {{req.request_id for req in requests[:2]}}
    for request in requests[:2]:
        scheduler.add_request(request)
    output = scheduler.schedule()
    assert {{req.req_id for req in output.scheduled_new_reqs}} == running
    scheduler.update_from_output(output, make_output(scheduler))

    scheduler.closed = True
    for request in requests[2:]:
        scheduler.add_request(request)
    output = scheduler.schedule()
    assert output.scheduled_new_reqs == []
    assert set(output.num_scheduled_tokens) == running
    scheduler.update_from_output(output, make_output(scheduler))
    scheduler.closed = False
    return requests, running


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_should_stop_admitting_waiting_override({params}):
    """While _should_stop_admitting_waiting() returns True, running requests
    are scheduled and no waiting request is admitted; once it returns False,
    admission resumes up to max_num_seqs, never past it."""
    gated = GatedAsyncScheduler if async_scheduling else GatedScheduler
{make}
    requests, running = _run_two_then_hold(scheduler)

    output = scheduler.schedule()
    admitted = [req.req_id for req in output.scheduled_new_reqs]
    assert admitted == [requests[2].request_id]
    assert set(output.num_scheduled_tokens) == running | {{requests[2].request_id}}
'''
# Where schedule() records prefill_capacity_bound and takes throttle_prefills
# (#44558): the coupling, as its own test, so a change to it fails by name.
TEST_HELD_BODY = '''

@pytest.mark.parametrize("async_scheduling", [False, True])
def test_should_stop_admitting_waiting_held_step_is_capacity_bound({params}):
    """A held step leaves requests waiting, so it counts as
    prefill_capacity_bound: the next throttled step admits (a held rank
    catches up) instead of deferring its prefills."""
    gated = GatedAsyncScheduler if async_scheduling else GatedScheduler
{make}
    requests, running = _run_two_then_hold(scheduler)

    output = scheduler.schedule(throttle_prefills=True)
    admitted = [req.req_id for req in output.scheduled_new_reqs]
    assert admitted == [requests[2].request_id]
    assert set(output.num_scheduled_tokens) == running | {{requests[2].request_id}}
'''
TEST_COUNT_BODY = '''

class CountingScheduler(Scheduler):
    """Counts the _should_stop_admitting_waiting() calls."""

    calls = 0

    def {seam}(self) -> bool:
        self.calls += 1
        return super().{seam}()


def test_should_stop_admitting_waiting_asked_once_per_schedule({count_params}):
    """The hook is asked once per schedule() call, not per admission: an
    override may be costly, and one that syncs ranks relies on it."""
{count_make}
    for request in create_requests(num_requests=5):
        scheduler.add_request(request)
    output = scheduler.schedule()
    assert len(output.scheduled_new_reqs) == 3  # three admissions, one call
    assert scheduler.calls == 1
'''
TEST_KV_BODY = '''

def test_should_stop_admitting_waiting_admits_kv_holding_requests({kv_params}):
    """While _should_stop_admitting_waiting() returns True, a request whose KV
    arrived by an async load (kv_holding_waiting) is still admitted, as under
    PauseState.PAUSED_NEW; a new request is not."""
    block_size = 16
{kv_make}
    loading, new = create_requests(
        num_requests=2,
        num_tokens=3 * block_size,
        block_size=block_size,
        req_ids=["loading", "new"],
    )
    scheduler.add_request(loading)
    output = scheduler.schedule()
    assert loading.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    scheduler.update_from_output(output, _runner_output([], {{"loading"}}))

    scheduler.closed = True
    scheduler.add_request(new)
    output = scheduler.schedule()
    assert set(output.num_scheduled_tokens) == {{"loading"}}
    assert new.status == RequestStatus.WAITING
'''
MAKE_WITH_CLS = """\
    scheduler = create_scheduler(
        max_num_seqs=3, async_scheduling=async_scheduling, scheduler_cls=gated
    )"""
# Releases whose create_scheduler() takes no scheduler_cls pick the class
# from the helper module's globals: the test swaps it there for its own run
# (monkeypatch), leaving the shared helper's code untouched.
MAKE_SWAP = """\
    name = "AsyncScheduler" if async_scheduling else "Scheduler"
    monkeypatch.setitem(create_scheduler.__globals__, name, gated)
    scheduler = create_scheduler(max_num_seqs=3, async_scheduling=async_scheduling)"""
KV_MAKE_WITH_CLS = """\
    scheduler = create_scheduler(
        use_kv_connector=mock_kv(matched_tokens=2 * block_size, is_async=True),
        block_size=block_size,
        scheduler_cls=GatedScheduler,
    )"""
KV_MAKE_SWAP = """\
    monkeypatch.setitem(create_scheduler.__globals__, "Scheduler", GatedScheduler)
    scheduler = create_scheduler(
        use_kv_connector=mock_kv(matched_tokens=2 * block_size, is_async=True),
        block_size=block_size,
    )"""
COUNT_MAKE_WITH_CLS = """\
    scheduler = create_scheduler(max_num_seqs=3, scheduler_cls=CountingScheduler)"""
COUNT_MAKE_SWAP = """\
    monkeypatch.setitem(create_scheduler.__globals__, "Scheduler", CountingScheduler)
    scheduler = create_scheduler(max_num_seqs=3)"""
ASYNC_IMPORT = "from vllm.v1.core.sched.async_scheduler import AsyncScheduler\n"
