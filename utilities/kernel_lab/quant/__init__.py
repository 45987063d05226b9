"""Module 05 (quantization): NumPy references and helpers for every format the module teaches.

- ``integer``: symmetric/asymmetric INT8, group-wise INT4, ternary (BitNet b1.58): the float64
  references the checks compare the learners' kernels with, and the round trips the error plots use.
- ``kernels``: the integer kernels of notebooks 05.1, 05.5 and 05.6 (quantizers, DP4A, W8A8,
  W4A8 and ternary GEMMs), as the probe and the tests run them, under the names the notebooks import
  (05.6's DP4A W4A8 lives in ``w4a8``, the tensor-core W4A8 in ``w4a8_mma``, the warp sums in ``warp``); ``int4``: notebook 05.2's INT4
  kernels, the same code as the notebook's, under its names; ``dp4a``: the old name of
  ``kernel_lab.device.dp4a`` (DP4A and PRMT from Numba), kept for the notebooks' imports.
- further modules (floating formats: FP8, NVFP4, MX; quantized GEMMs) sit beside it, one per job.
"""
