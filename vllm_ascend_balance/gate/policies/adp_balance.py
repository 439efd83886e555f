# SPDX-License-Identifier: Apache-2.0
"""``adp_balance``: TensorRT-LLM's attention-DP balance on this gate
(opt-in): context work runs on steps every rank has some, after a short
batching wait, or once a timeout passes.

Source: TensorRT-LLM ``tensorrt_llm/_torch/pyexecutor/py_executor.py``
``PyExecutor._balance_adp_requests`` (NVIDIA/TensorRT-LLM#6061), knobs and
defaults from ``AttentionDpConfig`` (``timeout_iters`` 50,
``batching_wait_iters`` 10) in ``tensorrt_llm/llmapi/llm_args.py``; the
replay's peer model of it is
:class:`~vllm_ascend_balance.replay.peers.trtllm_adp.TrtllmAttentionDpBalance`.

What the source's counts become here (one flag each, from the exchange):

- a rank *has context* (``all_context``: every rank has): a prefill chunk
  in flight, or requests waiting with ``len(running)`` below the cap. The
  source counts what its scheduler fitted (slots, token budget, KV); the
  token budget and KV checks are not read here;
- a rank *has generation work* (``all_decoding``): a running request past
  its prompt, or no work at all (the source's dummy generation request on
  a rank with no active request).

A hold holds admission of WAITING requests and chunks in flight (the
source drops every rank's context requests for the iteration). Chunks are
deferred through vLLM's ``schedule(throttle_prefills=True)``, which defers
a chunk only on a rank with a decode to run; the rule holds only while
every rank has generation work, so that is every rank with a chunk. The
gate's own rules still apply: chunks only on a step some rank is *held*,
and the hold bound (64 steps when none is configured).

Not ported: the low-occupancy timeout of NVIDIA/TensorRT-LLM#17700
(``TLLM_ADP_BALANCE_MIN_GENERATION_REQUESTS``, off by default there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_ascend_balance.gate.policies.base import Decision, Knob, Policy
from vllm_ascend_balance.gate.signals import View

TIMEOUT = Knob(
    "balance_timeout_iters",
    int,
    50,
    0,
    65536,
    "steps context waits for every rank to have some, TensorRT-LLM's timeout_iters",
)
BATCHING_WAIT = Knob(
    "balance_batching_wait_iters",
    int,
    10,
    0,
    65536,
    "steps context waits to batch more once every rank has some, TensorRT-LLM's "
    "batching_wait_iters",
)

#: ``(waiting_iters, batching_iters)``, the source's two counters.
State = tuple[int, int]
INITIAL: State = (0, 0)

_BATCHING = Decision(True, True, "batching_wait")
_UNSYNCED = Decision(True, True, "unsynchronised")
_NO_DECODE = Decision(False, False, "no_decode")
_BATCHED = Decision(False, False, "batched")
_TIMEOUT = Decision(False, False, "timeout")


def decide(
    state: State, view: View, knobs: Mapping[str, Any]
) -> tuple[State, Decision]:
    """One step of ``_balance_adp_requests`` from the gathered
    ``(all_context, all_decoding)``; ``state``: ``(waiting_iters,
    batching_iters)``.

    1. every rank has context (synchronised): ``waiting_iters`` restarts;
       some rank has no generation work: open; else hold while
       ``batching_iters < balance_batching_wait_iters`` (counting it up),
       then open once and restart it;
    2. otherwise ``waiting_iters`` counts up; open (and restart it) once it
       reaches ``balance_timeout_iters`` or some rank has no generation
       work, else hold.

    The source also requires for case 1 that no rank is full (generation
    requests at ``max_batch_size``). Here it is implied: a rank with
    context is below the cap (*held*) or has a chunk in flight, which takes
    a running slot that no generation request has, so its generation work
    is below the cap either way.
    """
    waiting, batching = state
    if view.all_context:
        if not view.all_decoding:
            return (0, batching), _NO_DECODE
        if batching < knobs[BATCHING_WAIT.key]:
            return (0, batching + 1), _BATCHING
        return INITIAL, _BATCHED
    waiting += 1
    if not view.all_decoding:
        return (0, batching), _NO_DECODE
    if waiting >= knobs[TIMEOUT.key]:
        return (0, batching), _TIMEOUT
    return (waiting, batching), _UNSYNCED


POLICY = Policy(
    name="adp_balance",
    summary=(
        "TensorRT-LLM's attention-DP balance: context (new requests and "
        "chunks in flight) waits until every rank has some, then a short "
        "batching wait, or a timeout"
    ),
    signals=("all_context", "all_decoding"),
    decide=decide,
    initial=INITIAL,
    knobs=(TIMEOUT, BATCHING_WAIT),
    holds_chunks=True,
    default_max_held_steps=64,
    source=(
        "TensorRT-LLM tensorrt_llm/_torch/pyexecutor/py_executor.py "
        "PyExecutor._balance_adp_requests (NVIDIA/TensorRT-LLM#6061)"
    ),
)
