"""08.4's kernel: a warp-specialised, persistent fp16 GEMM on Hopper, ``C = A B`` (C float32), written
by the learner in two device functions, the producer's loop and the consumer's.

The kernel puts together 08.1 (a ring of stages handed over with ``full`` and ``empty`` mbarriers),
08.2 (TMA tensor copies of swizzled boxes) and 08.3 (``wgmma`` on shared-memory descriptors):

* **Operands.** A (M x K) and B given transposed (N x K), both fp16 and K-major, each behind a host
  tensor map (:class:`kernel_lab.device.tensor_map.TensorMap2D`) with the 128-byte swizzle: A's box is
  ``BM x BK`` = 128 x 64 halves (16 KB), B's ``BN x BK`` (N = 256 on a GPU: 32 KB). A row of a box
  is 64 halves = 128 bytes, the swizzle's span, so the boxes land in exactly the layout 08.3's
  descriptors read (SBO 1024, K-steps 32 bytes apart).
* **Persistent grid.** One block an SM. The output is cut into ``BM x BN`` tiles, numbered down the
  columns of tiles (tile ``i`` at rows ``(i % mtiles) * BM``, columns ``(i // mtiles) * BN``:
  :func:`tile_origin`), and block ``b`` takes tiles ``b, b + grid, b + 2 grid, ...``.
* **Three warpgroups** (384 threads). Warpgroup 0 is the **producer**: it gives registers back
  (``setmaxnreg_dec(40)``) and one thread of it issues, for each K-tile of each of the block's tiles,
  the two TMA loads into the next stage of a ring of ``STAGES`` stages, after waiting until the
  consumers released that stage (``empty``), announcing the stage's bytes on ``full``
  (expect-tx = ``STAGE_BYTES``). Warpgroups 1 and 2 are the **consumers**: they take registers
  (``setmaxnreg_inc(232)``); consumer ``half`` (0 or 1) multiplies rows ``64 half .. 64 half + 63`` of
  A's box by B's box (``mma_ktile``: four ``wgmma`` K-steps a stage, one commit), keeps one group in
  flight, releases the stage of the K-tile before once ``wgmma_wait_group(1)`` says its group is done,
  and after the tile's last K-tile waits for everything, releases the last stage and stores its 64 x
  BN fragment of C (08.3's ``store_fragment``), then moves on to its next tile while the producer
  already loads it.
* **The phase bookkeeping** is one counter ``q`` a thread: the block's ``q``-th K-tile load (counted
  across all its tiles) goes to stage ``q % STAGES`` and is that stage's ``(q // STAGES)``-th use;
  its ``full`` barrier completes phase ``q // STAGES`` when it lands, so a consumer waits on parity
  ``(q // STAGES) & 1``; the producer, before reusing the stage, waits for the consumers' release of
  the use before, the phase of the other parity (``^ 1``: on a fresh barrier that wait passes at
  once, as the PTX ISA counts the phase before phase 0 as complete). :func:`ring_slot` returns both.
* **Release.** ``empty`` counts ``CONSUMER_WARPS`` = 8 arrivals a phase: each consumer warp arrives
  once (:func:`release`: ``cuda.syncwarp()``, then lane 0), after all its lanes have passed the
  ``wgmma_wait_group`` that covers the stage's group.

``produce(a_map, b_map, smem, t0, full, empty, mtiles, tiles, ktiles)`` and ``consume(smem, t0, full,
empty, c, mtiles, tiles, ktiles, half)`` are the learner's (the package's copies here, held to the
notebook by tests/test_package_copies.py); :func:`make_ws_gemm` builds the kernel around a pair of
them. Sizes are module constants, the GPU's or the simulator's (``BN``, ``STAGES``; ``BM``, ``BK`` and
``THREADS`` are fixed). On a GPU the kernel takes ``SMEM_BYTES`` (1 KB of alignment slack, then the
stages) of dynamic shared memory, 193 KB at ``BN = 256``, ``STAGES = 4``: :func:`launch_ws_gemm` opts in.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..device.mbarrier import (
    fence_mbarrier_init,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait_parity,
)
from ..device.tensor_map import TensorMap2D
from ..device.tma import (
    cp_async_bulk_tensor_2d_load,
    fence_proxy_tensormap_acquire,
    tile_start,
)
from ..device.wgmma import (
    setmaxnreg_dec,
    setmaxnreg_inc,
    wgmma_acc_f32,
    wgmma_commit_group,
    wgmma_fence,
    wgmma_fence_operand,
    wgmma_mma_async_f16,
    wgmma_wait_group,
)
from ..environment import on_simulator
from .wgmma_gemm import make_desc, smem_start, store_fragment

__all__ = [
    "BK",
    "BM",
    "BN",
    "CONSUMER_WARPS",
    "GPU",
    "MAX_STAGES",
    "SIM",
    "SMEM_BYTES",
    "STAGES",
    "STAGE_BYTES",
    "STAGE_ELEMS",
    "SWIZZLE",
    "THREADS",
    "constants",
    "consume",
    "gemm_inputs",
    "grid_blocks",
    "launch_ws_gemm",
    "make_ws_gemm",
    "mma_ktile",
    "produce",
    "release",
    "ring_slot",
    "stage_a",
    "stage_b",
    "tensor_maps",
    "tile_origin",
    "ws_gemm",
]

# The GPU's sizes: 128 x 256 output tiles (each consumer a 64 x 256 wgmma: 128 float32 accumulators a
# thread), 4 stages of 16 KB (A) + 32 KB (B). The simulator's: 128 x 32 tiles and 2 stages, so that a
# small problem wraps the ring several times and each block walks several tiles.
GPU = dict(BN=256, STAGES=4)
SIM = dict(BN=32, STAGES=2)
BM = 128  # a tile's rows: two consumer warpgroups of 64
BK = 64  # a K-tile: 64 halves = 128 bytes a row, the 128-byte swizzle's span
SWIZZLE = 128
THREADS = 384  # three warpgroups: the producer, two consumers
CONSUMER_WARPS = 8  # arrivals on `empty` a phase: one a consumer warp
MAX_STAGES = 8  # barrier words (a shared array's size is a constant)
PRODUCER_REGS = 40  # setmaxnreg: 40 + 2 x 232 = 3 x 168, the registers a thread of 384 gets at entry
CONSUMER_REGS = 232
SIM_SWITCH_INTERVAL_S = 2e-4  # the interpreter's thread switch interval during a simulated launch


def constants(simulator: bool | None = None) -> dict:
    """The sizes for this backend (``simulator``: None asks the environment)."""
    return dict(SIM if (on_simulator() if simulator is None else simulator) else GPU)


BN, STAGES = constants()["BN"], constants()["STAGES"]
STAGE_ELEMS = (BM + BN) * BK  # halves a stage: A's box, then B's
STAGE_BYTES = 2 * STAGE_ELEMS  # what a stage's full barrier expects: both boxes' bytes
SMEM_BYTES = 1024 + STAGES * STAGE_BYTES  # the slack that tile_start skips, then the ring


# --- the package's helpers, which the learner calls ------------------------------------------------

@cuda.jit(device=True)
def ring_slot(q):
    """(stage, parity) of the block's ``q``-th K-tile load: stage ``q % STAGES``, whose ``full`` barrier
    completes phase ``q // STAGES`` when it lands; a wait for that phase passes parity
    ``(q // STAGES) & 1``."""
    return q % STAGES, (q // STAGES) & 1


@cuda.jit(device=True)
def tile_origin(tile, mtiles):
    """(first row, first column) of output tile ``tile``, the tiles numbered down the columns."""
    return (tile % mtiles) * BM, (tile // mtiles) * BN


@cuda.jit(device=True)
def stage_a(t0, s):
    """Index in the shared array of stage ``s``'s A box (128 x 64 halves, 16 KB)."""
    return t0 + s * STAGE_ELEMS


@cuda.jit(device=True)
def stage_b(t0, s):
    """Index in the shared array of stage ``s``'s B box (BN x 64 halves), right after A's."""
    return t0 + s * STAGE_ELEMS + BM * BK


@cuda.jit(device=True)
def mma_ktile(ring, s, half, acc):
    """Consumer ``half``'s K-tile in stage ``s``: fence, four ``m64nBNk16`` wgmmas on the 128-byte
    swizzled boxes (its 64 rows of A's box, and B's box), K-steps 32 bytes apart, adding into ``acc``;
    one commit. ``ring`` is the shared-memory address of the ring, in bytes (``smem_start(smem, t0)``).
    Returns the accumulators (in flight until a wait covers the group)."""
    start_a = ring + s * STAGE_BYTES + half * 64 * 2 * BK  # the consumer's 64 rows of 128 bytes
    start_b = ring + s * STAGE_BYTES + BM * 2 * BK  # B's box follows A's 128 rows
    wgmma_fence()
    for ks in range(4):
        desc_a = make_desc(start_a + 32 * ks, 16, 1024, SWIZZLE)
        desc_b = make_desc(start_b + 32 * ks, 16, 1024, SWIZZLE)
        acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 1)
    wgmma_commit_group()
    return acc


@cuda.jit(device=True)
def release(empty, s):
    """A consumer warp hands stage ``s`` back: once all its lanes are here (past the wait that covers
    the stage's group), lane 0 arrives on ``empty[s]`` (8 arrivals a phase: one a consumer warp)."""
    cuda.syncwarp()
    if cuda.threadIdx.x % 32 == 0:
        mbarrier_arrive(empty, s)


# --- exercise 1: the producer ----------------------------------------------------------------------

@cuda.jit(device=True)
def produce(a_map, b_map, smem, t0, full, empty, mtiles, tiles, ktiles):
    q = 0  # the block's K-tile loads so far, across all its tiles
    for tile in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
        row0, col0 = tile_origin(tile, mtiles)
        for kt in range(ktiles):
            s, parity = ring_slot(q)
            mbarrier_wait_parity(empty, s, parity ^ 1)  # the consumers released the stage's last use
            mbarrier_arrive_expect_tx(full, s, STAGE_BYTES)  # both boxes' bytes will land on full[s]
            cp_async_bulk_tensor_2d_load(smem, stage_a(t0, s), a_map, kt * BK, row0, full, s)
            cp_async_bulk_tensor_2d_load(smem, stage_b(t0, s), b_map, kt * BK, col0, full, s)
            q += 1


# --- exercise 2: a consumer ------------------------------------------------------------------------

@cuda.jit(device=True)
def consume(smem, t0, full, empty, c, mtiles, tiles, ktiles, half):
    ring = smem_start(smem, t0)  # the ring's shared-memory address, for the descriptors
    q = 0  # the same count as the producer's: the same stages, the same phases
    for tile in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
        row0, col0 = tile_origin(tile, mtiles)
        acc = wgmma_acc_f32(BN)
        for kt in range(ktiles):
            s, parity = ring_slot(q)
            mbarrier_wait_parity(full, s, parity)  # the stage's boxes have landed
            acc = mma_ktile(ring, s, half, acc)
            wgmma_wait_group(1)  # the group of K-tile q - 1 has completed ...
            if kt > 0:
                release(empty, (q - 1) % STAGES)  # ... so its stage goes back to the producer
            q += 1
        wgmma_wait_group(0)  # the tile's last group
        release(empty, (q - 1) % STAGES)
        acc = wgmma_fence_operand(acc)
        store_fragment(acc, c, row0 + 64 * half, col0)


# --- the kernel around them ------------------------------------------------------------------------

def make_ws_gemm(produce, consume):
    """The kernel ``(a_map, b_map, c, mtiles, tiles, ktiles)`` around a producer and a consumer: thread 0
    acquires the maps and initialises the barriers (``full``: 1 arrival and the stage's bytes;
    ``empty``: ``CONSUMER_WARPS`` arrivals), the block synchronises once, then each warpgroup sets its
    registers and takes its part. ``launch_bounds=(384, 1)``: ptxas needs the registers at entry to
    honour setmaxnreg."""

    @cuda.jit(launch_bounds=(THREADS, 1))
    def ws_gemm(a_map, b_map, c, mtiles, tiles, ktiles):
        smem = cuda.shared.array(0, np.float16)  # 1 KB of slack, then STAGES x (A's box, B's box)
        full = cuda.shared.array(MAX_STAGES, np.uint64)
        empty = cuda.shared.array(MAX_STAGES, np.uint64)
        t0 = tile_start(smem, 1024)  # the ring starts at a 1024-byte boundary (the swizzle's repeat)
        tid = cuda.threadIdx.x
        if tid == 0:
            fence_proxy_tensormap_acquire(a_map)
            fence_proxy_tensormap_acquire(b_map)
            for s in range(STAGES):
                mbarrier_init(full, s, 1)
                mbarrier_init(empty, s, CONSUMER_WARPS)
            fence_mbarrier_init()
        cuda.syncthreads()  # the barriers exist before anyone waits on them; no block-wide barrier after
        warpgroup = tid // 128
        if warpgroup == 0:
            setmaxnreg_dec(PRODUCER_REGS)
            if tid == 0:
                produce(a_map, b_map, smem, t0, full, empty, mtiles, tiles, ktiles)
        else:
            setmaxnreg_inc(CONSUMER_REGS)
            consume(smem, t0, full, empty, c, mtiles, tiles, ktiles, warpgroup - 1)

    return ws_gemm


ws_gemm = make_ws_gemm(produce, consume)


# --- host side ---------------------------------------------------------------------------------------

def gemm_inputs(m: int, n: int, k: int, seed: int = 0):
    """Random A (m x k) and B (k x n) in fp16 (float16 arrays), B transposed (n x k) beside them."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    return a, b, np.ascontiguousarray(b.T)


def tensor_maps(a, bt, *, bn=None):
    """The maps of A (boxes of BM x BK) and of B transposed (BN x BK), fp16, 128-byte swizzle; ``a`` and
    ``bt`` are device arrays (Numba or CuPy)."""
    return TensorMap2D(a, (BM, BK), SWIZZLE), TensorMap2D(bt, (bn or BN, BK), SWIZZLE)


def grid_blocks(tiles: int) -> int:
    """The persistent grid: one block an SM on a GPU (at most one a tile); 2 in the simulator."""
    if on_simulator():
        return max(1, min(2, tiles))
    from ..environment import gpu_info

    return max(1, min(tiles, gpu_info().multiprocessors or 1))


_OPTED_IN: set[int] = set()  # kernels allowed SMEM_BYTES of dynamic shared memory already


def launch_ws_gemm(kernel, c, a, bt, *, maps=None, blocks=None):
    """``C = A B`` with ``bt`` = B transposed (fp16 device arrays, K-major), C float32: the persistent
    grid of ``kernel`` (from :func:`make_ws_gemm`), with ``SMEM_BYTES`` of dynamic shared memory
    (opted in above 48 KB on a GPU). M a multiple of BM, N of BN, K of BK. ``maps``: the
    :func:`tensor_maps` of ``a`` and ``bt``, built once by a caller that launches many times."""
    m, k = a.shape
    n = bt.shape[0]
    if m % BM or n % BN or k % BK or bt.shape[1] != k:
        raise ValueError(f"the warp-specialised GEMM takes M a multiple of {BM}, N of {BN} and K of {BK} "
                         f"(B given transposed, N x K); got A {a.shape} and B transposed {bt.shape}")
    a_map, b_map = maps or tensor_maps(a, bt)
    mtiles, tiles, ktiles = m // BM, (m // BM) * (n // BN), k // BK
    blocks = blocks or grid_blocks(tiles)
    args = (a_map, b_map, c, mtiles, tiles, ktiles)
    if SMEM_BYTES > 48 * 1024 and not on_simulator() and id(kernel) not in _OPTED_IN:
        from ..tensor_cores.toolchain import set_max_dynamic_shared_memory

        set_max_dynamic_shared_memory(kernel, args, SMEM_BYTES)  # once a kernel: not inside the timing
        _OPTED_IN.add(id(kernel))
    if not on_simulator():
        kernel[blocks, THREADS, 0, SMEM_BYTES](*args)
        return
    # The simulator runs each of the 384 threads as a Python thread; 256 consumers poll a barrier while
    # one producer issues the copies. With the interpreter's default 5 ms between thread switches a
    # launch takes 5-10 times longer (and varies more) than with 0.2 ms.
    import sys

    before = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_INTERVAL_S)
    try:
        kernel[blocks, THREADS, 0, SMEM_BYTES](*args)
    finally:
        sys.setswitchinterval(before)
