# SPDX-License-Identifier: Apache-2.0
"""How a DP rank learns the group's view: the exchange behind each gate step.

Every rank contributes its quantities (:mod:`~vllm_ascend_balance.gate.signals`)
and receives the same combined signals (a
:class:`~vllm_ascend_balance.gate.signals.View`).
Two exchanges deliver them, chosen by
``additional_config.scheduler_config.balance_collective``, or by the policy
where that is unset (:func:`natural_collective`):

- ``"all_gather"`` (the contract's: vllm-ascend all-gathers
  ``len(running)``): ``dist.all_gather`` of the rank's quantities; every
  rank holds the whole ``(dp_size, quantities)`` matrix
  (``balance_gathered``) and combines its columns. gloo runs it as a ring:
  N-1 sequential message rounds per call.
- ``"all_reduce_max"``: one slot per signal, encoded so that MAX combines
  it (``min`` as the maximum of the negated values, ``any`` as the maximum
  of 0/1 flags), over a dissemination pattern of point-to-point messages:
  in round k rank r sends to ``r + 2**k`` and receives from ``r - 2**k``
  (mod N), ceil(log2 N) rounds. MAX is idempotent, so the windows that
  overlap when N is not a power of two change nothing (a SUM would count
  some ranks twice). gloo's own ``all_reduce`` is not used: it is a ring too
  (reduce-scatter then all-gather, 2(N-1) sequential hops).

Both give the same view for the same contributions, so the gate decides the
same on either (``tests/test_collectives.py``). Rounds per step for each
policy: docs/gather-cost.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from vllm_ascend_balance.gate.signals import Layout, View, combine

#: ``(scheduler, group, layout, local, cap) -> view``: one exchange over
#: ``group`` of this rank's quantities ``local`` (in ``layout`` order).
Exchange = Callable[[Any, Any, Layout, tuple[int, ...], int], View]
#: In-place ``combine(mine, received)`` of the log-depth exchange.
Combine = Callable[[torch.Tensor, torch.Tensor], Any]


def natural_collective(policy_collective: str | None) -> str:
    """The exchange a policy runs on where ``balance_collective`` is unset:
    its own declaration, else the log-depth one (every signal combines by an
    idempotent operation, so no per-rank vector is needed)."""
    return policy_collective or "all_reduce_max"


def dissemination_peers(rank: int, size: int) -> list[tuple[int, int]]:
    """``(send_to, receive_from)`` per round of the log-depth exchange."""
    peers = []
    step = 1
    while step < size:
        peers.append(((rank + step) % size, (rank - step) % size))
        step *= 2
    return peers


def rounds(collective: str, size: int) -> int:
    """Sequential message rounds per call (the latency-bound part): gloo's
    ring all_gather, or the dissemination exchange."""
    if collective == "all_gather":
        return size - 1
    return len(dissemination_peers(0, size))


def gather_rows(
    scheduler: Any, group: Any, layout: Layout, local: tuple[int, ...], cap: int
) -> View:
    """All-gather ``local`` into ``scheduler.balance_gathered`` (index = DP
    rank; shape ``(dp_size,)`` for the contract's ``len(running)`` alone,
    else ``(dp_size, len(local))``) and combine its columns. The receive
    buffer is sized from the group at every call, so a group replaced at run
    time keeps working."""
    size = group.size()
    width = len(local)
    shape = (size,) if width == 1 else (size, width)
    gathered = scheduler.balance_gathered
    if gathered is None or tuple(gathered.shape) != shape:
        gathered = scheduler.balance_gathered = torch.zeros(shape, dtype=torch.int64)
        # Views of one buffer: one read then covers every slot.
        scheduler._balance_slots = (
            list(gathered.split(1)) if width == 1 else list(gathered.unbind(0))
        )
        scheduler._balance_local = torch.zeros(width, dtype=torch.int64)
    for i, value in enumerate(local):
        scheduler._balance_local[i] = value
    # The list form (as vllm-ascend uses) works on gloo and HCCL alike and
    # is not deprecated.
    dist.all_gather(scheduler._balance_slots, scheduler._balance_local, group=group)
    rows = gathered.reshape(size, width).tolist()
    return combine(layout, rows, cap, size)


def _combine_max(mine: torch.Tensor, received: torch.Tensor) -> None:
    torch.maximum(mine, received, out=mine)


def reduce_signals(
    scheduler: Any,
    group: Any,
    layout: Layout,
    local: tuple[int, ...],
    cap: int,
    combine_: Combine = _combine_max,
) -> View:
    """One slot per signal, MAX-reduced over the dissemination rounds on the
    group's own point-to-point ``send``/``recv`` (no global rank needed, so
    it works on vLLM's stateless DP group). ``combine_`` exists for the
    tests' negative controls only."""
    index = {q: i for i, q in enumerate(layout.quantities)}
    signals = layout.signals
    width = len(signals)
    pair = getattr(scheduler, "_balance_pair", None)
    if pair is None or pair[0].numel() != width:
        pair = scheduler._balance_pair = (
            torch.zeros(width, dtype=torch.int64),
            torch.zeros(width, dtype=torch.int64),
        )
    mine, inbox = pair
    for i, s in enumerate(signals):
        value = local[index[s.quantity]]
        mine[i] = -value if s.combine == "min" else value
    for tag, (send_to, receive_from) in enumerate(
        dissemination_peers(group.rank(), group.size())
    ):
        # Both posted before either is awaited (no pair waits on the other),
        # send first: on gloo a receive posted before the send is far slower
        # per round (docs/gather-cost.md).
        # Both complete before combining: ``mine`` is the send buffer.
        sent = group.send([mine], send_to, tag)
        received = group.recv([inbox], receive_from, tag)
        sent.wait()
        received.wait()
        combine_(mine, inbox)
    values: dict[str, int | bool] = {}
    for s, value in zip(signals, mine.tolist(), strict=True):
        values[s.name] = (
            -value
            if s.combine == "min"
            else (bool(value) if s.combine == "any" else value)
        )
    return View(cap, group.size(), values)


EXCHANGES: dict[str, Exchange] = {
    "all_gather": gather_rows,
    "all_reduce_max": reduce_signals,
}
