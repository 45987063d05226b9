"""Notebook 03.3: LayerNorm + GELU (tanh form), fused: one read of x, one write of y.

For each row ``r`` of ``x`` (R x N, float32 or float16)::

    mean[r] = sum(x[r]) / N,   var = sum((x[r] - mean)^2) / N   (the *population* variance: / N)
    rstd[r] = 1 / sqrt(var + eps)
    y[r]    = gelu((x[r] - mean[r]) * rstd[r] * gamma + beta)         (y has x's dtype)
    gelu(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))

``mean`` and ``rstd`` (float32) are saved for the backward pass, which needs them and would
otherwise read x again. Statistics are accumulated in float32 whatever x's format.

Two kernels: one warp per row (rows up to ``32 * WARP_VALUES`` long; a row's values stay in the
lanes' registers between the statistics and the normalisation) and one block per row (rows up to
``BLOCK * BLOCK_VALUES``). :func:`launch_layernorm_gelu` picks by the row length. The statistics
are Welford's running (count, mean, M2), combined across lanes with warp shuffles by Chan's rule,
which does not lose the variance to cancellation the way ``E[x^2] - E[x]^2`` can.
"""

from __future__ import annotations

import math

import numpy as np

from ..sizes import sizes as _sizes
from ..validate import KernelLabArgumentError

from numba import cuda, float32  # noqa: E402  (kernel_lab chose GPU or simulator already)

_S = _sizes(gpu=dict(warp_values=32, block=256, block_values=32, warps_per_block=4),
            sim=dict(warp_values=4, block=64, block_values=4, warps_per_block=2))
WARP_VALUES = _S.warp_values  # values per lane in the warp-per-row kernel: rows up to 32 * this
BLOCK = _S.block  # threads of the block-per-row kernel
BLOCK_WARPS = BLOCK // 32  # a constant: the GPU compiler takes no expression as a shape
BLOCK_VALUES = _S.block_values  # values per thread there: rows up to BLOCK * this
WARPS_PER_BLOCK = _S.warps_per_block  # rows per block in the warp-per-row kernel
EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)
FULL = 0xFFFFFFFF


def gelu_tanh(v):
    """GELU, tanh form, in NumPy (float64)."""
    return 0.5 * v * (1.0 + np.tanh(GELU_C * (v + 0.044715 * v ** 3)))


def reference(x, gamma, beta, eps=EPS):
    """float64 (y, mean, rstd)."""
    x, gamma, beta = (np.asarray(a, np.float64) for a in (x, gamma, beta))
    mean = x.mean(axis=1)
    var = ((x - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1.0 / np.sqrt(var + eps)
    return gelu_tanh((x - mean[:, None]) * rstd[:, None] * gamma + beta), mean, rstd


def bytes_moved(rows, n, itemsize) -> int:
    """x read once, y written once (same format), gamma and beta once, mean and rstd written."""
    return 2 * rows * n * itemsize + 2 * 4 * n + 2 * 4 * rows


# --- device functions --------------------------------------------------------------------------


@cuda.jit(device=True, inline="always")
def gelu(v):
    return float32(0.5) * v * (float32(1) + math.tanh(float32(GELU_C) * (v + float32(0.044715) * v * v * v)))


@cuda.jit(device=True, inline="always")
def welford_combine(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Chan's rule: the (count, mean, M2) of two sets from each set's own."""
    n = n_a + n_b
    if n == 0:
        return n, mean_a, m2_a
    d = mean_b - mean_a
    frac = n_b / n
    return n, mean_a + d * frac, m2_a + m2_b + d * d * n_a * frac


@cuda.jit(device=True, inline="always")
def warp_welford(n, mean, m2):
    """Combine the 32 lanes' (count, mean, M2); every lane gets the warp's (butterfly shuffles)."""
    for off in (16, 8, 4, 2, 1):
        n_b = cuda.shfl_xor_sync(FULL, n, off)
        mean_b = cuda.shfl_xor_sync(FULL, mean, off)
        m2_b = cuda.shfl_xor_sync(FULL, m2, off)
        n, mean, m2 = welford_combine(n, mean, m2, n_b, mean_b, m2_b)
    return n, mean, m2


# --- one warp per row --------------------------------------------------------------------------


@cuda.jit
def layernorm_gelu_warp(x, gamma, beta, y, mean_out, rstd_out, eps):
    v = cuda.local.array(WARP_VALUES, float32)
    lane = cuda.threadIdx.x % 32
    row = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
    if row >= x.shape[0]:  # a whole warp leaves together: the shuffles below stay full
        return
    ncols = x.shape[1]
    cnt, mean, m2 = float32(0), float32(0), float32(0)
    for k in range(WARP_VALUES):  # the row's only read: lane, lane + 32, ... (coalesced)
        c = lane + 32 * k
        if c < ncols:
            v[k] = float32(x[row, c])
            cnt += float32(1)
            d = v[k] - mean
            mean += d / cnt
            m2 += d * (v[k] - mean)
    cnt, mean, m2 = warp_welford(cnt, mean, m2)
    rstd = float32(1) / math.sqrt(m2 / float32(ncols) + float32(eps))
    if lane == 0:
        mean_out[row] = mean
        rstd_out[row] = rstd
    for k in range(WARP_VALUES):
        c = lane + 32 * k
        if c < ncols:
            y[row, c] = gelu((v[k] - mean) * rstd * gamma[c] + beta[c])


def launch_warp_per_row(y, mean, rstd, x, gamma, beta, eps=EPS):
    if x.shape[1] > 32 * WARP_VALUES:
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: one warp per row holds at most {32 * WARP_VALUES} "
                                     "values in registers; use one block per row")
    layernorm_gelu_warp[-(-x.shape[0] // WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK](x, gamma, beta, y, mean, rstd,
                                                                                 float32(eps))


# --- one block per row -------------------------------------------------------------------------


@cuda.jit
def layernorm_gelu_block(x, gamma, beta, y, mean_out, rstd_out, eps):
    part = cuda.shared.array((3, BLOCK_WARPS), float32)  # each warp's (count, mean, M2)
    stats = cuda.shared.array(2, float32)
    v = cuda.local.array(BLOCK_VALUES, float32)
    t = cuda.threadIdx.x
    lane, warp = t % 32, t // 32
    row = cuda.blockIdx.x
    ncols = x.shape[1]
    cnt, mean, m2 = float32(0), float32(0), float32(0)
    for k in range(BLOCK_VALUES):
        c = t + BLOCK * k
        if c < ncols:
            v[k] = float32(x[row, c])
            cnt += float32(1)
            d = v[k] - mean
            mean += d / cnt
            m2 += d * (v[k] - mean)
    cnt, mean, m2 = warp_welford(cnt, mean, m2)
    if lane == 0:
        part[0, warp], part[1, warp], part[2, warp] = cnt, mean, m2
    cuda.syncthreads()
    if warp == 0:  # the first warp combines the warps' partial statistics
        if lane < BLOCK // 32:
            cnt, mean, m2 = part[0, lane], part[1, lane], part[2, lane]
        else:
            cnt, mean, m2 = float32(0), float32(0), float32(0)
        cnt, mean, m2 = warp_welford(cnt, mean, m2)
        if lane == 0:
            stats[0] = mean
            stats[1] = float32(1) / math.sqrt(m2 / float32(ncols) + float32(eps))
            mean_out[row] = stats[0]
            rstd_out[row] = stats[1]
    cuda.syncthreads()
    mean, rstd = stats[0], stats[1]
    for k in range(BLOCK_VALUES):
        c = t + BLOCK * k
        if c < ncols:
            y[row, c] = gelu((v[k] - mean) * rstd * gamma[c] + beta[c])


def launch_block_per_row(y, mean, rstd, x, gamma, beta, eps=EPS):
    if x.shape[1] > BLOCK * BLOCK_VALUES:
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: one block per row holds at most {BLOCK * BLOCK_VALUES} "
                                     "values in registers (one read of x)")
    layernorm_gelu_block[x.shape[0], BLOCK](x, gamma, beta, y, mean, rstd, float32(eps))


WARP_ROW_LIMIT = _sizes(gpu=dict(n=1024), sim=dict(n=64)).n  # the predicted crossover; 03.3's sweep measures it


def launch_layernorm_gelu(y, mean, rstd, x, gamma, beta, eps=EPS):
    """One warp per row for short rows (many rows per block, no barrier), one block per row beyond
    ``WARP_ROW_LIMIT`` (a warp alone would hold too many values per lane, and rows are few)."""
    check_arguments(y, mean, rstd, x, gamma, beta)
    if x.shape[1] <= WARP_ROW_LIMIT:
        launch_warp_per_row(y, mean, rstd, x, gamma, beta, eps)
    else:
        launch_block_per_row(y, mean, rstd, x, gamma, beta, eps)


def check_arguments(y, mean, rstd, x, gamma, beta):
    if x.ndim != 2:
        raise KernelLabArgumentError(f"x must be rows x columns, got shape {x.shape}")
    if np.dtype(x.dtype) not in (np.float32, np.float16) or y.dtype != x.dtype:
        raise KernelLabArgumentError(f"x and y must both be float32 or both float16, got {x.dtype} and {y.dtype}")
    if y.shape != x.shape or gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise KernelLabArgumentError("y must have x's shape, gamma and beta one value per column")
    if mean.shape != (x.shape[0],) or rstd.shape != (x.shape[0],):
        raise KernelLabArgumentError("mean and rstd hold one float32 per row")


def torch_unfused(torch, x, gamma, beta, eps=EPS):
    """PyTorch's LayerNorm then GELU (tanh), two kernels: the peer of the fused kernel."""
    tx, tg, tb = (torch.as_tensor(a, device="cuda") for a in (x, gamma, beta))
    tg, tb = tg.to(tx.dtype), tb.to(tx.dtype)
    F = torch.nn.functional

    def fn():
        return F.gelu(F.layer_norm(tx, (tx.shape[1],), tg, tb, eps), approximate="tanh")
    return fn


SWEEP = _sizes(gpu=dict(rows=16384, ns=[128, 256, 512, 768, 1024, 2048, 4096, 8192]),
               sim=dict(rows=6, ns=[33, 64]))
