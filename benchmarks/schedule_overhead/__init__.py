# SPDX-License-Identifier: Apache-2.0
"""The parts of ``benchmarks/bench_schedule_overhead.py``: the scheduler
under test (:mod:`.rig`), the timed tables (:mod:`.timing`) and the
instruction counts (:mod:`.counting`)."""
