"""Module 07's GPU checks: correct kernels pass, and each classic mistake gets its name.

The slicing and reconstruction kernels run in the simulator; the pipeline kernels' checks are
exercised through their NumPy mistake models (the same comparison the GPU check makes)."""

import math

import numpy as np
import pytest

import kernel_lab as kl
from kernel_lab.checks import ozaki_gpu as chk
from kernel_lab.ozaki import gpu as g
from kernel_lab.ozaki import reference as ref
from kernel_lab.ozaki import slicing
from numba import cuda

S = 5
P = slicing.scaled_bits(S)
T = g.ROW_THREADS


@pytest.fixture(autouse=True, scope="module")
def _simulator_extensions():
    kl.setup(quiet=True)


def _launch_rows(kernel):
    return lambda a, e, bad: kernel[a.shape[0], T](a, e, bad)


@cuda.jit
def _exponents_log2(a, e, bad):  # the mistake: ceil(log2(max)) instead of frexp
    row = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        amax = 0.0
        seen = 0
        for j in range(a.shape[1]):
            v = abs(a[row, j])
            if math.isinf(v) or math.isnan(v):
                seen = 1
            elif v > amax:
                amax = v
        bad[row] = seen
        e[row] = int(math.ceil(math.log2(amax))) if amax > 0 and seen == 0 else 0  # wrong at powers of two


@cuda.jit
def _exponents_nan_blind(a, e, bad):  # the mistake: `v > amax` never sees a NaN
    row = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        amax = 0.0
        for j in range(a.shape[1]):
            v = abs(a[row, j])
            if v > amax:
                amax = v
        bad[row] = 1 if math.isinf(amax) else 0
        e[row] = math.frexp(amax)[1] if amax > 0 and not math.isinf(amax) else 0


def test_row_exponents_pass_and_mistakes_are_named(capsys):
    chk.check_row_exponents(_launch_rows(g.row_exponents_kernel()), seed=1)
    assert "row exponents: correct for all 4 cases" in capsys.readouterr().out
    with pytest.raises(kl.CheckFailed, match="power of two"):
        chk.check_row_exponents(_launch_rows(_exponents_log2), seed=1)
    with pytest.raises(kl.CheckFailed, match="NaN loses every comparison"):
        chk.check_row_exponents(_launch_rows(_exponents_nan_blind), seed=1)
    with pytest.raises(kl.CheckFailed, match="never written"):
        chk.check_row_exponents(lambda a, e, bad: None, seed=1)


def _slicer(kind):
    @cuda.jit
    def kernel(a, e, digits):
        col, row = cuda.grid(2)
        if row < digits.shape[1] and col < digits.shape[2]:
            x = a[row, col] if row < a.shape[0] and col < a.shape[1] else 0.0
            if kind == 3 and (row >= a.shape[0] or col >= a.shape[1]):
                return  # the padding left as it was
            big = 0
            if x != 0.0:
                y = math.ldexp(x, P - e[row])
                big = int(y) if kind == 2 else round(y)
            for t in range(S - 1, 0, -1):
                d = (big & 255) if kind == 1 else ((big + 128) & 255) - 128
                digits[t, row, col] = d if kind != 1 else (d - 256 if d > 127 else d)
                big = (big >> 8) if kind == 1 else (big - d) >> 8
            digits[0, row, col] = big
    return lambda a, e, digits: kernel[(kl.blocks_for(digits.shape[2], 32), kl.blocks_for(digits.shape[1], 8)),
                                       (32, 8)](a, e, digits)


def test_slicer_passes_and_mistakes_are_named(capsys):
    chk.check_slice_rows(_slicer(0), S, seed=2)
    assert f"{S} slices: correct for all 4 cases" in capsys.readouterr().out
    with pytest.raises(kl.CheckFailed, match="unsigned low byte"):
        chk.check_slice_rows(_slicer(1), S, seed=2)
    with pytest.raises(kl.CheckFailed, match="truncated instead of rounded"):
        chk.check_slice_rows(_slicer(2), S, seed=2)
    with pytest.raises(kl.CheckFailed, match="padding digits are not 0"):
        chk.check_slice_rows(_slicer(3), S, seed=2)


def _reconstructor(kind):
    @cuda.jit
    def kernel(parts, ea, eb, alpha, beta, c):
        col, row = cuda.grid(2)
        if row < c.shape[0] and col < c.shape[1]:
            shift = ea[row] + eb[col] if kind != 4 else eb[col]
            total = c[row, col] if kind == 2 else (c[row, col] * beta if kind == 3 else 0.0)
            for d in range(S - 1, -1, -1):
                first = d * (d + 1) // 2
                acc = 0
                for t in range(d + 1):
                    acc += parts[first + t, row, col]
                w = -12 - 8 * (S - 1 - d) if kind == 1 else -12 - 8 * d
                x = math.ldexp(float(acc), shift + w)
                if kind == 2:  # beta on every diagonal
                    total = alpha * x + beta * total
                else:
                    total += alpha * x
            if kind in (2, 3):
                c[row, col] = total
            elif beta == 0.0:
                c[row, col] = total
            else:
                c[row, col] = total + beta * c[row, col]
    return lambda parts, ea, eb, alpha, beta, c: kernel[(kl.blocks_for(c.shape[1], 32), kl.blocks_for(c.shape[0], 8)),
                                                         (32, 8)](parts, ea, eb, alpha, beta, c)


def test_reconstruction_passes_and_mistakes_are_named(capsys):
    chk.check_reconstruct(_reconstructor(0), S, seed=3)
    assert "reconstruction from pair products: correct" in capsys.readouterr().out
    with pytest.raises(kl.CheckFailed, match="diagonal weights reversed"):
        chk.check_reconstruct(_reconstructor(1), S, seed=3)
    with pytest.raises(kl.CheckFailed, match="beta applied to every diagonal|C is not read|must\\s+mean C is not read"):
        chk.check_reconstruct(_reconstructor(2), S, seed=3)
    with pytest.raises(kl.CheckFailed, match="beta = 0 must\\s+mean C is not read"):
        chk.check_reconstruct(_reconstructor(3), S, seed=3)
    with pytest.raises(kl.CheckFailed, match="row exponent ea is missing"):
        chk.check_reconstruct(_reconstructor(4), S, seed=3)


def test_diagonal_mistake_models_are_distinct_and_recognised():
    rng = np.random.default_rng(4)
    da, _ = slicing.split(rng.standard_normal((6, 40)), S)
    db, _ = slicing.split(rng.standard_normal((40, 5)), S, axis=0)
    good = ref.diagonal_sums(da, db)
    models = chk._diagonal_models(da, db)
    for name, model in models.items():
        assert not np.array_equal(model, good), name
    again = models["the first pair is multiplied again and again (move the pipeline with reset_tile after each execute)"]
    assert np.array_equal(again[2], 3 * (da[0].astype(np.int64) @ db[2].astype(np.int64)))


def test_float_comparison_names_the_matching_model():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((7, 30)), rng.standard_normal((30, 6))
    da, ea = slicing.split(a, S)
    db, eb = slicing.split(b, S, axis=0)
    diags = ref.diagonal_sums(da, db)
    c = rng.standard_normal((7, 6))
    want = ref.reconstruct(diags, ea, eb, 0.5, 2.0, c)
    models = chk._reconstruct_models(diags, ea, eb, 0.5, 2.0, c)
    magnitude = 0.5 * (np.abs(a) @ np.abs(b)) + np.abs(2.0 * c)
    chk._compare_float_result("fused", want, want, magnitude, models)  # passes silently
    wrong, _ = models["beta applied to every diagonal"]
    with pytest.raises(kl.CheckFailed, match="beta applied to every diagonal"):
        chk._compare_float_result("fused", wrong, want, magnitude, models)


def test_an_unwritten_c_is_reported_as_not_done():
    c_in = np.arange(12.0).reshape(3, 4)
    with pytest.raises(kl.CheckFailed, match="wrote nothing"):
        chk._require_written("fused kernel", c_in.copy(), c_in)
    with pytest.raises(kl.CheckFailed, match="Not done yet"):
        chk._require_written("fused kernel", np.full((3, 4), np.nan), np.full((3, 4), np.nan))
    got = c_in.copy()
    got[2, 3] += 1.0
    chk._require_written("fused kernel", got, c_in)  # written: no complaint here
