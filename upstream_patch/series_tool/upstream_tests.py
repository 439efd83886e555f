# SPDX-License-Identifier: Apache-2.0
"""The upstream tests the series appends to ``tests/v1/core/test_scheduler.py``
(templates; :mod:`.emit_tests` fills them for one release)."""

from __future__ import annotations

TEST_BODY = '''

class _AdmissionGate:
    """{gate_doc}"""

    closed = False

    def {seam}(self) -> bool:
        return self.closed


class GatedScheduler(_AdmissionGate, Scheduler):
    pass


class GatedAsyncScheduler(_AdmissionGate, AsyncScheduler):
    pass


{throttle_mark}@pytest.mark.parametrize("async_scheduling", [False, True])
def test_should_stop_admitting_waiting_override({params}):
    """{override_doc}"""
    gated = GatedAsyncScheduler if async_scheduling else GatedScheduler
{make}
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
    output = scheduler.schedule({throttle_arg})
    admitted = [req.req_id for req in output.scheduled_new_reqs]
    assert admitted == [requests[2].request_id]
    assert set(output.num_scheduled_tokens) == running | {{requests[2].request_id}}
'''
OVERRIDE_DOC = (
    "While _should_stop_admitting_waiting() returns True, running requests "
    "are scheduled and no waiting request is admitted; once it returns False, "
    "admission resumes up to max_num_seqs, never past it."
)
# Where schedule() records prefill_capacity_bound and takes throttle_prefills
# (#44558): the step after a held one is also run throttled, so a change to
# the coupling fails here, by name.
OVERRIDE_DOC_COUPLED = (
    "While _should_stop_admitting_waiting() returns True, running requests "
    "are scheduled and no waiting request is admitted. The next step admits "
    "up to max_num_seqs, even throttled: a held step leaves requests waiting, "
    "so it counts as prefill_capacity_bound (a held rank catches up)."
)
THROTTLE_MARK = '@pytest.mark.parametrize("throttle_prefills", [False, True])\n'
TEST_COUNT_BODY = '''

class CountingScheduler(Scheduler):
    """Counts the _should_stop_admitting_waiting() calls; never holds."""

    calls = 0

    def {seam}(self) -> bool:
        self.calls += 1
        return False


def test_should_stop_admitting_waiting_asked_once_per_schedule({count_params}):
    """{count_doc}"""
{count_make}
    for request in create_requests(num_requests=5):
        scheduler.add_request(request)
{pause_block}    output = scheduler.schedule()
    assert len(output.scheduled_new_reqs) == 3  # three admissions, one call
    assert scheduler.calls == 1
'''
COUNT_DOC = (
    "The hook is asked once per schedule() call, not per admission: an "
    "override may be costly, and one that syncs ranks relies on it."
)
# Where the loop keeps the pause test inline next to the hook (0.34 on).
COUNT_DOC_PAUSE = (
    "The hook is asked once per schedule() call, not per admission (an "
    "override may be costly; one that syncs ranks relies on it), and not "
    'while paused: pause(mode="wait") (PAUSED_NEW) holds new requests '
    "whatever an override returns."
)
PAUSE_BLOCK = """\
    scheduler.set_pause_state(PauseState.PAUSED_NEW)
    assert scheduler.schedule().scheduled_new_reqs == []
    assert scheduler.calls == 0
    scheduler.set_pause_state(PauseState.UNPAUSED)
"""
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
# Where the loop starts async KV loads from self.async_kv_waiting under
# --max-num-inflight-kv-loads (0.34 on): a held step starts none, at the
# running cap (the loop's loads-only branch) or below it.
TEST_ASYNC_KV_BODY = '''

@pytest.mark.parametrize("max_num_seqs", [1, 2], ids=["at-cap", "below-cap"])
def test_should_stop_admitting_waiting_kv_scope({kv_params}):
    """With --max-num-inflight-kv-loads, a held step admits a request whose KV
    has arrived (kv_holding_waiting, as under PAUSED_NEW) and starts no async KV
    load, at the running cap or below it: a load started then would join
    kv_holding_waiting and be admitted within the same hold."""
    block_size = 16
{kv_make}
    loaded, remote = create_requests(
        num_requests=2,
        num_tokens=3 * block_size,
        block_size=block_size,
        req_ids=["loaded", "remote"],
    )
    remote.kv_transfer_params = {{"do_remote_prefill": True}}  # async_kv_waiting
    scheduler.add_request(loaded)
    output = scheduler.schedule()
    assert loaded.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    scheduler.update_from_output(output, _runner_output([], {{"loaded"}}))

    scheduler.closed = True
    scheduler.add_request(remote)
    output = scheduler.schedule()
    assert set(output.num_scheduled_tokens) == {{"loaded"}}
    assert remote.status == RequestStatus.WAITING
    scheduler.update_from_output(output, _runner_output(["loaded"]))

    scheduler.closed = False
    scheduler.schedule()
    assert remote.status == RequestStatus.WAITING_FOR_REMOTE_KVS
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
    scheduler = create_scheduler({kv_seqs}
        use_kv_connector=mock_kv(matched_tokens=2 * block_size, is_async=True),
        block_size=block_size,
        scheduler_cls=GatedScheduler,
    )"""
KV_MAKE_SWAP = """\
    monkeypatch.setitem(create_scheduler.__globals__, "Scheduler", GatedScheduler)
    scheduler = create_scheduler({kv_seqs}
        use_kv_connector=mock_kv(matched_tokens=2 * block_size, is_async=True),
        block_size=block_size,
    )"""
COUNT_MAKE_WITH_CLS = """\
    scheduler = create_scheduler(max_num_seqs=3, scheduler_cls=CountingScheduler)"""
COUNT_MAKE_SWAP = """\
    monkeypatch.setitem(create_scheduler.__globals__, "Scheduler", CountingScheduler)
    scheduler = create_scheduler(max_num_seqs=3)"""
ASYNC_IMPORT = "from vllm.v1.core.sched.async_scheduler import AsyncScheduler\n"
