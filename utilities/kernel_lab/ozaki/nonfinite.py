"""Inf and NaN inputs: every emulated GEMM of module 07 returns what float64 GEMM (DGEMM) returns.

Why the schemes need help
-------------------------
Both schemes scale each row of A and each column of B by a power of two taken from its entries.
Inf and NaN have no exponent: a row holding one cannot be sliced (Ozaki-I) or turned into integers
(Ozaki-II). Marking the whole row and column NaN would be wrong: DGEMM gives +-Inf where the
product is an infinity times finite values, and NaN only where Inf * 0, Inf - Inf or a NaN occurs.

What the package does (the same in NumPy and on the GPU)
--------------------------------------------------------
1. Find the rows of A and the columns of B that hold Inf or NaN (:func:`nonfinite_lines`; the GPU
   launchers get the same flags from their exponent kernels, at no extra pass over the inputs).
2. Run the emulation with those entries read as zeros (:func:`finite_copies`; the GPU slicing and
   remainder kernels write zeros for a flagged row or column). Every other element of C only
   depends on finite rows and columns, so it is the emulated value.
3. Recompute the flagged rows and columns with a plain float64 product of just those lines
   (``xp.matmul``: NumPy's BLAS, or cuBLAS's DGEMM for CuPy arrays) and write them over
   (:func:`patch_nonfinite`).

Step 3 adds the emulated value of the element to the plain product instead of ``beta * C``: that
gives DGEMM's result without keeping a copy of C (the GPU launchers overwrite C in place). Every
element of a flagged row is Inf or NaN in float64 arithmetic (a non-finite term makes the sum
non-finite: Inf * 0 and NaN give NaN, Inf times anything else Inf), and the emulated value of that
element is ``alpha * x + beta * c`` with x finite: finite where ``beta * c`` is (then adding it
changes nothing), the same Inf or NaN where ``beta * c`` is not. So the sum is ``alpha * AB + beta
* C`` in the IEEE sense: the same Inf, -Inf or NaN. (Two cases are left to chance, as they are
between two BLAS libraries: finite partial sums that overflow, and ``alpha * x + beta * c``
overflowing on its own.)

``alpha = 0``: nothing is recomputed. The reference BLAS does not read A and B when alpha is 0, so
C becomes ``beta * C`` whatever A and B hold, and so does the emulated result.

The cost: one float64 GEMM of (flagged rows) x K x N plus M x K x (flagged columns); nothing at
all when every input is finite.
"""

from __future__ import annotations

import numpy as np


def array_module(x):
    """``cupy`` for a CuPy array, ``numpy`` otherwise (without importing CuPy where it is absent)."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def nonfinite_lines(a, b):
    """``(rows, cols)``: boolean masks of A's rows and B's columns holding Inf or NaN.

    >>> a = np.array([[1.0, np.inf], [2.0, 3.0]])
    >>> b = np.array([[1.0, np.nan, 0.0], [4.0, 5.0, 6.0]])
    >>> [m.tolist() for m in nonfinite_lines(a, b)]
    [[True, False], [False, True, False]]
    """
    xp = array_module(a)
    return ~xp.isfinite(a).all(axis=1), ~xp.isfinite(b).all(axis=0)


def finite_copies(a, b):
    """A and B with Inf and NaN read as zeros (the inputs themselves where they are finite)."""
    xp = array_module(a)
    if not bool(xp.isfinite(a).all()):
        a = xp.where(xp.isfinite(a), a, 0.0)
    if not bool(xp.isfinite(b).all()):
        b = xp.where(xp.isfinite(b), b, 0.0)
    return a, b


def patch_nonfinite(out, a, b, rows, cols, alpha: float = 1.0):
    """Write DGEMM's result over the rows ``rows`` and columns ``cols`` of ``out`` (in place).

    ``out`` holds the emulated ``alpha * A0 @ B0 + beta * C`` of the inputs with their Inf and NaN
    read as zeros; ``a`` and ``b`` are the original inputs; ``rows``/``cols`` boolean masks (or
    int flags) of the lines holding Inf or NaN. Each flagged line becomes
    ``alpha * (plain float64 product of the line) + out`` (module docstring: the same as ``+ beta * C``).
    Returns ``out``.

    >>> a = np.array([[np.inf, 1.0], [1.0, 2.0]])
    >>> b = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> out = np.array([[1.0, 1.0], [3.0, 2.0]])         # emulated, with A[0, 0] read as 0
    >>> patch_nonfinite(out, a, b, np.array([True, False]), np.array([False, False])).tolist()
    [[inf, nan], [3.0, 2.0]]
    """
    if alpha == 0:  # BLAS: A and B are not read, C = beta * C (what out holds)
        return out
    xp = array_module(out)
    ri = xp.flatnonzero(xp.asarray(rows).astype(bool))
    ci = xp.flatnonzero(xp.asarray(cols).astype(bool))
    # both from the emulated values, so an element in a flagged row and column gets one product;
    # Inf - Inf and Inf * 0 are meant here (NumPy would warn of them)
    with np.errstate(invalid="ignore", over="ignore"):
        row_vals = alpha * xp.matmul(a[ri], b) + out[ri] if ri.size else None
        col_vals = alpha * xp.matmul(a, b[:, ci]) + out[:, ci] if ci.size else None
    if row_vals is not None:
        out[ri] = row_vals
    if col_vals is not None:
        out[:, ci] = col_vals
    return out
