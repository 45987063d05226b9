"""``math`` functions that kernels call with NumPy scalars under the simulator, and ``cuda.fma``.

On a GPU, Numba types ``math.ldexp(x, e[row] + 3)`` with an int32 exponent. Under the simulator
the kernel is plain Python, so ``e[row] + 3`` is a NumPy integer, which CPython's ``math.ldexp``
rejects ("Expected an int as second argument"). `install()` wraps it to accept any integer.

``cuda.fma(a, b, c)`` (one rounding of ``a * b + c``) is missing from the simulator; `fma` computes
it exactly with fractions and rounds once, to float32 when all three are float32 (an exact remainder
``fma(-d, q, v)`` is what a kernel uses it for, and a float64 product then a float32 cast would
round twice).
"""

import math
import operator
from fractions import Fraction

import numpy as np

_ORIGINAL_LDEXP = math.ldexp


def ldexp(x, i):
    """``math.ldexp`` accepting NumPy integers (anything with ``__index__``) as the exponent."""
    return _ORIGINAL_LDEXP(x, operator.index(i))


def patch():
    if math.ldexp is not ldexp:
        math.ldexp = ldexp


def _round_to_float32(exact: Fraction) -> np.float32:
    """``exact`` to nearest float32, ties to even (overflow to infinity)."""
    f = np.float32(float(exact))  # within one float32 step of the answer
    if not np.isfinite(f):
        return f
    best = None
    for cand in (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))):
        if not np.isfinite(cand):
            continue
        key = (abs(Fraction(float(cand)) - exact), int(np.array(cand).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


def fma(a, b, c):
    """``a * b + c`` rounded once (float32 if all three are float32, else float64)."""
    single = all(isinstance(v, np.float32) for v in (a, b, c))
    if not all(math.isfinite(float(v)) for v in (a, b, c)):
        r = float(a) * float(b) + float(c)
        return np.float32(r) if single else r
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if exact == 0:  # the sign of a zero: IEEE's rule for an exact zero sum
        r = float(a) * float(b) + float(c)
        return np.float32(r) if single else r
    return _round_to_float32(exact) if single else float(exact)


FUNCTIONS = {"fma": fma}
