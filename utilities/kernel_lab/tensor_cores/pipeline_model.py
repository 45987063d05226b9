"""cuBLASDx's pipeline objects as Python, so a learner's pipeline kernel runs in the simulator.

06.1's last exercises have the learner write the kernel around cuBLASDx's pipeline API
(``device_pipeline.get_tile``, ``tile.execute(acc)``, the accumulator's fragment and the
epilogue). The real objects exist only in code compiled for a GPU. This module gives the same
names, with the same arguments, to kernels run by Numba's CUDA simulator, so the check of that
exercise runs on a CPU (tests and CI) and names what a GPU would only show as wrong numbers or a
crash:

* ``ModelMatmul`` stands for ``nvmath.device.Matmul`` (``size``, ``block_size``,
  ``suggest_accumulator()``, ``get_layout_gmem_c(ld)``);
* ``ModelPipeline`` for the ``DevicePipeline`` (``buffer_alignment``, ``get_tile``,
  ``reset_tile``), built from the padded A (M x K) and B transposed (N x K), as
  ``PipelineGemm`` passes them;
* ``get_tile`` returns a tile whose ``execute(acc)`` adds the tile's whole product over K to the
  calling thread's accumulator (the real one runs the K loop in stages; the sum is the same);
* the accumulator spreads the tile's elements over the threads in a scrambled but fixed order,
  so a kernel that computes coordinates itself instead of asking ``map_fragment_index`` writes
  wrong places here too (the real partition is cuBLASDx's business, and changes with the tile);
* ``make_tensor(view, layout)`` and ``acc.partition_and_copy(frag, tensor)``: the whole-tile store.
  It refuses what the real one silently does wrong: a view smaller than the tile (an edge tile:
  on a GPU the 16-byte stores run past the matrix), a layout whose leading dimension is not the
  rows' distance, and rows not a multiple of 16 bytes apart.

Every refusal is a ``PipelineModelError`` whose message says what the kernel did and what the GPU
needs instead. The model also counts ``execute`` calls per tile, so the check can tell a tile
computed twice or never.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


class PipelineModelError(RuntimeError):
    """A use of the pipeline API that the GPU would get wrong (the message says how)."""


def _thread():
    from ..simulator.scheduler import current_thread

    return current_thread("the pipeline API")


@dataclass(frozen=True)
class GmemLayout:
    """What ``Matmul.get_layout_gmem_c(ld)`` describes: a tile's rows ``ld`` elements apart."""

    leading_dimension: int


class Fragment:
    """The registers ``acc.get_results()`` gives: ``frag[i]`` and ``frag.layout.size``."""

    class _Size:
        def __init__(self, size):
            self.size = size

    def __init__(self, values):
        self._values = values
        self.layout = Fragment._Size(len(values))

    def __getitem__(self, i):
        return self._values[i]

    def __setitem__(self, i, value):
        self._values[i] = value


class Accumulator:
    """One thread's share of a ``TM x TN`` tile of accumulators."""

    def __init__(self, mm, tid):
        self._mm = mm
        self._tid = tid
        self._elements = mm.partition[tid]  # flat indices r * TN + c of this thread's values
        self._values = np.zeros(len(self._elements), dtype=mm.acc_dtype)

    def clear(self):
        self._values[:] = 0

    def get_results(self):
        return Fragment(self._values.copy())

    def is_thread_active(self):
        return True

    def map_fragment_index(self, i):
        if not 0 <= i < len(self._elements):
            raise PipelineModelError(f"map_fragment_index({i}): this thread's fragment has {len(self._elements)} values "
                                     f"(indices 0 to {len(self._elements) - 1}): loop over range(frag.layout.size)")
        return divmod(int(self._elements[i]), self._mm.tile_n)

    def partition_and_copy(self, frag, tensor):
        view, layout = tensor
        mm = self._mm
        if not isinstance(layout, GmemLayout):
            raise PipelineModelError("partition_and_copy(frag, tensor): the tensor must come from "
                                     "make_tensor(out[...], MM.get_layout_gmem_c(n))")
        if tuple(view.shape) != (mm.tile_m, mm.tile_n):
            raise PipelineModelError(
                f"partition_and_copy stores a whole {mm.tile_m} x {mm.tile_n} tile, but the part of out it was given is "
                f"{view.shape[0]} x {view.shape[1]}: this tile hangs over the matrix's edge, and on a GPU its "
                "16-byte stores would run past it. Store the edge tiles element by element")
        row_step = view.strides[0] // view.dtype.itemsize
        if layout.leading_dimension != row_step:
            raise PipelineModelError(
                f"get_layout_gmem_c({layout.leading_dimension}) says the rows are {layout.leading_dimension} elements "
                f"apart, but out's rows are {row_step} apart: pass the number of columns of out, n")
        if (row_step * view.dtype.itemsize) % 16:
            raise PipelineModelError(
                f"partition_and_copy stores 16 bytes at a time, and out's rows are {row_step * view.dtype.itemsize} "
                "bytes apart, not a multiple of 16: rows after the first start in the middle of a 16-byte chunk. "
                "Take the element-by-element path unless n is a multiple of 4")
        for i, e in enumerate(self._elements):
            r, c = divmod(int(e), mm.tile_n)
            view[r, c] = frag[i]


class Tile:
    """What ``device_pipeline.get_tile(smem, bm, bn)`` gives a block: the tile at (bm, bn)."""

    def __init__(self, pipeline, bm, bn):
        self._pipeline = pipeline
        self.bm, self.bn = int(bm), int(bn)

    def execute(self, acc):
        p = self._pipeline
        mm = p.mm
        rows = self.bm * mm.tile_m + acc._elements // mm.tile_n
        cols = self.bn * mm.tile_n + acc._elements % mm.tile_n
        products = np.einsum("ik,ik->i", p.a[rows].astype(np.float64), p.b_t[cols].astype(np.float64))
        acc._values += products.astype(mm.acc_dtype)
        if acc._tid == 0:
            p.count(self.bm, self.bn)

    def _del(self):
        pass


class ModelPipeline:
    """The ``DevicePipeline`` of a padded A (M x K) and B transposed (N x K)."""

    buffer_alignment = 128

    def __init__(self, mm, a, b_t):
        self.mm = mm
        self.a, self.b_t = np.asarray(a), np.asarray(b_t)
        self.tiles = (self.a.shape[0] // mm.tile_m, self.b_t.shape[0] // mm.tile_n)
        self.executed = np.zeros(self.tiles, dtype=np.int64)
        self._lock = threading.Lock()

    def _tile_index(self, bm, bn, what):
        bm, bn = int(bm), int(bn)
        if not (0 <= bm < self.tiles[0] and 0 <= bn < self.tiles[1]):
            raise PipelineModelError(
                f"{what} asked for tile ({bm}, {bn}), but the matrices have {self.tiles[0]} x {self.tiles[1]} tiles "
                f"(rows 0-{self.tiles[0] - 1}, columns 0-{self.tiles[1] - 1}): a walk over the tiles must stop at the last")
        return bm, bn

    def get_tile(self, smem, bm, bn):
        _thread()  # only inside a kernel
        return Tile(self, *self._tile_index(bm, bn, "get_tile"))

    def reset_tile(self, tile, bm, bn):
        tile.bm, tile.bn = self._tile_index(bm, bn, "reset_tile")

    def count(self, bm, bn):
        with self._lock:
            self.executed[bm, bn] += 1


class ModelMatmul:
    """The host object ``Matmul(size=(TM, TN, TK), ..., block_size=threads, with_pipeline=True)``."""

    def __init__(self, tile_m, tile_n, tile_k, block_size, acc_dtype, seed=0):
        self.size = (tile_m, tile_n, tile_k)
        self.tile_m, self.tile_n = tile_m, tile_n
        self.block_size = block_size
        self.acc_dtype = np.dtype(acc_dtype)
        if (tile_m * tile_n) % block_size:
            raise ValueError("the model spreads a tile evenly over the threads")
        order = np.random.default_rng(seed).permutation(tile_m * tile_n)
        self.partition = order.reshape(block_size, -1)

    def suggest_accumulator(self):
        return Accumulator(self, _thread().thread_id)

    def get_layout_gmem_c(self, leading_dimension):
        return GmemLayout(int(leading_dimension))


def make_tensor(view, layout):
    """``nvmath.device.make_tensor``: a global-memory view with the layout it is to be written in."""
    return view, layout
