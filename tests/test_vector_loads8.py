"""``load8``/``store8``: eight float16 values a 16-byte access (03.3's exercise 7), and the check of
which rows that exercise's kernel takes (``check_x8_team``)."""

import numpy as np
import pytest

import kernel_lab as kl  # noqa: F401  (chooses GPU or simulator first)
from kernel_lab.check import CheckFailed
from kernel_lab.checks import fusion as checks
from kernel_lab.environment import on_simulator
from kernel_lab.vector_loads import MisalignedVectorAccess, load8, store8
from numba import cuda, float32


@cuda.jit
def _scaled_copy8(x, y):
    # each thread moves one group of eight halves, through float32 (doubled on the way)
    row, g = cuda.blockIdx.x, cuda.threadIdx.x
    h0, h1, h2, h3, h4, h5, h6, h7 = load8(x, (row, 8 * g))
    store8(y, (row, 8 * g), float32(2) * float32(h0), float32(2) * float32(h1), float32(2) * float32(h2),
           float32(2) * float32(h3), float32(2) * float32(h4), float32(2) * float32(h5), float32(2) * float32(h6),
           float32(2) * float32(h7))


@cuda.jit
def _copy8_at(x, y, col):
    h0, h1, h2, h3, h4, h5, h6, h7 = load8(x, (0, col))
    store8(y, (0, col), h0, h1, h2, h3, h4, h5, h6, h7)


def test_eight_halves_in_order_and_converted_to_float16():
    x = (np.random.default_rng(0).standard_normal((3, 32)) * 100).astype(np.float16)
    y = cuda.device_array_like(x)
    _scaled_copy8[3, 4](cuda.to_device(x), y)
    np.testing.assert_array_equal(y.copy_to_host(), (2 * x.astype(np.float32)).astype(np.float16))


@pytest.mark.skipif(not on_simulator(), reason="the simulator's load8 names a broken alignment; a GPU stops")
@pytest.mark.parametrize("col, said", [(4, "multiple of 8"), (16, "past the end")])
def test_a_column_that_is_not_a_multiple_of_8_or_past_the_row_is_named(col, said):
    x = cuda.to_device(np.zeros((1, 16), np.float16))
    with pytest.raises(MisalignedVectorAccess, match=said):
        _copy8_at[1, 1](x, cuda.device_array_like(x), col)


@pytest.mark.skipif(not on_simulator(), reason="a GPU refuses a float32 array when the kernel compiles")
def test_a_float32_array_is_refused():
    x = cuda.to_device(np.zeros((1, 16), np.float32))
    with pytest.raises(TypeError, match="float16"):
        _copy8_at[1, 1](x, cuda.device_array_like(x), 0)


def _x8_team(n, values, min_team):
    team = n // values
    return team if n % values == 0 and team % 32 == 0 and min_team <= team <= 1024 else 0


@pytest.mark.parametrize("mistake, said", [
    (lambda n, v, m: n // v if n // v % 32 == 0 and m <= n // v <= 1024 else 0, "hold 4096, not a row of 4097"),
    (lambda n, v, m: n // v if n % v == 0 and m <= n // v <= 1024 else 0, "not a whole number of warps"),
    (lambda n, v, m: n // v if n % v == 0 and n // v % 32 == 0 and n // v <= 1024 else 0, "below 128 threads"),
    (lambda n, v, m: n // v if n % v == 0 and n // v % 32 == 0 and m <= n // v else 0, "above 1024"),
    (lambda n, v, m: n // v if n % v == 0 and n // v % 64 == 0 and m <= n // v <= 1024 else 0,
     r"x8_team\(5120, 32, 128\) = 0, but 160 threads"),
])
def test_the_x8_team_check_passes_the_rule_and_names_wrong_teams(mistake, said):
    checks.check_x8_team(_x8_team, values=32, min_team=128)
    with pytest.raises(CheckFailed, match=said):
        checks.check_x8_team(mistake, values=32, min_team=128)
