"""The package's LayerNorm + GELU kernel (a team of threads sized to the row, two-pass statistics)."""

import numpy as np
import pytest

import kernel_lab as kl  # noqa: F401  (chooses GPU or simulator first)
from kernel_lab.checks import fusion as checks
from kernel_lab.fusion import layernorm as ln
from kernel_lab.validate import KernelLabArgumentError
from numba import cuda


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
