# SPDX-License-Identifier: Apache-2.0
import logging
import os

import pytest

from tests.support import hermetic_generation

# The session's shared balance-on DP 2 server, for the tests that only need
# one (tests/support/shared_server.py).
from tests.support.shared_server import bounded_balance_server  # noqa: F401
from vllm_ascend_balance.ipc_sockets import own_ipc_dir

# A test's Hypothesis examples must not depend on which tests ran before it
# in the process (tests/support/hermetic_generation.py says how they did).
hermetic_generation.pin()

# Nothing in the suite may reach a model hub: models are local config dirs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

# vLLM's IPC socket files go to a directory removed when the suite's process
# exits, not to the temp dir; the processes the suite starts inherit it.
own_ipc_dir()


@pytest.fixture(autouse=True)
def _capture_vllm_logs(caplog: pytest.LogCaptureFixture):
    """The package logs under vLLM's ``vllm`` logger (vllm_ascend_balance/
    logger.py), which vLLM's logging config stops from propagating to the
    root logger in some releases: hand caplog's handler to it then, so tests
    read each record once."""
    vllm_logger = logging.getLogger("vllm")
    if vllm_logger.propagate:  # records reach caplog through the root logger
        yield
        return
    vllm_logger.addHandler(caplog.handler)
    yield
    vllm_logger.removeHandler(caplog.handler)


@pytest.fixture(autouse=True)
def _process_state_restored():
    """vllm-ascend's balance patch changes the process at import (the
    module-level ``Scheduler``), and steering sets
    ``VLLM_ASCEND_BALANCE_SCHEDULING`` to ``0`` in the process that creates a
    balance config, as a front-end wants. A test that does either in-process
    must not leave it so for the tests after it."""
    import vllm.v1.core.sched.scheduler as sched_mod
    import vllm.v1.engine.core as engine_core_mod

    from vllm_ascend_balance.wiring.config import ENV_SETTING

    scheduler = sched_mod.Scheduler
    # vllm-ascend's patch also wraps run_engine_core and may swap the
    # module-level DPEngineCoreProc at import: put both back too, so a test
    # that imports it leaves the next one the process as it started.
    run_engine_core = engine_core_mod.EngineCoreProc.__dict__["run_engine_core"]
    dp_engine = engine_core_mod.DPEngineCoreProc
    env = os.environ.get(ENV_SETTING)
    yield
    sched_mod.Scheduler = scheduler
    engine_core_mod.EngineCoreProc.run_engine_core = run_engine_core
    engine_core_mod.DPEngineCoreProc = dp_engine
    # vllm-ascend's AscendConfig is a process-wide singleton that its balance
    # decision reads (0.23.0.post1: whichever config initialised it last):
    # a test's config must not decide the next test's.
    import sys

    ascend_config = sys.modules.get("vllm_ascend.ascend_config")
    if ascend_config is not None:
        ascend_config.clear_ascend_config()
    if env is None:
        os.environ.pop(ENV_SETTING, None)
    else:
        os.environ[ENV_SETTING] = env


#: Every lane ``lane_scope`` may name (tests/support/lanes.py:PIN_FILES).
LANES = ("release", "main", "fork", "ascend", "ascend-main")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-lane-scopes",
        action="store_true",
        help="run every collected test on this lane, whatever its lane_scope "
        "(the marker is still required)",
    )


def _scope_problem(marker: pytest.Mark | None) -> str | None:
    if marker is None:
        return "no lane_scope marker"
    lanes = marker.args
    unknown = [lane for lane in lanes if lane not in LANES]
    if not lanes or unknown or marker.kwargs:
        return f"lane_scope{lanes!r}: expected one or more of {', '.join(LANES)}"
    return None


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Select this lane's tests by their ``lane_scope`` marker, then skip
    the ``e2e`` tests where vLLM has no platform it can run on here.

    ``lane_scope(*lanes)`` names the lanes whose vLLM install can change the
    test's verdict; the test runs on those lanes and is deselected (not
    skipped: the counts stay honest) on the others. A test without the
    marker (or naming an unknown lane) fails the collection, so no test
    runs, or escapes, by default. The lane is ``$VAB_LANE``
    (tests/support/lanes.py:current_lane).
    """
    from tests.support.lanes import current_lane, platform_unusable_reason

    problems = [
        f"  {item.nodeid}: {problem}"
        for item in items
        if (problem := _scope_problem(item.get_closest_marker("lane_scope")))
    ]
    if problems:
        raise pytest.UsageError(
            "every test declares the lanes that can change its result: add "
            '`pytestmark = pytest.mark.lane_scope("release")` (lane-independent) '
            'or e.g. `lane_scope("release", "main", "fork", "ascend")` '
            f"(CONTRIBUTING.md); {len(problems)} test(s) do not:\n"
            + "\n".join(problems[:50])
        )
    lane = current_lane()
    total = len(items)
    if not config.getoption("all_lane_scopes"):
        keep, dropped = [], []
        for item in items:
            marker = item.get_closest_marker("lane_scope")
            assert marker is not None  # checked above
            (keep if lane in marker.args else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    config.stash[_SELECTION] = (lane, len(items), total)

    e2e = [item for item in items if item.get_closest_marker("e2e")]
    if not e2e:
        return
    reason = platform_unusable_reason()
    if reason:
        for item in e2e:
            item.add_marker(pytest.mark.skip(reason=reason))


_SELECTION = pytest.StashKey[tuple[str, int, int]]()


def _selection_line(config: pytest.Config) -> str | None:
    if _SELECTION not in config.stash:
        return None
    lane, selected, total = config.stash[_SELECTION]
    if config.getoption("all_lane_scopes"):
        return f"lane {lane}: all {total} collected tests kept (--all-lane-scopes)"
    return (
        f"lane {lane}: lane_scope selects {selected} of {total} collected tests, "
        f"deselects {total - selected} (before -k/-m)"
    )


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    return _selection_line(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = _selection_line(terminalreporter.config)
    if line:
        terminalreporter.write_line(line)


def pytest_report_header(config: pytest.Config) -> str:
    from vllm.platforms import current_platform

    return f"vLLM platform: {type(current_platform).__name__}"
