"""The Ozaki scheme in NumPy, and the accurate reference it is measured against.

``emulated_matmul`` computes ``alpha * A @ B + beta * C`` the way module 07's GPU kernels do:

1. slice A by rows and B by columns (:func:`slicing.split`);
2. multiply slices exactly: ``D[d] = sum over t + u = d of A_t @ B_u`` for the diagonals
   ``d = 0 .. s-1`` (the products below the anti-diagonal are dropped: their weight is below the
   last bit kept);
3. rebuild float64, least significant diagonal first: for ``d = s-1, ..., 0``,
   ``C = alpha * ldexp(D[d], ea_i + eb_j - 12 - 8d) + beta_d * C`` with ``beta_d = beta`` for the
   first diagonal processed and 1 afterwards (beta applies once).

The weight of diagonal ``d``: digit ``t`` of a row is worth ``256**(s-1-t) * 2**(e - P)`` with
``P = 8s - 2``, so a product on diagonal ``t + u = d`` is worth ``256**(2s-2-d) * 2**(ea + eb - 2P)
= 2**(ea + eb - 12 - 8d)``.

Integer products are computed with float64 matrix products, which are exact here: every partial sum
is an integer below 2**53 (K * 2**14 is far below it).

``accurate_matmul`` is the yardstick: compensated dot products (Ogita, Rump and Oishi, "Accurate sum
and dot product", SIAM J. Sci. Comput. 26(6), 2005): as accurate as if computed in twice the
working precision, then rounded, so its own error is far below float64 GEMM's.
"""

from __future__ import annotations

import numpy as np

from ..validate import KernelLabArgumentError
from .nonfinite import finite_copies, nonfinite_lines, patch_nonfinite
from .slicing import max_exact_k, split

U64 = 2.0**-53  # unit roundoff of float64


def _require_operands(a, b, c=None):
    a = np.asarray(a)
    b = np.asarray(b)
    for name, x in (("A", a), ("B", b)):
        if x.ndim != 2:
            raise KernelLabArgumentError(f"{name} must be a matrix (2 dimensions), got shape {x.shape}")
        if x.dtype != np.float64:
            raise KernelLabArgumentError(f"{name} must be float64, got {x.dtype}")
    if a.shape[1] != b.shape[0]:
        raise KernelLabArgumentError(f"A is {a.shape[0]}x{a.shape[1]} and B is {b.shape[0]}x{b.shape[1]}: "
                                     "A's columns must equal B's rows")
    if c is not None:
        c = np.asarray(c)
        if c.shape != (a.shape[0], b.shape[1]):
            raise KernelLabArgumentError(f"C must have shape {(a.shape[0], b.shape[1])}, got {c.shape}")
    return a, b, c


def pair_products(da: np.ndarray, db: np.ndarray, pairs=None) -> np.ndarray:
    """Exact ``A_t @ B_u`` for each ``(t, u)`` in ``pairs`` (default: every pair with t + u < s).

    ``da`` is ``(s, M, K)`` and ``db`` is ``(s, K, N)`` (int8 digits). Returns int64 ``(len(pairs), M, N)``.
    """
    s = da.shape[0]
    if pairs is None:
        pairs = triangular_pairs(s)
    fa = da.astype(np.float64)
    fb = db.astype(np.float64)
    return np.stack([fa[t] @ fb[u] for t, u in pairs]).astype(np.int64) if pairs else \
        np.zeros((0, da.shape[1], db.shape[2]), np.int64)


def triangular_pairs(s: int) -> list[tuple[int, int]]:
    """The slice pairs the scheme multiplies, diagonal by diagonal: (0,0); (0,1), (1,0); ..."""
    return [(t, d - t) for d in range(s) for t in range(d + 1)]


def diagonal_sums(da: np.ndarray, db: np.ndarray) -> np.ndarray:
    """``D[d] = sum over t + u = d of A_t @ B_u`` for d = 0 .. s-1 (int64, exact), shape (s, M, N)."""
    s = da.shape[0]
    fa = da.astype(np.float64)
    fb = db.astype(np.float64)
    out = np.zeros((s, da.shape[1], db.shape[2]), dtype=np.float64)
    for d in range(s):
        for t in range(d + 1):
            out[d] += fa[t] @ fb[d - t]  # every partial sum is an integer below 2**53: exact
    return out.astype(np.int64)


def diagonal_exponent(d: int) -> int:
    """The power of two diagonal ``d`` is worth, besides the row and column exponents: -12 - 8d."""
    return -12 - 8 * d


def reconstruct(diags: np.ndarray, ea: np.ndarray, eb: np.ndarray, alpha: float = 1.0, beta: float = 0.0,
                c: np.ndarray | None = None) -> np.ndarray:
    """float64 ``alpha * sum_d D[d] * 2**(ea_i + eb_j - 12 - 8d) + beta * C``, least significant first.

    ``diags`` is ``(s, M, N)`` integers; for the scheme's slicing (``P = 8s - 2``) the weights do not
    depend on ``s``. Beta is applied with the first diagonal processed (``d = s-1``) only.
    """
    diags = np.asarray(diags)
    s, m, n = diags.shape
    out = np.zeros((m, n)) if c is None else np.array(c, dtype=np.float64, copy=True)
    shift = np.asarray(ea, np.int64)[:, None] + np.asarray(eb, np.int64)[None, :]
    for d in range(s - 1, -1, -1):
        x = np.ldexp(diags[d].astype(np.float64), shift + diagonal_exponent(d))
        if d != s - 1:
            out = alpha * x + out
        elif beta == 0:  # BLAS rule: with beta = 0, C is not read (it may hold NaN)
            out = alpha * x
        else:
            out = alpha * x + beta * out
    return out


def emulated_matmul(a, b, slices: int = 7, alpha: float = 1.0, beta: float = 0.0, c=None,
                    k_chunk: int | None = None) -> np.ndarray:
    """``alpha * A @ B + beta * C`` by the Ozaki scheme with ``slices`` int8 slices (see the module).

    K longer than :func:`slicing.max_exact_k` for ``slices`` terms is cut into chunks whose INT32
    diagonal sums are exact; the chunks' float64 results add up (beta applies to the first only).

    Beta 0: C is not read (it may hold NaN), also when K = 0.

    Inf and NaN have no exponent a slice can carry: they are sliced as zeros, and the rows of A and
    columns of B that hold one are then recomputed by a plain float64 product, so the result is
    float64 GEMM's: +-Inf where an infinity meets finite values, NaN where Inf * 0, Inf - Inf or a
    NaN occurs (``nonfinite``).
    """
    a, b, c = _require_operands(a, b, c)
    if c is None and beta != 0:
        raise KernelLabArgumentError("beta is not 0 but no C was given")
    bad_rows, bad_cols = nonfinite_lines(a, b)
    a0, b0 = finite_copies(a, b)
    da, ea = split(a0, slices, axis=1)
    db, eb = split(b0, slices, axis=0)
    k = a.shape[1]
    limit = max_exact_k(slices)
    k_chunk = limit if k_chunk is None else min(int(k_chunk), limit)
    out = None if c is None else np.asarray(c, np.float64)
    if k == 0:  # no products: C = beta * C, and with beta = 0 C is not read (it may hold NaN)
        out = beta * out if beta != 0 else np.zeros((a.shape[0], b.shape[1]))
    for k0 in range(0, k, k_chunk):
        diags = diagonal_sums(da[:, :, k0:k0 + k_chunk], db[:, k0:k0 + k_chunk, :])
        out = reconstruct(diags, ea, eb, alpha, beta if k0 == 0 else 1.0, out)
    out = np.array(out, dtype=np.float64)
    if bad_rows.any() or bad_cols.any():
        patch_nonfinite(out, a, b, bad_rows, bad_cols, alpha)
    return out


# ---------------------------------------------------------------------------------------------
# The yardstick: compensated dot products.

_SPLITTER = 2.0**27 + 1.0


def _split_halves(x):
    """Veltkamp's split: x = hi + lo exactly, each with at most 26 significant bits."""
    t = _SPLITTER * x
    hi = t - (t - x)
    return hi, x - hi


def accurate_matmul(a, b, rows=None) -> np.ndarray:
    """``A[rows] @ B`` as accurately as twice float64 precision allows, then rounded to float64.

    Every product is split exactly into a float64 and its rounding error (Dekker's TwoProduct),
    the running sum carries its rounding error along (Knuth's TwoSum), and the errors are added at
    the end. Rows and columns are first scaled by powers of two (exact) so that nothing overflows.
    ``rows`` (indices) limits the work to a sample of rows: the cost is K vectorised steps over a
    (len(rows), N) array. Inputs must be finite.
    """
    a, b, _ = _require_operands(a, b)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise KernelLabArgumentError("accurate_matmul needs finite inputs")
    if rows is not None:
        a = a[np.asarray(rows)]
    ea = _exponents(a, 1)
    eb = _exponents(b, 0)
    sa = np.ldexp(a, -ea[:, None])
    sb = np.ldexp(b, -eb[None, :])
    m, k = sa.shape
    n = sb.shape[1]
    total = np.zeros((m, n))
    comp = np.zeros((m, n))
    b_hi, b_lo = _split_halves(sb)
    for j in range(k):
        x = sa[:, j:j + 1]
        x_hi, x_lo = _split_halves(x)
        y, y_hi, y_lo = sb[j:j + 1, :], b_hi[j:j + 1, :], b_lo[j:j + 1, :]
        p = x * y
        p_err = ((x_hi * y_hi - p) + x_hi * y_lo + x_lo * y_hi) + x_lo * y_lo
        s_new = total + p
        z = s_new - total
        s_err = (total - (s_new - z)) + (p - z)
        total = s_new
        comp += s_err + p_err
    return np.ldexp(total + comp, ea[:, None] + eb[None, :])


def _exponents(x, axis):
    amax = np.abs(x).max(axis=axis) if x.shape[axis] else np.zeros(x.shape[1 - axis])
    _, e = np.frexp(amax)
    return np.where(amax > 0, e, 0).astype(np.int64)


def errors(got, a, b, reference=None, rows=None) -> dict:
    """Error metrics of a computed ``A @ B`` (float64) against an accurate reference.

    - ``normwise``: ``||got - ref||_F / ||ref||_F`` over the rows compared;
    - ``componentwise``: ``max |got - ref| / (u * (|A| @ |B|))`` with u = 2**-53: how many units of
      roundoff *of the terms* the worst element is off (float64 GEMM's own error is at most about
      K of these, typically about sqrt(K)).

    ``rows`` compares a sample of rows (the reference is computed for those only, unless given).
    """
    a, b, _ = _require_operands(a, b)
    got = np.asarray(got, dtype=np.float64)
    if rows is not None:
        rows = np.asarray(rows)
        got = got[rows]
        a_rows = a[rows]
    else:
        a_rows = a
    ref = accurate_matmul(a, b, rows=rows) if reference is None else np.asarray(reference)
    if ref.shape != got.shape:
        raise KernelLabArgumentError(f"the reference has shape {ref.shape}, the result {got.shape}")
    diff = got - ref
    den = np.linalg.norm(ref)
    scale = np.abs(a_rows) @ np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        comp = np.where(scale > 0, np.abs(diff) / (U64 * scale), np.where(diff == 0, 0.0, np.inf))
    return {"normwise": float(np.linalg.norm(diff) / den) if den > 0 else float(np.linalg.norm(diff)),
            "componentwise": float(comp.max()) if comp.size else 0.0}
