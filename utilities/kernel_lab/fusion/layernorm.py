"""Notebook 03.3: LayerNorm + GELU (tanh form), fused: one read of x, one write of y.

For each row ``r`` of ``x`` (R x N, float32 or float16)::

    mean[r] = sum(x[r]) / N,   var = sum((x[r] - mean)^2) / N   (the *population* variance: / N)
    rstd[r] = 1 / sqrt(var + eps)
    y[r]    = gelu((x[r] - mean[r]) * rstd[r] * gamma + beta)         (y has x's dtype)
    gelu(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))

``mean`` and ``rstd`` (float32) are saved for the backward pass, which needs them and would
otherwise read x again. Statistics are accumulated in float32 whatever x's format.

The package's kernel, :func:`launch_layernorm_gelu`, is the one 03.3's learner writes in exercise 6
(the same code: ``make_team_kernel``, ``gelu_fast``, ``make_team_sum``, ``make_team_row``,
``team_threads``): a team of threads sized to the row (a few lanes of a warp for short rows, a block
for long ones), four values per access, two-pass statistics, gamma and beta loaded after them (see
its section below). Exercise 7's kernel for float16 rows of 4096 and more (eight halves an access,
32 values a thread: ``X8_VALUES``, ``X8_MIN_TEAM``) has no copy here: no later notebook or benchmark
runs it (``scripts/probes/layernorm_f16_long_rows.py`` measured its equivalent, ``x8, 32/thread``).
``warp_row``, ``block_row`` and ``sum_over_warp`` are the notebook's scaffolding on the way there.

The kernels of the probes (``scripts/probes/layernorm_variants.py``, ``scripts/gpu_module03_probe.py``)
are made by one factory, :func:`row_kernel`, per row-length class (a row's values stay in registers
between the statistics and the normalisation): one warp per row (rows up to ``32 * WARP_VALUES``
long) and one block per row (rows up to ``block_row_limit(threads)``), with one value per access and
with four (``load4``/``store4``), whose lanes get their (count, mean, M2) from their registers and
combine them by Chan's rule with warp shuffles (no cancellation, as ``E[x^2] - E[x]^2`` has), or
take the two-pass statistics. The first version (Welford's update as each value arrives) is kept for
03.3's measurement of why every load comes first.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

from ..environment import on_simulator
from ..sizes import sizes as _sizes
from ..vector_loads import load4, store4
from ..validate import KernelLabArgumentError

from numba import cuda, float32, uint64  # noqa: E402  (kernel_lab chose GPU or simulator already)

_GPU = dict(warp_values=32, block=256, block_small=128, block_values=32, warps_per_block=4, team_values=16,
            row_limit=16384, x8_values=32, x8_min_team=128)
_S = _sizes(gpu=_GPU, sim=dict(warp_values=4, block=64, block_small=32, block_values=4, warps_per_block=2,
                               team_values=4, row_limit=256, x8_values=8, x8_min_team=32))
GPU = SimpleNamespace(**_GPU)  # the GPU's sizes, for a check that runs the GPU's configuration in the simulator
WARP_VALUES = _S.warp_values  # values per lane in the warp-per-row kernel: rows up to 32 * this
BLOCK = _S.block  # threads of the block-per-row kernel (the default; block_threads() picks by row length)
BLOCK_SMALL = _S.block_small
BLOCK_VALUES = _S.block_values  # values per thread there: rows up to BLOCK * this
WARPS_PER_BLOCK = _S.warps_per_block  # rows per block in the warp-per-row kernel
X8_VALUES = _S.x8_values  # 03.3's exercise 7 (float16 rows, eight halves an access): values a thread
X8_MIN_TEAM = _S.x8_min_team  # and its smallest team: rows from X8_VALUES * X8_MIN_TEAM (4096 on a GPU)
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
    """GELU's tanh form, written as ``v * sigmoid(2u)``: ``0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))``,
    the same function with one exponential and one division instead of libdevice's ``tanhf``, and
    no cancellation where ``tanh(u)`` nears -1. The exponent is capped at 80 (e^80 ~ 5.5e34, inside
    float32): the result is then v / 5.5e34, zero to float32 for any v GELU sees, and the simulator's
    ``math.exp`` (Python's, which raises on overflow where the GPU returns inf) never overflows."""
    u = float32(GELU_C) * (v + float32(0.044715) * v * v * v)
    return v / (float32(1) + math.exp(min(float32(-2) * u, float32(80))))


def _tanh_approx():
    """``tanh.approx.f32`` (MUFU.TANH, sm_75+): one instruction, relative error about 2^-11, which is
    the precision of a float16 result. Inline PTX on a GPU; ``math.tanh`` in the simulator."""
    if on_simulator():
        return cuda.jit(device=True)(lambda u: float32(math.tanh(u)))
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def tanh_approx(typingctx, u):
        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            return builder.asm(ir.FunctionType(f32, [f32]), "tanh.approx.f32 $0, $1;", "=f,f", [args[0]],
                               side_effect=False)
        return types.float32(types.float32), codegen
    return tanh_approx


tanh_approx = _tanh_approx()


@cuda.jit(device=True, inline="always")
def gelu_fast(v):
    """GELU's tanh form with the hardware's approximate tanh, for float16 results: five instructions
    where :func:`gelu` takes about nine (an exponential, a division, the cap)."""
    h = float32(0.5) * v
    return h * tanh_approx(v * (float32(GELU_C) + float32(GELU_C * 0.044715) * v * v)) + h


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


# --- the row in registers, every load first -----------------------------------------------------
#
# A row's values must stay in registers between the statistics and the outputs, so the number each
# lane holds has to be a compile-time constant (a local array indexed by a runtime value lives in
# local memory, off chip). The kernels are therefore made per row-length class, as production
# LayerNorms are templated on the hidden size: ``values`` per lane, rows up to lanes * values.
#
# Every load is issued before any arithmetic. The first version of these kernels ran Welford's
# per-element update as each value arrived (``mean += d / n``): each load then waited behind the
# division that needed the previous one, so a warp had one load in flight instead of ``values``,
# and the kernel reached a third of the copy roofline or less (``welford_per_element_*`` below keep
# that version, which 03.3 measures beside the learner's). Loads past the row's end are clamped to
# its last column rather than skipped: an unconditional load needs no branch, and the value is left
# out of the statistics and never stored.


def values_per_lane(n: int, lanes: int) -> int:
    """How many of a row's ``n`` values each of ``lanes`` threads holds (at least one)."""
    return max(1, -(-int(n) // lanes))


@functools.cache
def _lane_sum(lanes: int):
    """A device function summing a value over each group of ``lanes`` neighbouring lanes (a power of
    two up to 32); every lane of a group gets its group's sum (butterflies that never cross a group)."""
    offsets = tuple(o for o in (16, 8, 4, 2, 1) if o < lanes)

    @cuda.jit(device=True, inline="always")
    def lane_sum(s):
        for off in offsets:
            s += cuda.shfl_xor_sync(FULL, s, off)
        return s
    return lane_sum


@functools.cache
def row_kernel(per_row: int, groups: int, width: int, fast_gelu: bool = False, stats: str = "chan",
               late_affine: bool = False):
    """The kernel of every launcher below: ``per_row`` threads per row (8 or 16: several rows per warp;
    32: one warp per row, several rows per block; more: one block per row, the warps' statistics
    meeting in shared memory), each thread holding ``groups`` groups of ``width`` neighbouring values
    (1: one value per access; 4: ``load4``/``store4``, rows a multiple of 4 long). A thread's groups
    start at columns ``width * (t + per_row * j)``, so every access of a warp is coalesced.
    ``fast_gelu``: GELU by :func:`gelu_fast` (the x4 launchers choose it for float16 rows).
    ``stats``: ``"chan"``, each thread's (count, mean, M2) combined by Chan's rule (exercise 1's), or
    ``"two_pass"``: the row's sum first, then the squared deviations about the row's mean, both
    plain sums (the row is in registers, so the second pass reads no memory).
    ``late_affine``: gamma and beta are loaded when the outputs are computed, not with x (fewer
    registers held across the statistics)."""
    assert stats in ("chan", "two_pass")
    assert per_row >= 32 or stats == "two_pass", "Chan's combine here shuffles across the whole warp"
    warps, size = max(1, per_row // 32), groups * width
    sub = min(per_row, 32)  # lanes that share a row inside a warp
    GELU = gelu_fast if fast_gelu else gelu
    lane_sum = _lane_sum(sub)
    TWO_PASS = stats == "two_pass"

    # Unsigned indices: Numba tests every signed index for a negative, wrap-around value (a compare
    # and a select per axis); an unsigned one cannot be negative. Constants mixed with them must be
    # unsigned too (Numba types uint64 + int64 as float64).
    PR, W, ONE = uint64(per_row), uint64(width), uint64(1)
    SUB, SHIFT = uint64(sub), uint64(sub.bit_length() - 1)

    @cuda.jit(fastmath=True)
    def layernorm_gelu_variant(x, gamma, beta, y, mean_out, rstd_out, eps):
        part = cuda.shared.array((3, warps), float32)  # block per row: each warp's statistics
        stats_ = cuda.shared.array(2, float32)
        v = cuda.local.array(size, float32)
        g = cuda.local.array(size, float32)
        b = cuda.local.array(size, float32)
        nrows = uint64(x.shape[0])
        if per_row <= 32:
            t = uint64(cuda.threadIdx.x) & (SUB - ONE)
            row = uint64(cuda.blockIdx.x) * (uint64(cuda.blockDim.x) >> SHIFT) + (uint64(cuda.threadIdx.x) >> SHIFT)
            if per_row == 32 and row >= nrows:  # a whole warp leaves together: the shuffles below stay full
                return
            live = row < nrows  # several rows per warp: a lane past the last row computes the last row
            row = min(row, nrows - ONE)  # again (its shuffles stay full) and stores nothing
        else:
            t = uint64(cuda.threadIdx.x)
            row = uint64(cuda.blockIdx.x)
            live = True
        lane, warp = t & uint64(31), t >> uint64(5)
        ncols = x.shape[1]
        ng = uint64(ncols) // W  # whole groups (the launchers pass rows a multiple of width)
        for j in range(groups):  # every load first, nothing between them waits on memory
            q = min(t + PR * uint64(j), ng - ONE)  # past the row's end: the last group again, never used
            if width == 4:
                x0, x1, x2, x3 = load4(x, (row, W * q))
                v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3] = (float32(x0), float32(x1), float32(x2),
                                                                      float32(x3))
                if not late_affine:
                    g[4 * j], g[4 * j + 1], g[4 * j + 2], g[4 * j + 3] = load4(gamma, W * q)
                    b[4 * j], b[4 * j + 1], b[4 * j + 2], b[4 * j + 3] = load4(beta, W * q)
            else:
                v[j] = float32(x[row, q])
                if not late_affine:
                    g[j] = gamma[q]
                    b[j] = beta[q]
        if TWO_PASS:
            total = float32(0)
            for j in range(groups):
                if t + PR * uint64(j) < ng:
                    for i in range(width):
                        total += v[width * j + i]
            total = lane_sum(total)
            if per_row > 32:
                if lane == uint64(0):
                    part[0, warp] = total
                cuda.syncthreads()
                total = float32(0)
                for w in range(warps):
                    total += part[0, w]
            mean = total / float32(ncols)
            m2 = float32(0)
            for j in range(groups):  # the squared deviations about the row's mean: no cancellation
                if t + PR * uint64(j) < ng:
                    for i in range(width):
                        d = v[width * j + i] - mean
                        m2 += d * d
            m2 = lane_sum(m2)
            if per_row > 32:
                if lane == uint64(0):
                    part[1, warp] = m2
                cuda.syncthreads()
                m2 = float32(0)
                for w in range(warps):
                    m2 += part[1, w]
            rstd = float32(1) / math.sqrt(m2 / float32(ncols) + float32(eps))
            if t == uint64(0) and live:
                mean_out[row] = mean
                rstd_out[row] = rstd
        else:
            cnt, total = float32(0), float32(0)
            for j in range(groups):
                if t + PR * uint64(j) < ng:
                    cnt += float32(width)
                    for i in range(width):
                        total += v[width * j + i]
            mean = total / cnt if cnt > float32(0) else float32(0)
            m2 = float32(0)
            for j in range(groups):  # this thread's M2 about its own mean: no cancellation
                if t + PR * uint64(j) < ng:
                    for i in range(width):
                        d = v[width * j + i] - mean
                        m2 += d * d
            cnt, mean, m2 = warp_welford(cnt, mean, m2)
            if per_row == 32:
                rstd = float32(1) / math.sqrt(m2 / float32(ncols) + float32(eps))
                if lane == uint64(0):
                    mean_out[row] = mean
                    rstd_out[row] = rstd
            else:
                if lane == uint64(0):
                    part[0, warp], part[1, warp], part[2, warp] = cnt, mean, m2
                cuda.syncthreads()
                if warp == uint64(0):  # the first warp combines the warps' partial statistics
                    if lane < uint64(warps):
                        cnt, mean, m2 = part[0, lane], part[1, lane], part[2, lane]
                    else:
                        cnt, mean, m2 = float32(0), float32(0), float32(0)
                    cnt, mean, m2 = warp_welford(cnt, mean, m2)
                    if lane == uint64(0):
                        stats_[0] = mean
                        stats_[1] = float32(1) / math.sqrt(m2 / float32(ncols) + float32(eps))
                        mean_out[row] = stats_[0]
                        rstd_out[row] = stats_[1]
                cuda.syncthreads()
                mean, rstd = stats_[0], stats_[1]
        shift = -mean * rstd  # (v - mean) rstd = v rstd + shift: one FMA per value
        for j in range(groups):
            q = t + PR * uint64(j)
            if q < ng and live:
                k = width * j
                if late_affine:
                    if width == 4:
                        g[k], g[k + 1], g[k + 2], g[k + 3] = load4(gamma, W * q)
                        b[k], b[k + 1], b[k + 2], b[k + 3] = load4(beta, W * q)
                    else:
                        g[k] = gamma[q]
                        b[k] = beta[q]
                if width == 4:
                    store4(y, (row, W * q), GELU((v[k] * rstd + shift) * g[k] + b[k]),
                           GELU((v[k + 1] * rstd + shift) * g[k + 1] + b[k + 1]),
                           GELU((v[k + 2] * rstd + shift) * g[k + 2] + b[k + 2]),
                           GELU((v[k + 3] * rstd + shift) * g[k + 3] + b[k + 3]))
                else:
                    y[row, q] = GELU((v[k] * rstd + shift) * g[k] + b[k])
    return layernorm_gelu_variant


def warp_kernel(values: int):
    """One warp per row (``WARPS_PER_BLOCK`` rows per block), rows up to ``32 * values`` long."""
    return row_kernel(32, values, 1)


def block_kernel(threads: int, values: int):
    """One block of ``threads`` threads per row, rows up to ``threads * values`` long."""
    return row_kernel(threads, values, 1)


def launch_warp_per_row(y, mean, rstd, x, gamma, beta, eps=EPS):
    if x.shape[1] > 32 * WARP_VALUES:
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: one warp per row holds at most {32 * WARP_VALUES} "
                                     "values in registers; use one block per row")
    kernel = warp_kernel(values_per_lane(x.shape[1], 32))
    kernel[-(-x.shape[0] // WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK](x, gamma, beta, y, mean, rstd, float32(eps))


def block_row_limit(threads: int, values: int | None = None) -> int:
    """The longest row a block of ``threads`` holds in registers: at most ``values`` (default
    ``BLOCK_VALUES``) values per thread, and at most 8192 values per block (three arrays of them per
    thread must fit the SM's 65536 registers: 1024 threads get 64 registers each)."""
    return threads * min(BLOCK_VALUES if values is None else values, max(1, 8192 // threads))


def launch_block_per_row(y, mean, rstd, x, gamma, beta, eps=EPS, threads=BLOCK):
    if threads % 32 or not 32 <= threads <= 1024:
        raise KernelLabArgumentError(f"threads must be a multiple of 32 from 32 to 1024, got {threads}")
    if x.shape[1] > block_row_limit(threads):
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: one block of {threads} threads per row holds at most "
                                     f"{block_row_limit(threads)} values in registers (one read of x)")
    kernel = block_kernel(threads, values_per_lane(x.shape[1], threads))
    kernel[x.shape[0], threads](x, gamma, beta, y, mean, rstd, float32(eps))


# --- four values per access: 16-byte loads (8 for float16) -----------------------------------------
#
# The kernels above spend most of their instructions on addresses, not arithmetic: every x[row, c],
# gamma[c], beta[c] and y[row, c] costs Numba's 64-bit index arithmetic (and the wrap-around test
# for negative indices), so a row element takes ~70 SASS instructions of which GELU is ~10; the GPU
# then runs out of issue slots before it runs out of bandwidth (float16 and float32 rows take the
# same time). ``load4``/``store4`` move four neighbouring values per instruction and per address.
# A lane owns quads of columns (4q .. 4q + 3, q = lane, lane + 32, ...), still coalesced: a warp
# reads 512 contiguous bytes of float32 per access. Rows must be a multiple of 4 long (so that every
# row starts aligned); the launchers fall back to the one-value kernels otherwise.


def warp_kernel_x4(quads: int, fast_gelu: bool = False):
    """One warp per row, ``quads`` groups of four values per lane: rows up to ``128 * quads``."""
    return row_kernel(32, quads, 4, fast_gelu)


def block_kernel_x4(threads: int, quads: int, fast_gelu: bool = False):
    """One block of ``threads`` per row, ``quads`` groups of four values per thread."""
    return row_kernel(threads, quads, 4, fast_gelu)


def launch_warp_per_row_x4(y, mean, rstd, x, gamma, beta, eps=EPS):
    """One warp per row with four values per access; rows not a multiple of 4 take the one-value kernel."""
    if x.shape[1] % 4:
        return launch_warp_per_row(y, mean, rstd, x, gamma, beta, eps)
    if x.shape[1] > 32 * WARP_VALUES:
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: one warp per row holds at most {32 * WARP_VALUES} "
                                     "values in registers; use one block per row")
    kernel = warp_kernel_x4(values_per_lane(x.shape[1], 128), x.dtype == np.float16)
    kernel[-(-x.shape[0] // WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK](x, gamma, beta, y, mean, rstd, float32(eps))


def launch_block_per_row_x4(y, mean, rstd, x, gamma, beta, eps=EPS, threads=BLOCK):
    """One block per row with four values per access; rows not a multiple of 4 take the one-value kernel."""
    if x.shape[1] % 4:
        return launch_block_per_row(y, mean, rstd, x, gamma, beta, eps, threads)
    if threads % 32 or not 32 <= threads <= 1024:
        raise KernelLabArgumentError(f"threads must be a multiple of 32 from 32 to 1024, got {threads}")
    if x.shape[1] > block_row_limit(threads):
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: one block of {threads} threads per row holds at most "
                                     f"{block_row_limit(threads)} values in registers (one read of x)")
    kernel = block_kernel_x4(threads, values_per_lane(x.shape[1], 4 * threads), x.dtype == np.float16)
    kernel[x.shape[0], threads](x, gamma, beta, y, mean, rstd, float32(eps))


# --- the first version: Welford's update as each value arrives (measured in 03.3) ----------------


@cuda.jit
def welford_per_element_warp(x, gamma, beta, y, mean_out, rstd_out, eps):
    v = cuda.local.array(WARP_VALUES, float32)
    lane = cuda.threadIdx.x % 32
    row = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
    if row >= x.shape[0]:
        return
    ncols = x.shape[1]
    cnt, mean, m2 = float32(0), float32(0), float32(0)
    for k in range(WARP_VALUES):
        c = lane + 32 * k
        if c < ncols:
            v[k] = float32(x[row, c])
            cnt += float32(1)
            d = v[k] - mean
            mean += d / cnt  # the next load waits for this division: one load in flight per lane
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


def launch_welford_per_element(y, mean, rstd, x, gamma, beta, eps=EPS):
    """The first version of the warp-per-row kernel (loads serialised behind Welford's divisions)."""
    if x.shape[1] > 32 * WARP_VALUES:
        raise KernelLabArgumentError(f"rows of {x.shape[1]}: at most {32 * WARP_VALUES} values per row")
    welford_per_element_warp[-(-x.shape[0] // WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK](x, gamma, beta, y, mean, rstd,
                                                                                      float32(eps))


def block_threads(n: int, cfg=None) -> int:
    """Threads of the block-per-row kernels for rows of ``n`` in 03.3's sweep: the fewest that hold
    the row (at most ``BLOCK_VALUES`` values each). ``cfg``: other sizes than this machine's (``GPU``)."""
    small, big, values = (BLOCK_SMALL, BLOCK, BLOCK_VALUES) if cfg is None else (cfg.block_small, cfg.block,
                                                                                 cfg.block_values)
    return small if n <= block_row_limit(small, values) else big


# --- the package's kernel: a team of threads sized to the row (03.3's exercises 3 to 6) ------------
#
# The kernels above give a row a warp or a block whatever its length, so the work that is paid once
# per row (the reduction's shuffle rounds, a block's barriers) weighs on few values for short rows,
# and many values per thread hold many registers for long ones. Here a row gets the power of two of
# threads (8 to 1024) that leaves each about VALUES_PER_THREAD values: 8 or 16 lanes of a warp for
# rows of 128 or 256 (several rows per warp, each reduced by 3 or 4 shuffle rounds), a block for long
# rows. The statistics are taken in two passes over the registers, a sum then the squared deviations
# about the row's mean: the row is on chip, so the second pass reads no memory, it cannot cancel,
# and each pass is a plain sum (one shuffle per round, where Chan's combine moves three values and
# divides). gamma and beta are loaded after the statistics, so they hold no registers during the
# reduction. Measured in scripts/probes/layernorm_variants.py (H100 and H200, 2026-11-27), with
# row_kernel(team, ..., "two_pass", late_affine=True), of which make_team_kernel is a cleaned copy.
#
# 03.3's learner writes these functions, and the notebook's copies are the same code (held to it by
# tests/test_package_copies.py): the kernel's loads and stores of groups of four (exercise 3),
# gelu_fast (exercise 4, above), team_sum (exercise 5), team_row and team_threads (exercise 6).
# warp_row, block_row and sum_over_warp are the notebook's scaffolding before the learner's own
# team_row and team_sum exist.

VALUES_PER_THREAD = _S.team_values
ROW_LIMIT = _S.row_limit  # the longest row the package's kernel takes: 1024 threads of 16 values on a GPU
TEAM_BLOCK = 128  # threads of a block that holds several teams (teams of up to 32 threads)


@cuda.jit(device=True, inline="always")
def warp_row(nrows):
    """A team of one warp per row, several rows a block: (this lane's place in its team, the row,
    whether the row exists). A warp past the last row takes the last row again, so that every lane
    keeps taking part in the shuffles, and stores nothing."""
    tid = uint64(cuda.threadIdx.x)
    row = uint64(cuda.blockIdx.x) * (uint64(cuda.blockDim.x) >> uint64(5)) + (tid >> uint64(5))
    return tid & uint64(31), min(row, nrows - uint64(1)), row < nrows


@cuda.jit(device=True, inline="always")
def block_row(nrows):
    """A team of one block per row: (this thread's place in the block, the row, whether it exists)."""
    return uint64(cuda.threadIdx.x), uint64(cuda.blockIdx.x), True  # the launch has a block for every row


@cuda.jit(device=True, inline="always")
def sum_over_warp(s, part, k, t):
    """The sum of ``s`` over a team of one warp, in every lane (butterfly shuffles). ``part``, ``k``
    and ``t`` are there for the signature of a team of several warps (``make_team_sum``)."""
    for off in (16, 8, 4, 2, 1):
        s += cuda.shfl_xor_sync(FULL, s, off)
    return s


@functools.cache
def make_team_sum(TEAM):
    """``team_sum(s, part, k, t)``: the sum of ``s`` over a team of ``TEAM`` threads (a power of two),
    in every thread of the team. ``part``: the block's shared (2, warps) scratch, ``k``: which of the
    kernel's two sums (its own row of ``part``), ``t``: the thread's place in its team."""
    OFFSETS = tuple(o for o in (16, 8, 4, 2, 1) if o < TEAM)  # the butterfly stays inside the team
    WARPS = TEAM // 32  # a team of several warps is a whole block

    @cuda.jit(device=True, inline="always")
    def team_sum(s, part, k, t):
        for off in OFFSETS:
            s += cuda.shfl_xor_sync(FULL, s, off)
        if TEAM > 32:  # the warps' sums meet in shared memory
            if t & uint64(31) == uint64(0):
                part[k, t >> uint64(5)] = s
            cuda.syncthreads()
            s = float32(0)
            for w in range(WARPS):
                s += part[k, w]
        return s
    return team_sum


@functools.cache
def make_team_row(TEAM):
    """``team_row(nrows)``: (this thread's place in its team, its team's row, whether that row exists)
    for teams of ``TEAM`` threads (a power of two): 32 / TEAM rows a warp, or a block per row."""
    SHIFT = uint64(TEAM.bit_length() - 1)  # log2(TEAM)

    @cuda.jit(device=True, inline="always")
    def team_row(nrows):
        tid = uint64(cuda.threadIdx.x)
        if TEAM > 32:  # a team of several warps is the block: one row a block, every one of them exists
            return tid, uint64(cuda.blockIdx.x), True
        row = uint64(cuda.blockIdx.x) * (uint64(cuda.blockDim.x) >> SHIFT) + (tid >> SHIFT)
        return tid & uint64(TEAM - 1), min(row, nrows - uint64(1)), row < nrows
    return team_row


@functools.cache
def make_team_kernel(TEAM, GROUPS, WIDTH, GELU, team_row, team_sum):
    """LayerNorm + GELU with a team of ``TEAM`` threads per row, each holding ``GROUPS`` groups of
    ``WIDTH`` neighbouring values (4: ``load4``/``store4``; 1: rows not a multiple of 4 long). Thread
    ``t`` of a team owns groups ``t, t + TEAM, t + 2 TEAM, ...`` of its row: every access of a warp
    is coalesced. ``team_row`` and ``team_sum`` place the threads and add over the team."""
    WARPS, SIZE = max(1, TEAM // 32), GROUPS * WIDTH  # shapes of local and shared arrays: constants, folded here
    T, W, ONE = uint64(TEAM), uint64(WIDTH), uint64(1)

    @cuda.jit(fastmath=True)
    def layernorm_gelu_team(x, gamma, beta, y, mean_out, rstd_out, eps):
        part = cuda.shared.array((2, WARPS), float32)  # a team of several warps: each warp's sums
        v = cuda.local.array(SIZE, float32)  # this thread's share of the row, in registers
        t, row, live = team_row(uint64(x.shape[0]))
        ncols = x.shape[1]
        ng = uint64(ncols) // W  # groups in the row
        for j in range(GROUPS):  # every load first; past the row's end the last group again, never used
            q = min(t + T * uint64(j), ng - ONE)
            if WIDTH == 4:
                x0, x1, x2, x3 = load4(x, (row, W * q))
                v[4 * j], v[4 * j + 1] = float32(x0), float32(x1)
                v[4 * j + 2], v[4 * j + 3] = float32(x2), float32(x3)
            else:
                v[j] = float32(x[row, q])
        s = float32(0)
        for j in range(GROUPS):
            if t + T * uint64(j) < ng:
                for i in range(WIDTH):
                    s += v[WIDTH * j + i]
        mean = team_sum(s, part, 0, t) / float32(ncols)
        s = float32(0)
        for j in range(GROUPS):  # the squared deviations about the row's mean: nothing cancels
            if t + T * uint64(j) < ng:
                for i in range(WIDTH):
                    d = v[WIDTH * j + i] - mean
                    s += d * d
        rstd = float32(1) / math.sqrt(team_sum(s, part, 1, t) / float32(ncols) + eps)
        if t == uint64(0) and live:
            mean_out[row] = mean
            rstd_out[row] = rstd
        shift = -mean * rstd  # (v - mean) * rstd = v * rstd + shift: one FMA a value
        for j in range(GROUPS):
            q = t + T * uint64(j)
            if q < ng and live:
                k = WIDTH * j
                if WIDTH == 4:  # gamma and beta only now: they hold no registers through the sums
                    g0, g1, g2, g3 = load4(gamma, W * q)
                    b0, b1, b2, b3 = load4(beta, W * q)
                    store4(y, (row, W * q), GELU((v[k] * rstd + shift) * g0 + b0),
                           GELU((v[k + 1] * rstd + shift) * g1 + b1), GELU((v[k + 2] * rstd + shift) * g2 + b2),
                           GELU((v[k + 3] * rstd + shift) * g3 + b3))
                else:
                    y[row, q] = GELU((v[k] * rstd + shift) * gamma[q] + beta[q])
    return layernorm_gelu_team


def team_threads(n, values=VALUES_PER_THREAD):
    """Threads per row of ``n`` values: the power of two from 8 to 1024 nearest above n / values."""
    want = max(1, -(-n // values))
    return min(1024, max(8, 1 << (want - 1).bit_length()))


def team_launch(kernel, team, y, mean, rstd, x, gamma, beta, eps=EPS):
    """Launch a team kernel: one block per row for a team of several warps; otherwise blocks of
    ``TEAM_BLOCK`` threads, ``TEAM_BLOCK // team`` rows each."""
    if team > 32:
        kernel[x.shape[0], team](x, gamma, beta, y, mean, rstd, float32(eps))
    else:
        kernel[-(-x.shape[0] // (TEAM_BLOCK // team)), TEAM_BLOCK](x, gamma, beta, y, mean, rstd, float32(eps))


def launch_team_per_row(y, mean, rstd, x, gamma, beta, eps=EPS, values=VALUES_PER_THREAD, limit=ROW_LIMIT):
    """The package's kernel (see above); rows not a multiple of 4 long take one value per access.
    ``values``, ``limit``: values per thread that size the team and the longest row (a check in the
    simulator passes the GPU's: ``GPU.team_values``, ``GPU.row_limit``)."""
    n = x.shape[1]
    if n > limit:
        raise KernelLabArgumentError(f"rows of {n}: the kernel holds a row on chip, at most {limit} values")
    team = team_threads(n, values)
    width = 4 if n % 4 == 0 else 1
    gelu_ = gelu_fast if width == 4 and x.dtype == np.float16 else gelu
    kernel = make_team_kernel(team, values_per_lane(n, width * team), width, gelu_, make_team_row(team),
                              make_team_sum(team))
    team_launch(kernel, team, y, mean, rstd, x, gamma, beta, eps)


def launch_layernorm_gelu(y, mean, rstd, x, gamma, beta, eps=EPS):
    """LayerNorm + GELU with the package's kernel, after checking the arguments."""
    check_arguments(y, mean, rstd, x, gamma, beta)
    launch_team_per_row(y, mean, rstd, x, gamma, beta, eps)


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


# The sweep moves the same bytes at every row length (2^25 values: 256 MiB of float32 traffic), so
# that a short row is not also a small problem: at 16384 rows of 128 the whole job is 8 MiB, a few
# microseconds, and launch and tail effects would be measured instead of the kernel.
SWEEP = _sizes(gpu=dict(elements=1 << 25, ns=[128, 256, 512, 768, 1024, 2048, 4096, 8192]),
               sim=dict(elements=6 * 64, ns=[33, 64]))


def sweep_rows(n: int) -> int:
    """Rows of length ``n`` in the sweep's fixed number of values."""
    return max(1, SWEEP.elements // n)


def sweep_arrays(n: int, dtype, rng):
    """The device arrays of one size of the sweep, as the notebook draws them: ``(x, gamma, beta, y,
    mean, rstd)``, x of mean 1 and spread 2 in ``dtype``, gamma about 1, beta about 0 (float32)."""
    from numba import cuda

    rows = sweep_rows(n)
    x = cuda.to_device((rng.standard_normal((rows, n)) * 2 + 1).astype(dtype))
    gamma = cuda.to_device((1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
    beta = cuda.to_device((0.1 * rng.standard_normal(n)).astype(np.float32))
    y = cuda.device_array((rows, n), dtype)
    return x, gamma, beta, y, cuda.device_array(rows, np.float32), cuda.device_array(rows, np.float32)
