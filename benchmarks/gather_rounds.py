# SPDX-License-Identifier: Apache-2.0
"""Sequential message rounds of the DP collectives, counted on real gloo
groups, and the latency model built on them (used by ``bench_gather.py``).

Why rounds: on a cluster the gather's latency is (sequential rounds) x (one
host-to-host hop), and the round count of an algorithm does not depend on
CPU contention, unlike a timing on 2 shared cores. The algorithms, from
gloo's source (``gloo/allgather.cc``, ``gloo/allreduce.cc``, the ones
``ProcessGroupGloo`` calls for a CPU tensor):

- ``all_gather`` / ``all_gather_into_tensor``: a ring; each rank sends to
  rank+1 and receives from rank-1, N-1 rounds, each block split in two
  halves sent back to back (2(N-1) data messages per rank, pipelined).
- ``all_reduce`` (any op): a ring reduce-scatter then a ring all-gather,
  both towards rank-1. A tiny tensor fills one chunk only: empty segments
  are skipped, so each rank sends it once or twice per phase, but each send
  waits for the previous rank's: 2(N-1) sequential hops.
- the package's opt-in ``all_reduce_max``
  (:mod:`vllm_ascend_balance.gate.collectives`): dissemination, ceil(log2 N)
  rounds of one send + one receive, to a different peer each round.

Confirmation: every rank process attaches ``strace -f`` to itself (all its
threads: gloo's I/O runs on its own loop thread) and counts, between two
marker syscalls around K calls, the data messages it writes (``writev``
with a payload after gloo's 48-byte header), the payload reads, and the
distinct sockets it sends on. Each counting rank builds its gloo group with
the same torch classes as vLLM's ``init_gloo_process_group`` (a
``ProcessGroup`` with a ``ProcessGroupGloo`` backend over a prefixed
``TCPStore``) but without importing vLLM, so 16 ranks fit in memory.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401


from benchmarks.gather.strace_messages import MARK, parse_trace  # noqa: E402
from vllm_ascend_balance.loopback_ports import free_loopback_port  # noqa: E402

JOIN_TIMEOUT_S = 600  # hang guard only
#: The collectives counted: name -> modeled sequential rounds for N ranks.
OPS = ("all_gather", "all_gather_into_tensor", "all_reduce_sum", "all_reduce_max")


def ring_gather_rounds(n: int) -> int:
    return n - 1


def ring_reduce_rounds(n: int) -> int:
    return 2 * (n - 1)


def log_rounds(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


MODEL_ROUNDS = {
    "all_gather": ring_gather_rounds,
    "all_gather_into_tensor": ring_gather_rounds,
    "all_reduce_sum": ring_reduce_rounds,
    "all_reduce_max": log_rounds,
}


def _make_group(port: int, rank: int, size: int) -> Any:
    """A gloo ``ProcessGroup`` built as vLLM's ``init_gloo_process_group``
    builds it."""
    import torch
    from torch.distributed import PrefixStore, ProcessGroup, TCPStore
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    timeout = timedelta(seconds=300)
    store = TCPStore("127.0.0.1", port, size, rank == 0, timeout=timeout)
    prefix = PrefixStore(f"rounds-{size}", store)
    pg = ProcessGroup(prefix, rank, size)
    backend = ProcessGroupGloo(prefix, rank, size, timeout=timeout)
    pg._set_default_backend(ProcessGroup.BackendType.GLOO)
    backend._set_sequence_number_for_group()
    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, backend)
    return pg, store


def _ops(group: Any, rank: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from vllm_ascend_balance.gate.collectives import reduce_signals
    from vllm_ascend_balance.gate.signals import layout

    n = group.size()
    slots = list(torch.zeros(n, dtype=torch.int64).split(1))
    out = torch.zeros(n, dtype=torch.int64)
    local = torch.tensor([rank + 1], dtype=torch.int64)
    holder, extremes = type("Holder", (), {})(), layout(())  # leader, lowest
    sync = torch.zeros(2, dtype=torch.int32)  # vLLM's sync_dp_state tensor
    return {
        "all_gather": lambda: dist.all_gather(slots, local, group=group),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(
            out, local, group=group
        ),
        "all_reduce_sum": lambda: dist.all_reduce(sync, group=group),
        "all_reduce_max": lambda: reduce_signals(
            holder, group, extremes, (rank + 1,), n
        ),
    }


def _traced(out_path: str) -> subprocess.Popen | None:
    """``strace -f`` attached to this process (all threads), or None when
    strace is missing or ptrace is not permitted."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    proc = subprocess.Popen(
        [strace, "-f", "-qq", "-o", out_path, "-p", str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = Path("/proc/self/status").read_text()
        if re.search(r"^TracerPid:\s+[1-9]", status, re.M):
            return proc
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    proc.kill()
    return None


def _mark(text: str) -> None:
    # The failed syscall, seen by strace, is the marker.
    with contextlib.suppress(OSError):
        os.stat(f"{MARK}/{text}")


def _rank_main(
    rank: int, ports: dict[int, int], calls: int, warmup: int, out_dir: str
) -> None:
    import logging

    logging.disable(logging.WARNING)
    for size, port in ports.items():
        if rank >= size:
            continue
        group, store = _make_group(port, rank, size)
        ops = _ops(group, rank)
        for fn in ops.values():
            for _ in range(warmup):
                fn()
        trace = f"{out_dir}/dp{size}-rank{rank}.trace"
        tracer = _traced(trace)
        for name, fn in ops.items():
            for _ in range(3):  # settle after attaching
                fn()
            _mark(f"{name}/begin")
            for _ in range(calls):
                fn()
            _mark(f"{name}/end")
        if tracer is not None:
            tracer.terminate()
            tracer.wait()
        else:
            Path(trace).write_text("")
        group.shutdown()
        del store
    os._exit(0)


def count_rounds(
    sizes: list[int], calls: int = 20, warmup: int = 5
) -> dict[int, dict[str, Any]]:
    """Spawn max(sizes) ranks; for each size, the first ``size`` ranks form
    a group and count their messages. Returns, per size and op, the slowest
    (largest) per-rank counts and whether strace could count."""
    # Bound later by rank 0 of each group: outside the ephemeral range.
    ports = {size: free_loopback_port() for size in sizes}
    world = max(sizes)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="vab-gather-rounds-") as tmp:
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(rank, ports, calls, warmup, tmp),
                daemon=True,
            )
            for rank in range(world)
        ]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for proc in procs:
            proc.join(max(deadline - time.monotonic(), 0))
        hung = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
        for rank in hung:
            procs[rank].kill()
            procs[rank].join()
        if hung or any(proc.exitcode != 0 for proc in procs):
            codes = [proc.exitcode for proc in procs]
            raise SystemExit(f"error: round counting: hung {hung}, exit codes {codes}")
        out: dict[int, dict[str, Any]] = {}
        for size in sizes:
            per_rank = [
                parse_trace(
                    (Path(tmp) / f"dp{size}-rank{rank}.trace").read_text(), calls
                )
                for rank in range(size)
            ]
            counted = all(per_rank)
            row: dict[str, Any] = {"counted": counted}
            for name in OPS:
                row[name] = {
                    "model_rounds": MODEL_ROUNDS[name](size),
                    "sent": max((r[name]["sent"] for r in per_rank), default=None)
                    if counted
                    else None,
                    "received": max(
                        (r[name]["received"] for r in per_rank), default=None
                    )
                    if counted
                    else None,
                    "send_peers": max(
                        (r[name]["send_peers"] for r in per_rank), default=None
                    )
                    if counted
                    else None,
                }
            out[size] = row
    return out


def confirms(name: str, size: int, counted: dict[str, Any]) -> bool:
    """Whether the counted messages match the algorithm behind the modeled
    round count (see the module docstring)."""
    sent, peers = counted["sent"], counted["send_peers"]
    if sent is None:
        return False
    if name in ("all_gather", "all_gather_into_tensor"):
        # Ring: two half-blocks per round, all to one neighbour.
        return sent == 2 * (size - 1) and peers == 1
    if name == "all_reduce_sum":
        # Ring: the one filled chunk crosses every rank once per phase.
        return 1 <= sent <= 4 and peers == 1
    # Dissemination: one message per round, a distinct peer per round
    # (peers coincide only when size - 2**k == 2**k).
    return sent == log_rounds(size) and peers == len(
        {(r + 2**k) % size for r in (0,) for k in range(log_rounds(size))}
    )


def parse_sizes(text: str) -> list[int]:
    """``"2-16"`` or ``"2,3,8"`` (ranges allowed in a list)."""
    sizes: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        sizes.extend(range(int(lo), int(hi or lo) + 1))
    if not sizes or min(sizes) < 2:
        raise SystemExit(f"error: --sizes {text!r}: DP sizes of 2 or more, e.g. 2-16")
    return sorted(set(sizes))


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2-16", help="DP sizes, e.g. 2-16")
    parser.add_argument("--calls", type=int, default=20, help="counted calls per op")
    parser.add_argument("--json", type=Path, help="write the counts as JSON")
    args = parser.parse_args(argv)
    counts = count_rounds(parse_sizes(args.sizes), args.calls)
    if args.json:
        args.json.write_text(json.dumps({str(k): v for k, v in counts.items()}))
    else:
        for size, row in counts.items():
            print(size, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
