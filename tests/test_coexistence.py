# SPDX-License-Identifier: Apache-2.0
"""A good neighbour: other plugins' ``run_engine_core`` wrappers and engine
classes, and vllm-ascend's own balance patch, in real spawned engine processes.

Each case prepares the front-end as vLLM does (plugins registered, in either
order; the config created through the wrapped ``create_engine_config``),
then starts an engine process with what ``EngineCoreProc.run_engine_core``
holds, by the name spawn pickles (``tests/support/engine_entry.py``: the
chain above upstream's ``run_engine_core`` is real; upstream's own call that
would build an engine is replaced by a recorder of what it would build).

- With the neighbour test plugin (``tests/support/neighbour_plugin.py``, on
  every lane): balance off, the target, the engine class and the scheduler
  class are exactly the neighbour's, as without this package; balance on,
  the neighbour's engine class is built and carries the gather hook, and the
  gate is composed onto the scheduler. Negative control: a link that calls
  the bottom of the chain directly (what capturing ``run_engine_core`` at
  import did) loses the neighbour's engine class.
- With vllm-ascend's real code (the ``ascend`` lane: 0.23.0.post1; the
  ``ascend-main`` lane: vllm-ascend main from ``VAB_VLLM_ASCEND_SRC``;
  skipped elsewhere with the reason): for each of the three ways users
  enable balance, in both orders, vllm-ascend reads balance off through its
  own readers (the package hands it that setting,
  :mod:`vllm_ascend_balance.wiring.ascend_steering`), its engine class is not
  built, the gather hook and this package's gate are (one gate, ours);
  balance off, nothing of vllm-ascend's changes. Negative control: without
  the steering, vllm-ascend decides "enabled" for the same config (two gates
  would run).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm.v1.engine.core as engine_core_mod

from tests.support.engine_entry import ASCEND_PATCH_MODULE, spawn_entry
from tests.support.vllm_objects import (
    create_through_front_end,
    make_request,
    make_scheduler,
    make_vllm_config,
)
from vllm_ascend_balance.wiring import (
    activation,
    activation_plan,
    ascend_steering,
    composition,
    engine_chain,
)
from vllm_ascend_balance.wiring.config import (
    CARRIED_KEY,
    ENV_SETTING,
    LEGACY_SETTING,
    SETTING,
)
from vllm_ascend_balance.wiring.engine_hook import (
    remove_gather_hook,
    upstream_dp_engine,
)

pytestmark = [
    # why: EngineCoreProc.run_engine_core, DPEngineCoreProc, create_engine_config
    pytest.mark.lane_scope("release", "main", "fork", "ascend"),
    pytest.mark.multiproc,
]

UPSTREAM_ENGINE = upstream_dp_engine(engine_core_mod.DPEngineCoreProc)
MIXIN = "vllm_ascend_balance.gate.scheduler.BalanceSchedulerMixin"
NEIGHBOUR = "tests.support.neighbour_plugin"
FORMS = {
    "nested": {"scheduler_config": {"enable_balance_scheduling": True}},
    "legacy": {"enable_balance_scheduling": True},
    "env": {},
}
OFF = {"scheduler_config": {"enable_balance_scheduling": False}}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@pytest.fixture(autouse=True)
def _front_end(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A front-end as before any plugin: upstream's target and engine class,
    nothing remembered; everything put back afterwards."""
    upstream_run = engine_core_mod.EngineCoreProc.__dict__["run_engine_core"]
    monkeypatch.setattr(engine_core_mod.EngineCoreProc, "run_engine_core", upstream_run)
    monkeypatch.setattr(engine_core_mod, "DPEngineCoreProc", UPSTREAM_ENGINE)
    monkeypatch.setattr(engine_chain, "_next", None)
    monkeypatch.setattr(engine_chain, "_next_attr", None)
    monkeypatch.delenv(engine_chain.NEXT_ENV, raising=False)
    monkeypatch.delenv(ENV_SETTING, raising=False)
    yield
    remove_gather_hook(UPSTREAM_ENGINE)


def _create(additional: dict[str, Any]) -> Any:
    """The front-end's ``create_engine_config`` as register() wraps it."""
    return create_through_front_end(additional, data_parallel_size=2)


def _load_neighbour() -> Any:
    module = importlib.import_module(NEIGHBOUR)
    return importlib.reload(module)  # installs on top of the current target


def _neighbour_front_end(order: str) -> Any:
    if order == "ours-first":
        activation.register()
        return _load_neighbour()
    neighbour = _load_neighbour()
    activation.register()
    return neighbour


@pytest.mark.parametrize("order", ["ours-first", "neighbour-first"])
def test_balance_off_is_as_without_the_package(order: str, tmp_path: Path) -> None:
    neighbour = _neighbour_front_end(order)
    cfg = _create(OFF)
    assert engine_chain.current_target() is neighbour.run_engine_core
    assert engine_core_mod.DPEngineCoreProc is UPSTREAM_ENGINE
    seen = spawn_entry(engine_chain.current_target(), cfg, tmp_path / "out.json")
    assert seen["engine_cls"] == f"{NEIGHBOUR}.NeighbourDPEngineCoreProc"
    assert not seen["gather_hook"]
    assert MIXIN not in seen["scheduler_mro"]


@pytest.mark.parametrize("order", ["ours-first", "neighbour-first"])
def test_balance_on_composes_with_the_neighbour(order: str, tmp_path: Path) -> None:
    neighbour = _neighbour_front_end(order)
    cfg = _create(FORMS["nested"])
    assert engine_chain.current_target() is activation.run_engine_core
    assert engine_chain.resolve_next(activation.run_engine_core) is (
        neighbour.run_engine_core
    )
    seen = spawn_entry(engine_chain.current_target(), cfg, tmp_path / "out.json")
    check_composed(seen)


def check_composed(seen: dict[str, Any]) -> None:
    assert seen["engine_cls"] == f"{NEIGHBOUR}.NeighbourDPEngineCoreProc", seen
    assert seen["gather_hook"], seen
    assert seen["scheduler_mro"][1] == MIXIN, seen["scheduler_mro"]


def known_bad_link(*args: Any, **kwargs: Any) -> Any:
    """Known-bad: activates, then calls what the class held when its module
    was imported (upstream's bottom), skipping the links in between."""
    bottom = engine_chain.current_target()
    engine_chain._next = bottom
    return activation.run_engine_core(*args, **kwargs)


@pytest.mark.lane_scope("release")  # check_composed's power
def test_negative_control_a_link_that_skips_the_chain(tmp_path: Path) -> None:
    _neighbour_front_end("ours-first")
    cfg = _create(FORMS["nested"])
    seen = spawn_entry(known_bad_link, cfg, tmp_path / "out.json")
    with pytest.raises(AssertionError):
        check_composed(seen)


# --------------------------------------------------------------------------
# vllm-ascend's real code (ascend lane: 0.23.0.post1; ascend-main lane: the
# checkout in VAB_VLLM_ASCEND_SRC, vllm-ascend main)

#: The lanes with vllm-ascend's code: 0.23.0.post1 (ascend), main (ascend-main).
ASCEND_LANES = pytest.mark.lane_scope("ascend", "ascend-main")
needs_vllm_ascend = pytest.mark.skipif(
    importlib.util.find_spec("vllm_ascend") is None,
    reason="needs vllm-ascend's Python code: the ascend lane installs "
    "0.23.0.post1; for vllm-ascend main, VAB_VLLM_ASCEND_SRC=<checkout> "
    "scripts/test --lane ascend-main",
)


def _ascend_decides(cfg: Any) -> bool:
    """vllm-ascend's own balance decision for ``cfg``, asked as its gate and
    its engine-class swap ask it (its module's decision function), with its
    ``AscendConfig`` initialised from ``cfg`` as its platform does."""
    importlib.import_module("vllm_ascend.ascend_config").init_ascend_config(cfg)
    patch = importlib.import_module(ASCEND_PATCH_MODULE)
    return bool(patch._balance_scheduling_enabled(cfg))


#: What EngineCoreProc.run_engine_core held before the config was created.
_chain_before: list[Any] = []


def _ascend_front_end(
    order: str, form: str, monkeypatch: pytest.MonkeyPatch, extra: Any = None
) -> Any:
    """vLLM's front-end with vllm-ascend: plugins, then the platform's
    pre_register_and_update (which applies vllm-ascend's patches), then the
    config; ``order`` puts this package's register() before or after."""
    from vllm.platforms import current_platform

    if form == "env":
        monkeypatch.setenv(ENV_SETTING, "1")
    if order == "ours-first":
        activation.register()
    # vllm-ascend's global patches, as its platform and plugins apply them.
    current_platform.pre_register_and_update()
    if not engine_chain.current_target().__module__.startswith("vllm_ascend."):
        # Applied earlier in this process (a module patches once, at
        # import): re-run its import-time wrapping on the current target,
        # over upstream's Scheduler as at its first import.
        import vllm.v1.core.sched.scheduler as sched_mod

        sched_mod.Scheduler = next(
            k
            for k in sched_mod.Scheduler.__mro__
            if k.__module__ == sched_mod.__name__ and k.__name__ == "Scheduler"
        )
        importlib.reload(importlib.import_module(ASCEND_PATCH_MODULE))
    if order == "ascend-first":
        activation.register()
    _chain_before.clear()
    _chain_before.append(engine_chain.current_target())
    additional = dict(FORMS[form] if form != "off" else OFF)
    for key, value in (extra or {}).items():
        additional[key] = {**additional.get(key, {}), **value}
    return _create(additional)


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("order", ["ours-first", "ascend-first"])
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_vllm_ascend_one_gate_ours(
    form: str, order: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each enabling form: vllm-ascend reads balance off through its own
    readers (front-end and engine process), its engine class is not built
    and its decision function is its own (nothing of vllm-ascend patched);
    this package's hook and gate are (one gate, ours)."""
    cfg = _ascend_front_end(order, form, monkeypatch)
    plan = activation_plan.plan_activation(cfg)
    assert plan.active and plan.vllm_ascend is not None
    assert cfg.additional_config[CARRIED_KEY]["enabled"] is True
    assert _ascend_decides(cfg) is False
    assert engine_chain.current_target() is activation.run_engine_core
    # The chain below ours is what vLLM would have run (vllm-ascend's link
    # where its patch wraps run_engine_core).
    assert engine_chain.resolve_next(activation.run_engine_core) is _chain_before[0]
    seen = spawn_entry(engine_chain.current_target(), cfg, tmp_path / "out.json")
    assert seen["engine_cls"] == _name(UPSTREAM_ENGINE), seen
    assert seen["gather_hook"], seen
    assert seen["scheduler_mro"][1] == MIXIN, seen["scheduler_mro"]
    assert any(k.startswith("vllm_ascend.") for k in seen["scheduler_mro"]), seen
    assert seen["ascend_decides"] is False, seen
    assert seen["ascend_decider_theirs"] is True, seen
    assert seen["env"] == ("0" if form == "env" else None), seen


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_negative_control_unsteered_two_gates(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the steering, vllm-ascend's own readers see the same switch
    and enable its gate (and its engine class) next to this package's: two
    gates, for the forms it reads (0.23.0.post1: legacy key and env var;
    main: all three)."""
    monkeypatch.setattr(ascend_steering, "steer_engine_args", lambda *a: None)
    cfg = _ascend_front_end("ours-first", form, monkeypatch)
    assert activation_plan.plan_activation(cfg).active
    decides = _ascend_decides(cfg)
    if form == "nested" and not decides:
        pytest.skip("this vllm-ascend does not read the nested key itself")
    assert decides


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("order", ["ours-first", "ascend-first"])
def test_vllm_ascend_balance_off_unchanged(
    order: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _ascend_front_end(order, "off", monkeypatch)
    assert cfg.additional_config == OFF  # nothing steered, nothing added
    target = engine_chain.current_target()
    assert target.__module__.startswith("vllm_ascend."), target
    assert engine_core_mod.DPEngineCoreProc is UPSTREAM_ENGINE
    seen = spawn_entry(target, cfg, tmp_path / "out.json")
    assert seen["engine_cls"] == _name(UPSTREAM_ENGINE)
    assert not seen["gather_hook"]
    assert MIXIN not in seen["scheduler_mro"]
    assert seen["ascend_decides"] is False
    assert seen["ascend_decider_theirs"] is True


PROFILING = "vllm_ascend.patch.platform.patch_profiling_chunk"


def _load_profiling_wrapper(monkeypatch: pytest.MonkeyPatch) -> Any:
    """vllm-ascend's profiling-chunk patch, as its platform imports it when
    ``profiling_chunk_config`` is enabled: it wraps ``run_engine_core`` (a
    plain function) and ``EngineCore.__init__`` (put back after the test)."""
    core = engine_core_mod.EngineCore
    monkeypatch.setattr(core, "__init__", core.__init__)
    loaded = PROFILING in sys.modules
    module = importlib.import_module(PROFILING)
    # A second test re-runs its import-time wrapping on the current target.
    return importlib.reload(module) if loaded else module


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("balance", ["off", "on"])
def test_vllm_ascend_profiling_chunk_wrapper_composed(
    balance: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-ascend's own second wrapper stays in the chain: balance off, it
    is the target, as without this package; balance on, it is the link
    below this package's, and runs in the engine process."""
    if importlib.util.find_spec(PROFILING) is None:
        pytest.skip("this vllm-ascend has no profiling-chunk patch module")
    _ascend_front_end("ascend-first", "off", monkeypatch)
    profiling = _load_profiling_wrapper(monkeypatch)
    wrapper = profiling._patched_run_engine_core
    assert engine_chain.current_target() is wrapper
    cfg = _create(FORMS["nested"] if balance == "on" else OFF)
    if balance == "off":
        assert engine_chain.current_target() is wrapper
    else:
        assert engine_chain.resolve_next(activation.run_engine_core) is wrapper
    seen = spawn_entry(engine_chain.current_target(), cfg, tmp_path / "out.json")
    assert PROFILING in seen["modules"]
    assert seen["engine_cls"] == _name(UPSTREAM_ENGINE)
    assert seen["gather_hook"] is (balance == "on")
    assert (seen["scheduler_mro"][1] == MIXIN) is (balance == "on")
    assert seen["ascend_decides"] is False


@pytest.mark.parametrize(
    "additional",
    [
        {"scheduler_config": {"dyntra_lb_config": {"enabled": True}}},
        {"scheduler_config": {"recompute_scheduler_enable": True}},
        {"recompute_scheduler_enable": True},
    ],
    ids=["dyntra-lb", "recompute-nested", "recompute-legacy"],
)
@pytest.mark.parametrize("form", ["nested", "legacy"])
def test_vllm_ascend_exclusive_settings_refused_with_balance(
    additional: dict[str, Any], form: str
) -> None:
    """vllm-ascend refuses these next to balance only where its own config
    reads balance as on, which the steering prevents: this package refuses
    them for every form, in one line. (profiling_chunk_config's scheduler is
    judged by the reach rule: tests/test_vllm_ascend_main_schedulers.py.)"""
    merged: dict[str, Any] = {**FORMS[form]}
    for key, value in additional.items():
        merged[key] = (
            {**merged.get(key, {}), **value} if isinstance(value, dict) else value
        )
    cfg = make_vllm_config(data_parallel_size=2, additional_config=merged)
    with pytest.raises(activation.BalanceConfigError) as info:
        activation_plan.plan_activation(cfg)
    message = str(info.value)
    assert "\n" not in message
    key = "dyntra_lb_config" if "dyntra" in str(additional) else "recompute"
    assert key in message


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_doctor_says_which_gate_and_why(
    form: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_ascend_balance.tools.doctor import cli as doctor

    if form == "env":
        monkeypatch.setenv(ENV_SETTING, "1")
    argv = ["--data-parallel-size", "2"]
    if form != "env":
        argv += ["--additional-config", json.dumps(FORMS[form])]
    assert doctor.run(doctor.parse_args(argv)) == 0
    out = capsys.readouterr().out
    assert "gate that will run:    vllm-ascend-balance's" in out
    source = {"nested": SETTING, "legacy": LEGACY_SETTING, "env": ENV_SETTING}[form]
    assert f"from {source})" in out
    version = ascend_steering.installed()
    assert f"vllm-ascend:           {version}: handed balance scheduling off" in out
    assert os.environ.get(ENV_SETTING) == ("1" if form == "env" else None)


def _form_config(form: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The simulated engine's config builder, enabling balance by ``form``."""
    from vllm_ascend_balance.replay.sim import build as sim_build

    build = sim_build._vllm_config

    def by_form(opts: Any, balance: bool, model_dir: Any, extra: Any) -> Any:
        cfg = build(opts, balance, model_dir, extra)
        if form == "env":
            monkeypatch.setenv(ENV_SETTING, "1" if balance else "0")
            cfg.additional_config = {}
        elif form == "legacy":
            cfg.additional_config = {"enable_balance_scheduling": balance}
        return cfg

    return by_form


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("steered", [True, False], ids=["steered", "unsteered"])
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_vllm_ascend_simulated_fleet_one_gate(
    form: str, steered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulated engine (real schedulers over vllm-ascend's classes, the
    real gather code) with balance enabled by each form: one gather per
    active step on every rank, equal vectors, frozen steps, no admission on
    a frozen step, every request done. Negative control (unsteered):
    vllm-ascend's own gate reads the same switch and its copied
    ``schedule()`` never asks the seam, so a frozen step admits (for the
    forms that vllm-ascend reads)."""
    from vllm_ascend_balance.replay.pipeline.workload import builtin_requests
    from vllm_ascend_balance.replay.sim import build as sim_build
    from vllm_ascend_balance.replay.sim.fleet import SimOptions, simulate

    _ascend_front_end("ascend-first", "off", monkeypatch)
    monkeypatch.setattr(sim_build, "_vllm_config", _form_config(form, monkeypatch))
    if not steered:
        monkeypatch.setattr(ascend_steering, "steer_vllm_config", lambda *a: None)
    requests = builtin_requests(seed=3, num_bursts=2, burst=(24, 30))
    opts = SimOptions(dp_size=2, max_num_seqs=8, max_num_batched_tokens=1024)
    result = simulate(True, requests, opts)

    mro = result.starts[0].scheduler
    assert mro == "BalanceBalanceScheduler", mro  # our gate over vllm-ascend's class
    frozen_admits = [
        s for rank in result.rank_steps for s in rank if s.frozen and s.new_requests
    ]
    if not steered:
        if form == "nested" and not frozen_admits:
            pytest.skip("this vllm-ascend does not read the nested key itself")
        assert frozen_admits, "vllm-ascend's own gate was expected to bypass ours"
        return
    assert frozen_admits == []
    assert result.board_gathers == [result.steps] * opts.dp_size
    assert all(len(g) == result.steps for g in result.gathers)
    assert sum(s.frozen for s in result.rank_steps[0]) > 0
    done = [
        r for rank in result.rank_requests for r in rank if r.finish_step is not None
    ]
    assert len(done) == len(requests)


SRF_QUEUE = "ShortRequestFirstRequestQueue"


@needs_vllm_ascend
@ASCEND_LANES
@pytest.mark.parametrize("gate", ["frozen", "open"])
def test_vllm_ascend_short_request_first_composes_with_the_gate(
    gate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-ascend's ``BalanceScheduler.__init__`` installs its
    short-request-first waiting queue (``scheduler_config.
    short_request_first_config``) with balance on through this package too;
    the gate composes with it: a frozen step admits nothing, an open step
    admits in the queue's order (short prompts first)."""
    from vllm_ascend_balance.gate.scheduler import admission_cap
    from vllm_ascend_balance.replay.sim.dp_group import BoardGroup, GatherBoard

    srf = {
        "scheduler_config": {
            "short_request_first_config": {
                "enabled": True,
                "threshold": 16,
                "long_max_wait_ms": 0,
            }
        }
    }
    cfg = _ascend_front_end("ascend-first", "nested", monkeypatch, extra=srf)
    plan = activation_plan.plan_activation(cfg)
    assert plan.active
    cls = composition.compose_scheduler(plan.scheduler_cls)
    sched = make_scheduler(cls, vllm_config=cfg)
    if type(sched.waiting).__name__ != SRF_QUEUE:
        pytest.skip(
            "this vllm-ascend's BalanceScheduler has no short-request-first queue"
        )
    for i, n in enumerate([64, 64, 8, 8]):
        sched.add_request(make_request(f"r{i}-{n}", n))
    board = GatherBoard(2)
    sched.dp_group = BoardGroup(board, 0)
    leader = admission_cap(sched) if gate == "frozen" else 0
    board.post([len(sched.running), leader])
    sched.admission_gather()
    assert sched.balance_frozen is (gate == "frozen")
    out = sched.schedule()
    admitted = [r.req_id for r in out.scheduled_new_reqs]
    if gate == "frozen":
        assert admitted == []
    else:
        assert admitted[:2] == ["r2-8", "r3-8"], admitted
