# SPDX-License-Identifier: Apache-2.0
"""The demo command's arguments, checked before anything starts.

A bad value gets one line naming the setting and the fix (exit 2), not a
stack from vLLM's start-up a minute later: the port range, the JSON of an
``--additional-config`` given after the demo's options, and the balance
settings it holds, read by the same reader the engines use
(:func:`~vllm_ascend_balance.wiring.config_read.read_user_setting`).
Balance requested with DP 1 is a warning, as doctor and the engines treat
it: it has no effect there, nothing is refused. Imports neither vLLM nor
torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vllm_ascend_balance.tools.demo.command import (
    BALANCE_ON,
    MAX_PORT,
    merge_into,
    split_additional_config,
)
from vllm_ascend_balance.wiring.config import BalanceConfigError
from vllm_ascend_balance.wiring.config_read import read_user_setting

#: ``vllm serve`` flags the demo sets from its own options: given among the
#: extra arguments, the last would win in vLLM's parser while the demo
#: announces (and checks) its own value.
OWN_FLAGS = {"--data-parallel-size": "--dp", "-dp": "--dp"}


class UsageError(ValueError):
    """A demo argument that cannot work: one line naming it and the fix."""


@dataclass
class DemoPlan:
    """What the checked arguments will serve.

    Attributes:
        balance: balance scheduling as the server will run it, in a few
            words (``on``, ``off (...)``, ``requested, no effect at DP 1``).
        active: the gate will run (series on ``/metrics``).
        warnings: one line each, printed before the server starts.
    """

    balance: str
    active: bool
    warnings: list[str] = field(default_factory=list)


def check_arguments(
    dp: int,
    port: int,
    max_num_seqs: int,
    extra_args: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> DemoPlan:
    """Check the demo's arguments (``extra_args``: the ``vllm serve``
    arguments after its own; ``environ`` default ``os.environ``, the
    server's).

    Raises:
        UsageError: ``--dp`` or ``--max-num-seqs`` < 1, ``--port`` out of
            0..65535, ``--data-parallel-size`` among ``extra_args``
            (:data:`OWN_FLAGS`), an ``--additional-config`` that is not a
            JSON object, or a balance setting the engines would refuse.
    """
    for flag, value, fix in (("--dp", dp, 2), ("--max-num-seqs", max_num_seqs, 4)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}: use e.g. {flag} {fix}")
    if not 0 <= port <= MAX_PORT:
        raise UsageError(
            f"--port must be 0..{MAX_PORT}, got {port}: choose a port in range "
            f"(--port 0: a free one)"
        )
    for arg in extra_args:
        flag = arg.split("=", 1)[0].replace("_", "-")
        if flag in OWN_FLAGS:
            raise UsageError(
                f"{arg.split('=', 1)[0]} is the demo's own setting: use "
                f"{OWN_FLAGS[flag]}"
            )
    try:
        user, _ = split_additional_config(extra_args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    additional = merge_into({"scheduler_config": dict(BALANCE_ON)}, user)
    try:
        setting = read_user_setting(
            additional, os.environ if environ is None else environ, quiet=True
        )
    except BalanceConfigError as exc:
        raise UsageError(str(exc)) from None
    if not setting.enabled:
        return DemoPlan(f"off (from {setting.source})", False)
    if dp == 1:
        return DemoPlan(
            "requested, no effect at DP 1",
            False,
            [
                "balance scheduling needs DP >= 2: with --dp 1 it has no effect "
                "(nothing is activated, /metrics has no vllm:balance_* series); "
                "use --dp 2 or more"
            ],
        )
    return DemoPlan("on", True)
