"""Module 03: kernel fusion, measured. One small module per notebook:

- ``gemm_bias_relu`` (03.1): ``relu(A @ B + bias)`` as three kernels and as one, module 02's
  warp-tiled SGEMM with an epilogue (:func:`kernel_lab.reductions_gemm.sgemm.warptile_kernel`); bytes
  moved by each;
- ``conv`` (03.2): 3x3 convolution + bias + ReLU (NCHW, padding 1, float32), the direct kernel and
  one variant per idea (loop order, constant-memory bias, shared-memory weights, an input tile with
  its halo in shared memory, register blocking), the issue's shape sweep, cuDNN through PyTorch;
- ``layernorm`` (03.3): LayerNorm + GELU (tanh form) fused, float32 and float16 inputs, the row in
  registers: the learner's last kernel (a team of threads sized to the row, four values per access)
  and the probes' variants (one warp or one block per row, Welford statistics by warp shuffles);
- ``epilogues`` (03.4): a GEMM factory that takes an epilogue device function (compiled once per
  epilogue and cached, its compile time measured), and a row softmax fused after a GEMM.

The NumPy references (float64) live beside the kernels they check; the checks that name the classic
mistakes are in :mod:`kernel_lab.checks.fusion`.
"""
