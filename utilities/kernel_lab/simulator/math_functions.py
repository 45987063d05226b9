"""``math`` functions that kernels call with NumPy scalars under the simulator.

On a GPU, Numba types ``math.ldexp(x, e[row] + 3)`` with an int32 exponent. Under the simulator
the kernel is plain Python, so ``e[row] + 3`` is a NumPy integer, which CPython's ``math.ldexp``
rejects ("Expected an int as second argument"). `install()` wraps it to accept any integer.
"""

import math
import operator

_ORIGINAL_LDEXP = math.ldexp


def ldexp(x, i):
    """``math.ldexp`` accepting NumPy integers (anything with ``__index__``) as the exponent."""
    return _ORIGINAL_LDEXP(x, operator.index(i))


def patch():
    if math.ldexp is not ldexp:
        math.ldexp = ldexp
