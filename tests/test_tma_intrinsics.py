"""Hopper's tensor copies (kernel_lab.device.tma, .tensor_map, .tma_sim) in the simulator, and their PTX
assembled for sm_90a without a GPU.

The tiled copy and transpose kernels, their mutants and the layout probe live in scripts/hopper_tma.py
(the same file runs them on an H100/H200). Sizes that are not multiples of the box test both edges:
the load reads zeros outside the array, the store writes nothing there but the rest of a row's last
16-byte chunk, as an H200 does (run_tiles pads every array, one chunk more than that, with a sentinel
that must survive). The swizzle layouts are also held to the PTX ISA's tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import kernel_lab.simulator as ksim
from kernel_lab.check import CheckFailed, finishes_within
from kernel_lab.environment import on_simulator
from kernel_lab.validate import KernelLabArgumentError
from numba import cuda

pytestmark = pytest.mark.skipif(not on_simulator(), reason="runs the simulator's models of the intrinsics")

import hopper_tma as ht
from kernel_lab.device import async_copy_sim
from kernel_lab.device.tensor_map import TensorMap2D, box_offsets

ksim.install()
HANG_LIMIT_S = 4

# (dtype, box, swizzle, (rows, cols), transpose): every swizzle mode, both edges, three element types
TILE_CASES = [
    (np.float32, (16, 32), 0, (37, 45), False),
    (np.float32, (16, 32), 0, (37, 45), True),
    (np.float32, (16, 32), 0, (5, 3), False),
    (np.float32, (8, 8), 32, (19, 21), False),
    (np.float32, (8, 8), 32, (19, 21), True),
    (np.float32, (16, 16), 64, (37, 45), False),
    (np.float32, (16, 16), 64, (37, 45), True),
    (np.float32, (32, 32), 128, (37, 45), False),
    (np.float32, (32, 32), 128, (37, 45), True),
    (np.float32, (8, 16), 128, (19, 21), False),  # rows narrower than the swizzle span
    (np.float16, (64, 64), 128, (70, 70), True),
    (np.int8, (32, 64), 64, (33, 70), False),
]


@pytest.fixture(autouse=True)
def _bounded_launches():
    """No launch of this file may spin for ever (the 'expect too many' mutant hangs, as on a GPU)."""
    with ksim.time_limit(120):
        yield


def _case_id(case):
    dtype, box, swizzle, size, transpose = case
    return f"{np.dtype(dtype).name}-box{box[0]}x{box[1]}-sw{swizzle}-{size[0]}x{size[1]}-{'T' if transpose else 'copy'}"


@pytest.mark.parametrize("case", TILE_CASES, ids=_case_id)
def test_tiled_copy_and_transpose_match_numpy(case):
    dtype, box, swizzle, (rows, cols), transpose = case
    a = ht.test_input(rows, cols, dtype)
    out = ht.run_tiles(ht.make_tile_kernel(dtype, transpose), a, box, swizzle, transpose)
    async_copy_sim.check_no_in_flight(out, "tiles")
    assert ht.check_tiles(out, a, transpose) is None, ht.check_tiles(out, a, transpose)


@pytest.mark.parametrize("dtype, cols, written", [(np.float32, 3, 1), (np.float32, 45, 3), (np.int8, 70, 10),
                                                  (np.float32, 8, 0)])
def test_a_store_writes_the_row_s_last_16_byte_chunk_whole_and_no_further(dtype, cols, written):
    # as measured on an H200 (scripts/probes/tma_edge_granularity.py): the copy engine writes whole
    # 16-byte chunks, so the padding after a row's last column, up to the chunk's end, gets the tile's
    # zeros; the next chunk and the spare row keep the sentinel
    rows, box = 5, ((16, 32) if dtype == np.float32 else (8, 16))
    a = ht.test_input(rows, cols, dtype)
    out = ht.run_tiles(ht.make_tile_kernel(dtype), a, box, 0, False)
    assert np.array_equal(out[:rows, :cols], a)
    assert (out[:rows, cols:cols + written] == 0).all()
    assert (out[:rows, cols + written:] == ht.SENTINEL).all() and (out[rows:] == ht.SENTINEL).all()
    assert out.shape[1] >= cols + written + 16 // np.dtype(dtype).itemsize  # a chunk to spare, so a wider write shows


@pytest.mark.parametrize("swizzle, box", [(32, (8, 8)), (64, (16, 16)), (128, (32, 32))])
def test_reading_a_swizzled_tile_as_plain_rows_is_wrong(swizzle, box):
    """The check can fail: a kernel that ignores the swizzle order reads the wrong elements."""
    a = ht.test_input(*box, np.float32)
    out = ht.run_tiles(ht.make_tile_kernel(np.float32, True), a, box, swizzle, True, read_as=0)
    assert ht.check_tiles(out, a, True) is not None


# PTX ISA 5.5.7 "Swizzling Modes": each row is one 128-byte line of a tile aligned to the pattern's
# repeat, each entry the 16-byte chunk found at that position
PTX_TABLES = {
    32: [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6]],
    64: [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5], [3, 2, 1, 0, 7, 6, 5, 4]],
    128: [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5], [3, 2, 1, 0, 7, 6, 5, 4],
          [4, 5, 6, 7, 0, 1, 2, 3], [5, 4, 7, 6, 1, 0, 3, 2], [6, 7, 4, 5, 2, 3, 0, 1], [7, 6, 5, 4, 3, 2, 1, 0]],
}


@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_box_offsets_follow_the_ptx_tables(swizzle):
    rows, cols = 16, swizzle // 4  # float32 rows as wide as the span: the rows follow each other
    got = box_offsets((rows, cols), 4, swizzle)
    table = PTX_TABLES[swizzle]
    for r in range(rows):
        for c in range(cols):
            linear = r * swizzle + c * 4
            line, within = divmod(linear, 128)
            want = line * 128 + table[line % len(table)][within // 16] * 16 + linear % 16
            assert got[r, c] == want, (r, c, got[r, c], want)


def test_box_offsets_of_a_tile_inside_the_pattern():
    """A tile 128-byte aligned but 3 lines into the 1024-byte repeat starts in the pattern's 4th row
    (the Programming Guide: offset = (address / 128) % 8, smem[y][((y + offset) % 8) ^ x])."""
    got = box_offsets((8, 32), 4, 128, base_address=3 * 128)
    for y in range(8):
        for x in range(8):  # 16-byte chunks
            assert got[y, 4 * x] == y * 128 + (((y + 3) % 8) ^ x) * 16


def test_layout_probe_pads_narrow_rows_to_the_span():
    got, want = ht.run_layout_probe(np.float32, (8, 16), 128)
    np.testing.assert_array_equal(got, want)
    assert (got == ht.SENTINEL).sum() == 8 * 16  # half of each 128-byte row is padding, left alone


def test_map_attributes():
    d = cuda.to_device(np.zeros((40, 64), np.float16))
    m = TensorMap2D(d[:37, :45], (16, 32), "64B")
    assert (m.shape, m.box, m.swizzle, m.row_pitch) == ((37, 45), (16, 32), 64, 128)
    assert (m.box_bytes, m.smem_bytes) == (16 * 32 * 2, 16 * 64)
    assert TensorMap2D(d, (16, 16), 128).smem_bytes == 16 * 128  # rows padded to the span
    assert TensorMap2D(d, (16, 16), 0).smem_bytes == 16 * 32


def _launch(mutant, swizzle=128, box=(32, 32)):
    a = ht.test_input(37, 45, np.float32)
    return a, ht.run_tiles(ht.make_tile_kernel(np.float32, False, mutant), a, box, swizzle)


def test_expect_tx_too_large_hangs_and_names_the_box():
    with pytest.raises(CheckFailed) as info, finishes_within("tma", HANG_LIMIT_S):
        _launch("expect too many")
    text = str(info.value)
    assert "did not finish" in text and "16 announced bytes will never come" in text, text
    assert "the 32 x 32 float32 box at x=0, y=0" in text and "tmap.box_bytes" in text, text


def test_expect_tx_too_small_is_named_with_the_box():
    with pytest.raises(async_copy_sim.MbarrierProtocolError) as info, finishes_within("tma", 60):
        _launch("expect too few")
    text = str(info.value)
    assert "completed its phase 0 while the tensor copy" in text, text
    assert "rows x cols x element size = 4096 bytes" in text, text


@pytest.mark.parametrize("mutant, message", [
    ("no tensormap fence", "used before this block acquired it"),
    ("misaligned tile", "starts 16 bytes past a 128-byte boundary"),
    ("no proxy fence", r"fence_proxy_async_shared\(\) after its writes"),
])
def test_protocol_mistakes_are_named(mutant, message):
    with pytest.raises(async_copy_sim.MbarrierProtocolError, match=message), finishes_within("tma", 60):
        _launch(mutant)


def test_reading_before_the_wait_sees_bytes_in_flight():
    with finishes_within("tma", 60):
        _a, out = _launch("no wait")
    with pytest.raises(async_copy_sim.ReadBeforeWait, match="read the destination before its data landed"):
        async_copy_sim.check_no_in_flight(out[:37, :45], "tiles")


def _copy_kernel(wait_load, wait_store):
    """08.2's tma_copy with the load's wait or the store's wait left out."""
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk_commit_group,
        cp_async_bulk_wait_group_read,
    )
    from kernel_lab.device.mbarrier import (
        fence_mbarrier_init,
        mbarrier_arrive_expect_tx,
        mbarrier_init,
        mbarrier_wait_parity,
    )
    from kernel_lab.device.tma import (
        cp_async_bulk_tensor_2d_load,
        cp_async_bulk_tensor_2d_store,
        fence_proxy_tensormap_acquire,
        tile_start,
    )

    @cuda.jit
    def copy(src_map, dst_map, box_bytes):
        smem = cuda.shared.array(0, np.float32)
        bars = cuda.shared.array(1, np.uint64)
        t0 = tile_start(smem, 1024)
        if cuda.threadIdx.x == 0:
            fence_proxy_tensormap_acquire(src_map)
            fence_proxy_tensormap_acquire(dst_map)
            mbarrier_init(bars, 0, 1)
            fence_mbarrier_init()
            mbarrier_arrive_expect_tx(bars, 0, box_bytes)
            cp_async_bulk_tensor_2d_load(smem, t0, src_map, 0, 0, bars, 0)
            if wait_load:
                mbarrier_wait_parity(bars, 0, 0)
            cp_async_bulk_tensor_2d_store(dst_map, 0, 0, smem, t0)
            cp_async_bulk_commit_group()
            if wait_store:
                cp_async_bulk_wait_group_read(0)

    return copy


def _run_copy(wait_load, wait_store):
    a = ht.test_input(8, 8, np.float32)
    d_in, d_out = cuda.to_device(a), cuda.to_device(np.zeros_like(a))
    src, dst = TensorMap2D(d_in, (8, 8), 128), TensorMap2D(d_out, (8, 8), 128)
    _copy_kernel(wait_load, wait_store)[1, 32, 0, 1024 + src.smem_bytes](src, dst, src.box_bytes)
    return a, d_out.copy_to_host()


def test_store_of_a_box_still_in_flight_says_it_has_not_landed():
    """The "no wait" mistake: the store's tile is the load's, whose barrier nobody waited on."""
    with pytest.raises(async_copy_sim.MbarrierProtocolError) as info, finishes_within("tma", HANG_LIMIT_S):
        _run_copy(False, True)
    text = str(info.value)
    assert "cp_async_bulk_tensor_2d_store: its source smem is the destination of the tensor load of the 8 x 8 " \
           "float32 box at x=0, y=0" in text, text
    assert "has not landed yet (256 of its bytes still in flight)" in text, text
    assert "Wait on the load's barrier (bars[0]" in text and "were not made visible" not in text, text


def test_tensor_store_not_waited_for_is_named_at_the_exit():
    with finishes_within("tma", HANG_LIMIT_S):
        a, out = _run_copy(True, True)
    np.testing.assert_array_equal(out, a)
    with pytest.raises(async_copy_sim.MbarrierProtocolError) as info, finishes_within("tma", HANG_LIMIT_S):
        _run_copy(True, False)
    text = str(info.value)
    assert "thread (0, 0, 0) of block (0, 0, 0) exits with a bulk store" in text, text
    assert "the tensor store of smem to the 8 x 8 float32 box at x=0, y=0" in text, text
    assert "cp_async_bulk_tensor_2d_store(dst_map, 0, 0, smem, t0), committed, but no " \
           "cp_async_bulk_wait_group_read waited for its group" in text, text


def test_map_of_another_element_type_is_named():
    a = ht.test_input(37, 45, np.float16)
    with (pytest.raises(async_copy_sim.MbarrierProtocolError, match="describes float16 elements, but the shared tile"),
          finishes_within("tma", 60)):
        ht.run_tiles(ht.make_tile_kernel(np.float32, False), a, (32, 64), 128)


def test_box_past_the_tile_is_named():
    a = ht.test_input(37, 45, np.float32)
    with (pytest.raises(async_copy_sim.MbarrierProtocolError, match="the box runs past the tile"),
          finishes_within("tma", 60)):
        ht.run_tiles(ht.make_tile_kernel(np.float32, False), a, (32, 32), 128, shared_bytes=1024 + 2048)


def test_store_at_negative_coordinates_and_plain_arrays_are_refused():
    from kernel_lab.device.tma import (
        cp_async_bulk_tensor_2d_store,
        fence_proxy_tensormap_acquire,
    )

    @cuda.jit
    def store(tmap, x, use_map):
        tile = cuda.shared.array(64, np.float32)
        fence_proxy_tensormap_acquire(tmap)
        cp_async_bulk_tensor_2d_store(tmap if use_map else tile, x, 0, tile, 0)

    m = TensorMap2D(cuda.to_device(np.zeros((8, 8), np.float32)), (8, 8))
    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="not start before it"):
        store[1, 1](m, -8, True)
    with pytest.raises(async_copy_sim.MbarrierProtocolError, match="must be the TensorMap2D object itself"):
        store[1, 1](m, 0, False)


@pytest.mark.parametrize("make, message", [
    (lambda d: TensorMap2D(d, (300, 8)), "box rows = 300: each box dimension is 1 .. 256"),
    (lambda d: TensorMap2D(d, (8, 6)), r"a box row is 6 x 4 = 24 bytes; it must be a multiple of 16 bytes"),
    (lambda d: TensorMap2D(d, (8, 32), 64), "swizzle 64B takes box rows of at most 64 bytes, but this box's rows are 128"),
    (lambda d: TensorMap2D(d, (8, 8), 48), "swizzle is one of 0"),
    (lambda d: TensorMap2D(d[:, 1:], (8, 8)), "must be 16-byte aligned in global memory"),
    (lambda d: TensorMap2D(d.T, (8, 8)), "the elements of a row must be contiguous"),
    (lambda d: TensorMap2D(d[:, ::2], (8, 8)), "the elements of a row must be contiguous"),
    (lambda d: TensorMap2D(cuda.to_device(np.zeros((8, 13), np.float32)), (8, 8)),
     "rows are 52 bytes apart .its row pitch.; a tensor map needs a positive multiple of 16"),
    (lambda d: TensorMap2D(np.zeros((8, 64), np.float32), (8, 8)), r"must be a device array \(cuda.to_device"),
    (lambda d: TensorMap2D(cuda.to_device(np.zeros((2, 8, 8), np.float32)), (8, 8)), "must be 2-D"),
    (lambda d: TensorMap2D(cuda.to_device(np.zeros((8, 8), np.complex64)), (8, 8)), "has no tensor-map type"),
])
def test_host_validation_messages(make, message):
    d = cuda.to_device(np.zeros((64, 64), np.float32))
    with pytest.raises(KernelLabArgumentError, match=message):
        make(d)


def test_ptx_assembles_for_sm90a_and_sm80_is_refused(offline_script):
    out = offline_script("hopper_tma.py")
    for kernel in ("tile_copy", "tile_transpose", "tile_copy_f16", "layout_probe"):
        assert f"{kernel}: ptxas -arch=sm_90a" in out, out
    assert "fence.proxy.tensormap::generic.acquire.sys [%rd" in out, out
    for kernel in ("load_only", "store_only"):
        assert f"{kernel}: sm_80 refused (KernelLabArgumentError)" in out, out
    assert "cp_async_bulk_tensor_2d_load needs compute capability 9.0" in out
    assert "a tensor map has no equivalent there" in out, out  # what to do on an older GPU, for TMA
    assert "cp_async_bulk_tensor_2d_store needs compute capability 9.0" in out
    for kernel in ("tma_copy", "tma_transpose", "tma_transpose_ring"):  # 08.2's, the package's copies
        assert f"08.2 {kernel}: ptxas -arch=sm_90a: ok" in out, out
