"""Notebook 03.4: epilogues as functions, and a row softmax that needs the whole row.

A fused GEMM differs from a plain one only in what happens to each result between the
accumulator and the store. So the epilogue is a parameter: :func:`gemm_with` takes a device
function ``epilogue(v, row, col, aux)`` and returns a launcher of module 02's warp-tiled SGEMM
specialised for it (Numba compiles the epilogue into the kernel: no call, no branch at run time).
Each specialisation is a compilation, seconds on a GPU: :func:`gemm_with` caches the launcher per
epilogue and records what its first launch cost (``launch.compile_s``).

``aux`` is one tuple for every epilogue here, :func:`epilogue_args`:
``(bias, c_in, alpha, beta, gamma)``, so that all epilogues share one kernel signature.

A softmax over each row of ``A @ B`` is an epilogue of a different kind: ``exp(v - max) / sum``
needs the row's max and sum, which no tile of a tiled GEMM holds. :data:`gemm_row_softmax` gives
each row of C to one block (fine while N is small enough for a block's registers); module 04's
attention and module 06.2 meet the same problem, and the online softmax that removes it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..reductions_gemm import sgemm
from ..sizes import sizes as _sizes
from ..validate import KernelLabArgumentError
from .layernorm import gelu

from numba import cuda, float32  # noqa: E402  (kernel_lab chose GPU or simulator already)

FULL = 0xFFFFFFFF


# --- the epilogues -----------------------------------------------------------------------------


@cuda.jit(device=True, forceinline=True)
def ep_bias(v, row, col, aux):
    return v + aux[0][col]


@cuda.jit(device=True, forceinline=True)
def ep_bias_relu(v, row, col, aux):
    return max(v + aux[0][col], float32(0))


@cuda.jit(device=True, forceinline=True)
def ep_bias_sigmoid(v, row, col, aux):
    return float32(1) / (float32(1) + math.exp(-(v + aux[0][col])))


@cuda.jit(device=True, forceinline=True)
def ep_bias_tanh(v, row, col, aux):
    return math.tanh(v + aux[0][col])


@cuda.jit(device=True, forceinline=True)
def ep_bias_gelu(v, row, col, aux):
    return gelu(v + aux[0][col])


@cuda.jit(device=True, forceinline=True)
def ep_axpby_bias(v, row, col, aux):
    # alpha * (A @ B) + beta * C + gamma * bias: the GEMM of BLAS plus a bias
    return aux[2] * v + aux[3] * aux[1][row, col] + aux[4] * aux[0][col]


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _gelu64(z):
    return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))


# name: (device function, float64 reference of (A @ B, bias, C, alpha, beta, gamma))
EPILOGUES = {
    "bias": (ep_bias, lambda p, bias, c, al, be, ga: p + bias),
    "bias + ReLU": (ep_bias_relu, lambda p, bias, c, al, be, ga: np.maximum(p + bias, 0)),
    "bias + sigmoid": (ep_bias_sigmoid, lambda p, bias, c, al, be, ga: _sigmoid(p + bias)),
    "bias + tanh": (ep_bias_tanh, lambda p, bias, c, al, be, ga: np.tanh(p + bias)),
    "bias + GELU": (ep_bias_gelu, lambda p, bias, c, al, be, ga: _gelu64(p + bias)),
    "alpha*AB + beta*C + gamma*bias": (ep_axpby_bias, lambda p, bias, c, al, be, ga: al * p + be * c + ga * bias),
}


def epilogue_args(bias, c_in=None, alpha=1.0, beta=0.0, gamma=1.0):
    """The ``aux`` tuple every epilogue here reads: (bias, c_in, alpha, beta, gamma)."""
    if c_in is None:
        c_in = _dummy_c()
    return (bias, c_in, np.float32(alpha), np.float32(beta), np.float32(gamma))


_DUMMY = {}


def _dummy_c():
    if "c" not in _DUMMY:
        _DUMMY["c"] = cuda.to_device(np.zeros((1, 1), np.float32))
    return _DUMMY["c"]


# --- the factory -------------------------------------------------------------------------------

_FACTORY: dict = {}


def gemm_with(epilogue, cfg=None):
    """``launch(c, a, b, aux)``: the warp-tiled SGEMM with ``epilogue`` fused, built once per
    (epilogue, tiles) and cached. ``launch.compile_s`` is the wall time of its first launch minus
    that of its second (the compilation), ``None`` until it has run twice."""
    cfg = cfg or sgemm.WARPTILE
    key = (epilogue, cfg)
    if key in _FACTORY:
        return _FACTORY[key]
    inner = sgemm.warptile_launcher(cfg, epilogue=epilogue)
    walls = []

    def launch(c, a, b, aux):
        if len(walls) < 2:
            cuda.synchronize()
            t0 = time.perf_counter()
            inner(c, a, b, aux)
            cuda.synchronize()
            walls.append(time.perf_counter() - t0)
            if len(walls) == 2:
                launch.compile_s = max(walls[0] - walls[1], 0.0)
        else:
            inner(c, a, b, aux)
    launch.compile_s = None
    launch.kernel = inner.kernel
    launch.config = cfg
    _FACTORY[key] = launch
    return launch


# --- row softmax after a GEMM: one block per row ------------------------------------------------

_S = _sizes(gpu=dict(threads=256, values=8), sim=dict(threads=64, values=2))
SOFTMAX_THREADS = _S.threads
SOFTMAX_WARPS = SOFTMAX_THREADS // 32  # a constant: the GPU compiler takes no expression as a shape
SOFTMAX_VALUES = _S.values  # columns per thread: N up to SOFTMAX_THREADS * SOFTMAX_VALUES


@cuda.jit(device=True, forceinline=True)
def block_max_f32(v, scratch):
    """The block's max of v, returned to every thread (``scratch``: shared, one float per warp)."""
    for off in (16, 8, 4, 2, 1):
        v = max(v, cuda.shfl_xor_sync(FULL, v, off))
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    if lane == 0:
        scratch[warp] = v
    cuda.syncthreads()
    r = scratch[0]
    for i in range(1, cuda.blockDim.x // 32):
        r = max(r, scratch[i])
    cuda.syncthreads()  # scratch may be reused by the next reduction
    return r


@cuda.jit(device=True, forceinline=True)
def block_sum_f32(v, scratch):
    """The block's sum of v, returned to every thread (same order in every thread: same result)."""
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL, v, off)
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    if lane == 0:
        scratch[warp] = v
    cuda.syncthreads()
    r = scratch[0]
    for i in range(1, cuda.blockDim.x // 32):
        r += scratch[i]
    cuda.syncthreads()
    return r


@cuda.jit
def gemm_row_softmax(a, b, out):
    # out[row] = softmax(a[row] @ b); block = one row; thread t owns columns t, t + THREADS, ...
    scratch = cuda.shared.array(SOFTMAX_WARPS, float32)
    v = cuda.local.array(SOFTMAX_VALUES, float32)
    row, t = cuda.blockIdx.x, cuda.threadIdx.x
    n, kk = b.shape[1], a.shape[1]
    m = float32(-math.inf)
    for j in range(SOFTMAX_VALUES):
        col = t + SOFTMAX_THREADS * j
        v[j] = float32(-math.inf)  # columns past the end: exp(-inf - m) = 0 adds nothing
        if col < n:
            acc = float32(0)
            for k in range(kk):
                acc += a[row, k] * b[k, col]
            v[j] = acc
            m = max(m, acc)
    m = block_max_f32(m, scratch)  # the whole row's max: every block-wide value is needed
    s = float32(0)
    for j in range(SOFTMAX_VALUES):
        v[j] = math.exp(v[j] - m)  # <= 1: no overflow however large the logits
        s += v[j]
    s = block_sum_f32(s, scratch)
    for j in range(SOFTMAX_VALUES):
        col = t + SOFTMAX_THREADS * j
        if col < n:
            out[row, col] = v[j] / s


def launch_row_softmax(out, a, b):
    if b.shape[1] > SOFTMAX_THREADS * SOFTMAX_VALUES:
        raise KernelLabArgumentError(f"N = {b.shape[1]}: one block holds at most {SOFTMAX_THREADS * SOFTMAX_VALUES} "
                                     "columns of a row (SOFTMAX_THREADS x SOFTMAX_VALUES)")
    gemm_row_softmax[a.shape[0], SOFTMAX_THREADS](a, b, out)


def softmax_reference(a, b):
    z = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
