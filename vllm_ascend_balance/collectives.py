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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

#: ``(scheduler, group, local) -> (max, min)`` over the group.
Exchange = Callable[[Any, Any, int], tuple[int, int]]
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


def gather_extremes(scheduler: Any, group: Any, local: int) -> tuple[int, int]:
    """The contract: all-gather ``local`` into ``scheduler.balance_gathered``
    (index = DP rank). The receive buffer is sized from the group at every
    call, so a group replaced at run time keeps working."""
    size = group.size()
    gathered = scheduler.balance_gathered
    if gathered is None or gathered.numel() != size:
        gathered = scheduler.balance_gathered = torch.zeros(size, dtype=torch.int64)
        scheduler._balance_slots = list(gathered.split(1))
        scheduler._balance_local = torch.zeros(1, dtype=torch.int64)
    scheduler._balance_local[0] = local
    # The list form (as vllm-ascend uses) works on gloo and HCCL alike and
    # is not deprecated; the slots are views, so max()/min() read them all.
    dist.all_gather(scheduler._balance_slots, scheduler._balance_local, group=group)
    return int(gathered.max()), int(gathered.min())


def _combine_max(mine: torch.Tensor, received: torch.Tensor) -> None:
    torch.maximum(mine, received, out=mine)


def reduce_extremes(
    scheduler: Any, group: Any, local: int, combine: Combine = _combine_max
) -> tuple[int, int]:
    """Opt-in: ``[max, -min]`` by MAX over the dissemination rounds, on the
    group's own point-to-point ``send``/``recv`` (no global rank needed, so
    it works on vLLM's stateless DP group). ``combine`` exists for the
    tests' negative controls only."""
    pair = getattr(scheduler, "_balance_pair", None)
    if pair is None:
        pair = scheduler._balance_pair = (
            torch.zeros(2, dtype=torch.int64),
            torch.zeros(2, dtype=torch.int64),
        )
    mine, inbox = pair
    mine[0], mine[1] = local, -local
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
    return int(mine[0]), -int(mine[1])


EXCHANGES: dict[str, Exchange] = {
    "all_gather": gather_extremes,
    "all_reduce_max": reduce_extremes,
}
