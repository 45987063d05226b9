"""06.1's numbered steps (``kernel_lab.tensor_cores.async_gemm``): the learner's 16-byte ``cp.async``
tile copies and swizzles, checked in the simulator by ``check_issue_slice`` (a harness block that
poisons shared memory, runs the copies, reads the stage back), with the classic mistakes named;
the layouts' position functions against each other. The GPU kernel around them is compiled for
sm_90 by scripts/module06_offline_compile.py and measured by notebook 06.1."""

import sys
from pathlib import Path

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the copy harness is checked in the simulator here; "
                                "on a GPU notebook 06.1 runs it")

kl.setup(quiet=True)

from numba import cuda  # noqa: E402

from kernel_lab.check import CheckFailed  # noqa: E402
from kernel_lab.checks import tensor_cores as checks  # noqa: E402
from kernel_lab.tensor_cores import async_gemm as ag  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from module06_solutions import make_conv_issue, make_issue_slice  # noqa: E402  (the notebooks' solutions)


@cuda.jit(device=True)
def a_swizzled(r, c):
    return 4 * r + (c ^ ((r >> 1) & 3))


@cuda.jit(device=True)
def b_swizzled(r, c):
    return 128 * (r >> 3) + 64 * (c >> 3) + 8 * (r & 7) + ((c & 7) ^ (r & 7))


@cuda.jit(device=True)
def a_plain(r, c):
    return 4 * r + c


@cuda.jit(device=True)
def b_plain(r, c):
    return 16 * r + c


@cuda.jit(device=True)
def a_low_bits(r, c):
    return 4 * r + (c ^ (r & 3))


def test_both_layouts_pass(capsys):
    checks.check_issue_slice(make_issue_slice, a_plain, b_plain, layout="plain")
    checks.check_issue_slice(make_issue_slice, a_swizzled, b_swizzled, layout="suggested")
    out = capsys.readouterr().out
    assert "correct for both tiles (plain layout" in out and "correct for both tiles (suggested layout" in out


@pytest.mark.parametrize("a_pos, b_pos, words", [(a_plain, b_swizzled, "plain, row-major position"),
                                                 (a_low_bits, b_swizzled, "bits 1-2"),
                                                 (a_swizzled, b_plain, "plain, row-major position")])
def test_wrong_swizzles_are_named(a_pos, b_pos, words):
    with pytest.raises(CheckFailed, match=words):
        checks.check_issue_slice(make_issue_slice, a_pos, b_pos, layout="suggested")


def test_a_missing_zero_fill_is_named():
    with pytest.raises(CheckFailed, match="must hold zeros"):
        checks.check_issue_slice(lambda a, b: make_issue_slice(a, b, zero_fill=False), a_swizzled, b_swizzled)


def test_b_over_a_is_named():
    with pytest.raises(CheckFailed, match="over A's"):
        checks.check_issue_slice(lambda a, b: make_issue_slice(a, b, b_offset=0), a_plain, b_plain, layout="plain")


def test_the_positions_are_permutations_and_the_reference_stage_zero_fills():
    for a_pos, b_pos in ag.POSITIONS.values():
        assert sorted(a_pos(r, c) for r in range(ag.TM) for c in range(ag.A_ROW_CHUNKS)) == list(range(ag.A_CHUNKS))
        assert sorted(b_pos(r, c) for r in range(ag.TK) for c in range(ag.B_ROW_CHUNKS)) == list(range(ag.B_CHUNKS))
    a = np.ones((3, 8), np.float16)
    b = np.ones((8, 8), np.float16)
    stage = ag.reference_stage(a, b, 0, 0, 0, "suggested")
    assert stage[:ag.TM * ag.TK].sum() == 24 and stage[ag.TM * ag.TK:].sum() == 64


def test_window_is_the_slice_it_names():
    """``mma_ptx.window`` (the kernel's stage views, a slice without clamping) in the simulator: a
    block writes through windows at moving offsets of one shared array, read back whole."""
    from kernel_lab.mma_ptx import window

    @cuda.jit
    def through_windows(out):
        buf = cuda.shared.array(shape=(24,), dtype=np.float32)
        t = cuda.threadIdx.x
        for stage in range(3):
            view = window(buf, 8 * stage, 8)
            view[t] = 100 * stage + t
        cuda.syncthreads()
        for stage in range(3):
            out[8 * stage + t] = buf[8 * stage + t]

    out = np.full(24, np.nan, np.float32)
    through_windows[1, 8](out)
    assert out.tolist() == [100 * s + t for s in range(3) for t in range(8)]


def test_the_conv_copies_pass(capsys):
    checks.check_conv_issue_slice(make_conv_issue, a_swizzled, b_swizzled)
    assert "correct for 2 geometries" in capsys.readouterr().out


@pytest.mark.parametrize("mutant, words", [
    (dict(minus_p=False), "filter tap"), (dict(pad_test=False), "padding"), (dict(order="crs"), "channels")])
def test_conv_mistakes_are_named(mutant, words):
    with pytest.raises(CheckFailed, match=words):
        checks.check_conv_issue_slice(lambda g, a, b: make_conv_issue(g, a, b, **mutant), a_swizzled, b_swizzled)


def test_the_nhwc_reference_is_the_convolution():
    from kernel_lab.tensor_cores import references as ref
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 6, 8))
    w = rng.standard_normal((4, 8, 3, 2))
    out = ref.im2col_nhwc(x, 3, 2, 1) @ ref.filters_rsc(w)
    want = ref.conv2d(x.transpose(0, 3, 1, 2), w, 1)
    assert np.allclose(ref.conv_as_gemm_output(out, 2, 4, 5, 7), want)
