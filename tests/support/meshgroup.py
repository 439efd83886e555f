# SPDX-License-Identifier: Apache-2.0
"""An in-process stand-in for a DP group's point-to-point messages.

:class:`~vllm_ascend_balance.replay.sim.dp_group.BoardGroup` serves the
all-gather of the simulated engine; the opt-in log-depth exchange
(``collectives.reduce_signals``) needs ``send``/``recv`` between ranks that
run concurrently. Here every rank runs in its own thread and a
:class:`MeshGroup` delivers through one FIFO queue per (source, destination,
tag), as gloo matches a receive to a send by peer and tag in order.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import torch

WAIT_S = 120.0  # hang guard only: a receive nobody sends fails, not hangs


class Mesh:
    """The queues shared by every rank of one in-process group."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._queues: dict[tuple[int, int, int], queue.Queue[torch.Tensor]] = {}
        self._lock = threading.Lock()
        self.sent = [0] * size

    def queue(self, src: int, dst: int, tag: int) -> queue.Queue[torch.Tensor]:
        with self._lock:
            return self._queues.setdefault((src, dst, tag), queue.Queue())


class _Done:
    def wait(self) -> bool:
        return True


class _Receive:
    def __init__(self, inbox: queue.Queue[torch.Tensor], into: torch.Tensor) -> None:
        self.inbox, self.into = inbox, into

    def wait(self) -> bool:
        self.into.copy_(self.inbox.get(timeout=WAIT_S))
        return True


class MeshGroup:
    """Duck-typed ``ProcessGroup`` of one rank: ``size``/``rank``/``send``/
    ``recv`` (what ``reduce_signals`` calls)."""

    def __init__(self, mesh: Mesh, rank: int) -> None:
        self.mesh, self.dp_rank = mesh, rank

    def size(self) -> int:
        return self.mesh.size

    def rank(self) -> int:
        return self.dp_rank

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        # A copy: the sender may reuse its buffer once the send completes.
        self.mesh.queue(self.dp_rank, dst, tag).put(tensors[0].clone())
        self.mesh.sent[self.dp_rank] += 1
        return _Done()

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        return _Receive(self.mesh.queue(src, self.dp_rank, tag), tensors[0])
