"""05.6's W4A8 on DP4A: INT4 weights unpacked in the kernel, for decode shapes. The notebook's kernel
(``w4a8_gemm``, with ``dot8``) and the package's fast forms (several weight rows a warp, nibbles x16:
``launch_w4a8_gemm_words``, ``launch_w4a8_gemm_rows``), which the tensor-core W4A8
(:mod:`kernel_lab.quant.w4a8_mma`) falls back to. ``w4a8_mma.launch_w4a8_fast`` picks between this
file and the tensor cores: ``w4a8_mma`` imports this file, never the other way round
(tests/test_package_layers.py). ``kernels`` re-exports the names notebook 05.6 imports from it.
"""

from __future__ import annotations

import functools

# numba after kernel_lab (the parent package, imported first) chose GPU or simulator
from numba import cuda, float32, int32, uint32, uint64

from ..device.dp4a import EVEN_BYTES, ODD_BYTES, byte_perm, dp4a
from ..validate import KernelLabArgumentError
from ..vector_loads import load4
from .integer import INT4_GROUP
from .warp import warp_sum_f32

GROUP_WORDS = INT4_GROUP // 8  # 32-bit words of packed INT4 per group (8 values per word)

# --- 05.6 W4A8: INT4 weights unpacked in the kernel, for decode shapes ---------------------------

MT = 4  # activation rows per pass over a weight row (accumulators per lane)


@cuda.jit(device=True, inline="always")
def dot8(p, x0, x1):
    """The exact sum of eight products: weight word ``p`` (eight INT4, element 8w+2i in the low nibble
    of byte i) times the activation words ``x0`` (elements 0-3) and ``x1`` (4-7), with two DP4As: the
    word unpacked into two words of four sign-extended int8, the even elements and the odd ones, and
    the activations' bytes regrouped to match."""
    p = uint32(p)
    even = p & uint32(0x0F0F0F0F)
    odd = (p >> uint32(4)) & uint32(0x0F0F0F0F)
    even |= (even & uint32(0x08080808)) * uint32(30)  # 8 * 30 = 0xF0: sign bits fill each byte's top
    odd |= (odd & uint32(0x08080808)) * uint32(30)
    d = dp4a(byte_perm(x0, x1, EVEN_BYTES), int32(even), 0)
    return dp4a(byte_perm(x0, x1, ODD_BYTES), int32(odd), d)


@cuda.jit
def w4a8_gemm(a32, a_scale, w32, w_scales, out):
    """``out[m, n]``: one warp per weight row n, every activation row, MT rows per pass.

    Decoding reads every weight once and does little arithmetic with it, so the kernel is built
    for bandwidth: a lane loads four packed words (32 weights, inside one group of 128) at once,
    a 16-byte load, so that more bytes are in flight per thread; the warp's loads of a row are
    consecutive (coalesced). Passes over the activation rows after the first find the weight row
    in L1 (a block's four rows are 4 x K/2 bytes): the weights come from memory once, however
    large M. Rows whose length in words is not a multiple of 4 are not 16-byte aligned: they take
    the same loop one word at a time. Measured on an H100 (05.6): 9.6 us at M = 1 with N = K = 4096,
    30.6% of the copy roofline on the weight bytes, where a copy of the same 8.5 MiB takes 5.9 us
    (50%); on a 14336 x 4096 layer 51.3%, the copy 92.3%. scripts/probes/w4a8_variants.py: more
    loads in flight, a cheaper unpack, several weight rows per warp sharing the activation loads
    gain at most 1.09x at M = 1."""
    n = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
    lane = cuda.threadIdx.x % 32
    if n >= out.shape[1]:
        return
    words = w32.shape[1]
    vector = words % 4 == 0  # the same for every thread: no divergence
    acc = cuda.local.array(MT, float32)
    for m0 in range(0, out.shape[0], MT):
        for i in range(MT):
            acc[i] = float32(0.0)
        if vector:
            for w in range(4 * lane, words, 128):
                p0, p1, p2, p3 = load4(w32, (n, w))
                s = w_scales[n, w // GROUP_WORDS]  # four words of a 16-word group: one scale
                for i in range(MT):
                    m = m0 + i
                    if m < out.shape[0]:
                        x0, x1, x2, x3 = load4(a32, (m, 2 * w))
                        x4, x5, x6, x7 = load4(a32, (m, 2 * w + 4))
                        d = dot8(p0, x0, x1) + dot8(p1, x2, x3) + dot8(p2, x4, x5) + dot8(p3, x6, x7)
                        acc[i] += float32(d) * s
        else:
            for w in range(lane, words, 32):  # one word per lane
                p = w32[n, w]  # loaded and unpacked once for the MT activation rows
                s = w_scales[n, w // GROUP_WORDS]
                for i in range(MT):
                    m = m0 + i
                    if m < out.shape[0]:
                        acc[i] += float32(dot8(p, a32[m, 2 * w], a32[m, 2 * w + 1])) * s
        for i in range(MT):
            v = warp_sum_f32(acc[i])
            if lane == 0 and m0 + i < out.shape[0]:
                out[m0 + i, n] = v * a_scale[m0 + i]


def launch_w4a8_gemm(out, a32, a_scale, w32, w_scales):
    """a32: (M, Kp/4) int32 words of int8 activations, w32: (N, Kp/8) packed INT4 words, Kp a
    multiple of 8 (zeros beyond K), w_scales (N, ceil(Kp/128))."""
    m, n = out.shape
    if a32.shape[1] != 2 * w32.shape[1]:
        raise KernelLabArgumentError(f"a32 holds {4 * a32.shape[1]} values of K per row, w32 {8 * w32.shape[1]}: "
                                     "pad both to the same multiple of 8")
    w4a8_gemm[-(-n // 4), 128](a32, a_scale, w32, w_scales, out)


# --- W4A8, the package's fast form: several weight rows per warp, nibbles x16 -------------------
#
# The kernel above reads, per weight row, a full row of activations (K bytes, twice the row's INT4
# bytes) from L2, and spends about 29 instructions per weight word at M = 1: the sign extension, the
# int64 sums Numba makes of int32 + int32, signed 64-bit indices with their floor-division fix-ups.
# This form (scripts/probes/w4a8_variants.py, the "r4c1" variant) changes three things:
#   * a warp takes ROWS_PER_WARP weight rows and loads each chunk of activations once for all of
#     them, so the activations cross from L2 once per ROWS_PER_WARP rows;
#   * the nibbles are not sign-extended: ``p & 0xF0F0F0F0`` is each odd nibble times 16 as a signed
#     byte, ``(p << 4) & 0xF0F0F0F0`` each even one: 3 instructions per word instead of 7. The DP4A
#     sums are then 16 times the true ones (|16 d| < 2^24, exact in float32) and the scale is taken
#     / 16 (exact), so ``float32(16 d) * (s / 16)`` has the bits of ``float32(d) * s``;
#   * unsigned indices and one int32 DP4A chain per 16-byte chunk.
# Rows whose length in words is not a multiple of 4 take the one-word-per-lane path, row by row.

ROWS_PER_WARP = 4
W4A8_WARPS = 4  # warps per block: 128 threads
NIB_HI = 0xF0F0F0F0


@cuda.jit(device=True, forceinline=True)
def int4_halves_x16(p):
    """(even, odd) nibbles of word ``p`` as signed bytes times 16 (the high nibble of each byte is
    already a signed byte's top; the low one is shifted there): no sign extension."""
    p = uint32(p)  # unsigned: the masks stay in range in the simulator's NumPy integers too
    return int32((p << uint32(4)) & uint32(NIB_HI)), int32(p & uint32(NIB_HI))


@functools.cache
def _w4a8_parts(R: int, T: int = MT):
    """The two W4A8 fast forms' shared steps, for R weight rows a warp: ``place`` (the lane, the
    warp's first weight row, the output's rows and columns), ``load_trip`` (the trip's 16-byte chunk
    of each row and its group scale / 16; zeros past the last row) and ``finish`` (each of the
    R x T accumulators summed over the warp, scaled by its activation row's scale, stored)."""
    SCALE_DIV = float32(0.0625)

    @cuda.jit(device=True, forceinline=True)
    def place(out):
        lane = uint64(cuda.threadIdx.x & 31)
        n0 = (uint64(cuda.blockIdx.x) * uint64(W4A8_WARPS) + uint64(cuda.threadIdx.x >> 5)) * uint64(R)
        return lane, n0, uint64(out.shape[0]), uint64(out.shape[1])

    @cuda.jit(device=True, forceinline=True)
    def load_trip(w32, w_scales, n0, wk, ncols, p, sc):
        for r in range(R):
            n = n0 + uint64(r)
            if n < ncols:
                p[r, 0], p[r, 1], p[r, 2], p[r, 3] = load4(w32, (n, wk))
                sc[r] = w_scales[n, wk >> uint64(4)] * SCALE_DIV
            else:
                p[r, 0], p[r, 1], p[r, 2], p[r, 3] = 0, 0, 0, 0
                sc[r] = float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def finish(acc, a_scale, out, n0, m0, rows, ncols, lane):
        for r in range(R):
            n = n0 + uint64(r)
            for i in range(T):
                m = m0 + uint64(i)
                if m < rows:  # the same for the whole warp: the shuffles stay full
                    v = warp_sum_f32(acc[r, i])
                    if lane == uint64(0) and n < ncols:
                        out[m, n] = v * a_scale[m]
    return place, load_trip, finish


def _w4a8_rows_kernel(R: int):
    place, load_trip, finish = _w4a8_parts(R)
    SCALE_DIV = float32(0.0625)

    @cuda.jit
    def w4a8_gemm_rows(a32, a_scale, w32, w_scales, out):
        lane, n0, rows, ncols = place(out)
        if n0 >= ncols:
            return
        words = uint64(w32.shape[1])
        vector = (words & uint64(3)) == uint64(0)  # the same for every thread
        acc = cuda.local.array((R, MT), float32)
        p = cuda.local.array((R, 4), int32)
        sc = cuda.local.array(R, float32)
        xa = cuda.local.array(8, int32)
        m0 = uint64(0)
        while m0 < rows:
            for r in range(R):
                for i in range(MT):
                    acc[r, i] = float32(0.0)
            if vector:
                wk = uint64(4) * lane
                while wk < words:
                    load_trip(w32, w_scales, n0, wk, ncols, p, sc)  # the trip's weight loads first
                    for i in range(MT):
                        m = m0 + uint64(i)
                        if m < rows:  # this chunk's activations: loaded once for the R rows
                            xa[0], xa[1], xa[2], xa[3] = load4(a32, (m, uint64(2) * wk))
                            xa[4], xa[5], xa[6], xa[7] = load4(a32, (m, uint64(2) * wk + uint64(4)))
                            for r in range(R):
                                d = int32(0)
                                for j in range(4):
                                    e, o = int4_halves_x16(p[r, j])
                                    d = dp4a(byte_perm(xa[2 * j], xa[2 * j + 1], EVEN_BYTES), e, d)
                                    d = dp4a(byte_perm(xa[2 * j], xa[2 * j + 1], ODD_BYTES), o, d)
                                acc[r, i] += float32(d) * sc[r]
                    wk += uint64(128)
            else:
                for r in range(R):
                    n = n0 + uint64(r)
                    if n < ncols:
                        w = lane
                        while w < words:
                            q = w32[n, w]
                            s = w_scales[n, w >> uint64(4)] * SCALE_DIV
                            e, o = int4_halves_x16(q)
                            for i in range(MT):
                                m = m0 + uint64(i)
                                if m < rows:
                                    x0 = a32[m, uint64(2) * w]
                                    x1 = a32[m, uint64(2) * w + uint64(1)]
                                    d = dp4a(byte_perm(x0, x1, EVEN_BYTES), e, 0)
                                    d = dp4a(byte_perm(x0, x1, ODD_BYTES), o, d)
                                    acc[r, i] += float32(d) * s
                            w += uint64(32)
            finish(acc, a_scale, out, n0, m0, rows, ncols, lane)
            m0 += uint64(MT)
    return w4a8_gemm_rows


# For more than one activation row the loops turn: each activation row's chunk is loaded (and split
# into even and odd bytes) first, then each weight word is unpacked once and used for all MT rows,
# where the kernel above unpacks it again for every row (half its instructions at M = 4). That holds
# MT x 8 activation words in registers, so two weight rows per warp fit where four did.
# scripts/probes/w4a8_variants.py ("r2w") measured it against the rows form on an H100 at 14336 x
# 4096, with T = min(M, 4) activation rows a pass: 64.6% against 65.8% at M = 1, 61.8% against 56.3%
# at M = 2, 58.4% against 49.5% at M = 3, 55.3% against 44.3% at M = 4; at N = K = 4096 8.0 against
# 9.9 us at M = 1 and 2.4x as fast from M = 16 on.


def _w4a8_words_kernel(R: int, T: int):
    """R weight rows a warp, T activation rows a pass (T = min(M, 4): no DP4A for rows that are not there)."""
    place, load_trip, finish = _w4a8_parts(R, T)

    @cuda.jit
    def w4a8_gemm_words(a32, a_scale, w32, w_scales, out):
        lane, n0, rows, ncols = place(out)
        if n0 >= ncols:
            return
        words = uint64(w32.shape[1])
        acc = cuda.local.array((R, T), float32)
        p = cuda.local.array((R, 4), int32)
        sc = cuda.local.array(R, float32)
        xe = cuda.local.array((T, 4), int32)
        xo = cuda.local.array((T, 4), int32)
        d = cuda.local.array(T, int32)
        m0 = uint64(0)
        while m0 < rows:
            for r in range(R):
                for i in range(T):
                    acc[r, i] = float32(0.0)
            wk = uint64(4) * lane
            while wk < words:
                load_trip(w32, w_scales, n0, wk, ncols, p, sc)  # the trip's weight loads first
                for i in range(T):  # every activation row's chunk, split into even and odd bytes
                    m = min(m0 + uint64(i), rows - uint64(1))  # past the last row: row M-1 again, unused
                    x0, x1, x2, x3 = load4(a32, (m, uint64(2) * wk))
                    x4, x5, x6, x7 = load4(a32, (m, uint64(2) * wk + uint64(4)))
                    xe[i, 0], xo[i, 0] = byte_perm(x0, x1, EVEN_BYTES), byte_perm(x0, x1, ODD_BYTES)
                    xe[i, 1], xo[i, 1] = byte_perm(x2, x3, EVEN_BYTES), byte_perm(x2, x3, ODD_BYTES)
                    xe[i, 2], xo[i, 2] = byte_perm(x4, x5, EVEN_BYTES), byte_perm(x4, x5, ODD_BYTES)
                    xe[i, 3], xo[i, 3] = byte_perm(x6, x7, EVEN_BYTES), byte_perm(x6, x7, ODD_BYTES)
                for r in range(R):
                    for i in range(T):
                        d[i] = int32(0)
                    for j in range(4):
                        e, o = int4_halves_x16(p[r, j])  # once per word, for every activation row
                        for i in range(T):
                            d[i] = dp4a(xo[i, j], o, dp4a(xe[i, j], e, d[i]))
                    for i in range(T):
                        acc[r, i] += float32(d[i]) * sc[r]
                wk += uint64(128)
            finish(acc, a_scale, out, n0, m0, rows, ncols, lane)
            m0 += uint64(T)
    return w4a8_gemm_words


W4A8_WORDS_KERNELS = {}


def launch_w4a8_gemm_words(out, a32, a_scale, w32, w_scales, rows_per_warp=2):
    """The words-outer form (same arguments and bits as :func:`launch_w4a8_gemm`); rows that are
    not whole 16-byte chunks take :func:`launch_w4a8_gemm_rows`."""
    if a32.shape[1] != 2 * w32.shape[1]:
        raise KernelLabArgumentError(f"a32 holds {4 * a32.shape[1]} values of K per row, w32 {8 * w32.shape[1]}: "
                                     "pad both to the same multiple of 8")
    if w32.shape[1] % 4:
        return launch_w4a8_gemm_rows(out, a32, a_scale, w32, w_scales)
    key = (rows_per_warp, min(MT, out.shape[0]))
    if key not in W4A8_WORDS_KERNELS:
        W4A8_WORDS_KERNELS[key] = _w4a8_words_kernel(*key)
    kernel = W4A8_WORDS_KERNELS[key]
    kernel[-(-out.shape[1] // (W4A8_WARPS * rows_per_warp)), 32 * W4A8_WARPS](a32, a_scale, w32, w_scales, out)


W4A8_ROWS_KERNELS = {}


def launch_w4a8_gemm_rows(out, a32, a_scale, w32, w_scales, rows_per_warp=ROWS_PER_WARP):
    """The fast form of :func:`launch_w4a8_gemm` (same arguments, same results to the bit)."""
    if a32.shape[1] != 2 * w32.shape[1]:
        raise KernelLabArgumentError(f"a32 holds {4 * a32.shape[1]} values of K per row, w32 {8 * w32.shape[1]}: "
                                     "pad both to the same multiple of 8")
    if rows_per_warp not in W4A8_ROWS_KERNELS:
        W4A8_ROWS_KERNELS[rows_per_warp] = _w4a8_rows_kernel(rows_per_warp)
    kernel = W4A8_ROWS_KERNELS[rows_per_warp]
    kernel[-(-out.shape[1] // (W4A8_WARPS * rows_per_warp)), 32 * W4A8_WARPS](a32, a_scale, w32, w_scales, out)
