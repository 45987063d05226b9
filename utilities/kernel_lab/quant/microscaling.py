"""Block-scaled 4- and 8-bit formats in NumPy: NVFP4, MXFP4 and MXFP8 (notebook 05.4).

A block format stores small elements and, per block of consecutive elements, one scale. The
element is what the GPU's tensor cores multiply; the scale brings each block into the element's
range. The rules implemented here, bit for bit what the kernels of
:mod:`kernel_lab.quant.float_kernels` compute:

**MX** (OCP Microscaling Formats (MX) Specification v1.0, 2023, section 6.3): blocks of 32, one
E8M0 scale ``X = 2**(code - 127)`` (code 255 is NaN; 0..254 cover 2**-127..2**127), with::

    code = clamp(floor(log2(amax)) - emax_elem + 127, 0, 254)      (0 when amax = 0)
    element_i = encode(x_i / X), rounded to nearest even, clamped to the element's largest value

``emax_elem`` is the exponent of the element format's largest value: 2 for E2M1 (6 = 1.5 * 2**2),
8 for E4M3 (448 = 1.75 * 2**8). The scale is rounded **down** to a power of two, so the block's
largest element lands in [2**emax, 2**(emax+1)): above the element's largest value (6 or 448) it
saturates, which is what the specification asks (it clamps rather than wasting a binade). MX needs no
floor of its own: the clamp at code 0 is the floor (the smallest scale E8M0 holds, 2**-127), so a
block of subnormals keeps a finite, nonzero scale, and there is no division (``x_i / X`` is an exact
``ldexp``); such a block's elements are multiples of the element's smallest step times 2**-127.

**NVFP4** (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025,
and the PTX ISA's ``.ue4m3`` block-scale type): blocks of 16 E2M1 elements, one E4M3 scale per
block, and one FP32 scale per tensor. In float32 arithmetic, in this order::

    ts      = max(amax_tensor, 2^-126) / (6 * 448)   (1 when amax_tensor = 0)
    s_code  = E4M3(amax_block / 6 / ts)          rounded to nearest even, saturating
    denom   = decode(s_code) * ts
    element = E2M1(x / denom)                    (0, sign kept, when denom = 0)
    x_hat   = decode(element) * denom

Dividing by ``6 * 448`` puts the largest block scale at E4M3's largest value, so no block scale
overflows; the floor 2^-126 (:data:`kernel_lab.quant.integer.AMAX_FLOOR`) keeps ``ts`` nonzero for a
tensor whose amax is a float32 subnormal (without it ``ts`` rounds to 0, is replaced by 1, and every
block scale and element is 0: the whole tensor flushed), and changes nothing for a normal amax; rounding the scale to nearest (not up) lets a block's largest element exceed 6 by up to
half an E4M3 step, where it saturates.

E2M1 codes are packed two per byte, element 2i in the low nibble (see ``float_kernels``). Inputs
must be finite: none of these formats defines what a NaN element does to its block here (the MX
specification sets the scale to NaN; these references do not model it).
"""

from __future__ import annotations

import numpy as np

from ..validate import KernelLabArgumentError
from . import fp8 as _fp8

NVFP4_BLOCK = 16
MX_BLOCK = 32
NVFP4_AMAX_DIVISOR = np.float32(6.0 * 448.0)
EMAX = {"E2M1": 2, "E4M3": 8}


def _f32(x):
    xp = _fp8._xp(x)
    x = xp.ascontiguousarray(xp.asarray(x, xp.float32)).ravel()
    if xp is np and not np.isfinite(x).all():
        raise KernelLabArgumentError("the block formats' references take finite inputs only (found inf or NaN)")
    return x


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    """x padded with zeros to whole blocks, shape (blocks, block)."""
    xp = _fp8._xp(x)
    nb = -(-x.size // block)
    pad = xp.zeros(nb * block, xp.float32)
    pad[: x.size] = x
    return pad.reshape(nb, block)


def pack_e2m1(codes) -> np.ndarray:
    """Two 4-bit codes per byte: element 2i in the low nibble, 2i+1 in the high one (0 if absent)."""
    xp = _fp8._xp(codes)
    c = xp.asarray(codes, xp.uint8) & 0xF
    if c.size % 2:
        c = xp.concatenate([c, xp.zeros(1, xp.uint8)])
    return (c[0::2] | (c[1::2] << 4)).astype(xp.uint8)


def unpack_e2m1(packed, n: int) -> np.ndarray:
    p = np.asarray(packed, np.uint8)
    out = np.empty(2 * p.size, np.uint8)
    out[0::2] = p & 0xF
    out[1::2] = p >> 4
    return out[:n]


# ------------------------------------------------------------------------------------------------
# NVFP4


def nvfp4_tensor_scale(amax):
    """``max(amax, 2^-126) / 2688`` in float32, 1 where amax is 0 (the floor: see the module's text)."""
    from .integer import AMAX_FLOOR

    xp = _fp8._xp(amax)
    if xp is not np:  # a CuPy scalar array: stay on the device
        a = amax.astype(xp.float32)
        ts = xp.where(a > 0, xp.maximum(a, xp.float32(AMAX_FLOOR)), a) / xp.float32(NVFP4_AMAX_DIVISOR)
        return xp.where(ts != 0, ts, xp.float32(1))
    a = np.float32(amax)
    ts = np.float32((np.maximum(a, AMAX_FLOOR) if a > 0 else a) / NVFP4_AMAX_DIVISOR)
    return ts if ts != 0 else np.float32(1)


def nvfp4_quantize(x, amax=None):
    """``(packed, scale_codes, amax)``: E2M1 codes packed two per byte, one E4M3 code per 16.
    (NumPy in, NumPy out; CuPy in, CuPy out: the probe's "composed from library calls" peer.)

    ``amax`` (the tensor's largest magnitude, from which the FP32 tensor scale follows) defaults to
    ``max |x|``."""
    x = _f32(x)
    xp = _fp8._xp(x)
    if amax is None:
        amax = xp.max(xp.abs(x)) if x.size else xp.float32(0)
    amax = xp.float32(amax) if xp is np else xp.asarray(amax, xp.float32)
    ts = nvfp4_tensor_scale(amax)
    blocks = _blocks(x, NVFP4_BLOCK)
    bamax = xp.max(xp.abs(blocks), axis=1)
    s_codes = _fp8.encode((bamax / xp.float32(6)) / ts, _fp8.E4M3, saturate=True)
    denom = (_fp8.decode(s_codes, _fp8.E4M3) * ts).astype(xp.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (blocks / denom[:, None]).astype(xp.float32)
    scaled = xp.where(denom[:, None] > 0, scaled, xp.copysign(xp.float32(0), blocks))
    codes = _fp8.encode(scaled, _fp8.E2M1, saturate=True).ravel()[: x.size]
    return pack_e2m1(codes), s_codes, amax


def nvfp4_dequantize(packed, scale_codes, amax, n: int) -> np.ndarray:
    ts = nvfp4_tensor_scale(amax)
    denom = (_fp8.decode(scale_codes, _fp8.E4M3) * ts).astype(np.float32)
    vals = _fp8.decode(unpack_e2m1(packed, n), _fp8.E2M1)
    return (vals * np.repeat(denom, NVFP4_BLOCK)[:n]).astype(np.float32)


def nvfp4_roundtrip(x) -> np.ndarray:
    x = np.asarray(x)
    packed, s, amax = nvfp4_quantize(x)
    return nvfp4_dequantize(packed, s, amax, x.size).astype(np.float64).reshape(x.shape)


# ------------------------------------------------------------------------------------------------
# MX


def mx_scale_codes(block_amax, elements: str) -> np.ndarray:
    """E8M0 codes of the OCP MX rule: floor(log2(amax)) - emax + 127, clamped to [0, 254]."""
    xp = _fp8._xp(block_amax)
    a = xp.asarray(block_amax, xp.float32)
    _, ex = xp.frexp(a)  # a = m * 2**ex with 0.5 <= m < 1: floor(log2 a) = ex - 1
    code = xp.clip(ex.astype(xp.int64) - 1 - EMAX[_fmt(elements)] + 127, 0, 254)
    return xp.where(a == 0, 0, code).astype(xp.uint8)


def _fmt(elements: str) -> str:
    e = str(elements).upper()
    if e not in EMAX:
        raise KernelLabArgumentError(f"MX elements must be 'E2M1' (MXFP4) or 'E4M3' (MXFP8), got {elements!r}")
    return e


def mx_quantize(x, elements: str = "E2M1"):
    """``(codes, scale_codes)``: MXFP4 (E2M1, packed two per byte) or MXFP8 (E4M3, one per byte)."""
    e = _fmt(elements)
    x = _f32(x)
    xp = _fp8._xp(x)
    blocks = _blocks(x, MX_BLOCK)
    s = mx_scale_codes(xp.max(xp.abs(blocks), axis=1), e)
    scaled = xp.ldexp(blocks, (127 - s.astype(xp.int32))[:, None]).astype(xp.float32)
    codes = _fp8.encode(scaled, e, saturate=True).ravel()[: x.size]
    return (pack_e2m1(codes) if e == "E2M1" else codes), s


def mx_dequantize(codes, scale_codes, n: int, elements: str = "E2M1") -> np.ndarray:
    e = _fmt(elements)
    c = unpack_e2m1(codes, n) if e == "E2M1" else np.asarray(codes, np.uint8)[:n]
    vals = _fp8.decode(c, e)
    k = np.repeat(np.asarray(scale_codes, np.int32) - 127, MX_BLOCK)[:n]
    return np.ldexp(vals, k).astype(np.float32)


def mx_roundtrip(x, elements: str = "E2M1") -> np.ndarray:
    x = np.asarray(x)
    codes, s = mx_quantize(x, elements)
    return mx_dequantize(codes, s, x.size, elements).astype(np.float64).reshape(x.shape)


# ------------------------------------------------------------------------------------------------
# every format of module 05 on the same data


def bits_per_value(n: int) -> dict:
    """Storage per element, scales included (an FP32 per-tensor scale counts 32 / n bits)."""
    t = 32.0 / n
    return {"INT8 (per tensor)": 8 + t, "INT4 g128": 4 + 32 / 128, "ternary (2-bit packed)": 2 + t,
            "FP8 E4M3 (per tensor)": 8 + t, "FP8 E5M2 (per tensor)": 8 + t, "NVFP4": 4 + 8 / 16 + t,
            "MXFP4": 4 + 8 / 32, "MXFP8": 8 + 8 / 32}


def all_roundtrips(x) -> dict:
    """Quantize-dequantize ``x`` (1-D) in every format of the module: name -> x_hat (float64)."""
    from . import integer

    x = np.asarray(x, np.float32)
    return {"INT8 (per tensor)": integer.int8_absmax_roundtrip(x),
            "INT4 g128": integer.int4_group_roundtrip(x, group=128),
            "ternary (2-bit packed)": integer.ternary_absmean_roundtrip(x),
            "FP8 E4M3 (per tensor)": _fp8.scaled_roundtrip(x, _fp8.E4M3),
            "FP8 E5M2 (per tensor)": _fp8.scaled_roundtrip(x, _fp8.E5M2),
            "NVFP4": nvfp4_roundtrip(x), "MXFP4": mx_roundtrip(x, "E2M1"), "MXFP8": mx_roundtrip(x, "E4M3")}


def relative_error(x, x_hat) -> float:
    """Norm-wise relative error ||x - x_hat|| / ||x|| (the SNR in dB is -20 log10 of it)."""
    x = np.asarray(x, np.float64)
    return float(np.linalg.norm(x - x_hat) / np.linalg.norm(x))


def sample_data(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """Test data for the error plot (float32).

    ``"weights"``: normal, std 0.02 (a linear layer's weights at initialisation scale);
    ``"activations"``: normal, std 1, with 1% of the channels scaled by 50 (the outlier channels of
    large language models' activations, LLM.int8(), Dettmers et al. 2022), channel = index % 256.
    """
    rng = np.random.default_rng(seed)
    if kind == "weights":
        return (0.02 * rng.standard_normal(n)).astype(np.float32)
    if kind == "activations":
        x = rng.standard_normal(n)
        outliers = rng.choice(256, size=max(1, 256 // 100), replace=False)
        x[np.isin(np.arange(n) % 256, outliers)] *= 50.0
        return x.astype(np.float32)
    raise KernelLabArgumentError(f"kind must be 'weights' or 'activations', got {kind!r}")


def error_table(n: int = 1 << 16, seed: int = 0) -> dict:
    """{format: (bits per value, error on weights, error on activations)} on :func:`sample_data`."""
    bits = bits_per_value(n)
    w, a = sample_data("weights", n, seed), sample_data("activations", n, seed)
    rw, ra = all_roundtrips(w), all_roundtrips(a)
    return {k: (bits[k], relative_error(w, rw[k]), relative_error(a, ra[k])) for k in rw}


def plot_error_vs_bits(table_weights: dict, table_activations: dict, ax=None):
    """Relative error against bits per value, one marker per format, for both kinds of data.

    The tables map a format's name to ``(bits per value, relative error)``."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    for table, marker, label in [(table_weights, "o", "weights-like"), (table_activations, "^", "activations, outliers")]:
        bits = [b for b, _ in table.values()]
        err = [e for _, e in table.values()]
        ax.scatter(bits, err, marker=marker, s=45, label=label)
        for name, (b, e) in table.items():
            ax.annotate(name, (b, e), textcoords="offset points", xytext=(5, 3), fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("bits per value (scales included)")
    ax.set_ylabel("relative error ||x - x_hat|| / ||x||")
    ax.set_title("Every format of module 05 on the same data")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
