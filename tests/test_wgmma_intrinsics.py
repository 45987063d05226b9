"""Hopper's wgmma (kernel_lab.device.wgmma) in the simulator, its layouts against the PTX manual's,
and its PTX assembled for sm_90a without a GPU.

The tile kernel and its mutants live in scripts/hopper_wgmma.py (the same file runs them on an
H100/H200). Each mutant is one protocol mistake, caught with a message that names it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import kernel_lab.simulator as ksim
from kernel_lab.device.wgmma_layout import (
    TileLayout,
    decode_desc,
    encode_desc,
    fragment_coordinates,
    swizzle_address,
)
from kernel_lab.environment import on_simulator
from numba import (
    cuda,  # at module level: the simulator swaps the kernels' module's `cuda` for its own
)

needs_simulator = pytest.mark.skipif(not on_simulator(), reason="runs the simulator's model of wgmma")

ksim.install()


@pytest.fixture(autouse=True)
def _bounded_launches():
    """No launch of this file may spin for ever (none should: the model never waits on other threads)."""
    with ksim.time_limit(120):
        yield


# --- the host-side layouts ---------------------------------------------------------------------------

def test_descriptor_fields_round_trip():
    desc = encode_desc(0x2A40, lbo=128, sbo=1024, swizzle=128)
    assert desc & 0x3FFF == 0x2A4 and (desc >> 16) & 0x3FFF == 8 and (desc >> 32) & 0x3FFF == 64
    assert desc >> 62 == 1 and (desc >> 49) & 7 == 0
    assert decode_desc(desc) == {"address": 0x2A40, "lbo": 128, "sbo": 1024, "base_offset": 0, "swizzle": 128}
    for swizzle, code in ((0, 0), (128, 1), (64, 2), (32, 3)):
        assert encode_desc(0, 16, 16, swizzle) >> 62 == code


def test_swizzle_patterns():
    """Swizzle<B,4,3>: the 16-byte chunk (bits 4..) XOR the row within 8 (bits 7..)."""
    rows = np.arange(8)[:, None]
    chunks = np.arange(8)[None, :]
    got = swizzle_address(rows * 128 + chunks * 16, 128)
    np.testing.assert_array_equal(got, rows * 128 + (chunks ^ rows) * 16)  # 128 B: all 3 bits
    chunk4 = np.arange(4)[None, :]
    got = swizzle_address(rows * 64 + chunk4 * 16, 64)  # 64 B rows: row r at byte 64 r, bits 7-8 = r // 2
    np.testing.assert_array_equal(got, rows * 64 + (chunk4 ^ (rows // 2 % 4)) * 16)
    chunk2 = np.arange(2)[None, :]
    got = swizzle_address(rows * 32 + chunk2 * 16, 32)  # 32 B rows: bit 7 = r // 4
    np.testing.assert_array_equal(got, rows * 32 + (chunk2 ^ (rows // 4 % 2)) * 16)
    np.testing.assert_array_equal(swizzle_address(np.arange(4096), 0), np.arange(4096))


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("itemsize", [1, 2])
def test_tile_layout_is_a_permutation_within_core_matrices(swizzle, itemsize):
    layout = TileLayout(64, 128 // itemsize, itemsize, swizzle)
    offsets = layout.byte_offsets()
    assert sorted(offsets.ravel().tolist()) == list(range(0, layout.nbytes, itemsize))
    # every 16-byte chunk of a row stays whole (the swizzle moves chunks, never bytes within one)
    chunk = offsets.reshape(64, -1, 16 // itemsize)
    np.testing.assert_array_equal(np.diff(chunk, axis=2), itemsize)


def test_tile_layout_128b_matches_the_manual():
    """128-byte swizzle, fp16, K-major: rows 128 bytes apart, 8-row groups SBO = 1024 apart, and
    chunk c of row r stored at chunk c ^ (r % 8)."""
    layout = TileLayout(16, 64, 2, 128)
    assert (layout.lbo, layout.sbo) == (16, 1024)
    off = layout.byte_offsets()
    assert off[0, 0] == 0 and off[1, 0] == 128 + 16 and off[9, 8] == 1024 + 128 + 0
    assert off[3, 17] == 3 * 128 + ((17 * 2 // 16) ^ 3) * 16 + 2
    assert layout.k_step_offset(1) == 32 and layout.k_step_offset(3) == 96
    plain = TileLayout(16, 32, 2, 0)
    assert (plain.lbo, plain.sbo) == (128, 512)
    assert plain.byte_offsets()[9, 9] == 512 + 128 + 16 + 2 and plain.k_step_offset(1) == 256
    narrow = TileLayout(16, 64, 2, 32)  # four 32-byte blocks of 16 x 32 bytes
    assert narrow.k_step_offset(1) == 16 * 32 and narrow.k_step_offset(3) == 3 * 16 * 32


def test_fragment_layout_matches_the_manual():
    """wgmma's D: warp w owns rows 16w..16w+15; lane (g, t) holds columns 8j + 2t, +1 of rows
    16w + g and 16w + g + 8, registers 4j..4j+3 (the figure for m64nNk16's D)."""
    n = 64
    coords = fragment_coordinates(n)
    assert coords.shape == (128, 32, 2)
    cover = np.zeros((64, n), int)
    np.add.at(cover, (coords[..., 0], coords[..., 1]), 1)
    assert (cover == 1).all()
    assert coords[0, :4].tolist() == [[0, 0], [0, 1], [8, 0], [8, 1]]
    assert coords[5, 4].tolist() == [1, 8 + 2]  # lane 5: g = 1, t = 1; register 4 = column block 1
    assert coords[32 + 31, 31].tolist() == [16 + 7 + 8, 56 + 6 + 1]  # warp 1, g = 7, t = 3, last register


# --- the model ---------------------------------------------------------------------------------------

def _reference(kind, a, b):
    return a @ b


def _check_product(kind, a, b, c):
    ref = a @ b
    if kind == "s8":
        np.testing.assert_array_equal(c, ref.astype(np.int64).astype(np.int32))
    else:
        # float64 reference; the model adds each K-step's exact product in float64 and rounds the sum
        # to float32 at each step: 1e-6 relative covers 4 roundings of unit roundoff 6e-8
        err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
        assert err < 1e-6, err


@needs_simulator
@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("kind, n", [("f16", 64), ("f16", 128), ("s8", 64), ("s8", 128), ("bf16", 64)])
def test_tile_product_against_numpy(kind, n, swizzle):
    import hopper_wgmma as hw

    k = 64 if kind != "s8" else 128  # two or four K-steps, one more 32-byte swizzled block for 32 B
    a, b, c = hw.run_gemm_tile(kind, n, k, swizzle, seed=n + swizzle)
    _check_product(kind, a, b, c)


@needs_simulator
def test_fragment_layout_in_the_model_with_index_coded_matrices():
    """A = identity (64 x 64 fp16), B[k, n] = 64 k + n (exact in fp16 up to 2048; here < 2048 only for
    k < 32, so B holds (k * 64 + n) % 1024): C = B's first 64 rows; a fragment in the wrong place shows."""
    import hopper_wgmma as hw

    n, k = 64, 64
    a = np.eye(64, k)
    b = ((np.arange(k)[:, None] * 64 + np.arange(n)[None, :]) % 1024).astype(np.float64)
    la, lb = hw.layouts("f16", n, k, 128)
    c = np.zeros((64, n), np.float32)

    d_c = cuda.to_device(c)
    hw.make_gemm_tile("f16", n, k, 128)[1, 128](cuda.to_device(la.place(hw.device_bits("f16", a))),
                                                 cuda.to_device(lb.place(hw.device_bits("f16", b.T.copy()))), d_c)
    np.testing.assert_array_equal(d_c.copy_to_host(), b[:64])


def _mutant(mutant, kind="f16"):
    import hopper_wgmma as hw

    return hw.run_gemm_tile(kind, 64, 64, 128, mutant=mutant)


@needs_simulator
@pytest.mark.parametrize("mutant, message", [
    ("no fence", r"before any wgmma_fence\(\) of this thread"),
    ("no wait", r"is read before the tensor cores wrote it: the wgmma is asynchronous, and no wgmma_wait_group"),
    ("no commit", r"never committed: wgmma_commit_group\(\) closes the group"),
    ("early exit", r"ended with 1 wgmma_mma_async still in flight .*committed but never waited on"),
    ("misaligned tile", r"128-byte swizzled tile repeats its pattern every 1024 bytes"),
    ("half a warpgroup", r"warpgroup 0 .*64 of its threads .*issued fewer wgmma_mma_async"),
    ("overwrite in flight", r"shared tile of B of the wgmma_mma_async at .* was written while the wgmma"),
])
def test_mutant_is_named(mutant, message):
    from kernel_lab.device.wgmma_sim import WgmmaProtocolError

    with pytest.raises(WgmmaProtocolError, match=message):
        _mutant(mutant)


@needs_simulator
def test_block_without_a_whole_warpgroup_is_named():
    import hopper_wgmma as hw
    from kernel_lab.device.wgmma_sim import WgmmaProtocolError

    la, lb = hw.layouts("f16", 64, 64, 128)
    kernel = hw.make_gemm_tile("f16", 64, 64, 128)
    with pytest.raises(WgmmaProtocolError, match="warpgroup 0 has only 64 of its 128"):
        kernel[1, 64](np.zeros(la.nbytes // 2, np.uint16), np.zeros(lb.nbytes // 2, np.uint16),
                      cuda.to_device(np.zeros((64, 64), np.float32)))


@needs_simulator
def test_unaligned_descriptor_start_is_named():
    from kernel_lab.device.wgmma import wgmma_desc
    from kernel_lab.device.wgmma_sim import WgmmaProtocolError

    @cuda.jit
    def desc_of(out):
        tile = cuda.shared.array(64, np.uint16, alignment=1024)
        out[0] = wgmma_desc(tile, 4, 16, 1024, 128)  # 8 bytes in

    with pytest.raises(WgmmaProtocolError, match="not a multiple of 16"):
        desc_of[1, 1](np.zeros(1, np.uint64))


@needs_simulator
def test_wait_group_one_keeps_the_newest_group_in_flight():
    """wait_group(1) completes all but the newest group: the older accumulator is readable, the newer not."""
    from kernel_lab.device.wgmma import (
        wgmma_acc_f32,
        wgmma_commit_group,
        wgmma_desc,
        wgmma_fence,
        wgmma_mma_async_f16,
        wgmma_wait_group,
    )
    from kernel_lab.device.wgmma_sim import WgmmaProtocolError

    layout = TileLayout(64, 16, 2, 32)
    a = np.ones((64, 16), np.float16).view(np.uint16)

    def make(read_newer):
        @cuda.jit
        def two_groups(src, out):
            tile = cuda.shared.array(1024, np.uint16, alignment=1024)
            for i in range(cuda.threadIdx.x, 1024, 128):
                tile[i] = src[i]
            cuda.syncthreads()
            d = wgmma_desc(tile, 0, layout.lbo, layout.sbo, 32)
            wgmma_fence()
            first = wgmma_mma_async_f16(d, d, wgmma_acc_f32(64), 0)
            wgmma_commit_group()
            second = wgmma_mma_async_f16(d, d, first, 1)
            wgmma_commit_group()
            wgmma_wait_group(1)
            out[cuda.threadIdx.x] = second[0] if read_newer else first[0]
            wgmma_wait_group(0)

        return two_groups

    out = np.zeros(128, np.float32)
    make(False)[1, 128](layout.place(a), out)
    assert (out == 16).all()  # a row of 16 ones times a column of 16 ones
    with pytest.raises(WgmmaProtocolError, match="no wgmma_wait_group covered it yet"):
        make(True)[1, 128](layout.place(a), out)


# --- offline: the PTX assembles for sm_90a, sm_80 is refused ---------------------------------------

def test_ptx_assembles_for_sm90a_and_sm80_is_refused(offline_script):
    out = offline_script("hopper_wgmma.py")
    for case in ("f16_n64_sw128", "f16_n128_sw128", "f16_n256_sw128", "bf16_n64_sw64", "s8_n64_sw128",
                 "s8_n128_sw0", "f16_n64_sw0"):
        assert f"gemm_tile_{case}: ptxas -arch=sm_90a: ok" in out, out
    assert "Performance Loss" not in out, out  # no serialised wgmma, setmaxnreg honoured
    assert "setmaxnreg: ptxas -arch=sm_90a: ok" in out
    for kernel in ("wgmma_step", "wgmma_gemm"):  # 08.3's, the package's copies, at N = 128
        assert f"08.3 {kernel}: ptxas -arch=sm_90a: ok" in out, out
    for name, intrinsic in (("fence_only", "wgmma_fence"), ("setmaxnreg", "setmaxnreg_dec")):
        assert f"{name}: sm_80 refused (KernelLabArgumentError): {intrinsic} needs compute capability 9.0" \
            in out, out
