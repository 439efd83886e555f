# SPDX-License-Identifier: Apache-2.0
"""An in-process stand-in for the DP group, for the simulated engine.

In a real deployment each DP rank's ``BalanceSchedulerMixin.admission_gather``
calls ``torch.distributed.all_gather(slots, local, group=dp_group)`` and every
rank receives the same vector of ``len(running)``. The simulated engine
(:mod:`vllm_ascend_balance.replay.sim`) holds all N schedulers in one process,
so there is no peer to exchange with; :class:`BoardGroup` is passed as their
``dp_group`` instead. ``dist.all_gather`` (torch's own function) accepts any
object with an ``allgather(output_tensor_lists, input_tensor_list, opts)``
method and, when that returns None, treats the collective as already complete;
the stand-in fills the receive slots from a :class:`GatherBoard` the simulation
filled with every scheduler's ``len(running)`` beforehand. The gate's decision
(what ``admission_gather`` computes from the received vector) is the mixin's
own code, unchanged.

This stands in for what cannot run in one process (N peers of a gloo/HCCL
group); ``tests/test_replay_sim.py`` checks it against real gloo groups'
behaviour: same vector on every rank, one gather per active step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)


class GatherBoard:
    """The values every rank contributes to the current gather.

    Attributes:
        vector: int64 tensor of shape ``(dp_size,)``, or ``(dp_size, 3)``
            where the ranks contribute flags too; index = DP rank.
        values: each rank's ``len(running)`` as a Python list.
        rows: each rank's whole contribution, as tuples.
        gathers: gathers completed per rank.
    """

    def __init__(self, dp_size: int) -> None:
        self.dp_size = dp_size
        self.vector = torch.zeros(dp_size, dtype=torch.int64)
        self.values: list[int] = [0] * dp_size
        self.rows: list[tuple[int, ...]] = [(0,)] * dp_size
        self.gathers: list[int] = [0] * dp_size

    def post(self, payloads: Sequence[int | tuple[int, ...]]) -> None:
        """Every rank's contribution to the next gather, index = DP rank:
        ``BalanceSchedulerMixin.admission_payload()`` of each (its
        quantities, ``len(running)`` first), or a bare ``len(running)``."""
        rows = [p if isinstance(p, tuple) else (p,) for p in payloads]
        self.values = [row[0] for row in rows]
        self.rows = rows
        vector = torch.tensor(rows, dtype=torch.int64)
        self.vector = vector[:, 0] if vector.shape[1] == 1 else vector


class BoardGroup:
    """Duck-typed ``ProcessGroup`` of one rank, serving ``all_gather`` only.

    Raises:
        RuntimeError: a rank contributes a value other than the one posted
            on the board (the simulation posted stale counts), or a
            collective other than ``allgather`` is called on it
            (``AttributeError``).
    """

    def __init__(self, board: GatherBoard, rank: int) -> None:
        self.board = board
        self.dp_rank = rank

    def size(self) -> int:
        return self.board.dp_size

    def rank(self) -> int:
        return self.dp_rank

    def allgather(
        self,
        output_tensor_lists: list[list[torch.Tensor]],
        input_tensor_list: list[torch.Tensor],
        opts: Any = None,
    ) -> None:
        board = self.board
        (slots,), (local,) = output_tensor_lists, input_tensor_list
        sent = tuple(int(x) for x in local.reshape(-1))
        if sent != board.rows[self.dp_rank]:
            shown = [
                row[0] if len(row) == 1 else list(row)
                for row in (sent, board.rows[self.dp_rank])
            ]
            raise RuntimeError(
                f"simulated DP rank {self.dp_rank} sends {shown[0]} but "
                f"{shown[1]} was posted for it"
            )
        # The mixin's slots are views of one buffer: one copy into that
        # buffer fills them all, keeping a step O(N).
        base = slots[0]._base
        if (
            base is not None
            and base.numel() == board.vector.numel()
            and slots[0].data_ptr() == base.data_ptr()
        ):
            base.copy_(board.vector.view_as(base))
        else:
            for slot, row in zip(slots, board.vector.unbind(0), strict=True):
                slot.copy_(row.reshape(slot.shape))
        board.gathers[self.dp_rank] += 1
        return None

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"the simulated DP group serves all_gather only, not {name!r}"
        )
