"""Small floating-point element formats in NumPy: FP8 E4M3 and E5M2, and FP4 E2M1.

The references of notebook 05.3 (and the element formats of 05.4). ``encode`` is written with the
same integer operations as the kernels the learner writes (vectorised), so that it can be read as
the specification; ``ml_dtypes`` is the oracle it is tested against (every float16 bit pattern,
every code; tests/test_quant_float_reference.py).

The rules, per format (OCP "8-bit Floating Point Specification (OFP8)" rev. 1.0, 2023, and the OCP
Microscaling Formats (MX) Specification v1.0, 2023, for E2M1):

========  ====  ======  ==========  =========  ================  ===========================
format    bias  max     min normal  min sub.   infinity          NaN
========  ====  ======  ==========  =========  ================  ===========================
E4M3      7     448     2^-6        2^-9       none              S.1111.111 (two codes)
E5M2      15    57344   2^-14       2^-16      S.11111.00        S.11111.{01,10,11}
E2M1      1     6       1           0.5        none              none
========  ====  ======  ==========  =========  ================  ===========================

Encoding rounds to nearest, ties to even, from float32. What happens past the largest finite
value is the *mode*: **saturating** (CUDA's ``__NV_SATFINITE``, PTX ``cvt.satfinite``) clamps
every overflow and infinity to the largest finite value, keeping the sign; **non-saturating**
(CUDA's ``__NV_NOSAT``, and what ``ml_dtypes`` does) gives infinity in E5M2 and NaN in E4M3, which
has no infinity. A value overflows when it rounds past the largest finite value: E4M3 values up to
464 (448 plus half a step, a tie that goes to the even 448) still give 448. NaN gives NaN, sign
kept (E4M3 0x7F, E5M2 0x7E: the codes ml_dtypes produces). E2M1 has neither infinity nor NaN and
always saturates (to +-6).

**E2M1 and NaN.** The MX specification leaves the conversion of a NaN to E2M1 to the implementation;
the course follows ml_dtypes, its oracle: a NaN gives the code 0b1000 (the bit pattern of -0, which
ml_dtypes uses as this format's NaN), and a NaN whose sign bit is set gives 0b0000 (ml_dtypes negates
that pattern for a negative NaN). A zero adds nothing to a dot product, where +-6 would add the
block's largest value. Every E2M1 encoder here follows the rule: :func:`encode` (and with it the
block references of :mod:`~kernel_lab.quant.microscaling`) and the kernels' ``e2m1_code``; the tests
hold all three to ml_dtypes on NaNs of both signs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validate import KernelLabArgumentError


@dataclass(frozen=True)
class ElementFormat:
    """A sign-exponent-mantissa format of ``bits`` bits (sign in the top bit)."""

    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    max_code: int  # code of the largest finite magnitude (sign bit clear)
    specials: str  # "ieee" (all-ones exponent: inf/NaN), "e4m3" (only S.1111.111 is NaN), "none"
    nan_code: int | None  # the NaN this module produces (sign bit clear)
    ml_dtype: str  # the ml_dtypes type with the same values

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_value(self) -> float:
        return float(decode(np.array([self.max_code], np.uint8), self)[0])

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def inf_code(self) -> int | None:
        return (((1 << self.exp_bits) - 1) << self.man_bits) if self.specials == "ieee" else None

    def overflow_code(self, saturate: bool) -> int:
        """The code (sign bit clear) that an overflow or an infinity becomes in each mode."""
        if saturate or self.specials == "none":
            return self.max_code
        return self.inf_code if self.specials == "ieee" else self.nan_code

    def ml_dtypes_type(self):
        try:
            import ml_dtypes
        except ImportError as exc:  # pragma: no cover - ml_dtypes is a dependency of the course
            raise KernelLabArgumentError("ml_dtypes is not installed: `pip install ml_dtypes`") from exc
        return getattr(ml_dtypes, self.ml_dtype)


E4M3 = ElementFormat("E4M3", 8, 4, 3, 7, 0x7E, "e4m3", 0x7F, "float8_e4m3fn")
E5M2 = ElementFormat("E5M2", 8, 5, 2, 15, 0x7B, "ieee", 0x7E, "float8_e5m2")
E2M1 = ElementFormat("E2M1", 4, 2, 1, 1, 0x7, "none", None, "float4_e2m1fn")
FORMATS = {f.name: f for f in (E4M3, E5M2, E2M1)}


def get_format(fmt) -> ElementFormat:
    if isinstance(fmt, ElementFormat):
        return fmt
    if isinstance(fmt, str) and fmt.upper() in FORMATS:
        return FORMATS[fmt.upper()]
    raise KernelLabArgumentError(f"unknown element format {fmt!r}: use one of {', '.join(FORMATS)}")


def _xp(x):
    """NumPy, or CuPy for a CuPy array: the references double as "the same operation composed from
    element-wise library calls" that the GPU probe times against the kernels."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _float32_bits(x, xp=np):
    x = xp.asarray(x)
    if x.dtype != xp.float32:
        if x.dtype.kind != "f" and x.dtype.name not in ("bfloat16",):
            x = x.astype(xp.float64)
        x = x.astype(xp.float32)  # float16 and bfloat16 convert exactly
    return xp.ascontiguousarray(x).view(xp.uint32).astype(xp.int64)


def encode(x, fmt, saturate: bool = True) -> np.ndarray:
    """Codes (uint8; E2M1 in the low 4 bits) of float32 ``x``, rounded to nearest, ties to even.
    (NumPy in, NumPy out; CuPy in, CuPy out.)

    The integer recipe (the kernels use the same steps):

    1. ``a`` = the bits of ``|x|``; ``e`` = its unbiased exponent; ``sig`` = 1.mantissa as a 24-bit
       integer (the implicit 1 included);
    2. below the format's smallest normal exponent ``emin`` the value is a subnormal of the format:
       take ``eff = max(e, emin)`` and shift ``sig`` right by ``23 - M + (eff - e)``, dropping the
       bits the format has no room for;
    3. round: add one when the dropped bits are more than half a step, or exactly half and the kept
       part is odd (ties to even);
    4. ``code = ((eff + bias - 1) << M) + q``: a carry out of the mantissa moves into the exponent
       on its own, and for subnormals (``eff + bias - 1 = 0``) the code is just ``q``;
    5. a code past ``max_code`` (or an infinity) is an overflow: see :meth:`ElementFormat.overflow_code`.
    """
    f = get_format(fmt)
    xp = _xp(x)
    b = _float32_bits(x, xp)
    m = f.man_bits
    sign = (b >> 31) << (f.bits - 1)
    a = b & 0x7FFFFFFF
    e = (a >> 23) - 127
    eff = xp.maximum(e, f.emin)
    shift = xp.minimum(23 - m + (eff - e), 25)  # >= 25: less than half the smallest subnormal
    sig = (a & 0x7FFFFF) | 0x800000
    q = sig >> shift
    rem = sig & ((1 << shift) - 1)
    half = (1 << shift) >> 1
    q = q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    q = xp.where(shift >= 25, 0, q)
    code = ((eff + f.bias - 1) << m) + q
    code = xp.where(code > f.max_code, f.overflow_code(saturate), code)
    if f.nan_code is None:  # E2M1: a NaN becomes ml_dtypes' code, -0's pattern with the NaN's sign bit flipped
        return xp.where(a > 0x7F800000, sign ^ (1 << (f.bits - 1)), sign | code).astype(xp.uint8)
    code = xp.where(a > 0x7F800000, f.nan_code, code)
    return (sign | code).astype(xp.uint8)


def decode(codes, fmt) -> np.ndarray:
    """float32 values of ``codes`` (uint8; E2M1 uses the low 4 bits), exact."""
    f = get_format(fmt)
    xp = _xp(codes)
    c = xp.asarray(codes).astype(xp.int64) & ((1 << f.bits) - 1)
    m_bits = f.man_bits
    sign = xp.where((c >> (f.bits - 1)) & 1 == 1, -1.0, 1.0)
    e = (c >> m_bits) & ((1 << f.exp_bits) - 1)
    m = c & ((1 << m_bits) - 1)
    mag = xp.where(e == 0, m * 2.0 ** (f.emin - m_bits), (m + (1 << m_bits)) * xp.exp2(e - f.bias - m_bits))
    top = (1 << f.exp_bits) - 1
    if f.specials == "ieee":
        mag = xp.where(e == top, xp.where(m == 0, xp.inf, xp.nan), mag)
    elif f.specials == "e4m3":
        mag = xp.where((e == top) & (m == (1 << m_bits) - 1), xp.nan, mag)
    return (sign * mag).astype(xp.float32)


def is_nan_code(codes, fmt) -> np.ndarray:
    f = get_format(fmt)
    return np.isnan(decode(codes, f))


def encode_oracle(x, fmt, saturate: bool = True) -> np.ndarray:
    """The same codes from ml_dtypes (the oracle of the tests). ml_dtypes does not saturate:
    for the saturating mode, finite overflows and infinities are clamped before the cast."""
    f = get_format(fmt)
    x = np.asarray(x, np.float32)
    if saturate:
        big = np.float32(f.max_value)
        # anything that rounds past the largest finite value: clamp it to that value first
        x = np.where(np.isnan(x), x, np.clip(x, -np.float32(np.inf), np.float32(np.inf)))
        over = np.abs(x) > big
        x = np.where(over & ~np.isnan(x), np.copysign(big, x), x)
    codes = x.astype(f.ml_dtypes_type()).view(np.uint8)
    return codes & ((1 << f.bits) - 1)


def roundtrip(x, fmt, saturate: bool = True) -> np.ndarray:
    """Decode(encode(x)) as float64: the value the format stores for each element of ``x``."""
    return decode(encode(x, fmt, saturate), fmt).astype(np.float64)


def scaled_roundtrip(x, fmt) -> np.ndarray:
    """Per-tensor scaled FP8, as FP8 tensors are used: s = max(absmax, 2^-126) / max_value (float32;
    the floor is :data:`kernel_lab.quant.integer.AMAX_FLOOR`), codes = encode(x / s) saturating,
    x_hat = decode(codes) * s."""
    from .integer import floored

    f = get_format(fmt)
    x32 = np.asarray(x, np.float32)
    amax = np.float32(np.max(np.abs(x32))) if x32.size else np.float32(0)
    s = np.float32(floored(amax) / np.float32(f.max_value)) if amax > 0 else np.float32(1)
    return decode(encode(x32 / s, f, True), f).astype(np.float64) * np.float64(s)


def tie_points(fmt) -> np.ndarray:
    """Every positive float32 exactly halfway between two neighbouring finite values of ``fmt``,
    and the midpoint between the largest value and the next step (the overflow threshold)."""
    f = get_format(fmt)
    vals = decode(np.arange(0, f.max_code + 1, dtype=np.uint8), f).astype(np.float64)
    mids = (vals[:-1] + vals[1:]) / 2
    step = vals[-1] - vals[-2]
    return np.concatenate([mids, [vals[-1] + step / 2]]).astype(np.float32)


def boundary_inputs(fmt) -> np.ndarray:
    """Inputs where encoders go wrong: ties and their float32 neighbours, every value of the
    format, zeros of both signs, the overflow threshold and beyond, infinities and NaN; both signs."""
    f = get_format(fmt)
    ties = tie_points(f)
    up = np.nextafter(ties, np.float32(np.inf))
    down = np.nextafter(ties, np.float32(0))
    vals = decode(np.arange(0, f.max_code + 1, dtype=np.uint8), f)
    extra = np.array([0.0, f.min_subnormal / 4, 2 * f.max_value, 1e30, np.inf, np.finfo(np.float32).tiny,
                      np.float32(1.4e-45)], np.float32)
    pos = np.concatenate([ties, up, down, vals, extra]).astype(np.float32)
    out = np.concatenate([pos, -pos, np.array([np.nan, -np.nan], np.float32)])
    return out.astype(np.float32)
