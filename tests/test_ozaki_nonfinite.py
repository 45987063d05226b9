"""IEEE behaviour of every emulated GEMM of module 07 (issue 36 §3): K = 0 with beta = 0 does not read
C; Inf and NaN inputs give float64 GEMM's result (+-Inf where an infinity meets finite values, NaN
where Inf * 0, Inf - Inf or a NaN occurs). Both schemes, every entry point that runs on a CPU: the
NumPy schemes, and the GPU launchers' host code (``OzakiGemm``/``Ozaki2Gemm.__call__``) with their
kernels replaced by the NumPy schemes."""

import sys
import types

import numpy as np
import pytest

import kernel_lab as kl
from kernel_lab.ozaki import nonfinite
from kernel_lab.ozaki import ozaki2
from kernel_lab.ozaki import reference as ref


def _dgemm(a, b, alpha=1.0, beta=0.0, c=None):
    """What DGEMM returns, from NumPy's BLAS; checked against a plain elementwise sum, so the
    tests do not rest on one BLAS's handling of Inf * 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        want = a @ b
        plain = (a[:, :, None] * b[None, :, :]).sum(axis=1)
    finite = np.isfinite(plain)
    assert np.array_equal(np.isnan(want), np.isnan(plain))
    assert np.array_equal(want[~finite], plain[~finite], equal_nan=True)
    if alpha == 0:  # BLAS: A and B are not read
        return beta * c if beta != 0 else np.zeros_like(want)
    with np.errstate(invalid="ignore"):
        return alpha * want + (beta * c if beta != 0 else 0.0)


def assert_like_dgemm(got, want, tol=1e-12):
    """Same NaNs, same infinities with the same signs, the finite values close."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


def _poisoned(seed=0, m=7, k=9, n=8):
    """A and B with every case: +Inf and -Inf against positive, negative and zero entries (Inf * 0),
    +Inf and -Inf in one row (Inf - Inf where the signs line up), NaN, and a finite zero meeting an
    infinity of B."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    a[0, 2] = np.inf
    b[2, 4] = 0.0  # C[0, 4]: Inf * 0
    a[1, 3] = -np.inf
    a[2, 0], a[2, 5] = np.inf, -np.inf
    b[0, :4], b[5, :4] = 1.5, 2.0  # C[2, :4]: Inf - Inf
    b[0, 4:], b[5, 4:] = 1.0, -1.0  # C[2, 4:]: +Inf
    a[3, 4] = np.nan
    b[6, 1] = -np.inf
    a[4, 6] = 0.0  # C[4, 1]: 0 * -Inf
    b[7, 5] = np.nan
    b[1, 6], b[3, 6] = np.inf, np.inf  # column 6 meets row 1's -Inf at k = 3 too
    return a, b


CASES = [(1.0, 0.0), (-0.5, 0.0), (2.0, 1.5), (0.0, 1.0), (0.0, 0.0)]


def _c(m, n, beta):
    if beta == 0:
        return np.full((m, n), np.nan)  # must not be read
    c = np.random.default_rng(9).standard_normal((m, n))
    c[5, 0] = np.inf  # a finite line meeting an infinite C
    c[0, 1] = -np.inf  # an infinite line meeting an infinite C
    return c


def test_the_inputs_hold_every_case():
    a, b = _poisoned()
    want = _dgemm(a, b)
    assert np.isnan(want).any() and np.isposinf(want).any() and np.isneginf(want).any()
    assert np.isnan(want[0, 4]) and np.isnan(want[2, :4]).all() and np.isposinf(want[2, [4, 7]]).all()
    assert np.isnan(want[4, 1]) and np.isfinite(want[5, [0, 2, 3]]).all()


# ---------------------------------------------------------------------------------------------
# K = 0


@pytest.mark.parametrize("run", [lambda a, b, **kw: ref.emulated_matmul(a, b, 7, **kw),
                                 lambda a, b, **kw: ref.emulated_matmul(a, b, 2, k_chunk=1, **kw),
                                 lambda a, b, **kw: ozaki2.emulated_matmul(a, b, 14, **kw),
                                 lambda a, b, **kw: ozaki2.emulated_matmul(a, b, 9, bound="max", **kw)],
                         ids=["ozaki1", "ozaki1-chunked", "ozaki2", "ozaki2-max"])
def test_k_zero_with_beta_zero_does_not_read_c(run):
    a, b = np.zeros((3, 0)), np.zeros((0, 2))
    nan_c = np.full((3, 2), np.nan)
    assert np.array_equal(run(a, b, alpha=1.0, beta=0.0, c=nan_c), np.zeros((3, 2)))
    assert np.array_equal(run(a, b), np.zeros((3, 2)))
    c = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(run(a, b, alpha=2.0, beta=-1.5, c=c), -1.5 * c)


# ---------------------------------------------------------------------------------------------
# Inf and NaN, the NumPy schemes


NUMPY_RUNS = {
    "ozaki1-3": lambda a, b, alpha, beta, c: ref.emulated_matmul(a, b, 3, alpha, beta, c),
    "ozaki1-7": lambda a, b, alpha, beta, c: ref.emulated_matmul(a, b, 7, alpha, beta, c),
    "ozaki1-7-chunked": lambda a, b, alpha, beta, c: ref.emulated_matmul(a, b, 7, alpha, beta, c, k_chunk=4),
    "ozaki2-14": lambda a, b, alpha, beta, c: ozaki2.emulated_matmul(a, b, 14, alpha, beta, c),
    "ozaki2-8-max": lambda a, b, alpha, beta, c: ozaki2.emulated_matmul(a, b, 8, alpha, beta, c, bound="max"),
    "ozaki2-14-chunked": lambda a, b, alpha, beta, c: ozaki2.emulated_matmul(a, b, 14, alpha, beta, c, k_chunk=4),
}


def _tol(name):
    return 1e-4 if name in ("ozaki1-3", "ozaki2-8-max") else 1e-12  # few slices/moduli: about 20 bits


@pytest.mark.parametrize("name", sorted(NUMPY_RUNS))
@pytest.mark.parametrize("alpha,beta", CASES)
def test_inf_and_nan_give_dgemms_result(name, alpha, beta):
    a, b = _poisoned()
    c = _c(a.shape[0], b.shape[1], beta)
    got = NUMPY_RUNS[name](a, b, alpha, beta, c.copy())
    assert_like_dgemm(got, _dgemm(a, b, alpha, beta, c), _tol(name))


@pytest.mark.parametrize("name", sorted(NUMPY_RUNS))
def test_nonfinite_only_in_a_or_only_in_b(name):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((6, 4))
    a_inf = a.copy()
    a_inf[1, 2] = -np.inf
    b_nan = b.copy()
    b_nan[3, 0] = np.nan
    b_nan[0, 3] = np.inf
    for x, y in ((a_inf, b), (a, b_nan)):
        assert_like_dgemm(NUMPY_RUNS[name](x, y, 1.0, 0.0, None), _dgemm(x, y), _tol(name))


def test_old_rule_would_fail():
    """The check is not vacuous: whole NaN rows and columns (the schemes' old rule) differ from DGEMM."""
    a, b = _poisoned()
    old = ref.emulated_matmul(a, b, 7)
    old[~np.isfinite(a).all(axis=1), :] = np.nan
    old[:, ~np.isfinite(b).all(axis=0)] = np.nan
    with pytest.raises(AssertionError):
        assert_like_dgemm(old, _dgemm(a, b))


def test_finite_entries_keep_the_emulated_values():
    """Only the flagged rows and columns are recomputed; the rest is the scheme's own result."""
    a, b = _poisoned()
    rows, cols = nonfinite.nonfinite_lines(a, b)
    a0, b0 = nonfinite.finite_copies(a, b)
    for run in (lambda x, y: ref.emulated_matmul(x, y, 4), lambda x, y: ozaki2.emulated_matmul(x, y, 6)):
        got, plain = run(a, b), run(a0, b0)
        keep = ~rows[:, None] & ~cols[None, :]
        assert np.array_equal(got[keep], plain[keep])
        assert not np.allclose(plain[keep], (a0 @ b0)[keep], rtol=1e-12)  # few slices: visibly emulated


def test_helpers():
    a, b = _poisoned()
    rows, cols = nonfinite.nonfinite_lines(a, b)
    assert rows.tolist() == [True, True, True, True, False, False, False]
    assert cols.tolist() == [False, True, False, False, False, True, True, False]
    a0, b0 = nonfinite.finite_copies(a, b)
    assert np.isfinite(a0).all() and np.isfinite(b0).all() and np.isfinite(a).sum() == np.isfinite(a0).sum() - 5
    finite = np.ones((2, 2))
    assert nonfinite.finite_copies(finite, finite)[0] is finite  # no copy when nothing to zero
    assert nonfinite.array_module(finite) is np
    out = np.zeros((7, 8))
    assert nonfinite.patch_nonfinite(out, a, b, rows, cols, alpha=0.0) is out and not out.any()  # alpha 0


# ---------------------------------------------------------------------------------------------
# The GPU launchers' host code, with their kernels replaced by the NumPy schemes


class _DeviceArray(np.ndarray):
    """A NumPy array that passes the launchers' "is it on the GPU" test."""

    @property
    def __cuda_array_interface__(self):
        return {}


def _dev(x):
    return np.ascontiguousarray(x).view(_DeviceArray)


@pytest.fixture
def fake_cupy(monkeypatch):
    """NumPy in CuPy's place, its arrays marked as on the GPU: the launchers' host code runs as is."""
    kl.setup(quiet=True)
    fake = types.ModuleType("cupy")
    fake.__dict__.update({name: getattr(np, name) for name in ("float64", "int32", "nan", "isfinite",
                                                                "flatnonzero", "matmul")})
    fake.asarray = lambda x, *args, **kw: np.asarray(x, *args, **kw).view(_DeviceArray)
    fake.ascontiguousarray = lambda x: np.ascontiguousarray(x).view(_DeviceArray)
    fake.empty = lambda *args, **kw: np.empty(*args, **kw).view(_DeviceArray)
    monkeypatch.setitem(sys.modules, "cupy", fake)


def _ozaki1_launcher(monkeypatch, slices, method, limit):
    from kernel_lab.ozaki import gpu

    g = gpu.OzakiGemm(slices, method)
    monkeypatch.setattr(gpu, "max_exact_k", lambda terms: limit)

    def state(m, n, k):
        return {"bad_a": np.zeros(m, np.int32), "bad_b": np.zeros(n, np.int32)}

    def slice_operands(a, b, st):  # as the kernels: flags, and flagged lines read as zeros
        st["bad_a"][:] = ~np.isfinite(a).all(axis=1)
        st["bad_b"][:] = ~np.isfinite(b).all(axis=0)
        st["a0"] = np.where(st["bad_a"][:, None] == 1, 0.0, a)
        st["b0"] = np.where(st["bad_b"][None, :] == 1, 0.0, b)

    def multiply(st, alpha, beta, c):
        c[...] = ref.emulated_matmul(st["a0"], st["b0"], slices, alpha, beta, c if beta != 0 else None)

    monkeypatch.setattr(g, "_state", state)
    monkeypatch.setattr(g, "slice_operands", slice_operands)
    monkeypatch.setattr(g, "multiply", multiply)
    return g


def _ozaki2_launcher(monkeypatch, moduli, bound, limit):
    from kernel_lab.ozaki import gpu_ozaki2

    g = gpu_ozaki2.Ozaki2Gemm(moduli, bound)
    monkeypatch.setattr(gpu_ozaki2, "max_exact_k", lambda terms: limit)

    def state(m, n, k):
        return {"bad_a": np.zeros(m, np.int32), "bad_b": np.zeros(n, np.int32)}

    def prepare(a, b, st):
        st["bad_a"][:] = ~np.isfinite(a).all(axis=1)
        st["bad_b"][:] = ~np.isfinite(b).all(axis=0)
        st["a0"] = np.where(st["bad_a"][:, None] == 1, 0.0, a)
        st["b0"] = np.where(st["bad_b"][None, :] == 1, 0.0, b)

    def reconstruct(st, alpha, beta, c):
        c[...] = ozaki2.emulated_matmul(st["a0"], st["b0"], moduli, alpha, beta, c if beta != 0 else None,
                                        bound=bound)

    monkeypatch.setattr(g, "_state", state)
    monkeypatch.setattr(g, "prepare", prepare)
    monkeypatch.setattr(g, "products", lambda st: None)
    monkeypatch.setattr(g, "reconstruct", reconstruct)
    return g


LAUNCHERS = {
    "OzakiGemm-fused": lambda mp, limit: _ozaki1_launcher(mp, 7, "fused", limit),
    "OzakiGemm-unfused": lambda mp, limit: _ozaki1_launcher(mp, 7, "unfused", limit),
    "OzakiGemm-partial": lambda mp, limit: _ozaki1_launcher(mp, 8, "partial", limit),
    "Ozaki2Gemm-norm": lambda mp, limit: _ozaki2_launcher(mp, 14, "norm", limit),
    "Ozaki2Gemm-max": lambda mp, limit: _ozaki2_launcher(mp, 16, "max", limit),
}


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
@pytest.mark.parametrize("limit", [1000, 4], ids=["one-call", "k-chunks"])
@pytest.mark.parametrize("alpha,beta", CASES)
def test_gpu_launchers_give_dgemms_result(fake_cupy, monkeypatch, name, limit, alpha, beta):
    a, b = _poisoned()
    g = LAUNCHERS[name](monkeypatch, limit)
    c = _c(a.shape[0], b.shape[1], beta)
    got = g(_dev(a), _dev(b), _dev(c.copy()), alpha, beta)
    assert_like_dgemm(np.asarray(got), _dgemm(a, b, alpha, beta, c))
    if limit > a.shape[1]:
        assert g.last_nonfinite == 7  # four rows of A, three columns of B (K chunks: the last chunk's)


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_gpu_launchers_with_k_zero_do_not_read_c(fake_cupy, monkeypatch, name):
    g = LAUNCHERS[name](monkeypatch, 1000)
    a, b = _dev(np.zeros((3, 0))), _dev(np.zeros((0, 2)))
    assert np.array_equal(g(a, b, _dev(np.full((3, 2), np.nan)), 1.0, 0.0), np.zeros((3, 2)))
    c = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(g(a, b, _dev(c.copy()), 1.0, 2.0), 2.0 * c)
