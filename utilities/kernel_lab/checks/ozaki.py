"""Checks for module 07, notebook 07.1 (the Ozaki scheme in NumPy): slicing and reconstruction.

:func:`check_split_rows` checks the learner's ``split_rows(x, slices) -> (digits, exponents)``
against :func:`kernel_lab.ozaki.slicing.split`; :func:`check_reconstruct` checks
``reconstruct(diags, ea, eb, alpha, beta, c)`` against :func:`kernel_lab.ozaki.reference.reconstruct`.
Both print one deterministic line on success and raise :class:`kernel_lab.CheckFailed` otherwise.

A failure is explained by its *mistake model*: each classic mistake of the exercise is written out
here in NumPy (digits taken from the top with ``rint``, unsigned bytes, one exponent for the whole
matrix, diagonal weights reversed, beta applied at every diagonal, ...), run on the failing case,
and compared with the learner's output. The message names the mistake the output matches, or, when
none does, shows the first wrong element. The models are public (:data:`SPLIT_MISTAKES`,
:data:`RECONSTRUCT_MISTAKES`) so that tests and notebooks can show what each mistake does.

The format (module docstring of :mod:`kernel_lab.ozaki.slicing`): per-row exponent
``e = frexp(max|row|)[1]``, ``X = rint(x * 2**(P - e))`` with ``P = 8 * slices - 2``, signed
base-256 digits ``d_t`` in [-128, 127] found from the bottom, the top digit in [-64, 64]. Digits
are compared exactly. A reconstruction is judged against the size of the terms it adds
(``|alpha| * sum_d |D_d| 2**w_d + |beta * C|``), allowing a few roundings per diagonal, except in
one hand-made case where adding the diagonals least significant first is exact and most
significant first is not.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import progress
from ..check import CheckFailed
from ..ozaki import reference as ref
from ..ozaki import slicing
from ..validate import require_callable

__all__ = ["check_split_rows", "check_reconstruct", "split_cases", "reconstruct_cases",
           "SPLIT_MISTAKES", "RECONSTRUCT_MISTAKES", "Mistake"]

U64 = 2.0**-53


@dataclass(frozen=True)
class Mistake:
    """A classic mistake: its name, what it computes (a function with the exercise's signature) and
    the explanation a learner reads when their output matches it."""

    name: str
    model: Callable
    explanation: str


def _fail(message: str, seed) -> CheckFailed:
    return CheckFailed(f"{message}\n(inputs drawn with seed={seed}; pass seed={seed} to reproduce)")


# =============================================================================================
# Slicing: split_rows(x, slices) -> (digits (slices, M, K) int8, exponents (M,) integers)

def _row_exponents(x):
    _, e = np.frexp(np.abs(x).max(axis=1))
    return e.astype(np.int64)  # frexp(0) = (0, 0): a row of zeros gets exponent 0


def _scaled(x, e, p, *, round_=np.rint):
    """X = round(x * 2**(p - e)) as int64 (None where it would not fit in int64)."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = round_(np.ldexp(x, (p - np.asarray(e, np.int64))[:, None]))
    if not np.isfinite(y).all() or np.abs(y).max(initial=0) >= 2.0**63:
        return None
    return y.astype(np.int64)


def _digits_from_bottom(big, s, *, signed=True):
    digits = np.empty((s,) + big.shape, dtype=np.int64)
    for t in range(s - 1, 0, -1):
        d = ((big + 128) & 255) - 128 if signed else big & 255
        digits[t] = d
        big = (big - d) >> 8
    digits[0] = big
    return digits


def _correct_split(x, s):
    e = _row_exponents(x)
    return _digits_from_bottom(_scaled(x, e, 8 * s - 2), s), e


def _split_top_down_rint(x, s):
    e = _row_exponents(x)
    rest = _scaled(x, e, 8 * s - 2)
    digits = np.empty((s,) + x.shape, dtype=np.int64)
    for t in range(s):
        weight = 256 ** (s - 1 - t)
        # rint(rest / weight) in exact integer arithmetic (ties to even, like np.rint)
        q, r = np.divmod(rest, weight)
        up = (2 * r > weight) | ((2 * r == weight) & (q % 2 == 1))
        d = q + up
        digits[t] = d
        rest = rest - d * weight
    return digits, e


def _split_unsigned(x, s):
    e = _row_exponents(x)
    return _digits_from_bottom(_scaled(x, e, 8 * s - 2), s, signed=False), e


def _split_one_exponent(x, s):
    _, e0 = np.frexp(np.abs(x).max(initial=0.0))
    e = np.full(x.shape[0], e0, dtype=np.int64)
    big = _scaled(x, e, 8 * s - 2)
    return (None if big is None else _digits_from_bottom(big, s)), e


def _split_ceil_log2(x, s):
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.ceil(np.log2(np.where(amax > 0, amax, 1.0))), 0).astype(np.int64)
    big = _scaled(x, e, 8 * s - 2)
    return (None if big is None else _digits_from_bottom(big, s)), e


def _split_truncated(x, s):
    e = _row_exponents(x)
    return _digits_from_bottom(_scaled(x, e, 8 * s - 2, round_=np.trunc), s), e


def _split_p(p_of_s):
    def model(x, s):
        e = _row_exponents(x)
        big = _scaled(x, e, p_of_s(s))
        return (None if big is None else _digits_from_bottom(big, s)), e
    return model


def _split_reversed(x, s):
    digits, e = _correct_split(x, s)
    return digits[::-1].copy(), e


_FROM_THE_BOTTOM = ("Take them from the bottom: the low byte read as a signed number, "
                    "d = ((X + 128) & 255) - 128, then X = (X - d) >> 8 (exact: X - d is a multiple of 256), "
                    "and what is left after slices - 1 digits is the top digit.")

SPLIT_MISTAKES = [
    Mistake("digits taken from the top with rint", _split_top_down_rint,
            "your digits are what taking them from the top with rint gives: d = rint(R / 256**k) is 128 "
            "whenever the remainder R is above 127.5 * 256**k, and int8 cannot hold 128 (it wraps to -128, "
            "so the digits no longer add up to X). " + _FROM_THE_BOTTOM + " Digits found that way lie in "
            "[-128, 127]; the carry they push up is what the top digit's room (|d_0| <= 64) is for."),
    Mistake("unsigned low byte", _split_unsigned,
            "your digits are the unsigned bytes of X (X & 255, 0 to 255): a byte of 128 or more does not "
            "fit in int8 (stored, it wraps to a negative number) and no 1 was carried into the next digit, "
            "so the digits no longer add up to X. Read the low byte as a signed number, "
            "d = ((X + 128) & 255) - 128, and subtract it before shifting: X = (X - d) >> 8."),
    Mistake("one exponent for the whole matrix", _split_one_exponent,
            "all your exponents are the same: that of the largest entry of the whole matrix. Each row needs "
            "its own, e_i = frexp(max_k |x[i, k]|)[1] (np.abs(x).max(axis=1)): with one exponent, a row "
            "whose entries are 2**-40 times the matrix's largest keeps 40 bits fewer, and a row of tiny "
            "numbers becomes zeros."),
    Mistake("exponent from ceil(log2(max))", _split_ceil_log2,
            "your exponents are one less than frexp's for rows whose largest entry is a power of two "
            "(1.0, 0.5, 4.0, ...): that is what ceil(log2(max)) gives. The format asks for "
            "|x| * 2**-e < 1, which e = np.frexp(max |row|)[1] guarantees (frexp(1.0) = (0.5, 1), so e = 1), "
            "and gives 0 for a row of zeros without a log of zero."),
    Mistake("truncated instead of rounded", _split_truncated,
            "X was truncated toward zero (astype(np.int64) on its own) instead of rounded to the nearest "
            "integer: apply np.rint before converting. Truncation makes the error of the last digit up to a "
            "whole unit instead of half, always toward zero."),
    Mistake("P = 8 * slices - 1", _split_p(lambda s: 8 * s - 1),
            "your digits are those of X = rint(x * 2**(P - e)) with P = 8 * slices - 1. P must be "
            "8 * slices - 2: then |X| <= 2**P = 64 * 256**(slices - 1) and the top digit stays within "
            "[-64, 64] whatever the carries; one bit more and it can reach 128, which int8 cannot hold."),
    Mistake("P = 8 * slices", _split_p(lambda s: 8 * s),
            "your digits are those of X = rint(x * 2**(P - e)) with P = 8 * slices (every bit used). P must "
            "be 8 * slices - 2: the top digit needs room for the sign and for the carries the signed "
            "digits below push up (|d_0| <= 64); with P = 8 * slices it reaches 256."),
    Mistake("digits in reverse order", _split_reversed,
            "your digits are in reverse order: digits[0] must be the most significant (the top digit, in "
            "[-64, 64]) and digits[slices - 1] the least significant (the first one found from the bottom)."),
]


def split_cases(rng) -> list[tuple[str, np.ndarray, int]]:
    """(label, x, slices) cases for :func:`check_split_rows`; labels do not depend on ``rng``."""
    def normal(m, k):
        return rng.standard_normal((m, k))

    mixed = normal(20, 37) * np.exp2(rng.integers(-300, 301, (20, 1)))  # rows of very different size
    powers = normal(9, 23)
    powers[:, 0] = np.exp2(rng.integers(-20, 21, 9)) * rng.choice([-1.0, 1.0], 9)  # maxima: powers of 2
    powers[:, 1:] = np.clip(powers[:, 1:], -0.49, 0.49) * np.abs(powers[:, :1])
    powers[0, :4] = [1.0 - 2.0**-53, -(1.0 - 2.0**-53), 0.5, -(0.5 - 2.0**-54)]  # the worst carries
    tiny = normal(6, 11)
    tiny[0] = 0.0  # a row of zeros
    tiny[1] = rng.standard_normal(11) * 5e-324  # subnormals, some of them zero
    tiny[2] = rng.standard_normal(11) * 1e-310
    tiny[3, :5] = 0.0
    tiny[4] = np.exp2(rng.integers(-1074, -1000, 11)) * rng.choice([-1.0, 1.0], 11)
    within = normal(15, 40) * np.exp2(rng.integers(-30, 1, (15, 40)))  # spread inside each row
    cases = [("one element", normal(1, 1), 7), ("one row", normal(1, 67), 7), ("one column", normal(23, 1), 7),
             ("13x29", normal(13, 29), 7), ("rows of very different magnitude", mixed, 7),
             ("row maxima that are powers of two", powers, 7), ("zero rows and subnormals", tiny, 7),
             ("spread inside rows", within, 8)]
    cases += [(f"{s} slices", normal(17, 31) * np.exp2(rng.integers(-3, 4, (17, 1))), s)
              for s in range(1, slicing.MAX_SLICES + 1)]
    return cases


def _agrees(got, model, correct) -> bool:
    """Does ``got`` (int64 digits) reproduce ``model``, where the model differs from ``correct``?

    Compared as stored (int8: wrapped) and as computed. A learner may write the same mistake a
    little differently (ties broken another way, a float path instead of an integer one), so 1%
    of the entries may differ, as long as nearly all the places where the model goes wrong match.
    """
    if model is None or model.shape != got.shape:
        return False
    telling = model != correct
    if not telling.any():
        return False
    for m in (model, model.astype(np.int8).astype(np.int64)):  # wrapped as int8 would store it
        same = got == m
        if same.mean() >= 0.99 and same[telling].mean() >= 0.9:
            return True
    return False


def _describe_digits(x, s, i, k, digits_got, digits_ok, e_ok):
    p = 8 * s - 2
    big = int(np.rint(np.ldexp(x[i, k], p - int(e_ok[i]))))
    return (f"x[{i}, {k}] = {float(x[i, k])!r}, row exponent e = {int(e_ok[i])}, X = rint(x * 2**(P - e)) = {big} "
            f"(P = {p}): expected digits {[int(v) for v in digits_ok[:, i, k]]} (most significant first), "
            f"got {[int(v) for v in digits_got[:, i, k]]}")


def _judge_split(fn, label, x, s, seed):
    """None if ``fn`` is right on this case, else the explanation."""
    try:
        out = fn(x.copy(), s)
    except NotImplementedError as exc:
        raise CheckFailed(f"split_rows: the exercise is not done yet ({exc or 'the stub is still in place'})") \
            from None
    except Exception as exc:  # noqa: BLE001 - the learner's code; say where it failed
        hint = ""
        if isinstance(exc, (FloatingPointError, OverflowError, ValueError)) and label == "zero rows and subnormals":
            hint = ("\nHint: a row of zeros has no largest exponent: np.frexp(0.0) gives (0.0, 0), so e = 0 "
                    "and its digits are zeros; np.log2(0) is -inf.")
        return f"split_rows raised {type(exc).__name__}: {exc}{hint}"
    if out is None:
        raise CheckFailed("split_rows returned None: the exercise is not done yet (return digits, exponents)")
    if not isinstance(out, tuple) or len(out) != 2:
        return f"split_rows must return a pair (digits, exponents), got {type(out).__name__}"
    if any(part is Ellipsis for part in out):
        raise CheckFailed("split_rows: the exercise is not done yet (the stub's `...` are still in place)")
    digits, e = np.asarray(out[0]), np.asarray(out[1])
    m, k = x.shape
    if digits.shape != (s, m, k):
        hint = (" (slices first: digits[t] is the t-th slice, an int8 matrix of x's shape)"
                if sorted(digits.shape) == sorted((s, m, k)) else "")
        return f"digits have shape {digits.shape}, expected (slices, M, K) = {(s, m, k)}{hint}"
    if digits.dtype.kind not in "iu":
        return f"digits must be integers (int8), got {digits.dtype}"
    if e.dtype.kind not in "iu" and not (e.dtype.kind == "f" and np.all(np.isfinite(e)) and
                                         np.all(e == np.round(e))):
        return f"exponents must be integers, got {e.dtype} with values like {e.ravel()[:3]}"
    try:
        e_got = np.broadcast_to(e, (m,)).astype(np.int64)
    except ValueError:
        return f"exponents have shape {e.shape}, expected one per row: ({m},)"
    ok_digits, ok_e = _correct_split(x, s)
    got_digits = digits.astype(np.int64)
    if np.array_equal(got_digits, ok_digits) and np.array_equal(e_got, ok_e):
        if digits.dtype != np.int8:
            return (f"the digits are right but stored as {digits.dtype}: store them as int8, the type the "
                    "tensor cores multiply (np.empty((slices,) + x.shape, dtype=np.int8))")
        return None
    if e.ndim == 0 or (m > 1 and np.all(e_got == e_got[0]) and not np.all(ok_e == ok_e[0])):
        if np.all(e_got == _split_one_exponent(x, s)[1]):
            return _named(label, SPLIT_MISTAKES[2])
    for mistake in SPLIT_MISTAKES:
        model_digits, model_e = mistake.model(x, s)
        if model_digits is None or not np.array_equal(model_e, e_got):
            continue
        if np.array_equal(model_digits, ok_digits) and np.array_equal(model_e, ok_e):
            continue
        if np.array_equal(model_e, ok_e):
            if _agrees(got_digits, model_digits, ok_digits):
                return _named(label, mistake)
        elif np.array_equal(got_digits, model_digits) or np.array_equal(
                got_digits, model_digits.astype(np.int8).astype(np.int64)):
            return _named(label, mistake)
    if not np.array_equal(e_got, ok_e):
        i = int(np.flatnonzero(e_got != ok_e)[0])
        amax = float(np.abs(x[i]).max())
        zero_hint = " (a row of zeros: np.frexp(0.0) gives exponent 0)" if amax == 0 else ""
        return (f"row {i}'s exponent is {int(e_got[i])}, expected {int(ok_e[i])}: its largest magnitude is "
                f"{amax!r}, and e = np.frexp(max |row|)[1], the power of two just above it{zero_hint}")
    wrong = np.argwhere(got_digits != ok_digits)
    t, i, kk = (int(v) for v in wrong[0])
    n_wrong = len({(int(a), int(b)) for _, a, b in wrong})
    out = (f"{n_wrong} of {m * k} numbers have wrong digits; the first: "
           + _describe_digits(x, s, i, kk, got_digits, ok_digits, ok_e))
    top = got_digits[0]
    if np.abs(top).max() > 64:
        out += ("\nHint: a top digit beyond [-64, 64]: with P = 8 * slices - 2, |X| <= 64 * 256**(slices - 1), "
                "so the top digit, what is left after the others are taken from the bottom, is at most 64")
    return out


def _named(label, mistake: Mistake) -> str:
    return f"your output matches a classic mistake.\nMistake: {mistake.name}: {mistake.explanation}"


def check_split_rows(fn, *, seed=None) -> None:
    """Check ``fn(x, slices) -> (digits, exponents)``, the learner's slicing of a matrix by rows.

    ``digits`` must be int8 of shape ``(slices, M, K)``, most significant first; ``exponents`` one
    integer per row. Cases (:func:`split_cases`): one element, one row, one column, a plain matrix,
    rows from 2**-300 to 2**300, row maxima that are powers of two (and the worst carry,
    1 - 2**-53), zero rows and subnormals, spread inside rows, and every slice count from 1 to 8.
    Fresh random numbers on every call (``seed`` reproduces a failure). Names the classic mistakes
    (:data:`SPLIT_MISTAKES`).
    """
    require_callable(fn, "split_rows")
    seed = secrets.randbits(32) if seed is None else seed
    cases = split_cases(np.random.default_rng(seed))
    for label, x, s in cases:
        problem = _judge_split(fn, label, x, s, seed)
        if problem is not None:
            raise _fail(f"split_rows, case '{label}' ({x.shape[0]}x{x.shape[1]}, {s} slices): {problem}", seed)
    print(f"split_rows: correct for all {len(cases)} cases (one element, one row, one column, rows of very "
          "different magnitude, powers of two, zero rows and subnormals, spread inside rows, 1 to 8 slices)")
    progress.passed('split_rows')


# =============================================================================================
# Reconstruction: reconstruct(diags, ea, eb, alpha, beta, c) -> float64 (M, N)

def _weights(diags, ea, eb, weight_of_d):
    s = diags.shape[0]
    shift = np.asarray(ea, np.int64)[:, None] + np.asarray(eb, np.int64)[None, :]
    return [np.ldexp(diags[d].astype(np.float64), shift + weight_of_d(d, s)) for d in range(s)]


def _combine(terms, order, alpha, beta, c, *, beta_each=False, read_c_at_zero=False, alpha_on_c=False,
             no_c=False):
    out = None
    for d in order:
        x = terms[d]
        if out is None:
            if no_c or c is None or (beta == 0 and not read_c_at_zero):
                out = alpha * x
            elif alpha_on_c:
                out = alpha * (x + beta * c)
            else:
                out = alpha * x + beta * c
        elif beta_each:
            out = alpha * x + beta * out
        else:
            out = alpha * x + out
    return out


def _least_first(s):
    return range(s - 1, -1, -1)


def _reconstruct_model(weight_of_d=lambda d, s: -12 - 8 * d, order=_least_first, use_alpha=True, **kw):
    def model(diags, ea, eb, alpha=1.0, beta=0.0, c=None):
        diags = np.asarray(diags)
        terms = _weights(diags, ea, eb, weight_of_d)
        return _combine(terms, order(diags.shape[0]), alpha if use_alpha else 1.0, beta, c, **kw)
    return model


def _reconstruct_swapped_axes(diags, ea, eb, alpha=1.0, beta=0.0, c=None):
    if diags.shape[1] != diags.shape[2]:
        return None  # not square: the learner's code raises a broadcasting error, explained there
    return _reconstruct_model()(diags, np.asarray(eb), np.asarray(ea), alpha, beta, c)


RECONSTRUCT_MISTAKES = [
    Mistake("C read when beta is 0", _reconstruct_model(read_c_at_zero=True),
            "with beta = 0, C must not be read at all: that is the BLAS rule, because C may be "
            "uninitialised memory holding NaN (and 0 * NaN is NaN), or not be given at all. When beta == 0, "
            "start from alpha * (first diagonal) alone; otherwise from alpha * (first diagonal) + beta * C."),
    Mistake("diagonal weights reversed", _reconstruct_model(weight_of_d=lambda d, s: -12 - 8 * (s - 1 - d)),
            "your diagonals are weighted the wrong way round: diagonal d (the pairs t + u = d; d = 0 holds the "
            "most significant digits) is worth 2**(ea + eb - 12 - 8*d), and you gave it "
            "2**(ea + eb - 12 - 8*(s-1-d)). Reverse the order in which you *visit* the diagonals "
            "(d = s-1 first), not their weights."),
    Mistake("beta applied to every diagonal", _reconstruct_model(beta_each=True),
            "beta multiplied the running result again at every diagonal, so C ends up multiplied by "
            "beta**s (and the early diagonals by powers of beta too). Apply beta once, with the first "
            "diagonal processed (d = s-1); add every later diagonal with weight 1."),
    Mistake("most significant diagonal first", _reconstruct_model(order=lambda s: range(s)),
            "your weights are right but you add the diagonals most significant first (d = 0, 1, ...). In "
            "this case diagonals 5 and 6 are each half a unit of the last place of diagonal 0: added to it "
            "one at a time, each rounds away; added to each other first they make a whole unit that "
            "survives. Go d = s-1, s-2, ..., 0, so the small parts add up before they meet the large one."),
    Mistake("the -12 left out of the weights", _reconstruct_model(weight_of_d=lambda d, s: -8 * d),
            "your result is 4096 = 2**12 times too large: diagonal d is worth 2**(ea + eb - 12 - 8*d). A digit "
            "t of a row is worth 256**(s-1-t) * 2**(e - P) with P = 8s - 2, so a pair on diagonal d = t + u "
            "is worth 256**(2s-2-d) * 2**(ea + eb - 2P) = 2**(ea + eb - 12 - 8d)."),
    Mistake("alpha not applied", _reconstruct_model(use_alpha=False),
            "the result is A @ B + beta * C without alpha: multiply every diagonal by alpha (it is not 1 here)."),
    Mistake("alpha applied to beta * C as well", _reconstruct_model(alpha_on_c=True),
            "alpha multiplied beta * C too: the result is alpha * (A @ B) + beta * C, with alpha on the "
            "product only."),
    Mistake("beta * C left out", _reconstruct_model(no_c=True),
            "beta * C is missing from your result: add it once, with the first diagonal processed "
            "(when beta is not 0)."),
    Mistake("row and column exponents swapped", _reconstruct_swapped_axes,
            "ea and eb are on each other's axes: ea has one entry per row of the result (ea[:, None]) and eb one "
            "per column (eb[None, :]), so element (i, j) is scaled by 2**(ea[i] + eb[j])."),
]


def _order_case():
    """Diagonals whose exact sum is representable, reached only by adding least significant first.

    s = 7, shift 0. Diagonal 0 holds 2**30: worth 2**18, whose unit in the last place is 2**-34.
    Diagonals 5 and 6 are each worth 2**-35, half of it; the others are 0. Most significant first,
    2**18 + 2**-35 is a tie and rounds back to 2**18, twice; least significant first, the two halves
    make 2**-34, and 2**18 + 2**-34 is exact.
    """
    diags = np.zeros((7, 1, 2), dtype=np.int64)
    diags[0] = 2**30
    diags[5] = 2**17  # * 2**(-12 - 40) = 2**-35
    diags[6] = 2**25  # * 2**(-12 - 48) = 2**-35
    diags[:, 0, 1] = [2**30, 0, 0, 0, 0, -(2**17), -(2**25)]
    return diags, np.zeros(1, np.int64), np.zeros(2, np.int64)


def reconstruct_cases(rng) -> list[tuple[str, tuple]]:
    """(label, (diags, ea, eb, alpha, beta, c)) cases for :func:`check_reconstruct`.

    Most diagonals come from slicing random matrices (what a GPU kernel would hand over); the
    exponents and alpha/beta vary from case to case. Labels do not depend on ``rng``.
    """
    def from_matrices(m, k, n, s, row_spread=20):
        a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-row_spread, row_spread + 1, (m, 1)))
        b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-row_spread, row_spread + 1, (1, n)))
        da, ea = slicing.split(a, s, axis=1)
        db, eb = slicing.split(b, s, axis=0)
        return ref.diagonal_sums(da, db), ea.astype(np.int64), eb.astype(np.int64)

    def random_diags(m, n, s):
        return (rng.integers(-(2**31) + 1, 2**31, (s, m, n)), rng.integers(-60, 61, m), rng.integers(-60, 61, n))

    nan_c = np.full((9, 6), np.nan)
    cases = [
        ("1x1, alpha 1, beta 0", from_matrices(1, 5, 1, 7) + (1.0, 0.0, None)),
        ("9x6, beta 0 and C full of NaN", from_matrices(9, 40, 6, 7) + (1.5, 0.0, nan_c)),
        ("7x5, alpha -0.75, beta 2.5", from_matrices(7, 30, 5, 7) + (-0.75, 2.5, rng.standard_normal((7, 5)))),
        ("one row, beta 0.5", from_matrices(1, 50, 11, 6) + (1.0, 0.5, rng.standard_normal((1, 11)))),
        ("one column, beta -1", from_matrices(13, 20, 1, 8) + (2.0, -1.0, rng.standard_normal((13, 1)))),
        ("8x8, alpha 3, beta 0.25", from_matrices(8, 25, 8, 5) + (3.0, 0.25, rng.standard_normal((8, 8)))),
        ("random INT32 diagonals, 3 slices", random_diags(6, 4, 3) + (0.5, 3.0, rng.standard_normal((6, 4)))),
        ("random INT32 diagonals, 8 slices", random_diags(5, 7, 8) + (1.0, 0.0, None)),
        ("1 slice", from_matrices(4, 9, 3, 1) + (1.0, 0.0, None)),
        ("order of the diagonals", _order_case() + (1.0, 0.0, None)),
    ]
    return cases


def _term_size(diags, ea, eb, alpha, beta, c):
    terms = _weights(np.abs(np.asarray(diags)), ea, eb, lambda d, s: -12 - 8 * d)
    size = abs(alpha) * np.sum(terms, axis=0)
    if c is not None and beta != 0:
        size = size + np.abs(beta * c)
    return size


def _close(got, want, size, s):
    if got is None or want is None or np.shape(got) != np.shape(want):
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(got - want) <= 2 * (s + 2) * U64 * size + 1e-300))


def _judge_reconstruct(fn, label, case, seed):
    diags, ea, eb, alpha, beta, c = case
    s, m, n = diags.shape
    try:
        got = fn(diags.copy(), ea.copy(), eb.copy(), alpha, beta, None if c is None else c.copy())
    except NotImplementedError as exc:
        raise CheckFailed(f"reconstruct: the exercise is not done yet ({exc or 'the stub is still in place'})") \
            from None
    except Exception as exc:  # noqa: BLE001 - the learner's code; say where it failed
        hint = ""
        if "broadcast" in str(exc):
            hint = ("\nHint: ea has one entry per row of the result (M) and eb one per column (N): the exponent "
                    "of element (i, j) is ea[i] + eb[j], i.e. ea[:, None] + eb[None, :] as arrays")
        if c is None and isinstance(exc, TypeError):  # e.g. beta * None: C was read
            return f"reconstruct raised {type(exc).__name__}: {exc} (c is None here)\n" + \
                _named(label, RECONSTRUCT_MISTAKES[0]).split("\n", 1)[1]
        return f"reconstruct raised {type(exc).__name__}: {exc}{hint}"
    if got is None:
        raise CheckFailed("reconstruct returned None: the exercise is not done yet (return the float64 result)")
    got = np.asarray(got)
    if got.shape != (m, n):
        return f"the result has shape {got.shape}, expected (M, N) = {(m, n)}"
    if got.dtype != np.float64:
        return f"the result must be float64, got {got.dtype}"
    want = ref.reconstruct(diags, ea, eb, alpha, beta, c)
    size = _term_size(diags, ea, eb, alpha, beta, c)
    exact = label == "order of the diagonals"
    if (np.array_equal(got, want) if exact else _close(got, want, size, s)):
        return None
    if c is not None and beta == 0 and np.isnan(got).any() and np.isnan(c).any():
        return _named(label, RECONSTRUCT_MISTAKES[0])
    for mistake in RECONSTRUCT_MISTAKES[1:]:
        with np.errstate(all="ignore"):
            model = mistake.model(diags, ea, eb, alpha, beta, c)
        if model is None or _close(model, want, size, s) and not exact:
            continue
        if (np.array_equal(got, model) if exact else _close(got, model, np.maximum(size, np.abs(model)), s)):
            return _named(label, mistake)
    bad = ~(np.abs(got - want) <= 2 * (s + 2) * U64 * size + 1e-300) if not exact else got != want
    i, j = (int(v) for v in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {m * n} elements are wrong; the first, [{i}, {j}]: expected {float(want[i, j])!r}, "
            f"got {float(got[i, j])!r} (ea[{i}] = {int(ea[i])}, eb[{j}] = {int(eb[j])}, diagonals "
            f"{[int(v) for v in diags[:, i, j]]}, alpha = {alpha}, beta = {beta})")


def check_reconstruct(fn, *, seed=None) -> None:
    """Check ``fn(diags, ea, eb, alpha, beta, c)``: float64 ``alpha * sum_d D_d 2**(ea+eb-12-8d) + beta*C``.

    ``diags`` is ``(s, M, N)`` integers (the diagonal sums), ``ea`` one exponent per row, ``eb`` one
    per column, ``c`` a float64 ``(M, N)`` matrix or None (then beta is 0). Cases
    (:func:`reconstruct_cases`): diagonals from sliced random matrices and random INT32 ones, 1 to 8
    slices, one row, one column, several alpha and beta, C full of NaN with beta = 0, and a case
    that only adding least significant first gets exactly right. Names the classic mistakes
    (:data:`RECONSTRUCT_MISTAKES`).
    """
    require_callable(fn, "reconstruct")
    seed = secrets.randbits(32) if seed is None else seed
    cases = reconstruct_cases(np.random.default_rng(seed))
    for label, case in cases:
        problem = _judge_reconstruct(fn, label, case, seed)
        if problem is not None:
            s, m, n = case[0].shape
            raise _fail(f"reconstruct, case '{label}' ({m}x{n}, {s} slices): {problem}", seed)
    print(f"reconstruct: correct for all {len(cases)} cases (1 to 8 slices, one row, one column, alpha and beta, "
          "beta 0 with C full of NaN, least significant diagonal first)")
    progress.passed('reconstruct')
