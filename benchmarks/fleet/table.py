# SPDX-License-Identifier: Apache-2.0
"""The fleet sweep's results table (``benchmarks/results/fleet_dp.md``):
one row per DP size, balance off against on, each cell ``off → on``."""

from __future__ import annotations

from typing import Any


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 1000 else f"{x:.1f}"


def _change(off: float | None, on: float | None) -> str:
    """``off → on (relative change)``."""
    if off is None or on is None:
        return "-"
    rel = f" ({100 * (on - off) / off:+.0f} %)" if off else ""
    return f"{_ms(off)} → {_ms(on)}{rel}"


COLUMNS = (
    "DP",
    "requests (offered per rank per s: requests / output tokens)",
    "steps off / on",
    "frozen (on)",
    "slowest rank mixed P+D off → on",
    "TPOT p50 ms off → on",
    "TPOT p99 ms off → on",
    "TTFT p50 ms off → on",
    "TTFT p99 ms off → on",
    "output tok/s off → on",
    "running/rank mean off / on",
    "wall s (both modes)",
)


def table_row(row: dict[str, Any]) -> str:
    """One DP size's row (both modes) of the table."""
    off, on = row["runs"]["off"], row["runs"]["on"]
    done = all(r["completed"] == row["requests"] for r in (off, on))
    cells = [
        str(row["dp"]),
        f"{row['requests']:,}{'' if done else ' (INCOMPLETE)'} "
        f"({row['arrivals_per_rank_s']:.2f} / {row['output_tokens_per_rank_s']:.0f})",
        f"{off['steps']:,} / {on['steps']:,}",
        _pct(on["frozen_share"]),
        f"{_pct(off['mixed_share'])} → {_pct(on['mixed_share'])}",
        _change(off["tpot_p50_ms"], on["tpot_p50_ms"]),
        _change(off["tpot_p99_ms"], on["tpot_p99_ms"]),
        _change(off["ttft_p50_ms"], on["ttft_p50_ms"]),
        _change(off["ttft_p99_ms"], on["ttft_p99_ms"]),
        _change(off["output_tokens_per_s"], on["output_tokens_per_s"]),
        f"{off['running_mean']:.1f} / {on['running_mean']:.1f}",
        f"{row['wall_s']:,.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def markdown(
    rows: list[dict[str, Any]], window_s: float, command: str, wall_s: float, cap: int
) -> str:
    """The results page: how the rows were made, the table, each row's
    replay command and the trace's credit."""
    lines = [
        "<!-- written by benchmarks/sweep_fleet_dp.py -->",
        f"Simulated engine, `--routing vllm`, cap {cap}/rank, Azure conversation "
        f"trace 2023 (whole hour), `--rate-scale N/3` (each rank gets the DP 4 "
        f"example's arrival rate) and the same arrival window for every N: "
        f"{window_s:g} modeled s (`--duration {window_s:g} * N/3` s of the "
        f"trace). One run per mode: the simulation is deterministic, so there "
        f"is no run-to-run noise and every difference is the model's. Relative "
        f"changes in parentheses; TTFT in ms.",
        "",
        f"`{command}`",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---" * len(COLUMNS) + "|",
        *(table_row(r) for r in rows),
        "",
        f"Wall: {wall_s:,.0f} s for these rows (both modes, one process; the "
        "only numbers that depend on the machine and its load).",
        "",
        "Replay command of each row (same numbers; `--json`, `--plot` to keep them):",
        "",
        *(f"- DP {r['dp']}: `{r['command']}`" for r in rows),
        "",
        "Trace: Azure LLM inference trace 2023 (Azure Public Dataset; Patel et "
        'al., "Splitwise: Efficient generative LLM inference using phase '
        'splitting", ISCA 2024), licensed CC-BY 4.0.',
    ]
    return "\n".join(lines) + "\n"
