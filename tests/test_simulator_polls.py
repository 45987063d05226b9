"""A spin on a flag that nothing can change is reported at once (`PollStall`), not after a time limit.

The simulator runs the blocks of an in-order launch one after another, so when every thread of the
running block either waits or keeps reading one unchanged value, the launch can never finish. Each
launch here is bounded, so that a detection that fails to fire fails the test instead of hanging it.
"""

from __future__ import annotations

import time

import kernel_lab as kl  # noqa: F401 - sets the simulator up before numba.cuda is imported
import kernel_lab.simulator as ksim
import numpy as np
import pytest
from kernel_lab.acquire import load_acquire
from kernel_lab.check import CheckFailed, finishes_within
from kernel_lab.environment import on_simulator
from kernel_lab.simulator.errors import PollStall
from numba import cuda

pytestmark = pytest.mark.skipif(not on_simulator(), reason="the simulator's poll detection")

LIMIT_S = 60  # far above what a detection takes (a second or two); reached only if it never fires


@cuda.jit
def wait_for_flag(flag, out):
    """Thread 0 waits for flag[0] == 1, which nobody writes; the others wait at the barrier."""
    if cuda.threadIdx.x == 0:
        while load_acquire(flag, 0) != 1:
            pass
    cuda.syncthreads()
    out[cuda.threadIdx.x] = 1


@cuda.jit
def wait_for_volatile_flag(flag, out):
    while cuda.ldcv(flag, 0) != 1:
        pass
    out[cuda.threadIdx.x] = 1


@cuda.jit
def flag_set_by_a_worker(flag, out, work):
    """Thread 1 does plain work (no poll) for a while, then sets the flag thread 0 polls: it finishes."""
    if cuda.threadIdx.x == 1:
        acc = 0
        for i in range(work):
            acc += i
        out[1] = acc
        cuda.atomic.exch(flag, 0, 1)
    if cuda.threadIdx.x == 0:
        while load_acquire(flag, 0) != 1:
            out[2] += 1  # the polls, counted
        out[0] = 1


def _launch(kernel, threads, *args):
    flag = np.zeros(1, np.int32)
    out = np.zeros(threads, np.int64)
    with ksim.time_limit(LIMIT_S):
        kernel[1, threads](flag, out, *args)
    return out


def test_a_poll_nobody_can_answer_is_named_at_once():
    start = time.monotonic()
    with pytest.raises(PollStall) as info:
        _launch(wait_for_flag, 4)
    took = time.monotonic() - start
    message = str(info.value)
    assert message.startswith("the kernel can never finish: in block (0, 0, 0), every thread that has not "
                              "returned waits at a barrier or keeps reading a value"), message
    assert "(thread (0, 0, 0) read 0 from element 0 of an array with load_acquire, again and again)" in message
    assert "3 threads ((1, 0, 0), (2, 0, 0), (3, 0, 0)) are at" in message, message  # the barrier's waiters
    assert "test_simulator_polls.py" in message, message  # the kernel line it spins on
    assert took < LIMIT_S / 2, f"the stall took {took:.1f} s to be seen"


def test_every_thread_polling_is_named():
    with pytest.raises(PollStall, match=r"thread \(0, 0, 0\) read 0 from element 0 of an array with cuda.ldcv") as info:
        _launch(wait_for_volatile_flag, 2)
    assert "2 threads ((0, 0, 0), (1, 0, 0)) are at" in str(info.value), str(info.value)


def test_a_flag_another_thread_sets_later_is_not_a_stall(monkeypatch):
    # Thread 1 works without polling while thread 0 polls past the threshold (lowered here, so that
    # the test is quick): thread 1 runs on, so it may still write, and the launch must be left alone.
    from kernel_lab.simulator import scheduler

    monkeypatch.setattr(scheduler, "POLL_STALL_READS", 200)
    out = _launch(flag_set_by_a_worker, 3, 300_000)
    assert out[0] == 1 and out[1] == sum(range(300_000))
    assert out[2] > 200, f"thread 0 polled only {out[2]} times: the test shows nothing"


def test_a_check_says_the_kernel_never_can_finish():
    with pytest.raises(CheckFailed) as info, finishes_within("flag wait", LIMIT_S):
        _launch(wait_for_flag, 4)
    first = str(info.value).splitlines()[0]
    assert first.startswith("flag wait: your kernel did not finish, and never can: in block (0, 0, 0)"), first
    assert "still running after" not in first


def test_device_models_never_take_the_runners_lock_inside_their_own():
    """The device models' locks (``_lock`` in kernel_lab/device/*_sim.py) come after the runner's: a
    time-limit or PollStall report holds the runner's lock while it reads the models' notes under
    theirs. So no call that takes the runner's lock (a thread's failure or exit, a poll report) may
    sit inside a ``with _lock:`` block, or two threads can wait for each other for ever."""
    import ast
    from pathlib import Path

    takes_runner_lock = {"thread_failed", "exited", "original", "report_poll", "poll", "block_barrier"}
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "utilities" / "kernel_lab" / "device").glob("*_sim.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.With):
                continue
            if not any(isinstance(item.context_expr, ast.Name) and item.context_expr.id == "_lock"
                       for item in node.items):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    name = getattr(inner.func, "attr", None) or getattr(inner.func, "id", None)
                    if name in takes_runner_lock:
                        found.append(f"{path.name}:{inner.lineno} calls {name} under _lock")
    assert not found, found
