# SPDX-License-Identifier: Apache-2.0
"""Per-rank records written by the engine processes of a replay.

Each engine process appends JSON lines to ``<run_dir>/rank<r>.jsonl``; the
replay front-end reads them after (or while) the run. One record per line,
its kind in ``"k"``:

- ``"start"``: the rank is up; ``scheduler`` is the scheduler class name,
  ``cap`` the admission cap.
- ``"step"``: one forward pass (lock-step collective) of this rank. Fields:
  ``step`` (index, the same global step on every rank), ``t0``/``t1``
  (``time.monotonic()`` wall seconds at entry and after pacing), ``cost_ms``
  (this rank's modeled cost), ``step_ms`` (the step's modeled time: max over
  ranks), ``slow`` (the slowest rank), ``mixed`` (the slowest rank had both
  prefill tokens and decode requests), ``run``/``wait`` (``len`` of the
  scheduler's running/waiting queues), ``pf`` (prefill tokens), ``dec``
  (decode requests), ``new`` (requests admitted from WAITING this step),
  ``frozen`` (the balance gate's decision this step's ``schedule()`` used),
  ``gathers`` (balance gathers so far), ``dummy`` (a dummy batch), ``over``
  (wall seconds by which the step overran its paced budget).
- ``"gather"``: one balance gather of this rank: ``n`` (gathers so far),
  ``local`` (this rank's ``len(running)`` sent), ``gathered`` (the vector
  received, index = DP rank), ``frozen`` (decision taken), ``cap``.
- ``"final"``: at executor shutdown: ``gathers``, ``frozen_gathers``,
  ``steps``.

Lines are flushed as written so a run that is interrupted or fails still
leaves everything measured so far.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any, ClassVar

from vllm_ascend_balance.logger import init_logger
from vllm_ascend_balance.scheduler import admission_cap

logger = init_logger(__name__)


def rank_file(run_dir: str | Path, rank: int) -> Path:
    """Path of rank ``rank``'s record file in ``run_dir``."""
    return Path(run_dir) / f"rank{rank}.jsonl"


class RankRecorder:
    """Appends JSON records to one rank's file (line-buffered)."""

    def __init__(self, path: Path, rank: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self._file: IO[str] | None = path.open("a", buffering=1)

    def write(self, kind: str, **fields: Any) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps({"k": kind, "rank": self.rank, **fields}) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_records(run_dir: str | Path, dp_size: int) -> dict[int, list[dict[str, Any]]]:
    """All records of ranks ``0..dp_size-1`` (missing files read as empty; a
    torn last line, from a process killed mid-write, is dropped)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rank in range(dp_size):
        path = rank_file(run_dir, rank)
        records: list[dict[str, Any]] = []
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        out[rank] = records
    return out


class RecordingSchedulerMixin:
    """Scheduler mixin that hands the scheduler to the replay executor of its
    process and records every balance gather.

    Composed by :func:`install_recording_scheduler` in front of whatever class
    the configuration would build (after balance activation chose it), so
    the executor, which vLLM builds before the scheduler
    (``EngineCore.__init__``), can read ``len(running)`` and the balance
    attributes (``balance_frozen``, ``balance_gathers``, ``balance_gathered``)
    of the scheduler that actually runs.
    """

    replay_executor: ClassVar[Any] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        executor = type(self).replay_executor
        if executor is not None:
            executor.attach_scheduler(self)

    def balance_gather(self) -> None:
        local = len(self.running)  # type: ignore[attr-defined]
        gathers_before = getattr(self, "balance_gathers", 0)
        super().balance_gather()  # type: ignore[misc]
        executor = type(self).replay_executor
        if executor is None or getattr(self, "balance_gathers", 0) == gathers_before:
            return  # no group yet: nothing was gathered
        gathered = self.balance_gathered  # type: ignore[attr-defined]
        executor.recorder.write(
            "gather",
            n=self.balance_gathers,  # type: ignore[attr-defined]
            local=local,
            gathered=[int(x) for x in gathered.tolist()],
            frozen=bool(self.balance_frozen),  # type: ignore[attr-defined]
            cap=admission_cap(self),
        )


def install_recording_scheduler(vllm_config: Any, executor: Any) -> type:
    """Set ``scheduler_config.scheduler_cls`` to :class:`RecordingSchedulerMixin`
    composed over the class the config currently resolves to, bound to
    ``executor``; return the new class.

    Runs in the executor's ``__init__``, i.e. inside ``EngineCore.__init__``
    after balance activation (``run_engine_core``) set its class and before
    the scheduler is built from ``get_scheduler_cls()``.
    """
    sched_config = vllm_config.scheduler_config
    base = sched_config.get_scheduler_cls()
    cls = type(
        f"Recording{base.__name__}",
        (RecordingSchedulerMixin, base),
        {"replay_executor": executor},
    )
    sched_config.scheduler_cls = cls
    return cls
