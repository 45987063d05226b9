"""08.2's kernels: 2-D boxes of a matrix moved by Hopper's tensor copies (TMA), written by the learner.

The package keeps copies of the three kernels and the host function the notebook's learner writes
(the kernels held to the notebook by tests/test_package_copies.py), so that the checks' tests and
later notebooks can run them:

* ``tensor_maps(d_in, d_out, box, swizzle)``: the host's two tensor maps
  (:class:`kernel_lab.device.tensor_map.TensorMap2D`), square boxes of ``box`` x ``box`` float32.
* ``tma_copy(src_map, dst_map)``: one block a box; thread 0 acquires both maps, loads the box at
  column ``blockIdx.x * BOX``, row ``blockIdx.y * BOX`` into a shared tile on one barrier (expect-tx:
  the box's bytes) and stores the same tile through the output's map, then waits for the store's read.
* ``tma_transpose(src_map, dst_map)``: the same load; the threads copy element ``[r, c]`` of the
  loaded tile to ``[c, r]`` of a second tile, both in the 128-byte swizzled layout the copy engine
  uses (``tma_tile_index``), fence for the async proxy, and thread 0 stores the second tile at
  column ``y``, row ``x`` of the transpose.
* ``tma_transpose_ring(src_map, dst_map, rows, cols)``: a persistent grid; block ``b`` takes boxes
  ``b``, ``b + grid``, ... (numbered ``q`` in the block, box ``i`` at column ``(i % across) * BOX``,
  row ``(i // across) * BOX``). Thread 0 loads box ``q`` into stage ``q % STAGES`` while the threads
  transpose box ``q - (STAGES - 1)`` into one of two output tiles, whose store is in flight while
  the next box is transposed. A stage's barrier is in phase ``q // STAGES`` for its ``q``-th box.

Sizes are module constants that the kernels read (``BOX``, ``SWIZZLE``, ``STAGES``, ``TILE_ELEMS``;
``THREADS`` for the launchers), the GPU's or the simulator's; ``with_constants`` (module 02's)
compiles a kernel again with others. A shared tile takes ``TILE_ELEMS`` float32: ``BOX`` rows, each
padded to the swizzle span (``tile_elems``), a multiple of 1024 bytes at every size used here, so
tiles placed one after another from ``tile_start(smem, 1024)`` all start at the swizzle's repeat.

``transpose_fast`` is 01.3's fastest transpose (a padded shared tile, flat int32 indices), the package's
copy of it: 08.2 times it beside the learner's TMA transpose, as the course's own peer.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32

from ..device.bulk_copy import (
    cp_async_bulk_commit_group,
    cp_async_bulk_wait_group_read,
    fence_proxy_async_shared,
)
from ..device.mbarrier import (
    fence_mbarrier_init,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait_parity,
)
from ..device.tensor_map import TensorMap2D
from ..device.tma import (
    cp_async_bulk_tensor_2d_load,
    cp_async_bulk_tensor_2d_store,
    fence_proxy_tensormap_acquire,
    tile_start,
    tma_tile_index,
)
from ..environment import on_simulator
from ..reductions_gemm.sgemm import with_constants

__all__ = [
    "BOX",
    "GPU",
    "MAX_STAGES",
    "SIM",
    "STAGES",
    "SWIZZLE",
    "THREADS",
    "TILE_ELEMS",
    "bank_ways",
    "constants",
    "device_matrix",
    "launch_tma_copy",
    "launch_tma_ring",
    "launch_tma_transpose",
    "launch_transpose_fast",
    "ring_blocks",
    "tensor_maps",
    "tile_elems",
    "tma_copy",
    "tma_transpose",
    "tma_transpose_ring",
    "transpose_fast",
    "with_constants",
]


def tile_elems(box: int, swizzle: int) -> int:
    """float32 elements of shared memory a ``box`` x ``box`` tile takes: each row padded to the swizzle
    span (``TensorMap2D.smem_bytes`` / 4)."""
    return box * max(swizzle, 4 * box) // 4


# The GPU's sizes: 32 x 32 float32 boxes (4 KB; a row is 128 bytes, the 128-byte swizzle's span), a
# ring of 4 stages and 2 transposed tiles (25 KB of shared memory a block with the alignment's slack),
# 256 threads a block. The simulator's: 8 x 8 boxes (each row padded to 128 bytes in the tile), 3 stages,
# one warp. Both use the 128-byte swizzle.
GPU = dict(BOX=32, SWIZZLE=128, STAGES=4, THREADS=256)
SIM = dict(BOX=8, SWIZZLE=128, STAGES=3, THREADS=32)
for _sizes in (GPU, SIM):
    _sizes["TILE_ELEMS"] = tile_elems(_sizes["BOX"], _sizes["SWIZZLE"])
MAX_STAGES = 8  # barrier words of the ring (a shared array's size is a constant)


def constants(simulator: bool | None = None) -> dict:
    """The sizes for this backend (``simulator``: None asks the environment)."""
    return dict(SIM if (on_simulator() if simulator is None else simulator) else GPU)


BOX, SWIZZLE, STAGES, THREADS, TILE_ELEMS = (constants()[k] for k in ("BOX", "SWIZZLE", "STAGES", "THREADS",
                                                                       "TILE_ELEMS"))


def device_matrix(rows: int, cols: int, fill=np.nan, host=None):
    """(a device array whose rows are a multiple of 16 bytes apart, plus one spare row, filled with
    ``fill``; its ``rows x cols`` view). A tensor map needs that row pitch; the spare row and the
    columns past ``cols`` show a write outside the matrix: each row has one 16-byte chunk more than
    it needs, since a tensor store writes the chunk that holds the last column whole.
    ``host``: values for the view."""
    ld = -(-cols // 4) * 4 + 4
    padded = np.full((rows + 1, ld), fill, np.float32)
    if host is not None:
        padded[:rows, :cols] = host
    d = cuda.to_device(padded)
    return d, d[:rows, :cols]


# --- exercise 1: a box in, the same box out -----------------------------------------------------

def tensor_maps(d_in, d_out, box, swizzle):
    """The tensor maps of the input and the output matrix: boxes of ``box`` x ``box`` float32."""
    src_map = TensorMap2D(d_in, (box, box), swizzle)
    dst_map = TensorMap2D(d_out, (box, box), swizzle)
    return src_map, dst_map


@cuda.jit
def tma_copy(src_map, dst_map):
    smem = cuda.shared.array(0, np.float32)  # 1024 bytes of slack, then one tile
    bars = cuda.shared.array(1, np.uint64)  # the `full` barrier
    t0 = tile_start(smem, 1024)  # the tile starts at a 1024-byte boundary (the swizzle's repeat)
    x = cuda.blockIdx.x * BOX  # the box's first column
    y = cuda.blockIdx.y * BOX  # and its first row
    if cuda.threadIdx.x == 0:
        fence_proxy_tensormap_acquire(src_map)  # the host wrote the maps: acquire them once per block
        fence_proxy_tensormap_acquire(dst_map)
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
        mbarrier_arrive_expect_tx(bars, 0, BOX * BOX * 4)  # the box's bytes, zeros outside the matrix included
        cp_async_bulk_tensor_2d_load(smem, t0, src_map, x, y, bars, 0)
        mbarrier_wait_parity(bars, 0, 0)  # the box has landed
        cp_async_bulk_tensor_2d_store(dst_map, x, y, smem, t0)  # only its part inside the matrix (whole 16-byte chunks)
        cp_async_bulk_commit_group()
        cp_async_bulk_wait_group_read(0)  # the copy engine has read the tile: the block may exit


def launch_tma_copy(kernel, src_map, dst_map, *, threads=32):
    """One block a box of the input; 1024 bytes of slack and one tile of dynamic shared memory."""
    rows, cols = src_map.shape
    box = src_map.box[0]
    grid = (-(-cols // box), -(-rows // box))
    kernel[grid, threads, 0, 1024 + src_map.smem_bytes](src_map, dst_map)


# --- exercise 2: a box in, its transpose out ----------------------------------------------------

@cuda.jit
def tma_transpose(src_map, dst_map):
    smem = cuda.shared.array(0, np.float32)  # 1024 bytes of slack, the loaded tile, the transposed tile
    bars = cuda.shared.array(1, np.uint64)
    tid = cuda.threadIdx.x
    t_in = tile_start(smem, 1024)  # the loaded tile
    t_out = t_in + TILE_ELEMS  # the transposed tile, right after it
    x = cuda.blockIdx.x * BOX
    y = cuda.blockIdx.y * BOX
    if tid == 0:  # Exercise 1's load
        fence_proxy_tensormap_acquire(src_map)
        fence_proxy_tensormap_acquire(dst_map)
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
        mbarrier_arrive_expect_tx(bars, 0, BOX * BOX * 4)
        cp_async_bulk_tensor_2d_load(smem, t_in, src_map, x, y, bars, 0)
    cuda.syncthreads()  # the barrier exists before the other threads wait on it
    mbarrier_wait_parity(bars, 0, 0)
    for i in range(tid, BOX * BOX, cuda.blockDim.x):  # a warp takes a row of the box
        r = i // BOX
        c = i - r * BOX
        v = smem[t_in + tma_tile_index(r, c, BOX, 4, SWIZZLE)]  # element [r, c], where the swizzle put it
        smem[t_out + tma_tile_index(c, r, BOX, 4, SWIZZLE)] = v  # becomes [c, r] of the transposed box
    fence_proxy_async_shared()  # the threads' writes, made visible to the copy engine
    cuda.syncthreads()
    if tid == 0:
        cp_async_bulk_tensor_2d_store(dst_map, y, x, smem, t_out)  # column y, row x of the transpose
        cp_async_bulk_commit_group()
        cp_async_bulk_wait_group_read(0)


def launch_tma_transpose(kernel, src_map, dst_map, *, threads=None):
    """One block a box of the input; the slack and two tiles of dynamic shared memory."""
    threads = threads or THREADS
    rows, cols = src_map.shape
    box = src_map.box[0]
    grid = (-(-cols // box), -(-rows // box))
    kernel[grid, threads, 0, 1024 + src_map.smem_bytes + dst_map.smem_bytes](src_map, dst_map)


# --- exercise 3: a ring of stages in a persistent grid ------------------------------------------

@cuda.jit
def tma_transpose_ring(src_map, dst_map, rows, cols):
    smem = cuda.shared.array(0, np.float32)  # slack, STAGES loaded tiles, 2 transposed tiles
    bars = cuda.shared.array(MAX_STAGES, np.uint64)  # full[s] = bars[s]
    tid = cuda.threadIdx.x
    t0 = tile_start(smem, 1024)  # loaded tile s at t0 + s * TILE_ELEMS, transposed tile o at t0 + (STAGES + o) * ...
    if tid == 0:
        fence_proxy_tensormap_acquire(src_map)
        fence_proxy_tensormap_acquire(dst_map)
        for s in range(STAGES):
            mbarrier_init(bars, s, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    across = (cols + BOX - 1) // BOX  # boxes in a row of boxes: box i is at column (i % across) * BOX
    nboxes = across * ((rows + BOX - 1) // BOX)
    mine = (nboxes - cuda.blockIdx.x + cuda.gridDim.x - 1) // cuda.gridDim.x  # boxes b, b + grid, ...
    for q in range(mine + STAGES - 1):
        if tid == 0 and q < mine:  # the producer: the block's box q into stage q % STAGES
            s = q % STAGES  # its last box was transposed before the last cuda.syncthreads(): the stage is free
            i = cuda.blockIdx.x + q * cuda.gridDim.x
            mbarrier_arrive_expect_tx(bars, s, BOX * BOX * 4)
            cp_async_bulk_tensor_2d_load(smem, t0 + s * TILE_ELEMS, src_map, (i % across) * BOX,
                                         (i // across) * BOX, bars, s)
        r = q - (STAGES - 1)  # the consumers: box r, STAGES - 1 boxes behind the producer
        if r >= 0:
            s = r % STAGES
            t_out = t0 + (STAGES + r % 2) * TILE_ELEMS  # two transposed tiles, taken in turn
            if tid == 0:
                cp_async_bulk_wait_group_read(1)  # the store of box r - 2 has read t_out (box r - 1's may not)
            cuda.syncthreads()  # ... before any thread writes t_out again
            mbarrier_wait_parity(bars, s, (r // STAGES) & 1)  # box r has landed
            for k in range(tid, BOX * BOX, cuda.blockDim.x):
                rr = k // BOX
                c = k - rr * BOX
                v = smem[t0 + s * TILE_ELEMS + tma_tile_index(rr, c, BOX, 4, SWIZZLE)]
                smem[t_out + tma_tile_index(c, rr, BOX, 4, SWIZZLE)] = v
            fence_proxy_async_shared()
            cuda.syncthreads()  # the transposed tile is complete; the threads are done with stage s
            if tid == 0:
                i = cuda.blockIdx.x + r * cuda.gridDim.x
                cp_async_bulk_tensor_2d_store(dst_map, (i // across) * BOX, (i % across) * BOX, smem, t_out)
                cp_async_bulk_commit_group()
    if tid == 0:
        cp_async_bulk_wait_group_read(0)  # the last stores have read their tiles before the block exits


def ring_blocks(rows: int, cols: int, *, box=None, per_sm=2) -> int:
    """The persistent grid: ``per_sm`` blocks an SM on a GPU (at most one a box); 2 in the simulator."""
    box = box or BOX
    nboxes = -(-rows // box) * -(-cols // box)
    if on_simulator():
        return max(1, min(2, nboxes))
    from ..environment import gpu_info

    return max(1, min(nboxes, per_sm * (gpu_info().multiprocessors or 1)))


def launch_tma_ring(kernel, src_map, dst_map, *, blocks=None, stages=None, threads=None):
    """The persistent grid over the input's boxes; the slack, ``stages`` loaded and 2 transposed tiles."""
    stages, threads = stages or STAGES, threads or THREADS
    rows, cols = src_map.shape
    blocks = blocks or ring_blocks(rows, cols, box=src_map.box[0])
    shared = 1024 + stages * src_map.smem_bytes + 2 * dst_map.smem_bytes
    kernel[blocks, threads, 0, shared](src_map, dst_map, rows, cols)


# --- the bank conflicts of the transposition ----------------------------------------------------

def bank_ways(swizzle: int, box: int = 32) -> tuple[int, int]:
    """(ways of the read, ways of the write): the most threads of one warp that hit the same
    shared-memory bank at different addresses, when the warp's 32 threads take one row ``r`` of the
    loaded ``box`` x ``box`` float32 tile (elements ``[r, 0..31]``) and write them to column ``r`` of the
    transposed tile, both in the layout of ``swizzle`` (worst row). 1 is conflict-free."""
    from ..device.tensor_map import box_offsets

    offsets = box_offsets((box, box), 4, swizzle)  # bytes; the same layout for both tiles (square boxes)
    worst = [1, 1]
    for r in range(box):
        for k, addresses in enumerate((offsets[r, :32], offsets[:32, r])):
            banks = (addresses // 4) % 32
            for bank in set(banks.tolist()):
                worst[k] = max(worst[k], len(set(addresses[banks == bank].tolist())))
    return worst[0], worst[1]


# --- 01.3's fastest transpose, the course's own peer --------------------------------------------

TILE, ROWS_FAST = 32, 4  # 01.3's tile, and its 32 x 4 threads a tile
TILE_PADDED = TILE + 1
TILE_32 = np.int32(TILE)


@cuda.jit
def transpose_fast(a_flat, out_flat, n_rows, n_cols):
    # a_flat: the n_rows x n_cols matrix as a 1D array; out_flat: its n_cols x n_rows transpose
    tile = cuda.shared.array((TILE, TILE_PADDED), float32)
    tx, ty = int32(cuda.threadIdx.x), int32(cuda.threadIdx.y)
    bx, by = int32(cuda.blockIdx.x), int32(cuda.blockIdx.y)
    interior = (bx + 1) * TILE_32 <= n_cols and (by + 1) * TILE_32 <= n_rows
    col, row = bx * TILE_32 + tx, by * TILE_32 + ty
    if interior:  # no bounds tests; one multiplication for all 8 elements
        first = row * n_cols + col
        for j in range(0, TILE, ROWS_FAST):
            tile[ty + j, tx] = a_flat[first + j * n_cols]
    else:
        for j in range(0, TILE, ROWS_FAST):
            if row + j < n_rows and col < n_cols:
                tile[ty + j, tx] = a_flat[(row + j) * n_cols + col]
    cuda.syncthreads()
    col, row = by * TILE_32 + tx, bx * TILE_32 + ty  # the transposed tile's place in out
    if interior:
        first = row * n_rows + col
        for j in range(0, TILE, ROWS_FAST):
            out_flat[first + j * n_rows] = tile[tx, ty + j]
    else:
        for j in range(0, TILE, ROWS_FAST):
            if row + j < n_cols and col < n_rows:
                out_flat[(row + j) * n_rows + col] = tile[tx, ty + j]


def launch_transpose_fast(out, a):
    """01.3's launch of ``transpose_fast``: 32 x 4 threads a 32 x 32 tile, flat views, int32 sides
    (``a`` and ``out`` contiguous)."""
    n_rows, n_cols = a.shape
    grid = (-(-n_cols // TILE), -(-n_rows // TILE))
    transpose_fast[grid, (TILE, ROWS_FAST)](a.reshape(a.size), out.reshape(out.size), np.int32(n_rows),
                                            np.int32(n_cols))
