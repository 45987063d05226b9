"""How many slices (Ozaki-I) or moduli (Ozaki-II) these inputs need for the accuracy asked for.

Seven slices are right for matrices whose rows hold numbers of similar size and a user who wants
float64 accuracy. Where a row spans many binades, each slice's 8 bits start at the row's *largest*
entry, so the typical entry keeps fewer bits and more slices are needed; where the user asks for
less, fewer will do. This module predicts the error of every count from statistics of the inputs
and returns the smallest count whose predicted error is at most ``target / SAFETY`` (SAFETY = 2).

>>> rng = np.random.default_rng(1)
>>> a, b = rng.standard_normal((60, 400)), rng.standard_normal((400, 50))
>>> choose_slices(a, b).count, choose_slices(a, b, target=1e-9).count, choose_moduli(a, b).count
(7, 5, 14)

What the inputs tell
--------------------
Per row ``i`` of A (per column ``j`` of B, the same way):

- the *top exponent* ``e_i = frexp(max_k |a_ik|)[1]``: Ozaki-I's fixed-point grid for the row is
  ``2**(e_i - P)`` with ``P = 8s - 2`` bits, whatever the size of the other entries;
- the *exponent spread* (:func:`spread_bits`), ``e_i - log2(rms_k |a_ik|)``: how many bits below
  the row's top its typical entry sits. Those bits are lost to every entry: an entry needs about
  ``spread + log2(1/target)`` bits of the grid, and the product of a row and a column needs
  ``P`` of about ``log2(1/target) + spread_i + spread_j`` plus a few bits for the dropped digit
  products (below). About 2 bits for Gaussian rows; about 4 for Gaussian entries each scaled by a
  random power of two from 2**0 to 2**-24 (the rms is dominated by the largest entries);
- which digit positions hold random bits: an entry ``d`` binades below its row's top has digits
  from position ``(d - 6) / 8`` on and no bits below ``(d + 54) / 8``, so its lowest digits are
  exact zeros when it has fewer bits than the grid (small integers, short binary fractions).

The error model
---------------
The emulated product's errors are sums of many independent rounding errors, so they add in
squares. Ozaki-I with ``s`` slices, element (i, j), variance

    (4/3) 2**(-16 s) (4**e_i sum_k b_kj**2 + 4**e_j sum_k a_ik**2)        entries rounded to the grid
  + (16/9) 2**(-16 s) 4**(e_i + e_j) sum_k sum_{t=1}^{s-1} act(a_ik, t) act(b_kj, s - t)

The second line is the first diagonal of digit products left out (t + u = s): s - 1 products per
k of two digits uniform in [-128, 127], each worth ``2**(e_i + e_j + 2 - 8s)`` per unit of 2**14;
``act(x, t)``: digit t of x holds random bits. Ozaki-II with N moduli rounds ``x * 2**mu`` to an
integer: ``(1/12)(4**-mu_i sum_k b_kj**2 + 4**-nu_j sum_k a_ik**2)`` over the entries that are not
already integers, with exactly the exponents ``ozaki2.scale_exponents`` will use. Both add the
float64 rounding of the result.

The two measures (``measure=``); the default targets are this module's float64 goals:

- ``"normwise"``: ``||C_emulated - AB||_F / ||AB||_F`` (``reference.errors``' normwise), default
  target ``FLOAT64_NORMWISE = 5e-15``. The numerator sums over i and j in O(M + N) from per-row
  sums (shares of active digits per row: independence along k). ``||AB||_F`` is estimated as
  ``sqrt(mean ||A (B x)||^2)`` over 32 fixed Gaussian probes x (Hutchinson): two matrix-vector
  products each, and it sees cancellation in AB, which an estimate from the norms of A and B
  would not. Cost O(MK + KN).
- ``"componentwise"``: ``max_ij |error_ij| / (|A||B|)_ij`` (``reference.errors``' componentwise
  times u), default target ``FLOAT64_COMPONENTWISE = 64 u`` (what ``test_ozaki_reference`` holds 7
  slices to). No statistic of rows alone gives ``(|A||B|)_ij``: a row's large entries may meet a
  column's small ones, and with few dominant terms per dot product the smallest ``(|A||B|)_ij`` is
  far below the average. So this measure computes it, and the rounding sums above per element:
  three float64 GEMMs (the paper's "accurate mode" spends an INT8 GEMM on the same bound). The
  worst element is the level that one element in ten realisations exceeds:
  ``sum_ij P(|N(0, r_ij**2)| > t) = ln(10/9)``, ``r_ij = std_ij / (|A||B|)_ij``.

How good it is (the tests hold it to this, over random matrices with 0 to 40 binades of spread
per row and column, signed and positive, K from 30 to 2000): normwise predictions are within
0.6-1.7 times the measured error; componentwise within 0.1-1.9 (pessimistic where a few huge
terms dominate each dot product). With SAFETY = 2 the chosen count met its target in every case
tried, and one count fewer also met it in about a quarter of the cases for slices (each slice
is worth 8 bits) and about a third for moduli (each modulus is worth 4 bits per operand).

Where the model is wrong: inputs whose rounding errors are not random (entries on a grid slightly
finer than the scheme's, or correlated with the other operand's signs), and normwise for K so
small that the probes' estimate of ``||AB||_F`` is the only thing between the model and the
answer (it is within about 25% with 32 probes, even for a product of rank one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..validate import KernelLabArgumentError
from . import ozaki2
from .slicing import MAX_SLICES, scaled_bits

U64 = 2.0**-53
FLOAT64_NORMWISE = 5e-15
FLOAT64_COMPONENTWISE = 64 * U64
MEASURES = ("normwise", "componentwise")
PROBES = 32
SAFETY = 2.0  # a count is chosen when its predicted error is at most target / SAFETY
_EXCEED = math.log(10 / 9)  # componentwise: the worst element's error, 9 times in 10
_SPREAD_CAP = 80  # entries more than 80 binades below their row's top act like zeros for any s <= 8


@dataclass(frozen=True)
class Choice:
    """What :func:`choose_slices` / :func:`choose_moduli` decided, and why.

    ``count`` is the number of slices (Ozaki-I) or moduli (Ozaki-II); ``predicted`` the predicted
    error of that count (same measure as the target); ``predictions`` every count tried and its
    predicted error; ``meets`` False when even the largest count misses the target (``count`` is
    then the largest); ``gemms`` the INT8 products the count costs; ``spread`` the largest
    exponent spread (bits) over A's rows and over B's columns.
    """

    scheme: str
    count: int
    measure: str
    target: float
    predicted: float
    meets: bool
    gemms: int
    spread: tuple
    predictions: dict = field(repr=False)


# ---------------------------------------------------------------------------------------------
# Statistics of the inputs


def spread_bits(x, axis: int = 1) -> np.ndarray:
    """Per-row (``axis=1``) or per-column (``axis=0``) exponent spread: ``frexp(max|x|)[1] -
    log2(rms |x|)``, in bits (0 for a row of zeros; rows with Inf/NaN are skipped as zeros).

    About 2 for standard normal rows (max about 3.3 in a row of 1000, so ``e = 2``, rms 1); about 4
    when each entry is also scaled by a random power of two from 2**0 to 2**-24.

    >>> spread_bits(np.array([[1.0, 1.0], [1.0, 2.0**-20]]))
    array([1. , 1.5])
    """
    x = _finite_matrix(x, "x")
    if x.shape[axis] == 0:
        return np.zeros(x.shape[1 - axis])
    amax = np.abs(x).max(axis=axis)
    e = np.where(amax > 0, np.frexp(amax)[1], 0)
    scaled = np.ldexp(x, -(e[:, None] if axis == 1 else e[None, :]))
    rms = np.sqrt(np.mean(scaled * scaled, axis=axis))
    with np.errstate(divide="ignore"):
        return np.where(amax > 0, -np.log2(np.where(rms > 0, rms, 1.0)), 0.0)


def _finite_matrix(x, name):
    x = np.asarray(x)
    if x.ndim != 2:
        raise KernelLabArgumentError(f"{name} must be a matrix (2 dimensions), got shape {x.shape}")
    if x.dtype != np.float64:
        raise KernelLabArgumentError(f"{name} must be float64, got {x.dtype}")
    if not np.isfinite(x).all():
        x = np.where(np.isfinite(x), x, 0.0)  # their rows/columns come out NaN whatever the count
    return x


class _Operand:
    """Per-row statistics of A (or of B transposed, so that its columns are rows), O(rows * K).

    ``x`` is kept as given; ``scaled`` is it times one power of two that brings the largest entry
    of the whole operand below 1 (so that sums of squares and 4**e never overflow: the schemes'
    relative errors do not change when an operand is scaled by a power of two); ``unit`` is every
    row scaled by its own top exponent (entries in [2**-1074, 1))."""

    def __init__(self, x):  # x: rows along axis 0, k along axis 1
        self.x = x
        self.rows, self.k = x.shape
        absx = np.abs(x)
        amax = absx.max(axis=1) if self.k else np.zeros(self.rows)
        self.nonzero_rows = amax > 0
        self.top = np.where(amax > 0, np.frexp(amax)[1], 0).astype(np.int64)
        self.shift = int(self.top[self.nonzero_rows].max()) if self.nonzero_rows.any() else 0
        self.scaled = np.ldexp(x, -self.shift)
        self.scaled_top = self.top - self.shift
        self.sq = np.einsum("ik,ik->i", self.scaled, self.scaled)  # ||row||^2 of the scaled operand
        self.unit = np.ldexp(x, -self.top[:, None])
        self.nonzero = x != 0
        # d: binades below the row's top (capped); zeros get -1 (never counted)
        _, ex = np.frexp(x)
        d = np.where(self.nonzero, np.minimum(self.top[:, None] - ex, _SPREAD_CAP), -1)
        width = _SPREAD_CAP + 2
        idx = (np.arange(self.rows)[:, None] * width + d + 1).ravel()
        counts = np.bincount(idx, minlength=self.rows * width).reshape(self.rows, width).astype(np.float64)
        share = counts[:, 1:] / max(self.k, 1)  # share[i, d]: entries d binades below the row's top
        self.cum = np.concatenate([np.zeros((self.rows, 1)), np.cumsum(share, axis=1)], axis=1)
        self.exponents = ex

    def share_between(self, lo, hi):
        """Share of each row's entries with lo <= d <= hi binades below the row's top."""
        lo = max(lo, 0)
        hi = min(hi, _SPREAD_CAP)
        if hi < lo:
            return np.zeros(self.rows)
        return self.cum[:, hi + 1] - self.cum[:, lo]

    def weight4(self):
        """4**e per row of the scaled operand (e its top exponent), 0 for zero rows."""
        return np.where(self.nonzero_rows, np.ldexp(1.0, 2 * self.scaled_top), 0.0)


def _product_norm(sa, sb, probes=PROBES):
    """Randomised estimate of ||A B||_F of the scaled operands: sqrt(mean ||A (B x)||^2) over fixed
    Gaussian probes x (Hutchinson's estimator; 32 probes: within about 25% even for rank one)."""
    if sa.rows == 0 or sb.rows == 0:
        return 0.0
    rng = np.random.default_rng(20250410)
    x = rng.standard_normal((sb.rows, probes))
    y = sa.scaled @ (sb.scaled.T @ x)
    return float(np.sqrt(np.sum(y * y) / probes))


class _Terms:
    """Per-element sums for the componentwise measure, computed once (three GEMMs of size M x N x K):
    ``den = |A~||B~|`` and the rounding numerators ``ra = nz(A) @ B~**2``, ``rb = A~**2 @ nz(B)``,
    with ``A~``, ``B~`` scaled row by row (column by column) by their top exponents, so every ratio
    below is free of the rows' magnitudes. Every nonzero entry counts as rounded (cautious where
    entries are exact: the prediction then sits at float64's own rounding anyway)."""

    def __init__(self, sa, sb):
        ua, ub = sa.unit, sb.unit.T
        self.den = np.abs(ua) @ np.abs(ub)
        self.ra = sa.nonzero.astype(np.float64) @ (ub * ub)
        self.rb = (ua * ua) @ sb.nonzero.T.astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Predictions
#
# Ozaki-I, s slices (P = 8s - 2). Rounding an entry to its row's grid 2**(e - P) leaves an error
# uniform in +-2**(e - P - 1), variance 4**(e - P - 1) / 3 = (4/3) 2**(-16 s) 4**e. The first
# diagonal left out (t + u = s) adds, per k, s - 1 products of two digits uniform in [-128, 127]
# (variance (2**14 / 3)**2 each) worth 2**(e_i + e_j + 2 - 8s) per 2**14: (16/9) 2**(-16 s)
# 4**(e_i + e_j) per active pair. Digit t of an entry d binades below its row's top holds random
# bits when 8t - 54 <= d <= 8t + 6 (it has bits that high, and bits that low).


def _dropped_shares(sa, sb, s):
    """For t = 1 .. s-1: (per row of A, the share of entries whose digit t holds random bits;
    per column of B, the same for digit s - t)."""
    for t in range(1, s):
        u = s - t
        yield sa.share_between(8 * t - 54, 8 * t + 6), sb.share_between(8 * u - 54, 8 * u + 6)


def _ozaki1_normwise(sa, sb, s, cnorm):
    p = scaled_bits(s)
    wa, wb = sa.weight4(), sb.weight4()
    ga = sa.share_between(p - 52, _SPREAD_CAP)  # entries with bits below the grid (d > P - 53)
    gb = sb.share_between(p - 52, _SPREAD_CAP)
    var = (4 / 3) * (np.sum(wa * ga) * np.sum(sb.sq) + np.sum(wb * gb) * np.sum(sa.sq))
    for fa, fb in _dropped_shares(sa, sb, s):
        var += (16 / 9) * sa.k * np.sum(wa * fa) * np.sum(wb * fb)
    return _relative(var * 2.0**(-16 * s), cnorm)


def _relative(var, cnorm):
    var += (U64 * cnorm) ** 2 / 3  # the float64 rounding of the result
    if cnorm == 0:
        return 0.0 if var == 0 else math.inf
    return math.sqrt(var) / cnorm


def _ozaki1_componentwise(sa, sb, s, terms):
    var = (4 / 3) * (terms.ra + terms.rb)
    for fa, fb in _dropped_shares(sa, sb, s):
        var += (16 / 9) * sa.k * np.outer(fa, fb)
    return _worst_ratio(var * 2.0**(-16 * s), terms.den)


# Ozaki-II, N moduli. Rounding x * 2**mu to an integer leaves an error uniform in +-1/2: variance
# 4**-mu / 12 in the units of A, for every entry that is not already an integer after scaling.


def _ozaki2_shifts(sa, sb, n, bound):
    try:
        mu = ozaki2.scale_exponents(sa.x, n, 1, bound, k=sa.k).astype(np.int64)
        nu = ozaki2.scale_exponents(sb.x.T, n, 0, bound, k=sa.k).astype(np.int64)
    except KernelLabArgumentError:  # too few moduli for this K: no bits at all
        return None
    return mu, nu


def _ozaki2_normwise(sa, sb, n, bound, cnorm):
    shifts = _ozaki2_shifts(sa, sb, n, bound)
    if shifts is None:
        return math.inf
    mu, nu = shifts
    inexact_a = np.mean(sa.nonzero & (sa.exponents + mu[:, None] < 53), axis=1) if sa.k else np.zeros(sa.rows)
    inexact_b = np.mean(sb.nonzero & (sb.exponents + nu[:, None] < 53), axis=1) if sa.k else np.zeros(sb.rows)
    # the grid of the scaled operands: 2**-(mu + shift)
    wa = np.where(sa.nonzero_rows, np.ldexp(1.0, -2 * (mu + sa.shift)), 0.0)
    wb = np.where(sb.nonzero_rows, np.ldexp(1.0, -2 * (nu + sb.shift)), 0.0)
    var = (np.sum(wa * inexact_a) * np.sum(sb.sq) + np.sum(wb * inexact_b) * np.sum(sa.sq)) / 12
    return _relative(var, cnorm)


def _ozaki2_componentwise(sa, sb, n, bound, terms):
    shifts = _ozaki2_shifts(sa, sb, n, bound)
    if shifts is None:
        return math.inf
    mu, nu = shifts
    # in units of each row's top: the grid is 2**-(mu + top)
    wa = np.where(sa.nonzero_rows, np.ldexp(1.0, -2 * (mu + sa.top)), 0.0)
    wb = np.where(sb.nonzero_rows, np.ldexp(1.0, -2 * (nu + sb.top)), 0.0)
    var = (wa[:, None] * terms.ra + wb[None, :] * terms.rb) / 12
    return _worst_ratio(var, terms.den)


def _worst_ratio(var, den):
    """The worst of |error_ij| / (|A||B|)_ij, 9 times in 10: the level t with
    sum_ij P(|N(0, r_ij**2)| > t) = ln(10/9), r_ij = std_ij / (|A||B|)_ij (then P(max > t) is about
    1/10 whether one element or a million share the largest ratio); plus the float64 rounding of
    the result and of the reference (each about u |c_ij| <= u (|A||B|)_ij)."""
    if den.size == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0, np.sqrt(var) / np.where(den > 0, den, 1.0), 0.0).ravel()
    top = float(ratio.max())
    worst = 0.0
    if top > 0:
        ratio = ratio[ratio > top / 16]  # the others cannot reach the level found below
        lo, hi = 0.0, 9.0  # the level, in units of the largest ratio
        for _ in range(40):
            mid = (lo + hi) / 2
            if np.sum(_gauss_tail(mid * top / ratio)) > _EXCEED:
                lo = mid
            else:
                hi = mid
        worst = hi * top
    return math.sqrt(worst**2 + 2 * U64**2)


def _gauss_tail(x):
    """P(|N(0, 1)| > x) = erfc(x / sqrt 2), to a few parts in 1e7 (Abramowitz and Stegun 7.1.26)."""
    y = np.asarray(x, dtype=np.float64) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * y)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return poly * np.exp(-y * y)


def _prepare(a, b):
    a = _finite_matrix(a, "A")
    b = _finite_matrix(b, "B")
    if a.shape[1] != b.shape[0]:
        raise KernelLabArgumentError(f"A is {a.shape[0]}x{a.shape[1]} and B is {b.shape[0]}x{b.shape[1]}: "
                                     "A's columns must equal B's rows")
    return _Operand(a), _Operand(np.ascontiguousarray(b.T))


def _require_measure(measure, target):
    if measure not in MEASURES:
        raise KernelLabArgumentError(f"measure must be one of {MEASURES}, got {measure!r}")
    if target is None:
        target = FLOAT64_NORMWISE if measure == "normwise" else FLOAT64_COMPONENTWISE
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < 1:
        raise KernelLabArgumentError(f"target must be a relative error between 0 and 1, got {target!r}")
    return float(target)


def _size(sa, sb, measure):
    """What the error is measured against: ||AB||_F (estimated), or the per-element terms."""
    return _product_norm(sa, sb) if measure == "normwise" else _Terms(sa, sb)


def _predict1(sa, sb, s, measure, size):
    if measure == "normwise":
        return _ozaki1_normwise(sa, sb, s, size)
    return _ozaki1_componentwise(sa, sb, s, size)


def _predict2(sa, sb, n, measure, bound, size):
    if measure == "normwise":
        return _ozaki2_normwise(sa, sb, n, bound, size)
    return _ozaki2_componentwise(sa, sb, n, bound, size)


def predict_ozaki1_error(a, b, slices: int, measure: str = "normwise") -> float:
    """Predicted error of ``reference.emulated_matmul(a, b, slices)`` (the model of the module
    docstring), in the measure of ``reference.errors`` (componentwise: times u, a plain ratio).

    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.standard_normal((40, 500)), rng.standard_normal((500, 30))
    >>> 1e-16 < predict_ozaki1_error(a, b, 7) < 5e-15 < predict_ozaki1_error(a, b, 6)
    True
    """
    _require_measure(measure, None)
    sa, sb = _prepare(a, b)
    return _predict1(sa, sb, _require_slices(slices), measure, _size(sa, sb, measure))


def predict_ozaki2_error(a, b, moduli: int, measure: str = "normwise", bound: str = "norm") -> float:
    """Predicted error of ``ozaki2.emulated_matmul(a, b, moduli, bound=bound)``; ``inf`` when that
    many moduli cannot hold a product of this K at all.

    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.standard_normal((40, 500)), rng.standard_normal((500, 30))
    >>> predict_ozaki2_error(a, b, 14) < 5e-15 < predict_ozaki2_error(a, b, 13)
    True
    """
    _require_measure(measure, None)
    sa, sb = _prepare(a, b)
    ozaki2.coprime_moduli(moduli)  # validates
    return _predict2(sa, sb, int(moduli), measure, bound, _size(sa, sb, measure))


def _require_slices(s):
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= MAX_SLICES:
        raise KernelLabArgumentError(f"slices must be a whole number from 1 to {MAX_SLICES}, got {s!r}")
    return int(s)


# ---------------------------------------------------------------------------------------------
# Choosing


def choose_slices(a, b, target: float | None = None, measure: str = "normwise") -> Choice:
    """The smallest number of Ozaki-I slices (1..8) whose predicted error meets ``target``.

    ``measure`` is ``"normwise"`` (default target 5e-15) or ``"componentwise"`` (default 64 u,
    relative to |A||B|). See the module docstring for the model and where it fails.

    >>> rng = np.random.default_rng(1)
    >>> a, b = rng.standard_normal((60, 400)), rng.standard_normal((400, 50))
    >>> choose_slices(a, b).count, choose_slices(a, b, 1e-6).count
    (7, 4)
    >>> wide = a * np.exp2(rng.integers(-24, 1, a.shape))   # entries spread over 24 binades per row
    >>> choose_slices(wide, b).count
    8
    """
    target = _require_measure(measure, target)
    sa, sb = _prepare(a, b)
    size = _size(sa, sb, measure)
    preds = {}
    for s in range(1, MAX_SLICES + 1):
        preds[s] = _predict1(sa, sb, s, measure, size)
        if preds[s] * SAFETY <= target:
            break
    return _choice("ozaki1", preds, target, measure, lambda s: s * (s + 1) // 2, sa, sb)


def choose_moduli(a, b, target: float | None = None, measure: str = "normwise", bound: str = "norm") -> Choice:
    """The smallest number of Ozaki-II moduli (1..``ozaki2.MAX_MODULI``) whose predicted error meets
    ``target`` (same measures and defaults as :func:`choose_slices`).

    >>> rng = np.random.default_rng(1)
    >>> a, b = rng.standard_normal((60, 400)), rng.standard_normal((400, 50))
    >>> c = choose_moduli(a, b)
    >>> c.count, c.gemms, choose_slices(a, b).gemms
    (14, 14, 28)
    """
    target = _require_measure(measure, target)
    if bound not in ozaki2.BOUNDS:
        raise KernelLabArgumentError(f"bound must be one of {ozaki2.BOUNDS}, got {bound!r}")
    sa, sb = _prepare(a, b)
    size = _size(sa, sb, measure)
    preds = {}
    for n in range(1, ozaki2.MAX_MODULI + 1):
        preds[n] = _predict2(sa, sb, n, measure, bound, size)
        if preds[n] * SAFETY <= target:
            break
    return _choice("ozaki2", preds, target, measure, lambda n: n, sa, sb)


def _choice(scheme, preds, target, measure, gemms, sa, sb):
    count = max(preds)
    spread = tuple(float(spread_bits(op.x, 1).max()) if op.rows else 0.0 for op in (sa, sb))
    return Choice(scheme=scheme, count=count, measure=measure, target=target, predicted=preds[count],
                  meets=preds[count] * SAFETY <= target, gemms=gemms(count), spread=spread, predictions=preds)
