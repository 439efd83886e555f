# SPDX-License-Identifier: Apache-2.0
"""The ``replay`` command's ``--help`` texts: what it does, how to read its
results, and what its defaults model (and do not).
"""

from __future__ import annotations

import textwrap

DESCRIPTION = (
    "Replay one workload on a real vLLM data-parallel deployment on CPU whose "
    "executor models step time (no weights, no accelerator), once per mode "
    "(balance scheduling off, on, vLLM's prefill_schedule_interval), and "
    "compare throughput, latency and per-rank load in modeled time, each "
    "metric with its noise band. Exit status: 0 all requests completed, 1 a "
    "run was interrupted or failed, 2 bad input or options."
)
EPILOG = textwrap.dedent(
    """\
    reading the results:
      steps frozen      share of active engine steps in which the gate froze
                        admission on every rank (the largest gathered
                        len(running) equalled --max-num-seqs)
      starved requests  requests that waited through at least
                        --starvation-steps frozen steps between arrival and
                        admission (with balance off: 0, nothing freezes)
      ~ no effect       the difference lies inside the noise band (99 %
                        confidence interval of the difference of the means)
      ?                 one run per mode (--repeat 1): no noise band, never
                        an effect
      ±                 half the range of a mode's runs (A/A noise)

    not an NPU: the cost-model defaults (--step-ms, --prefill-token-ms,
    --decode-req-ms, --decode-kv-ms-per-1k) are modeling choices, not
    measurements of any accelerator; they only place 64 decoding requests
    at ~2k context near vllm-ascend's published DeepSeek-V3.1 TPOT. Fit them
    to your cluster before reading absolute numbers: on your deployment,
    time decode-only steps at a few batch sizes and context lengths and
    prefill-only steps at a few chunk sizes, and fit step_ms = step +
    prefill_tokens * a + decode_requests * b + context_tokens / 1000 * c
    (least squares); pass the four numbers. docs/replay.md says how.

    not production: the defaults (--dp 2, --max-num-seqs 16) are sized for a
    2-core CPU machine; production DP MoE runs DP 8 to 256 with larger caps.
    --engine sim steps real vLLM schedulers in one process up to DP 256.

    trace CSV (Azure LLM inference trace): header
    TIMESTAMP,ContextTokens,GeneratedTokens in any order, TIMESTAMP as
    YYYY-MM-DD HH:MM:SS[.fffffff] (e.g. 2023-11-16 18:15:46.6805900), rows in
    time order; arrival = seconds since the first row.

    how long: each run starts a deployment (tens of seconds), warms it up,
    then takes the workload's modeled span x --time-scale plus its drain;
    there are (modes x --repeat) runs. The defaults (built-in workload, off
    and on, 2 runs each) take ~8 min on 2 busy CPU cores; --engine sim runs
    the same in ~20 s. A line on stderr at least once a minute shows
    progress.
    """
)
