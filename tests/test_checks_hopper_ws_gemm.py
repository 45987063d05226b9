"""kernel_lab.checks.hopper_ws_gemm (08.4): the package's producer and consumer pass the check in the
simulator; two protocol mistakes, fed to it as wrong copies of the package's functions, are named (the
notebook's mutants in tests/test_mutation_checks.py cover the rest); and the kernel compiles for sm_90a
offline and assembles without spills (scripts/hopper_ws_gemm.py --offline)."""

from __future__ import annotations

import inspect
import textwrap

import kernel_lab as kl
import kernel_lab.simulator as ksim
import pytest
from kernel_lab.check import CheckFailed
from kernel_lab.checks import hopper_ws_gemm as checks
from kernel_lab.hopper_async import ws_gemm as ws

simulator_only = pytest.mark.skipif(not kl.on_simulator(), reason="the mistakes are named by the simulator's models")

HANG_S = 20  # a wrong kernel that hangs is stopped after this (a right case takes a few seconds)


@pytest.fixture
def bounded(monkeypatch):
    monkeypatch.setattr(checks, "SMALL_S", HANG_S)
    with ksim.time_limit(120):  # nothing here may spin for ever
        yield


def edited(function, old, new):
    """The package's device function with ``old`` (found once) replaced by ``new``."""
    from numba import cuda

    source = textwrap.dedent(inspect.getsource(function.py_func if hasattr(function, "py_func") else function.fn))
    assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times"
    namespace = dict(vars(ws))
    exec(compile(source.replace(old, new).split("\n", 1)[1], "<edited>", "exec"), namespace)  # noqa: S102
    return cuda.jit(device=True)(namespace[function.__name__ if hasattr(function, "__name__") else "f"])


@simulator_only
def test_the_package_copies_pass(bounded, capsys):
    checks.check_ws_gemm(ws.produce, ws.consume)
    assert "warp-specialised GEMM: correct for all 2 cases" in capsys.readouterr().out


@simulator_only
def test_expect_tx_too_small_is_named(bounded):
    produce = edited(ws.produce, "mbarrier_arrive_expect_tx(full, s, STAGE_BYTES)",
                     "mbarrier_arrive_expect_tx(full, s, STAGE_BYTES // 2)")
    # the phase completes with a box in flight: the copy model names it at a consumer's wait (most runs), or,
    # when another consumer passed its wait first, the wgmma model at the read of that box or at the wait
    # that finds the box changed under the wgmma (about one run in six, together)
    with pytest.raises(CheckFailed, match="announced fewer bytes than its tensor copies deliver|is still landing in "
                                          "it|was written while the wgmma was in flight"):
        checks.check_producer(produce)


@simulator_only
def test_stage_released_before_its_group_completed_is_named(bounded):
    consume = edited(ws.consume,
                     "            wgmma_wait_group(1)  # the group of K-tile q - 1 has completed ...\n"
                     "            if kt > 0:\n                release(empty, (q - 1) % STAGES)",
                     "            release(empty, s)\n            wgmma_wait_group(1)")
    with pytest.raises(CheckFailed, match="was written while the wgmma was in flight"):
        checks.check_consumer(consume)


@simulator_only
def test_consumers_waiting_on_the_other_parity_is_caught(bounded):
    # the wait passes at once: the wgmma reads the stage while its load lands (named at issue), or before the
    # producer issued it (named at the wait, when the load has changed the tile under the wgmma)
    consume = edited(ws.consume, "mbarrier_wait_parity(full, s, parity)", "mbarrier_wait_parity(full, s, parity ^ 1)")
    with pytest.raises(CheckFailed, match="is still landing in it|was written while the wgmma was in flight"):
        checks.check_consumer(consume)


def test_ptx_assembles_for_sm90a_without_spills(offline_script):
    out = offline_script("hopper_ws_gemm.py")
    assert "ws_gemm: ptxas -arch=sm_90a: ok" in out, out
    assert "0 bytes spill stores, 0 bytes spill loads" in out, out
    assert "Performance Loss" not in out, out  # setmaxnreg honoured, the wgmmas not serialised
    assert "4 wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in out, out
    assert "ws_gemm: sm_80 refused (KernelLabArgumentError)" in out, out
