"""Module 08's checks: the learner's bulk-copy kernels of 08.1, run with the mbarrier model.

Each check takes the learner's kernel, compiles it again at the sizes of each case (the module's
``TILE`` and ``STAGES``, through ``with_constants``), copies random float32 through it and compares
the output with the input, bit for bit. The cases are the same on a GPU and in the simulator (so the
line a check prints is too): small ones at this backend's sizes, and one at the GPU's tile (and
stages), which the simulator runs once, at 256 threads a block.

In the simulator the kernel runs against ``kernel_lab.device.async_copy_sim``, which names the
protocol's mistakes, and every launch is bounded (``check.finishes_within``), since most of them
hang on a GPU:

* a barrier used before ``mbarrier_init``, a copy on a barrier whose initialisation was not fenced
  for the copy engine, more arrivals than the count: the model's own message (``MbarrierProtocolError``);
* a read of the tile before its phase completed (no wait, a wait on the parity of a phase already
  complete, an expect-tx smaller than the copy): the output holds the model's in-flight bytes, 0x7D,
  and the message says so (``async_copy_sim.check_no_in_flight``);
* a wait that never ends (the other parity, an expect-tx larger than the copy, an arrive that never
  comes): the time limit's report names each barrier waited on and why its phase cannot complete;
* anything else: the first wrong element, its tile, and where in the input its value came from.
"""

from __future__ import annotations

import numpy as np

from .. import progress
from ..check import CheckFailed, finishes_within
from ..environment import on_simulator
from ..hopper_async import bulk_copies as bc

SMALL_S = 6  # a small case takes well under a second in the simulator; a hang stops after this
GPU_SIZES_S = 60  # the GPU's tile at 256 threads: a second or two

TILE_HINT = ("thread 0 initialises `full` with a count of 1 and fences it (fence_mbarrier_init), "
             "cuda.syncthreads() publishes it, thread 0 announces the tile's bytes (4 * TILE, not TILE) with "
             "mbarrier_arrive_expect_tx and issues the copy, and every thread waits on parity 0: the first phase.")
ROUNDS_HINT = ("in round r every thread waits on `full` with parity r & 1 and arrives on `empty` once it has read "
               "the tile; the producer waits on `empty` with parity (r & 1) ^ 1 before it overwrites the tile "
               "(a fresh barrier passes that parity at once, so round 0 does not wait).")
RING_HINT = ("tile q of the block goes to stage s = q % STAGES and is the stage's (q // STAGES)-th tile: its "
             "barriers are in that phase, parity (q // STAGES) & 1. The consumers wait on full[s] with it, the "
             "producer on empty[s] (bars[STAGES + s]) with the other parity; the last tile's expect-tx and copy "
             "carry its own bytes, 4 * min(TILE, n - start).")


def _input(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _explain(got: np.ndarray, src: np.ndarray, tile: int) -> str:
    wrong = np.flatnonzero(got.view(np.uint32) != src.view(np.uint32))
    i = int(wrong[0])
    head = (f"{wrong.size} of {src.size} elements wrong; the first at out[{i}] (tile {i // tile}, element "
            f"{i % tile} of it): ")
    if np.isnan(got[i]):
        return head + ("never written (still NaN). Does every tile get a copy and a reader (the loop's bounds, "
                       "the last, short tile)?")
    hits = np.flatnonzero(src == got[i])
    if hits.size:
        j = int(hits[0])
        return head + (f"it holds src[{j}] (tile {j // tile}, element {j % tile}), not src[{i}]: a tile copied "
                       "from or into the wrong place, or a stage read that holds another tile.")
    if got[i] == 0:
        return head + (f"got 0, expected {float(src[i]):g}: no bulk copy wrote this element of the tile before the "
                       "threads read it (is the copy issued, into this tile, with the tile's bytes?).")
    return head + f"got {float(got[i]):g}, expected {float(src[i]):g}."


def run_async(where: str, seconds: float, hint: str, launch, d_out) -> np.ndarray:
    """Run ``launch()`` and return ``d_out`` on the host. In the simulator the launch is bounded, and the
    async-copy model's reports become the check's failure: a protocol mistake, a hang (with the barriers
    waited on), or output bytes that a copy had not delivered yet when the kernel read them. Module 08's
    checks all run their launches through here."""
    from numba import cuda

    if not on_simulator():
        launch()
        cuda.synchronize()
        return d_out.copy_to_host()
    from ..device.async_copy_sim import (
        MbarrierProtocolError,
        ReadBeforeWait,
        check_no_in_flight,
    )

    try:
        with finishes_within(where, seconds, hint):
            launch()
    except MbarrierProtocolError as exc:
        raise CheckFailed(f"{where}: {exc}") from None
    got = d_out.copy_to_host()
    try:
        check_no_in_flight(got, "out")
    except ReadBeforeWait as exc:
        raise CheckFailed(f"{where}: {exc}") from None
    return got


def _run(name: str, label: str, launch, n: int, tile: int, seconds: float, hint: str, seed: int) -> None:
    from numba import cuda

    src = _input(n, seed)
    d_src, d_out = cuda.to_device(src), cuda.to_device(np.full(n, np.nan, np.float32))
    where = f"{name} ({label})"
    got = run_async(where, seconds, hint, lambda: launch(d_out, d_src), d_out)
    if not np.array_equal(got.view(np.uint32), src.view(np.uint32)):
        raise CheckFailed(f"{where}: {_explain(got, src, tile)}")


def _cases(kernel, make_cases, hint):
    """(label, launch, n, tile, seconds) of every case: this backend's sizes, then the GPU's once."""
    out = []
    for sizes, seconds in ((bc.constants(), SMALL_S), (bc.GPU, GPU_SIZES_S)):
        names = {k: v for k, v in sizes.items() if k != "THREADS"}
        k = bc.with_constants(kernel, **names)
        for label, launch, n in make_cases(k, sizes, gpu_sizes=seconds == GPU_SIZES_S):
            out.append((label, launch, n, sizes["TILE"], seconds))
    return out


def _check(name, kernel, make_cases, hint):
    cases = _cases(kernel, make_cases, hint)
    for seed, (label, launch, n, tile, seconds) in enumerate(cases):
        _run(name, label, launch, n, tile, seconds, hint, seed)
    progress.passed(name)
    print(f"{name}: correct for all {len(cases)} cases ({', '.join(c[0] for c in cases)})")


def check_tile_copy(kernel, name: str = "tile copy") -> None:
    """Exercise 1: ``kernel(src, out)``, one tile a block, one barrier."""
    def cases(k, sizes, gpu_sizes):
        t, th = sizes["TILE"], sizes["THREADS"]
        launch = lambda out, src: bc.launch_tile_copy(k, out, src, tile=t, threads=th)  # noqa: E731
        if gpu_sizes:
            return [("the GPU's tile in 2 blocks", launch, 2 * t)]
        return [("one block", launch, t), ("3 blocks", launch, 3 * t)]

    _check(name, kernel, cases, TILE_HINT)


def check_rounds_copy(kernel, name: str = "rounds copy") -> None:
    """Exercise 2: ``kernel(src, out, rounds)``, one tile reused ``rounds`` times, `full` and `empty`."""
    def cases(k, sizes, gpu_sizes):
        t, th = sizes["TILE"], sizes["THREADS"]

        def rounds(r):
            return lambda out, src: bc.launch_rounds_copy(k, out, src, r, tile=t, threads=th)

        if gpu_sizes:
            return [("the GPU's tile for 2 rounds", rounds(2), 2 * t)]
        return [("1 round", rounds(1), t), ("2 rounds", rounds(2), 2 * t), ("5 rounds in 2 blocks", rounds(5), 10 * t)]

    _check(name, kernel, cases, ROUNDS_HINT)


def check_ring_copy(kernel, name: str = "ring copy") -> None:
    """Exercise 3: ``kernel(src, out, n)``, a ring of ``STAGES`` tiles in a persistent grid."""
    def cases(k, sizes, gpu_sizes):
        t, s, th = sizes["TILE"], sizes["STAGES"], sizes["THREADS"]

        def ring(blocks):
            return lambda out, src: bc.launch_ring_copy(k, out, src, blocks=blocks, tile=t, stages=s, threads=th)

        if gpu_sizes:
            return [("the GPU's tile and stages with a short last tile", ring(1), (s + 2) * t - 20)]
        return [("one tile for 2 blocks", ring(2), t),
                ("a short last tile", ring(2), 3 * t + 12),
                ("the ring wrapping twice in 2 blocks", ring(2), 2 * (2 * s + 1) * t - 8),
                ("more blocks than tiles", ring(3), 2 * t)]

    _check(name, kernel, cases, RING_HINT)


__all__ = ["check_ring_copy", "check_rounds_copy", "check_tile_copy"]
