"""Notebook 03.1: ``C = relu(A @ B + bias)``, unfused (three kernels) and fused (one).

``A`` is M x K, ``B`` K x N, ``bias`` has N entries (one per column of C, as in a linear layer
``x @ W + b``), all float32 row-major. The fused kernel is module 02's warp-tiled SGEMM with an
epilogue applied in registers before the store (:func:`kernel_lab.reductions_gemm.sgemm.warptile_kernel`),
so the GEMM itself is the same code in both variants and only the traffic of C differs.
"""

from __future__ import annotations

import numpy as np

from ..reductions_gemm import sgemm
from ..sizes import sizes as _sizes

from numba import cuda, float32  # noqa: E402  (kernel_lab chose GPU or simulator already)

EW_THREADS = 256  # element-wise kernels: threads per block


def reference(a, b, bias):
    """float64 ``relu(a @ b + bias)``."""
    a, b, bias = (np.asarray(x, np.float64) for x in (a, b, bias))
    return np.maximum(a @ b + bias[None, :], 0.0)


def magnitude(a, b, bias):
    """The size of the terms behind each element (for the checker's tolerance)."""
    a, b, bias = (np.abs(np.asarray(x, np.float64)) for x in (a, b, bias))
    return a @ b + bias[None, :]


def bytes_moved(m: int, n: int, k: int, fused: bool) -> int:
    """The fewest bytes each variant moves through device memory (float32, each access once).

    The GEMM reads A and B and writes C; unfused, the bias kernel reads C and the bias and writes
    C, and the ReLU kernel reads and writes C again: four more passes over M x N floats. Fused, the
    bias is read once per column and C is written once. (A GEMM's real traffic is larger: tiles of
    A and B are read several times, through L2; this counts what no kernel can avoid.)"""
    gemm = 4 * (m * k + k * n + m * n)
    return gemm + 4 * n if fused else gemm + 4 * (2 * m * n + n) + 4 * (2 * m * n)


# --- the unfused chain: GEMM, then bias, then ReLU ---------------------------------------------


@cuda.jit
def add_bias_flat(c, bias, n):
    # c: M x N flattened; column of element i is i % n
    i = cuda.grid(1)
    if i < c.size:
        c[i] = c[i] + bias[i % n]


@cuda.jit
def relu_flat(c):
    i = cuda.grid(1)
    if i < c.size:
        c[i] = max(c[i], float32(0))


def _ew_blocks(size):
    return max(1, -(-size // EW_THREADS))


def launch_gemm(c, a, b):
    """Module 02's warp-tiled SGEMM (kernel 7, no epilogue)."""
    sgemm.launch_warptiled(c, a, b)


def launch_unfused(c, a, b, bias):
    """Three kernels: C = A @ B; C += bias; C = max(C, 0)."""
    sgemm.launch_warptiled(c, a, b)
    flat = c.reshape(c.size)
    add_bias_flat[_ew_blocks(c.size), EW_THREADS](flat, bias, np.int32(c.shape[1]))
    relu_flat[_ew_blocks(c.size), EW_THREADS](flat)


@cuda.jit(device=True, forceinline=True)
def bias_relu_epilogue(v, row, col, bias):
    return max(v + bias[col], float32(0))


def fused_launcher(epilogue=bias_relu_epilogue, cfg=None):
    """``launch(c, a, b, bias)``: the warp-tiled SGEMM with ``epilogue`` fused into its store."""
    return sgemm.warptile_launcher(cfg or sgemm.WARPTILE, epilogue=epilogue)


def launch_fused(c, a, b, bias):
    fused_launcher()(c, a, b, bias)


# --- the sweep of notebook 03.1 and the probe: speedup against K --------------------------------

SWEEP = _sizes(gpu=dict(m=4096, n=4096, ks=[32, 64, 128, 256, 512, 1024, 2048, 4096]),
               sim=dict(m=40, n=36, ks=[8, 24]))


def sweep_k(launchers: dict, *, m=None, n=None, ks=None, quiet=True):
    """Time each ``launchers[name](c, a, b, bias)`` at M x N for each K: {name: [Measurement]}.

    Every launcher is timed on the same random inputs; each measurement's fraction is of cuBLAS
    SGEMM's rate (the GEMM's roofline), and its bytes are the fused variant's. Under the simulator nothing is
    timed (each Measurement has ``ms=None``)."""
    from ..bench import benchmark

    m = m or SWEEP.m
    n = n or SWEEP.n
    ks = ks or SWEEP.ks
    rng = np.random.default_rng(0)
    out = {name: [] for name in launchers}
    for k in ks:
        a = cuda.to_device(rng.standard_normal((m, k), dtype=np.float32))
        b = cuda.to_device(rng.standard_normal((k, n), dtype=np.float32))
        bias = cuda.to_device(rng.standard_normal(n, dtype=np.float32))
        c = cuda.device_array((m, n), np.float32)
        for name, launch in launchers.items():
            out[name].append(benchmark(f"{name}, K={k}", lambda launch=launch: launch(c, a, b, bias),
                                       bytes=bytes_moved(m, n, k, fused=True), flops=2 * m * n * k, peak="sgemm",
                                       inputs=(a, b), quiet=quiet))
    return out


def cupy_peer(cp):
    """``launch(c, a, b, bias)`` with CuPy: cuBLAS SGEMM, then one element-wise kernel for bias + ReLU
    (CuPy fuses ``maximum(c + bias, 0)`` into one kernel), writing into ``c``."""
    bias_relu = cp.ElementwiseKernel("float32 x, float32 b", "float32 y", "y = max(x + b, 0.0f)", "kl_bias_relu")

    def launch(c, a, b, bias):
        ca, cb, cc, cbias = cp.asarray(a), cp.asarray(b), cp.asarray(c), cp.asarray(bias)
        cp.matmul(ca, cb, out=cc)
        bias_relu(cc, cbias[None, :], cc)
    return launch

