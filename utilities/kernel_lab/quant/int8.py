"""Notebook 05.1's INT8 kernels: symmetric INT8 per tensor (scale from the GPU's absmax) and
asymmetric UINT8 per row (scale and zero point from a calibrated range).

The learner writes the simple kernels in ``solutions/05-quantization/05.1-affine-quantization.ipynb``;
the package keeps working versions, and the fast forms (a tile of four 16-byte loads per thread,
rounding by one float addition: :func:`round_clamp_fadd`), so that
``scripts/gpu_module05_integer_probe.py`` and the quantize probe measure what the notebook teaches and
the tests of ``kernel_lab.checks.quantization`` have right answers to pass. The format (scale,
rounding, range) is defined in :mod:`kernel_lab.quant.integer`. 05.2's INT4 (:mod:`.int4`) and
05.5's per-token INT8 (:mod:`.ternary`) round with this file's :func:`round_clamp_fadd`.
"""

from __future__ import annotations

import numpy as np

from ..reductions_gemm.scans import THREADS, absmax_grid_stride, persistent_blocks
from ..validate import KernelLabArgumentError
from ..bitcast import float_bits
from ..vector_loads import load4, store4
from .integer import AMAX_FLOOR

from numba import cuda, float32, int8, int32, uint8, uint32, uint64  # noqa: E402  (after kernel_lab)


# --- 05.1 symmetric INT8, per tensor, scale from the GPU's absmax --------------------------------

@cuda.jit
def int8_quantize(x, amax, q, scale_out):
    """``q = clamp(rint(x / s), -127, 127)`` with ``s = amax[0] / 127`` (1 if amax is 0)."""
    a = amax[0]
    s = a / float32(127.0) if a > float32(0.0) else float32(1.0)
    i = cuda.grid(1)
    if i == 0:
        scale_out[0] = s
    while i < x.size:
        v = round(x[i] / s)  # ties to even
        q[i] = int8(min(max(v, -127), 127))
        i += cuda.gridsize(1)


@cuda.jit
def int8_dequantize(q, scale, out):
    s = scale[0]
    i = cuda.grid(1)
    while i < q.size:
        out[i] = float32(q[i]) * s
        i += cuda.gridsize(1)


@cuda.jit
def floor_amax(amax):
    """``amax[0] = max(amax[0], AMAX_FLOOR)`` where it is positive (one thread): the floor of
    :data:`kernel_lab.quant.integer.AMAX_FLOOR`, for kernels that divide amax themselves and are the
    notebooks' own code (``int8_quantize``, ``nvfp4_quantize_blocks``)."""
    a = amax[0]
    if a > float32(0.0):
        amax[0] = max(a, float32(AMAX_FLOOR))


def launch_int8_quantize(q, scale, x, amax=None):
    """absmax on the GPU (module 02's grid-stride kernel), floored (``amax`` receives ``max(|x|)``, at
    least 2^-126 unless 0: :func:`floor_amax`), then the quantizer: no host round trip."""
    amax = cuda.device_array(1, np.float32) if amax is None else amax
    absmax_grid_stride(amax.view(np.uint32), x.view(np.uint32))
    floor_amax[1, 1](amax)
    int8_quantize[persistent_blocks(x.size), THREADS](x, amax, q, scale)


def launch_int8_dequantize(out, q, scale):
    int8_dequantize[persistent_blocks(q.size), THREADS](q, scale, out)


# 05.1's fast forms (exercises 4 and 5): a tile of four 16-byte chunks per thread, a block apart,
# all four loads issued before the first store; whole words of four codes (``q.view(np.int32)``:
# byte k of word w is element 4w + k); the ``n % 4`` tail one value per thread. Any n.
# Measured on an H200 (scripts/probes/quantize_variants.py, 2^26 values): 92.9% (quantize), 90.2%
# (dequantize) and 100.8% (quantize, FADD rounding) of the copy roofline, against 51.6% and 55.0%
# for the grid-stride kernels above.

TILE_CHUNKS = 4  # 16-byte chunks per thread in a tile


@cuda.jit(device=True)
def code8(v, s):
    """The INT8 code of ``v``: ``clamp(rint(v / s), -127, 127)`` (an integer)."""
    return min(max(round(v / s), -127), 127)


@cuda.jit(device=True)
def round_clamp_fadd(v, lo, hi):
    """``clamp(rint(v), lo, hi)`` as an int32, rounded by one float32 addition: clamp first (the
    bounds are integers, so clamping before rounding changes nothing), then add 1.5 * 2^23. In
    [2^23, 2^24) float32 values are the integers, so the addition rounds ``v`` to an integer (to
    nearest, ties to even, as every float32 addition does) and the integer sits in the low bits of
    the sum: its bits minus those of 1.5 * 2^23 (0x4B400000). No float64 and no F2I conversion
    (Numba's ``round`` of a float32 converts to float64, then to int64: two quarter-rate
    instructions per value). Needs |lo|, |hi| < 2^22."""
    t = min(max(v, lo), hi) + float32(12582912.0)
    return int32(float_bits(t)) - int32(0x4B400000)


@cuda.jit(device=True)
def code8_fadd(v, s):
    """:func:`code8` by :func:`round_clamp_fadd`: the same bits (ties to even, saturated)."""
    return round_clamp_fadd(v / s, float32(-127.0), float32(127.0))


@cuda.jit(device=True)
def pack4(c0, c1, c2, c3):
    """Four codes in [-127, 127] as one int32 word, code k in byte k (little-endian), two's
    complement bytes. The top byte is the signed code shifted, not masked: the word then fits an
    int32 in any integer width Numba computes it in."""
    return int32((c0 & 0xFF) | ((c1 & 0xFF) << 8) | ((c2 & 0xFF) << 16) | (c3 << 24))


@cuda.jit(device=True)
def byte_value(p, k):
    """Byte ``k`` of word ``p`` as a signed value (float32), with a mask and a subtraction only:
    right whatever integer width Numba computes the shift in. (``(p << 24) >> 24`` is not: Numba
    types ``int32 << int`` as int64, where that pair sign-extends nothing and the GPU gets three
    bytes of four wrong; the simulator computes in NumPy's int32 and hides it.)"""
    b = (p >> (8 * k)) & 0xFF
    return float32(int32(b - ((b & 0x80) << 1)))  # bit 7 weighs -128; via int32: a 32-bit I2F


def _int8_quantize_tile(code):
    """The tile quantizer for a rounding function ``code(v, s)`` (:func:`code8`, :func:`code8_fadd`)."""

    @cuda.jit
    def quantize(x, amax, q, q32, scale_out):
        a = amax[0]
        s = max(a, float32(AMAX_FLOOR)) / float32(127.0) if a > float32(0.0) else float32(1.0)  # integer.AMAX_FLOOR
        if cuda.grid(1) == 0:
            scale_out[0] = s
        nb = cuda.blockDim.x
        w = cuda.blockIdx.x * (4 * nb) + cuda.threadIdx.x
        nw = q32.size
        if w + 3 * nb < nw:  # a whole tile: four 16-byte loads in flight before any store
            a0, a1, a2, a3 = load4(x, 4 * w)
            b0, b1, b2, b3 = load4(x, 4 * (w + nb))
            c0, c1, c2, c3 = load4(x, 4 * (w + 2 * nb))
            d0, d1, d2, d3 = load4(x, 4 * (w + 3 * nb))
            q32[w] = pack4(code(a0, s), code(a1, s), code(a2, s), code(a3, s))
            q32[w + nb] = pack4(code(b0, s), code(b1, s), code(b2, s), code(b3, s))
            q32[w + 2 * nb] = pack4(code(c0, s), code(c1, s), code(c2, s), code(c3, s))
            q32[w + 3 * nb] = pack4(code(d0, s), code(d1, s), code(d2, s), code(d3, s))
        else:  # the last, partial tile: the words that exist, one at a time
            for k in range(4):
                if w + k * nb < nw:
                    v0, v1, v2, v3 = load4(x, 4 * (w + k * nb))
                    q32[w + k * nb] = pack4(code(v0, s), code(v1, s), code(v2, s), code(v3, s))
        t = 4 * nw + cuda.grid(1)  # the n % 4 values after the last whole word
        if t < x.size:
            q[t] = int8(code(x[t], s))

    return quantize


int8_quantize_x4 = _int8_quantize_tile(code8)
int8_quantize_x4_fadd = _int8_quantize_tile(code8_fadd)


@cuda.jit
def int8_dequantize_x4(q, q32, scale, out):
    """The tile dequantizer: four words a block apart loaded first, then four 16-byte stores."""
    s = scale[0]
    nb = cuda.blockDim.x
    w = cuda.blockIdx.x * (4 * nb) + cuda.threadIdx.x
    nw = q32.size
    if w + 3 * nb < nw:
        p0 = q32[w]
        p1 = q32[w + nb]
        p2 = q32[w + 2 * nb]
        p3 = q32[w + 3 * nb]
        store4(out, 4 * w, byte_value(p0, 0) * s, byte_value(p0, 1) * s, byte_value(p0, 2) * s, byte_value(p0, 3) * s)
        store4(out, 4 * (w + nb), byte_value(p1, 0) * s, byte_value(p1, 1) * s, byte_value(p1, 2) * s,
               byte_value(p1, 3) * s)
        store4(out, 4 * (w + 2 * nb), byte_value(p2, 0) * s, byte_value(p2, 1) * s, byte_value(p2, 2) * s,
               byte_value(p2, 3) * s)
        store4(out, 4 * (w + 3 * nb), byte_value(p3, 0) * s, byte_value(p3, 1) * s, byte_value(p3, 2) * s,
               byte_value(p3, 3) * s)
    else:
        for k in range(4):
            if w + k * nb < nw:
                p = q32[w + k * nb]
                store4(out, 4 * (w + k * nb), byte_value(p, 0) * s, byte_value(p, 1) * s, byte_value(p, 2) * s,
                       byte_value(p, 3) * s)
    t = 4 * nw + cuda.grid(1)
    if t < q.size:
        out[t] = float32(q[t]) * s


def with_device_functions(kernel, **replacements):
    """``kernel`` compiled again with some of the names it calls meaning other device functions:
    ``with_device_functions(int8_quantize_x4, code=code_fadd)`` is your tile kernel with every
    ``code(v, s)`` in its body calling ``code_fadd`` instead (what a C++ template parameter does).
    Only the kernel's own body is rebound, not the device functions it calls."""
    import types as _types

    fn = getattr(kernel, "py_func", kernel)
    missing = [name for name in replacements if name not in fn.__code__.co_names]
    if missing:
        raise KernelLabArgumentError(f"{fn.__name__} does not call {', '.join(missing)} by that name: the names it "
                                     f"uses are {', '.join(sorted(fn.__code__.co_names))}")
    scope = dict(fn.__globals__, **replacements)
    rebound = _types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    return cuda.jit(rebound)


def int8_words(q):
    """The whole 32-bit words of a 1-D int8 device array, as int32 (no copy; size 0 below 4 values)."""
    return q[: 4 * (q.size // 4)].view(np.int32)


def tile_blocks(n: int, threads: int = THREADS) -> int:
    """Blocks of ``threads`` for the tile kernels: a tile of 4 words per thread, at least one block
    (whose first threads take the ``n % 4`` tail)."""
    return max(1, -(-(n // 4) // (TILE_CHUNKS * threads)))


def launch_int8_quantize_x4(q, scale, x, amax, fadd: bool = False):
    """Like :func:`int8_quantize` with the scale from ``amax`` (floored at 2^-126 in the kernel: see
    :data:`kernel_lab.quant.integer.AMAX_FLOOR`), a tile of 4 x 16 bytes per thread;
    ``fadd=True``: rounding by :func:`round_clamp_fadd`. Any size."""
    kernel = int8_quantize_x4_fadd if fadd else int8_quantize_x4
    kernel[tile_blocks(x.size), THREADS](x, amax, q, int8_words(q), scale)


def launch_int8_dequantize_x4(out, q, scale):
    int8_dequantize_x4[tile_blocks(q.size), THREADS](q, int8_words(q), scale, out)


def launch_int8_absmax_quantize_x4(q, scale, x, amax=None, fadd: bool = False):
    """The fast pipeline: ``reductions_gemm.scans.absmax_vectorized`` (16-byte loads), then the tile quantizer."""
    from ..reductions_gemm.scans import absmax_vectorized

    amax = cuda.device_array(1, np.float32) if amax is None else amax
    absmax_vectorized(amax.view(np.uint32), x.view(np.uint32))
    launch_int8_quantize_x4(q, scale, x, amax, fadd=fadd)


MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: taller matrices go in slices of rows (05.2's INT4 too)


# --- 05.1 asymmetric UINT8 per channel (row), from a calibrated range ----------------------------

@cuda.jit
def affine_quantize_rows(x, lo, hi, q, scale, zp):
    r, c = cuda.grid(2)
    if r >= x.shape[0] or c >= x.shape[1]:
        return
    width = hi[r] - lo[r]
    s = width / float32(255.0) if width > float32(0.0) else float32(1.0)
    z = min(max(round(-lo[r] / s), 0), 255)  # the zero point must be a uint8 too
    if c == 0:
        scale[r] = s
        zp[r] = z
    q[r, c] = uint8(min(max(round(x[r, c] / s) + z, 0), 255))


@cuda.jit
def floor_ranges(lo, hi, hi_out):
    """``hi_out = lo + AMAX_FLOOR`` where ``0 < hi - lo < AMAX_FLOOR``, else ``hi``: the range's width
    floored, for :func:`affine_quantize_rows` (the notebook's kernel, which divides the width itself).
    A width below 2^-126 needs ``|lo| < 2^-103``; for ``|lo| < 2^-104`` the sum ``lo + AMAX_FLOOR`` is exact
    and the kernel's ``hi - lo`` is the floor itself (the reference's); in the binade below 2^-103 it
    may round to the floor plus or minus 2^-127: still a nonzero width."""
    r = cuda.grid(1)
    if r < hi.size:
        width = hi[r] - lo[r]
        hi_out[r] = lo[r] + float32(AMAX_FLOOR) if float32(0.0) < width < float32(AMAX_FLOOR) else hi[r]


def launch_affine_quantize_rows(q, scale, zp, x, lo, hi):
    """The notebook's kernel, with each row's range floored first (:func:`floor_ranges`)."""
    threads = (16, 16)
    hi = _floored_ranges(lo, hi)
    affine_quantize_rows[(-(-x.shape[0] // 16), -(-x.shape[1] // 16)), threads](x, lo, hi, q, scale, zp)


# The fast form (the package's; 05.1's exercise is the kernel above): a row per blockIdx.y, a tile of
# four 16-byte loads per thread (05.1's x4 tile), the row's scale and zero point once per thread,
# rounding by one float addition, four codes per 4-byte store. Rows a multiple of 4 long.

AFFINE_LO, AFFINE_HI = -512.0, 512.0  # rint(x / s) clamped here first: + zp then saturates the same


@cuda.jit(device=True, forceinline=True)
def affine_code(v, s, z):
    return min(max(round_clamp_fadd(v / s, float32(AFFINE_LO), float32(AFFINE_HI)) + z, 0), 255)


@cuda.jit
def affine_quantize_rows_x4(x, lo, hi, q32, scale, zp):
    r = uint64(cuda.blockIdx.y)
    nb = uint64(cuda.blockDim.x)
    w = uint64(cuda.blockIdx.x) * (uint64(4) * nb) + uint64(cuda.threadIdx.x)
    nw = uint64(q32.shape[1])
    width = hi[r] - lo[r]
    s = max(width, float32(AMAX_FLOOR)) / float32(255.0) if width > float32(0.0) else float32(1.0)
    z = int32(min(max(round_clamp_fadd(-lo[r] / s, float32(-1024.0), float32(1024.0)), 0), 255))
    if w == uint64(0):
        scale[r] = s
        zp[r] = z
    v = cuda.local.array((4, 4), float32)
    for k in range(4):  # the tile's loads first
        wk = w + uint64(k) * nb
        if wk < nw:
            v[k, 0], v[k, 1], v[k, 2], v[k, 3] = load4(x, (r, uint64(4) * wk))
    for k in range(4):
        wk = w + uint64(k) * nb
        if wk < nw:
            q32[r, wk] = (uint32(affine_code(v[k, 0], s, z)) | (uint32(affine_code(v[k, 1], s, z)) << uint32(8))
                          | (uint32(affine_code(v[k, 2], s, z)) << uint32(16))
                          | (uint32(affine_code(v[k, 3], s, z)) << uint32(24)))


def _floored_ranges(lo, hi):
    out = cuda.device_array(hi.shape[0], np.float32)
    floor_ranges[max(1, -(-hi.shape[0] // 256)), 256](lo, hi, out)
    return out


def launch_affine_quantize_rows_x4(q, scale, zp, x, lo, hi):
    """The fast form of :func:`launch_affine_quantize_rows` (same arguments, same bits)."""
    rows, cols = x.shape
    if cols % 4 or not q.is_c_contiguous():
        return launch_affine_quantize_rows(q, scale, zp, x, lo, hi)
    q32 = q.view(np.uint32)
    tiles = max(1, -(-(cols // 4) // (4 * THREADS)))
    for r0 in range(0, rows, MAX_GRID_Y):
        r1 = min(r0 + MAX_GRID_Y, rows)
        affine_quantize_rows_x4[(tiles, r1 - r0), THREADS](x[r0:r1], lo[r0:r1], hi[r0:r1], q32[r0:r1],
                                                            scale[r0:r1], zp[r0:r1])
