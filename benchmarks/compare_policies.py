#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Balance scheduling against every peer's DP admission policy, same work.

Runs the replay on the simulated engine (``--engine sim``: N real vLLM
schedulers in lock step) for every case (workload x DP size,
``benchmarks/policies/cases.py``) and workload seed, with the baseline
``off``, our settings, and each peer at its documented defaults and over a
sweep of its own knobs (``benchmarks/policies/settings.py`` and
``peer_grids.py``: the modes are data there). Judges by dominance on (TTFT
p50, TPOT p99), by goodput under an SLO pair, by pairwise wins, and counts
the cells where the recommended setting is within the interval of the best
rival or better (``benchmarks/policies/judging.py``); intervals are 95 %
t-intervals across seeds (``benchmarks/policies/stats.py``).

Writes ``<out>.json`` (per case and seed: the command and every mode's
values) and ``<out>.md`` (the tables), after every case and seed; the full
matrix to ``benchmarks/results/policies``, a partial one (``--quick``,
``--cases``, ``--seeds``, ``--modes``, ``--cost``) to the temporary
directory unless ``--out`` is given, so it never replaces the committed
table. One run per OUT at a time: a second is refused (``out_lock.py``)::

    venv=$(scripts/lane.sh main)   # vLLM 0.32: interval:N and chunk holds
    $venv/bin/python benchmarks/compare_policies.py           # all cases
    $venv/bin/python benchmarks/compare_policies.py --quick   # DP 4 subset
    $venv/bin/python benchmarks/compare_policies.py --cases starvation kv-bound-dp4
    $venv/bin/python benchmarks/compare_policies.py --cost --quick

``--cost`` runs ``off`` and the recommended setting on seed 0 of each
selected case (OUT.json only; a replay's first run also pays its start-up)
and prints each case's time per mode-run and per replay start-up, and the
full command's expected time.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run or loaded by path: this checkout first (_checkout.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _checkout  # noqa: F401

from benchmarks.policies import cases, settings  # noqa: E402
from benchmarks.policies.interrupts import run_interruptible  # noqa: E402
from benchmarks.policies.out_lock import sole_writer  # noqa: E402
from benchmarks.policies.render import markdown, recorded_vllm  # noqa: E402
from benchmarks.policies.reuse import package_digest, prune  # noqa: E402
from benchmarks.policies.rivals import design_tuned, held_out_plan  # noqa: E402
from benchmarks.policies.runs import check_modes, command, run_seed  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def estimate(records: list[dict[str, Any]], modes: dict[str, int],
             seeds: int) -> list[str]:  # fmt: skip
    """Per case: seconds per mode-run and per replay start-up (means over
    what ran), and the full run's expected time with ``modes[case]`` modes
    and ``seeds`` seeds (one replay per case and seed)."""
    lines, total = [], 0.0
    for rec in records:
        runs = rec["runs"]
        # A replay's first mode-run carries the process's one-time start-up
        # (imports, model): the later ones are the per-mode cost.
        later = [w for r in runs for w in list(r["mode_wall_s"].values())[1:]]
        if not later:
            lines.append(f"{rec['case']}: one mode per replay, no estimate")
            continue
        per = sum(later) / len(later)
        start = sum(r["wall_s"] for r in runs) / len(runs) - per * len(
            runs[0]["mode_wall_s"]
        )
        n = modes[rec["case"]]
        cost = (start + per * n) * seeds
        total += cost
        lines.append(
            f"{rec['case']}: {per:.1f} s per mode-run, {start:.0f} s per replay;"
            f" {n} modes x {seeds} seeds: {cost / 60:.1f} min"
        )
    lines.append(
        f"expected: {total / 60:.0f} min for {seeds} seeds over these "
        f"{len(records)} case(s) at one replay process, at this machine's "
        "present load"
    )
    return lines


def _load(path: Path) -> list[dict[str, Any]]:
    """The stored records of ``path`` (none if it does not exist)."""
    return json.loads(path.read_text()) if path.exists() else []


def _written_by(records: list[dict[str, Any]]) -> str | None:
    """The command that wrote ``records`` (each record's ``written_by``), or
    None if they do not say or disagree (``markdown`` then names the
    command of the committed table)."""
    found = {r.get("written_by") for r in records}
    return found.pop() if len(found) == 1 else None


def _write(out: Path, records: dict[str, dict[str, Any]], version: str,
           table: bool, by: str) -> None:  # fmt: skip
    """OUT.json (and OUT.md if ``table``, headed by ``by``, the command that
    ran), cases in the case table's order."""
    keys = [c.key for c in cases.CASES]
    rank = {k: i for i, k in enumerate(keys)}
    ordered = sorted(records.values(), key=lambda r: rank.get(r["case"], len(rank)))
    for record in ordered:
        record["written_by"] = by
    out.with_suffix(".json").write_text(json.dumps(ordered, indent=1))
    if table:
        out.with_suffix(".md").write_text(markdown(ordered, version, by))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", help="case keys (builtin-dp4) or workloads")
    p.add_argument(
        "--quick", action="store_true",
        help="the DP 4 subset, peers at defaults only (no sweep)",
    )  # fmt: skip
    p.add_argument("--seeds", type=int, nargs="+", default=list(settings.SEEDS))
    p.add_argument("--modes", help="comma-separated modes instead of the table's")
    p.add_argument(
        "--held-out", action="store_true",
        help="the held-out run: the seeds drawn from settings.FROZEN_AT, per "
        "case the modes its stored run judged (chosen at the freeze from the "
        "design table: ours, each peer's default and tuned point), written "
        "to benchmarks/results/policies_heldout",
    )  # fmt: skip
    p.add_argument(
        "--out",
        help="writes OUT.json and OUT.md (default: benchmarks/results/policies "
        "for the full matrix; a partial one goes to the temporary directory, "
        "so it never replaces the committed table)",
    )
    p.add_argument("--render", action="store_true", help="OUT.md from OUT.json only")
    p.add_argument("--cost", action="store_true", help="time one mode-run per case")
    p.add_argument(
        "--jobs", type=int, default=2,
        help="replay processes per case and seed, each running a share of "
        "the modes (default 2)",
    )  # fmt: skip
    p.add_argument(
        "--fresh", action="store_true",
        help="run every row again instead of reusing OUT.json's",
    )  # fmt: skip
    p.add_argument(
        "--code", metavar="DIR",
        help="run the replays with the package of the checkout DIR first on "
        "the path (e.g. an exported commit of a branch); its rows are labelled",
    )  # fmt: skip
    p.add_argument(
        "--code-label", help="the label of --code's rows (default: DIR's name)"
    )
    args = p.parse_args(argv)
    # The header of OUT.md names this command (stored in OUT.json for
    # --render), not the full matrix's: a partial table says what made it.
    ran = shlex.join(
        ["python", "benchmarks/compare_policies.py",
         *(sys.argv[1:] if argv is None else argv)]
    )  # fmt: skip
    if args.jobs < 1:
        raise SystemExit(f"--jobs: must be >= 1, got {args.jobs}")
    if args.modes:
        check_modes(args.modes)
    code = None
    if args.code:
        where = Path(args.code).resolve()
        if not (where / "vllm_ascend_balance" / "__init__.py").is_file():
            raise SystemExit(
                f"--code: {args.code} holds no vllm_ascend_balance package "
                "(give the root of an exported checkout)"
            )
        code = (where, args.code_label or where.name)
    design: dict[str, dict[str, Any]] = {}
    frozen: dict[str, dict[str, Any]] = {}
    if args.held_out:
        try:
            args.seeds = settings.held_out_seeds(settings.FROZEN_AT)
        except ValueError as error:
            raise SystemExit(f"--held-out: {error} (settings.FROZEN_AT)") from None
        design = {r["case"]: r for r in _load(RESULTS / "policies.json")}
        frozen = {r["case"]: r for r in _load(RESULTS / "policies_heldout.json")}
    partial = bool(
        args.cases or args.quick or args.modes or args.cost
        or (sorted(args.seeds) != sorted(settings.SEEDS) and not args.held_out)
    )  # fmt: skip
    if args.out:
        out = Path(args.out)
    elif args.held_out:
        out = RESULTS / "policies_heldout"
    elif partial and not args.render:
        out = Path(tempfile.gettempdir()) / "vab-policies-partial"
        print(f"a partial matrix: writing {out}.json and .md", file=sys.stderr)
    else:
        out = RESULTS / "policies"
    with sole_writer(out):
        return _run(args, out, ran, code, design, frozen, partial)


def _run(args: argparse.Namespace, out: Path, ran: str,
         code: tuple[Path, str] | None, design: dict[str, dict[str, Any]],
         frozen: dict[str, dict[str, Any]], partial: bool) -> int:  # fmt: skip
    """The run ``main`` parsed, writing OUT (its lock held)."""
    for line in settings.check_grids():
        print(f"warning: {line}", file=sys.stderr)
    import vllm

    if args.render:
        records = json.loads(out.with_suffix(".json").read_text())
        version = recorded_vllm(records) or vllm.__version__
        table = markdown(records, version, _written_by(records))
        out.with_suffix(".md").write_text(table)
        print(table)
        return 0
    # Cheap cases first (stable within a DP size): a run stopped early keeps
    # whole cases (OUT.json is written after every case and seed).
    chosen = sorted(cases.select(args.cases, args.quick), key=lambda c: c.cost_rank)
    seeds = args.seeds
    jobs = args.jobs

    def modes_of(case: cases.Case) -> list[str]:
        if args.cost:
            # The second run is the per-mode cost (a repeated mode is not
            # re-run); one process, so that its start-up is measured once.
            return [settings.BASELINE, settings.RECOMMENDED]
        if args.modes:
            return list(args.modes.split(","))
        if args.held_out:
            return held_out_plan(case.key, design, frozen.get(case.key))
        return settings.all_modes(args.quick, case.points)

    if args.cost:
        seeds, jobs = seeds[:1], 1
    out.parent.mkdir(parents=True, exist_ok=True)
    reuse = not (args.fresh or args.cost)
    records = {r["case"]: r for r in (_load(out.with_suffix(".json")) if reuse else [])}
    done: list[dict[str, Any]] = []
    # Rows are reused only from a run of the same vLLM and package code.
    source = Path(args.code) if args.code else Path(__file__).resolve().parents[1]
    build = f"{vllm.__version__} package {package_digest(source)}"
    with tempfile.TemporaryDirectory(prefix="vab-policies-") as tmp:
        for case in chosen:
            rec = records.setdefault(
                case.key,
                {"case": case.key, "workload": case.workload, "dp": case.dp,
                 "runs": []},
            )  # fmt: skip
            done.append(rec)
            tuned_on = None
            if args.held_out and not args.modes and case.key in design:
                # What the held-out seeds judge each family at: the point
                # tuned on the design table (never re-picked on them).
                tuned_on = design_tuned(design[case.key])
            for seed in seeds:
                stored = next((r for r in rec["runs"] if r["seed"] == seed), None)
                run = run_seed(
                    case, seed, modes_of(case), Path(tmp), build, jobs, code,
                    stored if reuse else None,
                )  # fmt: skip
                if not partial:
                    # The full matrix judges its grid only: rows of modes
                    # no longer in it (an earlier grid's) are cut.
                    run = prune(run, modes_of(case))
                    run["command"] = command(run["args"], list(run["values"]))
                # The full matrix keeps only its own seeds (a stored run of
                # another seed set, e.g. an earlier held-out draw, is cut).
                kept = [r for r in rec["runs"] if r["seed"] != seed]
                if not partial:
                    kept = [r for r in kept if r["seed"] in seeds]
                rec["runs"] = sorted([*kept, run], key=lambda r: r["seed"])
                # Written after every run: a long matrix keeps what it ran.
                _write(out, records, vllm.__version__, not args.cost, ran)
            if tuned_on is not None:
                # Stored once every seed ran the new points: until then the
                # record keeps the map its rows were run for, so a run
                # stopped mid-case leaves a record judged as before.
                rec["tuned_on_design"] = tuned_on
                _write(out, records, vllm.__version__, not args.cost, ran)
    if args.cost:
        full = {c.key: len(settings.all_modes(args.quick, c.points)) for c in chosen}
        print("\n".join(estimate(done, full, len(args.seeds))))
        return 0
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    run_interruptible(main, "compare_policies.py")
