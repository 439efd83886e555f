# SPDX-License-Identifier: Apache-2.0
"""Upstream's own scheduler unit tests, from the release sdist with our series
applied (its test hunk included), run against the lane's patched install.

Offline by construction: upstream's ``create_scheduler()`` names hub models
(``facebook/opt-125m``); a fake Hugging Face hub cache (``HF_HOME``) holding
only a ``config.json`` per model makes them resolve with ``HF_HUB_OFFLINE=1``.
The upstream test files run unmodified, in a subprocess whose rootdir is the
sdist copy: this repository also has a top-level ``tests`` package, and the
two must not share an interpreter. Runs against the installed scheduler (the
claims: upstream's suite and the seam tests pass) are fresh interpreters, as
upstream's CI runs them; the negative controls' runs against a
``scheduler.py`` variant are forked from one process per tree that has
imported what ``scheduler.py`` imports (tests/support/upstream_forks.py:
the same modules in the same order as a fresh run, for one import per lane
instead of one per variant).

What is deselected, and why (decided statically, before the run, and printed
by the tests):

* tests whose code (or a module-level helper or fixture they use) names a hub
  model other than the faked ones. In practice these are the multimodal
  tests (``llava-hf/llava-1.5-7b-hf``, ``Qwen/Qwen2.5-VL-3B-Instruct``): a
  fake config is not enough for them, because vLLM inspects the model class,
  and the multimodal classes import ``torchvision``, which the CPU lane venv
  removes (its PyPI wheel is a CUDA build). None of them reach the
  WAITING-loop stop condition differently from the text-only tests.
* vLLM 0.34's CPU platform refuses x86 without triton-cpu (not on the
  package index): the child run sets ``vllm.triton_utils.HAS_TRITON`` for
  that one platform check (no scheduler test runs a kernel).
* upstream's top-level ``tests/conftest.py`` is not copied: it imports
  ``tblib``, PIL and the model-test machinery, none of which the scheduler
  unit tests use.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.lanes import current_lane, pin_tag, platform_missing_reason
from tests.support.series_tool import series
from tests.support.upstream_forks import ForkServer

pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

LANE = current_lane()
SEAM_TEST = "test_should_stop_admitting_waiting_override"
KV_TEST = "test_should_stop_admitting_waiting_admits_kv_holding_requests"
ASYNC_KV_TEST = "test_should_stop_admitting_waiting_kv_scope"
COUNT_TEST = "test_should_stop_admitting_waiting_asked_once_per_schedule"
_PATCH_TEXT = "".join(
    patch.read_text() for patch in series.series_patches(pin_tag(LANE), lane=LANE)
)
# Where the release records prefill_capacity_bound and takes
# throttle_prefills (0.27 on), the override test also runs the step after a
# held one throttled: it must admit all the same (the coupling).
COUPLED = '@pytest.mark.parametrize("throttle_prefills", [False, True])' in _PATCH_TEXT
KV_SCOPE = f"def {KV_TEST}(" in _PATCH_TEXT
# 0.34 on: the kv scope test holds async KV loads too, at the running cap
# and below it.
ASYNC_KV = f"def {ASYNC_KV_TEST}(" in _PATCH_TEXT
# The series' tests, by pytest id: the override test over sync/async
# scheduling (and, where coupled, throttle_prefills False/True: the
# decorator nearest the function comes first in the id); the call counter;
# and, where the release has kv_holding_waiting, the exemption test.
MAIN_CASES = (
    {f"{SEAM_TEST}[{a}-{t}]" for a in (False, True) for t in (False, True)}
    if COUPLED
    else {f"{SEAM_TEST}[False]", f"{SEAM_TEST}[True]"}
)
HELD_CASES = {f"{SEAM_TEST}[{a}-True]" for a in (False, True)} if COUPLED else set()
AT_CAP, BELOW_CAP = f"{ASYNC_KV_TEST}[at-cap]", f"{ASYNC_KV_TEST}[below-cap]"
KV_CASES = {AT_CAP, BELOW_CAP} if ASYNC_KV else ({KV_TEST} if KV_SCOPE else set())
SEAM_CASES = MAIN_CASES | {COUNT_TEST} | KV_CASES
HONOUR_NEW_ONLY = "stop_admitting_waiting and request_queue is self.waiting"
COUPLING_MARK = "throttled step admits.\n"
SNAPSHOT = "0" * 39 + "1"
# vLLM 0.34's CPU platform raises on x86 without triton-cpu (the upstream run
# selects that platform, see _run_upstream); read off the installed file.
_CPU_PLATFORM = importlib.util.find_spec("vllm.platforms.cpu")
_CPU_NEEDS_TRITON = bool(
    _CPU_PLATFORM
    and _CPU_PLATFORM.origin
    and "requires Triton (triton-cpu)" in Path(_CPU_PLATFORM.origin).read_text()
)  # any 40-hex commit id; refs/main points at it

# Real OPT configs (public facts of the checkpoints; no weights are needed:
# the scheduler only reads sizes off the config).
_OPT_COMMON = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "activation_function": "relu",
    "do_layer_norm_before": True,
    "max_position_embeddings": 2048,
    "vocab_size": 50272,
    "bos_token_id": 2,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "torch_dtype": "float16",
}
FAKED_HUB_MODELS = {
    "facebook/opt-125m": {
        **_OPT_COMMON,
        "hidden_size": 768,
        "ffn_dim": 3072,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "word_embed_proj_dim": 768,
    },
    "facebook/opt-350m": {
        **_OPT_COMMON,
        "hidden_size": 1024,
        "ffn_dim": 4096,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "word_embed_proj_dim": 512,
        "do_layer_norm_before": False,
    },
}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]$")

# A pytest plugin for the child run: deselects by exact test function name
# (``--deselect`` would match node-id prefixes, so ``test_x`` would also drop
# ``test_x_more``) and reports what it dropped.
_PLUGIN = """
import importlib.util, json, os, sys

# For the negative controls: run the upstream tests against another
# scheduler.py (same release), imported under the real module name before
# any test module (or AsyncScheduler) imports it.
_variant = os.environ.get("VAB_SCHEDULER_VARIANT")
if _variant:
    _name = "vllm.v1.core.sched.scheduler"
    assert not {_name, "vllm.v1.core.sched.async_scheduler"} & set(sys.modules)
    _spec = importlib.util.spec_from_file_location(_name, _variant)
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_name] = _module
    _spec.loader.exec_module(_module)

# vLLM 0.34's CPU platform refuses x86 without triton-cpu, which is not on
# the package index; the scheduler unit tests run no kernel, so that one
# check is told it is present (set only where the release has the check).
if os.environ.get("VAB_STUB_TRITON_CPU"):
    import vllm.triton_utils as _triton_utils
    _triton_utils.HAS_TRITON = True

def pytest_collection_modifyitems(config, items):
    wanted = json.loads(os.environ["VAB_DESELECT"])
    keep, drop = [], []
    for item in items:
        key = item.path.name + "::" + getattr(item, "originalname", item.name)
        (drop if key in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    with open(os.environ["VAB_DESELECTED_OUT"], "w") as out:
        json.dump(sorted(item.nodeid for item in drop), out)
"""


def _write_fake_hub(hf_home: Path) -> None:
    for model_id, config in FAKED_HUB_MODELS.items():
        repo = hf_home / "hub" / ("models--" + model_id.replace("/", "--"))
        (repo / "snapshots" / SNAPSHOT).mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(SNAPSHOT)
        (repo / "snapshots" / SNAPSHOT / "config.json").write_text(json.dumps(config))


def _scheduler_test_files(core: Path) -> list[str]:
    """Upstream's test files under tests/v1/core that drive a Scheduler."""
    return sorted(
        path.name
        for path in core.glob("test_*.py")
        if re.search(r"create_scheduler|sched\.scheduler import", path.read_text())
    )


@pytest.fixture(scope="module")
def upstream_tree(tmp_path_factory) -> Path:
    """tmp copy of the sdist's scheduler tests (+ the helpers they import)
    with the lane's series applied to them, and a fake HF hub cache."""
    sdist = series.sdist(LANE)
    root = tmp_path_factory.mktemp(f"upstream-{LANE}")
    for rel in [
        "pyproject.toml",  # upstream's own pytest config (markers)
        "tests/__init__.py",
        "tests/v1/__init__.py",
        "tests/v1/kv_connector/__init__.py",
        "tests/v1/kv_connector/unit/__init__.py",
        "tests/v1/kv_connector/unit/utils.py",  # imported by tests/v1/core/utils
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist / rel, root / rel)
    shutil.copytree(sdist / "tests/v1/core", root / "tests/v1/core")
    patches = series.series_patches(pin_tag(LANE), lane=LANE)
    result = series.git_apply(root, patches, "--include=tests/*")
    assert result.returncode == 0, result.stderr
    (root / "_vab_offline_plugin.py").write_text(_PLUGIN)
    _write_fake_hub(root / "hf")
    return root


def _module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _unfaked_models(test_file: Path) -> dict[str, set[str]]:
    """{test function name: hub ids it needs that are not faked}, following
    module-level helpers and fixtures it calls or requests (transitively)."""
    tree = ast.parse(test_file.read_text())
    functions = _module_functions(tree)
    own_ids: dict[str, set[str]] = {}
    uses: dict[str, set[str]] = {}
    for name, func in functions.items():
        own_ids[name] = {
            node.value
            for node in ast.walk(func)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and HUB_ID.match(node.value)
            and node.value not in FAKED_HUB_MODELS
        }
        referenced = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
        referenced |= {a.arg for a in func.args.args}  # fixtures by name
        uses[name] = referenced & functions.keys()
    needed: dict[str, set[str]] = {}
    for name in functions:
        if not name.startswith("test_"):
            continue
        seen, todo, ids = {name}, [name], set()
        while todo:
            current = todo.pop()
            ids |= own_ids[current]
            for callee in uses[current] - seen:
                seen.add(callee)
                todo.append(callee)
        if ids:
            needed[name] = ids
    return needed


def _async_with_pipeline_parallel(test_file: Path) -> list[str]:
    """Test functions that build a scheduler with ``async_scheduling=True``
    and ``pipeline_parallel_size`` > 1 in one call (decided statically)."""
    found = []
    for name, func in _module_functions(ast.parse(test_file.read_text())).items():
        for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
            kw = {
                k.arg: k.value.value
                for k in call.keywords
                if isinstance(k.value, ast.Constant)
            }
            pp = kw.get("pipeline_parallel_size")
            if kw.get("async_scheduling") is True and isinstance(pp, int) and pp > 1:
                found.append(name)
                break
    return found


#: One fork server per upstream tree, for the variant runs; closed with
#: the module (:func:`_close_fork_servers`).
_FORK_SERVERS: dict[Path, ForkServer] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_fork_servers():
    yield
    while _FORK_SERVERS:
        _FORK_SERVERS.popitem()[1].close()


def _common_env(root: Path) -> dict[str, str]:
    """The environment of every upstream run in ``root`` (each run adds its
    own ``VAB_DESELECT``, ``VAB_SCHEDULER_VARIANT``, ``VAB_DESELECTED_OUT``)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "VAB_"))
    }
    env.update(
        HF_HOME=str(root / "hf"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
    )
    if platform_missing_reason():
        # Upstream's create_scheduler() builds a DeviceConfig("auto"), which
        # needs a platform; a VLLM_TARGET_DEVICE=empty install has none. An
        # explicit CPU target is vLLM's own switch for that (the scheduler
        # under test never touches a device).
        env["VLLM_TARGET_DEVICE"] = "cpu"
        if _CPU_NEEDS_TRITON:
            env["VAB_STUB_TRITON_CPU"] = "1"
    return env


def _run_upstream(
    root: Path, files: list[str], *pytest_args: str, variant: Path | None = None
):
    deselect: dict[str, str] = {}
    for name in files:
        for test, ids in _unfaked_models(root / "tests/v1/core" / name).items():
            deselect[f"{name}::{test}"] = (
                f"needs hub model(s) {sorted(ids)}: not faked offline "
                f"(multimodal model classes import torchvision, absent here)"
            )
    if platform_missing_reason():
        for name in files:
            for test in _async_with_pipeline_parallel(root / "tests/v1/core" / name):
                deselect[f"{name}::{test}"] = (
                    "async scheduling with pipeline parallelism: vLLM's CPU "
                    "platform refuses it, and this install has no other (the "
                    "run uses vLLM's explicit CPU target, see below)"
                )
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    report = run_dir / "junit.xml"
    deselected_out = run_dir / "deselected.json"
    env = _common_env(root)
    run_env = {
        "VAB_DESELECT": json.dumps(sorted(deselect)),
        "VAB_SCHEDULER_VARIANT": str(variant or ""),
        "VAB_DESELECTED_OUT": str(deselected_out),
    }
    argv = [
        *(f"tests/v1/core/{name}" for name in files),
        "-p", "no:cacheprovider", "-p", "_vab_offline_plugin",
        "-q", "--tb=short", f"--junitxml={report}", *pytest_args,
    ]  # fmt: skip
    if variant is not None:
        # A variant run: forked from one preloaded process per tree
        # (tests/support/upstream_forks.py), not a fresh interpreter each.
        if root not in _FORK_SERVERS:
            _FORK_SERVERS[root] = ForkServer(root, env)
        result = _FORK_SERVERS[root].run(argv, run_env, timeout=900)
    else:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", *argv],
            cwd=root,
            env={**env, **run_env},
            capture_output=True,
            text=True,
            timeout=900,
        )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout else ""
    print(f"upstream run ({LANE} lane): {summary}")
    deselected = json.loads(deselected_out.read_text())
    per_test: dict[str, int] = {}
    for nodeid in deselected:
        key = nodeid.split("/")[-1].split("[")[0]
        per_test[key] = per_test.get(key, 0) + 1
    for key, count in sorted(per_test.items()):
        print(f"  deselected {key} ({count} case(s)): {deselect[key]}")
    outcomes: dict[str, str] = {}
    if report.is_file():
        for case in ET.parse(report).getroot().iter("testcase"):
            kinds = [child.tag for child in case]
            outcome = next(
                (k for k in ("failure", "error", "skipped") if k in kinds), "passed"
            )
            outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return result, summary, outcomes, deselected


def _failed(outcomes: dict[str, str]) -> list[str]:
    return [name for name, kind in outcomes.items() if kind in ("failure", "error")]


def _node_id(outcome_key: str) -> str:
    """``tests.v1.core.test_x::test_y[p]`` (junit) -> a pytest node id."""
    classname, name = outcome_key.rsplit("::", 1)
    return classname.replace(".", "/") + ".py::" + name


def _failing_without_the_series(root: Path, outcomes: dict[str, str]) -> set[str]:
    """The failures of a run that the unpatched release has too.

    Re-runs only the failed tests, against the release's own
    ``scheduler.py`` (from the sdist) in place of the installed one: what
    fails there as well is this environment's (for example a configuration
    this build cannot make), not the series'. Printed, so it stays visible.
    """
    failed = _failed(outcomes)
    if not failed:
        return set()
    original = _variant_file(
        root,
        "release-original",
        (series.sdist(LANE) / "vllm/v1/core/sched/scheduler.py").read_text(),
    )
    _, summary, baseline, _ = _run_upstream(
        root, [], *map(_node_id, failed), variant=original
    )
    both = {key for key in failed if baseline.get(key) in ("failure", "error")}
    for key in sorted(both):
        print(f"  fails on the unpatched {pin_tag(LANE)} too (environment): {key}")
    return both


def test_upstream_seam_tests_pass_against_the_patched_install(upstream_tree):
    """The brief's selection on test_scheduler.py. ``-k ... or test_schedule``
    also matches the module name, so it selects the whole file: the run is
    every offline-capable test of upstream's test_scheduler.py. The series
    may turn no test red: a failure passes only if the unpatched release
    fails it the same way here."""
    result, summary, outcomes, _ = _run_upstream(
        upstream_tree,
        ["test_scheduler.py"],
        "-k",
        "should_stop_admitting_waiting or test_schedule",
    )
    environment = _failing_without_the_series(upstream_tree, outcomes)
    assert set(_failed(outcomes)) == environment, (
        result.stdout[-4000:] + result.stderr[-2000:]
    )
    ran = {name.rsplit("::", 1)[-1]: kind for name, kind in outcomes.items()}
    # Every case of the tests our patch adds ran (not deselected, not
    # skipped) and passed.
    assert {case: ran.get(case) for case in SEAM_CASES} == dict.fromkeys(
        SEAM_CASES, "passed"
    ), summary
    match = re.search(r"(\d+) passed", summary)
    skipped = list(outcomes.values()).count("skipped")
    assert match, summary
    assert int(match.group(1)) == len(outcomes) - skipped - len(environment)
    # The upstream tests run against the installed (patched) vLLM, not a copy.
    assert "error" not in summary


@pytest.mark.lane_scope("release")  # -k selection; the run above checks both cases
def test_upstream_seam_tests_alone(upstream_tree):
    """Exactly the new tests, selected by name: their cases are collected
    and pass (and nothing else matches the name)."""
    result, summary, outcomes, deselected = _run_upstream(
        upstream_tree, ["test_scheduler.py"], "-k", "should_stop_admitting_waiting"
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(rf"\b{len(SEAM_CASES)} passed\b", summary), summary
    assert {name.rsplit("::", 1)[-1] for name in outcomes} == SEAM_CASES
    assert set(outcomes.values()) == {"passed"}


def test_upstream_scheduler_suite_offline(upstream_tree):
    """Broader subset: every other upstream test file under tests/v1/core that
    drives a Scheduler (async scheduler, priority, prefix caching, ...)."""
    files = [
        name
        for name in _scheduler_test_files(upstream_tree / "tests/v1/core")
        if name != "test_scheduler.py"  # covered above
    ]
    assert "test_async_scheduler.py" in files
    result, summary, outcomes, deselected = _run_upstream(upstream_tree, files)
    environment = _failing_without_the_series(upstream_tree, outcomes)
    assert set(_failed(outcomes)) == environment, (
        result.stdout[-4000:] + result.stderr[-2000:]
    )
    # Not a vacuous run: relative floors, since the releases' suites differ
    # in size (v0.23.0 has only two such files besides test_scheduler.py,
    # and one is a multimodal blast test deselected above; v0.27.1 has >50
    # passing cases). Every drop has a recorded reason (printed above).
    total = len(outcomes) + len(deselected)
    assert sum(kind == "passed" for kind in outcomes.values()) > total // 3, summary
    assert len(deselected) < total * 2 // 3, deselected


def _variant_file(root: Path, name: str, source: str) -> Path:
    path = root / "variants" / name / "scheduler.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


def _all_queues_source(source: str) -> str:
    """The patched file holding every waiting queue (the wrong scope)."""
    from tests.support.seam_shapes import all_queues_source

    return all_queues_source(source)


def _uncoupled_source(source: str) -> str:
    """The patched file skipping the prefill_capacity_bound update on a held
    step (the alternative the series decided against)."""
    at = source.index(COUPLING_MARK)
    head, tail = source[:at], source[at:]
    assert tail.count("if not defer_prefills:") >= 1, "the installed series changed"
    tail = tail.replace(
        "if not defer_prefills:",
        "if not defer_prefills and not stop_admitting_waiting:",
        1,
    )
    return head + tail


# 0.34 on, the flag replaces the loop's PauseState tests and the cap is an
# assignment the seam never touches: there is no "old shape" to go back to.
PAUSE_SHAPE = "not stop_admitting_waiting" in _PATCH_TEXT


_NO_ASYNC_KV = pytest.mark.skipif(
    not ASYNC_KV, reason="this release has no async_kv_waiting queue"
)
_NEGATIVE = [
    "release original",
    pytest.param(
        "old shape",
        marks=pytest.mark.skipif(
            PAUSE_SHAPE, reason="0.34 on: the cap is not a check the seam follows"
        ),
    ),
    pytest.param(
        "all queues",
        marks=pytest.mark.skipif(
            not KV_SCOPE and not ASYNC_KV,
            reason="this release has no kv_holding_waiting queue",
        ),
    ),
    pytest.param(
        "uncoupled",
        marks=pytest.mark.skipif(
            not COUPLED, reason="this release records no prefill_capacity_bound"
        ),
    ),
    "asked per iteration",
    pytest.param("async loads below the cap", marks=_NO_ASYNC_KV),
    pytest.param("async loads at the cap", marks=_NO_ASYNC_KV),
    pytest.param(
        "pause term dropped",
        marks=pytest.mark.skipif(
            not PAUSE_SHAPE, reason="this release's loop tests no PauseState"
        ),
    ),
]


@pytest.mark.parametrize("variant", _NEGATIVE)
def test_upstream_seam_test_fails_without_the_safe_seam(upstream_tree, variant):
    """Negative controls for the new upstream tests, each run against a
    variant of ``scheduler.py``:

    * the release's original (no seam: the gate is never asked, so requests
      are admitted while it is closed): every case fails;
    * the old shape (cap check inside the overridable method: the override
      returning False admits past ``max_num_seqs``): every case fails;
    * all queues (the hook also holds ``kv_holding_waiting``): the
      exemption cases fail, and only they;
    * uncoupled (the held step is not recorded as ``prefill_capacity_bound``):
      the throttled step after it defers, so the override test's throttled
      cases fail, and only they;
    * asked per iteration (the seam asked on every loop iteration, not once
      per call): the call counter fails, and only it;
    * 0.34 on, async loads below (at) the cap (a held step still starts
      async KV loads from ``async_kv_waiting`` below the running cap, or at
      it): the kv scope test's below-cap (at-cap) case fails, and only it;
    * 0.34 on, pause term dropped (the flag is the hook alone, as the
      round-4 series with an override that forgets ``super()``): the call
      counter, whose override never calls ``super()``, admits under
      ``PAUSED_NEW``, and only it fails.
    """
    import vllm.v1.core.sched.scheduler as installed

    from tests.support import pause_loop_variants as variants
    from tests.support.seam_shapes import old_shape_source

    patched = Path(installed.__file__).read_text()
    if variant == "release original":
        source = (series.sdist(LANE) / "vllm/v1/core/sched/scheduler.py").read_text()
        failing = SEAM_CASES
    elif variant == "old shape":
        source = old_shape_source(patched)
        failing = SEAM_CASES
    elif variant == "all queues":
        source = _all_queues_source(patched)
        failing = KV_CASES
    elif variant == "uncoupled":
        source = _uncoupled_source(patched)
        failing = HELD_CASES
    elif variant == "asked per iteration":
        source = variants.asked_per_iteration_source(patched)
        failing = {COUNT_TEST}
    elif variant == "async loads below the cap":
        source = variants.async_loads_below_cap_source(patched)
        failing = {BELOW_CAP}
    elif variant == "async loads at the cap":
        source = variants.async_loads_at_cap_source(patched)
        failing = {AT_CAP}
    else:
        source = variants.pause_term_dropped_source(patched)
        failing = {COUNT_TEST}
    path = _variant_file(upstream_tree, variant.replace(" ", "-"), source)
    result, summary, outcomes, _ = _run_upstream(
        upstream_tree,
        ["test_scheduler.py"],
        "-k",
        "should_stop_admitting_waiting",
        variant=path,
    )
    ran = {name.rsplit("::", 1)[-1]: kind for name, kind in outcomes.items()}
    expected = {case: "failure" if case in failing else "passed" for case in SEAM_CASES}
    assert ran == expected, (summary, result.stdout[-3000:])


@pytest.mark.lane_scope("release")  # our tolerance's power
def test_failures_the_series_causes_are_not_tolerated(upstream_tree):
    """Negative control for the tolerance above: with an inline cap check
    that says ``>`` instead of the release's ``>=``, upstream's own tests
    fail where the unpatched release passes, and those failures are not
    taken for the environment's."""
    import vllm.v1.core.sched.scheduler as installed

    from tests.support.seam_shapes import inline_cap_mutant_source

    mutant = _variant_file(
        upstream_tree,
        "inline-gt",
        inline_cap_mutant_source(Path(installed.__file__).read_text()),
    )
    _, summary, outcomes, _ = _run_upstream(
        upstream_tree, ["test_scheduler.py"], variant=mutant
    )
    failed = set(_failed(outcomes))
    assert failed, summary
    assert failed - _failing_without_the_series(upstream_tree, outcomes), summary
