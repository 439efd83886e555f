# SPDX-License-Identifier: Apache-2.0
"""The gate's policies: one module each, listed once in :data:`POLICIES`.

A policy (:class:`~vllm_ascend_balance.gate.policies.base.Policy`) declares
its name, one-line summary, knobs, the signals it reads and whether it
holds prefill chunks, with a pure decision. Everything else reads the
registry: the configuration reader (knob types, ranges, refusals),
``doctor`` and the activation notes, the replay's ``--mode`` grammar and the
simulated engine. The gate bounds every policy's holds itself
(:mod:`~vllm_ascend_balance.gate.bound`).

A new policy is its module here and one line in :data:`POLICIES` (or
:func:`register` at run time), then its property test, its rule in the
tests' contract oracle and its docs (CONTRIBUTING.md, "Where does X go";
``tests/test_policy_completeness.py`` names any place missing).
"""

from __future__ import annotations

from vllm_ascend_balance.gate.policies import (
    adp_balance,
    leader_at_cap,
    queued_leader,
    throttled,
)
from vllm_ascend_balance.gate.policies.base import OPEN, Decision, Knob, Policy

__all__ = [
    "OPEN",
    "POLICIES",
    "RETIRED",
    "Decision",
    "Knob",
    "Policy",
    "knob_owners",
    "register",
]

#: The policies by ``balance_policy`` name; the first is the contract.
POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        leader_at_cap.POLICY,
        queued_leader.POLICY,
        throttled.POLICY,
        adp_balance.POLICY,
    )
}

#: Names that were policies once, and the one to use instead.
RETIRED: dict[str, str] = {
    "aligned": "throttled",
    "cohort": "throttled",
    "batched": "throttled",
}
#: Settings that went with a retired policy.
RETIRED_KEYS: dict[str, str] = {"balance_align_min_load": "aligned"}


def register(policy: Policy) -> None:
    """Add ``policy`` to :data:`POLICIES` (a plugin, a test).

    Raises:
        ValueError: the name is taken, or one of its knob keys is declared
            differently by another policy.
    """
    if policy.name in POLICIES or policy.name in RETIRED:
        raise ValueError(f"balance_policy {policy.name!r} is already defined")
    for knob in policy.knobs:
        for other in POLICIES.values():
            clash = next((k for k in other.knobs if k.key == knob.key), None)
            if clash is not None and clash != knob:
                raise ValueError(f"{knob.key} is declared differently by {other.name}")
    POLICIES[policy.name] = policy


def knob_owners(key: str) -> tuple[str, ...]:
    """The policies that read the knob ``key``."""
    return tuple(
        p.name for p in POLICIES.values() if any(k.key == key for k in p.knobs)
    )
