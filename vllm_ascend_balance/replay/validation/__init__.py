# SPDX-License-Identifier: Apache-2.0
"""``validate-sim``: the simulated engine checked against the real
deployment on the same inputs.

:mod:`.cli` (the command: runs both engines per case) and :mod:`.checks`
(the tolerances and the table, pure comparison of metrics).
"""
