"""Module 08's checks for 08.2: the learner's tensor-copy kernels (TMA), run with the copy engine's model.

Each check takes the learner's kernel (and, for the copy, the learner's ``tensor_maps``), compiles
it again at the sizes of each case (``BOX``, ``SWIZZLE``, ``STAGES``, ``TILE_ELEMS`` of
``kernel_lab.hopper_async.tma_tiles``, through ``with_constants``), and moves a random float32 matrix
through it. The matrices' sides are not multiples of the box, so the boxes at the right and bottom
edges reach past the matrix: the load must bring zeros there, and the store must write nothing there
but the rest of each row's last 16-byte chunk, which the copy engine writes whole (measured on an
H200: kernel_lab.device.tensor_map.chunk_end). Each matrix lives in a larger allocation (rows padded
to a multiple of 16 bytes and one 16-byte chunk more, one spare row) filled with a sentinel, so a
write past that chunk shows. The output is compared bit for bit.
The cases are the same on a GPU and in the simulator (so is the line a check prints): small ones at
this backend's sizes, and one at the GPU's box, swizzle and stages, which the simulator runs once,
at 256 threads a block.

In the simulator the kernel runs against ``kernel_lab.device.tma_sim``, which names the mistakes a
GPU is silent about, and every launch is bounded (``check.finishes_within``):

* a map used before ``fence_proxy_tensormap_acquire``, a barrier whose initialisation was not
  fenced, a tile not 128-byte aligned or too small for the box, a store from a tile the threads wrote
  without ``fence_proxy_async_shared``, a tile written again while its store reads it: the model's
  own message (``MbarrierProtocolError``);
* an expect-tx that is not the box's bytes: too few, and the model stops the kernel when the phase
  completes with the box in flight; too many (the tile's padded size in shared memory, say), and
  the time limit's report names the box and its bytes;
* a tile read before its box landed: the output holds the model's in-flight bytes, and the
  message says so;
* anything else: the first wrong element and where in the input its value came from (another place
  of the same box: the swizzled layout read as plain rows).
"""

from __future__ import annotations

import numpy as np

from .. import progress
from ..check import CheckFailed
from ..device.tensor_map import chunk_end
from ..hopper_async import tma_tiles as tt
from .hopper_async import run_async

SMALL_S = 6  # a small case takes well under a second in the simulator; a hang stops after this
GPU_SIZES_S = 60  # the GPU's box at 256 threads: a second or so
SENTINEL = -7.0  # outside the matrices; the inputs are standard normal

COPY_HINT = ("thread 0 acquires both maps (fence_proxy_tensormap_acquire), initialises the barrier with a count "
             "of 1 and fences it, announces the box's bytes (BOX * BOX * 4: the box, not the tile's padded size "
             "in shared memory), loads the box at x = column, y = row, waits on parity 0, then stores the tile "
             "at the same x, y, commits and waits for the store's read (cp_async_bulk_wait_group_read(0)).")
TRANSPOSE_HINT = ("read element [r, c] of the loaded tile at tma_tile_index(r, c, BOX, 4, SWIZZLE) and write it at "
                  "tma_tile_index(c, r, BOX, 4, SWIZZLE) of the second tile; then fence_proxy_async_shared() in "
                  "every thread, cuda.syncthreads(), and thread 0 stores the second tile at x = y, y = x.")
RING_HINT = ("box q of the block goes to stage s = q % STAGES, whose barrier is then in phase q // STAGES: the "
             "consumers wait with parity (r // STAGES) & 1. Before the threads write a transposed tile again, "
             "thread 0 waits until at most one store is pending (cp_async_bulk_wait_group_read(1)) and the "
             "block synchronises; every block waits for its last stores (wait_group_read(0)) before it exits.")


def _input(rows: int, cols: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def _explain(got: np.ndarray, a: np.ndarray, transpose: bool, box: int) -> str:
    want = a.T if transpose else a
    wrong = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    i, j = (int(v) for v in wrong[0])
    # the box of the input that element [i, j] of the output comes from
    ar, ac = (j, i) if transpose else (i, j)
    head = (f"{len(wrong)} of {want.size} elements wrong; the first at out[{i}, {j}] (from a[{ar}, {ac}], in the input's "
            f"box at row {ar // box * box}, column {ac // box * box}): ")
    if got[i, j] == SENTINEL:
        return head + ("never written. Is every box loaded and stored (the grid, the loop over this block's boxes), "
                       "at the right place (x is the column, y the row)?")
    hits = np.argwhere(a == got[i, j])
    if hits.size:
        k, m = (int(v) for v in hits[0])
        same_box = (k // box, m // box) == (ar // box, ac // box)
        where = (" Another element of the same box: the tile's layout misread (the box lands in the 128-byte "
                 "swizzled order: read and write both tiles through tma_tile_index with the map's swizzle), or a "
                 "transpose missing or done twice." if same_box else
                 " Another box: a box loaded from or stored to the wrong place (x is the column, y the row; for the "
                 "transpose the store's x is the input box's y), or a stage read that holds another box.")
        return head + f"it holds a[{k}, {m}], not a[{ar}, {ac}]." + where
    if got[i, j] == 0:
        return head + ("got 0: read from a place of the tile that the box does not fill (the tile's layout misread: "
                       "with the 128-byte swizzle each row of the box takes 128 bytes of the tile, the rest of them "
                       "padding when the box is narrower, so read and write both tiles through tma_tile_index), or a "
                       "box loaded from outside the matrix (the copy engine fills it with zeros there).")
    return head + f"got {float(got[i, j]):g}, expected {float(want[i, j]):g}."


def _run(name, label, launch, maps, rows, cols, sizes, transpose, seconds, hint, seed):

    a = _input(rows, cols, seed)
    _, v_in = tt.device_matrix(rows, cols, SENTINEL, a)
    out_rows, out_cols = (cols, rows) if transpose else (rows, cols)
    d_out, v_out = tt.device_matrix(out_rows, out_cols, SENTINEL)
    where = f"{name} ({label})"
    made = maps(v_in, v_out, sizes["BOX"], sizes["SWIZZLE"])
    if not (isinstance(made, tuple) and len(made) == 2 and all(isinstance(m, tt.TensorMap2D) for m in made)):
        raise CheckFailed(f"{where}: tensor_maps(d_in, d_out, box, swizzle) returned {made!r}; it returns two "
                          "TensorMap2D, the input's and the output's, each seen in boxes of (box, box) with the "
                          "given swizzle.")
    src_map, dst_map = made
    got = run_async(where, seconds, hint, lambda: launch(src_map, dst_map), d_out)
    inside = np.ascontiguousarray(got[:out_rows, :out_cols])
    want = a.T if transpose else a
    if not np.array_equal(inside.view(np.uint32), want.view(np.uint32)):
        raise CheckFailed(f"{where}: {_explain(inside, a, transpose, sizes['BOX'])}")
    rest = got.copy()
    rest[:out_rows, :chunk_end(out_cols, 4)] = SENTINEL  # the copy engine writes each row's last chunk whole
    if not (rest == SENTINEL).all():
        bad = np.argwhere(rest != SENTINEL)
        raise CheckFailed(f"{where}: {len(bad)} elements written outside the {out_rows} x {out_cols} output, the "
                          f"first at [{int(bad[0][0])}, {int(bad[0][1])}] of its allocation: a store through a plain "
                          "pointer, or a map that describes more than the matrix (the tensor map writes only the "
                          "part of a box inside it, in whole 16-byte chunks).")


def _check(name, kernel, make_cases, maps, hint, transpose):
    cases = []
    for sizes, seconds in ((tt.constants(), SMALL_S), (tt.GPU, GPU_SIZES_S)):
        names = {k: v for k, v in sizes.items() if k != "THREADS"}
        k = tt.with_constants(kernel, **names)
        for label, launch, rows, cols in make_cases(k, sizes, gpu_sizes=seconds == GPU_SIZES_S):
            cases.append((label, launch, rows, cols, sizes, seconds))
    for seed, (label, launch, rows, cols, sizes, seconds) in enumerate(cases):
        _run(name, label, launch, maps, rows, cols, sizes, transpose, seconds, hint, seed)
    progress.passed(name)
    print(f"{name}: correct for all {len(cases)} cases ({', '.join(c[0] for c in cases)})")


def check_tma_copy(kernel, maps=None, name: str = "TMA copy") -> None:
    """Exercise 1: ``kernel(src_map, dst_map)``, one block a box; ``maps(d_in, d_out, box, swizzle)``
    builds the two tensor maps (the learner's ``tensor_maps``; the package's when None)."""
    def cases(k, sizes, gpu_sizes):
        b = sizes["BOX"]
        launch = lambda s, d: tt.launch_tma_copy(k, s, d, threads=32)
        if gpu_sizes:
            return [("the GPU's box with cut edges", launch, b + 5, 2 * b + 3)]
        return [("one box", launch, b, b), ("edges cut on both sides", launch, 2 * b + 3, b + 5),
                ("one row of many boxes", launch, 1, 3 * b + 4)]

    _check(name, kernel, cases, maps or tt.tensor_maps, COPY_HINT, transpose=False)


def check_tma_transpose(kernel, maps=None, name: str = "TMA transpose") -> None:
    """Exercise 2: ``kernel(src_map, dst_map)``, one block a box, the transposition in shared memory."""
    def cases(k, sizes, gpu_sizes):
        b, th = sizes["BOX"], sizes["THREADS"]
        launch = lambda s, d: tt.launch_tma_transpose(k, s, d, threads=th)
        if gpu_sizes:
            return [("the GPU's box with cut edges", launch, b + 5, 2 * b + 3)]
        return [("one box", launch, b, b), ("edges cut on both sides", launch, 2 * b + 3, b + 5),
                ("one row", launch, 1, 2 * b + 4)]

    _check(name, kernel, cases, maps or tt.tensor_maps, TRANSPOSE_HINT, transpose=True)


def check_tma_transpose_ring(kernel, maps=None, name: str = "TMA transpose ring") -> None:
    """Exercise 3: ``kernel(src_map, dst_map, rows, cols)``, a persistent grid with a ring of stages."""
    def cases(k, sizes, gpu_sizes):
        b, s, th = sizes["BOX"], sizes["STAGES"], sizes["THREADS"]

        def ring(blocks):
            return lambda sm, dm: tt.launch_tma_ring(k, sm, dm, blocks=blocks, stages=s, threads=th)

        if gpu_sizes:
            return [("the GPU's box and stages with the ring wrapping", ring(1), 3 * b + 5, 2 * b + 7)]
        return [("one box for 2 blocks", ring(2), b, b),
                ("the ring wrapping twice in 2 blocks with cut edges", ring(2), 3 * b + 3, (2 * s - 1) * b + 6),
                ("more blocks than boxes", ring(3), b + 1, b - 3)]

    _check(name, kernel, cases, maps or tt.tensor_maps, RING_HINT, transpose=True)


__all__ = ["check_tma_copy", "check_tma_transpose", "check_tma_transpose_ring"]
