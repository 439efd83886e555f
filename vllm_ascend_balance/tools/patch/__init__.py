# SPDX-License-Identifier: Apache-2.0
"""``vllm-ascend-balance patch-vllm``: add the seam to the vLLM this Python
runs, from the upstream patch series this package carries.

:mod:`.cli` (the subcommand), :mod:`.series` (the series: where it is,
which one fits a vLLM, applying and reverting it; also used by the
checkout's ``upstream_patch/series.py``), :mod:`.target` (the install it
acts on, and the fresh-import check) and :mod:`.torch_companions`
(torchvision and friends built for another torch). None imports vLLM:
vLLM is imported in a new process, after the patch.
"""
