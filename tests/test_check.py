"""The checker must pass right answers and fail wrong ones with a message that names the mistake."""

import numpy as np
import pytest

import kernel_lab as kl
from kernel_lab.check import (UNIT_ROUNDOFF, is_poison, poisoned_host, tolerance)
from kernel_lab.validate import KernelLabArgumentError
from numba import cuda

FLOAT_DTYPES = [np.float16, np.float32, np.float64]
INT_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64]


# ---- tolerances -------------------------------------------------------------------------------

def test_tolerance_grows_with_reduction_length_and_unit_roundoff():
    assert tolerance("float32", 1) == pytest.approx(9 * 2.0**-24)
    assert tolerance("float32", 10_000) > tolerance("float32", 100) > tolerance("float32", 1)
    assert tolerance("bfloat16") > tolerance("float16") > tolerance("float32") > tolerance("float64")
    assert tolerance("int8") == 0.0 and tolerance(np.int32) == 0.0


@pytest.mark.parametrize("bad", ["float33", "tf64", object()])
def test_tolerance_rejects_unknown_formats(bad):
    with pytest.raises(KernelLabArgumentError, match="unknown number format"):
        tolerance(bad)


def test_tolerance_rejects_bad_reduction_length():
    with pytest.raises(KernelLabArgumentError, match="reduction length"):
        tolerance("float32", 0)


@pytest.mark.parametrize("k", [1, 7, 1000, 100_000])
def test_tolerance_accepts_honest_float32_sums_and_rejects_perturbed_ones(k, capsys):
    """Property: a float32 sum of k random terms passes; the same result off by 50 tolerances fails."""
    rng = np.random.default_rng(k)
    terms = rng.standard_normal((64, k)).astype(np.float32)
    got = np.zeros(64, dtype=np.float32)
    for j in range(0, k, max(1, k // 64)):  # a sequential-ish float32 accumulation, like a naive kernel
        got += terms[:, j: j + max(1, k // 64)].sum(axis=1, dtype=np.float32)
    ref = terms.astype(np.float64).sum(axis=1)
    kl.check_array("sum", got, ref, k=k)
    bad = got.copy()
    bad[3] += np.float32(50 * tolerance("float32", k) * (abs(ref[3]) + np.sqrt(np.mean(ref**2))))
    with pytest.raises(kl.CheckFailed, match="1 of 64 elements are wrong"):
        kl.check_array("sum", bad, ref, k=k)


# ---- poison -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
def test_poison_is_recognised_and_random_values_are_not(dtype):
    p = poisoned_host(100, dtype)
    assert is_poison(p).all()
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "f":
        values = rng.standard_normal(10_000).astype(dtype)
        assert not is_poison(values).any()
        assert not is_poison(np.array([np.nan, np.inf, -np.inf], dtype=dtype)).any()  # computed NaNs differ
    else:
        assert not is_poison(np.arange(50, dtype=dtype)).any()


def test_poison_of_bfloat16():
    from ml_dtypes import bfloat16

    p = poisoned_host(8, bfloat16)
    assert is_poison(p).all()
    assert not is_poison(np.array([1.0, np.nan], dtype=bfloat16)).any()


# ---- check_array: each mistake gets its message -------------------------------------------------

def test_check_array_passes_and_prints_one_line(capsys):
    ref = np.linspace(-1, 1, 100)
    kl.check_array("thing", ref.astype(np.float32), ref)
    assert capsys.readouterr().out == "thing: correct\n"


def test_check_array_counts_and_locates_wrong_elements():
    ref = np.arange(1.0, 101.0)
    got = ref.astype(np.float32)
    got[[10, 20]] = -1
    with pytest.raises(kl.CheckFailed) as info:
        kl.check_array("thing", got, ref)
    msg = str(info.value)
    assert "2 of 100 elements are wrong" in msg
    assert "[10]: 11, -1" in msg and "[20]: 21, -1" in msg


def test_check_array_reports_unwritten_tail_as_grid_too_small():
    ref = np.arange(1.0, 1001.0)
    got = ref.astype(np.float32)
    got[-24:] = poisoned_host(24, np.float32)
    with pytest.raises(kl.CheckFailed, match="(?s)24 of them never written.*grid is too small"):
        kl.check_array("tail", got, ref)


def test_check_array_says_exercise_not_done_when_nothing_written():
    got = poisoned_host(50, np.float32)
    with pytest.raises(kl.CheckFailed, match="wrote none of the output.*not done yet"):
        kl.check_array("stub", got, np.ones(50))


def test_check_array_says_not_done_for_none():
    with pytest.raises(kl.CheckFailed, match="not done yet"):
        kl.check_array("stub", None, np.ones(3))


def test_check_array_recognises_a_transpose():
    ref = np.arange(36.0).reshape(6, 6)
    with pytest.raises(kl.CheckFailed, match="transpose of the reference"):
        kl.check_array("transpose", ref.T.astype(np.float32), ref)


def test_check_array_recognises_column_major_order():
    ref = np.arange(1.0, 13.0).reshape(3, 4)
    got = ref.T.ravel().reshape(3, 4).astype(np.float32)  # element (r, c) stored at c * rows + r
    with pytest.raises(kl.CheckFailed, match="column-major"):
        kl.check_array("layout", got, ref)


def test_check_array_recognises_a_constant_factor():
    ref = np.random.default_rng(1).standard_normal(500)
    with pytest.raises(kl.CheckFailed, match=r"same factor \(2\)"):
        kl.check_array("scale", (2 * ref).astype(np.float32), ref)


def test_check_array_reports_computed_nan():
    ref = np.ones(10)
    got = np.ones(10, dtype=np.float32)
    got[4] = np.nan
    with pytest.raises(kl.CheckFailed, match=r"computed 1 NaN.*first at \[4\]"):
        kl.check_array("nan", got, ref)


def test_check_array_is_exact_for_integers():
    ref = np.arange(-50, 50)
    got = ref.astype(np.int8)
    kl.check_array("ints", got, ref)
    got[7] += 1
    with pytest.raises(kl.CheckFailed, match="must match exactly"):
        kl.check_array("ints", got, ref)
    kl.check_array("ints within 1", got, ref, atol=1)  # quantization may round ties either way


def test_check_array_shape_mismatch_is_explained():
    with pytest.raises(kl.CheckFailed, match="shape \\(4, 3\\) but the reference has \\(3, 4\\).*swapped"):
        kl.check_array("shape", np.zeros((4, 3), np.float32), np.ones((3, 4)))


def test_check_array_rejects_bad_arguments():
    with pytest.raises(KernelLabArgumentError, match="name must be a string"):
        kl.check_array(3, np.ones(3), np.ones(3))
    with pytest.raises(KernelLabArgumentError, match="NaN or infinity"):
        kl.check_array("x", np.ones(3), np.array([1.0, np.nan, 2.0]))
    with pytest.raises(KernelLabArgumentError, match="NumPy, Numba device or CuPy"):
        kl.check_array("x", "not an array", np.ones(3))


def test_check_array_accepts_device_arrays(capsys):
    ref = np.arange(10.0)
    kl.check_array("device", cuda.to_device(ref.astype(np.float32)), ref)
    assert "device: correct" in capsys.readouterr().out


# ---- check_kernel, with real (tiny) kernels ---------------------------------------------------

@cuda.jit
def _add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@cuda.jit
def _add_one_no_bounds_check(x, out):
    i = cuda.grid(1)
    out[i] = x[i % x.size] + 1


def _inputs(n, rng):
    return (rng.standard_normal(n).astype(np.float32),)


def _ref(x):
    return x + 1


SIZES = kl.adversarial_sizes(block=32, large=200)


def test_check_kernel_passes_a_correct_kernel(capsys):
    kl.check_kernel("add one", lambda out, x: _add_one[kl.blocks_for(out.size, 32), 32](x, out),
                    _ref, _inputs, sizes=SIZES)
    assert capsys.readouterr().out == ("add one: correct for all 5 sizes "
                                       "(1, block-1, block+1, 3 blocks+7, large)\n")


def test_check_kernel_catches_grid_rounded_down():
    with pytest.raises(kl.CheckFailed) as info:
        kl.check_kernel("add one", lambda out, x: _add_one[out.size // 32, 32](x, out), _ref, _inputs, sizes=SIZES)
    msg = str(info.value)
    assert "grid is too small" in msg and "sizes that fail: 1, block-1, block+1, 3 blocks+7, large" in msg


def test_check_kernel_catches_a_stub():
    with pytest.raises(kl.CheckFailed, match="not done yet"):
        kl.check_kernel("stub", lambda out, x: None, _ref, _inputs, sizes=SIZES)


def test_check_kernel_turns_not_implemented_into_not_done():
    def launch(out, x):
        raise NotImplementedError("write launch_add_one")

    with pytest.raises(kl.CheckFailed, match="exercise is not done yet \\(write launch_add_one\\)"):
        kl.check_kernel("stub", launch, _ref, _inputs, sizes=SIZES)


def test_check_kernel_catches_a_missing_bounds_check():
    launch = lambda out, x: _add_one_no_bounds_check[kl.blocks_for(out.size, 32), 32](x, out)  # noqa: E731
    if kl.on_simulator():
        # The simulator bounds-checks every access and stops the kernel at the first one past the end.
        with pytest.raises(Exception, match="(?i)bounds|index"):
            kl.check_kernel("no bounds check", launch, _ref, _inputs, sizes=SIZES)
    else:
        with pytest.raises(kl.CheckFailed, match="past the end of the output.*bounds check"):
            kl.check_kernel("no bounds check", launch, _ref, _inputs, sizes=SIZES)


def test_check_kernel_rejects_bad_arguments():
    with pytest.raises(KernelLabArgumentError, match="launch must be a function"):
        kl.check_kernel("x", 5, _ref, _inputs, sizes=SIZES)
    with pytest.raises(KernelLabArgumentError, match="sizes must be a non-empty list"):
        kl.check_kernel("x", lambda out, x: None, _ref, _inputs, sizes=[])


def test_check_kernel_is_reproducible_with_a_seed():
    def launch_wrong(out, x):
        _add_one[kl.blocks_for(out.size, 32), 32](x, out)
        out[:1] = np.float32(123)  # one wrong element, from the host

    msgs = []
    for _ in range(2):
        with pytest.raises(kl.CheckFailed) as info:
            kl.check_kernel("seeded", launch_wrong, _ref, _inputs, sizes=[("large", 100)], seed=1234)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1] and "seed=1234" in msgs[0]


def test_check_kernel_reports_results_that_change_between_runs_as_a_race():
    state = {"run": 0}

    def launch_flaky(out, x):  # right on the first run, one element off on the second: a moving error
        _add_one[kl.blocks_for(out.size, 32), 32](x, out)
        state["run"] += 1
        if state["run"] % 2 == 0:
            host = out.copy_to_host()
            host.flat[-1] += 1e-3
            out.copy_to_device(host)

    with pytest.raises(kl.CheckFailed, match="(?s)two runs on the same inputs gave different results.*race"):
        kl.check_kernel("flaky", launch_flaky, _ref, _inputs, sizes=[("large", 100)])


def test_check_kernel_adds_an_exercise_specific_hint():
    def hint(got, expected):
        return "each thread did one element only: loop with a stride of cuda.gridsize(1)"

    with pytest.raises(kl.CheckFailed, match="Hint: each thread did one element only"):
        kl.check_kernel("hinted", lambda out, x: _add_one[1, 32](x, out), _ref, _inputs,
                        sizes=[("large", 100)], extra_hint=hint)


def test_integer_results_equal_to_the_poison_are_not_unwritten(capsys):
    # int8's poison is 90 (0x5A); a kernel that rightly writes 90 must pass, one that skips an
    # element whose right value is not 90 must still be caught as "never written".
    from kernel_lab.check import poisoned_host

    want = np.array([90, 1, -5, 90], dtype=np.int64)
    kl.check_array("quantized", np.array([90, 1, -5, 90], dtype=np.int8), want, fmt="int8")
    assert "correct" in capsys.readouterr().out
    got = poisoned_host(4, np.int8)
    got[:3] = [90, 1, -5]
    want[3] = 7
    with pytest.raises(kl.CheckFailed, match="1 of them never written"):
        kl.check_array("quantized", got, want, fmt="int8")


def test_the_guard_after_an_output_is_capped():
    # A 1D output's "row" is the whole array: uncapped, a 2^24-element check took a 4 GiB guard.
    from kernel_lab.check import GUARD_MAX, _guard_size

    assert _guard_size((1 << 24,)) == GUARD_MAX
    assert _guard_size((3000,)) == 64 * 3000  # the simulator's sizes keep their guard
    assert _guard_size((5,)) == 4096
    assert _guard_size((100, 8191)) == 64 * 8191
