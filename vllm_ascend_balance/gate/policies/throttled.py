# SPDX-License-Identifier: Apache-2.0
"""``throttled``: new requests enter on steps every rank with room takes
together; between those steps, ranks with decodes to run also defer the
prefill chunks they have in flight (opt-in, recommended)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.gate.policies.base import Decision, Knob, Policy
from vllm_ascend_balance.gate.signals import View

#: ``since`` before the first opening: the first request is never held for
#: a batching wait.
NEVER = 1 << 30

WINDOW = Knob(
    "balance_align_window",
    int,
    16,
    1,
    4096,
    "the longest batching wait, in steps (reached when every rank is at the cap)",
)

_IDLE = Decision(True, False, "idle")
_STARVED = Decision(False, False, "starved")
_QUEUED = Decision(True, True, "queued_leader")
_WAIT = Decision(True, True, "batching_wait")
_OPENING = Decision(False, False, "opening")


def batching_wait(window: int, lowest: int, cap: int) -> int:
    """Steps an opening waits for more prefills to join it:
    ``ceil(window * (lowest / cap) ** 2)`` of the smallest running count, so
    none while some rank runs nothing and ``window`` when every rank is at
    the cap (the decode work a wait protects grows with the load; the TTFT
    it costs matters most where it protects little). Integers only, so every
    rank computes the same."""
    if cap <= 0:
        return 0
    fill = max(0, min(lowest, cap))
    return -(-window * fill * fill // (cap * cap))


def decide(since: int, view: View, knobs: Mapping[str, Any]) -> tuple[int, Decision]:
    """One step, from the gathered ``(leader, lowest, held, queued,
    starved)``; ``since``: steps since the last opening (this one included).

    1. no rank below its cap has requests waiting (``held`` false):
       admission closed (a request arriving now waits for the next
       opening), chunks run: nothing waits that a hold could align with;
    2. some rank has requests waiting and none running (``starved``): open;
    3. some rank at its cap has requests waiting (``queued``): hold
       admission and chunks in flight until it can join;
    4. open once ``batching_wait(W, lowest, cap)`` steps or more passed
       since the last opening, else hold admission and chunks.

    A step that opens with requests to admit restarts ``since``.
    """
    since += 1
    if not view.held:
        return since, _IDLE
    if view.starved:
        return 0, _STARVED
    if view.queued:
        return since, _QUEUED
    if since < batching_wait(knobs[WINDOW.key], view.lowest, view.cap):
        return since, _WAIT
    return 0, _OPENING


POLICY = Policy(
    name="throttled",
    summary=(
        "new requests and chunks in flight wait for a step every rank with "
        "room takes together, after a batching wait that grows with the "
        "least loaded rank's running count"
    ),
    signals=("held", "queued", "starved"),
    decide=decide,
    initial=NEVER,
    knobs=(WINDOW,),
    holds_chunks=True,
    default_max_held_steps=64,
    source=(
        "TensorRT-LLM PyExecutor._balance_adp_requests (batching_wait_iters); "
        "vLLM DPEngineCoreProc._should_throttle_prefills"
    ),
)
