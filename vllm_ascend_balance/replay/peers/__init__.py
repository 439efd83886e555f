# SPDX-License-Identifier: Apache-2.0
"""Peer admission policies: other projects' answers to DP admission
imbalance, as replay modes on the simulated engine (see :mod:`.base`)."""

from __future__ import annotations

from vllm_ascend_balance.replay.peers.atom_delayer import AtomPrefillDelayer
from vllm_ascend_balance.replay.peers.base import (
    PassHistory,
    PeerGateMixin,
    PeerPolicy,
    PolicyError,
    RankState,
    compose_peer_gate,
    rank_state,
)
from vllm_ascend_balance.replay.peers.sglang_delayer import (
    SGLangPrefillDecodeInterval,
    SGLangPrefillDelayer,
)
from vllm_ascend_balance.replay.peers.trtllm_adp import TrtllmAttentionDpBalance
from vllm_ascend_balance.replay.peers.vllm_align import VllmPrefillAlignment

#: ``--mode`` prefix -> policy class.
POLICIES: dict[str, type[PeerPolicy]] = {
    cls.name: cls
    for cls in (
        SGLangPrefillDelayer,
        SGLangPrefillDecodeInterval,
        TrtllmAttentionDpBalance,
        VllmPrefillAlignment,
        AtomPrefillDelayer,
    )
}


def make_policy(text: str) -> PeerPolicy:
    """A new policy instance from a ``--mode`` entry such as
    ``sglang-delayer:30``.

    Raises:
        PolicyError: an unknown policy or bad parameters (one line).
    """
    name, sep, params = text.partition(":")
    cls = POLICIES.get(name)
    if cls is None:
        raise PolicyError(
            f"--mode {text}: unknown peer policy {name!r} "
            f"(use one of {', '.join(POLICIES)})"
        )
    if sep and not params:
        raise PolicyError(
            f"--mode {text}: nothing after ':' (expected {cls.usage}; "
            f"drop the ':' for the defaults)"
        )
    return cls(params)


__all__ = [
    "POLICIES",
    "PassHistory",
    "PeerGateMixin",
    "PeerPolicy",
    "PolicyError",
    "RankState",
    "compose_peer_gate",
    "make_policy",
    "rank_state",
]
