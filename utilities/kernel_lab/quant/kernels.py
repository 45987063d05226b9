"""Module 05's integer kernels, as the package's reference implementations.

The notebooks of module 05 have the learner write these kernels; the package keeps working
versions so that ``scripts/gpu_module05_integer_probe.py`` measures exactly what the notebooks
teach and the tests of ``kernel_lab.checks.quantization`` have right answers to pass. The formats
(scale, rounding, range, packing order) are defined in :mod:`kernel_lab.quant.integer`. Notebook
05.2's INT4 kernels live in :mod:`kernel_lab.quant.int4`.

Launchers take device arrays and allocate nothing they are given; shapes are checked with readable
messages (:func:`require_shape`).
"""

from __future__ import annotations

import functools

import numpy as np

from ..scans import THREADS, absmax_grid_stride, block_sum_f64, persistent_blocks, zero_first
from ..environment import on_simulator
from ..validate import KernelLabArgumentError
from ..bitcast import float_bits
from ..vector_loads import load4, store4
from ..device.dp4a import EVEN_BYTES, ODD_BYTES, byte_perm, dp4a  # noqa: F401  (qk.EVEN_BYTES: tests)
from .integer import INT4_GROUP  # noqa: F401
from ..sgemm import GemmTiles  # module 02's warp-tiled family: 05.6's last DP4A GEMM is one of them
from .warp import warp_max_f32, warp_sum, warp_sum_f32  # noqa: F401  (the names 05.2's int4 and 05.6 import here)
from .w4a8 import (GROUP_WORDS, MT, NIB_HI, ROWS_PER_WARP, W4A8_ROWS_KERNELS, W4A8_WARPS,  # noqa: F401
                   W4A8_WORDS_KERNELS, dot8, int4_halves_x16, launch_w4a8_gemm, launch_w4a8_gemm_rows,
                   launch_w4a8_gemm_words, w4a8_gemm)  # 05.6's W4A8 on DP4A, under the names it had here

from numba import cuda, float32, float64, int8, int32, uint8, uint32, uint64  # noqa: E402  (after kernel_lab)



def require_shape(arr, shape, dtype, name):
    if tuple(arr.shape) != tuple(shape) or np.dtype(arr.dtype) != np.dtype(dtype):
        raise KernelLabArgumentError(f"{name} must be {np.dtype(dtype).name} of shape {tuple(shape)}, "
                                     f"got {np.dtype(arr.dtype).name} of shape {tuple(arr.shape)}")




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


def launch_int8_quantize(q, scale, x, amax=None):
    """absmax on the GPU (module 02's grid-stride kernel), then the quantizer: no host round trip."""
    amax = cuda.device_array(1, np.float32) if amax is None else amax
    absmax_grid_stride(amax.view(np.uint32), x.view(np.uint32))
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
        s = a / float32(127.0) if a > float32(0.0) else float32(1.0)
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
    """Like :func:`int8_quantize` with the scale from ``amax``, a tile of 4 x 16 bytes per thread;
    ``fadd=True``: rounding by :func:`round_clamp_fadd`. Any size."""
    kernel = int8_quantize_x4_fadd if fadd else int8_quantize_x4
    kernel[tile_blocks(x.size), THREADS](x, amax, q, int8_words(q), scale)


def launch_int8_dequantize_x4(out, q, scale):
    int8_dequantize_x4[tile_blocks(q.size), THREADS](q, int8_words(q), scale, out)


def launch_int8_absmax_quantize_x4(q, scale, x, amax=None, fadd: bool = False):
    """The fast pipeline: ``scans.absmax_vectorized`` (16-byte loads), then the tile quantizer."""
    from ..scans import absmax_vectorized

    amax = cuda.device_array(1, np.float32) if amax is None else amax
    absmax_vectorized(amax.view(np.uint32), x.view(np.uint32))
    launch_int8_quantize_x4(q, scale, x, amax, fadd=fadd)


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


def launch_affine_quantize_rows(q, scale, zp, x, lo, hi):
    threads = (16, 16)
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
    s = width / float32(255.0) if width > float32(0.0) else float32(1.0)
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


# --- 05.2 INT4 groups of 128: the kernels live in kernel_lab.quant.int4 (the notebook's names) -----

MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: taller matrices go in slices of rows

# --- 05.5 ternary weights, per-token INT8 activations, a GEMM without multiplications -----------

@cuda.jit
def abs_sum(x, out):
    """``out[0] += sum |x|`` in float64 (one atomic per block; out zeroed by the launcher)."""
    acc = float64(0.0)
    i = cuda.grid(1)
    while i < x.size:
        acc += abs(float64(x[i]))
        i += cuda.gridsize(1)
    total = block_sum_f64(acc)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


@cuda.jit
def ternary_quantize_pack(w, abs_total, packed, scale_out):
    """One thread per output byte: four weights to {-1, 0, 1}, 2-bit codes, first in the low bits."""
    r, j = cuda.grid(2)
    rows, cols = w.shape
    mean = float32(abs_total[0] / float64(rows * cols))
    s = mean if mean > float32(0.0) else float32(1.0)
    if r == 0 and j == 0:
        scale_out[0] = s
    if r >= rows or j >= packed.shape[1]:
        return
    byte = 0
    for i in range(4):
        c = 4 * j + i
        if c < cols:
            t = min(max(round(w[r, c] / s), -1), 1)
            byte |= (t & 3) << (2 * i)  # -1 -> 11, +1 -> 01, 0 -> 00
    packed[r, j] = uint8(byte)


@cuda.jit
def int8_rows_quantize(x, q, scales):
    """Per-token INT8: one warp per row, its absmax by shuffles, then the row."""
    r = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
    lane = cuda.threadIdx.x % 32
    if r >= x.shape[0]:
        return
    cols = x.shape[1]
    m = float32(0.0)
    for c in range(lane, cols, 32):
        m = max(m, abs(x[r, c]))
    m = warp_max_f32(m)
    s = m / float32(127.0) if m > float32(0.0) else float32(1.0)
    if lane == 0:
        scales[r] = s
    for c in range(lane, q.shape[1], 32):  # q may be wider (padded K): zeros there
        v = 0
        if c < cols:
            v = min(max(round(x[r, c] / s), -127), 127)
        q[r, c] = int8(v)


@cuda.jit
def ternary_gemm(a, a_scale, w_packed, w_scale, out):
    """``out[m, n] = a_scale[m] * w_scale * sum_k a[m, k] * t[n, k]`` with t in {-1, 0, 1}: adds and
    subtracts only."""
    n, m = cuda.grid(2)
    if m >= out.shape[0] or n >= out.shape[1]:
        return
    acc = int32(0)
    for j in range(w_packed.shape[1]):
        b = int32(w_packed[n, j])
        for i in range(4):
            k = 4 * j + i
            code = (b >> (2 * i)) & 3
            if k < a.shape[1]:
                if code == 1:
                    acc += int32(a[m, k])
                elif code == 3:
                    acc -= int32(a[m, k])
    out[m, n] = float32(acc) * a_scale[m] * w_scale[0]


WARPS_PER_BLOCK = 8  # ternary_gemm_warp and ternary_gemm_dp4a: weight rows per block of 256 threads


@cuda.jit
def ternary_gemm_warp(a, a_scale, w_packed, w_scale, out):
    """The same product, one warp per output ``(m, n)``: the lanes read consecutive bytes of weight
    row ``n`` (a warp's load is 32 neighbouring bytes, one sector) and the 4 activations of each, then
    the warp sums its 32 partial sums (``warp_sum``). Grid: (ceil(N / 8), M) blocks of 256 threads."""
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // 32
    m = cuda.blockIdx.y
    if n >= out.shape[1] or m >= out.shape[0]:
        return  # the whole warp leaves together: n and m are the same for its 32 lanes
    k_total = a.shape[1]
    acc = int32(0)
    for j in range(lane, w_packed.shape[1], 32):
        b = int32(w_packed[n, j])
        for t in range(4):
            k = 4 * j + t
            code = (b >> (2 * t)) & 3
            if k < k_total:
                if code == 1:
                    acc += int32(a[m, k])
                elif code == 3:
                    acc -= int32(a[m, k])
    acc = warp_sum(acc)
    if lane == 0:
        out[m, n] = float32(acc) * a_scale[m] * w_scale[0]


def launch_ternary_gemm_warp(out, a, a_scale, w_packed, w_scale):
    grid = (-(-out.shape[1] // WARPS_PER_BLOCK), out.shape[0])
    ternary_gemm_warp[grid, 32 * WARPS_PER_BLOCK](a, a_scale, w_packed, w_scale, out)


def ternary_byte_words():
    """``lut[b]``: the four ternary weights of packed byte ``b`` as four int8 in one int32 word
    (code 01 -> 1, 11 -> -1, 00 and the unused 10 -> 0; weight t in byte t, as DP4A reads them)."""
    codes = (np.arange(256)[:, None] >> (2 * np.arange(4))) & 3
    weights = np.where(codes == 1, 1, np.where(codes == 3, -1, 0)).astype(np.int8)
    return np.ascontiguousarray(weights).view(np.int32).reshape(256)


_device_lut = {}


def ternary_lut_device():
    """``ternary_byte_words()`` on the GPU, made once per process."""
    if "lut" not in _device_lut:
        _device_lut["lut"] = cuda.to_device(ternary_byte_words())
    return _device_lut["lut"]


def activation_words(a, words_multiple: int = 1):
    """Device int8 activations (M, K) read as int32 words (M, ceil(K / 4)): word j holds
    a[m, 4j..4j+3], the four activations that byte j of a packed ternary row multiplies. No copy when
    K is a multiple of 4 (of ``4 * words_multiple``); otherwise a zero-padded copy (through the host:
    the check's ragged shapes, never the timed ones)."""
    if a.shape[1] % (4 * words_multiple) == 0 and a.is_c_contiguous():
        return a.view(np.int32)
    return cuda.to_device(as_words(pad_cols(a.copy_to_host(), 4 * words_multiple)))


def weight_words(w_packed):
    """Packed ternary weights (N, ceil(K / 4)) bytes read as uint32 words (N, ceil(K / 16)): sixteen
    codes per word, byte q of word w being byte 4w + q of the row. A zero-padded copy (codes 00)
    when a row is not a whole number of words (the check's ragged shapes)."""
    if w_packed.shape[1] % 4 == 0 and w_packed.is_c_contiguous():
        return w_packed.view(np.uint32)
    return cuda.to_device(np.ascontiguousarray(pad_cols(w_packed.copy_to_host(), 4)).view(np.uint32))


@cuda.jit
def ternary_gemm_dp4a(a_words, a_scale, w_packed, w_scale, out, lut):
    """One warp per output ``(m, n)``, four codes per instruction: byte ``j`` of weight row ``n``
    becomes four int8 weights through the 256-word table (copied into shared memory by the block's
    256 threads), and one DP4A multiplies them with activation word ``j`` and adds the four
    products. Lanes take neighbouring bytes; the warp sums with shuffles. 256 threads per block."""
    table = cuda.shared.array(256, int32)
    table[cuda.threadIdx.x] = lut[cuda.threadIdx.x]
    cuda.syncthreads()
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // 32
    m = cuda.blockIdx.y
    if n >= out.shape[1] or m >= out.shape[0]:
        return
    acc = int32(0)
    for j in range(lane, w_packed.shape[1], 32):
        acc = dp4a(a_words[m, j], table[w_packed[n, j]], acc)
    acc = warp_sum(acc)
    if lane == 0:
        out[m, n] = float32(acc) * a_scale[m] * w_scale[0]


def launch_ternary_gemm_dp4a(out, a, a_scale, w_packed, w_scale):
    grid = (-(-out.shape[1] // WARPS_PER_BLOCK), out.shape[0])
    ternary_gemm_dp4a[grid, 32 * WARPS_PER_BLOCK](activation_words(a), a_scale, w_packed, w_scale, out,
                                                  ternary_lut_device())


ROWS = 4  # ternary_gemm_rows4: activation rows per pass of the weights


@cuda.jit
def ternary_gemm_rows4(a_words, a_scale, w_words, w_scale, out, lut):
    """``ternary_gemm_dp4a`` with each weight read once for four rows ``m``: a warp per weight row
    ``n`` and rows ``4 * blockIdx.y ..`` ``+ 3``; a lane loads a uint32 of the row (sixteen codes),
    decodes each byte once and runs its DP4A against the four rows' activation words, four
    accumulators in registers. ``a_words`` must cover ``4 * w_words.shape[1]`` words per row."""
    table = cuda.shared.array(256, int32)
    table[cuda.threadIdx.x] = lut[cuda.threadIdx.x]
    cuda.syncthreads()
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // 32
    m0 = cuda.blockIdx.y * ROWS
    rows = out.shape[0]
    if n >= out.shape[1]:
        return
    # Rows past M read row m0 again (it exists) and are never written: no branch in the loop.
    r1 = m0 + 1 if m0 + 1 < rows else m0
    r2 = m0 + 2 if m0 + 2 < rows else m0
    r3 = m0 + 3 if m0 + 3 < rows else m0
    acc0 = int32(0)
    acc1 = int32(0)
    acc2 = int32(0)
    acc3 = int32(0)
    for w in range(lane, w_words.shape[1], 32):
        word = w_words[n, w]
        for q in range(4):
            wt = table[(word >> (8 * q)) & 0xFF]
            j = 4 * w + q
            acc0 = dp4a(a_words[m0, j], wt, acc0)
            acc1 = dp4a(a_words[r1, j], wt, acc1)
            acc2 = dp4a(a_words[r2, j], wt, acc2)
            acc3 = dp4a(a_words[r3, j], wt, acc3)
    acc0, acc1, acc2, acc3 = warp_sum(acc0), warp_sum(acc1), warp_sum(acc2), warp_sum(acc3)
    if lane == 0:
        s = w_scale[0]
        out[m0, n] = float32(acc0) * a_scale[m0] * s
        if m0 + 1 < rows:
            out[m0 + 1, n] = float32(acc1) * a_scale[m0 + 1] * s
        if m0 + 2 < rows:
            out[m0 + 2, n] = float32(acc2) * a_scale[m0 + 2] * s
        if m0 + 3 < rows:
            out[m0 + 3, n] = float32(acc3) * a_scale[m0 + 3] * s


def launch_ternary_gemm_rows4(out, a, a_scale, w_packed, w_scale):
    grid = (-(-out.shape[1] // WARPS_PER_BLOCK), -(-out.shape[0] // ROWS))
    ternary_gemm_rows4[grid, 32 * WARPS_PER_BLOCK](activation_words(a, 4), a_scale, weight_words(w_packed), w_scale,
                                                   out, ternary_lut_device())


# --- 05.5's quantizers with 16-byte loads (the notebook's exercises 5 and 6; the probe times them) ---


@cuda.jit
def abs_sum_x4(x, out):
    """:func:`abs_sum` with 16-byte loads (x.size a multiple of 4), four a block apart in flight."""
    acc = float64(0.0)
    nb = uint64(cuda.blockDim.x)
    stride = uint64(cuda.gridDim.x) * uint64(4) * nb
    nq = uint64(x.size) >> uint64(2)
    j = uint64(cuda.blockIdx.x) * (uint64(4) * nb) + uint64(cuda.threadIdx.x)
    while j < nq:
        for k in range(4):
            jk = j + uint64(k) * nb
            if jk < nq:
                a0, a1, a2, a3 = load4(x, uint64(4) * jk)
                acc += (float64(abs(a0)) + float64(abs(a1))) + (float64(abs(a2)) + float64(abs(a3)))
        j += stride
    total = block_sum_f64(acc)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


@cuda.jit(device=True, forceinline=True)
def ternary_code(v, s):
    """clamp(rint(v / s), -1, 1) as a 2-bit code (+1 -> 01, 0 -> 00, -1 -> 11)."""
    return round_clamp_fadd(v / s, float32(-1.0), float32(1.0)) & 3


@cuda.jit
def ternary_pack_x16(w, abs_total, packed32, scale_out):
    """Sixteen weights per thread (four 16-byte loads) to one 4-byte word of codes: w flat, its
    rows a multiple of 16 long, so word g of the flat codes is word g of the packed rows."""
    g = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    mean = float32(abs_total[0] / float64(w.size))
    s = mean if mean > float32(0.0) else float32(1.0)
    if g == uint64(0):
        scale_out[0] = s
    if g >= uint64(packed32.size):
        return
    v = cuda.local.array(16, float32)
    for k in range(4):
        v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3] = load4(w, uint64(16) * g + uint64(4 * k))
    word = uint32(0)
    for t in range(16):
        word |= uint32(ternary_code(v[t], s)) << uint32(2 * t)
    packed32[g] = word


def launch_abs_sum_x4(total, x):
    """``total[0] = sum |x|`` (float64) with 16-byte loads on a persistent grid: x.size a multiple of 4."""
    flat = x.reshape(x.size)
    if flat.size % 4:
        raise KernelLabArgumentError(f"abs_sum_x4 reads whole groups of four: {flat.size} values is not a multiple "
                                     "of 4 (abs_sum takes any size)")
    zero_first[1, 1](total)
    abs_sum_x4[max(1, min(persistent_blocks(flat.size), -(-(flat.size // 4) // (4 * THREADS)))), THREADS](flat, total)


def launch_ternary_quantize_fast(packed, scale, w, total=None):
    """The fast form of :func:`launch_ternary_quantize` (same arguments, same bits): the sum of |w|
    with 16-byte loads, then sixteen weights per thread. Rows a multiple of 16 long; others take
    the simple kernels."""
    if w.shape[w.ndim - 1] % 16 or not (w.is_c_contiguous() and packed.is_c_contiguous()):
        return launch_ternary_quantize(packed, scale, w, total)
    total = cuda.device_array(1, np.float64) if total is None else total
    flat = w.reshape(w.size)
    launch_abs_sum_x4(total, flat)
    words = packed.reshape(packed.size).view(np.uint32)
    ternary_pack_x16[max(1, -(-words.size // THREADS)), THREADS](flat, total, words, scale)


def launch_ternary_quantize(packed, scale, w, total=None):
    total = cuda.device_array(1, np.float64) if total is None else total
    zero_first[1, 1](total)
    abs_sum[persistent_blocks(w.size), THREADS](w.reshape(w.size), total)
    ternary_quantize_pack[(-(-w.shape[0] // 8), -(-packed.shape[1] // 32)), (8, 32)](w, total, packed, scale)


def launch_int8_rows(q, scales, x):
    int8_rows_quantize[-(-x.shape[0] // 4), 128](x, q, scales)


# Per-token INT8, the fast form: a team of threads per row sized to hold it in registers (16 values
# a thread, 03.3's rule), the absmax by shuffles and shared memory, then one read of the row.

ROWS_VALUES = 16


@functools.cache
def _int8_rows_team(threads: int, quads: int):
    warps = max(1, threads // 32)

    @cuda.jit
    def int8_rows_team(x, q32, scales):
        part = cuda.shared.array(32, float32)
        v = cuda.local.array((quads, 4), float32)
        r = uint64(cuda.blockIdx.x)
        t = uint64(cuda.threadIdx.x)
        nq = uint64(x.shape[1]) >> uint64(2)
        m = float32(0.0)
        for k in range(quads):  # every load first
            j = t + uint64(threads * k)
            if j < nq:
                v[k, 0], v[k, 1], v[k, 2], v[k, 3] = load4(x, (r, uint64(4) * j))
                m = max(m, max(max(abs(v[k, 0]), abs(v[k, 1])), max(abs(v[k, 2]), abs(v[k, 3]))))
        m = warp_max_f32(m)
        if warps > 1:
            if (t & uint64(31)) == uint64(0):
                part[t >> uint64(5)] = m
            cuda.syncthreads()
            m = float32(0.0)
            for i in range(warps):
                m = max(m, part[i])
        s = m / float32(127.0) if m > float32(0.0) else float32(1.0)
        if t == uint64(0):
            scales[r] = s
        for k in range(quads):
            j = t + uint64(threads * k)
            if j < nq:
                q32[r, j] = pack4(code8_fadd(v[k, 0], s), code8_fadd(v[k, 1], s), code8_fadd(v[k, 2], s),
                                  code8_fadd(v[k, 3], s))
    return int8_rows_team


def launch_int8_rows_fast(q, scales, x):
    """The fast form of :func:`launch_int8_rows` (same arguments, same bits) for rows a multiple of
    4 long and at most 16384 values, q as wide as x; the simple kernel otherwise."""
    rows, cols = x.shape
    if cols % 4 or q.shape[1] != cols or cols > 1024 * ROWS_VALUES or not q.is_c_contiguous():
        return launch_int8_rows(q, scales, x)
    threads = min(1024, max(32, 1 << (max(1, -(-cols // ROWS_VALUES)) - 1).bit_length()))
    kernel = _int8_rows_team(threads, -(-(cols // 4) // threads))
    kernel[rows, threads](x, q.view(np.int32), scales)


def launch_ternary_gemm(out, a, a_scale, w_packed, w_scale):
    ternary_gemm[(-(-out.shape[1] // 16), -(-out.shape[0] // 8)), (16, 8)](a, a_scale, w_packed, w_scale, out)


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


# The same GEMM on module 02's warp-tiled, double-buffered kernel (kl.sgemm, ``precision="dp4a"``):
# words of four int8 along K take the place of floats, a DP4A the place of an FFMA (sgemm.py's dp4a
# ``compute_k``, which 05.6's exercise 3 writes). Its B operand is K-major, (K/4, N) words, as module
# 02's B is (K, N): ``k_major_words(b32)`` makes it once.
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
    from .. import sgemm

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


# --- 05.6 W4A8: the kernels live in kernel_lab.quant.w4a8 (imported above); the dispatcher -----

def launch_w4a8_fast(out, a32, a_scale, w32, w_scales):
    """The package's W4A8. One activation row: the words-outer DP4A form with two weight rows a warp
    (65% of the copy roofline on a 14336 x 4096 layer on an H100, a little ahead of the tensor
    cores there). More: the int8 tensor cores (``w4a8_mma.launch_w4a8_mma``: 61-64% at M = 2 to 8,
    where the DP4A form falls from 62% to 35%); the tensor-core launcher itself hands rows that are
    not whole groups of 128, and GPUs without int8 ``mma``, back to the DP4A form."""
    if out.shape[0] == 1:
        return launch_w4a8_gemm_words(out, a32, a_scale, w32, w_scales)
    from .w4a8_mma import launch_w4a8_mma  # it imports this module's unpack

    return launch_w4a8_mma(out, a32, a_scale, w32, w_scales)


# --- host helpers: padding K and reading int8 rows as words -------------------------------------

def pad_cols(x, multiple):
    """Zero-pad the last axis of a host array to a multiple of ``multiple``."""
    x = np.atleast_2d(x)
    extra = (-x.shape[1]) % multiple
    return np.pad(x, ((0, 0), (0, extra))) if extra else np.ascontiguousarray(x)


def as_words(x_int8):
    """A C-contiguous int8 (rows, 4w) host array read as int32 words (rows, w), no copy."""
    x = np.ascontiguousarray(x_int8, dtype=np.int8)
    if x.shape[-1] % 4:
        raise KernelLabArgumentError(f"{x.shape[-1]} int8 values per row is not a whole number of 32-bit words: "
                                     "pad K to a multiple of 4 (kernel_lab.quant.kernels.pad_cols)")
    return x.view(np.int32)


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
