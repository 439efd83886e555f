# SPDX-License-Identifier: Apache-2.0
"""The replay input's types: a request, a selected workload, its error.

Kept apart from the functions that build them (:mod:`.workload`: the built-in
mix, selection, checks; :mod:`.traces`: the trace readers), so both of those
import the types from here and neither imports the other's module for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AZURE_ATTRIBUTION = (
    "Trace: Azure LLM inference trace 2023 (Azure Public Dataset; Patel et al., "
    '"Splitwise: Efficient generative LLM inference using phase splitting", '
    "ISCA 2024), licensed CC-BY 4.0."
)


class WorkloadError(ValueError):
    """Bad replay input; the message is one line naming file and line."""


@dataclass(frozen=True)
class ReplayRequest:
    """One request to replay.

    Attributes:
        index: position in the selected workload (0-based).
        arrival_s: modeled seconds after the start of the replay.
        prompt_tokens: prompt length in tokens (>= 1).
        output_tokens: tokens to generate (>= 1; generation ignores EOS).
        rank: DP rank to pin the request to, or None for vLLM's balancer.
        origin: ``file:line`` (or ``builtin``) for messages.
    """

    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    rank: int | None = None
    origin: str = "builtin"


@dataclass(frozen=True)
class Workload:
    """A selected, checked workload and where it came from."""

    requests: list[ReplayRequest]
    source: str
    kind: str  # "builtin", "azure-csv" or "jsonl"
    clipped: int = 0
    #: (a slice of) the Azure trace itself, not a CSV in its layout: its
    #: license's attribution is due (traces.AZURE_2023_CONV_HEAD).
    azure: bool = False

    @property
    def attribution(self) -> str | None:
        return AZURE_ATTRIBUTION if self.azure else None

    def summary(self) -> dict[str, Any]:
        reqs = self.requests
        return {
            "source": self.source,
            "kind": self.kind,
            "requests": len(reqs),
            "span_s": round(reqs[-1].arrival_s - reqs[0].arrival_s, 3) if reqs else 0,
            "prompt_tokens": sum(r.prompt_tokens for r in reqs),
            "output_tokens": sum(r.output_tokens for r in reqs),
            "pinned_to_ranks": sum(r.rank is not None for r in reqs),
            "clipped": self.clipped,
        }
