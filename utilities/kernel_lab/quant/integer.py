"""Integer quantization, in NumPy: the references for module 05's integer formats.

Each ``*_roundtrip`` function quantizes and dequantizes, so that every format of the module can be
compared on the same data (error against bits per value). Rounding is to nearest, ties to even
(``np.rint``), as the kernels do with ``round``-free integer arithmetic or ``rint``.
"""

from __future__ import annotations

import numpy as np

from ..validate import KernelLabArgumentError

# The floor of every amax (and range width) from which a scale is derived: float32's smallest normal.
# A tensor whose largest magnitude is a float32 subnormal has amax / 127 (/ 7, / 255, / 448, / 2688)
# rounded to 0 or to a subnormal of a few bits: quantizing then divides by 0 (inf and NaN codes; the
# simulator's round() raises OverflowError) or, for NVFP4, the tensor scale's 0 is replaced by 1 and
# the whole tensor becomes zeros. Production quantizers clamp amax below at an epsilon before dividing
# (torchao's float8 1e-12, BitNet's 1e-5, Transformer Engine's encode scale at float32's largest);
# this floor is the smallest that keeps every scale nonzero, so a tensor whose amax is a normal
# float32 quantizes exactly as without it, and a subnormal one keeps the format's error bound in
# absolute terms: |x - x_hat| <= half of (AMAX_FLOOR / qmax). An amax of 0 keeps its own rule (scale 1),
# so an all-zero tensor still gives zeros. Ternary's absmean needs no floor: the scale is the mean
# itself (no division), a subnormal mean is a valid divisor, and a mean that rounds to 0 takes the
# zero rule (every weight is then below 2^-149 times the number of weights).
AMAX_FLOOR = np.float32(2.0 ** -126)


def floored(amax):
    """``max(amax, AMAX_FLOOR)`` where amax > 0, 0 where it is 0 (float32; any shape)."""
    a = np.asarray(amax, np.float32)
    return np.where(a > 0, np.maximum(a, AMAX_FLOOR), a).astype(np.float32)


def int8_absmax_scale(x, axis=None):
    """The symmetric INT8 scale: ``max(absmax, AMAX_FLOOR) / 127`` (per tensor, or along ``axis``); 1
    where all zero."""
    amax = np.max(np.abs(np.asarray(x, np.float64)), axis=axis, keepdims=axis is not None)
    return np.where(amax > 0, np.maximum(amax, float(AMAX_FLOOR)) / 127.0, 1.0)


def int8_absmax_roundtrip(x, axis=None):
    """Symmetric INT8: q = rint(x / scale) in [-127, 127], back to x_hat = q * scale."""
    x = np.asarray(x, np.float64)
    scale = int8_absmax_scale(x, axis)
    return np.clip(np.rint(x / scale), -127, 127) * scale


def int4_group_roundtrip(x, group=128):
    """Symmetric INT4 per group of ``group`` consecutive values along the last axis (the last
    group may be shorter): scale = absmax / 7, q in [-8, 7] (-8 is never produced)."""
    x = np.asarray(x, np.float64)
    flat = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    out = np.empty_like(flat)
    for start in range(0, flat.shape[1], group):
        g = flat[:, start:start + group]
        amax = np.max(np.abs(g), axis=1, keepdims=True)
        scale = np.where(amax > 0, np.maximum(amax, float(AMAX_FLOOR)) / 7.0, 1.0)
        out[:, start:start + group] = np.clip(np.rint(g / scale), -8, 7) * scale
    return out.reshape(x.shape)


def ternary_absmean_roundtrip(w):
    """BitNet b1.58 weights: scale = mean |w|, q = clip(rint(w / scale), -1, 1), w_hat = q * scale
    (no floor: see :data:`AMAX_FLOOR`)."""
    w = np.asarray(w, np.float64)
    scale = np.mean(np.abs(w))
    scale = scale if scale > 0 else 1.0
    return np.clip(np.rint(w / scale), -1, 1) * scale


# ================================================================================================
# Bit-exact references: what the kernels of module 05 must produce, in the kernels' own float32
# arithmetic. Every format here is defined by these functions (scale, rounding, range, packing).

INT4_GROUP = 128  # values per INT4 scale (along the last axis; the last group of a row may be shorter)


def rint_f32(v):
    """Round to nearest, ties to even, of float32 values (what ``round()`` does in a kernel)."""
    return np.rint(np.asarray(v, np.float32))


def int8_scale_f32(amax):
    """The symmetric INT8 scale in float32: ``max(float32(amax), AMAX_FLOOR) / 127`` (1 where amax is 0)."""
    amax = floored(amax)
    return np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)


def int8_quantize_f32(x, scale):
    """``q = clamp(rint(x / scale), -127, 127)`` in float32, as int8: the symmetric INT8 format
    (-128 is never produced, so that the range is symmetric and ``-q`` never overflows)."""
    x = np.asarray(x, np.float32)
    return np.clip(rint_f32(x / np.asarray(scale, np.float32)), -127, 127).astype(np.int8)


def int8_dequantize_f32(q, scale):
    """``x_hat = float32(q) * scale``."""
    return (np.asarray(q).astype(np.float32) * np.asarray(scale, np.float32)).astype(np.float32)


def affine_params_f32(lo, hi):
    """Asymmetric UINT8 parameters from a calibrated range ``[lo, hi]`` (per tensor or per channel).

    ``scale = max(hi - lo, AMAX_FLOOR) / 255`` (1 where the range is empty) and ``zero_point = clamp(rint(-lo / scale),
    0, 255)``: the integer that stands for 0.0. A range that does not contain 0 (all-positive after a
    ReLU, say) gives ``-lo / scale`` outside [0, 255]: the zero point must be clamped to stay a uint8.
    """
    lo = np.asarray(lo, np.float32)
    hi = np.asarray(hi, np.float32)
    width = floored((hi - lo).astype(np.float32))
    scale = np.where(width > 0, width / np.float32(255), np.float32(1)).astype(np.float32)
    zp = np.clip(rint_f32(-lo / scale), 0, 255).astype(np.int32)
    return scale, zp


def affine_quantize_f32(x, scale, zero_point):
    """``q = clamp(rint(x / scale) + zero_point, 0, 255)`` as uint8 (broadcasting per channel)."""
    x = np.asarray(x, np.float32)
    v = rint_f32(x / np.asarray(scale, np.float32)) + np.asarray(zero_point, np.float32)
    return np.clip(v, 0, 255).astype(np.uint8)


def affine_dequantize_f32(q, scale, zero_point):
    """``x_hat = float32(q - zero_point) * scale``."""
    d = (np.asarray(q, np.int32) - np.asarray(zero_point, np.int32)).astype(np.float32)
    return (d * np.asarray(scale, np.float32)).astype(np.float32)


def int4_group_scales_f32(x, group=INT4_GROUP):
    """Per-group INT4 scales of a 2-D ``x`` (rows, cols): ``max(absmax, AMAX_FLOOR) / 7`` in float32 (1
    where all zero),
    shape (rows, ceil(cols / group))."""
    x = np.atleast_2d(np.asarray(x, np.float32))
    groups = -(-x.shape[1] // group)
    amax = np.zeros((x.shape[0], groups), np.float32)
    for g in range(groups):
        amax[:, g] = np.max(np.abs(x[:, g * group:(g + 1) * group]), axis=1)
    amax = floored(amax)
    return np.where(amax > 0, amax / np.float32(7), np.float32(1)).astype(np.float32)


def int4_quantize_f32(x, scales, group=INT4_GROUP):
    """``q = clamp(rint(x / scale_of_its_group), -8, 7)`` as int8 values (not yet packed)."""
    x = np.atleast_2d(np.asarray(x, np.float32))
    s = np.repeat(scales, group, axis=1)[:, : x.shape[1]]
    return np.clip(rint_f32(x / s), -8, 7).astype(np.int8)


def int4_pack(q):
    """Pack int4 values (int8 in [-8, 7], shape (rows, cols)) two per byte: **element 2j in the low
    nibble of byte j, element 2j+1 in the high nibble**, each as 4-bit two's complement. An odd
    ``cols`` leaves the last byte's high nibble 0. Returns uint8 (rows, ceil(cols / 2))."""
    q = np.atleast_2d(np.asarray(q, np.int8))
    rows, cols = q.shape
    padded = np.zeros((rows, 2 * (-(-cols // 2))), np.uint8)
    padded[:, :cols] = q.astype(np.uint8) & 0x0F
    return (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)


def int4_unpack(packed, cols):
    """The inverse of :func:`int4_pack`: sign-extended int8 values, shape (rows, cols)."""
    p = np.atleast_2d(np.asarray(packed, np.uint8))
    nib = np.empty((p.shape[0], 2 * p.shape[1]), np.int16)
    nib[:, 0::2] = p & 0x0F
    nib[:, 1::2] = p >> 4
    nib = np.where(nib >= 8, nib - 16, nib)  # sign extension: 4-bit 1xxx is negative
    return nib[:, :cols].astype(np.int8)


def int4_dequantize_f32(packed, scales, cols, group=INT4_GROUP):
    q = int4_unpack(packed, cols).astype(np.float32)
    s = np.repeat(np.atleast_2d(scales), group, axis=1)[:, :cols]
    return (q * s).astype(np.float32)


def int8_per_row_f32(x):
    """Per-token (per-row) symmetric INT8 of activations: (q int8 (rows, cols), scale float32 (rows,))."""
    x = np.atleast_2d(np.asarray(x, np.float32))
    scale = int8_scale_f32(np.max(np.abs(x), axis=1))
    return int8_quantize_f32(x, scale[:, None]), scale


def ternary_scale_f32(w):
    """BitNet b1.58's weight scale: ``mean |w|`` (float64 sum, then float32), 1 where it is 0 (no floor:
    see :data:`AMAX_FLOOR`)."""
    m = np.float32(np.mean(np.abs(np.asarray(w, np.float64))))
    return np.float32(m if m > 0 else 1.0)


def ternary_quantize_f32(w, scale):
    """``q = clamp(rint(w / scale), -1, 1)`` as int8."""
    w = np.asarray(w, np.float32)
    return np.clip(rint_f32(w / np.float32(scale)), -1, 1).astype(np.int8)


def ternary_pack(q):
    """Four ternary values per byte, 2-bit two's complement (``+1 -> 01``, ``0 -> 00``, ``-1 -> 11``;
    ``10`` unused): element 4j+t of a row in bits 2t..2t+1 of byte j (the first element in the lowest
    bits, as for INT4). Returns uint8 (rows, ceil(cols / 4)); the padding codes are 0."""
    q = np.atleast_2d(np.asarray(q, np.int8))
    rows, cols = q.shape
    padded = np.zeros((rows, 4 * (-(-cols // 4))), np.uint8)
    padded[:, :cols] = q.astype(np.uint8) & 0x03
    return (padded[:, 0::4] | (padded[:, 1::4] << 2) | (padded[:, 2::4] << 4) | (padded[:, 3::4] << 6)).astype(np.uint8)


def ternary_unpack(packed, cols):
    p = np.atleast_2d(np.asarray(packed, np.uint8))
    codes = np.stack([(p >> (2 * t)) & 0x03 for t in range(4)], axis=-1).reshape(p.shape[0], -1).astype(np.int16)
    return np.where(codes >= 2, codes - 4, codes)[:, :cols].astype(np.int8)


# --- integer GEMMs: exact integer sums, float64 scaling ---------------------------------------------

def int8_gemm_exact(a, b_t):
    """``a (M, K) int8 @ b_t (N, K).T`` in exact integers (int64)."""
    return np.asarray(a, np.int64) @ np.asarray(b_t, np.int64).T


def w8a8_reference(a, a_scale, b_t, b_scale):
    """W8A8 with a dequantizing epilogue: ``C[m, n] = a_scale[m] * b_scale[n] * sum_k a[m,k] b[n,k]``."""
    acc = int8_gemm_exact(a, b_t).astype(np.float64)
    return acc * np.asarray(a_scale, np.float64).reshape(-1, 1) * np.asarray(b_scale, np.float64).reshape(1, -1)


def w4a8_reference(a, a_scale, w_q, w_scales, group=INT4_GROUP):
    """W4A8: ``C[m, n] = a_scale[m] * sum_g w_scale[n, g] * sum_{k in g} a[m, k] w[n, k]`` (int4 ``w_q``
    unpacked, int8 ``a``), in float64; also the magnitude ``|a||w|`` scaled the same way."""
    a = np.asarray(a, np.int64)
    w = np.asarray(w_q, np.int64)
    out = np.zeros((a.shape[0], w.shape[0]))
    mag = np.zeros_like(out)
    for g in range(w_scales.shape[1]):
        sl = slice(g * group, (g + 1) * group)
        s = np.asarray(w_scales[:, g], np.float64)[None, :]
        out += (a[:, sl] @ w[:, sl].T) * s
        mag += (np.abs(a[:, sl]) @ np.abs(w[:, sl]).T) * s
    sa = np.asarray(a_scale, np.float64)[:, None]
    return out * sa, mag * sa


def error_report(x, x_hat, *, bits_per_value=None) -> dict:
    """Scale-free error figures of a round trip: max and mean absolute error, SNR in dB
    (``10 log10(sum x^2 / sum (x - x_hat)^2)``), and the memory saved against float32."""
    x = np.asarray(x, np.float64)
    e = x - np.asarray(x_hat, np.float64)
    noise = float(np.sum(e * e))
    snr = float("inf") if noise == 0 else 10 * np.log10(float(np.sum(x * x)) / noise)
    out = {"max_error": float(np.max(np.abs(e))), "mean_error": float(np.mean(np.abs(e))), "snr_db": snr}
    if bits_per_value is not None:
        out["memory_saved"] = 1 - bits_per_value / 32
    return out


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
                                     "pad K to a multiple of 4 (kernel_lab.quant.integer.pad_cols)")
    return x.view(np.int32)
