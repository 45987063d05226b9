"""Warp-level kernels checked against NumPy, on a GPU and under the simulator alike.

Each kernel is a pattern the course teaches (shuffle reductions, scans, broadcasts, ballot-based
compaction, votes), run with fresh random inputs and compared with a NumPy reference by the same
assertions whether it ran on a GPU or in Kernel Lab's simulator. Tests of behaviour that only the
simulator has (its error messages for misuse of warp functions) are skipped on a GPU.

Sizes are tiny so that the simulator, which runs each CUDA thread as a Python thread, stays fast.
"""

import numpy as np
import pytest

import kernel_lab.simulator as ksim  # importing kernel_lab first picks the simulator without a GPU
from numba import cuda  # noqa: E402

ksim.install()  # harmless if kernel_lab already did it; a no-op on a GPU

ON_SIMULATOR = ksim.simulator_active()
simulator_error = pytest.mark.skipif(
    not ON_SIMULATOR,
    reason="checks an error only Kernel Lab's simulator reports; on a GPU this kernel is "
    "undefined behaviour (garbage or a hang)",
)
simulator_part = pytest.mark.skipif(
    not ON_SIMULATOR, reason="tests a part of Kernel Lab's simulator, which a GPU run does not use"
)
gpu_only = pytest.mark.skipif(ON_SIMULATOR, reason="checks what install() does on a real GPU")

FULL = 0xFFFFFFFF


@pytest.fixture
def rng():
    """Fresh random inputs each run; the seed is in the test id's output on failure."""
    seed = np.random.SeedSequence().entropy
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)


# --- kernels ----------------------------------------------------------------------------------


@cuda.jit
def warp_sum_down(x, out):
    i = cuda.grid(1)
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit
def warp_sum_wrong(x, out):
    # Deliberately wrong: starts at offset 8, so lanes 16-31 never reach lane 0.
    i = cuda.grid(1)
    v = x[i]
    offset = 8
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit
def warp_sum_butterfly(x, out):
    i = cuda.grid(1)
    v = x[i]
    mask = 16
    while mask > 0:
        v += cuda.shfl_xor_sync(FULL, v, mask)
        mask //= 2
    out[i] = v  # every lane holds the warp's total


@cuda.jit
def broadcast(x, src, out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_sync(FULL, x[i], src[i])


@cuda.jit
def inclusive_scan(x, out):
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    delta = 1
    while delta < 32:
        n = cuda.shfl_up_sync(FULL, v, delta)
        if lane >= delta:
            v += n
        delta *= 2
    out[i] = v


@cuda.jit
def compact(x, threshold, out, counts, leaders):
    i = cuda.grid(1)
    warp = i // 32
    keep = x[i] > threshold
    ballot = cuda.ballot_sync(FULL, keep)
    rank = cuda.popc(ballot & cuda.lanemask_lt())
    if keep:
        out[warp * 32 + rank] = x[i]
    if cuda.laneid == 0:
        counts[warp] = cuda.popc(ballot)
        leaders[warp] = cuda.ffs(ballot) - 1


@cuda.jit
def votes(x, threshold, all_out, any_out, eq_out, ballot_out):
    i = cuda.grid(1)
    p = x[i] > threshold
    all_out[i] = cuda.all_sync(FULL, p)
    any_out[i] = cuda.any_sync(FULL, p)
    eq_out[i] = cuda.eq_sync(FULL, p)
    ballot_out[i] = cuda.ballot_sync(FULL, p)


@cuda.jit
def partial_warp_sum(x, out, masks, lanes):
    # Any block shape: lanes are consecutive linear thread ids (x fastest, then y).
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    nthreads = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
    g = cuda.blockIdx.x * nthreads + t
    lane = cuda.laneid
    mask = cuda.activemask()
    n_lanes = cuda.popc(mask)
    v = x[g]
    offset = 16
    while offset > 0:
        other = cuda.shfl_down_sync(mask, v, offset)
        if lane + offset < n_lanes:  # only read lanes that exist
            v += other
        offset //= 2
    masks[g] = mask
    lanes[g] = lane
    if lane == 0:
        out[cuda.blockIdx.x * ((nthreads + 31) // 32) + t // 32] = v


@cuda.jit
def half_warp_sums(x, out):
    # Two independent half-warp reductions, each with its own mask, in divergent branches.
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    if lane < 16:
        for offset in (8, 4, 2, 1):
            v += cuda.shfl_down_sync(0x0000FFFF, v, offset)
    else:
        for offset in (8, 4, 2, 1):
            v += cuda.shfl_down_sync(0xFFFF0000, v, offset)
    if lane == 0 or lane == 16:
        out[i // 16] = v


@cuda.jit
def early_exit_broadcast(x, out):
    i = cuda.grid(1)
    lane = cuda.laneid
    mask = cuda.ballot_sync(FULL, lane < 20)
    if lane >= 20:
        return  # these lanes leave; the others must not wait for them
    leader = cuda.shfl_sync(mask, x[i], 3)
    cuda.syncwarp(mask)
    out[i] = leader + cuda.popc(mask)


@cuda.jit
def segment_sums_portable(x, sums, firsts):
    # Segments of 8 lanes without a width argument: xor offsets below 8 stay in the segment,
    # and the segment's first lane is (lane & ~7).
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    for offset in (4, 2, 1):
        v += cuda.shfl_xor_sync(FULL, v, offset)
    sums[i] = v
    firsts[i] = cuda.shfl_sync(FULL, x[i], lane & ~7)


# --- tests that run on a GPU and under the simulator ------------------------------------------


def test_warp_sum_with_shfl_down(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.zeros(4, np.float32)
    warp_sum_down[2, 64](x, out)
    np.testing.assert_allclose(out, x.reshape(4, 32).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_wrong_warp_sum_fails_the_check(rng):
    # A check is only worth having if it can fail: this reduction skips offset 16.
    x = rng.uniform(1.0, 2.0, 64).astype(np.float32)
    out = np.zeros(2, np.float32)
    warp_sum_wrong[1, 64](x, out)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(out, x.reshape(2, 32).sum(axis=1), rtol=1e-5)


def test_butterfly_reduction_with_shfl_xor(rng):
    x = rng.integers(-100, 100, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    warp_sum_butterfly[1, 64](x, out)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(2, 32).sum(axis=1), 32))


def test_broadcast_and_permutation_with_shfl_sync(rng):
    x = rng.standard_normal(64)
    lanes = np.arange(64) % 32
    for src in (np.full(64, 5), (lanes * 7 + 3) % 32, lanes + 32 * rng.integers(0, 3, 64)):
        src = src.astype(np.int32)
        out = np.zeros(64)
        broadcast[1, 64](x, src, out)
        expected = x[(np.arange(64) // 32) * 32 + src % 32]  # source lane taken modulo 32
        np.testing.assert_array_equal(out, expected)


def test_inclusive_scan_with_shfl_up(rng):
    x = rng.integers(0, 10, 96).astype(np.int64)
    out = np.zeros(96, np.int64)
    inclusive_scan[3, 32](x, out)
    np.testing.assert_array_equal(out, np.cumsum(x.reshape(3, 32), axis=1).ravel())


def test_ballot_stream_compaction(rng):
    x = rng.random(96).astype(np.float32)
    x[32:64] = 1.0  # one warp where every lane (lane 31 too) votes true: ballot is negative
    out = np.zeros(96, np.float32)
    counts = np.zeros(3, np.int32)
    leaders = np.zeros(3, np.int32)
    compact[1, 96](x, np.float32(0.5), out, counts, leaders)
    for w in range(3):
        kept = x[32 * w : 32 * (w + 1)]
        kept = kept[kept > 0.5]
        assert counts[w] == len(kept)
        np.testing.assert_array_equal(out[32 * w : 32 * w + len(kept)], kept)
        first = np.flatnonzero(x[32 * w : 32 * (w + 1)] > 0.5)
        assert leaders[w] == (first[0] if len(first) else -1)


def test_all_any_eq_and_ballot_votes(rng):
    x = rng.random(96)
    x[32:64] = 1.0  # all true in warp 1
    x[64:96] = 0.0  # all false in warp 2
    outs = [np.zeros(96, np.int32) for _ in range(3)] + [np.zeros(96, np.uint32)]
    votes[1, 96](x, 0.5, *outs)
    pred = (x > 0.5).reshape(3, 32)
    bits = (pred * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    np.testing.assert_array_equal(outs[0], np.repeat(pred.all(axis=1), 32))
    np.testing.assert_array_equal(outs[1], np.repeat(pred.any(axis=1), 32))
    np.testing.assert_array_equal(
        outs[2], np.repeat(pred.all(axis=1) | ~pred.any(axis=1), 32)
    )
    np.testing.assert_array_equal(outs[3], np.repeat(bits, 32))


@pytest.mark.parametrize("block", [(48, 1), (16, 3), (8, 6)], ids=["48x1", "16x3", "8x6"])
def test_partial_warps_and_2d_blocks(rng, block):
    nthreads = block[0] * block[1]  # 48: one full warp, one warp of 16 lanes
    nblocks = 2
    x = rng.integers(0, 100, nthreads * nblocks).astype(np.int64)
    out = np.zeros(nblocks * 2, np.int64)
    masks = np.zeros(nthreads * nblocks, np.uint32)
    lanes = np.zeros(nthreads * nblocks, np.int32)
    partial_warp_sum[nblocks, block](x, out, masks, lanes)
    per_block = x.reshape(nblocks, nthreads)
    expected = np.stack([per_block[:, :32].sum(axis=1), per_block[:, 32:].sum(axis=1)], axis=1)
    np.testing.assert_array_equal(out, expected.ravel())
    linear = np.tile(np.arange(nthreads), nblocks)
    np.testing.assert_array_equal(lanes, linear % 32)
    np.testing.assert_array_equal(masks, np.where(linear < 32, 0xFFFFFFFF, 0x0000FFFF))


def test_masked_half_warp_shuffles(rng):
    x = rng.integers(-50, 50, 64).astype(np.int32)
    out = np.zeros(4, np.int32)
    half_warp_sums[1, 64](x, out)
    np.testing.assert_array_equal(out, x.reshape(4, 16).sum(axis=1))


def test_lanes_that_return_early_do_not_block_the_others(rng):
    x = rng.standard_normal(64)
    out = np.full(64, -1.0)
    early_exit_broadcast[1, 64](x, out)
    lanes = np.arange(64) % 32
    expected = np.where(lanes < 20, x[(np.arange(64) // 32) * 32 + 3] + 20, -1.0)
    np.testing.assert_array_equal(out, expected)


def test_sub_warp_segments_without_width_argument(rng):
    x = rng.integers(0, 1000, 64).astype(np.int64)
    sums = np.zeros(64, np.int64)
    firsts = np.zeros(64, np.int64)
    segment_sums_portable[1, 64](x, sums, firsts)
    np.testing.assert_array_equal(sums, np.repeat(x.reshape(8, 8).sum(axis=1), 8))
    np.testing.assert_array_equal(firsts, np.repeat(x[::8], 8))


@cuda.jit
def match_groups(keys, any_out, all_out, all_pred):
    i = cuda.grid(1)
    any_out[i] = cuda.match_any_sync(FULL, keys[i])
    mask, pred = cuda.match_all_sync(FULL, keys[i] // 100)
    all_out[i] = mask
    all_pred[i] = pred


def test_match_any_and_match_all(rng):
    keys = rng.integers(0, 4, 64).astype(np.int32)
    any_out, all_out = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    all_pred = np.zeros(64, np.int32)
    match_groups[1, 64](keys, any_out, all_out, all_pred)
    for i in range(64):
        w = i // 32
        same = keys[32 * w : 32 * w + 32] == keys[i]
        assert any_out[i] == (same * (1 << np.arange(32, dtype=np.uint64))).sum()
    np.testing.assert_array_equal(all_out, np.full(64, 0xFFFFFFFF))  # keys // 100 are all 0
    np.testing.assert_array_equal(all_pred, np.ones(64))


@gpu_only
def test_install_does_nothing_on_a_gpu():
    assert ksim.install() is False
    assert not ksim.is_installed()


# --- the simulator only -----------------------------------------------------------------------


@simulator_part
def test_install_is_idempotent():
    assert ksim.install() is True
    assert ksim.install() is True
    assert ksim.is_installed()


@simulator_part
def test_shuffle_source_lane_rules_match_ptx():
    from kernel_lab.simulator.warp import BFLY, DOWN, IDX, UP, source_lane

    for lane in range(32):
        assert source_lane(DOWN, lane, 4) == (lane + 4 if lane + 4 < 32 else lane)
        assert source_lane(UP, lane, 4) == (lane - 4 if lane >= 4 else lane)
        assert source_lane(IDX, lane, 37) == 5  # modulo 32
        assert source_lane(BFLY, lane, 1) == lane ^ 1
        seg = lane & ~7
        assert source_lane(DOWN, lane, 2, width=8) == (lane + 2 if lane + 2 < seg + 8 else lane)
        assert source_lane(UP, lane, 2, width=8) == (lane - 2 if lane - 2 >= seg else lane)
        assert source_lane(IDX, lane, 11, width=8) == seg + 3
        # xor may reach an earlier segment, never a later one
        assert source_lane(BFLY, lane, 8, width=8) == (lane ^ 8 if lane ^ 8 < seg + 8 else lane)


@cuda.jit
def segment_scan_width(x, scan, first, total):
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    d = 1
    while d < 8:
        n = cuda.shfl_up_sync(FULL, v, d, width=8)
        if lane % 8 >= d:
            v += n
        d *= 2
    scan[i] = v
    first[i] = cuda.shfl_sync(FULL, x[i], 0, width=8)
    t = x[i]
    for m in (4, 2, 1):
        t += cuda.shfl_xor_sync(FULL, t, m, width=8)
    total[i] = t


@pytest.mark.skipif(
    not ON_SIMULATOR, reason="numba-cuda's shuffles take no width argument (a simulator extension)"
)
def test_width_argument_gives_segments_and_warns(rng):
    x = rng.integers(0, 100, 32).astype(np.int64)
    scan, first, total = (np.zeros(32, np.int64) for _ in range(3))
    with pytest.warns(UserWarning, match="will not compile on a GPU"):
        segment_scan_width[1, 32](x, scan, first, total)
    seg = x.reshape(4, 8)
    np.testing.assert_array_equal(scan, np.cumsum(seg, axis=1).ravel())
    np.testing.assert_array_equal(first, np.repeat(seg[:, 0], 8))
    np.testing.assert_array_equal(total, np.repeat(seg.sum(axis=1), 8))


@cuda.jit
def full_mask_on_partial_warp(x, out):
    i = cuda.grid(1)
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)  # warp 1 has only 16 lanes
        offset //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


@simulator_error
def test_reading_a_lane_that_does_not_exist_is_reported():
    x = np.ones(48)
    with pytest.raises(ksim.UndefinedShuffleValue, match="does not exist") as info:
        full_mask_on_partial_warp[1, 48](x, np.zeros(2))
    message = str(info.value)
    assert "lane 0 of warp 1" in message
    assert "read it from lane 16" in message
    assert "stored into an array" in message


@cuda.jit
def half_mask_all_store(x, out):
    i = cuda.grid(1)
    v = x[i]
    if cuda.laneid < 16:
        for offset in (8, 4, 2, 1):
            v += cuda.shfl_down_sync(0x0000FFFF, v, offset)
        out[i] = v  # lanes 8-15 read outside the mask at offset 8; the garbage reaches lanes 1-15


@simulator_error
def test_using_a_value_read_from_outside_the_mask_is_reported():
    with pytest.raises(ksim.UndefinedShuffleValue, match="not in the mask 0x0000ffff"):
        half_mask_all_store[1, 32](np.ones(32), np.zeros(32))


@cuda.jit
def caller_not_in_mask(out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_sync(0x0000FFFF, i, 0)  # lanes 16-31 call it too


@simulator_error
def test_calling_lane_missing_from_its_mask_is_reported():
    with pytest.raises(ksim.WarpMaskError, match="which does not include lane"):
        caller_not_in_mask[1, 32](np.zeros(32))


@cuda.jit
def mismatched_warp_functions(out):
    i = cuda.grid(1)
    if i % 2 == 0:
        out[i] = cuda.shfl_sync(FULL, i, 0)
    else:
        out[i] = cuda.ballot_sync(FULL, True)


@simulator_error
def test_lanes_calling_different_warp_functions_are_reported():
    with pytest.raises(ksim.WarpMaskError, match="call different warp functions"):
        mismatched_warp_functions[1, 32](np.zeros(32))


@cuda.jit
def barrier_versus_syncwarp(out):
    i = cuda.threadIdx.x
    if i == 0:
        cuda.syncthreads()  # waits for lanes 1-31 ...
    else:
        cuda.syncwarp()  # ... which wait for lane 0
    out[i] = 1


@simulator_error
def test_deadlock_is_reported_instead_of_hanging():
    with pytest.raises(ksim.DeadlockError) as info:
        barrier_versus_syncwarp[1, 32](np.zeros(32))
    message = str(info.value)
    assert "cuda.syncthreads()" in message and "cuda.syncwarp(mask=0xffffffff)" in message
    assert "it also needs lane 0, which waits in cuda.syncthreads()" in message


@cuda.jit
def activemask_in_branches(out):
    i = cuda.grid(1)
    if cuda.laneid < 10:
        out[i] = cuda.activemask()
    else:
        out[i] = cuda.activemask()


@pytest.mark.skipif(
    not ON_SIMULATOR,
    reason="a GPU does not guarantee which lanes activemask() reports in divergent code",
)
def test_activemask_reports_the_lanes_that_reach_the_same_call():
    # On a GPU this is what a warp that diverged at the `if` usually reports, but nothing
    # guarantees it there; the simulator makes it deterministic.
    out = np.zeros(48, np.uint32)
    activemask_in_branches[1, 48](out)
    lanes = np.arange(48) % 32
    expected = np.where(lanes < 10, 0x3FF, np.where(np.arange(48) < 32, 0xFFFFFC00, 0xFC00))
    np.testing.assert_array_equal(out, expected)


def test_warp_functions_can_be_imported_from_numba_cuda():
    from numba.cuda import ballot_sync, shfl_down_sync, syncwarp  # noqa: F401


@simulator_part
def test_warp_functions_outside_a_kernel_explain_themselves():
    with pytest.raises(RuntimeError, match="only be called inside a kernel"):
        cuda.shfl_sync(FULL, 1.0, 0)


@simulator_part
def test_bit_functions_handle_negative_ballots():
    from kernel_lab.simulator import bits

    all_lanes = np.uint32(FULL).view(np.int32)  # what ballot_sync returns when all vote true
    assert bits.popc(all_lanes) == 32
    assert bits.ffs(all_lanes) == 1
    assert bits.ffs(np.int32(0)) == 0
    assert bits.clz(np.int32(1)) == 31 and bits.clz(np.int64(1)) == 63
    assert bits.brev(np.uint32(1)) == 1 << 31
