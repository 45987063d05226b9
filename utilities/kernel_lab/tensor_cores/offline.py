"""Compiling cuBLASDx kernels on a machine without a GPU.

What a compilation needs
------------------------
A Numba kernel that calls cuBLASDx compiles in three host-side steps: nvmath-python asks libmathdx
for each device function, which runs NVRTC over cuBLASDx's C++ headers (the slow part, seconds per
function); Numba lowers the kernel and NVVM turns it into LTO-IR; nvJitLink links everything. None
of these runs on the GPU. Three things stand in the way on a GPU-less host, and this module works
around each:

1. libmathdx refuses to load without ``libcuda.so.1`` (it asks the driver's CUDA version). A tiny
   stand-in library that answers that one question is enough (:func:`stand_in_driver` builds one
   with the host's C compiler; point ``LD_LIBRARY_PATH`` at its folder *before* Python starts).
2. nvmath-python and Numba ask the current device for its compute capability: :func:`pretend_gpu`
   answers for them.
3. A ``DevicePipeline`` is built from arrays on the GPU (it encodes TMA descriptors there), but the
   kernel's *type* needs only the arrays' shapes, strides and dtype: :func:`pipeline_for_shapes`
   builds one without memory.

With the code-generation cache on (``codegen_cache.enable``), compiling here fills the cache, and a
GPU host with the same nvmath-python, libmathdx, NVRTC and CCCL versions then skips code generation
(its compile drops from minutes to the ~15 s of Numba and linking). That is how module 07's
kernels were type-checked during development and how a workshop image can ship a warm cache.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

_STAND_IN_SOURCE = r"""
/* Stands in for libcuda.so.1 on a host without a GPU: libmathdx asks the driver's version before
   it generates code. Everything else reports "no device". */
int cuDriverGetVersion(int *version) { *version = %d; return 0; }
int cuInit(unsigned int flags) { return 100; }
int cuDeviceGetCount(int *count) { *count = 0; return 0; }
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, int *st) { *p = 0; return 500; }
int cuGetProcAddress(const char *s, void **p, int v, unsigned long long f) { *p = 0; return 500; }
"""


def stand_in_driver(folder: str | os.PathLike | None = None, cuda_version: int = 13000) -> Path:
    """Build ``libcuda.so.1`` answering only ``cuDriverGetVersion`` (needs ``cc`` or ``gcc``).

    Returns the folder to put first on ``LD_LIBRARY_PATH`` (it must be set before Python starts).
    """
    folder = Path(folder or Path(tempfile.gettempdir()) / "kernel_lab_stand_in_driver")
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / "libcuda.so.1"
    if not lib.exists():
        src = folder / "stand_in.c"
        src.write_text(_STAND_IN_SOURCE % cuda_version)
        compiler = os.environ.get("CC", "cc")
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return folder


def stand_in_environment(**extra) -> dict:
    """The environment for a child process that compiles for a GPU with none present: Numba's real
    CUDA target (not the simulator) and the stand-in driver first on ``LD_LIBRARY_PATH`` (the loader
    reads it when the process starts, so a script re-runs itself with this). ``extra`` adds variables."""
    return dict(os.environ, NUMBA_ENABLE_CUDASIM="0",
                LD_LIBRARY_PATH=f"{stand_in_driver()}:{os.environ.get('LD_LIBRARY_PATH', '')}", **extra)


class _PretendDevice:
    def __init__(self, cc):
        self.compute_capability = tuple(cc)
        self.id = 0


def pretend_gpu(cc=(9, 0)) -> None:
    """Make nvmath-python and Numba compile for compute capability ``cc`` with no GPU present.

    Call before building any ``Matmul``; Numba must run with ``NUMBA_ENABLE_CUDASIM=0``.
    """
    import numba.cuda.dispatcher as numba_dispatcher
    import nvmath.device.common as common
    import nvmath.device.common_cuda as common_cuda
    from nvmath.device.common_cuda import ComputeCapability

    # As a real GPU answers, nvmath's get_current_device_cc and Numba's code library alike: Hopper
    # and later with the "a" (architecture-specific) suffix. The code-generation cache keys hold
    # the target SM, so without it a warm cache built here would never be hit by a GPU process.
    suffix = "a" if tuple(cc[:2]) >= (9, 0) else ""

    def current_cc():
        return ComputeCapability(cc[0], cc[1], suffix)

    common_cuda.get_current_device_cc = current_cc
    common.get_current_device_cc = current_cc
    numba_dispatcher.get_current_device = lambda: _PretendDevice(cc)
    # A kernel's code library asks the current context for the capability when none is given
    # (``_Kernel`` compiles its PTX that way): answer as the GPU would.
    from numba.cuda import codegen

    original = getattr(codegen.CUDACodeLibrary._ensure_cc, "__wrapped__", codegen.CUDACodeLibrary._ensure_cc)

    def ensure_cc(self, want=None):
        if want is not None:
            return want
        return (cc[0], cc[1], suffix)

    ensure_cc.__wrapped__ = original
    codegen.CUDACodeLibrary._ensure_cc = ensure_cc


class _ShapeOnlyView:
    """What a DevicePipeline reads of an array to describe it: shape, strides (elements), dtype."""

    def __init__(self, shape, strides, dtype):
        import numpy as np

        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), np.dtype(dtype)


def pipeline_for_shapes(mm, depth: int, a_shape, a_strides, b_shape, b_strides, dtype):
    """A ``DevicePipeline`` for operands of these shapes and strides (in elements), holding no
    memory: good for typing and compiling a kernel, not for launching one."""
    from nvmath.bindings import mathdx
    from nvmath.device import cublasdx

    pipe = object.__new__(cublasdx.DevicePipeline)
    pipe.mm, pipe.pipeline_depth = mm, depth
    pipe._a_view = _ShapeOnlyView(a_shape, a_strides, dtype)
    pipe._b_view = _ShapeOnlyView(b_shape, b_strides, dtype)
    handle = cublasdx._blas_device_pipeline_handle(pipe)
    trait = mathdx.CublasdxPipelineTrait

    def get(t):
        return int(mathdx.cublasdx_get_pipeline_trait_int64(handle, t))

    pipe._storage_bytes = get(trait.STORAGE_BYTES)
    pipe._storage_alignment_bytes = get(trait.STORAGE_ALIGNMENT_BYTES)
    pipe._buffer_size = get(trait.BUFFER_SIZE)
    pipe._buffer_alignment_bytes = get(trait.BUFFER_ALIGNMENT_BYTES)
    return pipe


def compile_kernel(dispatcher, argument_types, cc=(9, 0)) -> bytes:
    """Compile a ``cuda.jit`` kernel for ``argument_types`` (Numba types) to LTO-IR for ``cc``."""
    from numba import cuda

    code, _ = cuda.compile(dispatcher.py_func, tuple(argument_types), cc=tuple(cc), output="ltoir")
    return code
