"""Choosing the number of Ozaki-I slices and Ozaki-II moduli from the inputs (kernel_lab.ozaki.auto)."""

import math

import numpy as np
import pytest

from kernel_lab.ozaki import auto, ozaki2
from kernel_lab.ozaki import reference as ref
from kernel_lab.validate import KernelLabArgumentError


def _spread(rng, m, k, n, binades, positive=False):
    """Standard normal entries, each scaled by 2**-U{0..binades}: spread inside rows and columns."""
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if positive:
        a, b = np.abs(a), np.abs(b)
    a *= np.exp2(-rng.integers(0, binades + 1, (m, k)))
    b *= np.exp2(-rng.integers(0, binades + 1, (k, n)))
    return a * np.exp2(rng.integers(-30, 31, (m, 1))), b  # and rows of different size


def _measured(got, a, b, accurate, measure):
    e = ref.errors(got, a, b, accurate)
    return e["normwise"] if measure == "normwise" else e["componentwise"] * auto.U64


def test_spread_bits():
    x = np.array([[1.0, 1.0], [1.0, 2.0**-20], [0.0, 0.0], [3.0, -3.0]])
    assert auto.spread_bits(x).tolist() == pytest.approx([1.0, 1.5, 0.0, 2 - math.log2(3)])
    assert np.allclose(auto.spread_bits(x.T, axis=0), auto.spread_bits(x))
    rng = np.random.default_rng(0)
    narrow = auto.spread_bits(rng.standard_normal((20, 1000)))
    wide = auto.spread_bits(rng.standard_normal((20, 1000)) * np.exp2(-rng.integers(0, 25, (20, 1000))))
    assert 1.5 < narrow.mean() < 2.5 and 3.5 < wide.mean() < 4.5


@pytest.mark.parametrize("binades,positive", [(0, False), (12, False), (30, True)])
def test_normwise_predictions_track_the_measured_errors(binades, positive):
    rng = np.random.default_rng(binades)
    a, b = _spread(rng, 30, 400, 25, binades, positive)
    accurate = ref.accurate_matmul(a, b)
    for s in (3, 5, 6):
        got = _measured(ref.emulated_matmul(a, b, s), a, b, accurate, "normwise")
        assert 0.5 < got / auto.predict_ozaki1_error(a, b, s) < 2, s
    for n in (6, 10, 13):
        got = _measured(ozaki2.emulated_matmul(a, b, n), a, b, accurate, "normwise")
        assert 0.5 < got / auto.predict_ozaki2_error(a, b, n) < 2, n


def test_componentwise_predictions_are_not_optimistic():
    rng = np.random.default_rng(3)
    for binades in (0, 20, 40):
        a, b = _spread(rng, 20, 60, 15, binades)
        accurate = ref.accurate_matmul(a, b)
        for s in (4, 6):
            got = _measured(ref.emulated_matmul(a, b, s), a, b, accurate, "componentwise")
            assert got / auto.predict_ozaki1_error(a, b, s, "componentwise") < auto.SAFETY
        for n in (8, 11):
            got = _measured(ozaki2.emulated_matmul(a, b, n), a, b, accurate, "componentwise")
            assert got / auto.predict_ozaki2_error(a, b, n, "componentwise") < auto.SAFETY


@pytest.mark.parametrize("measure", auto.MEASURES)
def test_chosen_count_meets_the_target_and_one_fewer_usually_does_not(measure):
    """The property the brief asks for, over random matrices with controlled spread (0 to 30 binades
    inside rows and columns, signed and positive, rows of different size) and targets from 1e-3
    down to 3e-15."""
    rng = np.random.default_rng(2024 + len(measure))
    cases = met = fewer_met = 0
    for _ in range(24):
        m, n = (int(x) for x in rng.integers(4, 30, 2))
        k = int(rng.choice([30, 200, 600]))
        a, b = _spread(rng, m, k, n, int(rng.choice([0, 6, 12, 20, 30])), bool(rng.random() < 0.3))
        target = float(10 ** rng.uniform(-14.5, -3))
        accurate = ref.accurate_matmul(a, b)
        for choose, run in ((auto.choose_slices, ref.emulated_matmul), (auto.choose_moduli, ozaki2.emulated_matmul)):
            choice = choose(a, b, target, measure)
            if not choice.meets:
                continue
            cases += 1
            got = _measured(run(a, b, choice.count), a, b, accurate, measure)
            assert got <= target, (choice, got)
            met += 1
            if choice.count > 1:
                fewer_met += _measured(run(a, b, choice.count - 1), a, b, accurate, measure) <= target
    assert cases >= 40 and met == cases
    assert fewer_met <= 0.45 * cases, (fewer_met, cases)


def test_defaults_float64_on_gaussians_and_more_for_spread():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((60, 400)), rng.standard_normal((400, 50))
    one, two = auto.choose_slices(a, b), auto.choose_moduli(a, b)
    assert (one.count, one.gemms, one.measure, one.target) == (7, 28, "normwise", auto.FLOAT64_NORMWISE)
    assert (two.count, two.gemms) == (14, 14) and one.meets and two.meets
    assert set(one.predictions) == set(range(1, 8)) and one.predictions[6] * auto.SAFETY > one.target
    assert auto.choose_slices(a, b, measure="componentwise").count == 7
    assert auto.choose_slices(a, b, 1e-6).count == 4
    wide = a * np.exp2(-rng.integers(0, 25, a.shape))
    assert auto.choose_slices(wide, b).count == 8 and auto.choose_slices(wide, b).spread[0] > 4
    assert auto.choose_moduli(wide, b).count == 14  # the norm bound does not care about spread inside rows


def test_unreachable_target_says_so():
    """Below float64's own rounding of the result no count helps: the largest is returned, meets=False."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((10, 100)), rng.standard_normal((100, 8))
    for choice in (auto.choose_slices(a, b, 1e-17), auto.choose_moduli(a, b, 1e-17)):
        assert not choice.meets and choice.predicted * auto.SAFETY > 1e-17
    assert auto.choose_slices(a, b, 1e-17).count == 8 and auto.choose_moduli(a, b, 1e-17).count == ozaki2.MAX_MODULI


def test_normwise_target_sees_cancellation_in_the_product():
    """B's columns nearly in A's null space: AB is 1e-8 the size of |A||B|, so relative accuracy
    costs 8 more digits. The probes see it; the measured error agrees with the prediction."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((20, 60))
    null = np.linalg.svd(a)[2][20:].T  # (60, 40): a @ null = 0 up to rounding
    b = null @ rng.standard_normal((40, 15)) + 1e-8 * rng.standard_normal((60, 15))
    plain = rng.standard_normal((60, 15))
    assert auto.choose_slices(a, b).count > auto.choose_slices(a, plain).count
    accurate = ref.accurate_matmul(a, b)
    got = _measured(ref.emulated_matmul(a, b, 5), a, b, accurate, "normwise")
    assert 0.3 < got / auto.predict_ozaki1_error(a, b, 5) < 3


def test_bad_arguments_are_explained():
    a, b = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(KernelLabArgumentError, match="measure must be one of"):
        auto.choose_slices(a, b, measure="max")
    with pytest.raises(KernelLabArgumentError, match="target must be a relative error between 0 and 1"):
        auto.choose_moduli(a, b, 0.0)
    with pytest.raises(KernelLabArgumentError, match="A's columns must equal B's rows"):
        auto.choose_slices(a, np.ones((2, 2)))
    with pytest.raises(KernelLabArgumentError, match="slices must be a whole number from 1 to 8"):
        auto.predict_ozaki1_error(a, b, 9)
    with pytest.raises(KernelLabArgumentError, match="bound must be one of"):
        auto.choose_moduli(a, b, bound="l2")
    with pytest.raises(KernelLabArgumentError, match="float64"):
        auto.spread_bits(np.ones((2, 2), np.float32))


def test_nonfinite_and_empty_inputs():
    a = np.ones((3, 4))
    a[1, 1] = np.nan
    b = np.ones((4, 2))
    assert auto.choose_slices(a, b).count >= 1
    assert auto.choose_moduli(np.zeros((3, 0)), np.zeros((0, 2))).count == 1
    assert auto.choose_slices(np.zeros((3, 5)), np.ones((5, 2))).count == 1


def _ties(rng, rows, k, bits, positive):
    """Odd integers in (2**bits, 2**(bits + 1)) whose halves have an even integer part: scaled by
    1/2 (the schemes' grid below, by construction) every entry is a tie, and ties to even round A
    toward zero and a positive B down: rounding errors that follow the entries."""
    r = 2 * rng.integers(0, 2**(bits - 5), (rows, k)).astype(np.float64)
    mag = 2.0**(bits + 1) - 1 - 2 * r
    return mag if positive else mag * rng.choice([-1.0, 1.0], (rows, k))


def _boundary_cases():
    """(scheme, count, A, B): inputs on a grid one bit finer than the scheme's for that count, A
    signed and B positive (issue 36 §3)."""
    rng = np.random.default_rng(36)
    for k in (64, 1024):
        for s in (3, 5, 6):  # Ozaki-I: the row's top exponent is bits + 1, its grid 2**(e - P) = 2
            p = 8 * s - 2  # slicing.scaled_bits(s)
            yield "slices", s, _ties(rng, 6, k, p, False), _ties(rng, 5, k, p, True).T.copy()
        for n in (9, 12):  # Ozaki-II: rows whose norm is just below 2**(q + 1): the grid is 2
            qa, qb = ozaki2.operand_bits(n, k)
            half = int(math.log2(k)) // 2
            yield "moduli", n, _ties(rng, 6, k, qa - half, False), _ties(rng, 5, k, qb - half, True).T.copy()


@pytest.mark.parametrize("measure", auto.MEASURES)
def test_choosers_meet_their_target_at_the_decision_boundary(measure):
    """Target = SAFETY x the prediction of a count: the chooser takes that count, whose error must
    meet the target. Before the model measured ties and added the two operands' errors in phase,
    the chosen count missed on these inputs by 1.3 times (moduli) and 1.2 times (slices), normwise."""
    worst = 0.0
    for scheme, count, a, b in _boundary_cases():
        one = scheme == "slices"
        predict = auto.predict_ozaki1_error if one else auto.predict_ozaki2_error
        target = auto.SAFETY * predict(a, b, count, measure)
        choice = (auto.choose_slices if one else auto.choose_moduli)(a, b, target, measure)
        assert choice.count == count
        run = ref.emulated_matmul if one else ozaki2.emulated_matmul
        got = _measured(run(a, b, count), a, b, ref.accurate_matmul(a, b), measure)
        worst = max(worst, got / target)
        assert got <= target, (scheme, count, a.shape[1], got / target)
    assert worst > 0.3  # the inputs are hard: the margin is used


def test_a_componentwise_target_is_met_on_wide_exponent_inputs():
    """Entries spread over 2**-60 .. 2**60 inside rows and columns: 7 slices meet float64's normwise
    goal but miss single elements by millions of units of roundoff; auto.emulated_matmul with a
    componentwise target picks enough moduli to meet it, and says when 8 slices cannot."""
    rng = np.random.default_rng(60)
    a = rng.standard_normal((30, 200)) * np.exp2(rng.integers(-60, 61, (30, 200)))
    b = rng.standard_normal((200, 20)) * np.exp2(rng.integers(-60, 61, (200, 20)))
    accurate = ref.accurate_matmul(a, b)
    seven = ref.errors(ref.emulated_matmul(a, b, 7), a, b, accurate)
    assert seven["normwise"] < auto.FLOAT64_NORMWISE and seven["componentwise"] > 1e5  # units of u
    for target in (None, 1e-12, 1e-8):
        c, choice = auto.emulated_matmul(a, b, target)
        assert choice.measure == "componentwise" and choice.meets and choice.scheme == "ozaki2"
        assert _measured(c, a, b, accurate, "componentwise") <= choice.target, (target, choice)
    assert choice.target == 1e-8 and choice.count < auto.choose_moduli(a, b, 1e-12, "componentwise").count
    c0 = rng.standard_normal((30, 20))
    got, _ = auto.emulated_matmul(a, b, alpha=-2.0, beta=0.5, c=c0)
    assert _measured(got, a, b, -2.0 * accurate + 0.5 * c0, "componentwise") < 1e-14
    with pytest.raises(KernelLabArgumentError, match="8 slices are predicted to reach a componentwise error"):
        auto.emulated_matmul(a, b, scheme="ozaki1")
    got, choice = auto.emulated_matmul(a, b, 1e-6, scheme="ozaki1")  # a looser target is within reach
    assert _measured(got, a, b, accurate, "componentwise") <= 1e-6
    with pytest.raises(KernelLabArgumentError, match="scheme must be one of"):
        auto.emulated_matmul(a, b, scheme="ozaki3")
