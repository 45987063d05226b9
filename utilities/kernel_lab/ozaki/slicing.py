"""Slicing float64 numbers into signed 8-bit digits.

The format
----------
Each row of A (each column of B) gets an exponent ``e``: the power of two just above the row's
largest magnitude, so every entry ``x`` of the row satisfies ``|x| * 2**-e < 1``
(``e = frexp(max|x|)[1]``). The scaled entry is turned into a ``P``-bit fixed-point integer::

    X = rint(x * 2**(P - e)),   P = 8 * s - 2,   |X| <= 2**P

and ``X`` is written in base 256 with *signed* digits ``d_0 .. d_{s-1}``, most significant first::

    X = d_0 * 256**(s-1) + d_1 * 256**(s-2) + ... + d_{s-1},   d_t in [-128, 127]

The digits are the slices. They are found from the bottom: the low byte of ``X``, read as a signed
number (``((X + 128) & 255) - 128``), is the last digit; subtract it, shift right by 8, repeat. The
top digit is what remains; with ``P = 8s - 2`` it lies in [-64, 64], so it fits in int8 whatever the
carries. Why signed digits: INT8 tensor cores multiply signed bytes, and a digit in [-128, 127]
uses all 8 bits, so ``s`` slices carry ``8s - 2`` bits (7 slices: 54 bits, more than float64's 53).
A sign-magnitude split (7 bits and a sign per slice) would need 8 slices for the same accuracy.

Each entry keeps ``P`` bits *relative to its row's largest entry*: an entry 2**-20 times smaller
than its row's maximum keeps ``P - 20`` bits. That is the scheme's weakness on rows of very
different magnitudes, and why the exponent is per row, not per matrix.

``P`` must fit in int64 arithmetic: ``s <= 8`` (62 bits). Eight slices already hold every bit of a
float64 within 2**9 of its row maximum.

Exact INT32 sums
----------------
A slice product sums ``K`` products of two digits, each at most 128 * 128 = 2**14 in magnitude.
A diagonal (all pairs ``t + u = d``) adds up to ``s`` such products in one INT32 accumulator. The
sum is exact while ``terms * K * 2**14 <= 2**31 - 1``: :func:`max_exact_k`. For ``s = 7`` that is
K <= 18,724 per diagonal (131,071 for a single product). Past it, split K into chunks and add the
chunks' float64 results (what ``reference.emulated_matmul`` does).
"""

from __future__ import annotations

import numpy as np

from ..validate import KernelLabArgumentError

BITS_PER_SLICE = 8
MAX_SLICES = 8  # P = 8s - 2 must fit in int64 arithmetic
INT32_MAX = 2**31 - 1
MAX_DIGIT_PRODUCT = 128 * 128


def scaled_bits(slices: int) -> int:
    """``P``: the number of fixed-point bits ``slices`` signed 8-bit digits carry (8s - 2)."""
    slices = _require_slices(slices)
    return BITS_PER_SLICE * slices - 2


def max_exact_k(terms: int = 1) -> int:
    """The largest K for which a sum of ``terms`` slice products is exact in INT32.

    Each product of two digits is at most 2**14 in magnitude; ``terms`` products of length K add
    ``terms * K`` of them: exact while that total stays within 2**31 - 1.

    >>> max_exact_k(1), max_exact_k(7)
    (131071, 18724)
    """
    if not isinstance(terms, (int, np.integer)) or terms < 1:
        raise KernelLabArgumentError(f"terms must be a whole number >= 1, got {terms!r}")
    return INT32_MAX // (int(terms) * MAX_DIGIT_PRODUCT)


def _require_slices(slices) -> int:
    if not isinstance(slices, (int, np.integer)) or not 1 <= slices <= MAX_SLICES:
        raise KernelLabArgumentError(
            f"slices must be a whole number from 1 to {MAX_SLICES}, got {slices!r} (each slice is a signed "
            f"8-bit digit of a {BITS_PER_SLICE * MAX_SLICES - 2}-bit integer at most: int64 arithmetic)")
    return int(slices)


def _require_finite_matrix(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise KernelLabArgumentError(f"{name} must be a matrix (2 dimensions), got shape {x.shape}")
    if x.dtype != np.float64:
        raise KernelLabArgumentError(f"{name} must be float64 (the format being emulated), got {x.dtype}")
    if not np.isfinite(x).all():
        raise KernelLabArgumentError(
            f"{name} holds Inf or NaN, which have no exponent a slice can carry; emulated_matmul handles "
            "them (it slices them as zeros and recomputes their rows/columns in float64), split does not")
    return x


def exponents(x: np.ndarray, axis: int) -> np.ndarray:
    """Per-row (``axis=1``) or per-column (``axis=0``) exponents: ``frexp(max |x|)[1]``, 0 for zeros.

    Every entry then satisfies ``|x| * 2**-e < 1``. Returned as int32.
    """
    x = _require_finite_matrix(x, "x")
    amax = np.abs(x).max(axis=axis) if x.shape[axis] else np.zeros(x.shape[1 - axis])
    _, e = np.frexp(amax)
    return np.where(amax > 0, e, 0).astype(np.int32)


def split(x: np.ndarray, slices: int, axis: int = 1):
    """Slice a float64 matrix into ``slices`` int8 digit matrices.

    ``axis=1`` scales rows (for A), ``axis=0`` scales columns (for B). Returns ``(digits, e)`` with
    ``digits`` of shape ``(slices,) + x.shape`` (int8; ``digits[0]`` most significant) and ``e`` the
    int32 exponents, such that ``x ~= sum_t digits[t] * 256**(slices-1-t) * 2**(e - P)``.
    """
    s = _require_slices(slices)
    x = _require_finite_matrix(x, "x")
    e = exponents(x, axis)
    p = scaled_bits(s)
    shift = (p - e).astype(np.int64)
    shift = shift[:, None] if axis == 1 else shift[None, :]
    big = np.rint(np.ldexp(x, shift)).astype(np.int64)  # |big| <= 2**P: exact in int64
    digits = np.empty((s,) + x.shape, dtype=np.int8)
    for t in range(s - 1, 0, -1):
        d = ((big + 128) & 255) - 128  # the low byte as a signed number
        digits[t] = d
        big = (big - d) >> 8  # exact: big - d is a multiple of 256
    if big.size and (big.min() < -64 or big.max() > 64):  # cannot happen: see the module docstring
        raise AssertionError("top digit out of range")
    digits[0] = big
    return digits, e


def join_slices(digits: np.ndarray, e: np.ndarray, axis: int = 1) -> np.ndarray:
    """The float64 numbers that ``digits`` and exponents ``e`` represent (the inverse of :func:`split`,
    up to the bits the slices could not hold)."""
    digits = np.asarray(digits)
    s = digits.shape[0]
    p = scaled_bits(s)
    big = np.zeros(digits.shape[1:], dtype=np.int64)
    for t in range(s):  # in int64: up to 62 bits, more than float64 holds exactly
        big = big * 256 + digits[t]
    shift = np.asarray(e, dtype=np.int64) - p
    shift = shift[:, None] if axis == 1 else shift[None, :]
    return np.ldexp(big.astype(np.float64), shift)  # one rounding, to float64's 53 bits
