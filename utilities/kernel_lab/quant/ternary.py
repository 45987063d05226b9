"""Notebook 05.5's kernels: ternary weights (BitNet b1.58: {-1, 0, 1} times one absmean scale, four
2-bit codes a byte), per-token INT8 activations, and GEMMs without multiplications.

The learner writes these in ``solutions/05-quantization/05.5-ternary.ipynb``; each kernel here with a
namesake there is the same code (tests/test_package_copies.py). The package keeps them, with the
fast forms (16-byte loads, a word of sixteen codes a thread, a team of threads per activation row,
DP4A through a 256-word table), for ``scripts/gpu_module05_integer_probe.py``, the ternary probe and
the tests. The format is defined in :mod:`kernel_lab.quant.integer`; the rounding by one float
addition and the INT8 codes come from 05.1's :mod:`.int8`.
"""

from __future__ import annotations

import functools

import numpy as np

from ..reductions_gemm.scans import THREADS, block_sum_f64, persistent_blocks, zero_first
from ..validate import KernelLabArgumentError
from ..vector_loads import load4
from ..device.dp4a import dp4a
from .integer import AMAX_FLOOR, as_words, pad_cols
from .int8 import code8_fadd, pack4, round_clamp_fadd
from .warp import warp_max_f32, warp_sum

from numba import cuda, float32, float64, int8, int32, uint8, uint32, uint64  # noqa: E402  (after kernel_lab)


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
    s = max(m, float32(AMAX_FLOOR)) / float32(127.0) if m > float32(0.0) else float32(1.0)  # integer.AMAX_FLOOR
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
        s = max(m, float32(AMAX_FLOOR)) / float32(127.0) if m > float32(0.0) else float32(1.0)
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
