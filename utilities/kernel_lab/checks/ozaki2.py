"""Checks for notebook 07.6's exercises: symmetric remainders and the Chinese remainder theorem.

Both are about integers, so results must be exact; when they are not, the check recognises the
classic mistakes: remainders in ``[0, m)`` (Python's and NumPy's ``%``) instead of the symmetric
range int8 needs, and a reconstruction that forgets to bring the result back to ``(-M/2, M/2)``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import progress
from ..check import CheckFailed
from ..ozaki import ozaki2
from ..validate import require_callable

__all__ = ["check_symmetric_residues", "check_crt"]


def check_symmetric_residues(fn, *, seed=None) -> None:
    """``fn(x, m)``: the remainder of each integer of ``x`` (int64 array) modulo ``m``, in
    ``[-(m // 2), m - 1 - m // 2]`` (for m = 256: [-128, 127], exactly int8)."""
    require_callable(fn, "fn")
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.integers(-10**12, 10**12, 500), np.arange(-300, 301), [0, 127, 128, -128, -129]])
    for m in ozaki2.coprime_moduli(6) + (2, 3):
        got = np.asarray(fn(x.copy(), m))
        h = m // 2
        want = (x + h) % m - h
        if got.shape != x.shape:
            raise CheckFailed(f"symmetric remainders mod {m}: the result has shape {got.shape}, the input {x.shape}")
        if np.array_equal(got.astype(np.int64), want):
            continue
        i = int(np.flatnonzero(got.astype(np.int64) != want)[0])
        msg = (f"symmetric remainders mod {m}: {int((got != want).sum())} of {x.size} wrong; first: x = {x[i]}, "
               f"expected {want[i]}, got {got[i]}")
        if np.array_equal(got.astype(np.int64), x % m):
            msg += (f"\nHint: that is x % m, in [0, {m - 1}]: {m - 1} does not fit in int8. Shift by half the "
                    f"modulus first and back after: (x + {h}) % {m} - {h}.")
        elif ((got.astype(np.int64) - want) % m == 0).all():
            msg += "\nHint: the right remainder class, but outside the symmetric range: check the shift by m // 2."
        raise CheckFailed(msg)
    print("symmetric remainders: correct for 8 moduli (256 .. 241, and 2 and 3), negative and large inputs")
    progress.passed('symmetric remainders')


def check_crt(fn, *, seed=None) -> None:
    """``fn(r, moduli)``: the integer X with ``X = r[l] (mod moduli[l])`` for every l and
    ``-M/2 <= X < M/2`` (M the product of the moduli), as a Python int; ``r`` is a list of ints."""
    require_callable(fn, "fn")
    rng = np.random.default_rng(seed)
    for n in (1, 2, 5, 14):
        mods = ozaki2.coprime_moduli(n)
        big_m = math.prod(mods)
        for trial in range(40):
            x = int(rng.integers(-2**62, 2**62)) * int(rng.integers(1, 2**40)) % big_m - big_m // 2
            if trial == 0:
                x = -1
            r = [x % m for m in mods]
            got = fn(list(r), mods)
            if got == x:
                continue
            msg = f"CRT with {n} moduli: expected {x}, got {got}"
            if isinstance(got, (int, np.integer)) and got == x % big_m:
                msg += ("\nHint: that is X mod M, in [0, M): results from the upper half stand for negative "
                        "numbers. Subtract M when the result is at least M / 2.")
            elif isinstance(got, (int, np.integer)) and all(int(got) % m == ri % m for m, ri in zip(mods, r)):
                msg += "\nHint: the right class modulo M, but not the representative in [-M/2, M/2)."
            raise CheckFailed(msg)
    print("CRT: exact for 1, 2, 5 and 14 moduli, negative results included")
