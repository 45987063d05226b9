"""Module 05 (quantization): NumPy references and helpers for every format the module teaches.

- ``integer``: symmetric/asymmetric INT8, group-wise INT4, ternary (BitNet b1.58): the float64
  references the checks compare the learners' kernels with, and the round trips the error plots use.
- further modules (floating formats: FP8, NVFP4, MX; quantized GEMMs) sit beside it, one per job.
"""
