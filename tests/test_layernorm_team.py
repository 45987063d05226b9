"""The package's LayerNorm + GELU kernel (a team of threads sized to the row, two-pass statistics)."""

import functools

import numpy as np
import pytest

import kernel_lab as kl  # noqa: F401  (chooses GPU or simulator first)
from kernel_lab.checks import fusion as checks
from kernel_lab.fusion import layernorm as ln
from kernel_lab.check import CheckFailed
from kernel_lab.validate import KernelLabArgumentError
from numba import cuda, float32, uint64


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_package_kernel_passes_the_check_at_every_team_size(dtype):
    """Shapes from 1 to ROW_LIMIT values: sub-warp teams (several rows per warp, a row count that
    leaves a warp part-empty), one warp, and blocks."""
    checks.check_layernorm_gelu(ln.launch_layernorm_gelu, dtype=dtype, max_n=ln.ROW_LIMIT)
    sizes = sorted({ln.team_threads(n) for n in (1, 33, 36, 127, ln.ROW_LIMIT)})
    assert sizes[0] == 8 and sizes[-1] > 32, sizes


def test_team_threads_leave_about_values_per_thread():
    v = ln.VALUES_PER_THREAD
    assert ln.team_threads(1) == 8
    assert ln.team_threads(8 * v) == 8 and ln.team_threads(8 * v + 1) == 16
    assert ln.team_threads(1024 * v) == 1024


def test_a_row_longer_than_the_limit_is_refused_with_its_length():
    n = ln.ROW_LIMIT + 4
    x = cuda.to_device(np.zeros((1, n), np.float32))
    g = cuda.to_device(np.ones(n, np.float32))
    y = cuda.device_array((1, n), np.float32)
    m, r = cuda.device_array(1, np.float32), cuda.device_array(1, np.float32)
    with pytest.raises(KernelLabArgumentError, match=f"rows of {n}"):
        ln.launch_layernorm_gelu(y, m, r, x, g, g)



def test_the_package_kernel_passes_at_the_gpus_team_sizes():
    """16 values a thread, as on a GPU: teams of 8 lanes with two groups each, blocks of 64 threads."""
    checks.check_layernorm_gelu(lambda *a: ln.launch_team_per_row(*a, values=ln.GPU.team_values,
                                                                  limit=ln.GPU.row_limit), dtype="float16", max_n=1000)


# --- the checks of 03.3's exercises 3 to 6 fail on the classic mistakes, and name them ---------------


def _team_sum_factory(mistake):
    """make_team_sum with one mistake: "offsets" (the butterfly crosses teams), "no_meeting" (each
    warp's own sum), "from_own" (the warps' sums added to this warp's)."""
    @functools.cache
    def make_team_sum(TEAM):
        OFFSETS = tuple(o for o in (16, 8, 4, 2, 1) if o < TEAM or mistake == "offsets")
        WARPS = TEAM // 32

        @cuda.jit(device=True, inline="always")
        def team_sum(s, part, k, t):
            for off in OFFSETS:
                s += cuda.shfl_xor_sync(0xFFFFFFFF, s, off)
            if TEAM > 32 and mistake != "no_meeting":
                if t & uint64(31) == uint64(0):
                    part[k, t >> uint64(5)] = s
                cuda.syncthreads()
                total = s if mistake == "from_own" else float32(0)
                for w in range(WARPS):
                    total += part[k, w]
                s = total
            return s
        return team_sum
    return make_team_sum


@pytest.mark.parametrize("mistake, said", [("offsets", "the butterfly crossed into the next team"),
                                           ("no_meeting", "each warp's own sum, not the team's"),
                                           ("from_own", "started from this warp's own sum")])
def test_the_team_sum_check_names_the_mistake(mistake, said):
    with pytest.raises(CheckFailed, match=said):
        checks.check_team_sum(_team_sum_factory(mistake), seed=3)


def test_the_team_sum_check_passes_the_package():
    checks.check_team_sum(ln.make_team_sum)


def _gelu(form):
    @cuda.jit(device=True, inline="always")
    def gelu(v):
        h = float32(0.5) * v
        if form == "no cubic":
            return h * ln.tanh_approx(float32(ln.GELU_C) * v) + h
        return h * ln.tanh_approx(v * (float32(ln.GELU_C) + float32(ln.GELU_C * 0.044715) * v * v))  # no + h
    return gelu


def test_the_gelu_fast_check_passes_both_package_gelus_and_names_a_mistake():
    checks.check_gelu_fast(ln.gelu_fast)
    checks.check_gelu_fast(ln.gelu)
    with pytest.raises(CheckFailed, match="the cubic term is missing"):
        checks.check_gelu_fast(_gelu("no cubic"), seed=1)
    with pytest.raises(CheckFailed, match=r"the \+ h is missing"):
        checks.check_gelu_fast(_gelu("no + h"), seed=1)


def test_the_team_threads_check_passes_the_rule_and_names_wrong_teams():
    checks.check_team_threads(ln.team_threads, values=ln.GPU.team_values, limit=ln.GPU.row_limit)
    with pytest.raises(CheckFailed, match="not a power of two"):
        checks.check_team_threads(lambda n, v: min(1024, max(8, -(-n // v))), values=16, limit=16384)
    with pytest.raises(CheckFailed, match="more threads than the row needs"):
        checks.check_team_threads(lambda n, v: min(1024, max(8, 1 << (-(-n // v)).bit_length())), values=16,
                                  limit=16384)


def _team_kernel(n, team, width):
    return ln.make_team_kernel(team, ln.values_per_lane(n, width * team), width, ln.gelu, ln.make_team_row(team),
                               ln.make_team_sum(team))


def test_groups_of_four_on_rows_that_are_not_a_multiple_of_4_are_named():
    """The package's kernel with WIDTH = 4 on every row: the tail of a row of 33 is never added."""
    def launch(y, mean, rstd, x, gamma, beta):
        team = ln.team_threads(x.shape[1])
        ln.team_launch(_team_kernel(x.shape[1], team, 4), team, y, mean, rstd, x, gamma, beta)
    with pytest.raises(CheckFailed, match="left out of the sums: a row whose length is not a multiple of 4"):
        checks.check_layernorm_gelu(launch, shapes=[("odd length", (5, 33))], seed=2)


def test_rows_that_no_team_took_are_named():
    """Teams of 16 lanes (8 rows a block of 128) launched one block short: the last rows are never written."""
    def launch(y, mean, rstd, x, gamma, beta):
        _team_kernel(x.shape[1], 16, 1)[x.shape[0] // 8, 128](x, gamma, beta, y, mean, rstd, float32(ln.EPS))
    with pytest.raises(CheckFailed, match="were never written .* no team took them"):
        checks.check_layernorm_gelu(launch, shapes=[("odd length", (13, 33))], seed=2)
