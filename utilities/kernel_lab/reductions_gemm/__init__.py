"""Module 02: device-wide reductions and scans, and matrix multiplication on CUDA cores. One file per job:

- ``scans`` (02.1, 02.2): the package's copies of the learner's reductions (absmax, argmax, sums)
  and of the single-pass scan with its decoupled look-back, with the block and warp pieces they
  share (later modules reuse ``persistent_blocks`` and the absmax kernels);
- ``sgemm`` (02.3, 02.3b, 02.4): the SGEMM progression kernel by kernel, the warp-tiled family
  (``GemmTiles``, ``warptile_launcher``) that modules 03 and 05 build on, its autotuning, and DGEMM;
- ``bench``: the progression beside cuBLAS on this GPU (``python -m kernel_lab.reductions_gemm.bench``).

The checks that name the exercises' classic mistakes are in :mod:`kernel_lab.checks.reductions_gemm`.
Nothing is imported here: ``import kernel_lab.reductions_gemm.scans`` loads that file alone.
"""
