"""Tensor cores from Python: cuBLASDx GEMM kernels in Numba, their tuning, checks and references.

Module 06 of Kernel Lab uses this subpackage. Pure-Python modules (importable anywhere, unit-tested
on the CPU): ``configs`` (valid tile/block/pipeline configurations), ``tuner`` (benchmark and cache
the best), ``validate`` (argument checks), ``references`` (float64 NumPy references), ``quiz``.
GPU modules (import nvmath-python lazily): ``gemm`` (the kernels), ``epilogues``, ``precisions``
(bfloat16/tf32 for nvmath 1.0), ``codegen_cache`` (cuBLASDx code generation cached on disk),
``cubin_cache`` (linked kernels cached on disk), ``warm`` (fills both ahead of time, no GPU needed:
``python -m kernel_lab.tensor_cores.warm --arch sm_90,sm_100``), ``profiling`` (NVTX ranges and
throughput reports).
"""

from . import configs, quiz, references, tuner, validate  # noqa: F401
