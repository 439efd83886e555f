# SPDX-License-Identifier: Apache-2.0
"""The policy comparison behind ``benchmarks/compare_policies.py``, one job
per module: :mod:`.settings` (the modes and peer-knob sweeps, as data),
:mod:`.workloads` (seeded trace generators), :mod:`.cases` (case table and
selection), :mod:`.runs` (running the replay, per-seed values),
:mod:`.stats` (intervals), :mod:`.judging` (dominance, goodput, wins,
held cells) and :mod:`.render` (the markdown)."""
