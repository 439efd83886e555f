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
- With vllm-ascend's real code (the ``ascend`` lane; skipped elsewhere with
  the reason): for each of the three ways users enable balance, in both
  orders, vllm-ascend's decision function is neutralised in the engine
  process, its engine class is not built, the gather hook and this package's
  gate are (one gate, ours); balance off, nothing of vllm-ascend's changes.
  Negative control: without neutralisation vllm-ascend's patch decides
  "enabled" for the same config (two gates would run).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm.v1.engine.core as engine_core_mod

from tests.support.engine_entry import spawn_entry
from tests.support.vllm_objects import make_vllm_config
from vllm_ascend_balance import activation, ascend_patch, engine_chain
from vllm_ascend_balance.config import ENV_SETTING, LEGACY_SETTING
from vllm_ascend_balance.engine import remove_gather_hook, upstream_dp_engine

pytestmark = pytest.mark.multiproc

UPSTREAM_ENGINE = upstream_dp_engine(engine_core_mod.DPEngineCoreProc)
MIXIN = "vllm_ascend_balance.scheduler.BalanceSchedulerMixin"
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
    cfg = make_vllm_config(data_parallel_size=2, additional_config=additional)
    return activation._check_early(lambda self: cfg)(None)


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


def test_negative_control_a_link_that_skips_the_chain(tmp_path: Path) -> None:
    _neighbour_front_end("ours-first")
    cfg = _create(FORMS["nested"])
    seen = spawn_entry(known_bad_link, cfg, tmp_path / "out.json")
    with pytest.raises(AssertionError):
        check_composed(seen)


# --------------------------------------------------------------------------
# vllm-ascend's real code (ascend lane)

needs_vllm_ascend = pytest.mark.skipif(
    importlib.util.find_spec("vllm_ascend") is None,
    reason="needs vllm-ascend's Python code (the ascend lane installs it)",
)


def _ascend_front_end(order: str, form: str, monkeypatch: pytest.MonkeyPatch) -> Any:
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
        # import): re-run its import-time wrapping on the current target.
        importlib.reload(importlib.import_module(ascend_patch.PATCH_MODULE))
    if order == "ascend-first":
        activation.register()
    return _create(FORMS[form] if form != "off" else OFF)


@needs_vllm_ascend
@pytest.mark.parametrize("order", ["ours-first", "ascend-first"])
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_vllm_ascend_one_gate_ours(
    form: str, order: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _ascend_front_end(order, form, monkeypatch)
    plan = activation.plan_activation(cfg)
    assert plan.active and plan.ascend is not None and plan.ascend.problem is None
    assert engine_chain.current_target() is activation.run_engine_core
    below = engine_chain.resolve_next(activation.run_engine_core)
    assert below.__module__.startswith("vllm_ascend."), below
    seen = spawn_entry(engine_chain.current_target(), cfg, tmp_path / "out.json")
    assert seen["engine_cls"] == _name(UPSTREAM_ENGINE), seen
    assert seen["gather_hook"], seen
    assert seen["scheduler_mro"][1] == MIXIN, seen["scheduler_mro"]
    assert any(k.startswith("vllm_ascend.") for k in seen["scheduler_mro"]), seen
    assert seen["ascend_decides"] is False, seen
    assert ascend_patch.PATCH_MODULE in seen["modules"]


@needs_vllm_ascend
@pytest.mark.parametrize("form", ["nested", "legacy", "env"])
def test_negative_control_without_neutralising_two_gates(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-ascend's own patch reads the same setting: left alone it would
    enable its gate (and its engine class) next to ours, for the forms it
    reads (0.23.0.post1: legacy key and env var; main: all three)."""
    cfg = _ascend_front_end("ours-first", form, monkeypatch)
    patch = importlib.import_module(ascend_patch.PATCH_MODULE)
    decides = patch._balance_scheduling_enabled(cfg)
    if form == "nested" and not decides:
        pytest.skip("this vllm-ascend does not read the nested key itself")
    assert decides


@needs_vllm_ascend
@pytest.mark.parametrize("order", ["ours-first", "ascend-first"])
def test_vllm_ascend_balance_off_unchanged(
    order: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _ascend_front_end(order, "off", monkeypatch)
    target = engine_chain.current_target()
    assert target.__module__.startswith("vllm_ascend."), target
    assert engine_core_mod.DPEngineCoreProc is UPSTREAM_ENGINE
    patch = importlib.import_module(ascend_patch.PATCH_MODULE)
    assert not getattr(patch._balance_scheduling_enabled, "__vab_neutralised__", False)
    seen = spawn_entry(target, cfg, tmp_path / "out.json")
    assert seen["engine_cls"] == _name(UPSTREAM_ENGINE)
    assert not seen["gather_hook"]
    assert MIXIN not in seen["scheduler_mro"]
    assert seen["ascend_decides"] is False


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
@pytest.mark.parametrize("balance", ["off", "on"])
def test_vllm_ascend_profiling_chunk_wrapper_composed(
    balance: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-ascend's own second wrapper stays in the chain: balance off, it
    is the target, as without this package; balance on, it is the link
    below this package's, and runs in the engine process."""
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


def test_profiling_chunk_config_refused_with_balance() -> None:
    """vllm-ascend refuses the pair only when its own config reads balance
    as on (not for the nested key on 0.23): this package refuses it for
    every form, in one line."""
    cfg = make_vllm_config(
        data_parallel_size=2,
        additional_config={
            **FORMS["nested"],
            "profiling_chunk_config": {"enabled": True},
        },
    )
    with pytest.raises(activation.BalanceConfigError) as info:
        activation.plan_activation(cfg)
    message = str(info.value)
    assert "\n" not in message and "profiling_chunk_config" in message


@needs_vllm_ascend
def test_doctor_says_what_it_neutralised(capsys: pytest.CaptureFixture[str]) -> None:

    from vllm_ascend_balance import doctor

    args = doctor.parse_args(
        [
            "--data-parallel-size",  # vLLM's default is 1 (no effect)
            "2",
            "--additional-config",
            '{"enable_balance_scheduling": true}',
        ]
    )
    assert doctor.run(args) == 0
    out = capsys.readouterr().out
    assert "gate that will run:    vllm-ascend-balance's" in out
    assert f"from {LEGACY_SETTING}" in out
    version = ascend_patch.installed_version()
    assert f"vllm-ascend {version}'s balance patch neutralised" in out


@needs_vllm_ascend
@pytest.mark.parametrize("neutralised", [True, False])
def test_vllm_ascend_simulated_fleet_one_gate(
    neutralised: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulated engine (real schedulers over vllm-ascend's classes, the
    real gather code) with balance enabled as vllm-ascend 0.23 users do it
    (the legacy key): one gather per active step on every rank, equal
    vectors, frozen steps, no admission on a frozen step, every request done.
    Negative control (``neutralised=False``): vllm-ascend's own gate reads
    the same key and its copied ``schedule()`` never asks the seam, so a
    frozen step admits."""
    from vllm_ascend_balance.replay import sim_build
    from vllm_ascend_balance.replay.sim import SimOptions, simulate
    from vllm_ascend_balance.replay.workload import builtin_requests

    _ascend_front_end("ascend-first", "off", monkeypatch)
    build = sim_build._vllm_config

    def legacy_key(opts: Any, balance: bool, model_dir: Any, extra: Any) -> Any:
        cfg = build(opts, balance, model_dir, extra)
        cfg.additional_config = {"enable_balance_scheduling": balance}
        return cfg

    monkeypatch.setattr(sim_build, "_vllm_config", legacy_key)
    if not neutralised:
        monkeypatch.setattr(ascend_patch, "neutralise", lambda: None)
    patch = importlib.import_module(ascend_patch.PATCH_MODULE)
    monkeypatch.setattr(patch, ascend_patch.DECIDER, patch._balance_scheduling_enabled)
    requests = builtin_requests(seed=3, num_bursts=2, burst=(24, 30))
    opts = SimOptions(dp_size=2, max_num_seqs=8, max_num_batched_tokens=1024)
    result = simulate(True, requests, opts)

    mro = result.starts[0].scheduler
    assert mro == "BalanceBalanceScheduler", mro  # our gate over vllm-ascend's class
    frozen_admits = [
        s for rank in result.rank_steps for s in rank if s.frozen and s.new_requests
    ]
    if not neutralised:
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
