# SPDX-License-Identifier: Apache-2.0
"""How a DP rank learns the group's largest and smallest ``len(running)``.

The gate needs two numbers per step from the DP group: the largest running
count (``== cap`` freezes admission; the bounded-freeze run length is a
function of that decision sequence alone) and the smallest (for the
``balance_spread`` metric). Two strategies deliver them, chosen by
``additional_config.scheduler_config.balance_collective``:

- ``"all_gather"`` (default, the contract): ``dist.all_gather`` of
  ``len(running)``; every rank holds the whole vector
  (``balance_gathered``). gloo runs it as a ring: N-1 sequential message
  rounds per call.
- ``"all_reduce_max"`` (opt-in): ``[len, -len]`` reduced with MAX, so
  ``[max, -min]``, over a dissemination pattern of point-to-point messages:
  in round k rank r sends to ``r + 2**k`` and receives from ``r - 2**k``
  (mod N), ceil(log2 N) rounds. MAX is idempotent, so the windows that
  overlap when N is not a power of two change nothing (a SUM would count
  some ranks twice). gloo's own ``all_reduce`` is not used: it is a ring
  too (reduce-scatter then all-gather, 2(N-1) sequential hops).

Both return the same ``(max, min)`` for the same contributions, so the gate
decides the same on either (``tests/test_collectives.py``).

With ``balance_max_held_steps`` or ``balance_policy: "queued_leader"``
each rank also contributes two 0/1 flags, "I hold a request" (WAITING
non-empty, ``len(running)`` below the cap) and "I am at the cap with
requests waiting", and both exchanges return, per flag, whether any rank
set it: the all-gather's payload grows to ``[len(running), held, queued]``
(shape ``(3,)`` per rank), the log-depth exchange's to ``[len, -len, held,
queued]`` (MAX of a 0/1 flag is "any"); ``balance_policy: "aligned"``
adds a third flag, "I am below the cap with nothing waiting" (the flags are
each policy's, :mod:`~vllm_ascend_balance.gate.policies`). Without those settings
the payload is the contract's, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

#: ``(scheduler, group, local, flags) -> (max, min, any of each flag)`` over
#: the group; ``flags`` empty = the contract's payload.
Exchange = Callable[[Any, Any, int, tuple[int, ...]], tuple[int, int, tuple[bool, ...]]]
#: In-place ``combine(mine, received)`` of the log-depth exchange.
Combine = Callable[[torch.Tensor, torch.Tensor], Any]


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


def gather_extremes(
    scheduler: Any, group: Any, local: int, flags: tuple[int, ...] = ()
) -> tuple[int, int, tuple[bool, ...]]:
    """The contract: all-gather ``local`` into ``scheduler.balance_gathered``
    (index = DP rank; shape ``(dp_size,)``, or ``(dp_size, 1 + len(flags))``
    with the flags as the further columns). The receive buffer is sized from
    the group at every call, so a group replaced at run time keeps working."""
    size = group.size()
    width = 1 + len(flags)
    shape = (size,) if width == 1 else (size, width)
    gathered = scheduler.balance_gathered
    if gathered is None or tuple(gathered.shape) != shape:
        gathered = scheduler.balance_gathered = torch.zeros(shape, dtype=torch.int64)
        # Views of one buffer: max()/min() then read every slot at once.
        scheduler._balance_slots = (
            list(gathered.split(1)) if width == 1 else list(gathered.unbind(0))
        )
        scheduler._balance_local = torch.zeros(width, dtype=torch.int64)
    scheduler._balance_local[0] = local
    for i, flag in enumerate(flags, 1):
        scheduler._balance_local[i] = flag
    # The list form (as vllm-ascend uses) works on gloo and HCCL alike and
    # is not deprecated.
    dist.all_gather(scheduler._balance_slots, scheduler._balance_local, group=group)
    if width == 1:
        return int(gathered.max()), int(gathered.min()), ()
    running = gathered[:, 0]
    anyone = tuple(bool(x) for x in gathered[:, 1:].amax(dim=0).tolist())
    return int(running.max()), int(running.min()), anyone


def _combine_max(mine: torch.Tensor, received: torch.Tensor) -> None:
    torch.maximum(mine, received, out=mine)


def reduce_extremes(
    scheduler: Any,
    group: Any,
    local: int,
    flags: tuple[int, ...] = (),
    combine: Combine = _combine_max,
) -> tuple[int, int, tuple[bool, ...]]:
    """Opt-in: ``[max, -min, *flags]`` by MAX over the dissemination rounds,
    on the group's own point-to-point ``send``/``recv`` (no global rank
    needed, so it works on vLLM's stateless DP group). ``combine`` exists
    for the tests' negative controls only."""
    width = 2 + len(flags)
    pair = getattr(scheduler, "_balance_pair", None)
    if pair is None or pair[0].numel() != width:
        pair = scheduler._balance_pair = (
            torch.zeros(width, dtype=torch.int64),
            torch.zeros(width, dtype=torch.int64),
        )
    mine, inbox = pair
    mine[0], mine[1] = local, -local
    for i, flag in enumerate(flags, 2):
        mine[i] = flag
    for tag, (send_to, receive_from) in enumerate(
        dissemination_peers(group.rank(), group.size())
    ):
        # Both posted before either is awaited (no pair waits on the other),
        # send first: on gloo a receive posted before the send was measured
        # ~50x slower per round on loopback (benchmarks/bench_gather.py).
        # Both complete before combining: ``mine`` is the send buffer.
        sent = group.send([mine], send_to, tag)
        received = group.recv([inbox], receive_from, tag)
        sent.wait()
        received.wait()
        combine(mine, inbox)
    anyone = tuple(bool(x) for x in mine[2:].tolist())
    return int(mine[0]), -int(mine[1]), anyone


EXCHANGES: dict[str, Exchange] = {
    "all_gather": gather_extremes,
    "all_reduce_max": reduce_extremes,
}
