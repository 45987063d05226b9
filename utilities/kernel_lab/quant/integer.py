"""Integer quantization, in NumPy: the references for module 05's integer formats.

Each ``*_roundtrip`` function quantizes and dequantizes, so that every format of the module can be
compared on the same data (error against bits per value). Rounding is to nearest, ties to even
(``np.rint``), as the kernels do with ``round``-free integer arithmetic or ``rint``.
"""

from __future__ import annotations

import numpy as np


def int8_absmax_scale(x, axis=None):
    """The symmetric INT8 scale: absmax / 127 (per tensor, or along ``axis``); 1 where all zero."""
    amax = np.max(np.abs(np.asarray(x, np.float64)), axis=axis, keepdims=axis is not None)
    return np.where(amax > 0, amax / 127.0, 1.0)


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
        scale = np.where(amax > 0, amax / 7.0, 1.0)
        out[:, start:start + group] = np.clip(np.rint(g / scale), -8, 7) * scale
    return out.reshape(x.shape)


def ternary_absmean_roundtrip(w):
    """BitNet b1.58 weights: scale = mean |w|, q = clip(rint(w / scale), -1, 1), w_hat = q * scale."""
    w = np.asarray(w, np.float64)
    scale = np.mean(np.abs(w))
    scale = scale if scale > 0 else 1.0
    return np.clip(np.rint(w / scale), -1, 1) * scale
