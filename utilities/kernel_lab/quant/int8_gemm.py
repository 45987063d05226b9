"""Notebook 05.6's INT8 GEMMs on DP4A: the exact int32 product and W8A8 (float32 out, a scale per
row of A and per column of B).

The host side pads K and reads int8 rows as words with :func:`kernel_lab.quant.integer.pad_cols`
and :func:`~kernel_lab.quant.integer.as_words`. The path the notebook takes: one output per thread
(:func:`int8_gemm_dp4a`), 02.3's 2-D register blocking (:func:`dp4a_gemm_tiled_kernel`), then
module 02's warp-tiled kernel with a DP4A step and the W8A8 epilogue (:func:`dp4a_warptile_launcher`).
05.6's W4A8 lives in :mod:`.w4a8` (DP4A) and :mod:`.w4a8_mma` (tensor cores, and
``launch_w4a8_fast``, which picks between the two).
"""

from __future__ import annotations

import functools

import numpy as np

from ..environment import on_simulator
from ..validate import KernelLabArgumentError
from ..device.dp4a import dp4a
from ..reductions_gemm.sgemm import GemmTiles  # module 02's warp-tiled family: 05.6's last DP4A GEMM is one of them

from numba import cuda, float32, int32  # noqa: E402  (after kernel_lab)


# --- 05.6 integer GEMMs on DP4A ------------------------------------------------------------------
# Operands are int8 matrices with K padded to a multiple of 4 (zeros), read as int32 words:
# a32 (M, K/4) and b32 (N, K/4) -- B is stored like a weight matrix, one row per output column.
# Each kernel here is the code 05.6's learner writes (tests/test_package_copies.py holds them equal).

@cuda.jit
def int8_gemm_dp4a(a32, b32, c):
    n, m = cuda.grid(2)
    if m < c.shape[0] and n < c.shape[1]:
        acc = int32(0)
        for w in range(a32.shape[1]):
            acc = dp4a(a32[m, w], b32[n, w], acc)  # four int8 products per instruction
        c[m, n] = acc


def launch_int8_gemm(c, a32, b32):
    """05.6 exercise 1: one output per thread, a DP4A per word of K."""
    int8_gemm_dp4a[(-(-c.shape[1] // 16), -(-c.shape[0] // 16)), (16, 16)](a32, b32, c)


# 05.6 exercise 2's tiles (TY, TX, TM, TN, BKW): on a GPU 16 x 16 threads of 8 x 8 outputs (a 128 x 128
# tile of C), 8 words (32 values of K) per shared stage; the simulator's are small enough to run.
TILED_GPU = (16, 16, 8, 8, 8)
TILED_SIM = (4, 4, 2, 2, 2)


@functools.cache
def dp4a_gemm_tiled_kernel(TY, TX, TM, TN, BKW):
    """``launch(c, a32, b32)``: 02.3's 2-D register blocking on DP4A (05.6 exercise 2). A block of
    TY x TX threads computes a (TY*TM) x (TX*TN) tile of C, each thread's outputs strided by TY and
    TX (conflict-free shared reads), stepping BKW words (4 * BKW values of K) per shared-memory stage:
    TM + TN shared loads feed TM * TN DP4As."""
    BM, BN = TY * TM, TX * TN  # the block's tile of C
    BM_PAD, BN_PAD = BM + 4, BN + 4  # +4 words: the staging stores of a warp hit 32 different banks
    THREADS_T = TY * TX

    @cuda.jit
    def dp4a_gemm_tiled(a32, b32, c):
        a_s = cuda.shared.array((BKW, BM_PAD), int32)  # A's tile, transposed: a_s[word of K, row]
        b_s = cuda.shared.array((BKW, BN_PAD), int32)  # B's tile, transposed: b_s[word of K, column]
        ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
        t = ty * TX + tx
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        m_total, n_total, kw_total = c.shape[0], c.shape[1], a32.shape[1]
        acc = cuda.local.array((TM, TN), int32)
        a_r = cuda.local.array(TM, int32)
        b_r = cuda.local.array(TN, int32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = 0
        for k0 in range(0, kw_total, BKW):
            for e in range(t, BKW * BM, THREADS_T):  # BKW threads read one row's consecutive words: coalesced
                r, kw = e // BKW, e % BKW
                a_s[kw, r] = a32[row0 + r, k0 + kw] if row0 + r < m_total and k0 + kw < kw_total else 0
            for e in range(t, BKW * BN, THREADS_T):
                r, kw = e // BKW, e % BKW
                b_s[kw, r] = b32[col0 + r, k0 + kw] if col0 + r < n_total and k0 + kw < kw_total else 0
            cuda.syncthreads()
            for kw in range(BKW):
                for i in range(TM):
                    a_r[i] = a_s[kw, ty + TY * i]
                for j in range(TN):
                    b_r[j] = b_s[kw, tx + TX * j]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] = dp4a(a_r[i], b_r[j], acc[i, j])
            cuda.syncthreads()
        for i in range(TM):
            r = row0 + ty + TY * i
            for j in range(TN):
                q = col0 + tx + TX * j
                if r < m_total and q < n_total:
                    c[r, q] = acc[i, j]

    def launch(c, a32, b32):
        dp4a_gemm_tiled[(-(-c.shape[1] // BN), -(-c.shape[0] // BM)), (TX, TY)](a32, b32, c)

    launch.kernel = dp4a_gemm_tiled  # for the SASS, resource reports and offline compilation
    return launch


launch_dp4a_gemm = dp4a_gemm_tiled_kernel(*(TILED_SIM if on_simulator() else TILED_GPU))


# The same GEMM on module 02's warp-tiled, double-buffered kernel (reductions_gemm.sgemm,
# ``precision="dp4a"``): words of four int8 along K take the place of floats, a DP4A the place of an
# FFMA (reductions_gemm/sgemm.py's dp4a ``compute_k``, which 05.6's exercise 3 writes). Its B operand
# is K-major, (K/4, N) words, as module 02's B is (K, N): ``k_major_words(b32)`` makes it once.
# 05.6's default on a GPU: module 02's SGEMM winner's shape. In the simulator one warp computes a 64 x 32
# tile in 2 x 2 steps of 4 x 4 (RM = RN = 8, as on the GPU: a step whose i and j are exchanged still
# stays inside a_reg and b_reg, and the check sees where its sums land).
DP4A_TILES_GPU = GemmTiles(64, 128, 16, 64, 32, 8, 4, 128, True, precision="dp4a", max_registers=168)
DP4A_TILES_SIM = GemmTiles(64, 32, 8, 64, 32, 4, 4, 32, True, precision="dp4a")


def dp4a_warptile_configs():
    """Tile configurations for the DP4A warp-tiled GEMM (first: the default, module 02's SGEMM winner).
    Measured on an H100 at 4096^3 (scripts/probes/dp4a_warptile.py): 108.6, 110.3, 111.9, 101.1 and
    114.0 T int8 op/s in this order, 2.35-2.65x module 02's best SGEMM (43.0 TFLOP/s)."""
    if on_simulator():
        return [DP4A_TILES_SIM]
    return [DP4A_TILES_GPU,
            GemmTiles(128, 128, 16, 64, 32, 4, 4, 256, True, precision="dp4a"),
            GemmTiles(128, 64, 16, 64, 32, 8, 4, 128, True, precision="dp4a", max_registers=168),
            GemmTiles(128, 128, 8, 64, 32, 4, 4, 256, True, precision="dp4a"),
            GemmTiles(128, 64, 16, 64, 32, 8, 8, 128, True, precision="dp4a", max_registers=168)]


def k_major_words(b32):
    """(N, K/4) int32 words of B (a weight matrix, a row per output column) as (K/4, N): B's layout
    in module 02's kernels. Once per weight matrix, through the host."""
    host = b32.copy_to_host() if hasattr(b32, "copy_to_host") else np.asarray(b32)
    return cuda.to_device(np.ascontiguousarray(host.T))


@cuda.jit(device=True, forceinline=True)
def w8a8_epilogue(v, row, col, aux):
    a_scale, b_scale = aux
    return float32(v) * a_scale[row] * b_scale[col]  # two multiplications an output, in registers


def dp4a_warptile_launcher(cfg=None, *, w8a8: bool = False):
    """``launch(c, a32, b32k)``: c (M, N) int32 = A @ B exactly, a32 (M, K/4) words, b32k (K/4, N)
    words (:func:`k_major_words`); ``launch.checked(c, a32, b32)`` takes B as (N, K/4), as
    ``check_int8_gemm`` passes it (the conversion is then inside the call). ``w8a8=True``: the W8A8
    GEMM, ``launch(c, a32, b32k, a_scale, b_scale)`` with c float32 = ``a_scale[m] b_scale[n] (A @ B)``
    (05.6 exercise 4's epilogue, :func:`w8a8_epilogue`)."""
    from ..reductions_gemm import sgemm

    cfg = cfg or dp4a_warptile_configs()[0]
    run = sgemm.warptile_launcher(cfg, epilogue=w8a8_epilogue if w8a8 else None)
    out_type = np.float32 if w8a8 else np.int32

    def launch(c, a32, b32k, a_scale=None, b_scale=None):
        if a32.dtype != np.int32 or b32k.dtype != np.int32 or c.dtype != out_type:
            raise KernelLabArgumentError(f"the DP4A GEMM takes int32 words (four int8 each) and a {out_type.__name__} C")
        if a32.shape[1] != b32k.shape[0] or c.shape != (a32.shape[0], b32k.shape[1]):
            raise KernelLabArgumentError(f"shapes: a32 {a32.shape} (M, K/4), b32k {b32k.shape} (K/4, N) and "
                                         f"c {c.shape} (M, N) do not fit; B goes in K-major: k_major_words(b32)")
        if w8a8:
            if a_scale is None or b_scale is None:
                raise KernelLabArgumentError("the W8A8 GEMM needs a_scale (M,) and b_scale (N,)")
            run(c, a32, b32k, (a_scale, b_scale))
        else:
            run(c, a32, b32k)
    launch.checked = lambda c, a32, b32, *scales: launch(c, a32, k_major_words(b32), *scales)
    launch.config = cfg
    launch.kernel = run.kernel
    return launch

def sass_count(kernel, opcode: str = "IDP.4A"):
    """How many times ``opcode`` appears in the SASS of a launched kernel (None in the simulator, or
    a sentence when the SASS cannot be had: it needs nvdisasm from the CUDA toolkit)."""
    if on_simulator():
        return None
    kernel = getattr(kernel, "kernel", kernel)
    try:
        sass = kernel.inspect_sass()
    except Exception as exc:  # noqa: BLE001 - nvdisasm missing, or an old numba-cuda
        return f"no SASS here ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    if isinstance(sass, dict):
        sass = "\n".join(sass.values())
    return sass.count(opcode)
