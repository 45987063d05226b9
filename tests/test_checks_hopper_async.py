"""kernel_lab.checks.hopper_async (08.1): each protocol mistake, fed to its check as a wrong kernel,
is named; the package's copies of the learner's kernels pass. The wrong kernels are the package's
copies with one edit, as the mutants of tests/test_mutation_checks.py are the notebook's."""

from __future__ import annotations

import kernel_lab as kl
import kernel_lab.simulator as ksim
import pytest
from kernel_lab.check import CheckFailed
from kernel_lab.checks import hopper_async as checks
from kernel_lab.hopper_async import bulk_copies as bc

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the checks' mistakes are named by the simulator's model")

HANG_S = 3  # a wrong kernel that hangs is stopped after this (the right ones take well under a second)


@pytest.fixture(autouse=True)
def _bounded(monkeypatch):
    monkeypatch.setattr(checks, "SMALL_S", HANG_S)
    with ksim.time_limit(120):  # nothing here may spin for ever
        yield


@pytest.mark.parametrize("check, kernel", [(checks.check_tile_copy, bc.tile_copy),
                                           (checks.check_rounds_copy, bc.rounds_copy),
                                           (checks.check_ring_copy, bc.ring_copy)])
def test_the_package_kernels_pass(check, kernel, capsys):
    check(kernel)
    assert "correct for all" in capsys.readouterr().out


# A wait on the parity of a phase that has already completed passes at once and reads the tile in
# flight; but the poll that passes may itself land the copy's last piece, and the phase it then waits
# for is the next one, which never completes. On a GPU the same race decides; both are named.
PARITY = "in-flight bytes|no thread has arrived in this phase"

TILE_MISTAKES = [
    ("        fence_mbarrier_init()  #", "        pass  #", "not made visible to the copy engine"),
    ("mbarrier_wait_parity(bars, 0, 0)", "mbarrier_wait_parity(bars, 0, 1)", PARITY),
    ("mbarrier_wait_parity(bars, 0, 0)", "pass", "in-flight bytes"),
    ("mbarrier_arrive_expect_tx(bars, 0, 4 * TILE)", "mbarrier_arrive_expect_tx(bars, 0, TILE)", "in-flight bytes"),
    ("mbarrier_arrive_expect_tx(bars, 0, 4 * TILE)", "mbarrier_arrive_expect_tx(bars, 0, 4 * TILE + 16)",
     "expected bytes will never arrive"),
    ("start = cuda.blockIdx.x * TILE", "start = cuda.blockIdx.x * 4 * TILE", "run past the end"),
]


@pytest.mark.parametrize("old, new, message", TILE_MISTAKES, ids=[m[1] for m in TILE_MISTAKES])
def test_tile_copy_mistakes_are_named(old, new, message, edit_kernel):
    with pytest.raises(CheckFailed, match=message):
        checks.check_tile_copy(edit_kernel(bc.tile_copy, old, new))


ROUNDS_MISTAKES = [
    ("mbarrier_wait_parity(bars, EMPTY, (r & 1) ^ 1)", "mbarrier_wait_parity(bars, EMPTY, r & 1)",
     "no thread has arrived in this phase"),
    ("mbarrier_wait_parity(bars, FULL, r & 1)", "mbarrier_wait_parity(bars, FULL, (r & 1) ^ 1)", PARITY),
    ("        mbarrier_arrive(bars, EMPTY)", "        pass", "no thread has arrived in this phase"),
    ("cp_async_bulk(tile, 0, src, first + r * TILE,", "cp_async_bulk(tile, 0, src, first,", "it holds src"),
]


@pytest.mark.parametrize("old, new, message", ROUNDS_MISTAKES, ids=[m[1] for m in ROUNDS_MISTAKES])
def test_rounds_copy_mistakes_are_named(old, new, message, edit_kernel):
    with pytest.raises(CheckFailed, match=message):
        checks.check_rounds_copy(edit_kernel(bc.rounds_copy, old, new))


RING_MISTAKES = [
    ("mbarrier_wait_parity(bars, s, (r // STAGES) & 1)", "mbarrier_wait_parity(bars, s, r & 1)", PARITY),
    ("nbytes = 4 * min(TILE, n - start)", "nbytes = 4 * TILE", "run past the end"),
    ("mbarrier_arrive_expect_tx(bars, s, nbytes)", "mbarrier_arrive_expect_tx(bars, s, 4 * TILE)",
     "expected bytes will never arrive"),
    ("((q // STAGES) & 1) ^ 1)", "(q // STAGES) & 1)", "no thread has arrived in this phase"),
    ("start = (cuda.blockIdx.x + q * cuda.gridDim.x) * TILE", "start = (cuda.blockIdx.x * 0 + q) * TILE",
     "it holds src"),
]


@pytest.mark.parametrize("old, new, message", RING_MISTAKES, ids=[m[1] for m in RING_MISTAKES])
def test_ring_copy_mistakes_are_named(old, new, message, edit_kernel):
    with pytest.raises(CheckFailed, match=message):
        checks.check_ring_copy(edit_kernel(bc.ring_copy, old, new))
