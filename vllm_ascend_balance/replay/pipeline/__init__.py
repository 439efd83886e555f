# SPDX-License-Identifier: Apache-2.0
"""The replay pipeline, in run order: options, workload, the engine seam,
records, metrics, the comparison, the summary.

The engines behind the seam live in ``replay/real/`` and ``replay/sim/``; no
stage here imports either.
"""
