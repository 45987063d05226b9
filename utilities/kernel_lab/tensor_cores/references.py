"""Float64 NumPy references for module 06: what each kernel must compute, written plainly.

Every function takes NumPy arrays and returns float64 (or exact int64) results; the checks compare
kernels against them with the tolerance of the kernel's number format (``kernel_lab.check``).
Integer formats are compared exactly, so the integer references reproduce the kernels' rounding
rules bit for bit (documented on each function).
"""

from __future__ import annotations

import math

import numpy as np

from ..validate import KernelLabArgumentError


def gemm(a, b):
    """``A @ B`` for 2-D or batched 3-D operands: float64 for floats, exact int64 for integers."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def round_to_tf32(x):
    """float32 values rounded to tf32 (10 mantissa bits), nearest with ties away from zero, as the
    course's loaders do it: add half a unit of the 13 dropped bits, then clear them."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return bits.view(np.float32)


def linear(acc, alpha, beta, c, gamma, bias):
    """``alpha * acc + beta * C + gamma * bias[row]`` (bias: one value per row)."""
    acc = np.asarray(acc, dtype=np.float64)
    return alpha * acc + beta * np.asarray(c, dtype=np.float64) + gamma * np.asarray(bias, np.float64)[..., :, None]


def gelu_tanh(x):
    """GELU in its tanh form (the one cuBLASLt's GELU epilogues use)."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": gelu_tanh,
}


def bias_activation(acc, bias, activation: str):
    """``f(acc + bias[row])``."""
    if activation not in ACTIVATIONS:
        raise KernelLabArgumentError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    x = np.asarray(acc, dtype=np.float64) + np.asarray(bias, dtype=np.float64)[..., :, None]
    return ACTIVATIONS[activation](x)


def quantize(acc, scale: float, zero_point: int):
    """int32 accumulators to int8: ``clamp(floor(acc * scale + 0.5) + zero_point, -128, 127)``.

    Rounds half up (towards +inf), in float64, exactly as the kernel's epilogue: results match bit
    for bit.
    """
    if not -128 <= int(zero_point) <= 127:
        raise KernelLabArgumentError(f"zero_point must be in [-128, 127], got {zero_point}")
    q = np.floor(np.asarray(acc, dtype=np.float64) * float(scale) + 0.5) + int(zero_point)
    return np.clip(q, -128, 127).astype(np.int64)


def dequantize(q, scale: float, zero_point: int):
    """The real number an int8 code stands for: ``(q - zero_point) / scale``."""
    return (np.asarray(q, dtype=np.float64) - zero_point) / scale


def row_softmax(x, alpha: float = 1.0):
    """``softmax(alpha * x)`` along the last axis, computed stably (the row maximum subtracted)."""
    z = alpha * np.asarray(x, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def conv_output_shape(h, w, r, s, padding):
    return h + 2 * padding - r + 1, w + 2 * padding - s + 1


def im2col(x, r: int, s: int, padding: int = 0):
    """The (N*OH*OW, C*R*S) matrix whose row (n, oh, ow) lists the inputs under the filter at that
    output pixel, in (c, r, s) order; zeros where the filter hangs over the padded border."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise KernelLabArgumentError(f"x must be (N, C, H, W), got shape {x.shape}")
    n, c, h, w = x.shape
    oh, ow = conv_output_shape(h, w, r, s, padding)
    if oh < 1 or ow < 1:
        raise KernelLabArgumentError(f"a {r}x{s} filter does not fit a {h}x{w} image with padding {padding}")
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.empty((n, oh, ow, c, r, s), dtype=x.dtype)
    for i in range(r):
        for j in range(s):
            cols[:, :, :, :, i, j] = xp[:, :, i:i + oh, j:j + ow].transpose(0, 2, 3, 1)
    return cols.reshape(n * oh * ow, c * r * s)


def im2col_nhwc(x, r: int, s: int, padding: int = 0):
    """:func:`im2col` of a channels-last (N, H, W, C) image, its columns in (r, s, c) order, channel
    fastest: eight consecutive columns are then eight consecutive channels of one input pixel, 16
    contiguous bytes in fp16 when C is a multiple of 8 (06.3's chunked implicit GEMM)."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise KernelLabArgumentError(f"x must be (N, H, W, C), got shape {x.shape}")
    n, h, w, c = x.shape
    cols = im2col(x.transpose(0, 3, 1, 2), r, s, padding)  # (c, r, s) order
    return np.ascontiguousarray(cols.reshape(-1, c, r, s).transpose(0, 2, 3, 1)).reshape(cols.shape[0], r * s * c)


def filters_rsc(wgt):
    """Filters (K, C, R, S) as the (R*S*C, K) matrix that multiplies :func:`im2col_nhwc`."""
    wgt = np.asarray(wgt)
    k = wgt.shape[0]
    return np.ascontiguousarray(wgt.transpose(2, 3, 1, 0).reshape(-1, k))


def conv2d(x, wgt, padding: int = 0):
    """Direct stride-1 cross-correlation (what deep learning calls convolution), NCHW x KCRS -> NKHW,
    in float64; loops over the filter taps, not over im2col, so that it checks im2col too."""
    x = np.asarray(x, dtype=np.float64)
    wgt = np.asarray(wgt, dtype=np.float64)
    n, c, h, w = x.shape
    k, c2, r, s = wgt.shape
    if c != c2:
        raise KernelLabArgumentError(f"x has {c} channels but the filters expect {c2}")
    oh, ow = conv_output_shape(h, w, r, s, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = np.zeros((n, k, oh, ow))
    for i in range(r):
        for j in range(s):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + oh, j:j + ow], wgt[:, :, i, j])
    return out


def conv_as_gemm_output(gemm_out, n, k, oh, ow):
    """The GEMM of im2col(x) (M = N*OH*OW rows) with the filters as (C*R*S, K) gives (N*OH*OW, K);
    as an NKHW tensor: reshape and move K in front."""
    return np.asarray(gemm_out).reshape(n, oh, ow, k).transpose(0, 3, 1, 2)


def pack_int4(values):
    """Pack signed 4-bit integers (-8..7) two per byte along the last axis: element 2j in the low
    nibble, 2j+1 in the high nibble, two's complement. An odd last axis is padded with a zero."""
    v = np.asarray(values)
    if v.dtype.kind not in "iu":
        raise KernelLabArgumentError(f"pack_int4 takes integers, got {v.dtype}")
    if v.size and (v.min() < -8 or v.max() > 7):
        raise KernelLabArgumentError(f"int4 values must lie in [-8, 7], got [{v.min()}, {v.max()}]")
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros(v.shape[:-1] + (1,), dtype=v.dtype)], axis=-1)
    nib = (v.astype(np.int16) & 0xF).astype(np.uint8)
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed, n: int | None = None):
    """Inverse of :func:`pack_int4`: int8 values, ``n`` of them along the last axis (default all)."""
    p = np.asarray(packed, dtype=np.uint8)
    lo = (p & 0xF).astype(np.int16)
    hi = (p >> 4).astype(np.int16)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.int16)
    out[..., 0::2] = lo
    out[..., 1::2] = hi
    out = np.where(out >= 8, out - 16, out).astype(np.int8)
    return out if n is None else out[..., :n]


def batched_gemm(a, b):
    """``C[i] = A[i] @ B[i]``; an operand with batch 1 is shared by every batch (broadcast)."""
    return gemm(a, b)


def gemm_flops(m, n, k, batch=1) -> int:
    """2*M*N*K: one multiply and one add per term."""
    return 2 * m * n * k * batch


def gemm_bytes(m, n, k, in_bytes, out_bytes, batch=1) -> float:
    """The fewest bytes a GEMM moves through device memory: A and B read once, C written once."""
    return batch * ((m * k + k * n) * in_bytes + m * n * out_bytes)
