# SPDX-License-Identifier: Apache-2.0
"""A loopback TCP port to be bound later, chosen outside the kernel's
ephemeral range.

The demo's API server and the replay executors' lock-step group (rank 0
hosts its store) are handed a port by the front-end and bind it seconds
later, once the engines have started. A port found by binding port 0 is an
ephemeral one, and in that window the kernel may hand the same port to any
other process's bind to port 0 (vLLM's own ``get_open_port``, in this
deployment or another) or outgoing connection; the late bind then fails
with EADDRINUSE (a CI run with two test sessions at once lost a server to
it). The kernel never hands out a port below its ephemeral range (Linux:
``net.ipv4.ip_local_port_range``), so there only another process that
picks ports itself can take it. This module imports neither vLLM nor torch.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Linux's ephemeral range: "LOW HIGH".
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port chosen: below it are the ports services are usually
#: configured on.
LOWEST = 20000
#: Random ports tried before falling back to the kernel's choice.
ATTEMPTS = 100


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int] | None:
    """``(low, high)`` of the kernel's ephemeral ports, None where unknown
    (no such file: not Linux, or no ``/proc``)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_loopback_port(
    rng: random.Random | None = None, path: Path = EPHEMERAL_RANGE
) -> int:
    """A TCP port on 127.0.0.1 that is free now, from :data:`LOWEST` up to
    just below the ephemeral range (module docstring); the kernel's choice
    (an ephemeral port) where that range is unknown or starts at or below
    :data:`LOWEST`, or no port tried there was free."""
    found = ephemeral_range(path)
    if found is not None and found[0] - 1 > LOWEST:
        rng = rng or random.SystemRandom()
        for _ in range(ATTEMPTS):
            port = rng.randint(LOWEST, found[0] - 1)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
