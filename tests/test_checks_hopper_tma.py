"""kernel_lab.checks.hopper_tma (08.2): each mistake of the tensor-copy exercises, fed to its check as a
wrong kernel, is named; the package's copies of the learner's kernels pass. The wrong kernels are the
package's copies with one edit, as the mutants of tests/test_mutation_checks.py are the notebook's."""

from __future__ import annotations

import kernel_lab as kl
import kernel_lab.simulator as ksim
import pytest
from kernel_lab.check import CheckFailed
from kernel_lab.checks import hopper_tma as checks
from kernel_lab.hopper_async import tma_tiles as tt

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the checks' mistakes are named by the simulator's model")

HANG_S = 3  # a wrong kernel that hangs is stopped after this (the right ones take well under a second)


@pytest.fixture(autouse=True)
def _bounded(monkeypatch):
    monkeypatch.setattr(checks, "SMALL_S", HANG_S)
    with ksim.time_limit(120):  # nothing here may spin for ever
        yield


@pytest.mark.parametrize("check, kernel", [(checks.check_tma_copy, tt.tma_copy),
                                           (checks.check_tma_transpose, tt.tma_transpose),
                                           (checks.check_tma_transpose_ring, tt.tma_transpose_ring)])
def test_the_package_kernels_pass(check, kernel, capsys):
    check(kernel)
    assert "correct for all 4 cases" in capsys.readouterr().out


def test_the_swizzle_spreads_a_column_over_the_banks():
    assert tt.bank_ways(0) == (1, 32)  # plain rows of 128 bytes: a column is one bank
    assert tt.bank_ways(128) == (1, 4)  # 8 chunks of 16 bytes: 8 banks x 4 float32


COPY_MISTAKES = [
    ("        fence_proxy_tensormap_acquire(src_map)  #", "        pass  #", "used before this block acquired it"),
    ("mbarrier_arrive_expect_tx(bars, 0, BOX * BOX * 4)", "mbarrier_arrive_expect_tx(bars, 0, BOX * BOX)",
     "announced fewer bytes than its tensor copies deliver"),
    ("mbarrier_arrive_expect_tx(bars, 0, BOX * BOX * 4)", "mbarrier_arrive_expect_tx(bars, 0, TILE_ELEMS * 4)",
     "not the tile's size in shared memory"),
    ("        mbarrier_wait_parity(bars, 0, 0)  #", "        pass  #", "has not landed yet"),
    ("cp_async_bulk_tensor_2d_load(smem, t0, src_map, x, y, bars, 0)",
     "cp_async_bulk_tensor_2d_load(smem, t0, src_map, y, x, bars, 0)", "Another box|never written"),
    ("cp_async_bulk_tensor_2d_load(smem, t0, src_map,", "cp_async_bulk_tensor_2d_load(smem, t0 + 4, src_map,",
     "128-byte aligned"),
]


@pytest.mark.parametrize("old, new, message", COPY_MISTAKES, ids=[m[1] for m in COPY_MISTAKES])
def test_copy_mistakes_are_named(old, new, message, edit_kernel):
    with pytest.raises(CheckFailed, match=message):
        checks.check_tma_copy(edit_kernel(tt.tma_copy, old, new))


TRANSPOSE_MISTAKES = [
    ("v = smem[t_in + tma_tile_index(r, c, BOX, 4, SWIZZLE)]", "v = smem[t_in + r * BOX + c]", "layout misread"),
    ("smem[t_out + tma_tile_index(c, r, BOX, 4, SWIZZLE)] = v", "smem[t_out + c * BOX + r] = v", "layout misread"),
    ("    fence_proxy_async_shared()  #", "    pass  #", "not made visible to the copy engine"),
    ("cp_async_bulk_tensor_2d_store(dst_map, y, x, smem, t_out)",
     "cp_async_bulk_tensor_2d_store(dst_map, x, y, smem, t_out)", "Another box|never written|outside"),
    ("smem[t_out + tma_tile_index(c, r, BOX, 4, SWIZZLE)] = v", "smem[t_out + tma_tile_index(r, c, BOX, 4, SWIZZLE)] = v",
     "same box"),
]


@pytest.mark.parametrize("old, new, message", TRANSPOSE_MISTAKES, ids=[m[1] for m in TRANSPOSE_MISTAKES])
def test_transpose_mistakes_are_named(old, new, message, edit_kernel):
    with pytest.raises(CheckFailed, match=message):
        checks.check_tma_transpose(edit_kernel(tt.tma_transpose, old, new))


RING_MISTAKES = [
    ("mbarrier_wait_parity(bars, s, (r // STAGES) & 1)", "mbarrier_wait_parity(bars, s, r & 1)",
     "in-flight|no thread has arrived|never come"),
    ("                cp_async_bulk_wait_group_read(1)  #", "                pass  #", "written again before"),
    ("i = cuda.blockIdx.x + q * cuda.gridDim.x", "i = cuda.blockIdx.x + q", "Another box|never written"),
    ("(i // across) * BOX, bars, s)", "(i // across) * BOX, bars, 0)", "announced fewer bytes"),
    ("r = q - (STAGES - 1)", "r = q - STAGES", "in-flight|never come|no thread has arrived|never written"),
]


@pytest.mark.parametrize("old, new, message", RING_MISTAKES, ids=[m[1] for m in RING_MISTAKES])
def test_ring_mistakes_are_named(old, new, message, edit_kernel):
    with pytest.raises(CheckFailed, match=message):
        checks.check_tma_transpose_ring(edit_kernel(tt.tma_transpose_ring, old, new))
