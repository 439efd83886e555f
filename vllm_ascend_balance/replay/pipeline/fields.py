# SPDX-License-Identifier: Apache-2.0
"""Options defined once: dataclass fields whose metadata drives argparse.

As vLLM's ``EngineArgs`` does, an option is a dataclass field; its help, its
command-line spelling and its bounds live in the field's metadata (written
with :func:`option`); :func:`add_fields` builds the parser, :func:`build`
the parsed values and :func:`check_bounds` the one-line range errors from
them. Nothing else repeats an
option's name, default or bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
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
    le: float | None = None,
    group: str = "",
    hidden: bool = False,
) -> Any:
    """A dataclass field that is also a command-line option ``--<name>``.

    Args:
        default: the default (``None``: unset).
        help: the ``--help`` text.
        metavar: the placeholder shown in ``--help``.
        choices: allowed values (strings).
        ge: inclusive lower bound (numbers); ``gt``: exclusive one; ``le``:
            inclusive upper bound. Float options must also be finite.
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
            "le": le,
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
        le = f.metadata.get("le")
        if le is not None and not value <= le:
            # :g alone writes 1048576 as 1.04858e+06
            shown = f"{le:g}" if isinstance(le, float) else str(le)
            raise ValueError(f"{flag(f.name)} must be {finite}<= {shown}, got {value}")


class HelpFormatter(
    argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter
):
    """Shows defaults, except unset (None) and off (False) ones; the
    description and the epilog as written (pre-wrapped)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action) or ""


def _scalar_type(hint: Any) -> type:
    """``int`` of ``int | None`` and the like."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner
    return hint


def add_fields(
    parser: argparse.ArgumentParser, cls: type, groups: dict[str, Any] | None = None
) -> None:
    """Add one option per field of dataclass ``cls`` to ``parser``, in
    ``--help`` sections by the fields' ``group``; a nested dataclass field's
    own fields are added flat."""
    groups = {} if groups is None else groups
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = _scalar_type(hints[f.name])
        if dataclasses.is_dataclass(kind):
            add_fields(parser, kind, groups)  # nested: flattened
            continue
        meta = f.metadata
        name = meta["group"] or "options"
        if name not in groups:
            groups[name] = parser.add_argument_group(name)
        kwargs: dict[str, Any] = {"dest": f.name, "default": f.default}
        kwargs["help"] = argparse.SUPPRESS if meta["hidden"] else meta["help"]
        if kind is bool:
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = kind
            if meta["metavar"]:
                kwargs["metavar"] = meta["metavar"]
            if meta["choices"]:
                kwargs["choices"] = meta["choices"]
        groups[name].add_argument(flag(f.name), **kwargs)


def build(cls: type, values: dict[str, Any]) -> Any:
    """An instance of dataclass ``cls`` from parsed ``values`` (by field name;
    nested dataclasses rebuilt from the same flat values; a missing name keeps
    its default).

    Raises:
        ValueError: what ``cls``'s ``__post_init__`` raises (bounds).
    """
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = _scalar_type(hints[f.name])
        if dataclasses.is_dataclass(kind):
            kwargs[f.name] = build(kind, values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)
