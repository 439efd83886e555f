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
- ``on+POLICY[:K1[:K2...]]``: balance on with ``balance_policy`` POLICY
  (any of the gate's policies, ``_`` written ``-``: ``on+queued-leader``,
  ``on+throttled:8``), its knobs positional in the order the policy
  declares them (``--help`` lists each policy's), combinable with a bound
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
the same configuration twice, whose differences are noise), each the whole
``--mode``. A mode named twice gets a ``'`` per repetition in its label
(``off``, ``off'``); within a mode, ``on``, a policy and a bound each at
most once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vllm_ascend_balance.gate.policies import POLICIES, RETIRED, Policy
from vllm_ascend_balance.gate.settings import MAX_BOUND_STEPS
from vllm_ascend_balance.logger import init_logger

logger = init_logger(__name__)

_KIND = {int: "an integer", float: "a number"}
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
        knobs: the policy's knobs the mode sets, as ``(key, value)`` pairs.
    """

    label: str
    balance: bool = False
    prefill_schedule_interval: int | None = None
    peer: str | None = None
    max_frozen_steps: int | None = None
    max_held_steps: int | None = None
    policy: str | None = None
    knobs: tuple[tuple[str, int | float], ...] = ()

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
            self.knobs,
        )

    def bounds(self, max_frozen_steps: int | None) -> dict[str, Any]:
        """The option keys of the balance ``scheduler_config`` for this mode
        (bound, policy, knobs), with ``max_frozen_steps``
        (``--balance-max-frozen-steps``) where the mode sets no bound of its
        own and its policy has no default one; empty with balance off."""
        if not self.balance:
            return {}
        keys: dict[str, Any] = {}
        if self.policy is not None:
            keys["balance_policy"] = self.policy
        keys.update(self.knobs)
        if self.max_held_steps is not None:
            keys["balance_max_held_steps"] = self.max_held_steps
        elif self.max_frozen_steps is not None:
            keys["balance_max_frozen_steps"] = self.max_frozen_steps
        elif self.policy and POLICIES[self.policy].default_max_held_steps:
            pass  # its own default hold bound
        elif max_frozen_steps is not None:
            keys["balance_max_frozen_steps"] = max_frozen_steps
        return keys


def policy_usage(policy: Policy) -> str:
    """``on+NAME[:K1[:K2]]`` with its knobs' meanings, for ``--help`` and
    errors."""
    slots = "".join(f"[:{k.key.removeprefix('balance_').upper()}" for k in policy.knobs)
    text = f"on+{policy.mode_name}{slots}{']' * len(policy.knobs)}"
    for k in policy.knobs:
        text += f"; {k.key.removeprefix('balance_').upper()} = {k.key} ({k.doc})"
    return text


def _by_mode_name(name: str) -> Policy | None:
    return next((p for p in POLICIES.values() if p.mode_name == name), None)


def _knobs(text: str, policy: Policy, value: str) -> tuple[tuple[str, Any], ...]:
    """The policy's knobs written after its name, positional."""
    parts = value.split(":") if value else []
    if len(parts) > len(policy.knobs):
        raise ModeError(f"--mode {text}: expected {policy_usage(policy)}")
    knobs = []
    for spec, part in zip(policy.knobs, parts, strict=False):
        try:
            number = spec.kind(part)
        except ValueError:
            number = None
        if number is None or not spec.low <= number <= spec.high:
            raise ModeError(
                f"--mode {text}: {spec.key} must be {_KIND[spec.kind]} "
                f"from {spec.low:g} to {spec.high:g}, got {part!r} (expected "
                f"{policy_usage(policy)})"
            )
        knobs.append((spec.key, number))
    return tuple(knobs)


def _peer(text: str) -> Mode:
    from vllm_ascend_balance.replay.peers import PolicyError, make_policy

    try:
        make_policy(text)
    except PolicyError as e:
        raise ModeError(str(e)) from None
    return Mode(text, peer=text)


def _one(text: str) -> Mode:
    from vllm_ascend_balance.replay.peers import POLICIES as PEERS

    if text.partition(":")[0] in PEERS:
        return _peer(text)
    if "+" in text and any(p.partition(":")[0] in PEERS for p in text.split("+")):
        raise ModeError(
            f"--mode {text}: a peer policy runs alone (balance off); list it as "
            f"its own mode, e.g. --mode off,on,{text.split('+')[-1]}"
        )
    balance = False
    policy: str | None = None
    numbers: dict[str, int] = {}
    knobs: tuple[tuple[str, Any], ...] = ()
    for part in text.split("+"):
        name, _, value = part.partition(":")
        found = _by_mode_name(name)
        if part == "on":
            if balance:
                raise ModeError(f"--mode {text}: on given twice; keep one")
            balance = True
        elif found is not None:
            if policy == found.name:
                raise ModeError(f"--mode {text}: {name} given twice; keep one")
            if policy is not None:
                # One balance_policy per deployment: a second would
                # silently replace the first.
                raise ModeError(
                    f"--mode {text}: two policies ({policy.replace('_', '-')} and "
                    f"{name}); a mode runs one, list each as its own mode"
                )
            policy = found.name
            knobs = _knobs(text, found, value)
        elif name.replace("-", "_") in RETIRED:
            raise ModeError(
                f"--mode {text}: the {name} policy was retired; use "
                f"on+{RETIRED[name.replace('-', '_')].replace('_', '-')}"
            )
        elif part == "off" and text == "off":
            pass
        elif name in ("interval", "max-frozen", "max-held") and part != name:
            if not value.isdigit() or int(value) < 1:
                raise ModeError(
                    f"--mode {text}: {name}:N needs an integer N >= 1, got {value!r}"
                )
            if name != "interval" and int(value) > MAX_BOUND_STEPS:
                raise ModeError(
                    f"--mode {text}: {name}:N takes N from 1 to "
                    f"{MAX_BOUND_STEPS}, as the balance setting does, got {value}"
                )
            if name in numbers:
                raise ModeError(f"--mode {text}: {name} given twice; keep one {name}:N")
            numbers[name] = int(value)
        else:
            ours = ", ".join(f"on+{p.mode_name}" for p in POLICIES.values())
            raise ModeError(
                f"--mode: unknown mode {text!r} (use off, on, interval:N, "
                f"on+interval:N, on+max-frozen:N, on+max-held:N, {ours} "
                f"(with their knobs, --help), a peer policy such as "
                f"sglang-delayer:30 or sglang-pdi:4 (grammar: "
                f"docs/peer-policies.md), or the shorthands both, aa)"
            )
    if not balance and (policy or "max-frozen" in numbers or "max-held" in numbers):
        raise ModeError(f"--mode {text}: this needs balance on, e.g. on+{text}")
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
        knobs=knobs,
    )


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
    for name in names:
        if name in SHORTHANDS and len(names) > 1:
            spelled = ",".join(SHORTHANDS.get(n, n) for n in names)
            raise ModeError(
                f"--mode {text}: the shorthand {name} (= {SHORTHANDS[name]}) "
                f"works only alone; write its modes out, e.g. --mode {spelled}"
            )
    modes: list[Mode] = []
    for name in names:
        mode = _one(name)
        taken = sum(m.label.rstrip("'") == mode.label for m in modes)
        modes.append(dataclasses.replace(mode, label=mode.label + "'" * taken))
    return modes
