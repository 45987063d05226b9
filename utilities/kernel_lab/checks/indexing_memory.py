"""Checks for module 01, "The GPU in practice": indexing, memory access patterns, and the transpose.

Notebook 01 (threads, blocks, grids) uses :func:`check_matrix_add`, :func:`check_column_sums` and
:func:`check_grid_stride`; notebook 02 (the memory hierarchy) :func:`check_strided_copy`,
:func:`check_copy` (4-, 8- and 16-byte copies) and :func:`check_scale_columns`; notebook 03
(transpose, shared memory, banks) :func:`check_tiled_copy` and :func:`check_transpose`.

Each function takes the learner's *launcher*, a plain Python function that allocates nothing and
launches the kernel on the arrays it is given, for example::

    def launch_matrix_add(out, a, b):
        matrix_add[grid, block](a, b, out)

    check_matrix_add(launch_matrix_add)

It draws random float32 inputs, computes a float64 NumPy reference, and runs
``kernel_lab.check_kernel`` over shapes chosen to catch the mistakes of that exercise: one element,
a single row, a single column, shapes that are not multiples of any block size, non-square shapes
(which expose swapped rows and columns) and a large shape (many blocks). On success it prints one
line; on failure it raises ``kernel_lab.CheckFailed`` with ``check_kernel``'s explanation, plus a
hint of its own when it recognises a mistake particular to the exercise (rows and columns swapped;
a grid-stride loop that does not loop; transpose tiles that were moved but not transposed).

A kernel that indexes outside an array stops earlier, under the simulator, with the simulator's
own error (``OutOfBoundsAccess``), and a tiled kernel whose threads read shared memory before it
is written stops with ``SharedMemoryRace``: both name the array, the thread and the line.

All results but the column sums are copies, sums or products of one or two numbers, so the
tolerance is that of one float32 rounding (``k=1`` in ``kernel_lab.check.tolerance``); copies and
transposes are exact. A column sum of ``rows`` terms has ``k = rows``.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from .. import progress
from ..check import CheckFailed, check_kernel, is_poison, poisoned
from ..check import settings as check_settings
from ..environment import gpu_info, on_simulator
from ..sizes import adversarial_sizes
from ..validate import require_callable, require_positive_int

__all__ = ["check_matrix_add", "check_grid_stride", "check_column_sums", "check_strided_copy",
           "check_scale_columns", "check_copy", "check_tiled_copy", "check_transpose"]


# ---------------------------------------------------------------------------------------------
# Shapes

def matrix_shapes() -> list[tuple[str, tuple[int, int]]]:
    """(label, (rows, columns)) pairs for 2D element-wise kernels.

    The labels are the same on a GPU and under the simulator, so a check's success line is too.
    None of the extents is a multiple of 8, 16 or 32, so every block size leaves a partial block.
    """
    large = (40, 75) if on_simulator() else (3001, 4099)
    return [("1x1", (1, 1)), ("one row", (1, 67)), ("one column", (37, 1)),
            ("non-square", (19, 69)), ("large", large)]


def transpose_shapes(tile: int) -> list[tuple[str, tuple[int, int]]]:
    """(label, (rows, columns)) pairs for a transpose done in ``tile`` x ``tile`` tiles.

    1x1; (tile - 1) x (tile + 1); a square that is not a multiple of the tile (it
    exposes kernels that copy instead of transposing); a non-square shape of several tiles with
    partial tiles on both edges; and a large non-square shape.
    """
    tile = require_positive_int(tile, "tile")
    large = (tile + 13, 2 * tile + 7) if on_simulator() else (4099, 4133)
    return [("1x1", (1, 1)), ("tile-1 x tile+1", (max(tile - 1, 1), tile + 1)),
            ("square", (tile + 5, tile + 5)), ("non-square", (2 * tile + 3, tile + 5)),
            ("large", large)]


# ---------------------------------------------------------------------------------------------
# Extra hints: mistakes of these exercises that the general checker cannot name

def _quietly_correct(name, launch, reference, inputs, sizes) -> bool:
    """Does the launcher pass on these sizes? (Nothing printed; any failure counts as 'no'.)"""
    try:
        with contextlib.redirect_stdout(io.StringIO()), progress.paused():
            check_kernel(name, launch, reference, inputs, sizes=sizes, seed=1, rerun=False)
        return True
    except Exception:  # noqa: BLE001 - any failure, including the simulator's, means "not correct"
        return False


def _with_hint(failure: CheckFailed, hint: str | None) -> CheckFailed:
    if hint is None:
        return failure
    return CheckFailed(f"{failure}\nHint: {hint}")


_SWAP_HINT = (
    "the kernel is right on square matrices but wrong on non-square ones, so rows and columns are "
    "swapped somewhere (a grid that is merely too small would fail on squares too). In Numba, "
    "`cuda.grid(2)` returns (x, y) and x is the fast, column index: write `col, row = cuda.grid(2)` "
    "and index `a[row, col]`. The launch takes x first as well: "
    "`kernel[(blocks along the columns, blocks along the rows), (threads_x, threads_y)]`, the "
    "opposite order of the array's shape (rows, columns).")


def _run_2d(name, launch, reference, inputs, shapes, seed):
    """check_kernel over 2D shapes; on failure, test a square shape to recognise swapped rows/cols."""
    try:
        check_kernel(name, launch, reference, inputs, sizes=shapes, seed=seed)
    except CheckFailed as failure:
        if check_settings.first_failure_only:
            raise
        square = [("square", (37, 37))]
        hint = _SWAP_HINT if _quietly_correct(name, launch, reference, inputs, square) else None
        raise _with_hint(failure, hint) from None


# ---------------------------------------------------------------------------------------------
# Notebook 01: threads, blocks, grids

def _two_matrices(shape, rng):
    return (rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32))


def check_matrix_add(launch, *, seed=None) -> None:
    """Check a 2D kernel that adds two float32 matrices: ``out[row, col] = a[row, col] + b[row, col]``.

    ``launch(out, a, b)`` launches the kernel on device arrays of shape (rows, columns). Shapes:
    :func:`matrix_shapes` (1x1, one row, one column, non-square, large). Besides the general
    checker's hints, recognises rows and columns swapped in the kernel (``row, col = cuda.grid(2)``):
    such a kernel passes on square matrices and fails on the others.
    """
    require_callable(launch, "launch")
    _run_2d("matrix add", launch, lambda a, b: a + b, _two_matrices, matrix_shapes(), seed)


def grid_stride_cases() -> list[tuple[str, tuple[int, int, int]]]:
    """(label, (n, blocks, threads)) for grid-stride kernels: always fewer threads than needed,
    except in the first case, where there are more threads than elements."""
    sms = gpu_info().multiprocessors or 4
    large = (3001, 4, 64) if on_simulator() else ((1 << 24) + 3, 4 * sms, 256)
    return [("fewer elements than threads", (50, 2, 32)), ("one element per thread", (64, 2, 32)),
            ("many elements per thread", (1001, 3, 32)), ("large", large)]


def _saxpy_inputs(case, rng):
    n, blocks, threads = case
    a = np.float32(rng.uniform(0.5, 2.0))
    return (a, rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32),
            blocks, threads)


def _grid_stride_hint(launch) -> str | None:
    """Launch a small fixed grid over more elements than threads and look at what was written."""
    from numba import cuda

    blocks, threads, n = 2, 32, 200
    rng = np.random.default_rng(0)
    x = cuda.to_device(rng.standard_normal(n, dtype=np.float32))
    y = cuda.to_device(rng.standard_normal(n, dtype=np.float32))
    out = poisoned(n)
    try:
        launch(out, np.float32(1.5), x, y, blocks, threads)
        unwritten = is_poison(out.copy_to_host())
    except Exception:  # noqa: BLE001 - the check's own failure already explains it
        return None
    covered = blocks * threads
    if unwritten.all():  # nothing written: the general checker's hint ("not done yet") says it best
        return None
    if not unwritten[:covered].any() and unwritten[covered:].all():
        return ("with 2 blocks of 32 threads and 200 elements, exactly the first 64 elements were "
                "written: each thread did one element and stopped. In a grid-stride loop each thread "
                "starts at `cuda.grid(1)` and steps by the number of threads in the whole grid, "
                "`cuda.gridsize(1)`: `for i in range(cuda.grid(1), n, cuda.gridsize(1)):`.")
    if unwritten.any():
        return ("with a fixed grid of 2 blocks of 32 threads, some elements were skipped: the loop "
                "must start at the thread's global index `cuda.grid(1)` (not `cuda.threadIdx.x`) and "
                "step by the whole grid, `cuda.gridsize(1)` (= blocks x threads per block).")
    return None


def check_grid_stride(launch, *, seed=None) -> None:
    """Check a grid-stride SAXPY: ``out = a * x + y`` with a fixed, small grid.

    ``launch(out, a, x, y, blocks, threads)`` must launch ``blocks`` blocks of ``threads`` threads,
    whatever the length of the arrays: the check hands it grids far smaller than the arrays (for
    example 3 blocks of 32 threads for 1001 elements, and 4 x the number of SMs for the large case),
    so each thread must loop. Recognises a kernel without the loop and a loop with the wrong start
    or step.
    """
    require_callable(launch, "launch")
    try:
        check_kernel("grid-stride saxpy", launch, lambda a, x, y, blocks, threads: a * x + y,
                     _saxpy_inputs, sizes=grid_stride_cases(), seed=seed)
    except CheckFailed as failure:
        if check_settings.first_failure_only:
            raise
        raise _with_hint(failure, _grid_stride_hint(launch)) from None


def _column_sums_inputs(shape, rng):
    return (rng.uniform(-1.0, 2.0, shape).astype(np.float32),)


def check_column_sums(launch, *, name: str = "column sums", seed=None) -> None:
    """Check ``out[col] = a[0, col] + a[1, col] + ... + a[rows - 1, col]``: the sum of each column.

    ``launch(out, a)`` launches the kernel; ``a`` has shape (rows, columns) and ``out`` one
    element per column. Shapes: :func:`matrix_shapes` (1x1, one row, one column, non-square,
    large); the large one has several blocks' worth of columns, so a kernel that ignores the
    block index fails there. The tolerance follows the column length (``k = rows``).
    """
    require_callable(launch, "launch")
    check_kernel(name, launch, lambda a: a.sum(axis=0), _column_sums_inputs, sizes=_wide_matrix_shapes(),
                 k=lambda shape: shape[0], seed=seed)


def _wide_matrix_shapes():
    """:func:`matrix_shapes`, with a large shape of more columns than two blocks of 256 threads."""
    shapes = dict(matrix_shapes())
    if on_simulator():
        shapes["large"] = (23, 600)
    return list(shapes.items())


# ---------------------------------------------------------------------------------------------
# Notebook 02: the memory hierarchy

def strided_cases() -> list[tuple[str, tuple[int, int, int]]]:
    """(label, (n, stride, offset)) for a strided copy ``out[i] = x[offset + i * stride]``."""
    large = (1000, 3, 5) if on_simulator() else ((1 << 22) + 1, 3, 5)
    return [("1 element", (1, 1, 0)), ("stride 1", (300, 1, 0)), ("stride 2 at offset 1", (300, 2, 1)),
            ("stride 7 at offset 3", (300, 7, 3)), ("stride 32 at offset 31", (300, 32, 31)),
            ("large: stride 3 at offset 5", large)]


def _strided_inputs(case, rng):
    n, stride, offset = case
    # Exactly as long as the copy needs: reading one element too far is an error under the simulator.
    return rng.standard_normal(offset + (n - 1) * stride + 1, dtype=np.float32), stride, offset


def check_strided_copy(launch, *, seed=None) -> None:
    """Check a strided copy: ``out[i] = x[offset + i * stride]`` for every ``i < out.size``.

    ``launch(out, x, stride, offset)`` launches the kernel; ``x`` holds exactly
    ``offset + (out.size - 1) * stride + 1`` elements, so the last element read is the last one of
    ``x``. Cases: strides 1, 2, 7 and 32 with offsets 0 to 31, one element, and a large copy.
    """
    require_callable(launch, "launch")
    check_kernel("strided copy", launch,
                 lambda x, stride, offset: x[offset::stride],  # x ends at the last element read
                 _strided_inputs, sizes=strided_cases(), seed=seed)


def _matrix_and_weights(shape, rng):
    return rng.standard_normal(shape, dtype=np.float32), rng.uniform(0.5, 2.0, shape[1]).astype(np.float32)


def check_scale_columns(launch, *, name: str = "scale columns", seed=None) -> None:
    """Check ``out[row, col] = x[row, col] * w[col]``: every column of a matrix scaled by its weight.

    ``launch(out, x, w)`` launches the kernel; ``x`` and ``out`` have shape (rows, columns), ``w``
    has one weight per column. Any mapping of threads to elements passes (one thread per element in
    a 1D or 2D grid, or loops): this checks the result, and the notebook measures the access pattern.
    Shapes: :func:`matrix_shapes`. ``name`` labels the printed line.
    """
    require_callable(launch, "launch")
    _run_2d(name, launch, lambda x, w: x * w[None, :], _matrix_and_weights, matrix_shapes(), seed)


def copy_cases(block: int, per_thread: int = 1, any_length: bool = True, large: int | None = None):
    """(label, number of float32 elements) for a copy whose threads copy ``per_thread`` elements each.

    The labels count *threads*, as :func:`kernel_lab.adversarial_sizes` does: 1, a block less one,
    a block and one, three blocks and 7, and a large size. With ``any_length`` the element counts are
    not multiples of ``per_thread`` (the last thread has a partial group: 1 to per_thread - 1
    elements); without it they are whole groups, for kernels that only copy whole groups.
    """
    if large is None:
        large = 1100 if on_simulator() else 1 << 22
    cases = []
    for label, threads in adversarial_sizes(block, large=large):
        short = (threads % per_thread if threads % per_thread else per_thread - 1) if any_length else 0
        cases.append((label, max(1, per_thread * threads - short)))
    return cases


def check_copy(launch, *, name: str = "copy", block: int = 256, per_thread: int = 1, any_length: bool = True,
               seed=None) -> None:
    """Check a copy of a float32 array: ``out[i] = src[i]`` for every ``i`` (exact).

    ``launch(out, src)`` launches the kernel (or kernels) on two float32 device arrays of the same
    length. The lengths (:func:`copy_cases`) straddle block boundaries for threads that copy
    ``per_thread`` elements each (4 for 16-byte loads), and with ``any_length`` they leave a partial
    group at the end. The output is poisoned and guarded: elements never written and writes past the
    end are reported; under the simulator a read past the end of ``src`` stops with
    ``OutOfBoundsAccess``.
    """
    require_callable(launch, "launch")
    require_positive_int(per_thread, "per_thread")
    check_kernel(name, launch, lambda src: src.copy(), lambda n, rng: rng.standard_normal(n, dtype=np.float32),
                 sizes=copy_cases(block, per_thread, any_length), seed=seed)


def check_tiled_copy(launch, tile: int = 32, *, name: str = "tiled copy", seed=None) -> None:
    """Check a 2D copy done in ``tile`` x ``tile`` tiles: ``out[row, col] = a[row, col]`` (exact).

    ``launch(out, a)`` launches the kernel on two float32 device arrays of shape (rows, columns).
    Shapes: :func:`transpose_shapes` (1x1, partial tiles on every edge, square, non-square, large),
    so that a grid rounded down, a missing or a loose bounds check, or tiles that miss rows fail.
    """
    require_callable(launch, "launch")
    tile = require_positive_int(tile, "tile")
    check_kernel(name, launch, lambda a: a.copy(), lambda shape, rng: rng.standard_normal(shape, dtype=np.float32),
                 sizes=transpose_shapes(tile), seed=seed)


# ---------------------------------------------------------------------------------------------
# Notebook 03: transpose

def _tiles_not_transposed(a: np.ndarray, tile: int) -> np.ndarray:
    """What a tiled transpose gives when tiles are moved to their transposed place but their
    contents are copied unchanged (shape must be a multiple of the tile)."""
    r, c = a.shape
    blocks = a.reshape(r // tile, tile, c // tile, tile)  # [I, i, J, j]
    return blocks.transpose(2, 1, 0, 3).reshape(c, r)  # out tile (J, I) = a tile (I, J), untransposed


def _tiles_not_moved(a: np.ndarray, tile: int) -> np.ndarray:
    """What a tiled transpose gives when each tile is transposed but written back to its own place
    (the block indices not swapped for the output; square shape, a multiple of the tile)."""
    r, c = a.shape
    blocks = a.reshape(r // tile, tile, c // tile, tile)  # [I, i, J, j]
    return blocks.transpose(0, 3, 2, 1).reshape(r, c)  # out tile (I, J) = a tile (I, J) transposed


def _output_for(launch, a: np.ndarray) -> np.ndarray | None:
    """What the kernel writes for the host matrix ``a`` (poison where it wrote nothing), or None when
    the launch fails (an out-of-bounds access, a race: the check itself reports those).

    Both matrices are views of the start of buffers three times their size: on a GPU, a wrong kernel's
    accesses past the end (a row stride of the other matrix reaches 1.5 times the size of a matrix of
    2 x 3 tiles) land in these buffers rather than in someone else's memory."""
    from numba import cuda

    spare = np.zeros(2 * a.size, dtype=a.dtype)
    a_dev = cuda.to_device(np.concatenate([a.ravel(), spare]))[: a.size].reshape(a.shape)
    out = poisoned(3 * a.size)[: a.size].reshape(a.shape[::-1])
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            launch(out, a_dev)
        return out.copy_to_host()
    except Exception:  # noqa: BLE001 - the check's own failure already explains it
        return None


def _spans(indices) -> str:
    """'4-7, 12-15 and 28-31' for [4, 5, 6, 7, 12, 13, 14, 15, 28, 29, 30, 31]."""
    runs = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _by_tile(mask: np.ndarray, tile: int) -> np.ndarray:
    """``mask`` of a matrix of whole tiles as [tile row I, row i in the tile, tile column J, column j]."""
    r, c = mask.shape
    return mask.reshape(r // tile, tile, c // tile, tile)


_EDGE_TILES = (
    "right on matrices made of whole tiles, wrong where the matrix's edge cuts a tile.",
    "Look at the bounds tests (`<`, against the sides of the matrix being accessed) and, if your kernel "
    "gives interior tiles a path without them, at the test that picks that path: a tile is interior when "
    "its last column and its last row are inside the matrix, (bx + 1) * TILE <= n_cols and "
    "(by + 1) * TILE <= n_rows. The edge path's loops must cover the tile like the interior path's.")

_OTHER_SIDE = (
    "right on square matrices, wrong on non-square ones (made of whole tiles): somewhere a side of one "
    "matrix stands for the other's.",
    "The matrix a has n_rows rows of n_cols elements; out, its transpose, n_cols rows of n_rows. So a "
    "row of a is n_cols elements long and a row of out n_rows (the row stride of a flat index), and a "
    "write is inside out when its row is below n_cols and its column below n_rows (`out.shape`, not "
    "`a.shape`).")

_SAME_MAP = (
    "every tile of out holds the right values, but not in the right places inside it.",
    "The tile is read back with another map than it was written with. With a swizzled tile, element "
    "(r, c) of the tile sits at column c ^ r of row r, in both loops: the read loop stores element "
    "(ty + j, tx) and the write loop fetches element (tx, ty + j).")


def _rows_and_columns_left_out(got: np.ndarray, want: np.ndarray, tile: int) -> tuple[str, str] | None:
    """The pattern of a loop over j that misses rows of the tile (its step or its end wrong): rows of
    every tile of out never written (the writing loop), or columns of every tile wrong (the reading
    loop: they hold whatever shared memory held, or elements fetched from the wrong place)."""
    unwritten = _by_tile(is_poison(got), tile)
    rows = np.flatnonzero(unwritten.all(axis=(0, 2, 3)))  # rows of the tile unwritten in every tile
    if 0 < len(rows) < tile and not unwritten.any(axis=(0, 2, 3))[np.setdiff1d(np.arange(tile), rows)].any():
        return (f"rows {_spans(rows)} of every tile of out were never written.",
                "The loop that writes out skips them. Each loop over j must visit every row of the tile, "
                "ty, ty + R, ty + 2R, ... up to TILE, with R the rows of threads in the block (ROWS for "
                "32 x 8 threads, ROWS_FAST for 32 x 4): a loop that steps by 8 with 4 rows of threads "
                "leaves rows 4-7, 12-15, ... out.")
    wrong = _by_tile(got.view(np.uint32) != want.astype(np.float32).view(np.uint32), tile)
    per_tile = wrong.any(axis=1)  # [I, J, column j]: which columns of each tile are wrong
    cols = np.flatnonzero(per_tile[0, 0])
    if 0 < len(cols) < tile and (per_tile == per_tile[0, 0]).all():
        return (f"in every tile of out, columns {_spans(cols)} are wrong.",
                f"They come from rows {_spans(cols)} of the tile of a, which the loop that reads a into the "
                "tile did not load, or loaded from the wrong place. Does that loop visit every row of the "
                "tile, running to TILE in steps of the rows of threads in the block (ROWS_FAST for 32 x 4 "
                "threads), and does it fetch element (row + j, col) of a (in a flat view, index "
                "(row + j) * n_cols + col)?")
    return None


def _misplaced_inside_tiles(got: np.ndarray, want: np.ndarray, tile: int) -> bool:
    """Does every tile of ``got`` hold the values of the same tile of ``want``, in another order?"""
    g, w = _by_tile(got, tile).transpose(0, 2, 1, 3), _by_tile(want, tile).transpose(0, 2, 1, 3)
    g, w = g.reshape(g.shape[0], g.shape[1], -1), w.reshape(w.shape[0], w.shape[1], -1)
    return bool(np.array_equal(np.sort(g, axis=-1), np.sort(w, axis=-1)) and not np.array_equal(g, w))


def _transpose_diagnosis(launch, tile: int) -> tuple[str, str] | None:
    """(what is wrong, where to look), named from what the kernel writes for two matrices of whole
    tiles, a square one (2 x 2 tiles) and a wide one (2 x 3), whose elements all differ (0, 1, 2, ...:
    exact in float32); None when the output matches no known mistake.

    Right on both: the edge tiles are wrong. Right on the square only: a side of one matrix used for
    the other's. Otherwise the typical wrong outputs: tiles moved but not transposed, transposed but
    not moved, a copy, values misplaced inside each tile, rows of each tile left out by a loop.
    """
    square = np.arange(4 * tile * tile, dtype=np.float32).reshape(2 * tile, 2 * tile)
    wide = np.arange(6 * tile * tile, dtype=np.float32).reshape(2 * tile, 3 * tile)
    got_square, got_wide = _output_for(launch, square), _output_for(launch, wide)
    square_right = got_square is not None and np.array_equal(got_square, square.T)
    wide_right = got_wide is not None and np.array_equal(got_wide, wide.T)
    if square_right:
        return _EDGE_TILES if wide_right else _OTHER_SIDE
    if got_square is not None:
        if np.array_equal(got_square, _tiles_not_transposed(square, tile)):
            return ("every tile landed in its transposed place, but the elements inside each tile were not "
                    "transposed.",
                    "When writing out, read the tile with its two indices swapped (`tile[tx, ty + j]`, not "
                    "`tile[ty + j, tx]`). (Reading a tile the wrong way round also reads the part of an edge "
                    "tile that was never loaded, which is why results may differ between runs.)")
        if np.array_equal(got_square, _tiles_not_moved(square, tile)):
            return ("every tile was transposed but written back to its own place.",
                    "Block (bx, by) must write its tile to the transposed position in out, row bx * TILE and "
                    "column by * TILE. Swap the block indices for the write (`col = by * TILE + tx`, "
                    "`row = bx * TILE + ty`). On shapes that are not square this leaves parts of out "
                    "unwritten, which looks like a grid that is too small but is not.")
        if np.array_equal(got_square, square):
            return ("on a square matrix the output equals the input: the kernel copies instead of transposing.",
                    "Element a[row, col] must go to out[col, row].")
    for got, a in ((got_wide, wide), (got_square, square)):
        if got is None:
            continue
        if _misplaced_inside_tiles(got, a.T, tile):
            return _SAME_MAP
        named = _rows_and_columns_left_out(got, a.T, tile)
        if named is not None:
            return named
    return None


def _lead_with(failure: Exception, name: str, diagnosis: tuple[str, str] | None) -> Exception:
    """The diagnosis first (what is wrong, then a hint: where to look), then what the check saw,
    without the check's general hints, which the diagnosis replaces (a general hint such as "the grid
    is too small" may blame another mistake)."""
    if diagnosis is None:
        return failure
    what, hint = diagnosis
    seen = [line for line in str(failure).splitlines() if not line.lstrip().startswith("Hint:")]
    if not isinstance(failure, CheckFailed):  # the simulator's report: say what it is
        seen[0] = f"{type(failure).__name__}: {seen[0]}"
    return CheckFailed(f"{name}: {what}\nHint: {hint}\nWhat the check saw:\n" + "\n".join(seen))


def check_transpose(launch, tile: int = 32, *, name: str = "transpose", seed=None) -> None:
    """Check a matrix transpose: ``out[col, row] = a[row, col]`` (float32, exact).

    ``launch(out, a)`` launches the kernel; ``a`` has shape (rows, columns) and ``out`` (columns,
    rows). ``tile`` is the side of the square tile the kernel works in (the shapes are chosen
    around it: see :func:`transpose_shapes`); ``name`` labels the printed line. Each shape runs
    twice, so a missing ``cuda.syncthreads()`` shows as results that change between runs (on a GPU)
    or as ``SharedMemoryRace`` (under the simulator).

    When the kernel fails, it runs again on two matrices of whole tiles to name the mistake: edge
    tiles wrong (bounds tests, or an interior test that lets an edge tile in); a side of ``a`` used
    for a side of ``out`` (a row stride or a bound of the other matrix); tiles moved but not
    transposed inside, or transposed but not moved; a copy; rows of every tile left out by a loop
    whose step or end is wrong; values misplaced inside each tile (a swizzle read back with another
    map). Those runs take a fraction of a second in the simulator, so they run in the mutation test
    too (``first_failure_only``): its page quotes what the learner sees.
    """
    from ..simulator import KernelLabSimulatorError, SharedMemoryRace

    require_callable(launch, "launch")
    tile = require_positive_int(tile, "tile")
    try:
        check_kernel(name, launch, lambda a: a.T, lambda shape, rng: rng.standard_normal(shape, dtype=np.float32),
                     sizes=transpose_shapes(tile), seed=seed)
    except (CheckFailed, KernelLabSimulatorError) as failure:
        if isinstance(failure, SharedMemoryRace):
            raise  # a race names its two threads and the barrier to add: nothing to add to that
        raise _lead_with(failure, name, _transpose_diagnosis(launch, tile)) from None
