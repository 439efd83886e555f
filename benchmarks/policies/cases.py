# SPDX-License-Identifier: Apache-2.0
"""The cases (workload x DP size), as data, and how a seed selects each
case's workload.

- ``builtin``: the replay's built-in bursty mix, ``--seed S`` (250 requests,
  ``--rate-scale DP/2``: each rank's rate of the default DP 2 replay).
- ``azure``: the Azure LLM inference 2023 conversation trace at
  ``--rate-scale DP/2`` over a 30 modeled s window; seed S takes the S-th
  disjoint window of the trace (``--start S x window``), so seeds are
  different hours of the same service, not one window re-used.
- ``starvation``, ``long-prompts``, ``kv-bound``, ``on-off``: JSONL from
  :mod:`.workloads`, drawn per DP size and seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import workloads

AZURE_TRACE = "tests/data/azure_llm_inference_2023_conv.csv"
AZURE_WINDOW_S = 30
CAP = 16


@dataclass(frozen=True)
class Case:
    """One workload at one DP size; ``quick``: in the ``--quick`` subset;
    ``points``: how many settings of ours and of each peer family the case
    runs (the first ones of each list in ``settings.py``; None: all), so
    that the costly cases cut every family to the same smaller grid;
    ``full``: in the full run (else only when named by ``--cases``)."""

    workload: str
    dp: int
    quick: bool = False
    points: int | None = None
    full: bool = True

    @property
    def cost_rank(self) -> int:
        """Run order of the full matrix: the small DP sizes first, so that
        a run stopped early still holds whole cases."""
        return self.dp

    @property
    def key(self) -> str:
        return f"{self.workload}-dp{self.dp}"


#: Every case the full run covers, each with every setting of ours and the
#: whole grid of each peer family (``settings.all_modes``; ``--cost``
#: measures a case; from nothing the full run takes over two hours at
#: ``--jobs 2`` on 2 cores, docs/peer-policies.md). Until 2026-12-07 DP 16 and
#: 64 ran the first three points of ours and of each family
#: (:data:`CUT_POINTS`); Azure and starvation at DP 64 cost ~50 s per
#: mode-run on 2 cores (~20 min per case at one point per family and three
#: seeds): they are named cases (``--cases azure-dp64``) with that cut, not
#: in the full run. The new workloads stop at DP 16.
CUT_POINTS = 3
CASES: tuple[Case, ...] = (
    Case("builtin", 4, quick=True), Case("builtin", 16), Case("builtin", 64),
    Case("azure", 4), Case("azure", 16),
    Case("azure", 64, points=1, full=False),
    Case("starvation", 4, quick=True), Case("starvation", 16),
    Case("starvation", 64, points=1, full=False),
    Case("long-prompts", 4), Case("long-prompts", 16),
    Case("kv-bound", 4), Case("kv-bound", 16),
    Case("on-off", 4), Case("on-off", 16),
)  # fmt: skip


def select(keys: list[str] | None, quick: bool) -> list[Case]:
    """The cases named by ``keys`` (``builtin-dp4`` or a workload name for
    all its DP sizes), or the ``--quick`` subset, or the full run's.

    Raises:
        SystemExit: a key that names no case, one line with the known keys.
    """
    if not keys:
        return [c for c in CASES if c.quick or (c.full and not quick)]
    chosen = []
    for key in keys:
        hits = [c for c in CASES if key in (c.key, c.workload)]
        if not hits:
            known = ", ".join(c.key for c in CASES)
            raise SystemExit(f"--cases: no case {key!r} (known: {known})")
        chosen += [c for c in hits if c not in chosen]
    return chosen


def _jsonl(make: Callable[[int, int], list[workloads.Line]], case: Case,
           seed: int, work: Path) -> list[str]:  # fmt: skip
    path = work / f"{case.key}-seed{seed}.jsonl"
    return ["--trace", str(workloads.write_jsonl(make(case.dp, seed), path))]


def replay_args(case: Case, seed: int, work: Path) -> list[str]:
    """The replay options that select ``case``'s workload for ``seed``
    (JSONL traces are written under ``work``)."""
    dp = case.dp
    if case.workload == "builtin":
        return ["--seed", str(seed), "--rate-scale", f"{dp / 2:g}"]
    if case.workload == "azure":
        rate = dp / 2
        window = AZURE_WINDOW_S * rate  # seconds of the trace's own time
        return [
            "--trace", AZURE_TRACE, "--rate-scale", f"{rate:.6g}",
            "--start", f"{seed * window:.6g}", "--duration", f"{window:.6g}",
        ]  # fmt: skip
    if case.workload == "starvation":
        return _jsonl(
            lambda d, s: workloads.starvation(d, s, cap=CAP), case, seed, work
        )
    if case.workload == "kv-bound":
        return [
            *_jsonl(workloads.kv_bound, case, seed, work),
            "--max-model-len", str(workloads.KV_MAX_MODEL_LEN),
            "--kv-cache-tokens", str(workloads.KV_CACHE_TOKENS),
        ]  # fmt: skip
    if case.workload in workloads.GENERATORS:
        return _jsonl(workloads.GENERATORS[case.workload], case, seed, work)
    raise ValueError(f"unknown workload {case.workload!r}")
