# SPDX-License-Identifier: Apache-2.0
"""The parts of ``benchmarks/sweep_fleet_dp.py``: its results table
(:mod:`.table`)."""
