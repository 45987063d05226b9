"""Ozaki-II's GPU kernels (kernel_lab.ozaki.gpu_ozaki2) against the NumPy scheme, bit for bit.

The kernels are plain Numba, so they run here in the CUDA simulator (at tiny sizes) and on a GPU
alike. The INT8 products themselves (gpu.pair_products_kernel, cuBLASDx) need a GPU: the
end-to-end test stands NumPy in for them, multiplying the very buffers the pipeline would read.
Also here: the NaN detection of gpu.py's Ozaki-I exponent kernels, which share the pattern.
"""

import numpy as np
import pytest

import kernel_lab.simulator as ksim  # importing kernel_lab first picks the simulator without a GPU
from kernel_lab.ozaki import gpu, gpu_ozaki2, nonfinite, ozaki2
from kernel_lab.validate import KernelLabArgumentError

ksim.install()
ON_SIMULATOR = ksim.simulator_active()
POISON = 99  # what the buffers hold before a kernel runs: the padding must come back as zeros


def _operands(rng, m, k, n):
    """Awkward inputs: rows of very different size, a zero row, a subnormal row, Inf/NaN in a row
    of A and a column of B, a column of B 1e-200 the size of the others."""
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 40, (m, 1)))
    b = rng.standard_normal((k, n))
    a[1] = 0.0
    a[2] = 5e-324 * rng.integers(-1000, 1000, k)
    a[3, k // 2] = np.nan
    a[4, 0] = -np.inf
    b[k - 1, 2] = np.inf
    b[:, 3] *= 1e-200
    return a, b


def _clean(x, bad, axis):
    """What the NumPy scheme sees: non-finite rows/columns as zeros."""
    x = np.where(np.isfinite(x), x, 0.0)
    if axis == 1:
        x[bad.astype(bool)] = 0.0
    else:
        x[:, bad.astype(bool)] = 0.0
    return x


def _top(x, axis):
    amax = np.abs(x).max(axis=axis)
    return np.where(amax > 0, np.frexp(amax)[1], 0)


def _exponents(x, axis, bound):
    """Run the GPU exponent kernels on x; returns (e, bad)."""
    count = x.shape[0] if axis == 1 else x.shape[1]
    e = np.full(count, -7, np.int32)
    bad = np.full(count, 7, np.int32)
    work = {}
    if axis == 0:
        chunks = gpu_ozaki2.col_chunks(x.shape[0])
        work = {"pmax": np.full((chunks, count), np.nan), "psum": np.full((chunks, count), np.nan)}
    gpu_ozaki2.launch_exponents(x, axis, bound, e, bad, **work)
    return e, bad


@pytest.mark.parametrize("bound", ozaki2.BOUNDS)
def test_exponent_kernels_match_numpy(bound):
    rng = np.random.default_rng(1)
    a, b = _operands(rng, 9, 300, 7)  # K = 300: two chunks of B's column partials
    for x, axis in ((a, 1), (b, 0)):
        e, bad = _exponents(x, axis, bound)
        want_bad = ~np.isfinite(x).all(axis=axis)
        assert np.array_equal(bad, want_bad.astype(np.int32))
        clean = _clean(x, bad, axis)
        want = ozaki2.norm_exponents(clean, axis) if bound == "norm" else _top(clean, axis)
        assert np.array_equal(e, want)


@pytest.mark.parametrize("n", [5, 32])
def test_residue_kernels_match_numpy(n):
    """Remainders of rint(x * 2**(q - e)): for 32 moduli the integers reach 2**120 (beyond int64)."""
    rng = np.random.default_rng(n)
    m, k, cols = 9, 70, 7
    a, b = _operands(rng, m, k, cols)
    plan = ozaki2.crt_plan(n)
    qa, qb = ozaki2.operand_bits(n, k)
    bad_a = (~np.isfinite(a).all(axis=1)).astype(np.int32)
    bad_b = (~np.isfinite(b).all(axis=0)).astype(np.int32)
    ca, cb = _clean(a, bad_a, 1), _clean(b, bad_b, 0)
    ea, eb = ozaki2.norm_exponents(ca, 1), ozaki2.norm_exponents(cb, 0)
    ra = np.full((n, 16, 96), POISON, np.int8)
    rb = np.full((n, 32, 96), POISON, np.int8)
    gpu_ozaki2.launch_residues(a, 1, ea, qa, bad_a, ra)
    gpu_ozaki2.launch_residues(b, 0, eb, qb, bad_b, rb)
    want_a = ozaki2.residues(ozaki2.to_integers(ca, qa - ea.astype(np.int64), 1), plan)
    want_b = ozaki2.residues(ozaki2.to_integers(cb, qb - eb.astype(np.int64), 0), plan)
    assert np.array_equal(ra[:, :m, :k], want_a)
    assert np.array_equal(rb[:, :cols, :k], want_b.transpose(0, 2, 1))
    assert not ra[:, m:].any() and not ra[:, :, k:].any()  # padding written with zeros
    assert not rb[:, cols:].any() and not rb[:, :, k:].any()
    assert np.abs(want_a).max() > 100  # the test uses the whole int8 range


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.75, -1.5)])
def test_crt_kernel_matches_numpy(alpha, beta):
    rng = np.random.default_rng(3)
    m, k, cols, n = 9, 70, 7, 14
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, cols)) * np.exp2(rng.integers(-9, 9, cols))
    plan = ozaki2.crt_plan(n)
    mu, nu = ozaki2.scale_exponents(a, n, 1), ozaki2.scale_exponents(b, n, 0)
    ra = ozaki2.residues(ozaki2.to_integers(a, mu, 1), plan)
    rb = ozaki2.residues(ozaki2.to_integers(b, nu, 0), plan)
    parts = ozaki2.residue_products(ra, rb).astype(np.int32)  # what the INT8 GEMMs return
    qa, qb = ozaki2.operand_bits(n, k)
    c0 = rng.standard_normal((m, cols))
    c = np.full((m, cols), np.nan) if beta == 0 else c0.copy()  # beta 0: C must not be read
    gpu_ozaki2.launch_crt(parts, qa - mu, qb - nu, qa + qb, alpha, beta, c)
    want = ozaki2.emulated_matmul(a, b, n, alpha, beta, c0)
    if ON_SIMULATOR:
        assert np.array_equal(c, want)
    else:  # a GPU may fuse alpha * x + beta * c into one FMA
        assert np.allclose(c, want, rtol=4 * 2.0**-53, atol=0)


@pytest.mark.parametrize("bound", ozaki2.BOUNDS)
def test_gpu_steps_end_to_end_with_numpy_standing_in_for_the_int8_gemms(bound):
    """launch_exponents, launch_residues, then the products of the padded remainder buffers exactly
    as gpu.pair_products_kernel computes them (pairs (l, l)), then launch_crt and the Inf/NaN rule of
    Ozaki2Gemm: equal to ozaki2.emulated_matmul."""
    rng = np.random.default_rng(4)
    m, k, cols, n = 9, 70, 7, 14
    a, b = _operands(rng, m, k, cols)
    ea, bad_a = _exponents(a, 1, bound)
    eb, bad_b = _exponents(b, 0, bound)
    qa, qb = ozaki2.operand_bits(n, k, bound)
    ra = np.full((n, 16, 96), POISON, np.int8)
    rb = np.full((n, 32, 96), POISON, np.int8)
    gpu_ozaki2.launch_residues(a, 1, ea, qa, bad_a, ra)
    gpu_ozaki2.launch_residues(b, 0, eb, qb, bad_b, rb)
    full = np.stack([ra[l].astype(np.float64) @ rb[l].T.astype(np.float64) for l in range(n)])
    parts = full[:, :m, :cols].astype(np.int32)
    c = np.full((m, cols), np.nan)
    gpu_ozaki2.launch_crt(parts, ea, eb, qa + qb, 1.0, 0.0, c)
    nonfinite.patch_nonfinite(c, a, b, bad_a, bad_b, 1.0)  # what Ozaki2Gemm does with the flags
    want = ozaki2.emulated_matmul(a, b, n, bound=bound)
    assert np.array_equal(np.isnan(c), np.isnan(want))
    assert np.array_equal(c[~np.isnan(c)], want[~np.isnan(want)])


def test_docstring_examples():
    import doctest

    result = doctest.testmod(gpu_ozaki2, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_ozaki2gemm_refuses_bad_arguments_before_touching_a_gpu():
    with pytest.raises(KernelLabArgumentError, match="number of moduli"):
        gpu_ozaki2.Ozaki2Gemm(0)
    with pytest.raises(KernelLabArgumentError, match="bound must be one of"):
        gpu_ozaki2.Ozaki2Gemm(14, bound="l1")
    with pytest.raises(KernelLabArgumentError, match="work buffers"):
        gpu_ozaki2.launch_exponents(np.ones((3, 2)), 0, "norm", np.zeros(2, np.int32), np.zeros(2, np.int32))


def test_ozaki1_exponent_kernels_flag_nan_wherever_it_sits():
    """gpu.py's row_exponents and col_max used `not v <= amax`, which lets a later number replace
    a NaN: a NaN that was not the last element a thread saw went unflagged and was sliced."""
    a = np.full((2, 300), 0.5)
    a[0, 1] = np.nan  # thread 1 sees NaN first, then 0.5 at column 129
    e, bad = np.zeros(2, np.int32), np.zeros(2, np.int32)
    gpu.row_exponents_kernel()[2, gpu.ROW_THREADS](a, e, bad)
    assert bad.tolist() == [1, 0] and e[1] == 0
    b = np.ones((300, 3))
    b[5, 1] = np.nan
    amax, eb, bad_b = np.zeros(3), np.zeros(3, np.int32), np.zeros(3, np.int32)
    col_max, col_finish = gpu.col_exponents_kernels()
    col_max[(1, 2), (gpu.TILE, 8)](b, amax, bad_b)
    col_finish[1, 128](amax, eb, bad_b)
    assert bad_b.tolist() == [0, 1, 0]
