# SPDX-License-Identifier: Apache-2.0
"""The house stays as built: rooms that say what they are for, small
modules, no import cycles (issue #41; the map: CONTRIBUTING.md, "Where does
X go").

Read from the files alone (``ast``; nothing is imported, so no lane can
change the verdict):

- every folder of the package is a room whose ``__init__.py`` has a
  non-empty docstring naming its job;
- no Python module of the package, ``upstream_patch/``,
  ``downstream_patch/`` or ``benchmarks/`` is over :data:`LIMIT` lines, but
  for the few in :data:`ALLOWED`, each with its reason; an entry that is no
  longer needed fails too, so the list only shrinks;
- no import cycle between the package's modules, counting every import
  statement, those inside functions too (an import moved into a function
  only defers a cycle);
- every import points down a floor (or along one): the package is built in
  :data:`FLOORS`, the ground (``logger``, ``log_streams``, ``ipc_sockets``,
  ``loopback_ports``) first, then
  ``gate``, ``observability``, ``wiring``, the replay's rooms, ``tools``;
  a module imports its own floor or those below, never one above (a
  function's import too), and every module sits on a floor;
- the replay's two engine rooms (``replay/real/``, ``replay/sim/``) never
  import each other, and the pipeline (``replay/pipeline/``) imports
  neither: it loads the engine ``--engine`` names by its registry.

Negative controls: a synthetic package with a cycle, an oversized module, a
room without a docstring, a stale allow-list entry, a pipeline that
imports an engine room, and imports up a floor (the three this check was
written against) with a module on no floor, each of which the matching
check must report.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.lanes import REPO_ROOT

pytestmark = pytest.mark.lane_scope("release")

PACKAGE = "vllm_ascend_balance"
#: Lines a module may have ("no module over ~300 lines", CONTRIBUTING.md).
LIMIT = 300
#: Folders whose Python modules are held to LIMIT (the package included).
SIZED = (PACKAGE, "upstream_patch", "downstream_patch", "benchmarks")
#: Modules over the limit for now, each with its reason. Remove an entry
#: once its module is split (a stale entry fails the test).
ALLOWED: dict[str, str] = {}


def python_files(root: Path, folders: tuple[str, ...]) -> Iterator[Path]:
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def oversized(
    root: Path, folders: tuple[str, ...], allowed: dict[str, str]
) -> list[str]:
    """``path: N lines`` for each module over :data:`LIMIT` not in
    ``allowed``, and ``path: ...`` for each entry of ``allowed`` that is not
    (or no longer) over it."""
    found = []
    over = set()
    for path in python_files(root, folders):
        rel = path.relative_to(root).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > LIMIT:
            over.add(rel)
            if rel not in allowed:
                found.append(f"{rel}: {lines} lines (limit {LIMIT}): split it by job")
    found += [
        f"{rel}: allowed over {LIMIT} lines but is not: remove it from ALLOWED"
        for rel in sorted(set(allowed) - over)
    ]
    return found


def rooms_without_docstring(root: Path, package: str) -> list[str]:
    """Every folder of ``package`` holding modules whose ``__init__.py`` is
    missing or has no (or an empty) docstring."""
    found = []
    for folder in sorted({p.parent for p in (root / package).rglob("*.py")}):
        if "__pycache__" in folder.parts:
            continue
        init = folder / "__init__.py"
        rel = folder.relative_to(root).as_posix()
        if not init.exists():
            found.append(f"{rel}/: no __init__.py")
            continue
        doc = ast.get_docstring(ast.parse(init.read_text()))
        if not (doc and doc.strip()):
            found.append(f"{rel}/__init__.py: no docstring naming the room's job")
    return found


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package modules it imports, anywhere in it (a function's
    import too: a cycle deferred into a function is still a knot). ``from A
    import b`` counts ``A.b`` when that is a module, else ``A``; relative
    imports are resolved."""
    paths = {_module_name(root, p): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[
                        : len(anchor) - node.level + (1 if is_package else 0)
                    ]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                    for a in node.names
                ]
            edges.update(t for t in targets if t in paths and t != name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module
    (Tarjan's algorithm), each as the modules on it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


#: room -> the rooms it must not import (the replay's engine seam).
SEPARATE = {
    "replay.pipeline": ("replay.real", "replay.sim"),
    "replay.real": ("replay.sim",),
    "replay.sim": ("replay.real",),
}


def crossings(
    graph: dict[str, set[str]], package: str, separate: dict[str, tuple[str, ...]]
) -> list[str]:
    """``a -> b`` for each import from a room to a room it must not import."""

    def room(module: str) -> str | None:
        return next((r for r in separate if module.startswith(f"{package}.{r}.")), None)

    def within(module: str, rooms: tuple[str, ...]) -> bool:
        return any(module.startswith(f"{package}.{r}.") for r in rooms)

    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if (r := room(module)) is not None and within(target, separate[r])
    ]


#: The package's floors, lowest first; each a tuple of rooms (module paths
#: under the package; ``""`` is its ``__init__``). A module sits on the
#: floor of the longest room that holds it, and imports only from its own
#: floor and those below.
FLOORS: tuple[tuple[str, ...], ...] = (
    # ground: the package, every module's logger, the log-stream, IPC
    # socket and loopback port helpers of its commands
    ("", "logger", "log_streams", "ipc_sockets", "loopback_ports"),
    # the decision inside each rank's scheduler
    ("gate",),
    # what the gate reports while it runs
    ("observability",),
    # how the gate gets into a deployment: the setting, activation, hooks
    ("wiring",),
    # the replay: other projects' policies, then the pipeline's types and
    # stages, the weightless model on them, the engines and validate-sim
    ("replay", "replay.peers"),
    ("replay.pipeline",),
    ("replay.model",),
    ("replay.real", "replay.sim", "replay.validation"),
    # the commands, and ``python -m``
    ("tools",),
    ("__main__",),
)


def floor_of(module: str, package: str, floors: tuple[tuple[str, ...], ...]) -> int:
    """The floor ``module`` sits on (an index into ``floors``), -1: none."""
    rel = "" if module == package else module.removeprefix(f"{package}.")
    best, level = -1, -1
    for index, rooms in enumerate(floors):
        for room in rooms:
            inside = rel == room or (room != "" and rel.startswith(f"{room}."))
            if inside and len(room) > best:
                best, level = len(room), index
    return level


def upward_imports(
    graph: dict[str, set[str]], package: str, floors: tuple[tuple[str, ...], ...]
) -> list[str]:
    """``a -> b (floor i up to j)`` for each import from a module to a module
    on a higher floor, and ``a: on no floor`` for each module no room of
    ``floors`` holds."""
    found = []
    for module, targets in sorted(graph.items()):
        own = floor_of(module, package, floors)
        if own < 0:
            found.append(f"{module}: on no floor (add its room to FLOORS)")
            continue
        for target in sorted(targets):
            up = floor_of(target, package, floors)
            if up > own:
                found.append(f"{module} -> {target} (floor {own} up to {up})")
    return found


def test_every_room_names_its_job() -> None:
    assert rooms_without_docstring(REPO_ROOT, PACKAGE) == []


def test_no_module_over_the_limit() -> None:
    assert oversized(REPO_ROOT, SIZED, ALLOWED) == []


def test_no_import_cycle() -> None:
    graph = import_graph(REPO_ROOT, PACKAGE)
    assert len(graph) > 50  # the package was found and read
    assert cycles(graph) == []


def test_the_replay_engines_stay_behind_their_seam() -> None:
    graph = import_graph(REPO_ROOT, PACKAGE)
    assert crossings(graph, PACKAGE, SEPARATE) == []


def test_every_import_points_down_a_floor() -> None:
    graph = import_graph(REPO_ROOT, PACKAGE)
    assert len(graph) > 50  # the package was found and read
    assert upward_imports(graph, PACKAGE, FLOORS) == []


# -- negative controls: a synthetic package with each fault ------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_negative_control_a_cycle_is_found(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": '"""The package."""\n',
            "pkg/room/__init__.py": '"""A room."""\n',
            "pkg/room/a.py": "from pkg.room import b\n",
            "pkg/room/b.py": "from . import c\n",
            "pkg/room/c.py": "import pkg.room.a\n",
            # Deferred into a function, still a cycle.
            "pkg/room/d.py": "def f():\n    from pkg.room import e\n",
            "pkg/room/e.py": "from pkg.room import d\n",
            # A chain is not a cycle.
            "pkg/room/f.py": "from pkg.room import a\n",
        },
    )
    found = cycles(import_graph(root, "pkg"))
    assert found == [
        ["pkg.room.a", "pkg.room.b", "pkg.room.c"],
        ["pkg.room.d", "pkg.room.e"],
    ]


def test_negative_control_an_oversized_module_is_found(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": '"""The package."""\n',
            "pkg/big.py": "x = 1\n" * (LIMIT + 1),
            "pkg/fits.py": "x = 1\n" * LIMIT,
            "pkg/allowed.py": "x = 1\n" * (LIMIT + 5),
            "pkg/split_already.py": "x = 1\n",
        },
    )
    allowed = {"pkg/allowed.py": "why", "pkg/split_already.py": "why"}
    found = oversized(root, ("pkg",), allowed)
    assert [f.split(":")[0] for f in found] == ["pkg/big.py", "pkg/split_already.py"]


def test_negative_control_a_room_without_docstring_is_found(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": '"""The package."""\n',
            "pkg/named/__init__.py": '"""A room with a job."""\n',
            "pkg/named/m.py": "",
            "pkg/silent/__init__.py": "# a comment is not a docstring\n",
            "pkg/silent/m.py": "",
            "pkg/empty/__init__.py": '""" """\n',
            "pkg/missing/m.py": "",
        },
    )
    assert rooms_without_docstring(root, "pkg") == [
        "pkg/empty/__init__.py: no docstring naming the room's job",
        "pkg/missing/: no __init__.py",
        "pkg/silent/__init__.py: no docstring naming the room's job",
    ]


def test_negative_control_a_pipeline_importing_an_engine_is_found(
    tmp_path: Path,
) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": '"""The package."""\n',
            "pkg/replay/__init__.py": '"""Replay."""\n',
            "pkg/replay/pipeline/__init__.py": '"""Pipeline."""\n',
            "pkg/replay/pipeline/run.py": "from pkg.replay.sim import engine\n",
            "pkg/replay/pipeline/ok.py": "from pkg.replay.model import cost\n",
            "pkg/replay/sim/__init__.py": '"""Sim."""\n',
            "pkg/replay/sim/engine.py": "def f():\n    import pkg.replay.real.engine\n",
            "pkg/replay/real/__init__.py": '"""Real."""\n',
            "pkg/replay/real/engine.py": "from pkg.replay.pipeline import ok\n",
            "pkg/replay/model/__init__.py": '"""Model."""\n',
            "pkg/replay/model/cost.py": "",
        },
    )
    assert crossings(import_graph(root, "pkg"), "pkg", SEPARATE) == [
        "pkg.replay.pipeline.run -> pkg.replay.sim.engine",
        "pkg.replay.sim.engine -> pkg.replay.real.engine",
    ]


def test_negative_control_an_import_up_a_floor_is_found(tmp_path: Path) -> None:
    """The three upward imports this check was written against, on the
    package's own floors, and a room on none; the imports down or along a
    floor beside them pass."""
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": '"""The package."""\n',
            "pkg/logger.py": "",
            "pkg/log_streams.py": "from pkg import logger\n",
            "pkg/gate/__init__.py": '"""Gate."""\n',
            "pkg/gate/scheduler.py": "from pkg.logger import init_logger\n",
            "pkg/observability/__init__.py": '"""Observability."""\n',
            "pkg/observability/stall.py": "from pkg.wiring import config_read\n",
            "pkg/wiring/__init__.py": '"""Wiring."""\n',
            "pkg/wiring/config_read.py": "from pkg.gate import scheduler\n",
            "pkg/replay/__init__.py": '"""Replay."""\n',
            "pkg/replay/pipeline/__init__.py": '"""Pipeline."""\n',
            "pkg/replay/pipeline/environment.py": "import pkg.tools.log_streams\n",
            # Deferred into a function, still up a floor.
            "pkg/replay/pipeline/options.py": (
                "def f():\n    from pkg.replay.model import cost\n"
            ),
            "pkg/replay/model/__init__.py": '"""Model."""\n',
            "pkg/replay/model/cost.py": "from pkg.replay.pipeline import options\n",
            "pkg/tools/__init__.py": '"""Tools."""\n',
            "pkg/tools/log_streams.py": "",
            "pkg/tools/cli.py": "from pkg.replay.model import cost\n",
            "pkg/__main__.py": "from pkg.tools import cli\n",
            "pkg/annex/__init__.py": '"""A room on no floor."""\n',
            "pkg/annex/m.py": "from pkg import logger\n",
        },
    )
    found = upward_imports(import_graph(root, "pkg"), "pkg", FLOORS)
    assert [f.split(" (")[0] for f in found] == [
        "pkg.annex: on no floor",
        "pkg.annex.m: on no floor",
        "pkg.observability.stall -> pkg.wiring.config_read",
        "pkg.replay.pipeline.environment -> pkg.tools.log_streams",
        "pkg.replay.pipeline.options -> pkg.replay.model.cost",
    ]
