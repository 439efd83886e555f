# SPDX-License-Identifier: Apache-2.0
"""What a rank tells the others: the signals of the gate's exchange.

A *quantity* is a number a rank reads off its own scheduler (its running
count, whether it has requests waiting below its cap, ...). A *signal* is a
quantity with how it combines across the DP group: ``max``, ``min`` or
``any`` (a 0/1 flag, true when some rank's is). Every rank receives the same
combined values (the :class:`View`), so every rank decides the same.

A policy declares the signals it reads by name
(:attr:`~vllm_ascend_balance.gate.policies.base.Policy.signals`); the gate
adds the ones it needs itself (:func:`layout`). Because every signal
combines by an idempotent operation, the group's view can come from an
all-gather of the quantities or from a log-depth all-reduce of the signals
(:mod:`~vllm_ascend_balance.gate.collectives`), with the same result.

Where "waiting" means a request in one of :data:`HELD_QUEUES`: the queues
the seam holds (``waiting``; ``skipped_waiting`` and ``async_kv_waiting``
where the release has them). ``kv_holding_waiting`` is not one: its requests
hold KV blocks already and drain while the gate is closed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: Queues of requests without KV blocks that a held step keeps from
#: admission, where the release has them: ``waiting`` (every release),
#: ``skipped_waiting`` (0.27-0.33), ``async_kv_waiting`` (0.34 on: requests
#: that would start an async KV load, with ``--max-num-inflight-kv-loads``;
#: the seam holds it as ``PauseState.PAUSED_NEW`` does).
HELD_QUEUES = ("waiting", "skipped_waiting", "async_kv_waiting")
#: How a signal combines across ranks.
COMBINES = ("max", "min", "any")

#: ``(scheduler, cap) -> int``: one rank's value of a quantity.
Reader = Callable[[Any, int], int]


def has_held_waiting(scheduler: Any) -> bool:
    """Whether any of :data:`HELD_QUEUES` is non-empty."""
    return any(getattr(scheduler, name, None) for name in HELD_QUEUES)


def admission_cap(scheduler: Any) -> int:
    """The cap the installed release admits WAITING requests by:
    ``max_num_active_reqs`` where the release has it, else
    ``max_num_running_reqs`` (mirrors the stop condition in upstream's
    ``Scheduler.schedule()``)."""
    cap = getattr(scheduler, "max_num_active_reqs", None)
    return scheduler.max_num_running_reqs if cap is None else cap


def _running(s: Any, cap: int) -> int:
    return len(s.running)


def _held(s: Any, cap: int) -> int:
    return int(len(s.running) < cap and has_held_waiting(s))


def _queued(s: Any, cap: int) -> int:
    return int(len(s.running) >= cap and has_held_waiting(s))


def _starved(s: Any, cap: int) -> int:
    return int(not s.running and has_held_waiting(s))


def _hold_age(s: Any, cap: int) -> int:
    return int(s.balance_hold_age())


def _chunk_in_flight(running: Any) -> bool:
    # vLLM's own flag: what schedule(throttle_prefills=True) defers.
    return any(getattr(r, "is_prefill_chunk", False) for r in running)


def _context(s: Any, cap: int) -> int:
    return int(_chunk_in_flight(s.running) or _held(s, cap))


def _decoding(s: Any, cap: int) -> int:
    running = s.running
    if not running:
        # TensorRT-LLM pads a rank with no active request at all with one
        # dummy generation request; a request waiting here is active there.
        return int(not has_held_waiting(s))
    return int(any(not getattr(r, "is_prefill_chunk", False) for r in running))


#: Quantity name -> reader. ``hold_age`` is the gate's own (the oldest hold
#: of the rank's work that the next step could hold,
#: :mod:`~vllm_ascend_balance.gate.holds`). ``context`` (a prefill chunk in
#: flight, or ``held``) and ``decoding`` (a running request past its
#: prompt, or no work at all) are TensorRT-LLM's per-rank context and
#: generation counts read as flags (``adp_balance``).
QUANTITIES: dict[str, Reader] = {
    "running": _running,
    "held": _held,
    "queued": _queued,
    "starved": _starved,
    "hold_age": _hold_age,
    "context": _context,
    "decoding": _decoding,
}


@dataclass(frozen=True)
class Signal:
    """A quantity and how it combines across the DP group.

    Attributes:
        name: the :class:`View` attribute it becomes.
        quantity: a key of :data:`QUANTITIES`.
        combine: one of :data:`COMBINES`.
        doc: one line.
    """

    name: str
    quantity: str
    combine: str
    doc: str


#: Signal name -> signal.
SIGNALS: dict[str, Signal] = {
    s.name: s
    for s in (
        Signal("leader", "running", "max", "the largest len(running)"),
        Signal("lowest", "running", "min", "the smallest len(running)"),
        Signal("held", "held", "any", "some rank below its cap has requests waiting"),
        Signal("queued", "queued", "any", "some rank at its cap has requests waiting"),
        Signal(
            "starved", "starved", "any", "some rank has requests waiting, none running"
        ),
        Signal(
            "hold_age",
            "hold_age",
            "max",
            "the oldest hold any rank could be held again",
        ),
        Signal(
            "all_context",
            "context",
            "min",
            "every rank has a prefill chunk in flight or is held",
        ),
        Signal(
            "all_decoding",
            "decoding",
            "min",
            "every rank has a decode to run, or no work at all",
        ),
    )
}


def register_signal(signal: Signal, reader: Reader | None = None) -> None:
    """Add a signal (and, for a new quantity, its reader): for a policy
    that reads something the built-in signals do not carry.

    Raises:
        ValueError: the name is taken by a different signal, the combine is
            unknown, or the quantity has no reader.
    """
    if signal.combine not in COMBINES:
        raise ValueError(f"signal {signal.name}: combine must be one of {COMBINES}")
    if SIGNALS.get(signal.name, signal) != signal:
        raise ValueError(f"signal {signal.name} is already defined differently")
    if reader is not None:
        QUANTITIES.setdefault(signal.quantity, reader)
    if signal.quantity not in QUANTITIES:
        raise ValueError(f"signal {signal.name}: no reader for {signal.quantity!r}")
    SIGNALS[signal.name] = signal


@dataclass(frozen=True)
class Layout:
    """Which signals a gate exchanges, and the quantities behind them (the
    all-gather's payload columns, in order)."""

    signals: tuple[Signal, ...]
    quantities: tuple[str, ...]

    def read(self, scheduler: Any, cap: int) -> tuple[int, ...]:
        """This rank's quantities, in :attr:`quantities` order."""
        return tuple(QUANTITIES[q](scheduler, cap) for q in self.quantities)


def layout(names: Iterable[str]) -> Layout:
    """The layout of ``leader`` and ``lowest`` (always) and ``names``, each
    once, in that order.

    Raises:
        KeyError: an unknown signal name.
    """
    ordered: dict[str, Signal] = {}
    for name in ("leader", "lowest", *names):
        ordered.setdefault(name, SIGNALS[name])
    signals = tuple(ordered.values())
    quantities = tuple(dict.fromkeys(s.quantity for s in signals))
    return Layout(signals, quantities)


class View:
    """What every rank learns from one exchange: each signal's combined
    value as an attribute (``view.leader``, ``view.held``; flags as
    bools), plus ``cap`` (the admission cap, the same configuration on every
    rank) and ``size`` (the DP group's size)."""

    cap: int
    size: int
    leader: int
    lowest: int

    def __init__(self, cap: int, size: int, values: dict[str, int | bool]) -> None:
        self.__dict__.update(values)
        self.cap = cap
        self.size = size

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"the gate's view has no signal {name!r}: declare it in the "
            f"policy's signals"
        )

    def __repr__(self) -> str:
        return f"View({self.__dict__})"


def combine(
    layout_: Layout, rows: Iterable[tuple[int, ...]], cap: int, size: int
) -> View:
    """The :class:`View` of every rank's quantities (``rows``, one per rank,
    in :attr:`Layout.quantities` order): what an all-gather yields."""
    columns = list(zip(*rows, strict=True))
    index = {q: i for i, q in enumerate(layout_.quantities)}
    values: dict[str, int | bool] = {}
    for s in layout_.signals:
        column = columns[index[s.quantity]]
        if s.combine == "max":
            values[s.name] = max(column)
        elif s.combine == "min":
            values[s.name] = min(column)
        else:
            values[s.name] = any(column)
    return View(cap, size, values)
