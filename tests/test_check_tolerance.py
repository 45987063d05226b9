"""The checker never fails a correct kernel, and still fails wrong ones (issue 16, finding 1).

A float32 result produced by cancellation (``a*x`` close to ``-y`` in SAXPY) carries the rounding
error of its *terms*, not of its own tiny value. These tests hold the tolerance to that: correct
float32 computations, emulated bit for bit with NumPy in the evaluation orders a GPU may use (with
and without a fused multiply-add, sequential and tree sums), pass for hundreds of thousands of
random draws at every size, while results off by a few units of roundoff *of the terms* fail.
"""

import numpy as np
import pytest

import kernel_lab as kl
from kernel_lab.check import term_magnitude, tolerance
from numba import cuda

F32 = np.float32


@cuda.jit
def _saxpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def _saxpy_inputs(n, rng):  # module 00's inputs
    return F32(rng.uniform(0.5, 2.0)), rng.standard_normal(n, dtype=F32), rng.standard_normal(n, dtype=F32)


def _saxpy_reference(a, x, y):
    return a * x + y


def _launch_saxpy(out, a, x, y):
    _saxpy[kl.blocks_for(out.size, 32), 32](a, x, y, out)


def test_saxpy_of_one_element_that_cancels_passes(capsys):
    """The seed from the issue: expected -0.004285728, got -0.004285753 from a correct kernel."""
    kl.check_kernel("saxpy", _launch_saxpy, _saxpy_reference, _saxpy_inputs, sizes=[("1", 1)],
                    seed=1293729513)
    assert capsys.readouterr().out == "saxpy: correct for all 1 sizes (1)\n"


def test_saxpy_passes_for_many_seeds_at_small_sizes(capsys):
    """The course's SAXPY kernel, run in the simulator (or on the GPU) for 300 seeds at sizes 1-3."""
    for seed in range(300):
        kl.check_kernel("saxpy", _launch_saxpy, _saxpy_reference, _saxpy_inputs,
                        sizes=[("1", 1), ("3", 3)], seed=seed, rerun=False)
    assert capsys.readouterr().out.count("correct") == 300


# ---- properties over many draws, emulated with NumPy (each element an independent problem) -----

N_DRAWS = 200_000


def _saxpy_draws(rng, n):
    a = rng.uniform(0.5, 2.0, n).astype(F32)
    x = rng.standard_normal(n, dtype=F32)
    # Half of the draws cancel on purpose: y within a few ulps of -a*x.
    y = rng.standard_normal(n, dtype=F32)
    close = rng.random(n) < 0.5
    y[close] = (-(a[close].astype(np.float64) * x[close]) * (1 + rng.uniform(-1e-3, 1e-3, close.sum()))).astype(F32)
    return a, x, y


@pytest.mark.parametrize("fma", [False, True], ids=["mul-then-add", "fused multiply-add"])
def test_property_correct_saxpy_always_passes(fma, capsys):
    rng = np.random.default_rng(16)
    a, x, y = _saxpy_draws(rng, N_DRAWS)
    if fma:  # one rounding of the exact a*x + y
        got = (a.astype(np.float64) * x + y).astype(F32)
    else:  # two roundings, as the simulator and a GPU without contraction do
        got = (a * x) + y
    ref = a.astype(np.float64) * x + y.astype(np.float64)
    mag = term_magnitude(lambda a, x, y: a * x + y, (a.astype(np.float64), x.astype(np.float64),
                                                     y.astype(np.float64)), ref)
    kl.check_array("saxpy draws", got, ref, magnitude=mag)
    assert "correct" in capsys.readouterr().out


def test_property_saxpy_off_by_a_few_term_roundoffs_fails():
    rng = np.random.default_rng(17)
    a, x, y = _saxpy_draws(rng, 10_000)
    ref = a.astype(np.float64) * x + y.astype(np.float64)
    mag = np.abs(a.astype(np.float64) * x) + np.abs(y)
    bad = (ref + 3 * tolerance("float32") * mag * np.where(rng.random(ref.size) < 0.5, -1, 1)).astype(F32)
    with pytest.raises(kl.CheckFailed, match="10000 of 10000 elements are wrong"):
        kl.check_array("saxpy draws", bad, ref, magnitude=mag)


def _float32_sum(terms, order):
    """Sum the rows of ``terms`` in float32, sequentially or as a pairwise tree (a block reduction)."""
    if order == "sequential":
        acc = np.zeros(terms.shape[0], dtype=F32)
        for j in range(terms.shape[1]):
            acc = acc + terms[:, j]
        return acc
    t = terms
    while t.shape[1] > 1:
        if t.shape[1] % 2:
            t = np.concatenate([t, np.zeros((t.shape[0], 1), dtype=F32)], axis=1)
        t = t[:, 0::2] + t[:, 1::2]
    return t[:, 0]


@pytest.mark.parametrize("k", [1, 2, 7, 33, 255, 1000])
@pytest.mark.parametrize("order", ["sequential", "tree"])
def test_property_float32_sums_that_cancel_pass(k, order, capsys):
    """Rows of random signs sum to nearly nothing; the sum is still right to the terms' roundoff."""
    rng = np.random.default_rng(k)
    rows = max(2_000, 200_000 // k)
    terms = rng.standard_normal((rows, k), dtype=F32)
    terms[:, -1] = (-terms[:, :-1].astype(np.float64).sum(axis=1)).astype(F32) if k > 1 else terms[:, -1]
    got = _float32_sum(terms, order)
    ref = terms.astype(np.float64).sum(axis=1)
    mag = term_magnitude(lambda t: t.sum(axis=1), (terms.astype(np.float64),), ref)
    kl.check_array(f"sum of {k}", got, ref, k=k, magnitude=mag)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("k", [1, 16, 300])
def test_property_dot_products_with_fma_pass_and_a_dropped_term_fails(k, capsys):
    """A float32 dot product accumulated with FMAs passes; one that drops its last term fails."""
    rng = np.random.default_rng(k + 1)
    rows = 5_000
    a = rng.standard_normal((rows, k), dtype=F32)
    b = rng.standard_normal((rows, k), dtype=F32)
    acc = np.zeros(rows, dtype=F32)
    for j in range(k):
        acc = (acc.astype(np.float64) + a[:, j].astype(np.float64) * b[:, j]).astype(F32)
    ref = (a.astype(np.float64) * b).sum(axis=1)
    reference = lambda a, b: (a * b).sum(axis=1)  # noqa: E731
    mag = term_magnitude(reference, (a.astype(np.float64), b.astype(np.float64)), ref)
    kl.check_array(f"dot of {k}", acc, ref, k=k, magnitude=mag)
    assert "correct" in capsys.readouterr().out
    dropped = (ref - a[:, -1].astype(np.float64) * b[:, -1]).astype(F32)
    with pytest.raises(kl.CheckFailed, match="elements are wrong"):
        kl.check_array(f"dot of {k}", dropped, ref, k=k, magnitude=mag)


# ---- check_kernel end to end: thousands of seeds at every adversarial size ---------------------

def _host_saxpy_launcher(fma):
    """A 'kernel' that computes SAXPY in float32 on the host and writes it into the device output:
    the whole check_kernel path (poison, guard, rerun, compare) at the speed of NumPy."""
    def launch(out, a, x, y):
        xs, ys = x.copy_to_host(), y.copy_to_host()
        res = (np.float64(a) * xs + ys).astype(F32) if fma else (F32(a) * xs) + ys
        out.copy_to_device(res)
    return launch


@pytest.mark.parametrize("fma", [False, True], ids=["mul-then-add", "fused multiply-add"])
def test_check_kernel_never_fails_correct_saxpy_over_thousands_of_seeds(fma, capsys):
    sizes = [("1", 1), ("2", 2), ("block-1", 31), ("block+1", 33), ("3 blocks+7", 103)]
    launch = _host_saxpy_launcher(fma)
    for seed in range(3_000):
        kl.check_kernel("saxpy", launch, _saxpy_reference, _saxpy_inputs, sizes=sizes, seed=seed, rerun=False)
    assert capsys.readouterr().out.count("correct for all 5 sizes") == 3_000


def test_check_kernel_still_fails_wrong_saxpy_at_size_one():
    """Wrong kernels keep failing at size 1: y forgotten, a forgotten, the sign of y flipped."""
    def launch_bad(kind):
        def launch(out, a, x, y):
            xs, ys = x.copy_to_host(), y.copy_to_host()
            res = {"no y": F32(a) * xs, "no a": xs + ys, "minus y": F32(a) * xs - ys}[kind]
            out.copy_to_device(res.astype(F32))
        return launch

    for kind in ["no y", "no a", "minus y"]:
        for seed in range(200):
            with pytest.raises(kl.CheckFailed):
                kl.check_kernel("saxpy", launch_bad(kind), _saxpy_reference, _saxpy_inputs, sizes=[("1", 1)],
                                seed=seed, rerun=False)


def test_magnitude_argument_overrides_the_absolute_value_rule(capsys):
    """A reference that subtracts: |x - y| evaluated on |x|, |y| is not the terms' size; say it."""
    x = np.array([1.0000001], dtype=F32)
    y = np.array([1.0], dtype=F32)
    got = x - y  # exact in float32
    ref = x.astype(np.float64) - y.astype(np.float64)
    mag = term_magnitude(lambda x, y: x - y, (x.astype(np.float64), y.astype(np.float64)), ref,
                         magnitude=lambda x, y: np.abs(x) + np.abs(y))
    assert mag[0] == pytest.approx(2.0000001)
    kl.check_array("difference", got, ref, magnitude=mag)
    assert "correct" in capsys.readouterr().out


def test_magnitude_must_be_finite_and_of_the_right_shape():
    with pytest.raises(kl.validate.KernelLabArgumentError, match="broadcastable"):
        kl.check_array("x", np.zeros(3, F32), np.ones(3), magnitude=np.ones(4))
    with pytest.raises(kl.validate.KernelLabArgumentError, match="NaN or infinity"):
        kl.check_array("x", np.zeros(3, F32), np.ones(3), magnitude=np.array([1, np.inf, 1]))
