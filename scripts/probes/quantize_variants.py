#!/usr/bin/env python3
"""Probe (issue 14): which INT8 / INT4 quantize and dequantize kernels reach 85% of the copy roofline?

    PYTHONPATH=utilities python3 scripts/probes/quantize_variants.py          # on a GPU (a few minutes)
    PYTHONPATH=utilities python3 scripts/probes/quantize_variants.py --sim    # simulator: checks only
    ... --only q8,dq8     run some sections only (q8, dq8, amax, q4, dq4)

Five sections, each the notebooks' kernel (the package's: ``kernel_lab.quant.int8`` as ``I8``) as the
baseline, timed twice to show the noise, then candidates. Every variant is first checked bit-exactly
against the NumPy reference through the notebooks' own checks (``kernel_lab.checks.quantization``:
ties, zeros, clipping, sizes that are not multiples of 4 or 16, odd rows); a variant that fails is
not timed. Then it is timed with ``kernel_lab.benchmark`` (median of repeats, L2 flushed), ``bytes``
the fewest bytes the operation moves, at the notebooks' sizes:

    q8    int8 quantize, scale from a given absmax    05.1, n = 2^26 float32      5n bytes
    dq8   int8 dequantize                             05.1                        5n bytes
    amax  absmax + quantize (05.1's launch_quantize)  05.1                        9n bytes (absmax alone: 4n)
    q4    int4 quantize, groups of 128                05.2, 8192 x 8192 float32   4n + n/2 + 4 n/128
    dq4   int4 dequantize                             05.2                        the same

The diagnosis the candidates test: a loop that does load -> compute -> store per element cannot have
its next load moved above the previous store (Numba arrays may alias), so each thread keeps one
load in flight, and a persistent grid (8 blocks of 256 per SM) then has about 8 KB in flight per SM
where the copy roofline needs some 17 KB (Little's law: ~3.3 TB/s x ~700 ns over 132 SMs). The cures
tried: 16-byte loads (``load4``), several chunks per thread loaded before any store (``tile4``,
``pers u4``, ``g4``, ``pers prefetch``), and grids of many short blocks instead of a persistent
grid (``flat``; ``flat x1`` is the notebook's body without the loop, to separate the two effects).
``fadd`` variants also test whether the quantizers' arithmetic matters: Numba's ``round()`` on a
float32 converts to float64 and then to int64 (two quarter-rate conversions per value); they round
with a float32 addition instead (``I8.round_clamp_fadd``), bit-exact. Persistent variants size their
grid from the compiled kernel's occupancy (``resident_blocks``): above 32 registers, 8 blocks of
256 per SM do not fit. dq8's ``pers x4`` is the package's former ``int8_dequantize_x4`` (persistent,
a word per trip) with its sign extension by masks: the former's ``(p << 24) >> 24`` was computed in
int64 by Numba and sign-extended nothing on a GPU (the simulator's NumPy int32 hid it).

q4's ``2d`` and ``sub`` variants test the instruction count: the sm_90 SASS of ``g1 u16 fadd`` issues
322 instructions per lane per group of 4 values on its hot path (212 integer: two signed 64-bit
``gi // groups``, 64-bit indices with wrap-around tests; 5 IEEE divisions with their branches). A 2-D
grid (row = blockIdx.y: no division), uint64 indices and ``v * (1/s)`` with an exact fallback take it
to 150 (``2d g1 rcp``); a group on 16 or 8 lanes (8 or 16 values per lane) to 211 per 8 values
(``sub16``) and 340 per 16 (``sub8``): 80 -> 21 instructions per value. The reciprocal's exactness
argument is in ``q4_code_rcp``.

One line per variant; with $OUT set, also $OUT/quantize_variants.json.

Measured on an H200 (2026-11-26), fraction of the copy roofline: q8 base 51.6%, flat x4 74.4%,
tile4 92.9%, tile4 fadd 100.8%, x16 93.3%; dq8 base 55.0%, flat x4 91.4%, tile4 90.2% (the package's
old ``int8_dequantize_x4`` failed its check: its shifts ran in int64, since fixed); amax + quantize
base 61.5%, absmax x4 + tile4 93.3%, + tile4 fadd 97.5% (absmax x4 alone 92.8%); q4 base 29.6%, best
g4 u16 fadd 39.0%; dq4 base 41.8%, h4 tile4 88.3%. On an H100 (2026-11-27): q4 base 41.7%, g4 u16 fadd
55.4% (then the package's ``int4_quantize_groups4``, since replaced), 2d g1 89.2%, 2d g1 rcp 89.5%,
2d g2 rcp 100.0%, sub16 rcp 100.8%: the 64-bit ``gi // groups`` was the quantizer's bottleneck;
``2d g1 int`` (the package's ``int4_quantize_rows_x4``: the 2-D grid with Numba's signed integers, so
every index is tested for wrap-around) 73.3%.

The winners are now the package's kernels and this probe runs those, not copies: q8 ``tile4`` and
``tile4 fadd`` are ``I8.int8_quantize_x4`` and ``I8.int8_quantize_x4_fadd``, dq8 ``tile4`` is
``I8.int8_dequantize_x4``, amax's ``absmax x4`` is ``kernel_lab.reductions_gemm.scans.absmax_x4``
(launched by ``absmax_vectorized``), q4 ``2d g1 int`` is ``int4_quantize_rows_x4`` and dq4 ``h4 tile4`` is
``I4.int4_dequantize_tile4``; the other rows are the experiments that lost or are still open.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402
from numba import cuda, float32, int8, int32, uint8, uint16, uint64  # noqa: E402  (after kernel_lab)

from kernel_lab.quant import int8 as I8  # noqa: E402
from kernel_lab.quant import warp as qwarp  # noqa: E402

from kernel_lab.quant import int4 as I4  # noqa: E402
from kernel_lab.quant.integer import INT4_GROUP  # noqa: E402
from kernel_lab.reductions_gemm.scans import (THREADS, absmax_grid_stride, absmax_persistent,  # noqa: E402
                                              absmax_vectorized, absmax_x4, persistent_blocks)
from kernel_lab.bitcast import float_bits  # noqa: E402
from kernel_lab.vector_loads import load4, store4  # noqa: E402

# ================================================================================================
# Small pieces shared by the variants


@cuda.jit(device=True, inline="always")
def scale_of(amax):
    a = amax[0]
    return a / float32(127.0) if a > float32(0.0) else float32(1.0)


@cuda.jit(device=True, inline="always")
def pack_values(v0, v1, v2, v3, s):
    """Four values' INT8 codes in one int32 word (``I8.pack4`` of ``I8.code8``)."""
    return I8.pack4(I8.code8(v0, s), I8.code8(v1, s), I8.code8(v2, s), I8.code8(v3, s))


def blocks(n, per_block):
    return max(1, -(-n // per_block))


def resident_blocks(kernel, n, threads=THREADS):
    """A persistent grid for ``kernel``: as many blocks of ``threads`` as fit on the GPU at once,
    from the compiled kernel's occupancy (registers), never more than ``n`` elements need.
    ``persistent_blocks`` assumes 8 blocks of 256 per SM, which holds only up to 32 registers
    per thread: a kernel with more would run its grid in two uneven waves. Before the first
    compilation (and in the simulator) it falls back to ``persistent_blocks``."""
    fallback = persistent_blocks(n, threads)
    overloads = getattr(kernel, "overloads", None)
    if not overloads:
        return fallback
    try:
        fit = min(k.max_cooperative_grid_blocks(threads) for k in overloads.values())
    except Exception:  # noqa: BLE001 - the simulator
        return fallback
    return max(1, min(-(-n // threads), fit))


# ================================================================================================
# 1. INT8 quantize with a given absmax (05.1 exercise 1)
#    All variants: x (n,) float32, amax (1,), q (n,) int8, q32 = the int32 view of q's whole words.
#    The n % 4 (or n % 16) tail values are done one by one by the grid's first threads.


@cuda.jit
def q8_flat_x1(x, amax, q, scale_out):
    """The notebook's body without the loop: one element per thread, n threads (many short blocks)."""
    s = scale_of(amax)
    i = cuda.grid(1)
    if i == 0:
        scale_out[0] = s
    if i < x.size:
        q[i] = int8(I8.code8(x[i], s))


@cuda.jit
def q8_flat_x4(x, amax, q, q32, scale_out):
    """One 16-byte load of x and one 4-byte store of four codes per thread; a grid of n / 4 threads."""
    s = scale_of(amax)
    w = cuda.grid(1)
    if w == 0:
        scale_out[0] = s
    if w < q32.size:
        v0, v1, v2, v3 = load4(x, 4 * w)
        q32[w] = pack_values(v0, v1, v2, v3, s)
    t = 4 * q32.size + w
    if t < x.size:
        q[t] = int8(I8.code8(x[t], s))


@cuda.jit
def q8_pers_u4(x, amax, q, q32, scale_out):
    """The persistent grid-stride loop kept, but four 16-byte loads (a grid-width apart) per trip,
    all issued before the trip's first store."""
    s = scale_of(amax)
    w = cuda.grid(1)
    g = cuda.gridsize(1)
    if w == 0:
        scale_out[0] = s
    nw = q32.size
    t = 4 * nw + w
    while w + 3 * g < nw:
        a0, a1, a2, a3 = load4(x, 4 * w)
        b0, b1, b2, b3 = load4(x, 4 * (w + g))
        c0, c1, c2, c3 = load4(x, 4 * (w + 2 * g))
        d0, d1, d2, d3 = load4(x, 4 * (w + 3 * g))
        q32[w] = pack_values(a0, a1, a2, a3, s)
        q32[w + g] = pack_values(b0, b1, b2, b3, s)
        q32[w + 2 * g] = pack_values(c0, c1, c2, c3, s)
        q32[w + 3 * g] = pack_values(d0, d1, d2, d3, s)
        w += 4 * g
    while w < nw:
        v0, v1, v2, v3 = load4(x, 4 * w)
        q32[w] = pack_values(v0, v1, v2, v3, s)
        w += g
    if t < x.size:
        q[t] = int8(I8.code8(x[t], s))


@cuda.jit
def q8_x16(x, amax, q, q32, scale_out):
    """Sixteen consecutive values per thread: four 16-byte loads, one 16-byte store of 16 codes (as
    llm.c's Packed128 kernels do); a grid of n / 16 threads."""
    s = scale_of(amax)
    j = cuda.grid(1)
    if j == 0:
        scale_out[0] = s
    n16 = q32.size // 4
    if j < n16:
        a0, a1, a2, a3 = load4(x, 16 * j)
        b0, b1, b2, b3 = load4(x, 16 * j + 4)
        c0, c1, c2, c3 = load4(x, 16 * j + 8)
        d0, d1, d2, d3 = load4(x, 16 * j + 12)
        store4(q32, 4 * j, pack_values(a0, a1, a2, a3, s), pack_values(b0, b1, b2, b3, s),
               pack_values(c0, c1, c2, c3, s), pack_values(d0, d1, d2, d3, s))
    t = 16 * n16 + j
    if t < x.size:
        q[t] = int8(I8.code8(x[t], s))


def q8_base_launch(q, scale, x, amax):
    I8.int8_quantize[persistent_blocks(x.size), THREADS](x, amax, q, scale)


def q8_flat_x1_launch(q, scale, x, amax):
    q8_flat_x1[blocks(x.size, THREADS), THREADS](x, amax, q, scale)


def q8_flat_x4_launch(q, scale, x, amax):
    q8_flat_x4[blocks(max(x.size // 4, 3), THREADS), THREADS](x, amax, q, I8.int8_words(q), scale)


def q8_tile4_launch(q, scale, x, amax):
    I8.launch_int8_quantize_x4(q, scale, x, amax)


def q8_tile4_fadd_launch(q, scale, x, amax):
    I8.launch_int8_quantize_x4(q, scale, x, amax, fadd=True)


def q8_pers_u4_launch(q, scale, x, amax):
    q8_pers_u4[resident_blocks(q8_pers_u4, x.size // 4), THREADS](x, amax, q, I8.int8_words(q), scale)


def q8_x16_launch(q, scale, x, amax):
    q8_x16[blocks(max(x.size // 16, 15), THREADS), THREADS](x, amax, q, I8.int8_words(q), scale)


# ================================================================================================
# 2. INT8 dequantize (05.1 exercise 2): q (n,) int8 and q32 its words, scale (1,), out (n,) float32


@cuda.jit(device=True, inline="always")
def store_word(out, i, p, s):
    store4(out, i, I8.byte_value(p, 0) * s, I8.byte_value(p, 1) * s, I8.byte_value(p, 2) * s, I8.byte_value(p, 3) * s)


@cuda.jit
def dq8_flat_x1(q, scale, out):
    """The notebook's body without the loop: one element per thread, n threads."""
    i = cuda.grid(1)
    if i < q.size:
        out[i] = float32(q[i]) * scale[0]


@cuda.jit
def dq8_pers_x4(q, q32, scale, out):
    """The package's former ``int8_dequantize_x4`` (persistent, a word per trip, a 16-byte store)
    with its sign extension done by masks (``byte_value``), plus the n % 4 tail."""
    s = scale[0]
    w = cuda.grid(1)
    t = 4 * q32.size + w
    while w < q32.size:
        store_word(out, 4 * w, q32[w], s)
        w += cuda.gridsize(1)
    if t < q.size:
        out[t] = float32(q[t]) * s


@cuda.jit
def dq8_flat_x4(q, q32, scale, out):
    """One 4-byte load of four codes and one 16-byte store per thread; n / 4 threads."""
    s = scale[0]
    w = cuda.grid(1)
    if w < q32.size:
        store_word(out, 4 * w, q32[w], s)
    t = 4 * q32.size + w
    if t < q.size:
        out[t] = float32(q[t]) * s


@cuda.jit
def dq8_pers_u4(q, q32, scale, out):
    """Persistent grid-stride, four words (a grid-width apart) loaded per trip before any store."""
    s = scale[0]
    w = cuda.grid(1)
    g = cuda.gridsize(1)
    nw = q32.size
    t = 4 * nw + w
    while w + 3 * g < nw:
        p0 = q32[w]
        p1 = q32[w + g]
        p2 = q32[w + 2 * g]
        p3 = q32[w + 3 * g]
        store_word(out, 4 * w, p0, s)
        store_word(out, 4 * (w + g), p1, s)
        store_word(out, 4 * (w + 2 * g), p2, s)
        store_word(out, 4 * (w + 3 * g), p3, s)
        w += 4 * g
    while w < nw:
        store_word(out, 4 * w, q32[w], s)
        w += g
    if t < q.size:
        out[t] = float32(q[t]) * s


@cuda.jit
def dq8_x16(q, q32, scale, out):
    """One 16-byte load of sixteen codes per thread, four 16-byte stores; n / 16 threads."""
    s = scale[0]
    j = cuda.grid(1)
    n16 = q32.size // 4
    if j < n16:
        p0, p1, p2, p3 = load4(q32, 4 * j)
        store_word(out, 16 * j, p0, s)
        store_word(out, 16 * j + 4, p1, s)
        store_word(out, 16 * j + 8, p2, s)
        store_word(out, 16 * j + 12, p3, s)
    t = 16 * n16 + j
    if t < q.size:
        out[t] = float32(q[t]) * s


def dq8_base_launch(out, q, scale):
    I8.launch_int8_dequantize(out, q, scale)


def dq8_flat_x1_launch(out, q, scale):
    dq8_flat_x1[blocks(q.size, THREADS), THREADS](q, scale, out)


def dq8_pers_x4_launch(out, q, scale):
    dq8_pers_x4[persistent_blocks(q.size // 4), THREADS](q, I8.int8_words(q), scale, out)


def dq8_flat_x4_launch(out, q, scale):
    dq8_flat_x4[blocks(max(q.size // 4, 3), THREADS), THREADS](q, I8.int8_words(q), scale, out)


def dq8_tile4_launch(out, q, scale):
    I8.launch_int8_dequantize_x4(out, q, scale)


def dq8_pers_u4_launch(out, q, scale):
    dq8_pers_u4[resident_blocks(dq8_pers_u4, q.size // 4), THREADS](q, I8.int8_words(q), scale, out)


def dq8_x16_launch(out, q, scale):
    dq8_x16[blocks(max(q.size // 16, 15), THREADS), THREADS](q, I8.int8_words(q), scale, out)


# ================================================================================================
# 3. absmax + quantize (05.1's launch_quantize): module 02's absmax, then a quantizer


ABSMAX = {"grid-stride": absmax_grid_stride, "x4": absmax_vectorized}


def absmax_quantize(absmax, quantize):
    buf = {}

    def launch(q, scale, x, amax=None):
        if amax is None:  # the check's call: a buffer of our own, made once
            amax = buf.setdefault("amax", cuda.device_array(1, np.float32))
        ABSMAX[absmax](amax.view(np.uint32), x.view(np.uint32))
        quantize(q, scale, x, amax)
    return launch


# ================================================================================================
# 4. INT4 quantize, groups of 128 (05.2 exercise 1): x (rows, cols) float32, packed (rows,
#    ceil(cols/2)) uint8 and packed16 its uint16 view (a dummy when cols % 4), scales.
#    The vector path (16-byte loads) needs rows that start 16-byte aligned: cols % 4 == 0; other
#    widths take the notebook's scalar loads (the choice is the same for every thread).


@cuda.jit(device=True, inline="always")
def q4_group(v0, v1, v2, v3, lane, r, g, c0, cols, packed, packed16, scales, vec, wide, fadd):
    """The warp's group: absmax by shuffles, lane 0 stores the scale, the lane's four codes packed
    into two bytes (one uint16 store when ``wide`` and the row is 16-byte aligned)."""
    m = qwarp.warp_max_f32(max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3))))
    s = m / float32(7.0) if m > float32(0.0) else float32(1.0)
    if lane == 0:
        scales[r, g] = s
    if fadd:
        q0 = I8.round_clamp_fadd(v0 / s, float32(-8.0), float32(7.0))
        q1 = I8.round_clamp_fadd(v1 / s, float32(-8.0), float32(7.0))
        q2 = I8.round_clamp_fadd(v2 / s, float32(-8.0), float32(7.0))
        q3 = I8.round_clamp_fadd(v3 / s, float32(-8.0), float32(7.0))
    else:
        q0 = int32(min(max(round(v0 / s), -8), 7))
        q1 = int32(min(max(round(v1 / s), -8), 7))
        q2 = int32(min(max(round(v2 / s), -8), 7))
        q3 = int32(min(max(round(v3 / s), -8), 7))
    lo = (q0 & 0xF) | ((q1 & 0xF) << 4)
    hi = (q2 & 0xF) | ((q3 & 0xF) << 4)
    if wide and vec:
        if c0 < cols:
            packed16[r, c0 // 4] = uint16(lo | (hi << 8))
    else:
        if c0 < cols:  # an odd row's last byte holds one value: written, its high nibble the 0 loaded
            packed[r, c0 // 2] = uint8(lo)
        if c0 + 2 < cols:
            packed[r, c0 // 2 + 1] = uint8(hi)


@cuda.jit(device=True)
def load_quad(x, r, c0, vec):
    """``x[r, c0 .. c0 + 3]``, 0 past the end of the row: one 16-byte load when ``vec`` (the package's
    former ``int4_load_quad``; notebook 05.2 now calls ``load4`` directly on 16-byte rows)."""
    cols = x.shape[1]
    z = float32(0.0)
    if vec:
        if c0 < cols:
            return load4(x, (r, c0))
        return z, z, z, z
    v0 = x[r, c0] if c0 < cols else z
    v1 = x[r, c0 + 1] if c0 + 1 < cols else z
    v2 = x[r, c0 + 2] if c0 + 2 < cols else z
    v3 = x[r, c0 + 3] if c0 + 3 < cols else z
    return v0, v1, v2, v3


def make_q4(groups_per_warp: int, wide: bool, fadd: bool = False):
    """A warp per ``groups_per_warp`` consecutive groups (of the flattened rows x groups), all their
    loads issued before the first group's shuffles and stores."""
    G = groups_per_warp

    @cuda.jit
    def q4(x, packed, packed16, scales):
        warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
        lane = cuda.threadIdx.x % 32
        cols = x.shape[1]
        groups = (cols + INT4_GROUP - 1) // INT4_GROUP
        total = x.shape[0] * groups
        first = warp * G
        if first >= total:  # whole warps leave together
            return
        vec = cols % 4 == 0
        v = cuda.local.array((G, 4), float32)
        for k in range(G):
            gi = first + k
            r = gi // groups
            c0 = (gi - r * groups) * INT4_GROUP + 4 * lane
            if gi < total:
                v[k, 0], v[k, 1], v[k, 2], v[k, 3] = load_quad(x, r, c0, vec)
        for k in range(G):
            gi = first + k
            if gi < total:  # the same for the whole warp
                r = gi // groups
                g = gi - r * groups
                c0 = g * INT4_GROUP + 4 * lane
                q4_group(v[k, 0], v[k, 1], v[k, 2], v[k, 3], lane, r, g, c0, cols, packed, packed16, scales, vec, wide,
                         fadd)

    def launch(packed, scales, x):
        groups = -(-x.shape[1] // INT4_GROUP)
        warps = -(-x.shape[0] * groups // G)
        q4[blocks(warps, 4), 128](x, packed, I4.packed16_of(packed, x.shape[1]), scales)

    launch.kernel = q4
    return launch


@cuda.jit
def q4_pers_prefetch(x, packed, packed16, scales):
    """A persistent grid of warps, each looping over groups a grid apart, with the next group's
    16-byte load issued before this group's shuffles and stores (two groups in flight per warp)."""
    warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
    nwarps = (cuda.gridDim.x * cuda.blockDim.x) // 32
    lane = cuda.threadIdx.x % 32
    cols = x.shape[1]
    groups = (cols + INT4_GROUP - 1) // INT4_GROUP
    total = x.shape[0] * groups
    vec = cols % 4 == 0
    gi = warp
    r = gi // groups
    c0 = (gi - r * groups) * INT4_GROUP + 4 * lane
    z = float32(0.0)
    v0, v1, v2, v3 = z, z, z, z
    if gi < total:
        v0, v1, v2, v3 = load_quad(x, r, c0, vec)
    while gi < total:  # warp-uniform
        nxt = gi + nwarps
        rn = nxt // groups
        cn = (nxt - rn * groups) * INT4_GROUP + 4 * lane
        n0, n1, n2, n3 = z, z, z, z
        if nxt < total:
            n0, n1, n2, n3 = load_quad(x, rn, cn, vec)
        q4_group(v0, v1, v2, v3, lane, r, gi - r * groups, c0, cols, packed, packed16, scales, vec, True, False)
        v0, v1, v2, v3 = n0, n1, n2, n3
        gi, r, c0 = nxt, rn, cn


def q4_pers_prefetch_launch(packed, scales, x):
    warps = x.shape[0] * -(-x.shape[1] // INT4_GROUP)
    q4_pers_prefetch[resident_blocks(q4_pers_prefetch, 32 * warps), THREADS](
        x, packed, I4.packed16_of(packed, x.shape[1]), scales)


q4_base_launch = I4.launch_int4_quantize
q4_g1_bytes = make_q4(1, False)
q4_g1_u16 = make_q4(1, True)
q4_g4_u16 = make_q4(4, True)
q4_g1_u16_fadd = make_q4(1, True, True)



# --- q4, instruction-lean forms (issue: the g1/g4 kernels issue ~80 SASS instructions per value) ---
# The SASS of ``g1 u16 fadd`` (sm_90): two signed 64-bit ``gi // groups`` (Python floor division:
# a ~60-instruction subroutine call plus sign fix-ups), 64-bit index arithmetic with Numba's
# negative-index wrap-around test (compare + select) on every ``x[r, c]`` / ``packed[r, j]``, and
# one IEEE division per value (MUFU.RCP, FCHK, 5 FFMA and a branch around the slow path). The
# ``2d`` forms remove them:
#   * a 2-D grid (groups of a row along x, rows along y): row and group come from blockIdx, no
#     division at all (rows <= 65535, the grid's y limit);
#   * unsigned (uint64) indices: Numba emits no wrap-around test for them (mixing uint64 with a
#     signed int64 would make Numba compute in float64, so every constant is a uint64 too);
#   * ``rcp``: the division v / s replaced by a product with y = 1 / s (one IEEE division per lane
#     per group), kept bit-exact by a test that falls back to the division (see ``q4_code_rcp``).

Q4_WPB = 8  # warps per block of the 2-D forms (256 threads)
NEAR_HALF = float32(0.5 - 2.0 ** -18)  # |v*y - rint(v*y)| at least this: too close to a rounding tie to trust
RCP_LO, RCP_HI = float32(2.0 ** -96), float32(2.0 ** 120)  # group absmax range where y = 1/s is normal and finite


@cuda.jit(device=True, inline="always")
def q4_code_rcp(v, y):
    """``(code, doubtful)``: the INT4 code of ``v`` from ``q = v * y`` (y = RN(1/s)), and whether
    ``q`` is within 2^-18 of a half-integer, where it might round differently from ``v / s``.

    Why it is bit-exact when not doubtful (s normal, |v| <= absmax so |v / s| <= 7 (1 + 2^-24)):
    |RN(1/s) - 1/s| <= 2^-24 / s, so |v y - v/s| <= 8 * 2^-24 = 2^-21; RN(v y) adds at most half
    an ulp of a value below 8 (2^-22), and Q = RN(v / s), what the reference rounds, is within 2^-22
    of v / s: |q - Q| < 2^-19. A q farther than 2^-18 from every half-integer has Q on the same side
    of each of them (and equal to none), so rint(Q) = rint(q). Clamping q to [-8, 7] first changes
    nothing: the bounds are integers, and a q beyond them has Q within 2^-19 of the same side. The
    rounding is the FADD of ``round_clamp_fadd``; ``d = qc - rint(qc)`` is exact (small values)."""
    qc = min(max(v * y, float32(-8.0)), float32(7.0))
    t = qc + float32(12582912.0)
    d = qc - (t - float32(12582912.0))
    return int32(float_bits(t)) - int32(0x4B400000), abs(d) >= NEAR_HALF


@cuda.jit(device=True, inline="always")
def q4_codes(v0, v1, v2, v3, s, m, rcp):
    """The four codes of a lane: by IEEE division (``rcp`` False), or by the reciprocal with the
    division as the fallback for doubtful values (rare: within 2^-18 of a tie; the notebook's exact
    ties, scale 1, take it) and for groups whose absmax makes 1/s subnormal or infinite."""
    lo8, hi7 = float32(-8.0), float32(7.0)
    if rcp:
        y = float32(1.0) / s
        q0, b0 = q4_code_rcp(v0, y)
        q1, b1 = q4_code_rcp(v1, y)
        q2, b2 = q4_code_rcp(v2, y)
        q3, b3 = q4_code_rcp(v3, y)
        if b0 or b1 or b2 or b3 or not (m >= RCP_LO and m <= RCP_HI):
            q0 = I8.round_clamp_fadd(v0 / s, lo8, hi7)
            q1 = I8.round_clamp_fadd(v1 / s, lo8, hi7)
            q2 = I8.round_clamp_fadd(v2 / s, lo8, hi7)
            q3 = I8.round_clamp_fadd(v3 / s, lo8, hi7)
    else:
        q0 = I8.round_clamp_fadd(v0 / s, lo8, hi7)
        q1 = I8.round_clamp_fadd(v1 / s, lo8, hi7)
        q2 = I8.round_clamp_fadd(v2 / s, lo8, hi7)
        q3 = I8.round_clamp_fadd(v3 / s, lo8, hi7)
    return q0, q1, q2, q3


@cuda.jit(device=True, inline="always")
def q4_load_u(x, r, c0, cols, vec):
    """``x[r, c0 .. c0 + 3]`` (uint64 indices), 0 past the row's end; one 16-byte load when ``vec``."""
    z = float32(0.0)
    if vec:
        if c0 < cols:
            return load4(x, (r, c0))
        return z, z, z, z
    one = uint64(1)
    v0 = x[r, c0] if c0 < cols else z
    v1 = x[r, c0 + one] if c0 + one < cols else z
    v2 = x[r, c0 + uint64(2)] if c0 + uint64(2) < cols else z
    v3 = x[r, c0 + uint64(3)] if c0 + uint64(3) < cols else z
    return v0, v1, v2, v3


def make_q4_2d(groups_per_warp: int, rcp: bool):
    """Grid (ceil(groups / (Q4_WPB * G)), rows), 256 threads: warp w of block (bx, r) quantizes
    groups G (bx Q4_WPB + w) .. + G - 1 of row r, their loads first. uint64 indices throughout."""
    G = groups_per_warp

    @cuda.jit
    def q4(x, packed, packed16, scales):
        lane = uint64(cuda.threadIdx.x & 31)
        r = uint64(cuda.blockIdx.y)
        g0 = (uint64(cuda.blockIdx.x) * uint64(Q4_WPB) + uint64(cuda.threadIdx.x >> 5)) * uint64(G)
        cols = uint64(x.shape[1])
        groups = uint64(scales.shape[1])
        if g0 >= groups:  # whole warps leave together
            return
        vec = (cols & uint64(3)) == uint64(0)
        v = cuda.local.array((G, 4), float32)
        for k in range(G):
            g = g0 + uint64(k)
            if g < groups:
                v[k, 0], v[k, 1], v[k, 2], v[k, 3] = q4_load_u(x, r, g * uint64(INT4_GROUP) + uint64(4) * lane,
                                                               cols, vec)
        for k in range(G):
            g = g0 + uint64(k)
            if g < groups:  # the same for the whole warp: the shuffles stay full
                c0 = g * uint64(INT4_GROUP) + uint64(4) * lane
                m = qwarp.warp_max_f32(max(max(abs(v[k, 0]), abs(v[k, 1])), max(abs(v[k, 2]), abs(v[k, 3]))))
                s = m / float32(7.0) if m > float32(0.0) else float32(1.0)
                if lane == uint64(0):
                    scales[r, g] = s
                q0, q1, q2, q3 = q4_codes(v[k, 0], v[k, 1], v[k, 2], v[k, 3], s, m, rcp)
                lo = (q0 & 0xF) | ((q1 & 0xF) << 4)
                hi = (q2 & 0xF) | ((q3 & 0xF) << 4)
                if vec:
                    if c0 < cols:
                        packed16[r, c0 >> uint64(2)] = uint16(lo | (hi << 8))
                else:
                    if c0 < cols:  # an odd row's last byte holds one value, its high nibble the 0 loaded
                        packed[r, c0 >> uint64(1)] = uint8(lo)
                    if c0 + uint64(2) < cols:
                        packed[r, (c0 >> uint64(1)) + uint64(1)] = uint8(hi)

    def launch(packed, scales, x):
        groups = -(-x.shape[1] // INT4_GROUP)
        q4[(-(-groups // (Q4_WPB * G)), x.shape[0]), 32 * Q4_WPB](x, packed, I4.packed16_of(packed, x.shape[1]),
                                                                   scales)

    launch.kernel = q4
    return launch


def make_q4_sub(lanes_per_group: int):
    """Like ``make_q4_2d`` with ``rcp``, but a group on ``lanes_per_group`` lanes (16 or 8), so a lane
    holds 32 / lanes_per_group quads (8 or 16 values) of one group: the per-group work of a lane
    (absmax shuffles, m / 7, 1 / s, indices, branches) is shared by more values, and there are
    fewer shuffle steps (4 or 3). Quad k of lane l is quad l + k * lanes_per_group of its group, so
    each 16-byte load instruction of the warp reads whole 128-byte lines. A warp does 32 /
    lanes_per_group consecutive groups of a row; lanes past the row's last group load zeros and
    take part in the shuffles (full mask), but store nothing."""
    LPG = lanes_per_group
    CH = 32 // LPG  # quads per lane, and groups per warp
    LOG = {16: 4, 8: 3}[LPG]

    @cuda.jit
    def q4(x, packed, packed16, scales):
        lane = uint64(cuda.threadIdx.x & 31)
        sub = lane >> uint64(LOG)
        ql = lane & uint64(LPG - 1)
        r = uint64(cuda.blockIdx.y)
        g = (uint64(cuda.blockIdx.x) * uint64(Q4_WPB) + uint64(cuda.threadIdx.x >> 5)) * uint64(CH) + sub
        cols = uint64(x.shape[1])
        groups = uint64(scales.shape[1])
        if (g - sub) >= groups:  # the warp's first group is past the row: whole warps leave together
            return
        vec = (cols & uint64(3)) == uint64(0)
        base = g * uint64(INT4_GROUP) + uint64(4) * ql
        v = cuda.local.array((CH, 4), float32)
        for k in range(CH):  # zeros past the row's end (and for groups past the last)
            v[k, 0], v[k, 1], v[k, 2], v[k, 3] = q4_load_u(x, r, base + uint64(4 * LPG * k), cols, vec)
        m = float32(0.0)
        for k in range(CH):
            m = max(m, max(max(abs(v[k, 0]), abs(v[k, 1])), max(abs(v[k, 2]), abs(v[k, 3]))))
        off = LPG // 2
        while off > 0:  # the group's lanes only: xor offsets below LPG stay inside it
            m = max(m, cuda.shfl_xor_sync(0xFFFFFFFF, m, off))
            off //= 2
        s = m / float32(7.0) if m > float32(0.0) else float32(1.0)
        if ql == uint64(0) and g < groups:
            scales[r, g] = s
        y = float32(1.0) / s
        h = cuda.local.array(CH, int32)
        doubt = not (m >= RCP_LO and m <= RCP_HI)
        for k in range(CH):
            q0, b0 = q4_code_rcp(v[k, 0], y)
            q1, b1 = q4_code_rcp(v[k, 1], y)
            q2, b2 = q4_code_rcp(v[k, 2], y)
            q3, b3 = q4_code_rcp(v[k, 3], y)
            doubt = doubt or b0 or b1 or b2 or b3
            h[k] = int32((q0 & 0xF) | ((q1 & 0xF) << 4) | ((q2 & 0xF) << 8) | ((q3 & 0xF) << 12))
        if doubt:  # rare: the IEEE division for this lane's values
            for k in range(CH):
                q0, q1, q2, q3 = q4_codes(v[k, 0], v[k, 1], v[k, 2], v[k, 3], s, m, False)
                h[k] = int32((q0 & 0xF) | ((q1 & 0xF) << 4) | ((q2 & 0xF) << 8) | ((q3 & 0xF) << 12))
        for k in range(CH):
            c0 = base + uint64(4 * LPG * k)
            if c0 < cols:
                if vec:
                    packed16[r, c0 >> uint64(2)] = uint16(h[k])
                else:  # an odd row's last byte holds one value, its high nibble the 0 loaded
                    packed[r, c0 >> uint64(1)] = uint8(h[k] & 0xFF)
                    if c0 + uint64(2) < cols:
                        packed[r, (c0 >> uint64(1)) + uint64(1)] = uint8(h[k] >> 8)

    def launch(packed, scales, x):
        groups = -(-x.shape[1] // INT4_GROUP)
        q4[(-(-groups // (Q4_WPB * CH)), x.shape[0]), 32 * Q4_WPB](x, packed, I4.packed16_of(packed, x.shape[1]),
                                                                    scales)

    launch.kernel = q4
    return launch


q4_2d_g1 = make_q4_2d(1, False)
q4_2d_g1_rcp = make_q4_2d(1, True)
q4_2d_g2_rcp = make_q4_2d(2, True)
q4_2d_g4_rcp = make_q4_2d(4, True)
q4_sub16 = make_q4_sub(16)
q4_sub8 = make_q4_sub(8)


# ================================================================================================
# 5. INT4 dequantize (05.2 exercise 2): a thread per four values (one uint16 of packed codes, one
#    16-byte store) or per eight (a uint32, two stores); rows not 16-byte aligned take the scalar path.


@cuda.jit
def dq4_h4(packed, packed16, scales, out):
    """Grid (ceil(cols / 4 / blockDim), rows): a thread per four values of a row."""
    j = cuda.grid(1)
    r = cuda.blockIdx.y
    I4.dequantize_quad(packed, packed16, scales, out, r, j, out.shape[1] % 4 == 0)


@cuda.jit
def dq4_w8(packed, packed32, scales, out):
    """A thread per eight values: one 4-byte load of packed codes, two 16-byte stores (cols % 8 == 0;
    other widths: the scalar path, two quads)."""
    j = cuda.grid(1)
    r = cuda.blockIdx.y
    cols = out.shape[1]
    c = 8 * j
    if c >= cols:
        return
    if cols % 8 == 0:
        p = packed32[r, j]
        s = scales[r, c // INT4_GROUP]
        store4(out, (r, c), I4.nibble_value(p, 0) * s, I4.nibble_value(p, 1) * s, I4.nibble_value(p, 2) * s,
               I4.nibble_value(p, 3) * s)
        store4(out, (r, c + 4), I4.nibble_value(p, 4) * s, I4.nibble_value(p, 5) * s, I4.nibble_value(p, 6) * s,
               I4.nibble_value(p, 7) * s)
    else:
        I4.dequantize_quad(packed, packed32, scales, out, r, 2 * j, False)
        I4.dequantize_quad(packed, packed32, scales, out, r, 2 * j + 1, False)


def dq4_base_launch(out, packed, scales):
    I4.launch_int4_dequantize(out, packed, scales)


def dq4_h4_launch(out, packed, scales):
    rows, cols = out.shape
    dq4_h4[(blocks(-(-cols // 4), THREADS), rows), THREADS](packed, I4.packed16_of(packed, cols), scales, out)


def dq4_w8_launch(out, packed, scales):
    rows, cols = out.shape
    p32 = packed.view(np.int32) if cols % 8 == 0 else _dummy32()
    dq4_w8[(blocks(-(-cols // 8), THREADS), rows), THREADS](packed, p32, scales, out)


_dummies = {}


def _dummy32():
    if "i32" not in _dummies:
        _dummies["i32"] = cuda.device_array((1, 1), np.int32)
    return _dummies["i32"]


# ================================================================================================
# The variants, their checks and their timings

def variants():
    """{section: [(name, launch, note, kernels)]}; the first of each section is the notebooks' kernel.
    ``kernels``: the compiled kernels the launch runs, for their register counts."""
    quantizers = {"base": (q8_base_launch, I8.int8_quantize), "flat x4": (q8_flat_x4_launch, q8_flat_x4),
                  "tile4": (q8_tile4_launch, I8.int8_quantize_x4), "pers u4": (q8_pers_u4_launch, q8_pers_u4),
                  "x16": (q8_x16_launch, q8_x16), "tile4 fadd": (q8_tile4_fadd_launch, I8.int8_quantize_x4_fadd)}
    absmaxes = {"grid-stride": absmax_persistent, "x4": absmax_x4}
    amax_q = [(f"absmax {a} + quantize {qn}", absmax_quantize(a, quantizers[qn][0]), "",
               (absmaxes[a], quantizers[qn][1]))
              for a, qn in [("grid-stride", "base"), ("grid-stride", "flat x4"), ("grid-stride", "tile4"),
                            ("x4", "base"), ("x4", "flat x4"), ("x4", "tile4"), ("x4", "pers u4"), ("x4", "x16"),
                            ("x4", "tile4 fadd")]]
    return {
        "q8": [("base: 1/thread, persistent", q8_base_launch, "notebook 05.1", (I8.int8_quantize,)),
               ("flat x1: 1/thread, n threads", q8_flat_x1_launch, "", (q8_flat_x1,)),
               ("flat x4: 16-B load, n/4 threads", q8_flat_x4_launch, "", (q8_flat_x4,)),
               ("tile4: 4 x 16-B loads, then stores", q8_tile4_launch, "package, notebook 05.1",
                (I8.int8_quantize_x4,)),
               ("tile4 fadd: tile4, rounding by an FADD", q8_tile4_fadd_launch, "package, notebook 05.1",
                (I8.int8_quantize_x4_fadd,)),
               ("pers u4: persistent, 4 x 16-B loads", q8_pers_u4_launch, "", (q8_pers_u4,)),
               ("x16: 4 x 16-B loads, 16-B store", q8_x16_launch, "", (q8_x16,))],
        "dq8": [("base: 1/thread, persistent", dq8_base_launch, "notebook 05.1", (I8.int8_dequantize,)),
                ("pers x4: persistent, word -> 16-B store", dq8_pers_x4_launch, "", (dq8_pers_x4,)),
                ("flat x1: 1/thread, n threads", dq8_flat_x1_launch, "", (dq8_flat_x1,)),
                ("flat x4: word -> 16-B store", dq8_flat_x4_launch, "", (dq8_flat_x4,)),
                ("tile4: 4 words, then 4 stores", dq8_tile4_launch, "package, notebook 05.1",
                 (I8.int8_dequantize_x4,)),
                ("pers u4: persistent, 4 words", dq8_pers_u4_launch, "", (dq8_pers_u4,)),
                ("x16: 16-B load, 4 x 16-B stores", dq8_x16_launch, "", (dq8_x16,))],
        "amax": amax_q,
        "q4": [("base: warp/group, scalar loads", q4_base_launch, "notebook 05.2", (I4.int4_quantize_groups,)),
               ("g1 bytes: warp/group, 16-B load", q4_g1_bytes, "", (q4_g1_bytes.kernel,)),
               ("g1 u16: 16-B load, 2-B store", q4_g1_u16, "", (q4_g1_u16.kernel,)),
               ("g4 u16: 4 groups/warp, loads first", q4_g4_u16, "", (q4_g4_u16.kernel,)),
               ("g1 u16 fadd: g1 u16, rounding by an FADD", q4_g1_u16_fadd, "", (q4_g1_u16_fadd.kernel,)),
               ("pers prefetch: next group's load early", q4_pers_prefetch_launch, "", (q4_pers_prefetch,)),
               ("2d g1: 2-D grid, uint64 idx, no //", q4_2d_g1, "", (q4_2d_g1.kernel,)),
               ("2d g1 int: 2-D grid, Numba's ints, FADD", I4.launch_int4_quantize_rows, "package, notebook 05.2",
                (I4.int4_quantize_rows_x4,)),
               ("2d g1 u64: 2-D grid, uint64 idx, FADD", lambda p, s, x: I4.launch_int4_quantize_rows(p, s, x, True),
                "package, notebook 05.2", (I4.int4_quantize_rows_u64,)),
               ("2d g1 rcp: + v*(1/s), exact fallback", q4_2d_g1_rcp, "", (q4_2d_g1_rcp.kernel,)),
               ("2d g2 rcp: 2 groups/warp, loads first", q4_2d_g2_rcp, "", (q4_2d_g2_rcp.kernel,)),
               ("2d g4 rcp: 4 groups/warp, loads first", q4_2d_g4_rcp, "", (q4_2d_g4_rcp.kernel,)),
               ("sub16 rcp: 16 lanes/group, 8 values/lane", q4_sub16, "", (q4_sub16.kernel,)),
               ("sub8 rcp: 8 lanes/group, 16 values/lane", q4_sub8, "", (q4_sub8.kernel,))],
        "dq4": [("base: thread/byte, 2-D", dq4_base_launch, "notebook 05.2", (I4.int4_dequantize,)),
                ("h4: uint16 -> 16-B store", dq4_h4_launch, "", (dq4_h4,)),
                ("h4 tile4: 4 uint16, then 4 stores", I4.launch_int4_dequantize_tile4, "package, notebook 05.2",
                 (I4.int4_dequantize_tile4,)),
                ("w8: uint32 -> 2 x 16-B stores", dq4_w8_launch, "", (dq4_w8,))],
    }


def check(section, name, launch, sim):
    from kernel_lab.checks import quantization as checks

    big = 3013 if sim else (1 << 22) + 13
    odd_sizes = [("block-1", 255), ("3 blocks+7", 775), ("large+13", big)]
    label = f"{section} {name}"
    if section == "q8":
        checks.check_int8_quantize(launch, name=label, sizes=odd_sizes)
    elif section == "dq8":
        checks.check_int8_dequantize(launch, name=label, sizes=[("1", 1)] + odd_sizes[1:])
    elif section == "amax":
        checks.check_int8_quantize(launch, name=label, given_amax=False, sizes=odd_sizes)
    elif section in ("q4", "dq4"):
        fn = checks.check_int4_quantize if section == "q4" else checks.check_int4_dequantize
        fn(launch, name=label)  # the notebook's shapes: odd rows, 127, 129, 301 (the scalar path)
        aligned = [("2 x 132", (2, 132)), ("3 x 264", (3, 264)), ("4 x 256", (4, 256)), ("2 x 1028", (2, 1028)),
                   ("3 x 8", (3, 8)), ("2 x 4", (2, 4))]
        if not sim:
            aligned.append(("64 x 8192", (64, 8192)))
        fn(launch, name=label + " (rows 16-B aligned)", shapes=aligned)


def timings(section, sim, variants_of_section, ok):
    """[(name, Measurement)] at the notebooks' sizes (skips variants that failed their check)."""
    from kernel_lab.quant.integer import INT4_GROUP as G

    rng = np.random.default_rng(1)
    out = []
    if section in ("q8", "dq8", "amax"):
        n = 3000 if sim else 1 << 26
        x = cuda.to_device(rng.standard_normal(n).astype(np.float32))
        q, scale = cuda.device_array(n, np.int8), cuda.device_array(1, np.float32)
        amax = cuda.device_array(1, np.float32)
        y = cuda.device_array(n, np.float32)
        I8.launch_int8_quantize(q, scale, x, amax)  # codes and scale for the dequantizers, amax for the quantizers
        cases = []
        for name, launch, *_ in variants_of_section:
            if section == "q8":
                cases.append((name, lambda launch=launch: launch(q, scale, x, amax), 5 * n, (x,)))
            elif section == "dq8":
                cases.append((name, lambda launch=launch: launch(y, q, scale), 5 * n, ()))
            else:
                cases.append((name, lambda launch=launch: launch(q, scale, x, amax), 9 * n, (x,)))
        if section == "amax":
            for a, fn in ABSMAX.items():
                cases.append((f"absmax {a} alone", lambda fn=fn: fn(amax.view(np.uint32), x.view(np.uint32)),
                              4 * n, (x,)))
            ok = dict(ok, **{f"absmax {a} alone": True for a in ABSMAX})
    else:
        rows, cols = (4, 300) if sim else (8192, 8192)
        n = rows * cols
        x = cuda.to_device(rng.standard_normal((rows, cols)).astype(np.float32))
        packed = cuda.device_array((rows, -(-cols // 2)), np.uint8)
        scales = cuda.device_array((rows, -(-cols // G)), np.float32)
        y = cuda.device_array((rows, cols), np.float32)
        I4.launch_int4_quantize(packed, scales, x)
        moved = 4 * n + n // 2 + 4 * scales.size
        cases = [(name, (lambda launch=launch: launch(packed, scales, x)) if section == "q4"
                  else (lambda launch=launch: launch(y, packed, scales)), moved, (x,) if section == "q4" else ())
                 for name, launch, *_ in variants_of_section]
    if cases:  # the baseline twice: the noise between two runs of the same kernel
        cases.insert(1, (cases[0][0] + " (again)",) + cases[0][1:])
        ok = dict(ok, **{cases[0][0] + " (again)": ok.get(cases[0][0], False)})
    for name, fn, nbytes, inputs in cases:
        if not ok.get(name):
            continue
        out.append((name, kl.benchmark(name, fn, bytes=nbytes, inputs=inputs, repeat=30, quiet=True)))
    return out


def registers(kernels):
    """Registers per thread of the kernels a variant runs, "a/b" for two (None in the simulator)."""
    counts = []
    for kern in kernels or ():
        try:
            regs = kern.get_regs_per_thread()
            counts.append(max(regs.values()) if isinstance(regs, dict) else regs)
        except Exception:  # noqa: BLE001 - the simulator, or an older numba-cuda
            return None
    return "/".join(str(c) for c in counts) or None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="in the simulator: the checks only, at tiny sizes")
    p.add_argument("--only", default="", help="comma-separated sections: q8, dq8, amax, q4, dq4")
    args = p.parse_args(argv)
    env = kl.setup(quiet=True)
    if args.sim != env.simulator:
        print("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and without --sim a GPU is needed"
              if args.sim else "no GPU found: run with --sim for the simulator path")
        return 2
    results = {"gpu": None if env.simulator else kl.gpu_info().name, "variants": []}
    if not env.simulator:
        roof = kl.rooflines(quiet=True)
        results["rooflines"] = roof
        print(f"GPU: {results['gpu']}; copy roofline {roof.get('copy_gbps', float('nan')):,.0f} GB/s", flush=True)
    wanted = [s for s in args.only.split(",") if s] or list(variants())
    for section, items in variants().items():
        if section not in wanted:
            continue
        print(f"\n=== {section} ===", flush=True)
        ok = {}
        for name, launch, note, _ in items:
            try:
                check(section, name, launch, args.sim)
                ok[name] = True
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                ok[name] = False
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                print(f"{section:5s} {name:42s} CHECK FAILED: {type(exc).__name__}: {first[:300]}", flush=True)
                results["variants"].append(dict(section=section, name=name, check="failed", error=str(exc)[:2000]))
        if env.simulator:
            for name, launch, note, _ in items:
                if ok[name]:
                    tag = f"  [{note}]" if note else ""
                    print(f"{section:5s} {name:42s} check ok  (simulator: no timing){tag}")
                    results["variants"].append(dict(section=section, name=name, check="ok", note=note))
            continue
        names = {name: (note, kernels) for name, _, note, kernels in items}
        for name, m in timings(section, False, items, ok):
            note, kernels = names.get(name.replace(" (again)", ""), ("", ()))
            regs = registers(kernels)
            frac = 100 * m.fraction if m.fraction is not None else float("nan")
            print(f"{section:5s} {name:42s} check ok  {m.ms * 1000:8.1f} us  {frac:5.1f}% of copy  "
                  f"spread {100 * (m.spread or 0):3.0f}%{'  regs ' + str(regs) if regs else ''}"
                  f"{'  [' + note + ']' if note else ''}", flush=True)
            results["variants"].append(dict(section=section, name=name, check="ok", us=m.ms * 1000,
                                            fraction=m.fraction, spread=m.spread, bytes=m.bytes, regs=regs,
                                            note=note))
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "quantize_variants.json").write_text(json.dumps(results, indent=1, default=str))
    failed = [v for v in results["variants"] if v["check"] == "failed"]
    print(f"\n{'simulator ' if env.simulator else ''}probe done: {len(failed)} variant(s) failed their check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
