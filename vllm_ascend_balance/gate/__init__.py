# SPDX-License-Identifier: Apache-2.0
"""The gate: the admission decision inside each rank's scheduler.

The scheduler mixin that overrides vLLM's seam, the freeze policies it applies
(one class per ``balance_policy``) and the collectives that gather the DP group's
running counts.
"""
