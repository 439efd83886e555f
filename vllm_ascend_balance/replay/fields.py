# SPDX-License-Identifier: Apache-2.0
"""Options defined once: dataclass fields whose metadata drives argparse.

As vLLM's ``EngineArgs`` does, an option is a dataclass field; its help, its
command-line spelling and its bounds live in the field's metadata (written
with :func:`option`), and :mod:`.options` builds the parser, the parsed
values and the one-line range errors from them. Nothing else repeats an
option's name, default or bounds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)


def option(
    default: Any,
    help: str,
    *,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    group: str = "",
    hidden: bool = False,
) -> Any:
    """A dataclass field that is also a command-line option ``--<name>``.

    Args:
        default: the default (``None``: unset).
        help: the ``--help`` text.
        metavar: the placeholder shown in ``--help``.
        choices: allowed values (strings).
        ge: inclusive lower bound (numbers); ``gt``: exclusive one. Float
            options must also be finite.
        group: the ``--help`` section (the dataclass's default section when
            empty).
        hidden: not shown in ``--help`` (test hooks).
    """
    return dataclasses.field(
        default=default,
        metadata={
            "help": help,
            "metavar": metavar,
            "choices": choices,
            "ge": ge,
            "gt": gt,
            "group": group,
            "hidden": hidden,
        },
    )


def flag(name: str) -> str:
    """The command-line spelling of field ``name``."""
    return "--" + name.replace("_", "-")


def check_bounds(obj: Any) -> None:
    """Check every numeric field of dataclass ``obj`` against its metadata.

    Raises:
        ValueError: one line naming the option, its bound and the value.
    """
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None or isinstance(value, bool) or not f.metadata:
            continue
        if not isinstance(value, int | float):
            continue
        ge, gt = f.metadata.get("ge"), f.metadata.get("gt")
        finite = "a finite number " if isinstance(value, float) else ""
        if isinstance(value, float) and not math.isfinite(value):
            bound = f">= {ge:g}" if ge is not None else f"> {gt:g}"
            raise ValueError(f"{flag(f.name)} must be {finite}{bound}, got {value}")
        if ge is not None and not value >= ge:
            raise ValueError(f"{flag(f.name)} must be {finite}>= {ge:g}, got {value}")
        if gt is not None and not value > gt:
            raise ValueError(f"{flag(f.name)} must be {finite}> {gt:g}, got {value}")
