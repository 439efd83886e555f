# SPDX-License-Identifier: Apache-2.0
"""The series this package exports: names, kinds, help texts, labels and
histogram buckets, in one table (:data:`SERIES`, :data:`WAIT_SERIES`,
:data:`HISTOGRAMS`).

Names follow vLLM's (``vllm:`` prefix, labels ``model_name`` and ``engine``
= the DP rank, counters ending in ``_total``, seconds as the unit); the
``balance_`` sub-prefix keeps them apart from upstream names. The engines'
files (:mod:`~vllm_ascend_balance.observability.metrics`), the stats carrier
(:mod:`~vllm_ascend_balance.observability.stats_carrier`), the dashboard and
the alert rules all read this table.
"""

from __future__ import annotations

from dataclasses import dataclass

LABELS = ("model_name", "engine")


@dataclass(frozen=True)
class Series:
    """One exported series: ``name`` without the ``_total`` suffix of a
    counter (or the ``_bucket``/``_sum``/``_count`` of a histogram);
    ``attr`` is the scheduler attribute it reads (a histogram's: the
    :class:`~vllm_ascend_balance.observability.held_wait.HeldWait` list it takes);
    ``buckets``: a histogram's upper bounds, ``+Inf`` implied."""

    name: str
    kind: str
    attr: str
    help: str
    buckets: tuple[float, ...] = ()


SERIES = (
    Series(
        "vllm:balance_gathers",
        "counter",
        "balance_gathers",
        "Balance scheduling gathers of len(running) across DP ranks "
        "(one per active engine step).",
    ),
    Series(
        "vllm:balance_frozen_gathers",
        "counter",
        "balance_frozen_gathers",
        "Gathers that held admission from WAITING on every DP rank (with the "
        "default policy: largest running count equal to the admission cap).",
    ),
    Series(
        "vllm:balance_fail_open_steps",
        "counter",
        "balance_fail_opens",
        "Gathers on which the policy would have held but a bound of the gate "
        "opened it (balance_max_held_steps: a request reached its hold bound; "
        "balance_max_frozen_steps: that many consecutive frozen gathers).",
    ),
    Series(
        "vllm:balance_gather_seconds",
        "counter",
        "balance_gather_seconds",
        "Wall time spent in the balance gather collective, in seconds.",
    ),
    Series(
        "vllm:balance_running_spread",
        "gauge",
        "balance_spread",
        "Largest minus smallest len(running) across DP ranks at the last gather.",
    ),
)
#: Written by the stall watchdog (:mod:`~vllm_ascend_balance.observability.stall`), from
#: its own thread, into its own file
#: (:func:`~vllm_ascend_balance.observability.metrics.open_gauge`).
WAIT_SERIES = Series(
    "vllm:balance_gather_wait_seconds",
    "gauge",
    "",
    "Seconds the balance gather in progress has waited for its DP peers "
    "(0 when none is waiting); sampled by the stall watchdog.",
)
#: Held seconds: 0 (never held: ``le="0.0"`` over ``_count`` is the share
#: of admissions the gate never held), then 50 ms (a few steps) to 2 min
#: (a long starvation; ``balance_max_frozen_steps`` bounds it when set).
HELD_SECONDS_BUCKETS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0, 20.0, 30.0, 60.0, 120.0)  # fmt: skip
#: Held steps: 0 (never held), then powers of two up to 256 frozen gathers.
HELD_STEPS_BUCKETS = (0.0, *(float(2**k) for k in range(9)))
#: Observed once per admission to RUNNING (0 when the gate never held the
#: request), per engine: ``_count`` is the admissions.
HISTOGRAMS = (
    Series(
        "vllm:balance_held_wait_seconds",
        "histogram",
        "seconds",
        "Seconds a request admitted to RUNNING spent in WAITING while the "
        "balance gate held admission frozen (0 when never held).",
        HELD_SECONDS_BUCKETS,
    ),
    Series(
        "vllm:balance_held_wait_steps",
        "histogram",
        "steps",
        "Frozen balance gathers a request admitted to RUNNING waited through "
        "in WAITING (0 when never held).",
        HELD_STEPS_BUCKETS,
    ),
)
#: The sample-name suffixes each kind puts on ``/metrics``.
SUFFIXES = {"counter": ("_total",), "gauge": ("",),
            "histogram": ("_bucket", "_sum", "_count")}  # fmt: skip


def exported_names() -> frozenset[str]:
    """Every sample name this package can put on ``/metrics`` (e.g.
    ``vllm:balance_gathers_total``, ``vllm:balance_held_wait_seconds_bucket``),
    from :data:`SERIES`, :data:`WAIT_SERIES` and :data:`HISTOGRAMS`."""
    return frozenset(
        series.name + suffix
        for series in (*SERIES, WAIT_SERIES, *HISTOGRAMS)
        for suffix in SUFFIXES[series.kind]
    )
