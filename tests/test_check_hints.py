"""Hints must blame the right mistake (issue 16, finding 2).

Each test runs a kernel with one classic mistake through the check a learner would use and asserts
the sentence that names it, and that the sentence for a different mistake is absent. Several
mistakes leave a tail of the output unwritten; only a grid that is too small leaves the tail that
a rounded-down grid leaves at every size, so only then is the grid blamed.
"""

import numpy as np
import pytest
from numba import cuda, float32

import kernel_lab as kl
from kernel_lab.checks import indexing_memory as im
from kernel_lab.checks import warps_occupancy as wo

kl.setup(requires=[], quiet=True)

try:
    from kernel_lab.simulator import SharedMemoryRace
except ImportError:  # pragma: no cover - an older kernel_lab
    SharedMemoryRace = RuntimeError

simulator_only = pytest.mark.skipif(not kl.on_simulator(), reason="the simulator's race report is what is tested")

THREADS = 32  # small blocks: cheap in the simulator, and sizes of a few blocks
SIZES = kl.adversarial_sizes(block=THREADS, large=200)
GRID_TOO_SMALL = "grid is too small"


def _saxpy_inputs(n, rng):
    return np.float32(1.5), rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def _failure(kernel, launch_blocks=lambda n: kl.blocks_for(n, THREADS)) -> str:
    def launch(out, a, x, y):
        kernel[launch_blocks(out.size), THREADS](a, x, y, out)

    with pytest.raises(kl.CheckFailed) as info:
        kl.check_kernel("saxpy", launch, lambda a, x, y: a * x + y, _saxpy_inputs, sizes=SIZES, seed=3)
    return str(info.value)


@cuda.jit
def saxpy_thread_index_only(a, x, y, out):
    i = cuda.threadIdx.x  # the mistake: the block offset is missing
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_one_short(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size - 1:  # the mistake: the last element is left out
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_right(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_stores_zeros(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        r = a * x[i] + y[i]  # noqa: F841 - the mistake: the result is computed but zero is stored
        out[i] = 0


def test_index_without_block_offset_is_not_blamed_on_the_grid():
    message = _failure(saxpy_thread_index_only)
    assert "every block writes the same 32 elements" in message and "`cuda.threadIdx.x`" in message
    assert GRID_TOO_SMALL not in message


def test_bound_one_short_is_not_blamed_on_the_grid():
    message = _failure(saxpy_one_short)
    assert "Only the last element was never written at every failing size" in message
    assert "`if i < n:`" in message and GRID_TOO_SMALL not in message


def test_a_rounded_down_grid_is_still_blamed_on_the_grid():
    message = _failure(saxpy_right, launch_blocks=lambda n: n // THREADS)
    assert GRID_TOO_SMALL in message and "round" in message


def test_all_zero_output_says_zeros_were_written():
    message = _failure(saxpy_stores_zeros)
    assert "Every element the kernel wrote is 0" in message
    assert "same factor" not in message


def test_check_array_alone_does_not_blame_the_grid_for_a_missing_last_element():
    ref = np.arange(1.0, 1001.0)
    got = ref.astype(np.float32)
    got[-1:] = kl.check.poisoned_host(1, np.float32)
    with pytest.raises(kl.CheckFailed, match="bounds check that stops one short") as info:
        kl.check_array("one short", got, ref)
    assert "the grid is too small" not in str(info.value)


# ---- transpose: block indices not swapped; tile not transposed -----------------------------------

TILE, ROWS = 32, 8


def _tiled(swap_blocks: bool, transpose_tile: bool):
    @cuda.jit
    def kernel(a, out):
        tile = cuda.shared.array((TILE, TILE), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
        for j in range(0, TILE, ROWS):
            if row + j < a.shape[0] and col < a.shape[1]:
                tile[ty + j, tx] = a[row + j, col]
        cuda.syncthreads()
        if swap_blocks:
            col, row = cuda.blockIdx.y * TILE + tx, cuda.blockIdx.x * TILE + ty
        else:  # the mistake: the tile goes back to its own place
            col, row = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
        for j in range(0, TILE, ROWS):
            if row + j < out.shape[0] and col < out.shape[1]:
                if transpose_tile:
                    out[row + j, col] = tile[tx, ty + j]
                else:  # the mistake: the tile is copied, not transposed
                    out[row + j, col] = tile[ty + j, tx]
    return kernel


def _transpose_failure(kernel) -> str:
    def launch(out, a):
        kernel[(kl.blocks_for(a.shape[1], TILE), kl.blocks_for(a.shape[0], TILE)), (TILE, ROWS)](a, out)

    with pytest.raises(kl.CheckFailed) as info:
        im.check_transpose(launch, tile=TILE, seed=5)
    return str(info.value)


def test_transpose_with_block_indices_not_swapped_is_named_first_and_not_blamed_on_the_grid():
    message = _transpose_failure(_tiled(swap_blocks=False, transpose_tile=True))
    first = message.splitlines()[0]
    assert first.startswith("transpose: every tile was transposed but written back to its own place")
    assert GRID_TOO_SMALL not in message


def test_transpose_with_the_tile_not_transposed_leads_with_that_not_with_a_race():
    message = _transpose_failure(_tiled(swap_blocks=True, transpose_tile=False))
    first = message.splitlines()[0]
    assert first.startswith("transpose: every tile landed in its transposed place, but the elements inside")
    assert "Hint: the kernel has a race" not in message


# ---- warp sum with shfl_up_sync ------------------------------------------------------------------

WARP, FULL = 32, 0xFFFFFFFF


@cuda.jit(device=True)
def _warp_sum_up(v):
    offset = 16
    while offset > 0:
        v += cuda.shfl_up_sync(FULL, v, offset)  # the mistake: up, not down
        offset //= 2
    return v


@cuda.jit
def _sum_up(x, out):
    totals = cuda.shared.array(2, float32)
    acc = float32(0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    lane, warp = cuda.threadIdx.x % WARP, cuda.threadIdx.x // WARP
    acc = _warp_sum_up(acc)
    if lane == 0:
        totals[warp] = acc
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, totals[0] + totals[1])


def test_warp_sum_with_shfl_up_names_the_shuffle_direction():
    def launch(out, x):
        out[0] = 0
        _sum_up[2, 64](x, out)

    with pytest.raises(kl.CheckFailed) as info:
        wo.check_warp_sum(launch, block=64, sizes=[("small", 100)], seed=2)
    message = str(info.value)
    assert "cuda.shfl_up_sync" in message and "cuda.shfl_down_sync(FULL_MASK, v, offset)" in message
    assert "lane 0's result is its own value times 32" in message


# ---- the race report inside a warp-only branch ---------------------------------------------------

@cuda.jit
def _lockstep_sum(x, out):
    buf = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    buf[t] = x[t]
    cuda.syncthreads()
    if t < 32:  # one warp finishes alone, assuming lockstep: a race
        step = 32
        while step > 0:
            buf[t] += buf[t + step]
            step //= 2
    if t == 0:
        out[0] = buf[0]


@simulator_only
def test_race_inside_one_warp_advises_syncwarp_not_syncthreads():
    out = cuda.to_device(np.zeros(1, np.float32))
    with pytest.raises(SharedMemoryRace) as info:
        _lockstep_sum[1, 64](cuda.to_device(np.ones(64, np.float32)), out)
    message = str(info.value)
    assert "then cuda.syncwarp(), then write" in message
    assert "then cuda.syncthreads(), then write" not in message
    assert "Use cuda.syncwarp() here, not cuda.syncthreads()" in message
