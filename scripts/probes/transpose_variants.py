"""Probe: how close can a Numba transpose get to the copy roofline on this GPU?

Run on a GPU machine: python scripts/probes/transpose_variants.py. Each variant is checked, then
timed (median, L2 flushed) as a fraction of the copy roofline.
"""

import numpy as np

import kernel_lab as kl
from numba import cuda, float32, int32

kl.setup(requires=["gpu"], quiet=True)
TILE, ROWS, ROWS4 = 32, 8, 4
PAD = TILE + 1
T32 = np.int32(TILE)


@cuda.jit
def copy_tiled(a, out):
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    row = cuda.blockIdx.y * TILE + cuda.threadIdx.y
    for j in range(0, TILE, ROWS):
        if row + j < a.shape[0] and col < a.shape[1]:
            out[row + j, col] = a[row + j, col]


def make_padded(rows_per_pass):
    @cuda.jit
    def padded(a, out):
        tile = cuda.shared.array((TILE, PAD), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
        for j in range(0, TILE, rows_per_pass):
            if row + j < a.shape[0] and col < a.shape[1]:
                tile[ty + j, tx] = a[row + j, col]
        cuda.syncthreads()
        col, row = cuda.blockIdx.y * TILE + tx, cuda.blockIdx.x * TILE + ty
        for j in range(0, TILE, rows_per_pass):
            if row + j < out.shape[0] and col < out.shape[1]:
                out[row + j, col] = tile[tx, ty + j]
    return padded


def make_flat32(tile, rows_per_pass):
    """1D views and 32-bit index arithmetic; interior tiles skip the bounds checks."""
    t32 = np.int32(tile)
    pad = tile + 1

    @cuda.jit
    def flat(a, out, n_rows, n_cols):
        sm = cuda.shared.array((tile, pad), float32)
        tx, ty = int32(cuda.threadIdx.x), int32(cuda.threadIdx.y)
        bx, by = int32(cuda.blockIdx.x), int32(cuda.blockIdx.y)
        col, row = bx * t32 + tx, by * t32 + ty
        interior = (bx + 1) * t32 <= n_cols and (by + 1) * t32 <= n_rows
        if interior:
            base = row * n_cols + col
            for j in range(0, tile, rows_per_pass):
                sm[ty + j, tx] = a[base + j * n_cols]
        else:
            for j in range(0, tile, rows_per_pass):
                if row + j < n_rows and col < n_cols:
                    sm[ty + j, tx] = a[(row + j) * n_cols + col]
        cuda.syncthreads()
        col, row = by * t32 + tx, bx * t32 + ty
        if interior:
            base = row * n_rows + col
            for j in range(0, tile, rows_per_pass):
                out[base + j * n_rows] = sm[tx, ty + j]
        else:
            for j in range(0, tile, rows_per_pass):
                if row + j < n_cols and col < n_rows:
                    out[(row + j) * n_rows + col] = sm[tx, ty + j]
    return flat


def make_copy_flat32(tile, rows_per_pass):
    t32 = np.int32(tile)

    @cuda.jit
    def copy(a, out, n_rows, n_cols):
        tx, ty = int32(cuda.threadIdx.x), int32(cuda.threadIdx.y)
        col, row = int32(cuda.blockIdx.x) * t32 + tx, int32(cuda.blockIdx.y) * t32 + ty
        if col < n_cols:
            for j in range(0, tile, rows_per_pass):
                if row + j < n_rows:
                    out[(row + j) * n_cols + col] = a[(row + j) * n_cols + col]
    return copy


padded8, padded4 = make_padded(ROWS), make_padded(ROWS4)
rows = []
for n in (8192, 16383):
    a_host = np.random.default_rng(n).standard_normal((n, n), dtype=np.float32)
    a = cuda.to_device(a_host)
    out = cuda.device_array((n, n), dtype=np.float32)
    grid = (kl.blocks_for(n, TILE), kl.blocks_for(n, TILE))
    flat = lambda k, t, r: (lambda: k[(kl.blocks_for(n, t), kl.blocks_for(n, t)), (t, r)](  # noqa: E731
        a.reshape(n * n), out.reshape(n * n), np.int32(n), np.int32(n)))
    variants = [
        ("copy_tiled", lambda: copy_tiled[grid, (TILE, ROWS)](a, out), False),
        ("copy flat int32 32x8", flat(make_copy_flat32(32, 8), 32, 8), False),
        ("padded 32x8", lambda: padded8[grid, (TILE, ROWS)](a, out), True),
        ("padded 32x4", lambda: padded4[grid, (TILE, ROWS4)](a, out), True),
        ("flat int32 32x8", flat(make_flat32(32, 8), 32, 8), True),
        ("flat int32 32x4", flat(make_flat32(32, 4), 32, 4), True),
        ("flat int32 32x2", flat(make_flat32(32, 2), 32, 2), True),
        ("flat int32 64x4", flat(make_flat32(64, 4), 64, 4), True),
        ("flat int32 64x8", flat(make_flat32(64, 8), 64, 8), True),
    ]
    for name, fn, transposes in variants:
        fn()
        cuda.synchronize()
        ok = np.array_equal(out.copy_to_host(), a_host.T if transposes else a_host)
        m = kl.benchmark(f"{name} n={n}", fn, bytes=2 * n * n * 4, repeat=30, quiet=True)
        rows.append(f"{m.name:28s} {m.ms * 1000:8.1f} us  {100 * m.fraction:5.1f}% of copy  correct={ok}")
print("\n".join(rows))
