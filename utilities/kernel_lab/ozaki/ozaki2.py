"""Ozaki scheme II: FP64 matrix multiplication from INT8 products and the Chinese remainder theorem.

The method is K. Ozaki, Y. Uchino and T. Imamura, "Ozaki Scheme II: A GEMM-oriented emulation of
floating-point matrix multiplication using an integer modular technique" (2025, arXiv:2504.08009).
This module follows the paper's outline in NumPy; the details (rounding, the bounds, the
reconstruction in float64 windows) are this course's own and are documented below.

The idea
--------
Ozaki-I (``reference.py``) cuts every number into ``s`` 8-bit digits and multiplies digit matrices
pairwise: about s(s+1)/2 INT8 products for s slices (28 for 7). Ozaki-II turns the matrices into
*integers* once, and multiplies their remainders modulo N small coprime numbers instead:

1. **Scale and round.** Row ``i`` of A is multiplied by ``2**mu_i``, column ``j`` of B by
   ``2**nu_j``, and rounded to integers: ``A' = rint(diag(2**mu) A)``, ``B' = rint(B diag(2**nu))``.
   The exponents are as large as the CRT allows (see "The bound"): the larger they are, the more
   bits of every entry survive the rounding.
2. **Remainders.** For each modulus ``m_l`` (pairwise coprime, at most 256) take ``A' mod m_l`` and
   ``B' mod m_l`` in symmetric form, ``[-floor(m/2), ceil(m/2) - 1]``: every remainder fits in
   int8 (256 gives [-128, 127]).
3. **N INT8 products.** ``P_l = (A' mod m_l) @ (B' mod m_l)`` with INT32 accumulation, exact while
   ``K * 128 * 128 <= 2**31 - 1`` (K <= 131,071: ``slicing.max_exact_k(1)``, the same limit as one
   slice product). Then ``P_l = A'B' (mod m_l)``.
4. **Chinese remainder theorem.** The N remainders of ``C' = A'B'`` determine ``C'`` modulo
   ``M = m_1 m_2 ... m_N``; because the scaling keeps ``|C'| < M/2``, they determine ``C'`` itself.
   It is rebuilt in float64 (see "Reconstruction"), then unscaled:
   ``C = diag(2**-mu) C' diag(2**-nu)`` (exact powers of two).

N products instead of s(s+1)/2: with INT8 moduli about 14 reach float64 accuracy where Ozaki-I needs
28 (:func:`gemm_count` and the tests give the numbers). The price: every product is used for every
bit, so there is no cheap "fewer diagonals" trade-off, and the reconstruction costs more float64
work per element than Ozaki-I's.

The bound (how many bits the integers keep)
-------------------------------------------
The CRT returns ``C'`` only if ``|C'_ij| < M/2``. This module asks a little more, so that the
float64 quotient of the reconstruction can never round the wrong way:
``sum_k |a'_ik| |b'_kj| <= LIMIT = floor(M (2**30 - 1) / 2**31)`` (M/2 less a 2**-30 share). Two
rules keep it, both computed per row of A and per column of B before anything is multiplied:

- ``bound="norm"`` (default; the paper's Cauchy-Schwarz bound): ``sum_k |a'||b'| <= ||a'_i|| ||b'_j||``.
  Each row of A is scaled so that ``2**mu_i ||a_i||_2 < 2**qa`` and each column of B so that
  ``2**nu_j ||b_j||_2 < 2**qb``; rounding adds at most ``sqrt(K)/2`` to a norm, so
  ``(qa, qb)`` are the largest with ``(2**qa + sqrt(K)/2)(2**qb + sqrt(K)/2) <= LIMIT``
  (:func:`operand_bits`). An entry ``a_ik`` then keeps about ``qa - log2(||a_i|| / |a_ik|)``
  bits: an entry of typical size in a row of K similar ones keeps ``qa - log2(sqrt K)``.
- ``bound="max"`` (the simplest rule): ``sum_k |a'||b'| <= K max|a'_i| max|b'_j|``. Rows are scaled
  so that ``max |a'_i| <= 2**pa`` (``pa`` below the row's top exponent ``frexp(max|a_i|)[1]``,
  like Ozaki-I's slicing), with ``K 2**(pa + pb) <= LIMIT``. An entry keeps
  ``pa - (e_i - e(a_ik))`` bits. Cauchy-Schwarz never keeps fewer bits (``||a|| <= sqrt(K) max|a|``)
  and keeps more when a few entries dominate a row.

So ``qa + qb`` is about ``log2(M) - 1``, about 7.9 bits per modulus, and the error of C is that of
rounding A and B to those integers: for K independent entries of similar size the normwise error
is about ``1.4 sqrt(K/6) 2**(-(qa + qb)/2)``, 16 times smaller per modulus (``auto`` predicts it
for any inputs). Float64 accuracy (normwise 5e-15, the module's goal) needs ``qa + qb`` of about
``93 + log2(K)``: 13 moduli reach it for K up to a few hundred, 14 up to some tens of thousands
(at K = 1000: 1.2e-14 with 13, 7.6e-16 with 14, the same as Ozaki-I's 7 slices), 15 beyond.
Unlike Ozaki-I, spread of magnitudes *inside* a row costs nothing under the norm rule (the
normwise error is measured against the same norms that set the scaling); what costs is K
(Cauchy-Schwarz assumes the worst alignment of A's row with B's column).

Reconstruction
--------------
Let ``r_l`` be the symmetric remainder of ``P_l`` modulo ``m_l``, ``y_l = (M/m_l)^-1 mod m_l`` and
``c_l = (M/m_l) y_l``: then ``X = sum_l c_l r_l`` is congruent to ``C'`` modulo M, and
``C' = X - q M`` with ``q = rint(X / M) = rint(sum_l r_l y_l / m_l)``. X reaches ``128 N M``
(about 2**130 for N = 14) and ``C'`` may be tiny: the subtraction cancels almost everything, so it
cannot be done in plain float64. It is done exactly, in float64 windows:

- ``q`` comes from the small fractions ``y_l / m_l`` in float64; its error (below 2**-36) cannot move
  the rounding because ``|C'| / M`` stays 2**-31 away from 1/2 (the bound above);
- every ``c_l`` and M is cut into W windows of w bits (the same bit positions for all):
  ``c_l = sum_k c_lk``; ``w`` is small enough (``2**w (256 N + 1) <= 2**53``) that
  ``S_k = sum_l r_l c_lk - q M_k`` is an exact float64 sum of exact products, in any order, with
  or without FMA;
- ``C' = S_1 + S_2 + ... + S_W`` added from the top: the top partial sums are exact (they cancel
  to what the lower windows need), so only the last one or two additions round: the float64 C'
  is within one unit in the last place of the exact integer (the tests compare with Python
  integers).

Per element that is N remainders, N + W*(N + 1) multiply-adds: float64 work linear in N (Garner's
mixed-radix method would need N(N-1)/2 modular steps).

Products longer than the INT32 limit
------------------------------------
:func:`emulated_matmul` cuts K into chunks whose INT32 products are exact, reduces each chunk's
products modulo ``m_l`` and adds the remainders (modulo ``m_l``): one scaling and one
reconstruction for the whole K. (The GPU launcher ``gpu_ozaki2.Ozaki2Gemm`` instead runs each
chunk as its own emulated GEMM and adds the float64 results, like ``gpu.OzakiGemm``.)

Inf and NaN
-----------
As in ``reference.emulated_matmul``: Inf and NaN are read as zeros, and the rows of A and columns
of B holding one are recomputed by a plain float64 product (``nonfinite``), so the result is
float64 GEMM's (+-Inf where an infinity meets finite values, NaN where Inf * 0, Inf - Inf or a NaN
occurs).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..validate import KernelLabArgumentError
from .nonfinite import finite_copies, nonfinite_lines, patch_nonfinite
from .slicing import max_exact_k

MAX_MODULI = 32
MARGIN_BITS = 30  # |C'| <= (M/2)(1 - 2**-30): q = rint(X / M) cannot round the wrong way
NORM_SLACK = 2.0**-20  # a computed row norm times (1 + 2**-20) is above the true one (K < 2**30)
POW2_TABLE = 256  # 2**j mod m for j < 256: enough for integers below 2**(53 + 255)
BOUNDS = ("norm", "max")


def coprime_moduli(n: int) -> tuple[int, ...]:
    """The first ``n`` of the moduli this module uses: greedily the largest integers <= 256 that are
    coprime to all larger ones chosen (256, 255, 253, 251, 247, 241, ...).

    Their symmetric remainders fit in int8, and every product of remainders is at most 128 * 128.

    >>> coprime_moduli(6)
    (256, 255, 253, 251, 247, 241)
    """
    n = _require_moduli(n)
    return _GREEDY_MODULI[:n]


def _greedy_moduli():
    out = []
    for m in range(256, 1, -1):
        if all(math.gcd(m, x) == 1 for x in out):
            out.append(m)
        if len(out) == MAX_MODULI:
            break
    return tuple(out)


_GREEDY_MODULI = _greedy_moduli()


def _require_moduli(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_MODULI:
        raise KernelLabArgumentError(f"the number of moduli must be a whole number from 1 to {MAX_MODULI}, "
                                     f"got {n!r}")
    return int(n)


@dataclass(frozen=True)
class CrtPlan:
    """Everything the scheme needs to know about N moduli, computed once (:func:`crt_plan`).

    - ``moduli``: m_1 .. m_N; ``product``: M (a Python int); ``limit``: the largest allowed
      ``sum_k |a'||b'|``, ``floor(M (2**30 - 1) / 2**31)``;
    - ``half``: ``floor(m_l / 2)``, the symmetric remainders are ``[-half, m - 1 - half]``;
    - ``fractions``: ``y_l / m_l`` in float64, for the quotient q;
    - ``window_bits`` (w) and ``window_low`` (the lowest bit of each window, top window first);
      ``weights``: (N, W) float64 windows of ``c_l``; ``product_windows``: (W,) windows of M;
    - ``pow2``: (N, 256) int64, ``2**j mod m_l``, to reduce integers above 2**53.
    """

    moduli: tuple
    product: int
    limit: int
    half: np.ndarray
    fractions: np.ndarray
    window_bits: int
    window_low: tuple
    weights: np.ndarray
    product_windows: np.ndarray
    pow2: np.ndarray

    @property
    def n(self) -> int:
        return len(self.moduli)

    @property
    def product_bits(self) -> float:
        """log2(M): about 7.9 bits per modulus."""
        return math.log2(self.product)


@functools.lru_cache(maxsize=None)
def crt_plan(n_moduli: int) -> CrtPlan:
    """The :class:`CrtPlan` of the first ``n_moduli`` moduli of :func:`coprime_moduli`.

    >>> plan = crt_plan(14)
    >>> plan.n, round(plan.product_bits, 1), plan.window_bits, len(plan.window_low)
    (14, 110.2, 41, 3)
    """
    mods = coprime_moduli(n_moduli)
    n = len(mods)
    big_m = math.prod(mods)
    limit = big_m * (2**MARGIN_BITS - 1) // 2**(MARGIN_BITS + 1)
    ys = [pow(big_m // m, -1, m) if m > 1 else 0 for m in mods]
    cs = [(big_m // m) * y for m, y in zip(mods, ys)]
    # Window width: |S_k| / 2**low_k <= (128 N + (128 N + 1)) * 2**w must stay <= 2**53.
    w = 53 - math.ceil(math.log2(256 * n + 1))
    top = big_m.bit_length()
    lows = []
    hi = top
    while hi > 0:
        lows.append(max(hi - w, 0))
        hi -= w

    def windows(x):
        out = []
        hi = top
        for lo in lows:
            piece = (x >> lo) & ((1 << (hi - lo)) - 1)
            out.append(math.ldexp(float(piece), lo))  # piece < 2**w <= 2**53: exact
            hi = lo
        return out

    weights = np.array([windows(c) for c in cs], dtype=np.float64).reshape(n, len(lows))
    pow2 = np.array([[pow(2, j, m) for j in range(POW2_TABLE)] for m in mods], dtype=np.int64)
    return CrtPlan(moduli=mods, product=big_m, limit=limit,
                   half=np.array([m // 2 for m in mods], dtype=np.int64),
                   fractions=np.array([float(Fraction(y, m)) for y, m in zip(ys, mods)]),
                   window_bits=w, window_low=tuple(lows), weights=weights,
                   product_windows=np.array(windows(big_m), dtype=np.float64), pow2=pow2)


# ---------------------------------------------------------------------------------------------
# Scaling


def operand_bits(n_moduli: int, k: int, bound: str = "norm") -> tuple[int, int]:
    """``(qa, qb)``: the powers of two that bound A's rows and B's columns after scaling.

    ``bound="norm"``: ``||a'_i||_2 <= 2**qa + sqrt(K)/2``, the largest pair (qa = qb or qb + 1) with
    ``(2**qa + sqrt(K)/2)(2**qb + sqrt(K)/2) <= limit``. ``bound="max"``: ``max|a'_i| <= 2**qa``
    with ``K 2**(qa + qb) <= limit``. Raises if even qa = qb = 0 does not fit (too few moduli for
    this K).

    >>> operand_bits(14, 1000), operand_bits(14, 1000, "max")
    ((55, 54), (50, 49))
    """
    plan = crt_plan(n_moduli)
    k = int(k)
    if bound not in BOUNDS:
        raise KernelLabArgumentError(f"bound must be one of {BOUNDS}, got {bound!r}")
    if bound == "max":
        total = (plan.limit // max(k, 1)).bit_length() - 1  # K 2**total <= limit
        if total < 0:
            raise KernelLabArgumentError(f"{n_moduli} moduli cannot hold a product of length K = {k}")
        return (total + 1) // 2, total // 2
    s = math.isqrt(max(k, 1) - 1) + 1  # an integer >= sqrt(K)

    def fits(qa, qb):  # (2**qa + s/2)(2**qb + s/2) <= limit, in integers
        return (2**(qa + 1) + s) * (2**(qb + 1) + s) <= 4 * plan.limit

    total = plan.limit.bit_length()
    while total >= 0 and not fits((total + 1) // 2, total // 2):
        total -= 1
    if total < 0:
        raise KernelLabArgumentError(f"{n_moduli} moduli cannot hold a product of length K = {k}")
    return (total + 1) // 2, total // 2


def norm_exponents(x: np.ndarray, axis: int) -> np.ndarray:
    """Per-row (``axis=1``) or per-column (``axis=0``) ``E`` with ``||row||_2 < 2**E`` (0 for zeros).

    Computed as on the GPU: the row is scaled by its top exponent ``e = frexp(max|x|)[1]`` (exact),
    its sum of squares taken in float64, and ``E = e + frexp(sqrt(sum) * (1 + 2**-20))[1]``: the
    factor covers the sum's rounding (at most about K * 2**-53). Returned as int32.

    >>> norm_exponents(np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]]), axis=1)   # norms 5, 0, 1
    array([3, 0, 1], dtype=int32)
    """
    x = np.asarray(x, dtype=np.float64)
    if x.shape[axis] == 0:
        return np.zeros(x.shape[1 - axis], np.int32)
    amax = np.abs(x).max(axis=axis)
    _, e = np.frexp(amax)
    e = np.where(amax > 0, e, 0).astype(np.int64)
    scaled = np.ldexp(x, -(e[:, None] if axis == 1 else e[None, :]))
    total = np.zeros(x.shape[1 - axis])
    for j in range(x.shape[axis]):  # in order, like a GPU thread walking its row
        v = scaled[:, j] if axis == 1 else scaled[j, :]
        total += v * v
    _, en = np.frexp(np.sqrt(total) * (1.0 + NORM_SLACK))
    return np.where(amax > 0, e + en, 0).astype(np.int32)


def scale_exponents(x: np.ndarray, n_moduli: int, axis: int, bound: str = "norm", k: int | None = None):
    """The scaling exponents ``mu`` (rows, ``axis=1``) or ``nu`` (columns, ``axis=0``) of an operand.

    ``x`` must be finite. ``mu_i = qa - E_i`` with ``E_i`` from :func:`norm_exponents` (``"norm"``)
    or the top exponent ``frexp(max|x_i|)[1]`` (``"max"``); B's columns use ``qb``. Returned as
    int32; rows of zeros get ``qa``.

    >>> a = np.array([[3.0, 4.0], [0.5, 0.0]])
    >>> scale_exponents(a, 14, axis=1)          # ||row 0|| = 5 < 2**3, ||row 1|| = 0.5 < 2**0
    array([52, 55], dtype=int32)
    """
    x = np.asarray(x, dtype=np.float64)
    k = x.shape[axis] if k is None else k
    qa, qb = operand_bits(n_moduli, k, bound)
    q = qa if axis == 1 else qb
    if bound == "norm":
        e = norm_exponents(x, axis)
    else:
        amax = np.abs(x).max(axis=axis) if x.shape[axis] else np.zeros(x.shape[1 - axis])
        e = np.where(amax > 0, np.frexp(amax)[1], 0)
    return (q - e.astype(np.int64)).astype(np.int32)


def to_integers(x: np.ndarray, shift: np.ndarray, axis: int) -> np.ndarray:
    """``rint(x * 2**shift)`` per row (``axis=1``) or column (``axis=0``), as float64 integers.

    Values may exceed int64 (qa reaches 120 bits for 32 moduli); a float64 holds them exactly
    because a scaled float64 still has at most 53 significant bits.

    >>> to_integers(np.array([[0.3, -0.7], [1.5, 2.5]]), np.array([3, 0]), axis=1)
    array([[ 2., -6.],
           [ 2.,  2.]])
    """
    shift = np.asarray(shift, dtype=np.int64)
    return np.rint(np.ldexp(x, shift[:, None] if axis == 1 else shift[None, :]))


def residues(xint: np.ndarray, plan: CrtPlan) -> np.ndarray:
    """Symmetric remainders of float64 integers modulo each modulus: int8, shape ``(N,) + x.shape``.

    A float64 integer is ``sig * 2**sh`` with ``|sig| < 2**53``: below 2**53 it is its own int64;
    above, its remainder is ``(sig mod m)(2**sh mod m) mod m``, all in int64.

    >>> residues(np.array([[300.0, -1.0, 2.0**70]]), crt_plan(2))[:, 0].tolist()   # mod 256, mod 255
    [[44, -1, 0], [45, -1, 64]]
    """
    xint = np.asarray(xint, dtype=np.float64)
    frac, e = np.frexp(xint)
    small = e <= 53
    big_int = np.where(small, xint, 0.0).astype(np.int64)
    sig = np.ldexp(frac, 53).astype(np.int64)
    sh = np.where(small, 0, e - 53)
    if sh.size and sh.max() >= POW2_TABLE:
        raise KernelLabArgumentError("an integer above 2**308 cannot come from a scaled float64")
    mag = np.abs(np.where(small, big_int, sig))
    neg = xint < 0
    out = np.empty((plan.n,) + xint.shape, dtype=np.int8)
    for l, (m, h) in enumerate(zip(plan.moduli, plan.half)):
        r = (mag % m) * plan.pow2[l][sh] % m
        r = np.where(neg, (m - r) % m, r)
        out[l] = (r + h) % m - h
    return out


def residue_products(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """``P_l = ra[l] @ rb[l]`` exactly (int64, shape (N, M, N)), as INT8 tensor cores with INT32
    accumulation compute them: the caller keeps K <= ``slicing.max_exact_k(1)``.

    Float64 matrix products are exact here (every partial sum is an integer below 2**53).

    >>> ra = np.array([[[1, -2]], [[3, 4]]], np.int8)          # (N=2, M=1, K=2)
    >>> rb = np.array([[[5], [6]], [[7], [8]]], np.int8)       # (N=2, K=2, N=1)
    >>> residue_products(ra, rb)[:, 0, 0].tolist()
    [-7, 53]
    """
    ra = np.asarray(ra)
    rb = np.asarray(rb)
    fa = ra.astype(np.float64)
    fb = rb.astype(np.float64)
    return np.stack([fa[l] @ fb[l] for l in range(ra.shape[0])]).astype(np.int64) if ra.shape[0] else \
        np.zeros((0, ra.shape[1], rb.shape[2]), np.int64)


def symmetric_mod(parts: np.ndarray, plan: CrtPlan) -> np.ndarray:
    """Each ``parts[l]`` (any integers) reduced to its symmetric remainder modulo ``m_l`` (int64).

    >>> symmetric_mod(np.array([[130], [130]]), crt_plan(2)).tolist()   # mod 256: [-128, 127]; mod 255: [-127, 127]
    [[-126], [-125]]
    """
    parts = np.asarray(parts, dtype=np.int64)
    m = np.asarray(plan.moduli, dtype=np.int64).reshape((-1,) + (1,) * (parts.ndim - 1))
    h = plan.half.reshape(m.shape)
    return (parts + h) % m - h


def crt_reconstruct(parts: np.ndarray, plan: CrtPlan) -> np.ndarray:
    """The integer ``C'`` with ``C' = parts[l] (mod m_l)`` for every l and ``|C'| < M/2``, in float64.

    ``parts`` is (N, ...) integers: INT32 products, or already remainders. The result is within one
    unit in the last place of the exact integer (module docstring, "Reconstruction"); operations
    are done in the order the GPU kernel ``gpu_ozaki2.crt_kernel`` does them, so both agree bit for
    bit.

    >>> plan = crt_plan(3)
    >>> x = np.array([-123456, 7, 0])
    >>> crt_reconstruct(np.stack([x % m for m in plan.moduli]), plan).tolist()
    [-123456.0, 7.0, 0.0]
    """
    r = symmetric_mod(parts, plan).astype(np.float64)
    n, w = plan.weights.shape
    quot = np.zeros(r.shape[1:])
    for l in range(n):
        quot = quot + r[l] * plan.fractions[l]
    q = np.rint(quot)
    total = None
    for k in range(w):
        s = np.zeros(r.shape[1:])
        for l in range(n):
            s = s + r[l] * plan.weights[l, k]  # exact: see the window width
        s = s - q * plan.product_windows[k]
        total = s if total is None else total + s
    return total


# ---------------------------------------------------------------------------------------------
# The scheme


def gemm_count(n_moduli: int) -> int:
    """INT8 products Ozaki-II makes with ``n_moduli`` moduli: one per modulus (Ozaki-I with s slices:
    ``s (s + 1) / 2``).

    >>> gemm_count(14), 7 * 8 // 2
    (14, 28)
    """
    return _require_moduli(n_moduli)


def emulated_matmul(a, b, moduli: int = 14, alpha: float = 1.0, beta: float = 0.0, c=None,
                    bound: str = "norm", k_chunk: int | None = None) -> np.ndarray:
    """``alpha * A @ B + beta * C`` by Ozaki scheme II with ``moduli`` INT8 moduli (module docstring).

    ``bound`` picks the scaling rule (``"norm"``: Cauchy-Schwarz, default; ``"max"``). K longer than
    the INT32 limit (or than ``k_chunk``) is cut into chunks whose products are exact; their
    remainders add modulo each modulus. Beta 0: C is not read (it may hold NaN). Inf/NaN in a row of
    A or a column of B: that row/column of the result is float64 GEMM's (``nonfinite``).

    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.standard_normal((50, 300)), rng.standard_normal((300, 40))
    >>> from kernel_lab.ozaki import reference as ref
    >>> ref.errors(emulated_matmul(a, b, 14), a, b)["normwise"] < 5e-15
    True
    """
    from .reference import _require_operands

    a, b, c = _require_operands(a, b, c)
    n = _require_moduli(moduli)
    if bound not in BOUNDS:
        raise KernelLabArgumentError(f"bound must be one of {BOUNDS}, got {bound!r}")
    if c is None and beta != 0:
        raise KernelLabArgumentError("beta is not 0 but no C was given")
    plan = crt_plan(n)
    bad_rows, bad_cols = nonfinite_lines(a, b)
    a0, b0 = finite_copies(a, b)
    m, k = a.shape
    mu = scale_exponents(a0, n, 1, bound)
    nu = scale_exponents(b0, n, 0, bound)
    ra = residues(to_integers(a0, mu, 1), plan)
    rb = residues(to_integers(b0, nu, 0), plan)
    limit = max_exact_k(1)
    k_chunk = limit if k_chunk is None else max(1, min(int(k_chunk), limit))
    acc = np.zeros((n, m, b.shape[1]), dtype=np.int64)
    for k0 in range(0, k, k_chunk):
        acc = symmetric_mod(acc + residue_products(ra[:, :, k0:k0 + k_chunk], rb[:, k0:k0 + k_chunk, :]), plan)
    cint = crt_reconstruct(acc, plan)
    x = np.ldexp(cint, -(mu.astype(np.int64)[:, None] + nu.astype(np.int64)[None, :]))
    if beta == 0:  # BLAS rule: with beta = 0, C is not read
        out = alpha * x
    else:
        out = alpha * x + beta * np.asarray(c, np.float64)
    out = np.array(out, dtype=np.float64)
    if bad_rows.any() or bad_cols.any():
        patch_nonfinite(out, a, b, bad_rows, bad_cols, alpha)
    return out
