"""Warp-wide reductions the quantization kernels share (butterfly shuffles, the result in every lane):
05.2's INT4 groups, 05.5's per-token INT8 and ternary GEMMs, 05.6's W4A8. They sit below ``int4``,
``ternary`` and ``w4a8`` so that each may call them (``kernels`` keeps the names for the notebooks' imports)."""

from __future__ import annotations

# numba after kernel_lab (the parent package, imported first) chose GPU or simulator
from numba import cuda


@cuda.jit(device=True)
def warp_max_f32(v):
    """The maximum over the warp, in every lane (butterfly shuffles; a constant-step loop, because a
    loop over a tuple of offsets does not compile for the GPU)."""
    off = 16
    while off > 0:
        v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, off))
        off //= 2
    return v


@cuda.jit(device=True)
def warp_sum(v):
    """The sum of ``v`` (float32 or int32) over the warp, in every lane (butterfly shuffles)."""
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
        off //= 2
    return v


warp_sum_f32 = warp_sum  # the name notebook 05.6 imports
