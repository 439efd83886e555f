# SPDX-License-Identifier: Apache-2.0
"""The ports handed to a server or a lock-step group that binds them later
(``vllm_ascend_balance/loopback_ports.py``): the contract is a port free
now that the kernel cannot hand to another process meanwhile, i.e. one
outside its ephemeral range (a fresh-clone CI run lost the shared server to
an ephemeral port taken between the choice and the bind).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from vllm_ascend_balance import loopback_ports
from vllm_ascend_balance.loopback_ports import free_loopback_port

pytestmark = pytest.mark.lane_scope("release")


def _kernel_range() -> tuple[int, int]:
    """The ephemeral range as the kernel states it (the oracle: read here,
    not through the module)."""
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def _bind(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.skipif(
    not Path("/proc/sys/net/ipv4/ip_local_port_range").exists(),
    reason="no /proc/sys/net/ipv4/ip_local_port_range: not Linux",
)
def test_ports_are_free_and_outside_the_ephemeral_range() -> None:
    low, high = _kernel_range()
    if low <= loopback_ports.LOWEST + 1:
        pytest.skip(f"this host's ephemeral range starts at {low}: nothing below it")
    for _ in range(50):
        port = free_loopback_port()
        assert not low <= port <= high, f"{port} is an ephemeral port ({low}-{high})"
        _bind(port)  # free: binding it raises nothing


def test_a_taken_port_is_skipped(tmp_path: Path) -> None:
    table = tmp_path / "range"
    table.write_text("32768\t60999\n")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]

        class Picks(random.Random):
            def __init__(self) -> None:
                super().__init__(0)
                self.picks = [busy, 25000]

            def randint(self, a: int, b: int) -> int:
                return self.picks.pop(0) if self.picks else super().randint(a, b)

        port = free_loopback_port(Picks(), table)
        assert port != busy
        assert port == 25000 or loopback_ports.LOWEST <= port < 32768


@pytest.mark.parametrize("text", [None, "garbage", "1024\t65535"])
def test_the_kernels_choice_where_the_range_leaves_no_room(
    tmp_path: Path, text: str | None
) -> None:
    """No range file (not Linux), an unreadable one, or a range starting at
    or below LOWEST: an ephemeral port, still free now."""
    table = tmp_path / "range"
    if text is not None:
        table.write_text(text)
    port = free_loopback_port(path=table)
    assert 0 < port < 65536
    _bind(port)
