"""08.1's kernels: bulk copies global -> shared that complete on mbarriers, written by the learner.

The package keeps copies of the three kernels the notebook's learner writes (held to the notebook by
tests/test_package_copies.py), so that the checks' tests, probes and later notebooks can run them:

* ``tile_copy(src, out)``: each block copies one tile of ``TILE`` float32 from ``src`` into shared
  memory with one ``cp_async_bulk`` (thread 0), every thread waits on the ``full`` barrier's phase 0,
  then the threads write the tile to ``out``.
* ``rounds_copy(src, out, rounds)``: each block copies ``rounds`` tiles through *one* shared tile;
  ``full`` says a tile has landed, ``empty`` (one arrival per thread) that every thread has read it
  and the tile may be overwritten. Round ``r`` waits on parity ``r & 1``; the producer waits on
  ``empty`` with the other parity, which a fresh barrier passes at once.
* ``ring_copy(src, out, n)``: a persistent grid-stride copy of ``n`` float32 (a multiple of 4) through
  a ring of ``STAGES`` tiles per block: block ``b`` takes tiles ``b``, ``b + grid``, ...; thread 0
  issues tile ``q`` into stage ``q % STAGES`` while the threads read tile ``q - (STAGES - 1)``, and
  a stage's barriers are in phase ``q // STAGES`` for its ``q``-th tile: parity ``(q // STAGES) & 1``.
  The last tile may be short: its copy and its expect-tx carry only its bytes.

Sizes are module constants that the kernels read (``TILE``, ``STAGES``; ``THREADS`` for the
launchers): the GPU's for a GPU, smaller ones for the simulator. ``with_constants`` (module 02's)
compiles a kernel again with others, as the checks do to run the GPU's sizes in the simulator once.
Shared memory is dynamic (``cuda.shared.array(0, ...)``, given at launch), whose start the CUDA
runtime aligns for the 16-byte rule of a bulk copy.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..device.bulk_copy import cp_async_bulk
from ..device.mbarrier import (
    fence_mbarrier_init,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait_parity,
)
from ..environment import on_simulator
from ..reductions_gemm.sgemm import with_constants

__all__ = [
    "BARS",
    "EMPTY",
    "FULL",
    "GPU",
    "SIM",
    "STAGES",
    "THREADS",
    "TILE",
    "constants",
    "launch_ring_copy",
    "launch_rounds_copy",
    "launch_tile_copy",
    "ring_blocks",
    "ring_copy",
    "rounds_copy",
    "tile_copy",
    "with_constants",
]

# The GPU's sizes: 8 KB tiles (2048 float32), 4 stages (32 KB of shared memory a block, under the
# 48 KB a launch gets without opting in, so that several blocks fit on an SM), 256 threads a block.
GPU = dict(TILE=2048, STAGES=4, THREADS=256)
# The simulator's: 256-byte tiles, 3 stages (a ring that wraps after 3 tiles), one warp.
SIM = dict(TILE=64, STAGES=3, THREADS=32)
FULL, EMPTY = 0, 1  # rounds_copy's two barriers
BARS = 8  # ring_copy's barrier words: full and empty for up to 4 stages (a shared array's size is a constant)


def constants(simulator: bool | None = None) -> dict:
    """The sizes for this backend (``simulator``: None asks the environment)."""
    return dict(SIM if (on_simulator() if simulator is None else simulator) else GPU)


TILE, STAGES, THREADS = constants()["TILE"], constants()["STAGES"], constants()["THREADS"]


# --- exercise 1: one tile, one barrier ----------------------------------------------------------

@cuda.jit
def tile_copy(src, out):
    tile = cuda.shared.array(0, np.float32)  # TILE floats, given at launch
    bars = cuda.shared.array(1, np.uint64)  # the `full` barrier
    tid = cuda.threadIdx.x
    start = cuda.blockIdx.x * TILE  # this block's tile of src and out
    if tid == 0:
        mbarrier_init(bars, 0, 1)  # one arrival a phase: thread 0's arrive_expect_tx
        fence_mbarrier_init()  # the initialisation, made visible to the copy engine
    cuda.syncthreads()  # ... and to the other threads
    if tid == 0:
        mbarrier_arrive_expect_tx(bars, 0, 4 * TILE)  # bytes, not floats
        cp_async_bulk(tile, 0, src, start, 4 * TILE, bars, 0)
    mbarrier_wait_parity(bars, 0, 0)  # phase 0 has completed: the tile has landed
    for i in range(tid, TILE, cuda.blockDim.x):
        out[start + i] = tile[i]


def launch_tile_copy(kernel, out, src, *, tile=None, threads=None):
    """One block a tile: ``src.size`` is a multiple of the tile."""
    tile, threads = tile or TILE, threads or THREADS
    kernel[src.size // tile, threads, 0, 4 * tile](src, out)


# --- exercise 2: many rounds through one tile: `full` and `empty` -------------------------------

@cuda.jit
def rounds_copy(src, out, rounds):
    tile = cuda.shared.array(0, np.float32)  # one tile of TILE floats, reused every round
    bars = cuda.shared.array(2, np.uint64)  # bars[FULL]: the tile has landed; bars[EMPTY]: every thread has read it
    tid = cuda.threadIdx.x
    first = cuda.blockIdx.x * rounds * TILE  # this block's first element
    if tid == 0:
        mbarrier_init(bars, FULL, 1)
        mbarrier_init(bars, EMPTY, cuda.blockDim.x)
        fence_mbarrier_init()
    cuda.syncthreads()
    for r in range(rounds):
        if tid == 0:  # the producer
            mbarrier_wait_parity(bars, EMPTY, (r & 1) ^ 1)  # every thread has read round r - 1
            mbarrier_arrive_expect_tx(bars, FULL, 4 * TILE)
            cp_async_bulk(tile, 0, src, first + r * TILE, 4 * TILE, bars, FULL)
        mbarrier_wait_parity(bars, FULL, r & 1)  # round r's tile has landed
        for i in range(tid, TILE, cuda.blockDim.x):
            out[first + r * TILE + i] = tile[i]
        mbarrier_arrive(bars, EMPTY)  # this thread is done with the tile


def launch_rounds_copy(kernel, out, src, rounds, *, tile=None, threads=None):
    """``src.size // (rounds * tile)`` blocks of ``rounds`` tiles each."""
    tile, threads = tile or TILE, threads or THREADS
    kernel[src.size // (rounds * tile), threads, 0, 4 * tile](src, out, rounds)


# --- exercise 3: a ring of STAGES tiles in a persistent grid ------------------------------------

@cuda.jit
def ring_copy(src, out, n):
    tiles = cuda.shared.array(0, np.float32)  # STAGES tiles of TILE floats: stage s at s * TILE
    bars = cuda.shared.array(BARS, np.uint64)  # full[s] = bars[s], empty[s] = bars[STAGES + s]
    tid = cuda.threadIdx.x
    if tid == 0:
        for s in range(STAGES):
            mbarrier_init(bars, s, 1)
            mbarrier_init(bars, STAGES + s, cuda.blockDim.x)
        fence_mbarrier_init()
    cuda.syncthreads()
    ntiles = (n + TILE - 1) // TILE
    mine = (ntiles - cuda.blockIdx.x + cuda.gridDim.x - 1) // cuda.gridDim.x  # tiles b, b + grid, ...
    for q in range(mine + STAGES - 1):
        if tid == 0 and q < mine:  # the producer: this block's tile q into stage q % STAGES
            s = q % STAGES
            mbarrier_wait_parity(bars, STAGES + s, ((q // STAGES) & 1) ^ 1)  # the stage's last tile was read
            start = (cuda.blockIdx.x + q * cuda.gridDim.x) * TILE
            nbytes = 4 * min(TILE, n - start)  # the last tile may be short
            mbarrier_arrive_expect_tx(bars, s, nbytes)
            cp_async_bulk(tiles, s * TILE, src, start, nbytes, bars, s)
        r = q - (STAGES - 1)  # the consumers: tile r, STAGES - 1 tiles behind the producer
        if r >= 0:
            s = r % STAGES
            mbarrier_wait_parity(bars, s, (r // STAGES) & 1)
            start = (cuda.blockIdx.x + r * cuda.gridDim.x) * TILE
            for i in range(tid, min(TILE, n - start), cuda.blockDim.x):
                out[start + i] = tiles[s * TILE + i]
            mbarrier_arrive(bars, STAGES + s)


def ring_blocks(n, *, tile=None, per_sm=2) -> int:
    """The persistent grid: ``per_sm`` blocks an SM on a GPU (at most one a tile), so that the ring, not
    the number of resident blocks, keeps the bytes in flight; 2 blocks in the simulator."""
    tile = tile or TILE
    ntiles = -(-n // tile)
    if on_simulator():
        return max(1, min(2, ntiles))
    from ..environment import gpu_info

    return max(1, min(ntiles, per_sm * (gpu_info().multiprocessors or 1)))


def launch_ring_copy(kernel, out, src, *, blocks=None, tile=None, stages=None, threads=None):
    """``src.size`` float32, a multiple of 4 (a bulk copy moves multiples of 16 bytes)."""
    tile, stages, threads = tile or TILE, stages or STAGES, threads or THREADS
    blocks = blocks or ring_blocks(src.size, tile=tile)
    smem = 4 * stages * tile
    if smem > 47 * 1024 and not on_simulator():  # past 48 KB with the barriers: the kernel must opt in
        from ..tensor_cores.toolchain import set_max_dynamic_shared_memory

        set_max_dynamic_shared_memory(kernel, (src, out, src.size), smem)
    kernel[blocks, threads, 0, smem](src, out, src.size)
