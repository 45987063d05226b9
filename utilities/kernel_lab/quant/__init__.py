"""Module 05 (quantization): NumPy references and helpers for every format the module teaches.

- ``integer``: symmetric/asymmetric INT8, group-wise INT4, ternary (BitNet b1.58): the float64
  references the checks compare the learners' kernels with, the round trips the error plots use,
  and the host helpers that pad K and read int8 rows as words.
- the integer kernels, one file per notebook, as the probes and the tests run them: ``int8``
  (05.1's quantizers), ``int4`` (05.2's INT4 groups), ``ternary`` (05.5's ternary quantizers,
  per-token INT8 and ternary GEMMs), ``int8_gemm`` (05.6's DP4A GEMMs and W8A8), ``w4a8`` (05.6's
  W4A8 on DP4A) and ``w4a8_mma`` (W4A8 on the tensor cores, and the dispatcher between the two);
  ``warp``: the warp sums they share.
- ``kernels``: the names the notebooks import from it, re-exported from those files; ``dp4a``: the
  old name of ``kernel_lab.device.dp4a`` (DP4A and PRMT from Numba), kept for the notebooks' imports.
- further modules (floating formats: FP8, NVFP4, MX; quantized GEMMs) sit beside it, one per job.
"""
