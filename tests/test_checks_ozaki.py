"""The checks of notebook 07.1 (kernel_lab.checks.ozaki) pass right answers and name wrong ones.

Each mistake is written here the way a learner would write it (not by calling the check's own
mistake models), fed to the check, and the message must name it. Right implementations, two of
each, must pass on many random seeds (the cases include zero rows, subnormals, rows from 2**-300
to 2**300, powers of two, one row, one column and every slice count).
"""

import numpy as np
import pytest

from kernel_lab import CheckFailed
from kernel_lab.checks import ozaki as checks
from kernel_lab.ozaki import reference as ref
from kernel_lab.ozaki import slicing


# ---- split_rows: right answers -------------------------------------------------------------------

def split_right(x, slices):
    p = 8 * slices - 2
    e = np.frexp(np.abs(x).max(axis=1))[1]
    big = np.rint(np.ldexp(x, (p - e)[:, None])).astype(np.int64)
    digits = np.empty((slices,) + x.shape, dtype=np.int8)
    for t in range(slices - 1, 0, -1):
        low = ((big + 128) & 255) - 128
        digits[t] = low
        big = (big - low) >> 8
    digits[0] = big
    return digits, e


def split_right_with_divmod(x, slices):
    """Another right way: floor-divide by 256 and move digits of 128 or more down by 256."""
    amax = np.max(np.abs(x), axis=1)
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) + 1, 0).astype(np.int32)
    big = np.rint(np.ldexp(x, (8 * slices - 2 - e)[:, None])).astype(np.int64)
    out = []
    for _ in range(slices - 1):
        big, low = np.divmod(big, 256)
        carry = low >= 128
        out.append(np.where(carry, low - 256, low))
        big = big + carry
    out.append(big)
    return np.stack(out[::-1]).astype(np.int8), e


@pytest.mark.parametrize("fn", [split_right, split_right_with_divmod])
def test_right_split_passes_on_many_seeds(fn, capsys):
    for seed in range(25):
        checks.check_split_rows(fn, seed=seed)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 25 and len(set(lines)) == 1 and lines[0].startswith("split_rows: correct for all")


def test_the_reference_itself_passes():
    checks.check_split_rows(lambda x, s: slicing.split(x, s, axis=1), seed=1)


# ---- split_rows: the classic mistakes --------------------------------------------------------------

def split_top_down_rint(x, slices):
    """Digits from the top, in floating point, each rounded to the nearest integer."""
    e = np.frexp(np.abs(x).max(axis=1))[1]
    r = np.ldexp(x, (6 - e)[:, None])  # the top digit's units
    digits = np.empty((slices,) + x.shape, dtype=np.int8)
    for t in range(slices):
        d = np.rint(r)
        digits[t] = d.astype(np.int64)  # 128 wraps to -128 in the int8 array
        r = (r - d) * 256
    return digits, e


def split_unsigned(x, slices):
    e = np.frexp(np.abs(x).max(axis=1))[1]
    big = np.rint(np.ldexp(x, (8 * slices - 2 - e)[:, None])).astype(np.int64)
    digits = np.empty((slices,) + x.shape, dtype=np.int8)
    for t in range(slices - 1, 0, -1):
        digits[t] = big & 255
        big = big >> 8
    digits[0] = big
    return digits, e


def split_one_exponent(x, slices):
    e = np.frexp(np.abs(x).max())[1]
    big = np.rint(np.ldexp(x, 8 * slices - 2 - e)).astype(np.int64)
    digits = np.empty((slices,) + x.shape, dtype=np.int8)
    for t in range(slices - 1, 0, -1):
        low = ((big + 128) & 255) - 128
        digits[t] = low
        big = (big - low) >> 8
    digits[0] = big
    return digits, np.full(x.shape[0], e)


def _from_bottom(big, slices):
    digits = np.empty((slices,) + big.shape, dtype=np.int8)
    for t in range(slices - 1, 0, -1):
        low = ((big + 128) & 255) - 128
        digits[t] = low
        big = (big - low) >> 8
    digits[0] = big
    return digits


def split_ceil_log2(x, slices):
    amax = np.abs(x).max(axis=1)
    e = np.ceil(np.log2(np.where(amax > 0, amax, 1.0))).astype(np.int64)
    return _from_bottom(np.rint(np.ldexp(x, (8 * slices - 2 - e)[:, None])).astype(np.int64), slices), e


def split_truncated(x, slices):
    e = np.frexp(np.abs(x).max(axis=1))[1]
    return _from_bottom(np.ldexp(x, (8 * slices - 2 - e)[:, None]).astype(np.int64), slices), e


def split_p_minus_one(x, slices):
    e = np.frexp(np.abs(x).max(axis=1))[1]
    return _from_bottom(np.rint(np.ldexp(x, (8 * slices - 1 - e)[:, None])).astype(np.int64), slices), e


def split_p_full(x, slices):
    e = np.frexp(np.abs(x).max(axis=1))[1]
    return _from_bottom(np.rint(np.ldexp(x, (8 * slices - e)[:, None])).astype(np.int64), slices), e


def split_reversed(x, slices):
    digits, e = split_right(x, slices)
    return digits[::-1], e


@pytest.mark.parametrize("fn, message", [
    (split_top_down_rint, "Mistake: digits taken from the top with rint"),
    (split_unsigned, "Mistake: unsigned low byte"),
    (split_one_exponent, "Mistake: one exponent for the whole matrix"),
    (split_ceil_log2, "Mistake: exponent from ceil(log2(max))"),
    (split_truncated, "Mistake: truncated instead of rounded"),
    (split_p_minus_one, "Mistake: P = 8 * slices - 1"),
    (split_p_full, "Mistake: P = 8 * slices:"),
    (split_reversed, "Mistake: digits in reverse order"),
])
def test_split_mistakes_are_named(fn, message):
    for seed in range(5):
        with pytest.raises(CheckFailed, match=r"(?s)split_rows, case .*" + message.replace("(", r"\(").replace(
                ")", r"\)").replace("*", r"\*")) as failure:
            checks.check_split_rows(fn, seed=seed)
        assert f"seed={seed}" in str(failure.value)


def test_split_int64_digits_are_refused_with_the_reason():
    def int64_digits(x, slices):
        digits, e = split_right(x, slices)
        return digits.astype(np.int64), e

    with pytest.raises(CheckFailed, match="the digits are right but stored as int64: store them as int8"):
        checks.check_split_rows(int64_digits, seed=0)


def test_split_zero_rows_through_log2_are_explained():
    def split_log2(x, slices):
        with np.errstate(divide="ignore", invalid="ignore"):
            e = (np.floor(np.log2(np.abs(x).max(axis=1))) + 1).astype(np.int64)  # -inf for a row of zeros
        e = np.where(e < -5000, -(2**31), e)  # what the cast of -inf gives on most machines
        with np.errstate(over="ignore", invalid="ignore"):
            big = np.rint(np.ldexp(x, (8 * slices - 2 - e)[:, None]))
        big = np.where(np.isfinite(big), big, 0).astype(np.int64)
        return _from_bottom(big, slices), e

    with pytest.raises(CheckFailed, match="zero rows and subnormals.*a row of zeros: np.frexp"):
        checks.check_split_rows(split_log2, seed=0)


def test_split_not_done_and_wrong_shapes_are_explained():
    def stub(x, slices):
        raise NotImplementedError("write split_rows")

    with pytest.raises(CheckFailed, match="not done yet"):
        checks.check_split_rows(stub, seed=0)
    with pytest.raises(CheckFailed, match="returned None"):
        checks.check_split_rows(lambda x, s: None, seed=0)

    def course_stub(x, slices):  # the stub of the course notebook, run as it is
        p = 8 * slices - 2  # noqa: F841
        e = ...
        digits = np.empty((slices,) + x.shape, dtype=np.int8)
        return digits, e

    with pytest.raises(CheckFailed, match=r"not done yet \(the stub's `...` are still in place\)"):
        checks.check_split_rows(course_stub, seed=0)

    def slices_last(x, slices):
        digits, e = split_right(x, slices)
        return np.moveaxis(digits, 0, -1), e

    with pytest.raises(CheckFailed, match=r"expected \(slices, M, K\).*slices first"):
        checks.check_split_rows(slices_last, seed=0)


def test_split_generic_failure_shows_the_first_wrong_number():
    def off_by_one_in_the_last_digit(x, slices):
        digits, e = split_right(x, slices)
        digits[-1, 0, 0] += 1 if digits[-1, 0, 0] < 127 else -1
        return digits, e

    with pytest.raises(CheckFailed, match=r"(?s)1 of 1 numbers have wrong digits.*x\[0, 0\] = .*expected digits"):
        checks.check_split_rows(off_by_one_in_the_last_digit, seed=0)


# ---- reconstruct: right answers ------------------------------------------------------------------

def reconstruct_right(diags, ea, eb, alpha=1.0, beta=0.0, c=None):
    s = diags.shape[0]
    shift = ea[:, None].astype(np.int64) + eb[None, :]
    out = None
    for d in range(s - 1, -1, -1):
        x = alpha * np.ldexp(diags[d].astype(np.float64), shift - 12 - 8 * d)
        if out is None:
            out = x if beta == 0 else x + beta * c
        else:
            out = out + x
    return out


def reconstruct_alpha_last(diags, ea, eb, alpha=1.0, beta=0.0, c=None):
    """Right too: alpha once at the end (other roundings, within the tolerance)."""
    s = diags.shape[0]
    total = np.zeros(diags.shape[1:])
    for d in reversed(range(s)):
        total += diags[d] * np.exp2(ea[:, None] + eb[None, :] - 12.0 - 8 * d)
    return alpha * total + (beta * c if beta != 0 else 0.0)


@pytest.mark.parametrize("fn", [reconstruct_right, reconstruct_alpha_last, ref.reconstruct])
def test_right_reconstruct_passes_on_many_seeds(fn, capsys):
    for seed in range(25):
        checks.check_reconstruct(fn, seed=seed)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 25 and len(set(lines)) == 1 and lines[0].startswith("reconstruct: correct for all")


# ---- reconstruct: the classic mistakes -------------------------------------------------------------

def _loop(order, weight, first, rest):
    def fn(diags, ea, eb, alpha=1.0, beta=0.0, c=None):
        s = diags.shape[0]
        shift = ea[:, None].astype(np.int64) + eb[None, :]
        out = None
        for d in order(s):
            x = np.ldexp(diags[d].astype(np.float64), shift + weight(d, s))
            out = first(x, alpha, beta, c) if out is None else rest(out, x, alpha, beta)
        return out
    return fn


def _least_first(s):
    return range(s - 1, -1, -1)


def _right_weight(d, s):
    return -12 - 8 * d


def _first(x, alpha, beta, c):
    return alpha * x if beta == 0 else alpha * x + beta * c


def _rest(out, x, alpha, beta):
    return out + alpha * x


reconstruct_reversed_weights = _loop(_least_first, lambda d, s: -12 - 8 * (s - 1 - d), _first, _rest)
reconstruct_beta_every_diagonal = _loop(
    _least_first, _right_weight, _first, lambda out, x, alpha, beta: alpha * x + beta * out)
reconstruct_c_read_at_beta_zero = _loop(
    _least_first, _right_weight, lambda x, alpha, beta, c: alpha * x + beta * (0.0 if c is None else c), _rest)
reconstruct_c_read_always = _loop(_least_first, _right_weight, lambda x, alpha, beta, c: alpha * x + beta * c,
                                  _rest)
reconstruct_most_significant_first = _loop(range, _right_weight, _first, _rest)
reconstruct_without_12 = _loop(_least_first, lambda d, s: -8 * d, _first, _rest)
reconstruct_without_alpha = _loop(_least_first, _right_weight,
                                  lambda x, alpha, beta, c: x if beta == 0 else x + beta * c,
                                  lambda out, x, alpha, beta: out + x)
reconstruct_alpha_on_c = _loop(_least_first, _right_weight,
                               lambda x, alpha, beta, c: alpha * x if beta == 0 else alpha * (x + beta * c), _rest)
reconstruct_without_c = _loop(_least_first, _right_weight, lambda x, alpha, beta, c: alpha * x, _rest)


def reconstruct_axes_swapped(diags, ea, eb, alpha=1.0, beta=0.0, c=None):
    return _loop(_least_first, _right_weight, _first, _rest)(diags, eb, ea, alpha, beta, c)


@pytest.mark.parametrize("fn, message", [
    (reconstruct_reversed_weights, "Mistake: diagonal weights reversed"),
    (reconstruct_beta_every_diagonal, "Mistake: beta applied to every diagonal"),
    (reconstruct_c_read_at_beta_zero, "Mistake: C read when beta is 0"),
    (reconstruct_c_read_always, r"raised TypeError.*\(c is None here\)\nMistake: C read when beta is 0"),
    (reconstruct_most_significant_first, "order of the diagonals.*Mistake: most significant diagonal first"),
    (reconstruct_without_12, "Mistake: the -12 left out of the weights"),
    (reconstruct_without_alpha, "Mistake: alpha not applied"),
    (reconstruct_alpha_on_c, r"Mistake: alpha applied to beta \* C as well"),
    (reconstruct_without_c, r"Mistake: beta \* C left out"),
    (reconstruct_axes_swapped, r"broadcast.*Hint: ea has one entry per row"),
], ids=["reversed weights", "beta every diagonal", "C read at beta 0", "C read, c is None",
        "most significant first", "-12 left out", "no alpha", "alpha on C", "no C", "axes swapped"])
def test_reconstruct_mistakes_are_named(fn, message):
    for seed in range(5):
        with pytest.raises(CheckFailed, match=r"(?s)reconstruct, case .*" + message) as failure:
            checks.check_reconstruct(fn, seed=seed)
        assert f"seed={seed}" in str(failure.value)


def test_swapped_axes_on_square_results_are_named():
    """Square results do not raise a broadcasting error: the mistake model recognises the swap."""
    rng = np.random.default_rng(0)
    diags, ea, eb = rng.integers(-1000, 1000, (3, 4, 4)), rng.integers(-9, 9, 4), rng.integers(-9, 9, 4)
    got = reconstruct_axes_swapped(diags, ea, eb)
    problem = checks._judge_reconstruct(lambda *a: got, "square", (diags, ea, eb, 1.0, 0.0, None), 0)
    assert "Mistake: row and column exponents swapped" in problem


def test_order_case_is_exact_least_significant_first_only():
    diags, ea, eb = checks._order_case()
    least = ref.reconstruct(diags, ea, eb)
    most = reconstruct_most_significant_first(diags, ea, eb)
    assert least[0, 0] == 2.0**18 + 2.0**-34 and most[0, 0] == 2.0**18
    assert np.abs(diags).max() < 2**31  # diagonals an INT32 accumulator can hold


def test_reconstruct_not_done_and_wrong_results_are_explained():
    with pytest.raises(CheckFailed, match="not done yet"):
        checks.check_reconstruct(lambda *a: None, seed=0)
    with pytest.raises(CheckFailed, match=r"the result must be float64, got float32"):
        checks.check_reconstruct(lambda *a: reconstruct_right(*a).astype(np.float32), seed=0)
    with pytest.raises(CheckFailed, match=r"(?s)1 of 1 elements are wrong; the first, \[0, 0\]: expected"):
        checks.check_reconstruct(lambda *a: reconstruct_right(*a) * (1 + 1e-9), seed=0)


def test_mistake_models_differ_from_the_right_answer():
    """A model equal to the right answer could never be named: each must differ on some case."""
    rng = np.random.default_rng(3)
    split_cases = checks.split_cases(rng)
    for mistake in checks.SPLIT_MISTAKES:
        differs = False
        for _, x, s in split_cases:
            digits, e = mistake.model(x, s)
            ok, ok_e = slicing.split(x, s)
            differs |= digits is None or not (np.array_equal(digits, ok) and np.array_equal(e, ok_e))
        assert differs, mistake.name
    for mistake in checks.RECONSTRUCT_MISTAKES:
        differs = False
        for _, case in checks.reconstruct_cases(rng):
            got = mistake.model(*case)
            differs |= got is None or not np.array_equal(got, ref.reconstruct(*case), equal_nan=True)
        assert differs, mistake.name
