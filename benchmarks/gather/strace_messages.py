# SPDX-License-Identifier: Apache-2.0
"""Messages in one rank's strace, for ``benchmarks/gather_rounds.py``: each
op's data messages sent and received per call, between the markers the rank
writes around it (:data:`MARK`); gloo's bare headers are not messages."""

from __future__ import annotations

import re

GLOO_HEADER_BYTES = 48  # sizeof(gloo::transport::tcp::Op), every message's header
MARK = "/vab-gather-rounds-mark"
_WRITEV = re.compile(r"writev\((\d+), \[(.*?)\], (\d+)")
_READ = re.compile(
    r"recvfrom(?:\((\d+), | resumed>).*?, (\d+), \d+, NULL, NULL\) = (\d+)"
)


def parse_trace(text: str, calls: int) -> dict[str, dict[str, float]]:
    """Per op: data messages sent and received per call, distinct send
    sockets, from one rank's strace between the markers."""
    result: dict[str, dict[str, float]] = {}
    current: str | None = None
    sends = reads = 0
    fds: set[str] = set()
    for line in text.splitlines():
        if MARK in line:
            match = re.search(re.escape(MARK) + r"/([a-z_]+)/(begin|end)", line)
            if match is None:
                continue
            name, edge = match.groups()
            if edge == "begin":
                current, sends, reads, fds = name, 0, 0, set()
            elif current == name:
                result[name] = {
                    "sent": sends / calls,
                    "received": reads / calls,
                    "send_peers": len(fds),
                }
                current = None
            continue
        if current is None:
            continue
        write = _WRITEV.search(line)
        if write and int(write[3]) >= 2:  # header + payload: a data message
            sends += 1
            fds.add(write[1])
            continue
        read = _READ.search(line)
        if read and int(read[2]) != GLOO_HEADER_BYTES and int(read[3]) > 0:
            reads += 1
    return result
