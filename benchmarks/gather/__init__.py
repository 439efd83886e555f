# SPDX-License-Identifier: Apache-2.0
"""The parts of ``benchmarks/bench_gather.py``: the timed ranks
(:mod:`.ranks`) and the fleet-scale model (:mod:`.scale`)."""
