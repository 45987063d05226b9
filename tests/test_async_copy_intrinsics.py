"""Hopper's mbarriers and bulk copy (kernel_lab.device.mbarrier, .bulk_copy) in the simulator, and
their PTX assembled for sm_90a without a GPU.

The round-trip kernels and their mutants live in scripts/hopper_async_copy.py (the same file runs them
on an H100/H200): one writes back with the threads' stores, the other through the bulk store
(kernel_lab.device.bulk_copy.cp_async_bulk_store and its groups). Each mutant is one classic protocol
mistake, caught with a message that names it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import kernel_lab.simulator as ksim
from kernel_lab.check import CheckFailed, finishes_within
from kernel_lab.environment import on_simulator
from numba import cuda

pytestmark = pytest.mark.skipif(not on_simulator(), reason="runs the simulator's models of the intrinsics")

import hopper_async_copy as hac
from kernel_lab.device import async_copy_sim
from kernel_lab.device.mbarrier import (
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_try_wait_parity,
)

ksim.install()
MUTANT_BYTES = 256
HANG_LIMIT_S = 6


@pytest.fixture(autouse=True)
def _bounded_launches():
    """No launch of this file may spin for ever: several mutants can hang (as on a GPU), and which
    ones do can depend on how the threads interleave. Those that are meant to hang have their own,
    shorter limit (HANG_LIMIT_S); this one turns any other endless spin into a failure."""
    with ksim.time_limit(120):
        yield


@pytest.mark.parametrize("nbytes", hac.SIZES_BYTES)
def test_round_trip_two_phases(nbytes):
    src, out = hac.run_round_trip(hac.make_round_trip(), nbytes, rounds=2)
    async_copy_sim.check_no_in_flight(out, "round trip")
    np.testing.assert_array_equal(out, src)


def test_parity_and_counts_of_one_barrier():
    """A fresh barrier is in phase 0: parity 1 (the phase before) counts as complete, parity 0 not;
    arrivals complete a phase only with the tx-count at 0."""
    seen = np.zeros(8, np.int32)

    @cuda.jit
    def probe(seen):
        bars = cuda.shared.array(1, np.uint64)
        mbarrier_init(bars, 0, 2)
        seen[0] = mbarrier_try_wait_parity(bars, 0, 0)
        seen[1] = mbarrier_try_wait_parity(bars, 0, 1)
        mbarrier_arrive(bars, 0)
        seen[2] = mbarrier_try_wait_parity(bars, 0, 0)  # one of two arrivals
        mbarrier_arrive_expect_tx(bars, 0, 16)
        seen[3] = mbarrier_try_wait_parity(bars, 0, 0)  # both arrived, 16 bytes still expected
        mbarrier_init(bars, 0, 1)
        mbarrier_arrive(bars, 0)
        seen[4] = mbarrier_try_wait_parity(bars, 0, 0)  # phase 0 complete
        seen[5] = mbarrier_try_wait_parity(bars, 0, 1)  # phase 1 in progress
        mbarrier_arrive(bars, 0)
        seen[6] = mbarrier_try_wait_parity(bars, 0, 1)
        seen[7] = mbarrier_try_wait_parity(bars, 0, 0)  # phase 2 in progress: parity 0 again

    probe[1, 1](seen)
    assert seen.tolist() == [0, 1, 0, 0, 1, 0, 1, 0]


def _launch(mutant, rounds=2):
    return hac.run_round_trip(hac.make_round_trip(mutant), MUTANT_BYTES, rounds=rounds)


def test_wrong_parity_hangs_and_is_named():
    with pytest.raises(CheckFailed) as info, finishes_within("round trip", HANG_LIMIT_S):
        _launch("wrong parity")
    message = str(info.value)
    assert "did not finish" in message
    assert "mbarrier bars[1]" in message and "no thread has arrived in this phase" in message
    assert "wrong parity" in message


def test_expect_tx_too_large_hangs_and_is_named():
    with pytest.raises(CheckFailed) as info, finishes_within("round trip", HANG_LIMIT_S):
        _launch("expect too many")
    message = str(info.value)
    assert "mbarrier bars[0]" in message and "16 expected bytes will never arrive" in message
    assert "announced more bytes than the cp_async_bulk copies carry" in message


def test_expect_tx_too_small_completes_early():
    _src, out = _launch("expect too few")
    with pytest.raises(async_copy_sim.ReadBeforeWait, match="read the destination before its data landed"):
        async_copy_sim.check_no_in_flight(out, "round trip")
    # the phase completed 16 bytes early: the last 4 floats of round 0 had not landed
    assert async_copy_sim.in_flight_mask(out[:MUTANT_BYTES // 4]).sum() == 4


def test_read_before_wait_sees_in_flight_bytes():
    _src, out = _launch("no wait", rounds=1)
    with pytest.raises(async_copy_sim.ReadBeforeWait) as info:
        async_copy_sim.check_no_in_flight(out, "round trip")
    assert "0x7D" in str(info.value) and "a missing wait" in str(info.value)


def test_read_before_wait_then_reusing_the_barrier_is_named():
    """Without the wait, over two rounds, the threads' interleaving decides which of three ways the
    mistake shows (a loaded machine changes it), and each is named:

    * round 1 arrives on `full` while its phase 0 is still open (more arrivals than its count);
    * another thread's polls landed round 0's copy first, and its readers saw bytes still in flight;
    * the other 31 threads ran through both rounds, arriving twice on `empty`, before thread 0 first
      polled it: `empty` is then in phase 1, which waits for thread 0's own two arrivals, and thread 0
      waits forever (a GPU would hang too). This run once hung a CI run for 75 minutes: the launch is
      bounded here, and the time limit's report names the barrier and the arrivals that never came."""
    try:
        with finishes_within("round trip", HANG_LIMIT_S):
            _src, out = _launch("no wait", rounds=2)
    except async_copy_sim.MbarrierProtocolError as exc:
        assert re.search("more arrivals on bars.0. than its count", str(exc)), str(exc)
        return
    except CheckFailed as exc:
        assert "did not finish" in str(exc) and "mbarrier bars[1]" in str(exc), str(exc)
        assert "arrivals never came" in str(exc), str(exc)
        return
    with pytest.raises(async_copy_sim.ReadBeforeWait, match="read the destination before its data landed"):
        async_copy_sim.check_no_in_flight(out, "round trip")


def test_missing_fence_is_named():
    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="not made visible to the copy engine"):
        _launch("no fence")


def test_barrier_used_before_init_is_named():
    @cuda.jit
    def early(out):
        bars = cuda.shared.array(1, np.uint64)
        if cuda.threadIdx.x == 1:
            mbarrier_init(bars, 0, 1)
        out[0] = mbarrier_try_wait_parity(bars, 0, 0) if cuda.threadIdx.x == 0 else 0

    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="used before mbarrier_init"):
        early[1, 1](np.zeros(1, np.int32))


@pytest.mark.parametrize("nbytes, message", [(24, "positive multiple of 16"), (0, "positive multiple of 16")])
def test_bulk_copy_sizes_refused(nbytes, message):
    from kernel_lab.device.bulk_copy import cp_async_bulk
    from kernel_lab.device.mbarrier import fence_mbarrier_init

    @cuda.jit
    def copy(src, n):
        tile = cuda.shared.array(64, np.float32)
        bars = cuda.shared.array(1, np.uint64)
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
        cp_async_bulk(tile, 0, src, 0, n, bars, 0)

    with pytest.raises(async_copy_sim.MbarrierProtocolError, match=message):
        copy[1, 1](np.zeros(64, np.float32), nbytes)


def test_misaligned_source_refused():
    from kernel_lab.device.bulk_copy import cp_async_bulk
    from kernel_lab.device.mbarrier import fence_mbarrier_init

    @cuda.jit
    def copy(src):
        tile = cuda.shared.array(64, np.float32)
        bars = cuda.shared.array(1, np.uint64)
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
        cp_async_bulk(tile, 0, src, 1, 16, bars, 0)  # element 1: 4 bytes past an aligned start

    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="16-byte aligned"):
        copy[1, 1](np.zeros(64, np.float32))


@pytest.mark.parametrize("nbytes", hac.SIZES_BYTES)
def test_store_round_trip_two_rounds(nbytes):
    src, out = hac.run_round_trip(hac.make_store_round_trip(), nbytes, rounds=2, tiles=2)
    np.testing.assert_array_equal(out, 2 * src)


def _launch_store(mutant):
    return hac.run_round_trip(hac.make_store_round_trip(mutant), MUTANT_BYTES, rounds=2, tiles=2)


@pytest.mark.parametrize("mutant, message", [
    ("no commit", "the store was never committed: without cp_async_bulk_commit_group"),
    ("no store wait", "must call cp_async_bulk_wait_group_read.0. after the commit"),
])
def test_store_source_reused_too_early_is_named(mutant, message):
    with pytest.raises(async_copy_sim.MbarrierProtocolError) as info:
        _launch_store(mutant)
    text = str(info.value)
    assert "was written again before the copy engine had read it" in text
    assert re.search(message, text), text
    assert "cp_async_bulk_store(out, r * n, tile, n, nbytes)" in text  # the store's line is named


def test_store_without_proxy_fence_is_named():
    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="fence_proxy_async_shared.. after its writes"):
        _launch_store("no proxy fence")


def _store_probe(overwrite_before_wait, wait):
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk_commit_group,
        cp_async_bulk_store,
        cp_async_bulk_wait_group_read,
        fence_proxy_async_shared,
    )

    @cuda.jit
    def probe(out, seen):
        tile = cuda.shared.array(8, np.float32)
        for i in range(8):
            tile[i] = i + 1
        fence_proxy_async_shared()
        cp_async_bulk_store(out, 0, tile, 0, 32)
        cp_async_bulk_commit_group()
        seen[0] = out[0]  # before the wait: the store has not landed
        if overwrite_before_wait:
            tile[0] = -1
        if wait:
            cp_async_bulk_wait_group_read(0)
            seen[1] = out[0]

    return probe


def test_store_lands_at_the_wait():
    out, seen = np.zeros(8, np.float32), np.zeros(2, np.float32)
    with finishes_within("store probe", HANG_LIMIT_S):
        _store_probe(False, True)[1, 1](out, seen)
    assert seen.tolist() == [0, 1] and out.tolist() == list(range(1, 9))


def test_a_thread_that_exits_before_its_store_wait_is_named():
    """Never waited: the block's shared memory is released at its exit while the copy engine may still
    read it. Named at the thread's exit, with the store's line (before: it landed silently at the end)."""
    with (pytest.raises(async_copy_sim.MbarrierProtocolError) as info,
          finishes_within("store probe", HANG_LIMIT_S)):
        _store_probe(False, False)[1, 1](np.zeros(8, np.float32), np.zeros(2, np.float32))
    text = str(info.value)
    assert "thread (0, 0, 0) of block (0, 0, 0) exits with a bulk store" in text, text
    assert "cp_async_bulk_store(out, 0, tile, 0, 32), committed, but no cp_async_bulk_wait_group_read" in text, text
    assert "cp_async_bulk_wait_group_read(0) before it exits" in text, text


def test_a_thread_that_exits_with_an_uncommitted_store_is_named():
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk_store,
        fence_proxy_async_shared,
    )

    @cuda.jit
    def store_no_commit(out):
        tile = cuda.shared.array(8, np.float32)
        tid = cuda.threadIdx.x
        if tid < 8:
            tile[tid] = tid
        fence_proxy_async_shared()
        cuda.syncthreads()
        if tid == 1:
            cp_async_bulk_store(out, 0, tile, 0, 32)

    with (pytest.raises(async_copy_sim.MbarrierProtocolError, match=r"thread \(1, 0, 0\) of block \(0, 0, 0\) "
                        r"exits with a bulk store.*never committed"),
          finishes_within("store probe", HANG_LIMIT_S)):
        store_no_commit[1, 32](np.zeros(8, np.float32))


def test_a_store_from_a_tile_still_being_loaded_is_named():
    """The load's barrier not waited on: the store's source is bytes in flight."""
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk,
        cp_async_bulk_commit_group,
        cp_async_bulk_store,
        cp_async_bulk_wait_group_read,
    )
    from kernel_lab.device.mbarrier import fence_mbarrier_init

    @cuda.jit
    def copy_no_wait(src, out):
        tile = cuda.shared.array(16, np.float32)
        bars = cuda.shared.array(1, np.uint64)
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
        mbarrier_arrive_expect_tx(bars, 0, 64)
        cp_async_bulk(tile, 0, src, 0, 64, bars, 0)
        cp_async_bulk_store(out, 0, tile, 0, 64)
        cp_async_bulk_commit_group()
        cp_async_bulk_wait_group_read(0)

    with (pytest.raises(async_copy_sim.MbarrierProtocolError) as info,
          finishes_within("copy without wait", HANG_LIMIT_S)):
        copy_no_wait[1, 1](np.ones(16, np.float32), np.zeros(16, np.float32))
    text = str(info.value)
    assert "its source tile is the destination of a bulk copy of 64 bytes issued at" in text, text
    assert "has not landed yet (64 of its bytes still in flight)" in text, text
    assert "Wait on the load's barrier (bars[0]" in text and "visible to the copy engine" not in text, text


def test_store_source_overwritten_by_its_own_thread_is_named_at_the_wait():
    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="written again before the copy engine"):
        _store_probe(True, True)[1, 1](np.zeros(8, np.float32), np.zeros(2, np.float32))


def test_ptx_assembles_for_sm90a_and_sm80_is_refused(offline_script):
    out = offline_script("hopper_async_copy.py")
    for kernel in ("round_trip", "store_round_trip"):
        assert f"{kernel}: ptxas -arch=sm_90a" in out, out
    for kernel in ("round_trip", "store_round_trip", "store_only"):
        assert f"{kernel}: sm_80 refused (KernelLabArgumentError)" in out, out
    assert "cp_async_bulk_store needs compute capability 9.0" in out
    for kernel in ("tile_copy", "rounds_copy", "ring_copy"):  # 08.1's, the package's copies
        assert f"08.1 {kernel}: ptxas -arch=sm_90a" in out, out


# --- a grid of many blocks: each block has its own barriers, copies, store groups and fenced bytes ---

GRID_LIMIT_S = 60


def _grid_round_trip():
    """The round trip of hac.make_round_trip with each block on its own rows of src and out."""
    from kernel_lab.device.bulk_copy import cp_async_bulk
    from kernel_lab.device.mbarrier import fence_mbarrier_init, mbarrier_wait_parity

    @cuda.jit
    def grid_round_trip(src, out, n, rounds):
        tile = cuda.shared.array(0, np.float32)
        bars = cuda.shared.array(2, np.uint64)
        tid = cuda.threadIdx.x
        first = cuda.blockIdx.x * rounds * n
        if tid == 0:
            mbarrier_init(bars, 0, 1)
            mbarrier_init(bars, 1, cuda.blockDim.x)
            fence_mbarrier_init()
        cuda.syncthreads()
        for r in range(rounds):
            if tid == 0:
                mbarrier_wait_parity(bars, 1, (r & 1) ^ 1)
                mbarrier_arrive_expect_tx(bars, 0, 4 * n)
                cp_async_bulk(tile, 0, src, first + r * n, 4 * n, bars, 0)
            mbarrier_wait_parity(bars, 0, r & 1)
            for i in range(tid, n, cuda.blockDim.x):
                out[first + r * n + i] = tile[i]
            mbarrier_arrive(bars, 1)

    return grid_round_trip


@pytest.mark.parametrize("order", ["in order", "interleaved"])
def test_a_grid_of_blocks_reuses_barriers_at_the_same_addresses(order):
    """Five blocks, three rounds each (phases 0, 1, 0 of both barriers). In order, a block's shared
    arrays may sit at host addresses an earlier block used; interleaved, the blocks run at once."""
    blocks, rounds, n = 5, 3, 64
    src = np.random.default_rng(1).standard_normal(blocks * rounds * n).astype(np.float32)
    out = np.zeros_like(src)
    with ksim.block_schedule(order, seed=2), finishes_within("grid round trip", GRID_LIMIT_S):
        _grid_round_trip()[blocks, 32, 0, 4 * n](src, out, n, rounds)
    async_copy_sim.check_no_in_flight(out, "grid round trip")
    np.testing.assert_array_equal(out, src)


def test_a_blocks_bulk_stores_land_before_its_end_or_are_named():
    """Stores land at their wait, before their block ends: in order, block b sees block b - 1's output.
    Without the wait, block 0's thread 0 exits with its store pending, and that is named."""
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk_commit_group,
        cp_async_bulk_store,
        cp_async_bulk_wait_group_read,
        fence_proxy_async_shared,
    )

    @cuda.jit
    def store_then_wait(out, seen, wait):
        tile = cuda.shared.array(8, np.float32)
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        if tid < 8:
            tile[tid] = 10 * b + tid
        fence_proxy_async_shared()
        cuda.syncthreads()
        if tid == 0:
            seen[b] = out[8 * (b - 1)] if b > 0 else -1.0  # block b - 1 has ended
            cp_async_bulk_store(out, 8 * b, tile, 0, 32)
            cp_async_bulk_commit_group()
            if wait:
                cp_async_bulk_wait_group_read(0)

    out, seen = np.zeros(32, np.float32), np.zeros(4, np.float32)
    with finishes_within("stores", GRID_LIMIT_S):
        store_then_wait[4, 32](out, seen, True)
    assert seen.tolist() == [-1, 0, 10, 20]
    np.testing.assert_array_equal(out, (10 * np.arange(4)[:, None] + np.arange(8)).reshape(-1))
    with (pytest.raises(async_copy_sim.MbarrierProtocolError, match=r"block \(0, 0, 0\) exits with a bulk store"),
          finishes_within("stores", GRID_LIMIT_S)):
        store_then_wait[4, 32](out, seen, False)


def test_a_block_starts_from_fresh_state():
    """Block 0 initialises its barrier and fences its tile; block 1 (whose shared arrays may sit where
    block 0's were) skips both: each omission is named in block 1, not covered by block 0's."""
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk_commit_group,
        cp_async_bulk_store,
        cp_async_bulk_wait_group_read,
        fence_proxy_async_shared,
    )

    @cuda.jit
    def only_block0_fences(out):
        tile = cuda.shared.array(8, np.float32)
        tid = cuda.threadIdx.x
        if tid < 8:
            tile[tid] = tid  # the same bytes in every block
        if cuda.blockIdx.x == 0:
            fence_proxy_async_shared()
        cuda.syncthreads()
        if tid == 0:
            cp_async_bulk_store(out, 8 * cuda.blockIdx.x, tile, 0, 32)
            cp_async_bulk_commit_group()
            cp_async_bulk_wait_group_read(0)

    @cuda.jit
    def only_block0_inits(seen):
        bars = cuda.shared.array(1, np.uint64)
        if cuda.blockIdx.x == 0:
            mbarrier_init(bars, 0, 1)
        seen[cuda.blockIdx.x] = mbarrier_try_wait_parity(bars, 0, 1)

    with finishes_within("fresh state", GRID_LIMIT_S):
        with pytest.raises(async_copy_sim.MbarrierProtocolError, match=r"block \(1, 0, 0\).*fence_proxy_async_shared"):
            only_block0_fences[2, 32](np.zeros(16, np.float32))
        with pytest.raises(async_copy_sim.MbarrierProtocolError, match=r"block \(1, 0, 0\).*used before mbarrier_init"):
            only_block0_inits[2, 1](np.zeros(2, np.int32))
