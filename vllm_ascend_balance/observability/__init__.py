# SPDX-License-Identifier: Apache-2.0
"""Observability: what the gate reports while it runs.

Prometheus series written by the engines and collected by the front-end, the stats
carried to the stat loggers, held-wait accounting and the stall watchdog.
"""
