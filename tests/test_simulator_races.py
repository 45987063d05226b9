"""Shared-memory kernels, right and wrong; out-of-bounds accesses; jit keywords; event timing.

The correct kernels run on a GPU and under the simulator and are checked against NumPy. The
broken ones (a missing ``cuda.syncthreads()``, a missing bounds check) give a wrong answer only
sometimes on a GPU, so their tests check the simulator's report and are skipped on a GPU.
"""

import time

import numpy as np
import pytest

import kernel_lab.simulator as ksim  # importing kernel_lab first picks the simulator without a GPU
from numba import cuda  # noqa: E402

ksim.install()  # harmless if kernel_lab already did it; a no-op on a GPU

ON_SIMULATOR = ksim.simulator_active()
simulator_report = pytest.mark.skipif(
    not ON_SIMULATOR,
    reason="a GPU does not detect races or bad indices; this checks Kernel Lab's simulator report",
)
simulator_part = pytest.mark.skipif(
    not ON_SIMULATOR, reason="tests a part of Kernel Lab's simulator, which a GPU run does not use"
)

TPB = 64  # two warps per block, so that barriers between warps matter
HALO_TILE = TPB + 2  # a shared array's shape must be a compile-time constant on a GPU


@pytest.fixture(autouse=True)
def race_detection_on():
    """These tests expect the detector on, whatever KERNEL_LAB_RACE_DETECTION says."""
    with ksim.race_detection(True):
        yield


@pytest.fixture
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)


# --- a tiled 1D stencil -----------------------------------------------------------------------


@cuda.jit
def stencil_fixed(x, y):
    tile = cuda.shared.array(HALO_TILE, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.size
    tile[t + 1] = x[i] if i < n else 0.0
    if t == 0:
        tile[0] = x[i - 1] if 0 < i <= n else 0.0
    if t == TPB - 1:
        tile[TPB + 1] = x[i + 1] if i + 1 < n else 0.0
    cuda.syncthreads()
    if i < n:
        y[i] = tile[t] + tile[t + 1] + tile[t + 2]


@cuda.jit
def stencil_missing_sync(x, y):
    tile = cuda.shared.array(HALO_TILE, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.size
    tile[t + 1] = x[i] if i < n else 0.0
    if t == 0:
        tile[0] = x[i - 1] if 0 < i <= n else 0.0
    if t == TPB - 1:
        tile[TPB + 1] = x[i + 1] if i + 1 < n else 0.0
    if i < n:  # BUG: no cuda.syncthreads() before reading the neighbours' elements
        y[i] = tile[t] + tile[t + 1] + tile[t + 2]


def stencil_reference(x):
    padded = np.concatenate([[0.0], x, [0.0]])
    return padded[:-2] + padded[1:-1] + padded[2:]


def test_tiled_stencil(rng):
    x = rng.standard_normal(100)
    y = np.zeros_like(x)
    stencil_fixed[2, TPB](x, y)
    np.testing.assert_allclose(y, stencil_reference(x), rtol=1e-12)


@simulator_report
def test_missing_syncthreads_in_stencil_is_a_race(rng):
    x = rng.standard_normal(100)
    with pytest.raises(ksim.SharedMemoryRace) as info:
        stencil_missing_sync[2, TPB](x, np.zeros_like(x))
    message = str(info.value)
    assert "shared array `tile` (float64[66]" in message
    assert "element [1]" in message  # written by thread 0, read by thread 1
    assert "thread (0, 0, 0)" in message and "thread (1, 0, 0)" in message
    assert "writes it at" in message and "reads it at" in message
    assert "test_simulator_races.py:" in message
    assert "block (0, 0, 0)" in message
    assert "cuda.syncthreads()" in message
    assert isinstance(info.value, ksim.KernelLabSimulatorError)


@simulator_report
def test_race_detection_can_be_switched_off(rng):
    x = rng.standard_normal(100)
    with ksim.race_detection(False):
        assert ksim.settings.race_detection is False
        stencil_missing_sync[2, TPB](x, np.zeros_like(x))  # no report
    assert ksim.settings.race_detection is True
    with pytest.raises(ksim.SharedMemoryRace):
        stencil_missing_sync[2, TPB](x, np.zeros_like(x))
    ksim.race_detection(False)  # as a statement: off for good ...
    assert ksim.settings.race_detection is False
    ksim.race_detection(True)  # ... until switched on again
    assert ksim.settings.race_detection is True


# --- tiled matrix multiply --------------------------------------------------------------------

TILE = 8


@cuda.jit
def matmul_tiled(a, b, c):
    sa = cuda.shared.array((TILE, TILE), np.float64)
    sb = cuda.shared.array((TILE, TILE), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.grid(2)  # x runs along columns
    acc = 0.0
    for k0 in range(0, a.shape[1], TILE):
        sa[ty, tx] = a[row, k0 + tx]
        sb[ty, tx] = b[k0 + ty, col]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    c[row, col] = acc


@cuda.jit
def matmul_missing_second_sync(a, b, c):
    sa = cuda.shared.array((TILE, TILE), np.float64)
    sb = cuda.shared.array((TILE, TILE), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.grid(2)  # x runs along columns
    acc = 0.0
    for k0 in range(0, a.shape[1], TILE):
        sa[ty, tx] = a[row, k0 + tx]
        sb[ty, tx] = b[k0 + ty, col]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        # BUG: no cuda.syncthreads(): the next tile overwrites sa/sb while others still read
    c[row, col] = acc


def test_tiled_matmul(rng):
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 16))
    c = np.zeros((16, 16))
    matmul_tiled[(2, 2), (TILE, TILE)](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


@simulator_report
def test_missing_second_syncthreads_in_matmul_is_a_race(rng):
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 16))
    with pytest.raises(ksim.SharedMemoryRace) as info:
        matmul_missing_second_sync[(2, 2), (TILE, TILE)](a, b, np.zeros((16, 16)))
    message = str(info.value)
    assert "shared array `sa` (float64[8, 8]" in message
    assert "element [0, 0]" in message
    assert "next pass of a loop" in message and "end of the loop body" in message


# --- reductions -------------------------------------------------------------------------------


@cuda.jit
def block_sum_tree(x, out):
    sh = cuda.shared.array(TPB, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sh[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if t < s:
            sh[t] += sh[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        out[cuda.blockIdx.x] = sh[0]


@cuda.jit
def block_sum_warp_synchronous(x, out):
    sh = cuda.shared.array(TPB, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sh[t] = x[i]
    cuda.syncthreads()
    if t < 32:
        v = sh[t] + sh[t + 32]
        cuda.syncwarp()
        sh[t] = v
        offset = 16
        while offset > 0:
            cuda.syncwarp()
            v += sh[t + offset]
            cuda.syncwarp()
            sh[t] = v
            offset //= 2
        if t == 0:
            out[cuda.blockIdx.x] = v


@cuda.jit
def block_sum_warp_without_syncwarp(x, out):
    sh = cuda.shared.array(TPB, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sh[t] = x[i]
    cuda.syncthreads()
    if t < 32:
        v = sh[t] + sh[t + 32]
        sh[t] = v
        offset = 16
        while offset > 0:
            v += sh[t + offset]  # BUG: lanes of a warp are not in lockstep
            sh[t] = v
            offset //= 2
        if t == 0:
            out[cuda.blockIdx.x] = v


def test_tree_reduction_is_not_reported(rng):
    x = rng.standard_normal(3 * TPB)
    out = np.zeros(3)
    block_sum_tree[3, TPB](x, out)
    np.testing.assert_allclose(out, x.reshape(3, TPB).sum(axis=1), rtol=1e-12)


def test_warp_synchronous_reduction_with_syncwarp_is_not_reported(rng):
    x = rng.standard_normal(2 * TPB)
    out = np.zeros(2)
    block_sum_warp_synchronous[2, TPB](x, out)
    np.testing.assert_allclose(out, x.reshape(2, TPB).sum(axis=1), rtol=1e-12)


@simulator_report
def test_warp_synchronous_reduction_without_syncwarp_is_a_race(rng):
    with pytest.raises(ksim.SharedMemoryRace, match="same warp") as info:
        block_sum_warp_without_syncwarp[1, TPB](rng.standard_normal(TPB), np.zeros(1))
    assert "cuda.syncwarp()" in str(info.value)


# --- atomics and dynamic shared memory --------------------------------------------------------

NBINS = 8


@cuda.jit
def histogram(keys, hist):
    bins = cuda.shared.array(NBINS, np.int32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if t < NBINS:
        bins[t] = 0
    cuda.syncthreads()
    if i < keys.size:
        cuda.atomic.add(bins, keys[i], 1)
    cuda.syncthreads()
    if t < NBINS:
        cuda.atomic.add(hist, t, bins[t])


@cuda.jit
def histogram_missing_sync(keys, hist):
    bins = cuda.shared.array(NBINS, np.int32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if t < NBINS:
        bins[t] = 0
    # BUG: no cuda.syncthreads() between the initialisation and the atomics
    if i < keys.size:
        cuda.atomic.add(bins, keys[i], 1)
    cuda.syncthreads()
    if t < NBINS:
        cuda.atomic.add(hist, t, bins[t])


def test_shared_atomics_are_not_races(rng):
    keys = rng.integers(0, NBINS, 150).astype(np.int32)
    hist = np.zeros(NBINS, np.int32)
    histogram[3, TPB](keys, hist)
    np.testing.assert_array_equal(hist, np.bincount(keys, minlength=NBINS))


@simulator_report
def test_plain_write_against_atomics_is_a_race(rng):
    keys = rng.integers(0, NBINS, TPB).astype(np.int32)
    keys[:NBINS] = np.arange(NBINS)  # make sure thread 0's bin is hit by an atomic
    with pytest.raises(ksim.SharedMemoryRace, match="cuda.atomic"):
        histogram_missing_sync[1, TPB](keys, np.zeros(NBINS, np.int32))


@cuda.jit
def dynamic_block_sum(x, out):
    sh = cuda.shared.array(0, np.float32)
    t = cuda.threadIdx.x
    sh[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    if t == 0:
        total = 0.0
        for k in range(cuda.blockDim.x):
            total += sh[k]
        out[cuda.blockIdx.x] = total


@cuda.jit
def dynamic_missing_sync(x, out):
    sh = cuda.shared.array(0, np.float32)
    t = cuda.threadIdx.x
    sh[t] = x[cuda.grid(1)]
    if t == 0:  # BUG: reads every thread's element without a barrier
        total = 0.0
        for k in range(cuda.blockDim.x):
            total += sh[k]
        out[cuda.blockIdx.x] = total


def test_dynamic_shared_memory(rng):
    x = rng.standard_normal(2 * TPB).astype(np.float32)
    out = np.zeros(2, np.float32)
    dynamic_block_sum[2, TPB, 0, TPB * 4](x, out)
    # a float32 sum of random signs can land near zero: bound the error by the sum of magnitudes
    scale = np.abs(x.reshape(2, TPB)).sum(axis=1)
    np.testing.assert_allclose(out, x.reshape(2, TPB).sum(axis=1), rtol=0, atol=float(1e-5 * scale.max()))


@simulator_report
def test_race_in_dynamic_shared_memory_is_reported(rng):
    with pytest.raises(ksim.SharedMemoryRace, match="dynamic shared memory `sh`"):
        x = rng.standard_normal(TPB).astype(np.float32)
        dynamic_missing_sync[1, TPB, 0, TPB * 4](x, np.zeros(1, np.float32))


# --- barriers ---------------------------------------------------------------------------------


@cuda.jit
def barrier_votes(x, out):
    t = cuda.threadIdx.x
    if t >= 40:
        return  # returned threads no longer take part in barriers (Volta and newer)
    positive = np.int32(x[t] > 0)  # numba-cuda's barrier votes take an int32
    count = cuda.syncthreads_count(positive)
    all_ = cuda.syncthreads_and(positive)
    any_ = cuda.syncthreads_or(positive)
    if t == 0:
        out[0], out[1], out[2] = count, all_, any_


def test_barrier_votes_after_some_threads_returned(rng):
    x = rng.standard_normal(TPB)
    out = np.zeros(3, np.int64)
    barrier_votes[1, TPB](x, out)
    p = x[:40] > 0
    np.testing.assert_array_equal(out, [p.sum(), p.all(), p.any()])


@cuda.jit
def spin_forever(flag):
    if cuda.threadIdx.x == 0:
        cuda.syncthreads()  # waits for the other threads ...
    else:
        while flag[0] == 0:  # ... which wait for a flag nobody sets
            pass


@pytest.mark.skipif(not ON_SIMULATOR, reason="this kernel would hang a GPU")
def test_a_spinning_thread_is_reported_after_the_timeout():
    saved = ksim.settings.hang_timeout_s
    ksim.settings.hang_timeout_s = 0.5
    try:
        with pytest.raises(ksim.DeadlockError, match="still running"):
            spin_forever[1, 4](np.zeros(1, np.int32))
    finally:
        ksim.settings.hang_timeout_s = saved


# --- out of bounds ----------------------------------------------------------------------------


@cuda.jit
def scale_without_bounds_check(a, out):
    i = cuda.grid(1)
    out[i] = 2.0 * a[i]


@cuda.jit
def shift_with_small_tile(a, out):
    tile = cuda.shared.array(TPB, np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < a.size:
        tile[t + 1] = a[i]  # BUG: the tile has no room for the +1 halo


@simulator_report
def test_out_of_bounds_read_has_a_clear_message():
    a = np.arange(100.0)
    with pytest.raises(ksim.OutOfBoundsAccess) as info:
        scale_without_bounds_check[4, 32](a, np.zeros(100))
    message = str(info.value)
    assert "reads `a[i]` with i = 100" in message
    assert "global array `a` of shape (100,)" in message
    assert "thread (4, 0, 0) of block (3, 0, 0)" in message
    assert "test_simulator_races.py:" in message
    assert "if i < n" in message  # the hint
    assert isinstance(info.value, IndexError)  # old `except IndexError` code keeps working


@simulator_report
def test_out_of_bounds_in_shared_memory_names_the_tile():
    with pytest.raises(ksim.OutOfBoundsAccess) as info:
        shift_with_small_tile[1, TPB](np.arange(64.0), np.zeros(64))
    message = str(info.value)
    assert "writes `tile[t + 1]` with t + 1 = 64" in message
    assert "shared array `tile` of shape (64,)" in message


# --- cuda.jit keywords and events -------------------------------------------------------------


@cuda.jit(device=True, inline="always")
def twice(v):
    return 2.0 * v


@cuda.jit(
    fastmath=True,
    launch_bounds=TPB,
    max_registers=64,
    lineinfo=True,
    opt=True,
    cache=True,
    link=[],
    extensions=[],
    forceinline=False,
    shared_memory_carveout="MaxShared",
)
def double_all_options(a, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = twice(a[i])


@cuda.jit(debug=True, opt=False)
def double_debug(a, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = twice(a[i])


def test_jit_accepts_numba_cuda_keywords(rng):
    a = rng.standard_normal(50)
    for kernel in (double_all_options, double_debug):
        out = np.zeros_like(a)
        kernel[1, TPB](a, out)
        np.testing.assert_array_equal(out, 2.0 * a)


@simulator_part
def test_jit_rejects_what_numba_cuda_rejects():
    with pytest.raises(TypeError, match="fast_math"):
        cuda.jit(fast_math=True)
    with pytest.raises(NotImplementedError):
        cuda.jit(boundscheck=True)


def test_events_time_a_kernel(rng):
    a = rng.standard_normal(64)
    out = np.zeros_like(a)
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    double_all_options[1, TPB](a, out)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert elapsed > 0.0
    assert cuda.event_elapsed_time(start, end) == elapsed


@pytest.mark.skipif(
    not ON_SIMULATOR, reason="simulator events time the host; GPU events time the GPU's stream"
)
def test_simulator_events_measure_wall_clock():
    start, end = cuda.event(), cuda.event()
    start.record()
    time.sleep(0.02)
    end.record()
    assert 15.0 < start.elapsed_time(end) < 2000.0
    with pytest.raises(ValueError, match="never recorded"):
        start.elapsed_time(cuda.event())


@cuda.jit
def _read_unwritten(out):
    tile = cuda.shared.array(4, np.float32)
    i = cuda.threadIdx.x
    if i < 2:
        tile[i] = 1.0
    cuda.syncthreads()
    out[i] = tile[i]  # elements 2 and 3 were never written


@simulator_part
def test_memory_nobody_wrote_reads_the_same_poison_on_every_machine():
    """Shared and device memory start as garbage on a GPU; here they hold 0x7B bytes, so that a check's
    message about an element nobody wrote does not depend on this process's leftovers."""
    from kernel_lab.simulator.shared_memory import POISON_BYTE

    poison32 = np.frombuffer(bytes([POISON_BYTE]) * 4, np.float32)[0]
    out = cuda.device_array(4, np.float32)
    assert np.all(out.copy_to_host() == poison32)  # before the kernel: device memory
    _read_unwritten[1, 4](out)
    assert list(out.copy_to_host()) == [1.0, 1.0, poison32, poison32]
    assert np.isfinite(poison32) and abs(poison32) > 1e30  # finite, and no value a check expects
    ints = cuda.device_array_like(np.zeros((2, 3), np.int32)).copy_to_host()
    assert np.all(ints == int.from_bytes(bytes([POISON_BYTE]) * 4, "little"))


def test_an_index_past_a_local_array_is_told_a_loop_runs_past_it_not_a_missing_bounds_check():
    # Issue 38: a local array's size is fixed by its declaration; "if i < n:" is the wrong advice there
    @cuda.jit
    def past_the_registers(out):
        regs = cuda.local.array(4, np.float32)
        for j in range(5):  # the mistake: a bound from another constant
            regs[j] = j
        out[0] = regs[0]

    with pytest.raises(ksim.OutOfBoundsAccess) as caught:
        past_the_registers[1, 1](cuda.device_array(1, np.float32))
    message = str(caught.value)
    assert "local array `regs`" in message and "a loop or an index runs past that size" in message
    assert "missing bounds check" not in message
