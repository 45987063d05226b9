"""Block schedules in the simulator: blocks that run at once, in adversarial orders (grid.py).

Each test runs a small look-back kernel (one value per block; thread 0 of each block looks back at
its predecessors) that is either right or carries one classic mistake, and expects the right one
to pass under every schedule and each mistake to be caught by at least one of the schedules the
course's checks use.
"""

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="simulator block schedules (no GPU needed)")

kl.setup(quiet=True)
from numba import cuda, int32  # noqa: E402

from kernel_lab.simulator.grid import GridStall, block_schedule  # noqa: E402

NONE, AGG, PREFIX = 0, 1, 2
SCHEDULES = [("in order", 0), ("reverse", 0)] + [("interleaved", s) for s in range(4)]


def make_kernel(mistake=None):
    @cuda.jit
    def lookback(x, out, ticket, flags, aggregates, prefixes, seen):
        tid = cuda.shared.array(1, int32)
        if cuda.threadIdx.x == 0:
            if mistake == "block index":
                tid[0] = cuda.blockIdx.x
            else:
                tid[0] = cuda.atomic.add(ticket, 0, 1)
        cuda.syncthreads()
        b = tid[0]
        if cuda.threadIdx.x == 0:
            total = x[b]
            if mistake == "flag first":
                cuda.atomic.exch(flags, b, AGG)
                aggregates[b] = total
            else:
                aggregates[b] = total
                cuda.threadfence()
                cuda.atomic.exch(flags, b, AGG)
            exclusive = 0.0
            j = b - 1
            while j >= 0:
                if mistake == "value first":
                    v_agg = aggregates[j]
                    v_pre = prefixes[j]
                f = cuda.ldcv(flags, j)
                if f == NONE and mistake == "poll once":
                    f = cuda.ldcv(flags, j)  # asked once more, then goes on whatever the flag says
                elif f == NONE:
                    continue
                cuda.threadfence()
                if mistake != "value first":
                    v_agg = cuda.ldcg(aggregates, j)
                    v_pre = cuda.ldcg(prefixes, j)
                if f == AGG:
                    cuda.atomic.add(seen, 0, 1)  # the look-back met a predecessor with only its total
                if f == PREFIX or mistake == "aggregate as prefix":
                    exclusive += v_pre if f == PREFIX else v_agg
                    break
                exclusive += v_agg
                j -= 1
            prefixes[b] = exclusive + total
            cuda.threadfence()
            cuda.atomic.exch(flags, b, PREFIX)
            out[b] = exclusive + total
    return lookback


def run(kernel, blocks=8, order="in order", seed=0, resident=None, slow_blocks=True):
    x = np.arange(1, blocks + 1, dtype=np.float64)
    out = cuda.to_device(np.full(blocks, np.nan))
    seen = cuda.to_device(np.zeros(1, np.int32))
    args = (cuda.to_device(x), out, cuda.to_device(np.zeros(1, np.int32)), cuda.to_device(np.zeros(blocks, np.int32)),
            cuda.to_device(np.full(blocks, np.nan)), cuda.to_device(np.full(blocks, np.nan)), seen)
    with block_schedule(order, seed=seed, resident=resident, slow_blocks=slow_blocks):
        kernel[blocks, 32](*args)
    ok = np.array_equal(out.copy_to_host(), np.cumsum(x))
    return ok, int(seen.copy_to_host()[0])


def test_a_correct_look_back_passes_every_schedule_and_meets_aggregates():
    kernel = make_kernel()
    aggregates_seen = 0
    for order, seed in SCHEDULES:
        ok, seen = run(kernel, order=order, seed=seed)
        assert ok, (order, seed)
        aggregates_seen += seen
    # Run one after the other, a block always finds its predecessor finished; interleaved, the
    # look-back must also meet predecessors that have published only their own total.
    assert run(kernel, order="in order")[1] == 0
    assert aggregates_seen > 0


@pytest.mark.parametrize("mistake", ["flag first", "value first", "aggregate as prefix", "poll once"])
def test_each_ordering_mistake_is_caught_by_some_interleaved_schedule(mistake):
    kernel = make_kernel(mistake)
    assert run(kernel, order="in order")[0], "in index order every mistake goes unseen: that is the point"
    results = [run(kernel, order="interleaved", seed=s)[0] for s in range(6)]
    assert not all(results), f"{mistake}: no interleaved schedule exposed it"


def test_only_slow_blocks_expose_a_look_back_that_polls_once():
    # Without slow blocks a poller is held back until its predecessor has published, so a look-back
    # that asks twice and goes on never meets "nothing published" (what module 02's check uses to
    # name this mistake); a slow block keeps it from publishing across several polls.
    kernel = make_kernel("poll once")
    assert all(run(kernel, order="interleaved", seed=s, slow_blocks=False)[0] for s in range(6))
    assert not all(run(kernel, order="interleaved", seed=s)[0] for s in range(6))


def test_waiting_on_the_previous_block_index_stalls_when_it_has_not_started():
    kernel = make_kernel("block index")
    with pytest.raises(GridStall, match="wait for each other forever") as info:
        run(kernel, order="reverse")
    assert "ticket" in str(info.value)
    with pytest.raises(GridStall):
        run(kernel, order="interleaved", seed=1, resident=2)


def test_schedule_arguments_are_checked_and_restored():
    from kernel_lab.simulator.grid import schedule

    with pytest.raises(ValueError, match="order must be one of"):
        block_schedule("backwards")
    with block_schedule("reverse"):
        assert schedule.order == "reverse"
    assert schedule.order == "in order"
    with block_schedule("interleaved", slow_blocks=False):
        assert not schedule.slow_blocks
    assert schedule.slow_blocks


def test_a_busy_machine_never_takes_the_turn_from_a_slow_holder(monkeypatch):
    """The turn is taken from a holder that burns CPU without a scheduling point, never from one that
    is only slow because the machine is busy (the process used no CPU meanwhile): the schedule must not
    depend on load (grid.py, TAKEOVER_CPU_S)."""
    import threading
    import time

    from kernel_lab.simulator import grid

    monkeypatch.setattr(grid, "TAKEOVER_CPU_S", 0.2)
    monkeypatch.setattr(grid, "TAKEOVER_WALL_S", 30.0)
    holder, other = object(), object()
    watch = grid._Watch(holder)
    time.sleep(0.5)  # wall clock passes, no CPU is used: a busy machine, a slow holder
    assert not watch.stuck(holder)
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])  # burns CPU
    spinner.start()
    try:
        deadline = time.monotonic() + 10
        while not watch.stuck(holder) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.stuck(holder)
        assert not watch.stuck(other)  # a watch speaks only of the holder it watches
    finally:
        stop.set()
        spinner.join()
