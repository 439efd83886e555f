# SPDX-License-Identifier: Apache-2.0
"""One histogram in ``prometheus_client``'s multi-process file format.

An engine core writes its balance series straight into mmap files
(:mod:`~vllm_ascend_balance.observability.metrics`: the directory is not necessarily
``PROMETHEUS_MULTIPROC_DIR``, so ``prometheus_client.Histogram`` cannot be
used there). The format is the one ``prometheus_client`` writes for its own
histograms, which ``MultiProcessCollector`` reads from a
``histogram_*.db`` file:

- one ``<name>_bucket`` value per upper bound, label ``le`` formatted as
  ``prometheus_client`` does (``floatToGoString``), holding that bucket's
  own count (not cumulative: the collector accumulates over the bounds in
  order and derives ``<name>_count``);
- one ``<name>_sum``.

All values are written at creation (0), so the series are on ``/metrics``
from the first scrape with ``_count`` 0.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from typing import Any


class HistogramFile:
    """Writer of one labelled histogram into a ``MmapedDict``.

    Args:
        target: the ``prometheus_client.mmap_dict.MmapedDict`` of a
            ``histogram_<tag>-<pid>.db`` file (one writer per file).
        name: the histogram's name (``_bucket``/``_sum`` are appended).
        help_text: its help text.
        buckets: finite upper bounds, ascending; ``+Inf`` is appended.
        labelnames, labelvalues: the series' labels (without ``le``).
    """

    def __init__(
        self,
        target: Any,
        name: str,
        help_text: str,
        buckets: Sequence[float],
        labelnames: list[str],
        labelvalues: list[str],
    ) -> None:
        from prometheus_client.mmap_dict import mmap_key
        from prometheus_client.utils import floatToGoString

        if list(buckets) != sorted(buckets):
            raise ValueError(f"{name}: buckets must be ascending, got {buckets}")
        self._target = target
        self._bounds = (*buckets, float("inf"))
        self._counts = [0.0] * len(self._bounds)
        self.sum = 0.0
        self._bucket_keys = [
            mmap_key(name, name + "_bucket", [*labelnames, "le"],
                     [*labelvalues, floatToGoString(bound)], help_text)
            for bound in self._bounds
        ]  # fmt: skip
        self._sum_key = mmap_key(
            name, name + "_sum", labelnames, labelvalues, help_text
        )
        now = time.time()
        for key in (*self._bucket_keys, self._sum_key):
            target.write_value(key, 0.0, now)

    @property
    def counts(self) -> list[float]:
        """Per-bucket counts (not cumulative), in bound order, ``+Inf`` last."""
        return list(self._counts)

    def observe(self, values: Sequence[float]) -> None:
        """Add ``values`` (each into the first bucket whose bound is >= it,
        as ``prometheus_client`` does) and write the buckets they touched
        and the sum."""
        if not values:
            return
        touched: set[int] = set()
        for value in values:
            index = bisect.bisect_left(self._bounds, value)
            self._counts[index] += 1
            self.sum += value
            touched.add(index)
        now = time.time()
        for index in touched:
            self._target.write_value(self._bucket_keys[index], self._counts[index], now)
        self._target.write_value(self._sum_key, self.sum, now)
