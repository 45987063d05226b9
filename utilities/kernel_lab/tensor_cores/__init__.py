"""Tensor cores from Python: cuBLASDx GEMM kernels in Numba, their tuning, checks and references.

Module 06 of Kernel Lab uses this subpackage. Pure-Python modules (importable anywhere, unit-tested
on the CPU): ``configs`` (valid tile/block/pipeline configurations), ``tuner`` (the old name of
:mod:`kernel_lab.tuner`, benchmark and cache the best), ``validate`` (argument checks), ``references``
(float64 NumPy references), ``quiz``.
GPU modules (import nvmath-python lazily): ``gemm`` (the kernels), ``toolchain`` (what modules 04
and 07 share with it: ``device_api()`` with the caches on, ``as_device``, the shared-memory opt-in),
``epilogues``, ``precisions`` (bfloat16/tf32 for nvmath 1.0), ``codegen_cache`` (cuBLASDx code
generation cached on disk), ``cubin_cache`` (linked kernels cached on disk), ``warm`` (fills both
ahead of time, no GPU needed: ``python -m kernel_lab.tensor_cores.warm --arch sm_90,sm_100``),
``profiling`` (NVTX ranges and throughput reports).

Layers (tests/test_package_layers.py): ``toolchain``, ``codegen_cache``, ``cubin_cache``, ``offline``,
``precisions``, ``fragments`` and ``validate`` are the "compile" layer, below every module's kernels,
so they import nothing else of this subpackage; ``warm`` is a tool above every module (its catalogue
names module 07's kernels too), and nothing here imports it.
"""

from . import configs, quiz, references, tuner, validate  # noqa: F401
