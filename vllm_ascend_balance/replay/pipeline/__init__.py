# SPDX-License-Identifier: Apache-2.0
"""The replay pipeline, in the order a replay runs it.

:mod:`.cli` (``vllm-ascend-balance replay``) -> :mod:`.options` (every
option; :mod:`.cost` the cost model's coefficients, :mod:`.help_text` its
``--help`` texts, :mod:`.fields` dataclass
fields to argparse, :mod:`.modes` the ``--mode`` grammar, :mod:`.registry`
the ``--engine`` names) -> :mod:`.workload` (:mod:`.traces` the trace
readers, :mod:`.workload_types` the input types) -> :mod:`.engine` (the
seam) -> :mod:`.records` + :mod:`.join` (per-rank records joined on the
modeled clock) -> :mod:`.metrics` -> :mod:`.compare` (each metric against
its noise) -> :mod:`.summary` (:mod:`.report` the table and JSON,
:mod:`.heatmap` the large-DP plot); :mod:`.environment`, :mod:`.paths` and
:mod:`.progress` serve every stage.

The engines behind the seam live in ``replay/real/`` and ``replay/sim/``; no
stage here imports either, nor the weightless model they run
(``replay/model/``).
"""
