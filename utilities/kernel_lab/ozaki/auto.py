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

    16 2**(-16 s) (sqrt(4**e_i g_i sum_k b_kj**2) + sqrt(4**e_j g_j sum_k a_ik**2))**2   rounding
  + (16/9) 2**(-16 s) 4**(e_i + e_j) sum_k sum_{t=1}^{s-1} act(a_ik, t) act(b_kj, s - t)

The second line is the first diagonal of digit products left out (t + u = s): s - 1 products per
k of two digits uniform in [-128, 127], each worth ``2**(e_i + e_j + 2 - 8s)`` per unit of 2**14;
``act(x, t)``: digit t of x holds random bits. ``g_i`` is the mean square of row i's rounding
errors in units of its grid, measured from the entries (``_Operand.rounding_msq``): 1/12 for
entries with many random bits below the grid, 0 for entries on it, 1/4 for entries whose bits end
one place below it (every one a tie, off by 1/2). Ozaki-II with N moduli rounds ``x * 2**mu`` to an
integer, with exactly the exponents ``ozaki2.scale_exponents`` will use:
``(sqrt(4**-mu_i g_i sum_k b_kj**2) + sqrt(4**-nu_j g_j sum_k a_ik**2))**2``. The two terms
(A's rounding times B, A times B's rounding) are added as if in phase, not in squares
(``_in_phase``: inputs on a grid finer than the scheme's make them so). Both add the float64
rounding of the result.

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

How good it is, over 40 random matrices with 0 to 40 binades of spread per row and column,
signed and positive, K from 30 to 2000 (``test_ozaki_auto`` holds narrower samples to it):
normwise predictions are 0.7-3 times the measured error, componentwise 0.8-9.5 times
(pessimistic where a few huge terms dominate each dot product, and by up to sqrt(2) where the two
operands' rounding errors are independent, which the in-phase sum does not assume). With
SAFETY = 2 the chosen count met its target in every case tried; one count fewer also met it in
a tenth to a sixth of the cases for slices (each slice is worth 8 bits), a third for moduli
normwise and two thirds componentwise (each modulus is worth 4 bits per operand). Without the
in-phase sum the moduli's normwise share was a sixth: that margin costs a modulus more than
needed in about one case in six.

Inputs on a grid one bit finer than the scheme's (every scaled entry an odd multiple of 1/2),
A signed and B positive, at the decision boundary (target = SAFETY x the prediction of a count):
the chosen count missed its target by up to 1.9 times when the model assumed 1/12 per rounded
entry and independent operands; it meets it now (``test_choosers_meet_their_target_at_the_
decision_boundary``).

Where the model is still wrong: rounding errors of one sign along a whole dot product. Ties at a
fixed parity with A and B both positive round every entry down, so ``dA B`` grows like K, not
sqrt(K), and no fixed margin covers it (the chosen count missed by 5 to 15 times on such inputs of
K = 64 to 1024). And normwise for K so small that the probes' estimate of ``||AB||_F`` is the only
thing between the model and the answer (it is within about 25% with 32 probes, even for a product
of rank one).
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
        x = np.where(np.isfinite(x), x, 0.0)  # their rows/columns are recomputed in float64 (nonfinite)
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

    def rounding_msq(self, y):
        """Per row, the mean square of ``rint(y) - y`` over all entries and over the nonzero ones:
        the rounding errors of the scaled operand ``y`` in units of its grid (1/12 on average for
        entries with many bits below the grid, 1/4 for entries whose bits end one place below it:
        every one is a tie, rounded by 1/2)."""
        if self.k == 0:
            return np.zeros(self.rows), np.zeros(self.rows)
        err = np.rint(y) - y
        sq = np.einsum("ik,ik->i", err, err)
        count = self.nonzero.sum(axis=1)
        return sq / self.k, np.where(count > 0, sq / np.maximum(count, 1), 0.0)

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
# of mean square g 4**(e - P) = 16 g 2**(-16 s) 4**e, g measured per row (1/12 for an error uniform
# in +-1/2 grid step: (4/3) 2**(-16 s) 4**e; 1/4 for ties). The first
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


def _ozaki1_rounding(op, s):
    """Per row: the mean square rounding error of the entries on the row's grid 2**(e - P), in
    units of the grid (all entries; nonzero entries, at least 1/12)."""
    msq, msq_nonzero = op.rounding_msq(np.ldexp(op.unit, scaled_bits(s)))
    return msq, np.maximum(msq_nonzero, 1 / 12)


def _ozaki1_normwise(sa, sb, s, cnorm):
    wa, wb = sa.weight4(), sb.weight4()
    ga, _ = _ozaki1_rounding(sa, s)  # 1/12 per entry with bits below the grid, for random bits
    gb, _ = _ozaki1_rounding(sb, s)
    var = 16 * _in_phase(np.sum(wa * ga) * np.sum(sb.sq), np.sum(wb * gb) * np.sum(sa.sq))
    for fa, fb in _dropped_shares(sa, sb, s):
        var += (16 / 9) * sa.k * np.sum(wa * fa) * np.sum(wb * fb)
    return _relative(var * 2.0**(-16 * s), cnorm)


def _relative(var, cnorm):
    var += (U64 * cnorm) ** 2 / 3  # the float64 rounding of the result
    if cnorm == 0:
        return 0.0 if var == 0 else math.inf
    return math.sqrt(var) / cnorm


def _ozaki1_componentwise(sa, sb, s, terms):
    _, ga = _ozaki1_rounding(sa, s)
    _, gb = _ozaki1_rounding(sb, s)
    var = 16 * _in_phase(ga[:, None] * terms.ra, gb[None, :] * terms.rb)
    for fa, fb in _dropped_shares(sa, sb, s):
        var += (16 / 9) * sa.k * np.outer(fa, fb)
    return _worst_ratio(var * 2.0**(-16 * s), terms.den)


# Ozaki-II, N moduli. Rounding x * 2**mu to an integer leaves an error of mean square g 4**-mu in
# the units of A, g measured per row (1/12 for random bits below the integers, 0 for entries that
# are integers after scaling, 1/4 for ties).


def _in_phase(var_a, var_b):
    """The variance of ``dA B + A dB`` from those of its two terms, as if they added in phase:
    ``(sqrt(var_a) + sqrt(var_b))**2``, up to twice their sum.

    Why not ``var_a + var_b`` (independent terms): inputs on a grid finer than the scheme's
    round with errors that follow the entries. With every scaled entry an odd multiple of 1/2 and
    ties to even at a fixed parity, A is rounded toward zero (dA = -A / 2|A|) and a positive B
    down: both ``dA B`` and ``A dB`` are then multiples of the same row sums of A, and add in
    phase. ``test_ozaki_auto`` builds such inputs at the choosers' decision boundary: with 1/12 per
    rounded entry and the independent sum, the chosen count missed its target by up to 1.9 times
    (moduli, normwise; slices 1.2); with the ties measured (``rounding_msq``) but the independent
    sum still by 1.07 times. The price on inputs whose errors are independent: predictions up to
    sqrt(2) too high, a modulus more than needed in about one case in six."""
    return (np.sqrt(var_a) + np.sqrt(var_b)) ** 2


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
    ga, _ = sa.rounding_msq(np.ldexp(sa.x, mu[:, None]))  # 1/12 per inexact entry, for random bits
    gb, _ = sb.rounding_msq(np.ldexp(sb.x, nu[:, None]))
    # the grid of the scaled operands: 2**-(mu + shift)
    wa = np.where(sa.nonzero_rows, np.ldexp(1.0, -2 * (mu + sa.shift)), 0.0)
    wb = np.where(sb.nonzero_rows, np.ldexp(1.0, -2 * (nu + sb.shift)), 0.0)
    return _relative(_in_phase(np.sum(wa * ga) * np.sum(sb.sq), np.sum(wb * gb) * np.sum(sa.sq)), cnorm)


def _ozaki2_componentwise(sa, sb, n, bound, terms):
    shifts = _ozaki2_shifts(sa, sb, n, bound)
    if shifts is None:
        return math.inf
    mu, nu = shifts
    # in units of each row's top: the grid is 2**-(mu + top)
    wa = np.where(sa.nonzero_rows, np.ldexp(1.0, -2 * (mu + sa.top)), 0.0)
    wb = np.where(sb.nonzero_rows, np.ldexp(1.0, -2 * (nu + sb.top)), 0.0)
    _, ga = sa.rounding_msq(np.ldexp(sa.x, mu[:, None]))
    _, gb = sb.rounding_msq(np.ldexp(sb.x, nu[:, None]))
    ga, gb = np.maximum(ga, 1 / 12), np.maximum(gb, 1 / 12)  # every nonzero entry counts as rounded
    return _worst_ratio(_in_phase((wa * ga)[:, None] * terms.ra, (wb * gb)[None, :] * terms.rb), terms.den)


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


SCHEMES = ("ozaki1", "ozaki2")


def emulated_matmul(a, b, target: float | None = None, measure: str = "componentwise", scheme: str = "ozaki2",
                    alpha: float = 1.0, beta: float = 0.0, c=None, bound: str = "norm"):
    """``alpha * A @ B + beta * C`` with as many slices or moduli as ``target`` needs: ``(result, choice)``.

    The count is chosen from the inputs (:func:`choose_slices` / :func:`choose_moduli`), then the
    NumPy scheme runs with it. ``measure="componentwise"`` (the default here) asks that every
    element be within ``target * (|A||B|)_ij`` of the exact product (default 64 u), which a
    normwise target does not promise: with entries spread over many binades inside rows, 7 slices
    give a normwise error of 4e-15 while single elements are off by 1e7 units of roundoff.
    Raises when even the largest count is predicted to miss the target (Ozaki-I's 8 slices cannot
    hold entries 2**60 apart), naming the prediction.

    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((20, 100)) * np.exp2(rng.integers(-60, 61, (20, 100)))
    >>> b = rng.standard_normal((100, 10))
    >>> c, choice = emulated_matmul(a, b)
    >>> choice.scheme, choice.count > 14, choice.meets
    ('ozaki2', True, True)
    """
    if scheme not in SCHEMES:
        raise KernelLabArgumentError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "ozaki1":
        choice = choose_slices(a, b, target, measure)
    else:
        choice = choose_moduli(a, b, target, measure, bound)
    if not choice.meets:
        largest = f"{MAX_SLICES} slices" if scheme == "ozaki1" else f"{ozaki2.MAX_MODULI} moduli"
        other = "Ozaki-II (scheme='ozaki2')" if scheme == "ozaki1" else "float64 GEMM"
        raise KernelLabArgumentError(
            f"{largest} are predicted to reach a {measure} error of {choice.predicted:.2g}, not {choice.target:.2g} "
            f"(with the margin SAFETY = {SAFETY:g}); the rows and columns span {choice.spread[0]:.0f} and "
            f"{choice.spread[1]:.0f} bits below their largest entries. Ask for less, use "
            f"{other}, or ask for a normwise target")
    if scheme == "ozaki1":
        from .reference import emulated_matmul as run

        return run(a, b, choice.count, alpha, beta, c), choice
    return ozaki2.emulated_matmul(a, b, choice.count, alpha, beta, c, bound=bound), choice
