# SPDX-License-Identifier: Apache-2.0
"""The demo command's frictions a new operator met (issue 46's trial), each
checked without a whole deployment (``tests/test_demo.py`` runs one):

- doctor, given the demo server's exact arguments, accepts them and names
  the class the engines build (``Recording`` over ``Balance`` over vLLM's,
  from the executor's own hook); control: the same arguments without the
  executor name ``BalanceScheduler``;
- a bad ``--port`` or ``--additional-config`` is refused in one line
  before anything starts (exit 2, no stack); control: good values pass;
  a busy ``--port`` is one line too (exit 1), before the log is named or
  ``--dir`` made;
- an argument vLLM's own parser refuses (an unknown flag, a bad value) and
  a ``--dir`` that is a file or cannot be written are refused the same
  way, before the server starts; controls: arguments vLLM accepts, and a
  missing ``--dir`` (created with its parents, as documented);
- an ``--additional-config`` after the demo's options is merged into the
  demo's own (the executor's block stays);
- ``--dp 1`` warns that balance needs DP >= 2 (as doctor and the engines
  treat it: no effect, nothing refused); controls: DP 2, and balance off;
- balance on where ``VLLM_PLUGINS`` leaves the plugin out is refused in one
  line (the server would run stock vLLM); controls: the plugin in the
  allowlist, balance off;
- a server that fails to start leaves a log that exists after the demo
  exits, and the package's one-line refusal is the last line printed (a
  real vLLM front-end refusing ``--scheduler-cls no.such.Mod``); controls
  of the log reader: lines that are not refusals are not reported.

Nothing is mocked; doctor runs in-process on the installed vLLM.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ascend_balance.tools.demo import checks as demo_checks
from vllm_ascend_balance.tools.demo import drain as demo_drain
from vllm_ascend_balance.tools.demo import log as demo_log
from vllm_ascend_balance.tools.demo import report as demo_report
from vllm_ascend_balance.tools.demo import server as demo
from vllm_ascend_balance.tools.doctor import cli as doctor

# why: doctor on vLLM's parser; a real vLLM front-end's refusal
pytestmark = pytest.mark.lane_scope("release", "main")

PROG = "vllm-ascend-balance demo"
#: vLLM's "Using custom scheduler class <class 'module.Name'>" class name.
RECORDING = "RecordingBalanceScheduler"


def demo_args(tmp_path: Path, extra: list[str] | None = None) -> list[str]:
    model = demo.write_model(tmp_path / "model")
    return demo.serve_args(
        2, 8000, model, tmp_path / "run", lockstep_port=29999, extra_args=extra or []
    )


def doctor_report(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code = doctor.run(doctor.parse_args(argv))
    out = capsys.readouterr().out
    fields = {
        line.split(":", 1)[0]: line.split(":", 1)[1].strip()
        for line in out.splitlines()
        if ":" in line and not line.startswith(" ")
    }
    return {"code": code, "out": out, **fields}


# --------------------------------------------------------------------------
# doctor with the demo server's arguments
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--disable-log-stats"],
        ["--additional-config", '{"scheduler_config": {"balance_max_held_steps": 4}}'],
    ],
)
def test_doctor_names_the_class_the_demo_engines_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    report = doctor_report(demo_args(tmp_path, extra), capsys)
    assert report["code"] == 0, report["out"]
    assert report["would activate"] == "True", report["out"]
    shown = report["scheduler class"]
    assert shown.split()[0] == RECORDING, shown
    assert "CostModelExecutor" in shown and "async scheduling off" in shown


def test_without_the_executor_doctor_names_balances_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control: the ``Recording`` prefix comes from the executor named by
    ``--distributed-executor-backend``, not from the report's text."""
    args = demo_args(tmp_path)
    at = args.index("--distributed-executor-backend")
    del args[at : at + 2]
    report = doctor_report(args, capsys)
    assert report["code"] == 0, report["out"]
    assert report["scheduler class"].split()[0] == "BalanceScheduler"


# --------------------------------------------------------------------------
# arguments checked before anything starts
# --------------------------------------------------------------------------


@pytest.mark.lane_scope("release")  # the demo's own checks
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--port", "70000"], ["--port", "0..65535", "--port 0"]),
        (["--port", "-1"], ["--port", "0..65535"]),
        (["--additional-config", "{bad"], ["--additional-config", "not valid JSON"]),
        (["--additional-config", "[1]"], ["--additional-config", "JSON object"]),
        (["--additional-config"], ["--additional-config", "needs a value"]),
        (["--data-parallel-size", "4"], ["--data-parallel-size", "use --dp"]),
        (["--data_parallel_size=4"], ["--data_parallel_size", "use --dp"]),
        (
            [
                "--additional-config",
                '{"scheduler_config": {"balance_max_frozen_step": 2}}',
            ],
            ["balance_max_frozen_step", "did you mean balance_max_frozen_steps"],
        ),
        (["--dp", "0"], ["--dp must be >= 1, got 0", "use e.g. --dp 2"]),
        (["--max-num-seqs", "0"], ["--max-num-seqs", "use e.g. --max-num-seqs 4"]),
        (
            [
                "--additional-config",
                '{"scheduler_confg": {"balance_policy": "throttled"}}',
            ],
            ["additional_config.scheduler_confg", 'under "scheduler_config"'],
        ),
        (
            [
                "--additional-config",
                '{"scheduler_config": {"balance_policy": "throtled"}}',
            ],
            ["balance_policy", 'did you mean "throttled"?'],
        ),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_anything_starts(
    argv: list[str], words: list[str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vllm_ascend_balance", "demo", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "", "nothing started"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.lane_scope("release")  # the demo's own checks
@pytest.mark.parametrize("port", [0, 1, 8000, 65535])
def test_good_arguments_pass_the_checks(port: int) -> None:
    """Control of the refusals above."""
    extra = [
        "--additional-config",
        '{"scheduler_config": {"balance_max_frozen_steps": 2}}',
    ]
    plan = demo_checks.check_arguments(2, port, 4, extra, environ={})
    assert plan.active and plan.balance == "on" and plan.warnings == []


@pytest.mark.lane_scope("release")  # the launcher's check
def test_the_launcher_refuses_a_port_out_of_range() -> None:
    with pytest.raises(demo.DemoError, match="--port must be 1..65535") as caught:
        demo.start_server(["true"], 70000, [])
    assert "\n" not in str(caught.value)


@pytest.mark.lane_scope("release")  # the demo's own argv
def test_an_additional_config_is_merged_into_the_demos_own(tmp_path: Path) -> None:
    """vLLM keeps only the last ``--additional-config``: appended as is, a
    user's would drop the executor's block."""
    user = {"scheduler_config": {"balance_max_held_steps": 4}, "x": 1}
    args = demo_args(tmp_path, ["--additional-config", json.dumps(user), "--seed", "3"])
    assert args.count("--additional-config") == 1
    merged = json.loads(args[args.index("--additional-config") + 1])
    assert merged["scheduler_config"] == {
        "enable_balance_scheduling": True,
        "balance_max_held_steps": 4,
    }
    assert merged[demo.REPLAY_KEY]["run_dir"] == str(tmp_path / "run")
    assert merged["x"] == 1 and args[-2:] == ["--seed", "3"]
    off = demo_args(
        tmp_path,
        [
            "--additional-config",
            '{"scheduler_config": {"enable_balance_scheduling": false}}',
        ],
    )
    assert (
        '"enable_balance_scheduling":false' in off[off.index("--additional-config") + 1]
    )


# --------------------------------------------------------------------------
# DP 1: a warning, as doctor and the engines treat it
# --------------------------------------------------------------------------


@pytest.mark.lane_scope("release")  # the demo's own checks
def test_dp_1_warns_that_balance_needs_dp_2() -> None:
    plan = demo_checks.check_arguments(1, 0, 4, [], environ={})
    assert not plan.active
    assert plan.balance == "requested, no effect at DP 1"
    assert len(plan.warnings) == 1 and "DP >= 2" in plan.warnings[0]
    assert "--dp 2" in plan.warnings[0]


@pytest.mark.lane_scope("release")  # the demo's own checks
@pytest.mark.parametrize(
    ("dp", "extra", "balance"),
    [
        (2, [], "on"),
        (
            1,
            [
                "--additional-config",
                '{"scheduler_config": {"enable_balance_scheduling": false}}',
            ],
            "off",
        ),
    ],
)
def test_no_warning_where_balance_works_or_is_off(
    dp: int, extra: list[str], balance: str
) -> None:
    """Controls: DP 2 with balance on, DP 1 with balance off."""
    plan = demo_checks.check_arguments(dp, 0, 4, extra, environ={})
    assert plan.warnings == []
    assert plan.balance.split()[0] == balance


@pytest.mark.lane_scope("release")  # the demo's text
def test_announce_at_dp_1_promises_no_series(
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    server = demo.DemoServer(proc, 8000, ["--x"], Path("/nonexistent.log"))
    demo_report.announce(server, 1, "requested, no effect at DP 1", False)
    first, *rest = capsys.readouterr().out.splitlines()
    assert "balance scheduling requested, no effect at DP 1" in first
    assert any("no vllm:balance_* series" in line for line in rest)
    assert any(f"kill -TERM -- -{proc.pid}" in line for line in rest)
    demo_report.announce(server, 2, "on", True)
    on = capsys.readouterr().out
    assert "balance scheduling on" in on and "one per DP rank" in on


# --------------------------------------------------------------------------
# a failed start: the kept log, the refusal last
# --------------------------------------------------------------------------

REFUSED = (
    "(APIServer pid=7) ERROR 12-04 08:28:39 [activation.py:423] balance "
    "scheduling: scheduler_cls 'x' cannot be imported: fix or unset --scheduler-cls"
)


@pytest.mark.lane_scope("release")  # the log reader on text
def test_the_log_reader_finds_refusals_and_nothing_else() -> None:
    banner = "(APIServer pid=7) INFO 12-04 08:28:39 [api_utils.py:345]  version 0.27.1"
    stall = (
        "(EngineCore_DP0 pid=8) WARNING 12-04 08:28:40 [stall.py:90] balance "
        "scheduling: DP rank 1 has waited 60 s in the balance gather"
    )
    other = "(APIServer pid=7) ERROR 12-04 08:28:41 [core.py:1] EngineCore failed"
    coloured = REFUSED.replace("ERROR", "\x1b[31mERROR\x1b[0m")
    log = "\n".join([REFUSED, banner, stall, other, coloured, banner])
    assert demo_log.refusals(log) == [REFUSED.split("] ", 1)[1]]
    assert demo_log.refusals("\n".join([banner, stall, other])) == []


@pytest.mark.lane_scope("release")  # file handling
def test_a_log_in_the_scratch_directory_is_kept_elsewhere(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log = scratch / "server.log"
    log.write_text(REFUSED + "\n")
    kept = demo_log.keep_log(log, scratch)
    try:
        assert not kept.is_relative_to(scratch)
        assert kept.read_text() == log.read_text()
    finally:
        kept.unlink()
    # Control: a log the user's --dir holds is named as is.
    assert demo_log.keep_log(log, None) == log


def test_a_refused_start_keeps_its_log_and_ends_with_the_refusal() -> None:
    """A real vLLM front-end refusing the configuration through this
    package's check (``--scheduler-cls`` that cannot be imported: only the
    server can tell, so the demo's own checks let it through)."""
    result = subprocess.run(
        [sys.executable, "-m", "vllm_ascend_balance", "demo", "--port", "0",
         "--scheduler-cls", "no.such.Mod"],
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only
    )  # fmt: skip
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stdout + result.stderr
    assert lines[-1].startswith(f"{PROG}: refused: balance scheduling: "), lines[-3:]
    assert "no.such.Mod" in lines[-1] and "--scheduler-cls" in lines[-1]
    assert lines[-2].startswith(f"{PROG}: the server's log: "), lines[-3:]
    kept = Path(lines[-2].split(": ", 2)[2])
    try:
        assert kept.exists(), "the log named outlives the demo"
        assert demo_log.refusals(kept.read_text()) == [lines[-1].split(": ", 2)[2]]
    finally:
        kept.unlink(missing_ok=True)


@pytest.mark.lane_scope("release")  # the package's names and parser
def test_public_api_of_the_demo_module() -> None:
    """The names other tests and tools use stay importable from ``demo``
    after the split; the CLI parses as before."""
    for name in ("running_server", "serve_command", "check_port_free", "DemoServer"):
        assert callable(getattr(demo, name)), name
    from vllm_ascend_balance.tools.cli import parse_command_line

    args = parse_command_line(["demo", "--dp", "2", "--port", "0", "--seed", "1"])
    assert isinstance(args, argparse.Namespace)
    assert (args.dp, args.port, args.serve_args) == (2, 0, ["--seed", "1"])


@pytest.mark.lane_scope("release")  # stand-in args
def test_vllm_serve_refuses_additional_config_that_is_not_json_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plugin's front-end check (``EngineArgs.create_engine_config`` as
    register() wraps it) refuses what vLLM's parser kept as a raw string,
    before vLLM creates the config (it failed with a stack, in steering).
    Controls: a parsed object and no value pass the check."""
    from types import SimpleNamespace

    from vllm_ascend_balance.wiring import activation
    from vllm_ascend_balance.wiring.config import BalanceConfigError

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the wrapper sets one
    created: list[object] = []
    wrapped = activation._check_early(lambda self: created.append(self))
    for raw in ("{bad", "[1]"):
        with pytest.raises(BalanceConfigError, match="--additional-config") as caught:
            wrapped(SimpleNamespace(additional_config=raw))
        assert "\n" not in str(caught.value) and "e.g. --additional-config" in str(
            caught.value
        )
    assert created == [], "refused before vLLM creates the config"
    for fine in ({"scheduler_config": {}}, None):
        activation._check_additional_config(SimpleNamespace(additional_config=fine))


# --------------------------------------------------------------------------
# vllm serve's arguments and --dir, checked before anything starts
# --------------------------------------------------------------------------


def _demo(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_ascend_balance", "demo", "--port", "0", *argv],
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only; a start that is not refused runs long
    )


def _one_refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal before anything started (docs/install.md:
    "refused in one line before anything starts"), exit 2."""
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    assert result.stdout == "", "nothing started"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: "), result.stderr[-3000:]
    return lines[0]


def test_an_unknown_vllm_argument_is_refused_before_the_server_starts(
    tmp_path: Path,
) -> None:
    """vLLM's own parser (doctor's) reads the arguments after the demo's:
    an unknown flag is refused in one line naming it, before the server
    starts (its --dir is not even created)."""
    workdir = tmp_path / "demo"
    line = _one_refusal(_demo("--dir", str(workdir), "--no-such-flag", "7"))
    assert "--no-such-flag" in line and "correct or remove it" in line, line
    assert not workdir.exists(), "refused before anything was made"


@pytest.mark.lane_scope("release")  # the demo's own check
def test_a_port_in_use_is_one_line_and_names_no_log(tmp_path: Path) -> None:
    """A busy ``--port`` is refused in one line (exit 1), before the demo
    names a log it would not write (it printed ``log: .../server.log`` of a
    directory it then removed) and before ``--dir`` is created. Control of
    the busy port: ``tests/test_demo.py`` passes it once released."""
    workdir = tmp_path / "demo"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((demo.HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _demo("--port", str(port), "--dir", str(workdir))
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert result.stdout == "", "no log named"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: port {port} "), lines
    assert "is in use" in lines[0] and "--port 0" in lines[0], lines[0]
    assert not workdir.exists(), "refused before anything was made"


def test_vllms_parser_refuses_a_bad_value_and_accepts_good_ones() -> None:
    """The check on the real vLLM parser: a value vLLM refuses (an int
    flag given a word) is refused with vLLM's message; control: the same
    flag with a number, and a flag vLLM knows, pass."""
    with pytest.raises(demo_checks.UsageError, match="--seed") as caught:
        demo_checks.check_serve_args(2, 4, ["--seed", "many"])
    assert "\n" not in str(caught.value) and "'many'" in str(caught.value)
    checked = demo_checks.check_serve_args(2, 4, ["--seed", "1", "--disable-log-stats"])
    assert checked.warning is None


# --------------------------------------------------------------------------
# Ctrl-C lets the requests in flight finish: --shutdown-timeout, added once
# --------------------------------------------------------------------------


def test_the_drain_flag_is_asked_of_vllms_serve_parser() -> None:
    """The child that checks the arguments reports whether vLLM's ``vllm
    serve`` parser has ``--shutdown-timeout``, as the parser does in this
    process and as ``EngineArgs`` (its field) witnesses. Control: a flag the
    parser lacks is reported missing."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    has_field = "shutdown_timeout" in {f.name for f in dataclasses.fields(EngineArgs)}
    assert demo_drain.parser_takes_flag() is has_field
    assert demo_checks.check_serve_args(2, 4, []).drains is has_field
    assert demo_drain.parser_takes_flag("--no-such-flag") is False


@pytest.mark.lane_scope("release")  # the demo's own argv
def test_the_drain_is_added_where_vllms_parser_has_the_flag() -> None:
    """vLLM's default (0) aborts the requests in flight on Ctrl-C; control:
    a parser without the flag gets nothing (vLLM would refuse it)."""
    drain = ["--shutdown-timeout", str(demo_drain.DRAIN_S)]
    assert demo_drain.with_drain([], True) == drain
    assert demo_drain.with_drain(["--seed", "1"], True) == ["--seed", "1", *drain]
    assert demo_drain.with_drain(["--seed", "1"], False) == ["--seed", "1"]


@pytest.mark.lane_scope("release")  # the demo's own argv
@pytest.mark.parametrize(
    "given",
    [
        ["--shutdown-timeout", "5"],
        ["--shutdown-timeout=0"],
        ["--shutdown_timeout", "7"],
        ["--seed", "1", "--shutdown_timeout=2", "--disable-log-stats"],
    ],
)
def test_a_shutdown_timeout_given_is_not_added_again(given: list[str]) -> None:
    """The user's value stands (0: abort at once), in vLLM's spellings."""
    assert demo_drain.with_drain(given, True) == given


@pytest.mark.lane_scope("release")  # the demo's own argv
@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        ([], 0),
        (["--seed", "1"], 0),
        (["--shutdown-timeout", "30"], 30),
        (["--shutdown-timeout=5", "--seed", "1", "--shutdown-timeout", "9"], 9),
        (["--shutdown_timeout=4"], 4),
        (["--shutdown-timeout", "soon"], 0),
        (["--shutdown-timeout"], 0),
    ],
)
def test_the_stop_waits_for_the_drain_the_server_was_given(
    args: list[str], seconds: int
) -> None:
    """What :func:`stop_server` adds to its grace before SIGKILL: the last
    ``--shutdown-timeout``, as vLLM's parser takes it."""
    assert demo_drain.drain_seconds(args) == seconds


@pytest.mark.lane_scope("release")  # file handling, vLLM's parser passes
@pytest.mark.parametrize("where", ["a file", "under a file", "uncreatable"])
def test_a_dir_that_cannot_be_written_is_refused_in_one_line(
    tmp_path: Path, where: str
) -> None:
    """``--dir`` naming a file, a folder under a file, or a place where no
    folder can be made (sysfs refuses mkdir to root too, as a read-only
    file system does) is refused in one line naming ``--dir``, exit 2;
    it was a stack (FileExistsError, OSError) from the server's start."""
    file = tmp_path / "file"
    file.write_text("")
    target = {
        "a file": file,
        "under a file": file / "sub",
        "uncreatable": Path("/sys/vab-demo-test/run"),
    }[where]
    line = _one_refusal(_demo("--dir", str(target)))
    assert line.startswith(f"{PROG}: --dir {target} "), line
    assert "leave --dir out" in line and "Traceback" not in line, line


@pytest.mark.lane_scope("release")  # file handling
def test_a_missing_dir_is_created_with_its_parents(tmp_path: Path) -> None:
    """Control of the refusals above, as the --help and docs/install.md say:
    a missing --dir is created with any missing parent folders, and the
    write probe leaves nothing behind; an existing folder passes too."""
    target = tmp_path / "a" / "b" / "c"
    demo_checks.check_dir(target)
    assert target.is_dir() and list(target.iterdir()) == []
    demo_checks.check_dir(target)


@pytest.mark.lane_scope("release")  # the demo's own checks
def test_balance_on_where_vllm_will_not_load_the_plugin_is_refused() -> None:
    """The operator's trial: VLLM_PLUGINS without ours served stock vLLM
    while the demo announced balance on. Controls: the allowlist with ours,
    and balance off (nothing to load)."""
    with pytest.raises(demo_checks.UsageError, match="VLLM_PLUGINS=other .*unset"):
        demo_checks.check_arguments(2, 0, 4, [], environ={"VLLM_PLUGINS": "other"})
    allowed = {"VLLM_PLUGINS": "other,ascend_balance"}
    assert demo_checks.check_arguments(2, 0, 4, [], environ=allowed).active
    off = [
        "--additional-config",
        '{"scheduler_config": {"enable_balance_scheduling": false}}',
    ]
    plan = demo_checks.check_arguments(2, 0, 4, off, environ={"VLLM_PLUGINS": "other"})
    assert not plan.active
