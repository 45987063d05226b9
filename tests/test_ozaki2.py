"""Ozaki scheme II in NumPy: moduli, exact remainders, the CRT against Python integers, the bound,
accuracy against the number of moduli, and the GEMM count at equal accuracy with Ozaki-I."""

import doctest
import math
import random

import numpy as np
import pytest

from kernel_lab.ozaki import auto, ozaki2
from kernel_lab.ozaki import reference as ref
from kernel_lab.ozaki.slicing import max_exact_k
from kernel_lab.validate import KernelLabArgumentError

U = 2.0**-53
FLOAT64_GOAL = 5e-15  # the module's float64 accuracy, normwise (test_ozaki_reference holds 7 slices to it)


def _mixed(rng, m, k, spread=20):
    """Standard normal rows scaled by powers of two up to 2**+-spread: rows of wildly different size."""
    return rng.standard_normal((m, k)) * np.exp2(rng.integers(-spread, spread + 1, (m, 1)))


def _symmetric(x, m):
    r = x % m
    return r - m if r > m - 1 - m // 2 else r


# ---- moduli and plan ----------------------------------------------------------------------------

def test_moduli_are_pairwise_coprime_and_their_remainders_fit_int8():
    mods = ozaki2.coprime_moduli(ozaki2.MAX_MODULI)
    assert mods[:6] == (256, 255, 253, 251, 247, 241)
    assert all(2 <= m <= 256 for m in mods)
    assert all(math.gcd(x, y) == 1 for i, x in enumerate(mods) for y in mods[i + 1:])
    plan = ozaki2.crt_plan(ozaki2.MAX_MODULI)
    low, high = -plan.half, np.array(mods) - 1 - plan.half
    assert low.min() >= -128 and high.max() <= 127
    # every product of two remainders is at most 128 * 128: the INT32 limit of one slice product
    assert max_exact_k(1) * 128 * 128 <= 2**31 - 1


@pytest.mark.parametrize("n", [1, 2, 7, 14, 20, 32])
def test_windows_rebuild_the_crt_weights_exactly(n):
    plan = ozaki2.crt_plan(n)
    big_m = plan.product
    assert big_m == math.prod(plan.moduli)
    assert 2 * plan.limit * 2**30 <= big_m * (2**30 - 1) + 2**31  # limit <= (M/2)(1 - 2**-30)
    assert 2**plan.window_bits * (256 * n + 1) <= 2**53  # every window sum is exact in float64
    for m, fr, row in zip(plan.moduli, plan.fractions, plan.weights):
        c = sum(int(w) for w in row)  # the windows are exact float64 integers
        assert c % big_m == c and c % m == 1 and all(c % other == 0 for other in plan.moduli if other != m)
        assert fr == pytest.approx(((c // (big_m // m)) % m) / m, rel=1e-15)
    assert sum(int(w) for w in plan.product_windows) == big_m


@pytest.mark.parametrize("n", [3, 14, 32])
def test_remainders_of_large_float64_integers_match_python_integers(n):
    plan = ozaki2.crt_plan(n)
    rng = np.random.default_rng(n)
    exps = rng.integers(0, 125, 400)
    x = np.rint(np.ldexp(rng.uniform(-1, 1, 400), exps))  # integers up to 2**124, both signs
    x[:4] = [0.0, -1.0, 2.0**53, -(2.0**53 + 2)]
    got = ozaki2.residues(x.reshape(20, 20), plan)
    assert got.dtype == np.int8
    for l, m in enumerate(plan.moduli):
        want = [_symmetric(int(v), m) for v in x]
        assert got[l].ravel().tolist() == want


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 14, 16, 20, 32])
def test_crt_rebuilds_every_integer_within_the_limit_to_one_ulp(n):
    """Against Python integers: values at and near +-limit, tiny ones, random ones of every size;
    the congruences are given as unreduced INT32-like products (random multiples of m added)."""
    plan = ozaki2.crt_plan(n)
    lim = plan.limit
    rnd = random.Random(n)
    vals = [0, 1, -1, lim, -lim, lim - 1, -lim + 1, 2**53 + 1, -(2**53 + 1)]
    vals += [rnd.randint(-lim, lim) for _ in range(200)]
    vals += [rnd.randint(-2**b, 2**b) for b in range(1, lim.bit_length()) for _ in range(3)]
    vals = [v for v in vals if abs(v) <= lim]
    noise = np.random.default_rng(n).integers(-3000, 3000, (n, len(vals)))
    parts = np.array([[v % m for v in vals] for m in plan.moduli], dtype=np.int64) + \
        np.array(plan.moduli)[:, None] * noise
    got = ozaki2.crt_reconstruct(parts, plan)
    exact = 0
    for v, g in zip(vals, got):
        assert abs(int(g) - v) < math.ulp(float(v)) if v else g == 0.0, (v, g)
        exact += g == float(v)
    assert exact >= 0.9 * len(vals)  # mostly correctly rounded


def test_crt_is_wrong_outside_the_limit():
    """The limit is real: an integer just above M/2 comes back as its negative twin."""
    plan = ozaki2.crt_plan(3)
    v = plan.product // 2 + 5
    parts = np.array([[v % m] for m in plan.moduli])
    assert ozaki2.crt_reconstruct(parts, plan)[0] == float(v - plan.product)


# ---- the bound ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bound", ozaki2.BOUNDS)
@pytest.mark.parametrize("n", [4, 9, 14, 20])
def test_scaled_integers_keep_the_crt_bound(bound, n):
    """sum_k |a'_ik||b'_kj| <= limit for every (i, j), in Python integers, on inputs made to press
    against it: rows of equal entries just below a power of two (norm = sqrt(K) |x|), rows whose
    scaled entries all round up, one huge entry, subnormals."""
    plan = ozaki2.crt_plan(n)
    rng = np.random.default_rng(n)
    k = 64
    a = rng.standard_normal((6, k))
    a[0] = 1.0 - 2.0**-53
    a[1] = -(2.0**10) * (1.0 - 2.0**-40)
    a[2] = 0.0
    a[2, 5] = 3e300
    a[3] = 5e-324 * rng.integers(1, 1000, k)
    a[4] = (0.5 + 2.0**-12) * np.exp2(rng.integers(-3, 0, k))
    b = np.ascontiguousarray(a[::-1].T.copy())
    mu = ozaki2.scale_exponents(a, n, 1, bound)
    nu = ozaki2.scale_exponents(b, n, 0, bound)
    ai = ozaki2.to_integers(a, mu, 1)
    bi = ozaki2.to_integers(b, nu, 0)
    worst = 0
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            worst = max(worst, sum(abs(int(x)) * abs(int(y)) for x, y in zip(ai[i], bi[:, j])))
    assert worst <= plan.limit
    assert worst > plan.limit / 2**(8 if bound == "norm" else 12)  # and the scaling uses the room


def test_operand_bits_are_the_largest_that_keep_the_bound_after_rounding():
    """(2**qa + sqrt(K)/2)(2**qb + sqrt(K)/2) <= limit, and one more bit breaks it (exact integers)."""
    for n in range(1, ozaki2.MAX_MODULI + 1):
        lim = ozaki2.crt_plan(n).limit
        for k in (1, 2, 10, 100, 1000, 10**4, max_exact_k(1)):
            s = math.isqrt(k - 1) + 1  # ceil(sqrt(K))
            try:
                qa, qb = ozaki2.operand_bits(n, k)
            except KernelLabArgumentError:
                assert (2 + s) ** 2 > 4 * lim  # not even qa = qb = 0 fits
                continue
            assert (2**(qa + 1) + s) * (2**(qb + 1) + s) <= 4 * lim
            t = qa + qb + 1
            assert (2**((t + 1) // 2 + 1) + s) * (2**(t // 2 + 1) + s) > 4 * lim


def test_operand_bits_follow_the_product_of_the_moduli():
    for n in (8, 14, 20):
        qa, qb = ozaki2.operand_bits(n, 1000)
        assert qa - qb in (0, 1)
        assert ozaki2.crt_plan(n).product_bits - 3 <= qa + qb <= ozaki2.crt_plan(n).product_bits
        ma, mb = ozaki2.operand_bits(n, 1000, "max")
        assert ma + mb == qa + qb - 10  # K * max * max costs log2(K) bits more
    with pytest.raises(KernelLabArgumentError, match="cannot hold a product of length K = 1000"):
        ozaki2.operand_bits(1, 1000)


# ---- accuracy -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def normal_problem():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 1000)), rng.standard_normal((1000, 48))
    return a, b, ref.accurate_matmul(a, b)


def test_error_falls_about_16_times_per_modulus(normal_problem):
    """Each modulus adds about 8 bits to the product, 4 to each operand: the error shrinks ~16x."""
    a, b, accurate = normal_problem
    errs = [ref.errors(ozaki2.emulated_matmul(a, b, n), a, b, accurate)["normwise"] for n in range(4, 15)]
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert (ratios > 8).all() and (ratios < 32).all(), ratios
    assert 0.1 < errs[-1] / (math.sqrt(1000 / 6) * 2.0**-(sum(ozaki2.operand_bits(14, 1000)) / 2)) < 10


def test_fourteen_moduli_reach_float64_accuracy_with_half_the_gemms_of_ozaki1(normal_problem):
    a, b, accurate = normal_problem
    err2 = {n: ref.errors(ozaki2.emulated_matmul(a, b, n), a, b, accurate)["normwise"] for n in (13, 14)}
    err1 = {s: ref.errors(ref.emulated_matmul(a, b, s), a, b, accurate)["normwise"] for s in (6, 7)}
    assert err2[14] <= FLOAT64_GOAL < err2[13]
    assert err1[7] <= FLOAT64_GOAL < err1[6]
    assert ozaki2.gemm_count(14) == 14 and 7 * 8 // 2 == 28  # 14 INT8 products against 28
    assert err2[14] < 2 * err1[7]  # at equal (or better) accuracy
    e14 = ref.errors(ozaki2.emulated_matmul(a, b, 14), a, b, accurate)["componentwise"]
    assert e14 < 64


def test_norm_bound_is_more_accurate_than_max_bound(normal_problem):
    a, b, accurate = normal_problem
    for n in (8, 12):
        norm = ref.errors(ozaki2.emulated_matmul(a, b, n), a, b, accurate)["normwise"]
        mx = ref.errors(ozaki2.emulated_matmul(a, b, n, bound="max"), a, b, accurate)["normwise"]
        assert mx > 2 * norm


def test_rows_of_very_different_magnitude_are_handled_by_per_row_scaling():
    rng = np.random.default_rng(2)
    a, b = _mixed(rng, 50, 200, spread=150), _mixed(rng, 60, 200, spread=150).T
    err = ref.errors(ozaki2.emulated_matmul(a, b, 14), a, b)
    assert err["componentwise"] < 64 and err["normwise"] < FLOAT64_GOAL


def test_spread_inside_rows_is_what_auto_predicts():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((30, 200)) * np.exp2(rng.integers(-30, 1, (30, 200)))
    b = rng.standard_normal((200, 20))
    accurate = ref.accurate_matmul(a, b)
    for n in (9, 12):
        got = ref.errors(ozaki2.emulated_matmul(a, b, n), a, b, accurate)["normwise"]
        assert 0.5 < got / auto.predict_ozaki2_error(a, b, n) < 2


def test_k_chunks_add_remainders_and_change_nothing():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((6, 700)), rng.standard_normal((700, 4))
    assert np.array_equal(ozaki2.emulated_matmul(a, b, 12), ozaki2.emulated_matmul(a, b, 12, k_chunk=64))


def test_alpha_beta_rules():
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((7, 9)), rng.standard_normal((9, 5)), rng.standard_normal((7, 5))
    for alpha, beta in [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (-0.5, 2.0), (0.0, 0.0)]:
        got = ozaki2.emulated_matmul(a, b, 14, alpha, beta, c)
        assert np.allclose(got, alpha * (a @ b) + beta * c, rtol=1e-14, atol=1e-14), (alpha, beta)
    poisoned = np.full((7, 5), np.nan)
    assert np.isfinite(ozaki2.emulated_matmul(a, b, 14, 1.0, 0.0, poisoned)).all()  # beta 0: C not read
    with pytest.raises(KernelLabArgumentError, match="beta is not 0 but no C"):
        ozaki2.emulated_matmul(a, b, 14, 1.0, 1.0)


def test_inf_and_nan_give_float64_gemms_values():
    """DGEMM's Inf and NaN, not whole NaN rows and columns (tests/test_ozaki_nonfinite.py has every case)."""
    a = np.ones((3, 4))
    b = np.ones((4, 5))
    a[1, 2] = np.inf
    b[0, 3] = np.nan
    got = ozaki2.emulated_matmul(a, b, 10)
    assert np.isposinf(np.delete(got[1], 3)).all() and np.isnan(got[:, 3]).all()
    assert (np.delete(np.delete(got, 1, axis=0), 3, axis=1) == 4.0).all()


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 0, 3), (0, 4, 2), (5, 3, 1), (129, 65, 33), (3, 1, 7)])
def test_any_shape(shape):
    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    got = ozaki2.emulated_matmul(a, b, 14)
    assert got.shape == (m, n)
    assert np.allclose(got, a @ b, rtol=1e-13, atol=1e-13)


def test_integers_and_zeros_come_out_exact():
    rng = np.random.default_rng(9)
    a = rng.integers(-1000, 1000, (20, 30)).astype(np.float64)
    b = rng.integers(-1000, 1000, (30, 10)).astype(np.float64)
    a[3] = 0.0
    assert np.array_equal(ozaki2.emulated_matmul(a, b, 8), a @ b)


def test_bad_arguments_are_explained():
    a, b = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(KernelLabArgumentError, match="number of moduli must be a whole number from 1 to 32"):
        ozaki2.emulated_matmul(a, b, 33)
    with pytest.raises(KernelLabArgumentError, match="number of moduli"):
        ozaki2.emulated_matmul(a, b, 0)
    with pytest.raises(KernelLabArgumentError, match="bound must be one of"):
        ozaki2.emulated_matmul(a, b, 14, bound="l1")
    with pytest.raises(KernelLabArgumentError, match="A's columns must equal B's rows"):
        ozaki2.emulated_matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(KernelLabArgumentError, match="float64"):
        ozaki2.emulated_matmul(a.astype(np.float32), b)
    with pytest.raises(KernelLabArgumentError, match="cannot hold a product of length K"):
        ozaki2.emulated_matmul(np.ones((2, 5000)), np.ones((5000, 2)), 1)


@pytest.mark.parametrize("module", [ozaki2, auto])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
