# SPDX-License-Identifier: Apache-2.0
"""Resuming the comparison: which stored rows a new run may keep, and how
one case-seed's modes are split across replay processes. Pure functions.

The simulated engine is deterministic: the same replay arguments on the
same vLLM give the same rows. A stored row of ``(case, seed, mode)`` is
reused when the stored run's replay arguments (``--mode`` aside), vLLM
version and package (:func:`package_digest`: a changed policy behind an
unchanged ``--mode`` name must run again) equal the new run's **and**
the freshly run baseline row of that case and seed is bit-identical to
the stored one (its metrics and the digest of its per-request records and
timeline). The baseline check
catches what the arguments do not name: a changed workload generator, cost
model or simulated engine moves the baseline's row, and then every stored
row of that case-seed is run again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def package_digest(root: Path) -> str:
    """SHA-256 of the package's sources under ``root`` (every
    ``vllm_ascend_balance/**/*.py``, path and text): the code behind every
    row, ours and the peers' models alike."""
    h = hashlib.sha256()
    for path in sorted((root / "vllm_ascend_balance").rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def digest(run: Mapping[str, Any]) -> str:
    """SHA-256 of one replay run's per-request records and timeline (the
    replay's ``runs[i]``): equal digests mean the same simulated history."""
    blob = json.dumps([run["requests"], run["timeline"]], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def split_modes(modes: Sequence[str], jobs: int) -> list[list[str]]:
    """``modes`` dealt round-robin over at most ``jobs`` replay processes,
    in order (the first mode, the baseline, leads the first process);
    no empty process.

    Raises:
        ValueError: ``jobs`` < 1.
    """
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    chunks: list[list[str]] = [[] for _ in range(min(jobs, len(modes)))]
    for i, mode in enumerate(modes):
        chunks[i % len(chunks)].append(mode)
    return chunks


@dataclass(frozen=True)
class Plan:
    """What to run for one case-seed: ``fresh`` now (the baseline first),
    and the stored modes ``kept`` if the fresh baseline matches."""

    fresh: list[str]
    kept: list[str]


def plan(
    stored: Mapping[str, Any] | None,
    args: Sequence[str],
    vllm: str,
    modes: Sequence[str],
    baseline: str,
) -> Plan:
    """Which of ``modes`` need a run, given the ``stored`` run of the same
    case and seed (None: nothing stored). A stored run with other replay
    arguments or another vLLM keeps nothing; otherwise every stored mode
    but the baseline is kept on condition (:func:`accept`), requested or not.
    """
    wanted = list(dict.fromkeys([baseline, *modes]))
    if (
        stored is None
        or list(stored.get("args", ())) != list(args)
        or stored.get("vllm") != vllm
        or baseline not in stored.get("values", {})
    ):
        return Plan(wanted, [])
    have = stored["values"]
    kept = [m for m in have if m != baseline]
    return Plan([m for m in wanted if m == baseline or m not in have], kept)


def same_baseline(
    stored: Mapping[str, Any], fresh: Mapping[str, Any], baseline: str
) -> bool:
    """The fresh run's baseline row is bit-identical to the stored one: the
    same metrics and, when both recorded it, the same history digest."""
    if stored["values"].get(baseline) != fresh["values"].get(baseline):
        return False
    a = stored.get("digests", {}).get(baseline)
    b = fresh.get("digests", {}).get(baseline)
    return a is None or b is None or a == b


def merge(
    stored: Mapping[str, Any], fresh: Mapping[str, Any], kept: Sequence[str]
) -> dict[str, Any]:
    """``fresh`` with the ``kept`` rows of ``stored`` added (a row run now
    wins). Per-row fields (``values``, ``digests``, ``mode_wall_s``,
    ``code``) are merged; ``wall_s`` adds up the replay time spent on the
    case-seed over every invocation."""
    out = dict(fresh)
    for key in ("values", "digests", "mode_wall_s", "code"):
        old = stored.get(key, {})
        rows = {m: old[m] for m in kept if m in old}
        rows.update(fresh.get(key, {}))
        if rows:
            out[key] = rows
    out["wall_s"] = round(stored.get("wall_s", 0.0) + fresh.get("wall_s", 0.0), 1)
    return out


def ordered(values: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """The modes of ``values``: those in ``order`` first, in its order, then
    the rest in their stored order."""
    first = [m for m in order if m in values]
    return first + [m for m in values if m not in first]


def prune(run: Mapping[str, Any], modes: Sequence[str]) -> dict[str, Any]:
    """``run`` with only the rows of ``modes`` (per-row fields ``values``,
    ``digests``, ``mode_wall_s``, ``code``; the command renamed to match):
    what the full matrix keeps, so a row left over from an earlier grid
    (kept by :func:`plan` for a partial run) is neither shown nor judged."""
    keep = set(modes)
    out = dict(run)
    for key in ("values", "digests", "mode_wall_s", "code"):
        if key in run:
            out[key] = {m: row for m, row in run[key].items() if m in keep}
    return out
