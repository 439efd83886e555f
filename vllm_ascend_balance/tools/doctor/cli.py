# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance doctor``: what is installed and what a config would do.

Takes ``vllm serve``'s own arguments (:mod:`~vllm_ascend_balance.tools.doctor.args`:
vLLM's own parser, vLLM's defaults) and prints, one line each, the
installed vLLM version, whether the seam is present, whether the plugin
entry point is registered, and what the settings would activate: which
gate will run, from which setting (``--additional-config`` and the
``VLLM_ASCEND_BALANCE_SCHEDULING`` environment variable, as vLLM would read
them), the scheduler class each engine core builds, and what it does about
an installed vllm-ascend's own balance patch. The checks themselves are in
:mod:`~vllm_ascend_balance.tools.doctor.checks`; this module renders them. Exit
status: see :data:`EPILOG`.
"""

from __future__ import annotations

import argparse
import os

from vllm_ascend_balance.tools.doctor.args import (
    DESCRIPTION,
    EPILOG,
    USAGE,
    add_arguments,
    parse_args,
    parse_serve_args,
)
from vllm_ascend_balance.tools.doctor.checks import (
    config_view,
    engine_scheduler_class,
    gate_line,
    install_lines,
    plugin_registered,
    vllm_version,
)
from vllm_ascend_balance.tools.plugin_loading import (
    ENTRY_POINT_GROUP,
    ENTRY_POINT_TARGET,
    load_problem,
)
from vllm_ascend_balance.tools.vllm_presence import does_not_import
from vllm_ascend_balance.wiring.config import ENV_READ_BY, ENV_SETTING

__all__ = [
    "DESCRIPTION",
    "ENTRY_POINT_GROUP",
    "ENTRY_POINT_TARGET",
    "EPILOG",
    "USAGE",
    "add_arguments",
    "parse_args",
    "parse_serve_args",
    "run",
]

LABEL_WIDTH = 23


def say(label: str, value: object) -> None:
    """One report line: ``label:`` padded, then ``value``."""
    print(f"{label + ':':<{LABEL_WIDTH}}{value}")


def run(args: argparse.Namespace) -> int:
    """Print the report for ``args`` (:func:`parse_args`'s); the exit status
    of :data:`EPILOG`."""
    version = vllm_version()
    cause = getattr(args, "vllm_import_error", None)
    if cause:  # installed, but its import fails: what needs no import, then why
        say("vLLM installed", version or "a vllm package, no distribution metadata")
        lines = install_lines()
        for label, value in lines:
            say(label, value)
        fix = "repair that install"
        if any(label == "torch" and "requires" in value for label, value in lines):
            fix += " (the torch line above names what vLLM requires)"
        say("verdict", f"cannot work: {does_not_import(cause, fix)}")
        return 1
    say("vLLM installed", version or "no")
    if version is None:
        say("verdict", "install vLLM (a patched release or a fork branch)")
        return 1
    if getattr(args, "serve", None) is None:
        # Before any check line: an argument vLLM refuses ends here (exit 2).
        try:
            args.serve = parse_serve_args(args.serve_args)
        except ValueError as exc:
            say("verdict", f"cannot work: {exc}")
            return 1
    if getattr(args.serve, "parser_problem", None):
        say("warning", args.serve.parser_problem)
    for label, value in install_lines():
        say(label, value)
    from vllm_ascend_balance.gate.seam import SEAM
    from vllm_ascend_balance.wiring import ascend_steering
    from vllm_ascend_balance.wiring.activation_plan import gate_lines, plan_activation
    from vllm_ascend_balance.wiring.config import BalanceConfigError
    from vllm_ascend_balance.wiring.reach import has_seam, vllm_consults_seam

    seam = f"{has_seam()} (Scheduler.{SEAM})"
    if has_seam() and not vllm_consults_seam():
        seam = (
            f"False (Scheduler.schedule() never calls Scheduler.{SEAM}: partly patched)"
        )
    say("seam present", seam)
    say("plugin registered", f"{plugin_registered()} ({ENTRY_POINT_GROUP})")
    unloaded = load_problem()
    if unloaded and plugin_registered():
        say("plugin loaded", "False (VLLM_PLUGINS leaves it out)")
    try:
        view = config_view(args)
        # What the front-end hands vLLM: vllm-ascend sees balance off.
        ascend_steering.steer_vllm_config(view, dict(os.environ))
        # Steering read the user's config and logged its warnings: once.
        plan = plan_activation(view, quiet=True)
        built = (
            engine_scheduler_class(plan, args.serve)
            if plan.scheduler_cls is not None
            else None
        )
    except (BalanceConfigError, ValueError) as exc:
        say("verdict", f"cannot work: {exc}")
        return 1
    say("setting", f"{plan.requested} (from {plan.source})")
    say("env switch", f"{ENV_SETTING} read, as {ENV_READ_BY} read it")
    say("gate that will run", gate_line(plan))
    if plan.vllm_ascend is not None:
        what = (
            ascend_steering.describe(plan.vllm_ascend)
            if plan.requested
            else f"{plan.vllm_ascend}: untouched (balance scheduling is off)"
        )
        say("vllm-ascend", what)
    if built is not None:
        cls, how = built
        state = "on" if view.scheduler_config.async_scheduling else "off"
        why = (
            ""
            if view.scheduler_config.scheduler_cls
            else f"; async scheduling {state}: {args.async_why}"
        )
        say("scheduler class", f"{cls.__qualname__} ({how}{why})")
    if plan.active:
        # plan_activation refuses a scheduler_cls the gate cannot reach.
        say("gate reaches seam", f"yes (Scheduler.{SEAM})")
    shown = gate_lines(plan.setting) if plan.requested else []
    if plan.requested:
        policy, bound, exchange = shown
        say("freeze policy", policy.removeprefix("policy "))
        say("freeze bound", bound)
        say("exchange", exchange.removeprefix("exchange "))
    say("would activate", plan.active and not unloaded)
    for note in plan.notes:
        if note not in shown:
            print(f"  - {note}")
    if unloaded and plan.requested:
        # Nothing of the package runs in such a server to say so, nor
        # hands vllm-ascend's copied gate its switches set to off.
        if plan.vllm_ascend is not None:
            unloaded += f" ({plan.vllm_ascend}'s own balance gate reads the setting)"
        say("verdict", f"cannot work: {unloaded}")
        return 1
    return 0
