"""The checks of module 01 (kernel_lab.checks.indexing_memory) pass right kernels and name wrong ones.

Every check gets a correct kernel (it must print its one line) and the classic mistakes of its
exercise (it must fail with a message that names the mistake). Kernels are tiny and the checks use
the simulator's small sizes, so this runs in seconds under the simulator.

Two mistakes show differently in the two places. A missing bounds check is an `OutOfBoundsAccess`
under the simulator and writes past the end of the output on a GPU (caught by the check's guard
region); the kernels below wrap their *reads* so that on a GPU they never read outside an input.
A missing ``cuda.syncthreads()`` is a `SharedMemoryRace` under the simulator, but on a GPU it
gives a wrong answer only sometimes, so that test runs under the simulator only.
"""

import numpy as np
import pytest
from numba import cuda, float32

import kernel_lab as kl
from kernel_lab.check import first_failure_only
from kernel_lab.checks import indexing_memory as checks

kl.setup(requires=[], quiet=True)  # under the simulator: race detection and readable index errors

try:
    from kernel_lab.simulator import OutOfBoundsAccess, SharedMemoryRace
except ImportError:  # an older kernel_lab without its simulator extensions: Numba's own errors
    OutOfBoundsAccess, SharedMemoryRace = IndexError, RuntimeError

simulator_only = pytest.mark.skipif(not kl.on_simulator(),
                                    reason="on a GPU a race gives a wrong answer only sometimes")

BX, BY = 32, 8  # threads per block along x (columns) and y (rows)


def grid_2d(shape, bx=BX, by=BY):
    return (kl.blocks_for(shape[1], bx), kl.blocks_for(shape[0], by))


def passes(check, launch, capsys, *args, **kwargs):
    check(launch, *args, **kwargs)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and ": correct for all" in out, out
    return out


# ---- matrix add (notebook 01) -----------------------------------------------------------------

@cuda.jit
def add_right(a, b, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a[row, col] + b[row, col]


@cuda.jit
def add_no_bounds_check(a, b, out):
    col, row = cuda.grid(2)
    r, c = row % a.shape[0], col % a.shape[1]  # reads stay inside a and b, even on a GPU
    out[row, col] = a[r, c] + b[r, c]


@cuda.jit
def add_rows_and_columns_swapped(a, b, out):
    row, col = cuda.grid(2)  # the mistake: x is the column
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a[row, col] + b[row, col]


def test_matrix_add_passes_a_right_kernel(capsys):
    out = passes(checks.check_matrix_add, lambda out, a, b: add_right[grid_2d(out.shape), (BX, BY)](a, b, out),
                 capsys)
    assert out == "matrix add: correct for all 5 sizes (1x1, one row, one column, non-square, large)\n"


def test_matrix_add_without_bounds_check_is_caught():
    with pytest.raises((kl.CheckFailed, OutOfBoundsAccess), match="bounds check"):
        checks.check_matrix_add(lambda out, a, b: add_no_bounds_check[grid_2d(out.shape), (BX, BY)](a, b, out))


def test_matrix_add_with_rows_and_columns_swapped_is_named():
    with pytest.raises(kl.CheckFailed, match=r"(?s)right on square matrices.*swapped.*col, row = cuda.grid\(2\)"):
        checks.check_matrix_add(
            lambda out, a, b: add_rows_and_columns_swapped[grid_2d(out.shape), (BX, BY)](a, b, out))


def test_matrix_add_with_grid_rounded_down_is_named():
    def launch(out, a, b):
        add_right[(out.shape[1] // BX, out.shape[0] // BY), (BX, BY)](a, b, out)

    with pytest.raises(kl.CheckFailed, match=r"(?s)never written.*(grid is too small|round)"):
        checks.check_matrix_add(launch)


def test_matrix_add_stub_says_not_done():
    def launch(out, a, b):
        raise NotImplementedError("compute the grid")

    with pytest.raises(kl.CheckFailed, match="not done yet"):
        checks.check_matrix_add(launch)


# ---- grid-stride SAXPY (notebook 01) ------------------------------------------------------------

@cuda.jit
def saxpy_grid_stride(a, x, y, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_no_loop(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_starts_at_thread_index(a, x, y, out):
    for i in range(cuda.threadIdx.x, out.size, cuda.gridsize(1)):  # the mistake: not cuda.grid(1)
        out[i] = a * x[i] + y[i]


def _launcher(kernel):
    return lambda out, a, x, y, blocks, threads: kernel[blocks, threads](a, x, y, out)


def test_grid_stride_passes_a_right_kernel(capsys):
    out = passes(checks.check_grid_stride, _launcher(saxpy_grid_stride), capsys)
    assert out.startswith("grid-stride saxpy: correct for all 4 sizes (fewer elements than threads,")


def test_grid_stride_without_the_loop_is_named():
    with pytest.raises(kl.CheckFailed, match=r"(?s)never written.*each thread did one element.*cuda.gridsize\(1\)"):
        checks.check_grid_stride(_launcher(saxpy_no_loop))


def test_grid_stride_with_wrong_start_is_named():
    with pytest.raises(kl.CheckFailed, match=r"(?s)some elements were skipped.*cuda.grid\(1\)"):
        checks.check_grid_stride(_launcher(saxpy_starts_at_thread_index))


# ---- strided copy and column scaling (notebook 02) ----------------------------------------------

@cuda.jit
def strided_right(x, out, stride, offset):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[offset + i * stride]


@cuda.jit
def strided_offset_ignored(x, out, stride, offset):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i * stride]


@cuda.jit
def strided_no_bounds_check(x, out, stride, offset):
    i = cuda.grid(1)
    out[i] = x[(offset + i * stride) % x.size]


def _strided(kernel):
    return lambda out, x, stride, offset: kernel[kl.blocks_for(out.size, 128), 128](x, out, stride, offset)


def test_strided_copy_passes_a_right_kernel(capsys):
    out = passes(checks.check_strided_copy, _strided(strided_right), capsys)
    assert out.startswith("strided copy: correct for all 6 sizes (1 element, stride 1,")


def test_strided_copy_ignoring_the_offset_fails():
    with pytest.raises(kl.CheckFailed, match=r"(?s)stride 2 at offset 1.*elements are wrong.*sizes that pass: 1 element, stride 1$"):
        checks.check_strided_copy(_strided(strided_offset_ignored))


def test_strided_copy_without_bounds_check_is_caught():
    with pytest.raises((kl.CheckFailed, OutOfBoundsAccess), match="bounds check"):
        checks.check_strided_copy(_strided(strided_no_bounds_check))


@cuda.jit
def scale_walking_down_columns(x, w, out):
    i = cuda.grid(1)
    if i < out.size:
        row, col = i % out.shape[0], i // out.shape[0]
        out[row, col] = x[row, col] * w[col]


@cuda.jit
def scale_along_rows(x, w, out):
    i = cuda.grid(1)
    if i < out.size:
        row, col = i // out.shape[1], i % out.shape[1]
        out[row, col] = x[row, col] * w[col]


@cuda.jit
def scale_rows_not_columns(x, w, out):
    i = cuda.grid(1)
    if i < out.size:
        row, col = i // out.shape[1], i % out.shape[1]
        out[row, col] = x[row, col] * w[row % w.size]  # the mistake: the weight of the row


def _flat(kernel):
    return lambda out, x, w: kernel[kl.blocks_for(out.size, 128), 128](x, w, out)


@pytest.mark.parametrize("kernel", [scale_walking_down_columns, scale_along_rows])
def test_scale_columns_passes_both_mappings(kernel, capsys):
    out = passes(checks.check_scale_columns, _flat(kernel), capsys, name="scaled")
    assert out.startswith("scaled: correct for all 5 sizes")


def test_scale_columns_with_the_wrong_weight_fails():
    with pytest.raises(kl.CheckFailed, match=r"(?s)elements are wrong.*sizes that fail: one row, non-square, large"):
        checks.check_scale_columns(_flat(scale_rows_not_columns))


# ---- transpose (notebook 03) --------------------------------------------------------------------

TILE, ROWS = 32, 8  # a 32 x 32 tile moved by 32 x 8 threads, 4 elements each


@cuda.jit
def transpose_naive(a, out):  # the same launch as the tiled kernels: a tile per block, 4 rows per thread
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    row = cuda.blockIdx.y * TILE + cuda.threadIdx.y
    for j in range(0, TILE, ROWS):
        if row + j < a.shape[0] and col < a.shape[1]:
            out[col, row + j] = a[row + j, col]


@cuda.jit
def copy_not_transpose(a, out):  # the mistake: out[row, col] = a[row, col] (reads wrapped to stay inside a)
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    row = cuda.blockIdx.y * TILE + cuda.threadIdx.y
    for j in range(0, TILE, ROWS):
        if row + j < out.shape[0] and col < out.shape[1]:
            out[row + j, col] = a[(row + j) % a.shape[0], col % a.shape[1]]


def _tiled(padded, syncthreads, swap_on_read):
    width = TILE + padded  # computed outside the kernel: a shared array's shape must be a constant

    @cuda.jit
    def kernel(a, out):
        tile = cuda.shared.array((TILE, width), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
        for j in range(0, TILE, ROWS):
            if row + j < a.shape[0] and col < a.shape[1]:
                tile[ty + j, tx] = a[row + j, col]
        if syncthreads:
            cuda.syncthreads()
        col, row = cuda.blockIdx.y * TILE + tx, cuda.blockIdx.x * TILE + ty
        for j in range(0, TILE, ROWS):
            if row + j < out.shape[0] and col < out.shape[1]:
                if swap_on_read:
                    out[row + j, col] = tile[tx, ty + j]
                else:
                    out[row + j, col] = tile[ty + j, tx]  # the mistake: the tile is not transposed
    return kernel


def _launch_tiled(kernel, over_output=False):
    def launch(out, a):
        shape = out.shape if over_output else a.shape  # the tiles cover the input, or the output
        kernel[grid_2d(shape, TILE, TILE), (TILE, ROWS)](a, out)
    return launch


def test_transpose_passes_naive_and_tiled_kernels(capsys):
    passes(checks.check_transpose, _launch_tiled(transpose_naive), capsys, tile=TILE)
    out = passes(checks.check_transpose, _launch_tiled(_tiled(1, True, True)), capsys, tile=TILE, name="padded")
    assert out == "padded: correct for all 5 sizes (1x1, tile-1 x tile+1, square, non-square, large)\n"


@simulator_only
def test_transpose_without_syncthreads_is_a_race():
    with pytest.raises((kl.CheckFailed, SharedMemoryRace), match="(?i)syncthreads"):
        checks.check_transpose(_launch_tiled(_tiled(0, False, True)), tile=TILE)


def test_transpose_with_tiles_not_transposed_inside_is_named():
    with pytest.raises(kl.CheckFailed, match=r"(?s)tiles? landed.*not transposed"):
        checks.check_transpose(_launch_tiled(_tiled(0, True, False)), tile=TILE)


def test_transpose_with_a_copy_kernel_is_named():
    with pytest.raises(kl.CheckFailed, match=r"(?s)^transpose: on a square matrix.*copies instead of transposing.*elements are wrong"):
        checks.check_transpose(_launch_tiled(copy_not_transpose, over_output=True), tile=TILE)


# The mistakes of the flat kernels (notebook 03, exercises 4 to 6), each named from what the kernel
# writes for matrices of whole tiles. Reads are wrapped, as above, so that on a GPU they never leave a.

PADDED = TILE + 1


def _flat_transpose(threads_y=ROWS, read_step=ROWS, write_step=ROWS, edge_as_interior=False,
                    out_rows_of_a=False):
    @cuda.jit
    def kernel(a_flat, out_flat, n_rows, n_cols):
        tile = cuda.shared.array((TILE, PADDED), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        bx, by = cuda.blockIdx.x, cuda.blockIdx.y
        if edge_as_interior:  # the mistake: the test is one tile off, a cut tile counts as interior
            interior = bx * TILE <= n_cols and by * TILE <= n_rows
        else:
            interior = (bx + 1) * TILE <= n_cols and (by + 1) * TILE <= n_rows
        out_row = n_cols if out_rows_of_a else n_rows  # the mistake: out's rows taken as a's
        col, row = bx * TILE + tx, by * TILE + ty
        for j in range(0, TILE, read_step):
            if interior or (row + j < n_rows and col < n_cols):
                tile[ty + j, tx] = a_flat[((row + j) * n_cols + col) % a_flat.size]
        cuda.syncthreads()
        col, row = by * TILE + tx, bx * TILE + ty
        for j in range(0, TILE, write_step):
            if interior or (row + j < n_cols and col < n_rows):
                out_flat[(row + j) * out_row + col] = tile[tx, ty + j]

    def launch(out, a):
        kernel[grid_2d(a.shape, TILE, TILE), (TILE, threads_y)](a.reshape(a.size), out.reshape(out.size),
                                                                np.int32(a.shape[0]), np.int32(a.shape[1]))
    return launch


def _swizzled(swizzle_on_read):
    @cuda.jit
    def kernel(a, out):
        tile = cuda.shared.array((TILE, TILE), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
        for j in range(0, TILE, ROWS):
            if row + j < a.shape[0] and col < a.shape[1]:
                tile[ty + j, tx ^ (ty + j)] = a[row + j, col]
        cuda.syncthreads()
        col, row = cuda.blockIdx.y * TILE + tx, cuda.blockIdx.x * TILE + ty
        for j in range(0, TILE, ROWS):
            if row + j < out.shape[0] and col < out.shape[1]:
                if swizzle_on_read:
                    out[row + j, col] = tile[tx, (ty + j) ^ tx]
                else:  # the mistake: the element is fetched where it would be without the swizzle
                    out[row + j, col] = tile[tx, ty + j]
    return _launch_tiled(kernel)


def _diagnosis_of(launch) -> list[str]:
    """The first two lines of the check's message (what is wrong, and its hint), stopping at the
    first failing size as the mutation test does: the diagnosis runs all the same."""
    with first_failure_only(), pytest.raises(kl.CheckFailed) as info:
        checks.check_transpose(launch, tile=TILE, seed=11)
    return str(info.value).splitlines()[:2]


def test_transpose_flat_kernels_pass_at_both_thread_shapes(capsys):
    passes(checks.check_transpose, _flat_transpose(), capsys, tile=TILE, name="flat")
    out = passes(checks.check_transpose, _flat_transpose(4, 4, 4), capsys, tile=TILE, name="fast")
    assert out == "fast: correct for all 5 sizes (1x1, tile-1 x tile+1, square, non-square, large)\n"


def test_transpose_with_an_edge_tile_taken_as_interior_names_the_interior_test():
    what, hint = _diagnosis_of(_flat_transpose(edge_as_interior=True))
    assert what == "transpose: right on matrices made of whole tiles, wrong where the matrix's edge cuts a tile."
    assert hint.startswith("Hint: Look at the bounds tests") and "(bx + 1) * TILE <= n_cols" in hint


def test_transpose_with_the_row_stride_of_the_other_matrix_names_it_and_not_the_edges():
    what, hint = _diagnosis_of(_flat_transpose(out_rows_of_a=True))
    assert what.startswith("transpose: right on square matrices, wrong on non-square ones")
    assert "a row of out n_rows (the row stride of a flat index)" in hint


def test_transpose_whose_writing_loop_steps_past_rows_names_the_rows_never_written():
    what, hint = _diagnosis_of(_flat_transpose(threads_y=4, read_step=4, write_step=8))
    assert what == "transpose: rows 4-7, 12-15, 20-23 and 28-31 of every tile of out were never written."
    assert "ROWS_FAST for 32 x 4" in hint


def test_transpose_whose_reading_loop_steps_past_rows_names_the_columns_they_become():
    what, hint = _diagnosis_of(_flat_transpose(threads_y=4, read_step=8, write_step=4))
    assert what == "transpose: in every tile of out, columns 4-7, 12-15, 20-23 and 28-31 are wrong."
    assert hint.startswith("Hint: They come from rows 4-7, 12-15, 20-23 and 28-31 of the tile of a")


def test_transpose_whose_swizzle_is_not_undone_on_the_read_names_the_map_not_a_loop(capsys):
    passes(checks.check_transpose, _swizzled(swizzle_on_read=True), capsys, tile=TILE)
    what, hint = _diagnosis_of(_swizzled(swizzle_on_read=False))
    assert what == "transpose: every tile of out holds the right values, but not in the right places inside it."
    assert "column c ^ r" in hint


def test_grid_stride_stub_says_not_done_without_a_loop_hint():
    @cuda.jit
    def stub(a, x, y, out):
        pass

    with pytest.raises(kl.CheckFailed, match="not done yet") as info:
        checks.check_grid_stride(_launcher(stub))
    assert "skipped" not in str(info.value) and "each thread did one element" not in str(info.value)


# ---- column sums (notebook 01) --------------------------------------------------------------------

@cuda.jit
def column_sums_right(a, out):
    col = cuda.grid(1)
    if col < a.shape[1]:
        acc = float32(0)
        for row in range(a.shape[0]):
            acc += a[row, col]
        out[col] = acc


@cuda.jit
def column_sums_no_block_offset(a, out):
    col = cuda.threadIdx.x  # the mistake: every block sums the same columns
    if col < a.shape[1]:
        acc = float32(0)
        for row in range(a.shape[0]):
            acc += a[row, col]
        out[col] = acc


def _columns(kernel):
    return lambda out, a: kernel[kl.blocks_for(a.shape[1], 256), 256](a, out)


def test_column_sums_passes_a_right_kernel(capsys):
    out = passes(checks.check_column_sums, _columns(column_sums_right), capsys)
    assert out == "column sums: correct for all 5 sizes (1x1, one row, one column, non-square, large)\n"


def test_column_sums_without_the_block_offset_fails_on_the_large_shape():
    with pytest.raises(kl.CheckFailed, match=r"(?s)size large.*every block writes the same 256 elements"):
        checks.check_column_sums(_columns(column_sums_no_block_offset))


# ---- copies (notebooks 02 and 03) -----------------------------------------------------------------

@cuda.jit
def copy_right(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@cuda.jit
def copy_one_short(src, dst):
    i = cuda.grid(1)
    if i < src.size - 1:
        dst[i] = src[i]


@cuda.jit
def copy_four_right(src, dst):
    i = 4 * cuda.grid(1)
    for k in range(i, min(i + 4, src.size)):
        dst[k] = src[k]


@cuda.jit
def copy_four_whole_groups_only(src, dst):
    i = 4 * cuda.grid(1)
    if i + 3 < src.size:  # the mistake: the partial group at the end is never copied
        for k in range(4):
            dst[i + k] = src[i + k]


def test_copy_passes_right_kernels(capsys):
    passes(checks.check_copy, lambda out, src: copy_right[kl.blocks_for(src.size, 128), 128](src, out), capsys,
           block=128)
    out = passes(checks.check_copy, lambda out, src: copy_four_right[kl.blocks_for(src.size, 4 * 128), 128](src, out),
                 capsys, block=128, per_thread=4, name="copy x4")
    assert out == "copy x4: correct for all 5 sizes (1, block-1, block+1, 3 blocks+7, large)\n"


def test_copy_with_a_grid_rounded_down_fails():
    with pytest.raises(kl.CheckFailed, match="grid is too small|grid of 0 blocks"):
        checks.check_copy(lambda out, src: copy_right[src.size // 128, 128](src, out), block=128)


def test_copy_one_short_fails():
    with pytest.raises(kl.CheckFailed, match="Only the last element was never written"):
        checks.check_copy(lambda out, src: copy_one_short[kl.blocks_for(src.size, 128), 128](src, out), block=128)


def test_copy_of_whole_groups_only_fails_on_a_partial_group():
    with pytest.raises(kl.CheckFailed, match="never written"):
        checks.check_copy(lambda out, src: copy_four_whole_groups_only[kl.blocks_for(src.size, 4 * 128), 128](src, out),
                          block=128, per_thread=4)


def test_copy_cases_straddle_blocks_and_leave_partial_groups():
    assert checks.copy_cases(256, large=1100) == [("1", 1), ("block-1", 255), ("block+1", 257), ("3 blocks+7", 775),
                                                  ("large", 1100)]
    groups = checks.copy_cases(256, per_thread=4, large=1100)
    assert [-(-n // 4) for _, n in groups] == [1, 255, 257, 775, 1100] and all(n % 4 for _, n in groups)
    assert [n for _, n in checks.copy_cases(256, per_thread=2, any_length=False, large=1100)] == [2, 510, 514, 1550,
                                                                                                 2200]


@cuda.jit
def copy_2d_rounded_down_grid_safe(a, out):
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    row = cuda.blockIdx.y * TILE + cuda.threadIdx.y
    for j in range(0, TILE, ROWS):
        if row + j < a.shape[0] and col < a.shape[1]:
            out[row + j, col] = a[row + j, col]


def test_tiled_copy_passes_a_right_kernel_and_names_a_grid_rounded_down(capsys):
    right = lambda out, a: copy_2d_rounded_down_grid_safe[grid_2d(a.shape, TILE, TILE), (TILE, ROWS)](a, out)  # noqa: E731
    out = passes(checks.check_tiled_copy, right, capsys, tile=TILE, name="copy_tiled")
    assert out == "copy_tiled: correct for all 5 sizes (1x1, tile-1 x tile+1, square, non-square, large)\n"

    def rounded_down(out, a):
        copy_2d_rounded_down_grid_safe[(max(1, a.shape[1] // TILE), max(1, a.shape[0] // TILE)), (TILE, ROWS)](a, out)

    with pytest.raises(kl.CheckFailed, match=r"(?s)never written.*grid is too small"):
        checks.check_tiled_copy(rounded_down, tile=TILE)
