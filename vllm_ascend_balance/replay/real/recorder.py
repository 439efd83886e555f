# SPDX-License-Identifier: Apache-2.0
"""Per-rank record files of the real-deployment engine, and the recording
scheduler.

Each engine process appends one JSON line per record to
``<run_dir>/rank<r>.jsonl``: ``{"kind": <record class name>, **fields}`` for
the classes of :mod:`vllm_ascend_balance.replay.pipeline.records` (``RankStart``,
``RankStep``, ``RankRequest``,
``GatherRecord``). Reading builds the same classes back, so a
renamed or missing field fails loudly instead of reading as zero. Lines are
flushed as written: a run that is interrupted or fails leaves everything
measured so far (a torn last line, from a process killed mid-write, is
dropped).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

from vllm_ascend_balance.gate.scheduler import admission_cap
from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.replay.pipeline.records import (
    GatherRecord,
    RankRequest,
    RankStart,
    RankStep,
    split_gathered,
)

logger = init_logger(__name__)

_KINDS: dict[str, type] = {
    cls.__name__: cls for cls in (RankStart, RankStep, RankRequest, GatherRecord)
}


def rank_file(run_dir: str | Path, rank: int) -> Path:
    """Path of rank ``rank``'s record file in ``run_dir``."""
    return Path(run_dir) / f"rank{rank}.jsonl"


class RankRecorder:
    """Appends records to one rank's file (line-buffered)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = path.open("a", buffering=1)

    def write(self, record: Any) -> None:
        if self._file is None:
            return
        data = {"kind": type(record).__name__, **dataclasses.asdict(record)}
        self._file.write(json.dumps(data) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class RankFile:
    """The records of one rank, by kind, in file order."""

    starts: list[RankStart] = field(default_factory=list)
    steps: list[RankStep] = field(default_factory=list)
    requests: list[RankRequest] = field(default_factory=list)
    gathers: list[GatherRecord] = field(default_factory=list)


def read_rank_file(path: Path) -> RankFile:
    """The records in ``path`` (missing file: none).

    Raises:
        TypeError: a record whose fields do not match its class (a record
            file written by another version of the replay).
    """
    out = RankFile()
    lists: dict[type, list] = {
        RankStart: out.starts,
        RankStep: out.steps,
        RankRequest: out.requests,
        GatherRecord: out.gathers,
    }
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # torn last line
        cls = _KINDS[data.pop("kind")]
        lists[cls].append(cls(**data))
    return out


class RecordingSchedulerMixin:
    """Scheduler mixin that hands the scheduler to the replay executor of its
    process and records every balance gather.

    Composed by :func:`install_recording_scheduler` in front of whatever class
    the configuration would build (after balance activation chose it), so
    the executor, which vLLM builds before the scheduler
    (``EngineCore.__init__``), reads ``len(running)`` and the balance
    attributes of the scheduler that actually runs. If vLLM ever builds the
    scheduler before the executor, the executor's first forward pass finds
    no scheduler attached and fails the run (see
    ``CostModelExecutor._forward``), rather than recording zeros.
    """

    replay_executor: ClassVar[Any] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        executor = type(self).replay_executor
        if executor is not None:
            executor.attach_scheduler(self)

    def admission_gather(self) -> None:
        local = len(self.running)  # type: ignore[attr-defined]
        gathers_before = getattr(self, "balance_gathers", 0)
        # What this rank sends (computed once per gather: the gate reuses
        # it); only where a gather follows, or the next one would send it.
        sent = (
            list(self.admission_payload())  # type: ignore[attr-defined]
            if getattr(self, "dp_group", None) is not None
            else None
        )
        super().admission_gather()  # type: ignore[misc]
        executor = type(self).replay_executor
        if executor is None or getattr(self, "balance_gathers", 0) == gathers_before:
            return  # no group yet: nothing was gathered
        vector, flags = split_gathered(self.balance_gathered)  # type: ignore[attr-defined]
        executor.recorder.write(
            GatherRecord(
                rank=executor.dp_rank,
                n=self.balance_gathers,  # type: ignore[attr-defined]
                local=local,
                gathered=vector,
                frozen=bool(self.balance_frozen),  # type: ignore[attr-defined]
                cap=admission_cap(self),
                flags=flags,
                sent=sent,
            )
        )


def install_recording_scheduler(vllm_config: Any, executor: Any) -> type:
    """Set ``scheduler_config.scheduler_cls`` to :class:`RecordingSchedulerMixin`
    composed over the class the config currently resolves to, bound to
    ``executor``; return the new class (named ``Recording<Base>``, in this
    module, so vLLM's "Using custom scheduler class" line names it).

    Runs in the executor's ``__init__``, i.e. inside ``EngineCore.__init__``
    after balance activation (``run_engine_core``) set its class and before
    the scheduler is built from ``get_scheduler_cls()``.
    """
    sched_config = vllm_config.scheduler_config
    # A class already set (balance activation's) is used as is: resolving it
    # through get_scheduler_cls() would log vLLM's custom-class warning once
    # more for a class the replay does not run.
    current = sched_config.scheduler_cls
    base = current if isinstance(current, type) else sched_config.get_scheduler_cls()
    cls = recording_class(base, executor)
    sched_config.scheduler_cls = cls
    return cls


def recording_class(base: type, executor: Any = None) -> type:
    """:class:`RecordingSchedulerMixin` over ``base``, bound to ``executor``
    (None: records nothing), named ``Recording<Base>``."""
    name = f"Recording{base.__name__}"
    return type(
        name,
        (RecordingSchedulerMixin, base),
        {"replay_executor": executor, "__module__": __name__, "__qualname__": name},
    )


def scheduler_state(sched: Any) -> tuple[int, int, bool, int]:
    """``(running, waiting, frozen, gathers)`` of the rank's scheduler for
    its step record; "frozen": the gate's freeze or a peer's hold
    (:mod:`.peer_gate`).

    Raises:
        RuntimeError: the recording scheduler never attached (``sched`` None).
    """
    if sched is None:
        # Loud: without the scheduler every queue length would record 0.
        raise RuntimeError(
            "replay recording hook did not attach: vLLM built the "
            "scheduler before the executor (or ignored scheduler_cls), so "
            "CostModelExecutor cannot record running/waiting/frozen; the "
            "replay needs its RecordingSchedulerMixin composed in "
            "EngineCore.__init__"
        )
    return (
        len(sched.running),
        len(sched.waiting),
        bool(getattr(sched, "balance_frozen", False))
        or bool(getattr(sched, "peer_hold", False)),
        int(getattr(sched, "balance_gathers", 0)),
    )
