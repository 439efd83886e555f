# SPDX-License-Identifier: Apache-2.0
"""The gate: the admission decision inside each rank's scheduler.

:mod:`.scheduler` (the mixin that overrides vLLM's seam: one exchange and
one decision per active step), :mod:`.seam` (the seam's name, for the
commands where torch and vLLM do not import), :mod:`.settings` (what the
gate is told to do), :mod:`.signals` (what a rank tells the others, and the
view it gets back), :mod:`.collectives` (the exchange), :mod:`.bound` (the
decision: the policy's, then the gate's own bounds), :mod:`.holds` (each
request's holds on this rank) and :mod:`.policies` (one module per
``balance_policy``). Nothing here reads a configuration or imports from the
floors above (:mod:`vllm_ascend_balance.wiring` and the rest).
"""
