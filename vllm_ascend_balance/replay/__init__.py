# SPDX-License-Identifier: Apache-2.0
"""Replay a workload on a real vLLM DP deployment on CPU, balance off vs on."""
