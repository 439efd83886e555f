# SPDX-License-Identifier: Apache-2.0
"""Running the replay for one case and seed, and reducing its payload to
the per-seed values the judging reads.

A case's record (what ``OUT.json`` keeps)::

    {"case": "builtin-dp4", "workload": "builtin", "dp": 4,
     "runs": [{"seed": 0, "command": "...", "args": [...], "vllm": "0.32.0",
               "wall_s": 41.2, "startup_s": 19.0,
               "requests": 250, "span_s": 25.1,
               "mode_wall_s": {mode: s}, "values": {mode: {metric: x}},
               "digests": {mode: sha256}, "code": {mode: label}}, ...]}

``wall_s``: the replay processes' wall time summed (over every invocation
whose rows the run keeps); ``startup_s``: a process's wall time outside its
mode-runs; ``code``: rows run with another checkout's package (``--code``).

:func:`case_values` turns it into ``{mode: {metric: [x per seed]}}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import settings
from .cases import CAP, Case, replay_args
from .interrupts import deferred
from .judging import slo_goodput
from .reuse import digest, merge, ordered, plan, same_baseline, split_modes

ROOT = Path(__file__).resolve().parents[2]


def run_values(run: dict[str, Any]) -> dict[str, float]:
    """One replay run's metrics (the replay's ``runs[i]``, with its
    per-request records and timeline) as the judging's keys."""
    m = run["metrics"]
    timeline = run["timeline"]
    _, goodput = slo_goodput(
        run["requests"], dict(zip(timeline["step"], timeline["t_s"], strict=True)),
        m["makespan_s"],
        settings.SLO_TTFT_MS, settings.SLO_TPOT_MS,
    )  # fmt: skip
    return {
        "tpot_p50": m["tpot_p50_ms"],
        "tpot_p99": m["tpot_p99_ms"],
        "ttft_p50": m["ttft_p50_ms"],
        "ttft_p99": m["ttft_p99_ms"],
        "tok_s": m["output_tokens_per_s"],
        "goodput": goodput,
        "completed": m["completed"] / m["requests"],
    }


def base_args(case: Case, seed: int, work: Path) -> list[str]:
    """The replay options of ``case`` and ``seed`` but ``--mode`` (JSONL
    traces written under ``work``)."""
    return [
        "--engine", "sim", "--dp", str(case.dp), "--repeat", "1",
        "--max-num-seqs", str(CAP), *replay_args(case, seed, work),
    ]  # fmt: skip


def _shown(argv: list[str], work: Path) -> list[str]:
    """``argv`` with the paths under ``work`` as bare names: a record names
    no temporary directory, and two invocations' arguments compare equal."""
    return [a if not a.startswith(str(work)) else Path(a).name for a in argv]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the replays still running (a failed sibling, Ctrl-C, SIGTERM):
    SIGTERM first, which a replay takes as Ctrl-C (its engines stopped,
    its sockets removed), SIGKILL after a minute."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.terminate()
    for proc in running:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def command(args: list[str], modes: list[str]) -> str:
    """The one replay command that runs ``modes`` with ``args``."""
    return " ".join(
        ["vllm-ascend-balance", "replay", *args[:4], "--mode", ",".join(modes),
         *args[4:]]
    )  # fmt: skip


def check_modes(text: str) -> None:
    """Every mode of ``--modes`` as the replay reads it (its ``--mode``
    grammar, then what the simulated engine can model on the installed
    vLLM), before any replay runs: a bad one among several replay processes
    was refused only after the others had run.

    Raises:
        SystemExit: one line naming ``--modes``, the mode and the fix.
    """
    from vllm_ascend_balance.replay.pipeline.modes import ModeError, parse_modes
    from vllm_ascend_balance.replay.sim.engine import SimEngineError, check_mode

    try:
        for mode in parse_modes(text):
            check_mode(mode)
    except (ModeError, SimEngineError) as error:
        # The replay's words name its --mode; this script's flag is --modes.
        said = str(error).removeprefix("--mode")
        raise SystemExit(f"--modes{said}") from None


def run_modes(
    case: Case,
    seed: int,
    modes: list[str],
    work: Path,
    jobs: int = 1,
    code: tuple[Path, str] | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``modes`` on ``case``'s workload for ``seed``: one run per mode
    (the simulated engine is deterministic), split over ``jobs`` replay
    processes at once (:func:`.reuse.split_modes`). ``code``: (checkout,
    label) whose package the replays import first (its directory is their
    working directory and the head of ``PYTHONPATH``); the label is
    recorded per row. ``extra``: further replay options (in the recorded
    command too), e.g. ``["--routing", "trtllm-adp"]``.

    Returns the run record of :mod:`.runs` (``values`` in ``modes`` order).

    Raises:
        SystemExit: a replay failed (its output is shown).
    """
    argv = [*base_args(case, seed, work), *extra]
    env, cwd = dict(os.environ), ROOT
    if code is not None:
        cwd = code[0]
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(code[0]), env.get("PYTHONPATH")])
        )
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    t0 = time.monotonic()
    ended: dict[int, float] = {}
    try:
        for i, chunk in enumerate(split_modes(modes, jobs)):
            out = work / f"{case.key}-seed{seed}-{i}.json"
            log = work / f"{case.key}-seed{seed}-{i}.log"
            shown = command(_shown(argv, work), chunk)
            print(f"$ {shown}", file=sys.stderr, flush=True)
            cmd = [sys.executable, "-m", "vllm_ascend_balance", "replay",
                   *argv[:4], "--mode", ",".join(chunk), *argv[4:],
                   "--json", str(out)]  # fmt: skip
            with log.open("w") as f, deferred():
                proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f)
                procs.append((proc, out, log))
        while len(ended) < len(procs):
            for i, (proc, out, log) in enumerate(procs):
                if i in ended or proc.poll() is None:
                    continue
                ended[i] = time.monotonic() - t0
                if proc.returncode != 0 or not out.exists():
                    sys.stderr.write(log.read_text()[-5000:])
                    raise SystemExit(
                        f"replay {case.key} seed {seed} failed (exit {proc.returncode})"
                    )
            time.sleep(0.2)
    finally:
        _stop([proc for proc, _, _ in procs])
    payloads = []
    for _, out, _ in procs:
        payloads.append(json.loads(out.read_text()))
        out.unlink()
    walls = [ended[i] for i in range(len(procs))]
    by_mode = {r["mode"]: r for p in payloads for r in p["runs"]}
    mode_wall = {
        m: round(by_mode[m]["wall"]["startup_s"] + by_mode[m]["wall"]["run_s"], 2)
        for m in modes
    }
    starts = [
        w - sum(mode_wall[r["mode"]] for r in p["runs"])
        for w, p in zip(walls, payloads, strict=True)
    ]
    record: dict[str, Any] = {
        "seed": seed,
        "command": command(_shown(argv, work), modes),
        "args": _shown(argv, work),
        "wall_s": round(sum(walls), 1),
        "startup_s": round(sum(starts) / len(starts), 1),
        "requests": payloads[0]["workload"]["requests"],
        "span_s": payloads[0]["workload"]["span_s"],
        "mode_wall_s": mode_wall,
        "values": {m: run_values(by_mode[m]) for m in modes},
        "digests": {m: digest(by_mode[m]) for m in modes},
    }
    if code is not None:
        record["code"] = dict.fromkeys(modes, code[1])
    return record


def run_seed(
    case: Case,
    seed: int,
    modes: list[str],
    work: Path,
    vllm: str,
    jobs: int = 1,
    code: tuple[Path, str] | None = None,
    stored: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``case`` for ``seed`` with ``modes``, reusing the rows of the
    ``stored`` run of that case and seed that :mod:`.reuse` allows: the
    baseline is always run again; if its row is bit-identical to the stored
    one, the stored rows are kept and only new modes run; if not, every
    stored row is run again. Prints what was reused. Returns the run
    record (``vllm`` recorded in it), rows in ``modes`` order, then the
    kept rows not asked for."""
    args = _shown(base_args(case, seed, work), work)
    todo = plan(stored, args, vllm, modes, settings.BASELINE)
    where = f"{case.key} seed {seed}"
    fresh = run_modes(case, seed, todo.fresh, work, jobs, code)
    fresh["vllm"] = vllm
    if stored is not None and todo.kept:
        if same_baseline(stored, fresh, settings.BASELINE):
            fresh = merge(stored, fresh, todo.kept)
            print(
                f"{where}: reused {len(todo.kept)} stored row(s) "
                f"({', '.join(todo.kept)}): `{settings.BASELINE}` bit-identical",
                file=sys.stderr,
            )
        else:
            print(
                f"{where}: `{settings.BASELINE}` changed against the stored run: "
                f"running its {len(todo.kept)} other row(s) again",
                file=sys.stderr,
            )
            again = run_modes(case, seed, todo.kept, work, jobs, code)
            fresh = merge(again, fresh, todo.kept)
    elif stored is not None:
        print(f"{where}: the stored run differs in arguments or vLLM: "
              "nothing reused", file=sys.stderr)  # fmt: skip
    order = ordered(fresh["values"], [*modes, *settings.all_modes(points=99)])
    for key in ("values", "digests", "mode_wall_s"):
        fresh[key] = {m: fresh[key][m] for m in order if m in fresh[key]}
    fresh["command"] = command(fresh["args"], list(fresh["values"]))
    return fresh


def case_values(record: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """``{mode: {metric: [value per seed]}}`` of a case record, for modes
    that ran on every seed."""
    runs = record["runs"]
    common = set(runs[0]["values"]).intersection(*(r["values"] for r in runs))
    out: dict[str, dict[str, list[float]]] = {}
    for mode in runs[0]["values"]:
        if mode in common:
            keys = runs[0]["values"][mode]
            out[mode] = {k: [r["values"][mode][k] for r in runs] for k in keys}
    return out
