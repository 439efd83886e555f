# SPDX-License-Identifier: Apache-2.0
"""What a replay mode changes in the deployment, and the ``--mode`` grammar.

``--mode`` is a comma-separated list of modes, the first being the baseline
every other one is compared with:

- ``off``: vLLM as configured, balance scheduling off;
- ``on``: balance scheduling on
  (``additional_config.scheduler_config.enable_balance_scheduling``);
- ``interval:N``: vLLM's own DP prefill throttling, engine argument
  ``prefill_schedule_interval=N`` (admit new prefills once every N engine
  steps, aligned across DP ranks), balance off;
- ``on+interval:N``: both.
- ``on+max-frozen:N``: balance on with ``balance_max_frozen_steps=N`` (the
  bounded freeze; ``on+max-frozen:64`` is the setting docs/operating.md
  recommends);
- ``on+max-held:N``: balance on with ``balance_max_held_steps=N`` (the
  held-step bound);
- ``on+queued-leader``: balance on with ``balance_policy:
  "queued_leader"``, combinable with a bound
  (``on+queued-leader+max-held:64``, the opt-in rule docs/peer-policies.md
  recommends).
- ``on+aligned[:W[:P]]``: balance on with ``balance_policy: "aligned"``
  (``balance_align_window=W``, ``balance_align_min_load=P/100``), its
  deadline by ``max-held:N`` (``on+aligned:8:50+max-held:64``).
- ``on+cohort[:W]``: balance on with ``balance_policy: "cohort"``
  (``balance_align_window=W``), its deadline by ``max-held:N``
  (``on+cohort:8+max-held:64``).
- ``on+batched[:W]``: balance on with ``balance_policy: "batched"``
  (``balance_align_window=W``), its deadline by ``max-held:N``
  (``on+batched:4+max-held:64``).
- ``on+throttled[:W]``: balance on with ``balance_policy: "throttled"``
  (``balance_align_window=W``), its deadline by ``max-held:N``
  (``on+throttled+max-held:64``).
- peer policies (:mod:`.peers`; on the real engine through
  :mod:`~vllm_ascend_balance.replay.real.peer_gate`, behind vLLM's router):
  another project's DP admission rule through the same seam, balance off.
  Every knob is a positional non-negative integer after the name,
  ``:``-separated; a field left out takes the source's documented default
  (below, with its range):

  ``sglang-delayer[:N[:W[:Q[:MS[:PDI[:WIN]]]]]]`` (SGLang's PrefillDelayer)
      N = ``--prefill-delayer-max-delay-passes`` (30, >= 1);
      W = ``--prefill-delayer-token-usage-low-watermark`` in % (0 = off,
      0-100); Q = ``--prefill-delayer-queue-min-ratio`` in % (0 = off);
      MS = ``--prefill-delayer-max-delay-ms`` (5000, >= 1);
      PDI = ``--prefill-decode-interval`` (0 = off);
      WIN = ``SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE`` (16, >= 1).
  ``sglang-pdi:PDI`` (SGLang's ``--prefill-decode-interval`` alone, >= 1).
  ``trtllm-adp[:T[:W[:M[:L]]]]`` (TensorRT-LLM's attention-DP balance, its
      requests routed by its own ``DefaultADPRouter``)
      T = ``timeout_iters`` (50, >= 0); W = ``batching_wait_iters`` (10,
      >= 0); M = ``TLLM_ADP_BALANCE_MIN_GENERATION_REQUESTS`` (0 = off);
      L = ``TLLM_ADP_BALANCE_LOW_OCCUPANCY_TIMEOUT_ITERS`` (0, 0-T).
  ``vllm-align[:D[:L[:MS]]]`` (vLLM PR #51199's prefill alignment)
      D = ``--prefill-alignment-max-delay-passes`` (30, >= 1);
      L = ``--prefill-alignment-target-step-lead`` (2, >= 0);
      MS = the fail-open wall-clock bound (5000, >= 1).
  ``atom-delayer[:N[:MS]]`` (ROCm ATOM #930's PrefillDelayer)
      N = ``ATOM_PREFILL_DELAYER_MAX_DELAY_PASSES`` (30, >= 1);
      MS = ``ATOM_PREFILL_DELAYER_MAX_DELAY_MS`` (5000, >= 1).

  vLLM's own baseline is ``off`` (its front-end load balancer routes every
  mode but ``trtllm-adp``) and ``interval:N``
  (``prefill_schedule_interval``, >= 1; 1 = off).

Shorthands: ``both`` = ``off,on``; ``aa`` = ``off,off`` (an A/A comparison:
the same configuration twice, whose differences are noise). A mode named
twice gets a ``'`` per repetition in its label (``off``, ``off'``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.gate.policies import WINDOWED
from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

SHORTHANDS = {"both": "off,on", "aa": "off,off"}


class ModeError(ValueError):
    """A ``--mode`` value that does not parse; one line."""


@dataclass(frozen=True)
class Mode:
    """One deployment configuration of a comparison.

    Attributes:
        label: the column heading (unique within a comparison).
        balance: balance scheduling on.
        prefill_schedule_interval: vLLM's engine argument, or None (vLLM's
            default).
        peer: a peer policy's ``--mode`` entry (e.g. ``sglang-delayer:30``),
            or None.
        max_frozen_steps: ``balance_max_frozen_steps`` for this mode, or
            None (then ``--balance-max-frozen-steps`` applies).
        max_held_steps: ``balance_max_held_steps`` for this mode, or None.
        policy: ``balance_policy`` for this mode, or None (the contract).
        align_window: ``balance_align_window``, or None.
        align_min_load: ``balance_align_min_load``, or None.
    """

    label: str
    balance: bool = False
    prefill_schedule_interval: int | None = None
    peer: str | None = None
    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    policy: str | None = None
    align_window: int | None = None
    align_min_load: float | None = None

    @property
    def config(self) -> tuple[Any, ...]:
        """What the deployment gets (two modes with the same ``config`` are
        an A/A pair)."""
        return (
            self.balance,
            self.prefill_schedule_interval,
            self.peer,
            self.max_frozen_steps,
            self.max_held_steps,
            self.policy,
            self.align_window,
            self.align_min_load,
        )

    def bounds(self, max_frozen_steps: int | None) -> dict[str, Any]:
        """The option keys of the balance ``scheduler_config`` for this mode
        (bound, policy), with ``max_frozen_steps``
        (``--balance-max-frozen-steps``) where the mode sets no bound of its
        own; empty with balance off."""
        if not self.balance:
            return {}
        keys: dict[str, Any] = {}
        if self.policy is not None:
            keys["balance_policy"] = self.policy
        if self.align_window is not None:
            keys["balance_align_window"] = self.align_window
        if self.align_min_load is not None:
            keys["balance_align_min_load"] = self.align_min_load
        if self.max_held_steps is not None:
            keys["balance_max_held_steps"] = self.max_held_steps
        elif self.policy in WINDOWED:
            pass  # its deadline is the held bound (its own default)
        elif (frozen := self.max_frozen_steps or max_frozen_steps) is not None:
            keys["balance_max_frozen_steps"] = frozen
        return keys


def _peer(text: str) -> Mode:
    from vllm_ascend_balance.replay.peers import PolicyError, make_policy

    try:
        make_policy(text)
    except PolicyError as e:
        raise ModeError(str(e)) from None
    return Mode(text, peer=text)


def _one(text: str) -> Mode:
    from vllm_ascend_balance.replay.peers import POLICIES

    if text.partition(":")[0] in POLICIES:
        return _peer(text)
    if "+" in text and any(p.partition(":")[0] in POLICIES for p in text.split("+")):
        raise ModeError(
            f"--mode {text}: a peer policy runs alone (balance off); list it as "
            f"its own mode, e.g. --mode off,on,{text.split('+')[-1]}"
        )
    balance = False
    policy: str | None = None
    numbers: dict[str, int] = {}
    align: dict[str, Any] = {}
    for part in text.split("+"):
        name, _, value = part.partition(":")
        if part == "on":
            balance = True
        elif part == "queued-leader":
            policy = "queued_leader"
        elif name == "aligned":
            policy = "aligned"
            align = _aligned(text, value)
        elif name in ("cohort", "batched", "throttled"):
            policy = name
            align = _cohort(text, value)
        elif part == "off" and text == "off":
            pass
        elif name in ("interval", "max-frozen", "max-held") and part != name:
            if not value.isdigit() or int(value) < 1:
                raise ModeError(
                    f"--mode {text}: {name}:N needs an integer N >= 1, got {value!r}"
                )
            numbers[name] = int(value)
        else:
            raise ModeError(
                f"--mode: unknown mode {text!r} (use off, on, interval:N, "
                f"on+interval:N, on+max-frozen:N, on+max-held:N, "
                f"on+queued-leader, on+aligned[:W[:P]], on+cohort[:W], "
                f"on+batched[:W], on+throttled[:W], a peer policy such as "
                f"sglang-delayer:30 or sglang-pdi:4 (grammar: "
                f"docs/peer-policies.md), or "
                f"the shorthands both, aa)"
            )
    if not balance and (policy or "max-frozen" in numbers or "max-held" in numbers):
        raise ModeError(f"--mode {text}: this needs balance on, e.g. on+{text}")
    if policy in WINDOWED and "max-frozen" in numbers:
        raise ModeError(
            f"--mode {text}: {policy} bounds every hold with max-held:N, not "
            f"max-frozen:N"
        )
    if "max-frozen" in numbers and "max-held" in numbers:
        raise ModeError(
            f"--mode {text}: max-frozen and max-held are two bounds of one "
            f"fail-open; keep one"
        )
    return Mode(
        text,
        balance,
        numbers.get("interval"),
        max_frozen_steps=numbers.get("max-frozen"),
        max_held_steps=numbers.get("max-held"),
        policy=policy,
        **align,
    )


def _aligned(text: str, value: str) -> dict[str, Any]:
    """``aligned[:W[:P]]``'s knobs: W steps >= 1, P percent 0-100."""
    parts = value.split(":") if value else []
    if len(parts) > 2 or not all(p.isdigit() for p in parts):
        raise ModeError(
            f"--mode {text}: aligned[:W[:P]] needs integers W >= 1 (steps) and "
            f"P from 0 to 100 (percent of the cap), e.g. on+aligned:8:50"
        )
    knobs: dict[str, Any] = {}
    if parts:
        knobs["align_window"] = int(parts[0])
    if len(parts) == 2:
        knobs["align_min_load"] = int(parts[1]) / 100
    if knobs.get("align_window", 1) < 1 or knobs.get("align_min_load", 0) > 1:
        raise ModeError(
            f"--mode {text}: aligned[:W[:P]] needs W >= 1 and P <= 100, "
            f"e.g. on+aligned:8:50"
        )
    return knobs


def _cohort(text: str, value: str) -> dict[str, Any]:
    """``cohort[:W]``'s and ``batched[:W]``'s knob: W steps >= 1."""
    if not value:
        return {}
    if not value.isdigit() or int(value) < 1:
        raise ModeError(
            f"--mode {text}: cohort[:W] and batched[:W] need an integer W >= 1 "
            f"(steps), e.g. on+cohort:8+max-held:64"
        )
    return {"align_window": int(value)}


def parse_modes(text: str) -> list[Mode]:
    """The modes of ``--mode TEXT``, baseline first.

    Raises:
        ModeError: an unknown or malformed mode, or an empty list.
    """
    text = SHORTHANDS.get(text.strip(), text)
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise ModeError("--mode: no mode given (e.g. --mode off,on)")
    if not all(names):
        raise ModeError(
            f"--mode {text!r}: an empty entry (a stray comma?), e.g. --mode off,on"
        )
    modes: list[Mode] = []
    for name in names:
        mode = _one(name)
        taken = sum(m.label.rstrip("'") == mode.label for m in modes)
        modes.append(dataclasses.replace(mode, label=mode.label + "'" * taken))
    return modes
