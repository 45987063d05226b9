"""Module 07's NumPy reference: the slicing format, exact INT32 limits, the emulated GEMM, the yardstick."""

from fractions import Fraction

import numpy as np
import pytest

from kernel_lab.ozaki import reference as ref
from kernel_lab.ozaki import slicing
from kernel_lab.validate import KernelLabArgumentError

U = 2.0**-53


def _mixed(rng, m, k, spread=20):
    """Standard normal rows scaled by powers of two up to 2**±spread: rows of wildly different size."""
    return rng.standard_normal((m, k)) * np.exp2(rng.integers(-spread, spread + 1, (m, 1)))


# ---- the slicing format -------------------------------------------------------------------------

@pytest.mark.parametrize("s", range(1, slicing.MAX_SLICES + 1))
def test_digits_are_int8_and_the_top_digit_leaves_room_for_carries(s):
    rng = np.random.default_rng(s)
    x = _mixed(rng, 40, 50)
    x[0, :] = 1.0 - 2.0**-53  # the largest mantissa below a power of two: the worst carry
    x[1, :] = -(1.0 - 2.0**-53)
    digits, e = slicing.split(x, s)
    assert digits.dtype == np.int8 and digits.shape == (s, 40, 50)
    assert np.abs(digits[0]).max() <= 64
    assert (np.abs(x) * np.exp2(-e[:, None].astype(float)) < 1).all()


@pytest.mark.parametrize("s", range(1, slicing.MAX_SLICES + 1))
def test_join_recovers_every_value_to_the_bits_the_slices_hold(s):
    rng = np.random.default_rng(10 + s)
    x = _mixed(rng, 30, 70)
    digits, e = slicing.split(x, s)
    back = slicing.join_slices(digits, e)
    p = slicing.scaled_bits(s)
    # Rounding to the P-bit grid of the row, then (once) to float64:
    allowed = np.exp2(e[:, None].astype(float) - p - 1) + U * np.abs(x)
    assert (np.abs(back - x) <= allowed).all()
    if p >= 54:  # entries within a factor 2 of the row maximum keep all 53 bits
        big = np.abs(x) >= np.exp2(e[:, None].astype(float) - 1)
        assert np.array_equal(back[big], x[big])


def test_columns_are_sliced_like_rows_of_the_transpose():
    rng = np.random.default_rng(3)
    b = _mixed(rng, 25, 31).T
    dc, ec = slicing.split(b, 5, axis=0)
    dr, er = slicing.split(np.ascontiguousarray(b.T), 5, axis=1)
    assert np.array_equal(ec, er) and np.array_equal(dc, dr.transpose(0, 2, 1))


def test_zero_rows_and_subnormals():
    x = np.zeros((3, 4))
    x[1] = [5e-324, -1e-310, 2.5e-320, 0.0]  # subnormal row
    x[2] = [1e-300, 3.0, -2.0, 0.0]
    digits, e = slicing.split(x, 7)
    assert e[0] == 0 and not digits[:, 0].any()
    assert np.array_equal(slicing.join_slices(digits, e)[1], x[1])  # every bit of a subnormal row fits
    assert slicing.join_slices(digits, e)[2, 0] == 0.0  # 1e-300 is below row 2's last kept bit


def test_split_refuses_bad_input_with_a_reason():
    with pytest.raises(KernelLabArgumentError, match="slices must be a whole number from 1 to 8"):
        slicing.split(np.ones((2, 2)), 9)
    with pytest.raises(KernelLabArgumentError, match="float64"):
        slicing.split(np.ones((2, 2), np.float32), 3)
    with pytest.raises(KernelLabArgumentError, match="Inf or NaN"):
        slicing.split(np.array([[1.0, np.inf]]), 3)
    with pytest.raises(KernelLabArgumentError, match="matrix"):
        slicing.split(np.ones(4), 3)


@pytest.mark.parametrize("terms", [1, 2, 7, 8])
def test_max_exact_k_is_the_int32_limit(terms):
    k = slicing.max_exact_k(terms)
    assert terms * k * 128 * 128 <= 2**31 - 1 < terms * (k + 1) * 128 * 128


def test_worst_case_digits_overflow_int32_just_past_the_limit():
    """All digits -128: a sum of `terms` products of length K reaches terms * K * 2**14."""
    terms = 7
    k = slicing.max_exact_k(terms)
    total = terms * k * (-128) * (-128)
    assert total == np.int64(np.int32(total))  # fits
    over = terms * (k + 1) * 128 * 128
    assert over > np.iinfo(np.int32).max


# ---- the emulated GEMM --------------------------------------------------------------------------

def test_seven_slices_meet_the_accuracy_goal_on_standard_normal_inputs():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((96, 1500)), rng.standard_normal((1500, 80))
    got = ref.emulated_matmul(a, b, 7)
    err = ref.errors(got, a, b)
    assert err["normwise"] <= 5e-15
    assert err["componentwise"] < 64  # within a few units of roundoff of |A||B|, like DGEMM


def test_error_falls_about_256_times_per_slice():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((40, 300)), rng.standard_normal((300, 30))
    accurate = ref.accurate_matmul(a, b)
    errs = [ref.errors(ref.emulated_matmul(a, b, s), a, b, accurate)["normwise"] for s in range(2, 7)]
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert (ratios > 60).all() and (ratios < 1000).all()


def test_rows_of_very_different_magnitude_are_handled_by_per_row_exponents():
    rng = np.random.default_rng(2)
    a, b = _mixed(rng, 50, 200, spread=150), _mixed(rng, 60, 200, spread=150).T
    err = ref.errors(ref.emulated_matmul(a, b, 7), a, b)
    assert err["componentwise"] < 64


def test_spread_inside_a_row_costs_accuracy_and_more_slices_buy_it_back():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((30, 200)) * np.exp2(rng.integers(-30, 1, (30, 200)))  # spread within rows
    b = rng.standard_normal((200, 20))
    accurate = ref.accurate_matmul(a, b)
    e7 = ref.errors(ref.emulated_matmul(a, b, 7), a, b, accurate)["componentwise"]
    e8 = ref.errors(ref.emulated_matmul(a, b, 8), a, b, accurate)["componentwise"]
    assert e7 > 10 * e8


def test_alpha_beta_rules():
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((7, 9)), rng.standard_normal((9, 5)), rng.standard_normal((7, 5))
    for alpha, beta in [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (-0.5, 2.0), (0.0, 0.0)]:
        got = ref.emulated_matmul(a, b, 7, alpha, beta, c)
        want = alpha * (a @ b) + beta * c
        assert np.allclose(got, want, rtol=1e-14, atol=1e-14), (alpha, beta)
    poisoned = np.full((7, 5), np.nan)
    assert np.isfinite(ref.emulated_matmul(a, b, 7, 1.0, 0.0, poisoned)).all()  # beta 0: C is not read
    with pytest.raises(KernelLabArgumentError, match="beta is not 0 but no C"):
        ref.emulated_matmul(a, b, 7, 1.0, 1.0)


def test_k_above_the_int32_limit_is_split_into_exact_chunks():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((6, 700)), rng.standard_normal((700, 4))
    whole = ref.emulated_matmul(a, b, 7)
    chunked = ref.emulated_matmul(a, b, 7, k_chunk=64)
    assert ref.errors(chunked, a, b)["componentwise"] < 64
    assert np.allclose(whole, chunked, rtol=1e-14)


def test_inf_and_nan_give_float64_gemms_values():
    """DGEMM's Inf and NaN, not whole NaN rows and columns (tests/test_ozaki_nonfinite.py has every case)."""
    a = np.ones((3, 4))
    b = np.ones((4, 5))
    a[1, 2] = np.inf
    b[0, 3] = np.nan
    got = ref.emulated_matmul(a, b, 7)
    assert np.isposinf(np.delete(got[1], 3)).all() and np.isnan(got[:, 3]).all()
    assert (np.delete(np.delete(got, 1, axis=0), 3, axis=1) == 4.0).all()


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 0, 3), (5, 3, 1), (129, 65, 33)])
def test_any_shape(shape):
    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    got = ref.emulated_matmul(a, b, 7)
    assert got.shape == (m, n)
    assert np.allclose(got, a @ b, rtol=1e-13, atol=1e-13)


def test_diagonal_sums_equal_the_sum_of_pair_products():
    rng = np.random.default_rng(8)
    da, _ = slicing.split(rng.standard_normal((9, 40)), 5)
    db, _ = slicing.split(rng.standard_normal((40, 6)), 5, axis=0)
    pairs = ref.pair_products(da, db)
    diags = ref.diagonal_sums(da, db)
    i = 0
    for d in range(5):
        assert np.array_equal(diags[d], pairs[i:i + d + 1].sum(axis=0))
        i += d + 1


def test_shape_mismatch_is_explained():
    with pytest.raises(KernelLabArgumentError, match="A's columns must equal B's rows"):
        ref.emulated_matmul(np.ones((2, 3)), np.ones((4, 2)))


# ---- the yardstick ------------------------------------------------------------------------------

def test_accurate_matmul_is_correctly_rounded_on_hard_small_problems():
    """Against exact rational arithmetic, on dot products that cancel almost completely."""
    rng = np.random.default_rng(9)
    for trial in range(20):
        k = int(rng.integers(2, 40))
        a = rng.standard_normal((3, k)) * np.exp2(rng.integers(-40, 40, (3, k)))
        b = rng.standard_normal((k, 2))
        b[-1, :] = 0.0
        # make row 0 x column 0 cancel: the last term undoes the others (up to rounding)
        partial = a[0, :-1] @ b[:-1, 0]
        b[-1, 0] = -partial / a[0, -1]
        got = ref.accurate_matmul(a, b)
        for i in range(3):
            for j in range(2):
                exact = sum(Fraction(float(a[i, t])) * Fraction(float(b[t, j])) for t in range(k))
                size = sum(abs(Fraction(float(a[i, t])) * Fraction(float(b[t, j]))) for t in range(k))
                # Ogita-Rump-Oishi's bound for Dot2: u|exact| + gamma_{2k}^2 sum|terms| (gamma_n ~ n u);
                # float64 alone would only promise gamma_k sum|terms|.
                bound = abs(exact) * Fraction(2 * U) + Fraction((2 * k * U) ** 2) * size + Fraction(5e-324)
                assert abs(Fraction(float(got[i, j])) - exact) <= bound


def test_errors_reports_normwise_and_componentwise():
    a = np.eye(3)
    b = np.eye(3)
    got = np.eye(3)
    got[0, 0] += 2 * U
    e = ref.errors(got, a, b)
    assert e["componentwise"] == pytest.approx(2.0)
    assert e["normwise"] == pytest.approx(2 * U / np.sqrt(3))
