"""Module 07 on the GPU: slicing kernels, the three ways to multiply the slices, and the launcher.

What each kernel does (the notebooks have the learner write each one; these are the course's own
versions, used by the notebooks that come after the exercise and by ``kernel_lab.ozaki.bench``):

Slicing (notebook 07.2), memory-bound:
  ``row_exponents``   one block per row of A: ``e = frexp(max |row|)[1]``;
  ``col_exponents``   a 2D grid over B: per-column maxima by block reduction and ``atomic.max``;
  ``slice_rows_packed``  A (M, K) -> digits (s, Mp, Kp): four elements per thread, four digits
                      packed into one 32-bit store per slice (07.2's ``slice_rows``: one element and
                      one byte store per thread and slice);
  ``slice_cols``      B (K, N) -> digits (s, Np, Kp): K must become the contiguous dimension (INT8
                      tensor cores read both operands K-major), so B goes through a shared-memory
                      tile, as in module 01's transpose.
  The digit buffers are padded to whole tiles and the slicers write zeros into the padding.

Multiplying (notebooks 07.3-07.5), with cuBLASDx's pipeline API on INT8 tensor cores:
  ``pair_products``   unfused: one block per (output tile, slice pair); each stores its INT32
                      product; ``reconstruct`` (07.3's kernel) then builds float64;
  ``diagonal_sums``   partly fused: one block per (output tile, diagonal); the pairs of a diagonal
                      stream through one accumulator (``reset_tile`` moves the pipeline to the next
                      pair); ``reconstruct_diagonals`` builds float64;
  ``fused``           one block per output tile runs every diagonal and adds each one, converted
                      and scaled, into C in float64.

The digit buffers are 3D: ``(PLANES, rows, K)``, of which the first ``s`` planes are used. The
pipeline sees them through transposed views, ``(Mp, Kp, PLANES)`` for A and ``(Kp, Np, PLANES)`` for
B, whose last mode is a batch: a tile is addressed as ``(tile index, slice index)``, so one pipeline
(one compilation per padded shape) serves every pair and every slice count.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
from numba import cuda  # after kernel_lab chose GPU or simulator (the package's __init__ runs first)

from ..validate import KernelLabArgumentError
from .nonfinite import patch_nonfinite
from .slicing import MAX_SLICES, max_exact_k, scaled_bits

ROW_THREADS = 128  # threads per row in row_exponents
PLANES = 16  # digit planes in every buffer: the pipeline's type holds the buffers' shapes, so a fixed
# plane count lets one compiled kernel serve any number of slices (1..8) and Ozaki-II's moduli
TILE = 32  # the transpose tile of slice_cols and col_exponents
TILE_PADDED = TILE + 1  # a padded row: no bank conflicts reading columns (module 01.3)
COL_ROWS = 256  # rows of B each block of col_exponents reduces
# The fused kernel's epilogue loads this many elements (the INT32 sums and C) before it uses any.
# Measured on an H100 at 8192^3, 7 slices (2026-11-26, scripts/probes/ozaki_epilogue_variants.py):
# one element at a time 30.0 ms for the kernel (0.63x DGEMM end to end); C's loads batched 16 at a
# time 29.1 ms; C's and the sums' loads batched, 8 at a time 25.8 ms, 16 at a time 25.6 ms (0.79x);
# with no epilogue at all but the last (wrong results, the bound) 23.4 ms.
EPILOGUE_CHUNK = 16


def why_not_here() -> str | None:
    """None where the pipeline kernels can run (a Hopper-class GPU, nvmath-python, CuPy), else why not."""
    from ..environment import gpu_info, on_simulator, unmet_requirements

    problems = unmet_requirements(["gpu", "nvmath", "cupy", "cc>=9.0", "cuda>=13"], simulator=on_simulator(),
                                  gpu=gpu_info())
    return "; ".join(problems) if problems else None


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class OzakiConfig:
    """The INT8 pipeline GEMM behind every method: tile, threads, pipeline depth.

    The default was the fastest of four measured on an H100 for the fused kernel at 8192^3
    (2026-11-23, 7 slices): 128x256x128 with two warpgroups, depth 3: 30.7 ms; 128x128x128 with one
    warpgroup: 56.7 ms (depth 4: 57.9); 256x128x128 with two: 46.3 ms.

    ``group_m`` (tiles taken in bands of tile rows, for L2 reuse) measured little on the same GPU
    (2026-11-26, 8192^3, one process at a time): row after row 31.1 ms, bands of 4 / 8 / 16 / 32
    rows 31.0 / 30.1 / 29.9 / 30.2 ms. The kernel is not bandwidth-bound (Nsight Compute: 1.71 TB/s,
    L2 hit rate 62%); its INT tensor pipe is 62% busy, one 256-thread block per SM (registers and
    shared memory) leaves nothing to overlap the seven per-diagonal epilogues, and 39% of the warps'
    stall cycles are at block barriers. So the default stays 0: the notebooks' kernels (which take
    ``blockIdx`` as their tile) and the package's stay the same kernel. Other configurations, same
    day and GPU: 128x256x128 depth 4: 34.8 ms; 128x256x64 depth 6: 43.7 ms; with 384 threads
    (128x256x128 depth 3, 192x256x128 depth 2): 650 and 630 ms, and a relative difference from DGEMM
    of 5e-14 instead of 3.4e-15, so ``problems()`` refuses 384 threads.

    These timings predate the fused kernel's chunked epilogue (``EPILOGUE_CHUNK``), which took the
    default from about 30 ms to 24.6 ms at 8192^3 (0.77x DGEMM, H100, 07.5's stored run). On the same
    day 128x128 tiles lost even with the running sum kept in shared memory and C written once (34.5
    ms), and 64x256 tiles with 128 threads, two blocks an SM, lost more (41-48 ms): their main loops
    are slower (scripts/probes/ozaki_epilogue_variants.py).
    """

    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 128
    threads: int = 256
    depth: int = 3
    group_m: int = 0  # fused kernel: blocks take output tiles in groups of this many tile rows (0: row after row)

    def label(self) -> str:
        grouped = f", tiles in groups of {self.group_m} rows" if self.group_m else ""
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}, {self.threads} threads, depth {self.depth}{grouped}"

    def as_dict(self) -> dict:
        return asdict(self)

    def padded(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """(Mp, Np, Kp): whole tiles, and K at least ``depth`` tiles (the pipeline fills every stage)."""
        def up(x, t):
            return -(-x // t) * t
        return up(max(m, 1), self.tile_m), up(max(n, 1), self.tile_n), max(up(max(k, 1), self.tile_k),
                                                                           self.depth * self.tile_k)

    def problems(self) -> list[str]:
        out = []
        if self.tile_m % 64 or self.tile_n % 16:
            out.append(f"tile_m must be a multiple of 64 and tile_n of 16, got {self.tile_m}x{self.tile_n}")
        if self.tile_k % 64:
            out.append(f"tile_k must be a multiple of 64 (a pipeline stage row is 64 bytes), got {self.tile_k}")
        if self.threads == 384:  # measured 2026-11-26, H100, 8192^3: see the class docstring
            out.append("384 threads (three warpgroups) made the fused kernel 20x slower and 14x less accurate "
                       "on an H100 (630-650 ms, relative difference from DGEMM 5e-14): use 128 or 256")
        elif self.threads not in (128, 256):
            out.append(f"threads must be whole warpgroups (128 or 256), got {self.threads}")
        if not 2 <= self.depth <= 8:
            out.append(f"depth must be 2..8, got {self.depth}")
        if self.depth * (self.tile_m + self.tile_n) * self.tile_k > 200 * 1024:
            out.append("the pipeline's stages need more shared memory than a Hopper block can have")
        return out


# ---------------------------------------------------------------------------------------------
# Slicing kernels (plain Numba: they also run in the CUDA simulator)


@functools.lru_cache(maxsize=None)
def row_exponents_kernel():
    """``row_exponents[M, ROW_THREADS](a, e, bad)``: per-row exponents; ``bad[row] = 1`` (and e = 0)
    for a row holding Inf or NaN."""
    THREADS = ROW_THREADS

    @cuda.jit
    def row_exponents(a, e, bad):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        best = cuda.shared.array(THREADS, np.float64)
        odd = cuda.shared.array(THREADS, np.int32)  # 1 where the thread saw Inf or NaN
        amax = 0.0
        seen = 0
        for j in range(tid, a.shape[1], THREADS):
            v = abs(a[row, j])
            if math.isinf(v) or math.isnan(v):  # no exponent for this row: it is sliced as zeros
                seen = 1
            elif v > amax:
                amax = v
        best[tid] = amax
        odd[tid] = seen
        cuda.syncthreads()
        half = THREADS // 2
        while half > 0:
            if tid < half:
                best[tid] = max(best[tid], best[tid + half])
                odd[tid] = max(odd[tid], odd[tid + half])
            cuda.syncthreads()
            half //= 2
        if tid == 0:
            bad[row] = odd[0]
            e[row] = math.frexp(best[0])[1] if best[0] > 0.0 and odd[0] == 0 else 0

    return row_exponents


@functools.lru_cache(maxsize=None)
def col_exponents_kernels():
    """``(col_max, col_finish)``: per-column maxima of B over a 2D grid, then the exponents."""
    R = COL_ROWS

    @cuda.jit
    def col_max(b, amax, bad):
        # block (TILE, 8): x walks 32 consecutive columns (coalesced), y strides over R rows
        col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
        k0 = cuda.blockIdx.y * R
        part = cuda.shared.array((8, TILE), np.float64)
        k, n = b.shape
        m = 0.0
        if col < n:
            for r in range(k0 + cuda.threadIdx.y, min(k0 + R, k), 8):
                v = abs(b[r, col])
                if math.isinf(v) or math.isnan(v):
                    bad[col] = 1
                elif v > m:
                    m = v
        part[cuda.threadIdx.y, cuda.threadIdx.x] = m
        cuda.syncthreads()
        if cuda.threadIdx.y == 0 and col < n:
            for y in range(1, 8):
                m = max(m, part[y, cuda.threadIdx.x])
            cuda.atomic.max(amax, col, m)

    @cuda.jit
    def col_finish(amax, e, bad):
        col = cuda.grid(1)
        if col < e.size:
            v = amax[col]
            if bad[col] != 0:
                e[col] = 0
            else:
                e[col] = math.frexp(v)[1] if v > 0.0 else 0

    return col_max, col_finish


@functools.lru_cache(maxsize=None)
def slice_rows_kernel(slices: int):
    """``slice_rows_packed[grid, block](a, e, bad, words)``: A (M, K) float64 -> digits viewed as
    int32 words ``(s, Mp, Kp // 4)``; thread (word, row) from ``cuda.grid(2)``."""
    S = slices
    P = scaled_bits(S)

    @cuda.jit
    def slice_rows_packed(a, e, bad, words):
        w, row = cuda.grid(2)
        if row >= words.shape[1] or w >= words.shape[2]:
            return
        m, k = a.shape
        packed = cuda.local.array(S, np.int64)
        for t in range(S):
            packed[t] = 0
        shift = 0
        ok = False
        if row < m:
            shift = P - e[row]
            ok = bad[row] == 0
        for j in range(4):
            col = 4 * w + j
            x = 0.0
            if ok and col < k:
                x = a[row, col]
            big = round(math.ldexp(x, shift))  # to nearest, ties to even, like NumPy's rint
            for t in range(S - 1, 0, -1):
                d = ((big + 128) & 255) - 128
                packed[t] |= (d & 255) << (8 * j) if j < 3 else d << 24
                big = (big - d) >> 8
            packed[0] |= (big & 255) << (8 * j) if j < 3 else big << 24
        for t in range(S):
            words[t, row, w] = packed[t]

    return slice_rows_packed


@cuda.jit(device=True)
def load_columns_tile(b, bad, tile, n0, k0):
    """Copy B[k0:k0+32, n0:n0+32] into the shared ``tile`` (rows of B, coalesced reads), zeros outside
    B and in columns flagged ``bad``; every thread of the (TILE, 8) block takes part, then waits."""
    tx = cuda.threadIdx.x
    k, n = b.shape
    for r in range(cuda.threadIdx.y, TILE, 8):
        kk = k0 + r
        nn = n0 + tx
        x = 0.0
        if kk < k and nn < n:
            if bad[nn] == 0:
                x = b[kk, nn]
        tile[r, tx] = x
    cuda.syncthreads()


@functools.lru_cache(maxsize=None)
def slice_cols_kernel(slices: int):
    """``slice_cols[(Np/32, Kp/32), (32, 8)](b, e, bad, digits)``: B (K, N) float64 -> digits
    ``(s, Np, Kp)`` int8, transposed through a shared-memory tile."""
    S = slices
    P = scaled_bits(S)

    @cuda.jit
    def slice_cols(b, e, bad, digits):
        n0 = cuda.blockIdx.x * TILE
        k0 = cuda.blockIdx.y * TILE
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tile = cuda.shared.array((TILE, TILE_PADDED), np.float64)
        n = b.shape[1]
        load_columns_tile(b, bad, tile, n0, k0)
        for r in range(ty, TILE, 8):  # write rows of the digits: consecutive tx, consecutive k
            nn = n0 + r
            kk = k0 + tx
            if nn < digits.shape[1] and kk < digits.shape[2]:
                x = tile[tx, r]
                shift = P - e[nn] if nn < n else 0
                big = round(math.ldexp(x, shift))  # to nearest, ties to even, like NumPy's rint
                for t in range(S - 1, 0, -1):
                    d = ((big + 128) & 255) - 128
                    digits[t, nn, kk] = d
                    big = (big - d) >> 8
                digits[0, nn, kk] = big

    return slice_cols


@functools.lru_cache(maxsize=None)
def reconstruct_kernel(slices: int, from_pairs: bool):
    """``kernel[grid, (32, 8)](parts, ea, eb, alpha, beta, c)``: float64 C from INT32 parts.

    ``from_pairs``: ``parts`` holds the s(s+1)/2 pair products in the order of
    ``reference.triangular_pairs`` (the unfused method): ``reconstruct``, notebook 07.3's kernel.
    Otherwise the s diagonal sums (the partly fused method): ``reconstruct_diagonals``. Diagonals are
    added least significant first; beta multiplies C once (and C is not read when beta is 0)."""
    SLICES = slices

    if from_pairs:

        @cuda.jit
        def reconstruct(parts, ea, eb, alpha, beta, c):
            col, row = cuda.grid(2)
            if row < c.shape[0] and col < c.shape[1]:
                shift = ea[row] + eb[col]
                total = 0.0
                for d in range(SLICES - 1, -1, -1):
                    first = d * (d + 1) // 2  # pairs of diagonal d follow those of diagonals 0..d-1
                    acc = 0
                    for t in range(d + 1):
                        acc += parts[first + t, row, col]  # in int64: exact
                    total += math.ldexp(float(acc), shift - 12 - 8 * d)
                if beta == 0.0:
                    c[row, col] = alpha * total
                else:
                    c[row, col] = alpha * total + beta * c[row, col]

        return reconstruct

    @cuda.jit
    def reconstruct_diagonals(parts, ea, eb, alpha, beta, c):
        col, row = cuda.grid(2)
        if row < c.shape[0] and col < c.shape[1]:
            shift = ea[row] + eb[col]
            total = 0.0
            for d in range(SLICES - 1, -1, -1):
                total += math.ldexp(float(parts[d, row, col]), shift - 12 - 8 * d)
            if beta == 0.0:
                c[row, col] = alpha * total
            else:
                c[row, col] = alpha * total + beta * c[row, col]

    return reconstruct_diagonals


# ---------------------------------------------------------------------------------------------
# INT8 pipeline kernels (cuBLASDx through nvmath-python)


@functools.lru_cache(maxsize=None)
def matmul_description(cfg: OzakiConfig):
    """The cuBLASDx description every module-07 pipeline kernel uses (int8 x int8 -> int32)."""
    from ..tensor_cores.toolchain import device_api

    nd, _ = device_api()
    from nvmath.device.cublasdx import MAX_ALIGNMENT

    problems = cfg.problems()
    if problems:
        raise KernelLabArgumentError(f"invalid configuration {cfg.label()}: " + "; ".join(problems))
    return nd.Matmul(size=(cfg.tile_m, cfg.tile_n, cfg.tile_k), precision=(np.int8, np.int8, np.int32),
                     data_type="real", arrangement=("row_major", "col_major", "row_major"),
                     alignment=MAX_ALIGNMENT, execution="Block", block_size=cfg.threads,
                     with_pipeline=True, enable_input_streaming=True, static_block_dim=True)


def _pipeline_jit(kernel, cfg: OzakiConfig):
    """``cuda.jit`` for a pipeline kernel. ``make(MM, cfg)``, where a factory takes one, returns the
    Python function of a learner-written kernel with the same arguments as the course's."""
    from nvmath.device.cublasdx_numba import pipeline_extensions

    return cuda.jit(kernel, extensions=pipeline_extensions, launch_bounds=(cfg.threads, 1))


@cuda.jit(device=True, inline="always")
def store_int32_tile(acc, out, j, row0, col0):
    """Write the accumulator's INT32 results, the tile at (row0, col0), into ``out[j]`` (the
    elements inside the M x N result only): the epilogue of the unfused and partly fused kernels."""
    if acc.is_thread_active():
        res = acc.get_results()
        m, n = out.shape[1], out.shape[2]
        for i in range(res.layout.size):
            r, c = acc.map_fragment_index(i)
            if row0 + r < m and col0 + c < n:
                out[j, row0 + r, col0 + c] = res[i]


@functools.lru_cache(maxsize=None)
def pair_products_kernel(cfg: OzakiConfig, make=None):
    """Unfused: block (tile_m, tile_n, pair) stores ``A_t @ B_u`` as INT32 into ``out[pair]``.
    Grid ``(Mp/TM, Np/TN, pairs)``; ``pair_t``/``pair_u`` list the slice indices of each pair."""
    MM = matmul_description(cfg)
    TM, TN = cfg.tile_m, cfg.tile_n

    def pair_products(pair_t, pair_u, out, pipe):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
        bm = cuda.blockIdx.x
        bn = cuda.blockIdx.y
        p = cuda.blockIdx.z
        tile = pipe.get_tile(smem, (bm, np.int32(pair_t[p])), (bn, np.int32(pair_u[p])))
        acc = MM.suggest_accumulator()
        acc.clear()
        tile.execute(acc)
        store_int32_tile(acc, out, p, bm * TM, bn * TN)
        tile._del()

    return MM, _pipeline_jit(make(MM, cfg) if make else pair_products, cfg)


@functools.lru_cache(maxsize=None)
def diagonal_sums_kernel(cfg: OzakiConfig, make=None):
    """Partly fused: block (tile_m, tile_n, d) streams the pairs (0, d), (1, d-1), ..., (d, 0) through
    one accumulator and stores the INT32 diagonal sum into ``out[d]``. Grid ``(Mp/TM, Np/TN, s)``."""
    MM = matmul_description(cfg)
    TM, TN = cfg.tile_m, cfg.tile_n

    def diagonal_sums(out, pipe):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
        bm = cuda.blockIdx.x
        bn = cuda.blockIdx.y
        d = cuda.blockIdx.z
        tile = pipe.get_tile(smem, (bm, np.int32(0)), (bn, np.int32(d)))
        acc = MM.suggest_accumulator()
        acc.clear()
        for t in range(d + 1):
            tile.execute(acc)
            if t < d:  # move the pipeline to the next pair of the diagonal while this one finishes
                pipe.reset_tile(tile, (bm, np.int32(t + 1)), (bn, np.int32(d - t - 1)))
        store_int32_tile(acc, out, d, bm * TM, bn * TN)
        tile._del()

    return MM, _pipeline_jit(make(MM, cfg) if make else diagonal_sums, cfg)


@functools.lru_cache(maxsize=None)
def grouped_tile_function(group_m: int):
    """A device function ``() -> (bm, bn)``: the output tile of this block of a ``(tiles_m,
    tiles_n)`` grid. Blocks start in the order of their linear index (x fastest); with
    ``group_m = 0`` block (x, y) takes tile (x, y), so the blocks running at once cover a few whole
    tile *columns* and every tile row: each of them streams its own A panel. With ``group_m = G``
    consecutive blocks walk down G tile rows, then move one column right: the blocks running at once
    cover a G-row band, and share its A panels and their B panels through L2."""

    if group_m <= 0:
        @cuda.jit(device=True, inline="always")
        def grouped_tile():
            return np.int32(cuda.blockIdx.x), np.int32(cuda.blockIdx.y)

        return grouped_tile

    from ..tensor_cores.gemm import band_walk  # the walk module 06's persistent pipeline takes too

    walk = band_walk(group_m)

    @cuda.jit(device=True, inline="always")
    def grouped_tile():
        tiles_m = cuda.gridDim.x
        return walk(cuda.blockIdx.y * tiles_m + cuda.blockIdx.x, tiles_m, cuda.gridDim.y)

    return grouped_tile


@functools.lru_cache(maxsize=None)
def fused_kernel(cfg: OzakiConfig, make=None):
    """Fully fused: block (tile_m, tile_n) runs every diagonal, least significant first, and adds
    ``alpha * D_d * 2**(ea + eb - 12 - 8d)`` into C in float64 (beta once, C not read if beta is 0).
    Grid ``(Mp/TM, Np/TN)``; dynamic shared memory: the pipeline's buffer, then the tile's row and
    column exponents. The epilogue works in chunks of ``EPILOGUE_CHUNK`` elements, loads first (07.5's
    second exercise)."""
    MM = matmul_description(cfg)
    TM, TN = cfg.tile_m, cfg.tile_n
    NT = cfg.threads
    CHUNK = math.gcd(EPILOGUE_CHUNK, TM * TN // NT)  # accumulator elements per thread: a multiple

    grouped_tile = grouped_tile_function(cfg.group_m)

    def fused(slices, ea, eb, alpha, beta, c, pipe):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
        shifts = smem[pipe.buffer_size:].view(np.int32)  # the tile's TM row exponents, then TN column ones
        bm, bn = grouped_tile()
        m, n = c.shape
        flat = c.reshape(m * n)
        off = cuda.local.array(CHUNK, np.int64)  # one chunk of the epilogue: where in C (-1: outside),
        raw = cuda.local.array(CHUNK, np.int32)  # the INT32 sum, its exponent, C's old value
        ex = cuda.local.array(CHUNK, np.int32)
        old = cuda.local.array(CHUNK, np.float64)
        row0 = bm * TM
        col0 = bn * TN
        for i in range(cuda.threadIdx.x, TM + TN, NT):
            if i < TM:
                shifts[i] = ea[row0 + i] if row0 + i < m else 0
            else:
                shifts[i] = eb[col0 + i - TM] if col0 + i - TM < n else 0
        cuda.syncthreads()
        tile = pipe.get_tile(smem, (bm, np.int32(0)), (bn, np.int32(slices - 1)))
        acc = MM.suggest_accumulator()
        for d in range(slices - 1, -1, -1):
            acc.clear()
            for t in range(d + 1):
                tile.execute(acc)
                if t < d:
                    pipe.reset_tile(tile, (bm, np.int32(t + 1)), (bn, np.int32(d - t - 1)))
                elif d > 0:  # start loading the next diagonal's first pair during this epilogue
                    pipe.reset_tile(tile, (bm, np.int32(0)), (bn, np.int32(d - 1)))
            if acc.is_thread_active():
                res = acc.get_results()
                first = d == slices - 1
                for base in range(0, res.layout.size, CHUNK):
                    # Every load of the chunk first: the INT32 sums (``res`` is a copy in local
                    # memory) and C. Loading, using and storing one element at a time waits one
                    # memory round trip per element: the compiler cannot move the next load of C
                    # above this store, since it cannot prove the two addresses differ.
                    for j in range(CHUNK):
                        r, cc = acc.map_fragment_index(base + j)
                        gr = row0 + r
                        gc = col0 + cc
                        raw[j] = res[base + j]
                        ex[j] = shifts[r] + shifts[TM + cc] - 12 - 8 * d
                        o = -1
                        v = 0.0
                        if gr < m and gc < n:
                            o = gr * n + gc
                            if not first:
                                v = flat[o]
                            elif beta != 0.0:  # beta once, and C not read at all when it is 0
                                v = beta * flat[o]
                        off[j] = o
                        old[j] = v
                    for j in range(CHUNK):  # then the arithmetic and the stores
                        if off[j] >= 0:
                            flat[off[j]] = alpha * math.ldexp(np.float64(raw[j]), ex[j]) + old[j]
        tile._del()

    return MM, _pipeline_jit(make(MM, cfg) if make else fused, cfg)


# ---------------------------------------------------------------------------------------------
# What every scheme's pipeline kernels share: the operand buffers, and compiling once


def digit_buffers(config: OzakiConfig, m: int, n: int, k: int, planes: int = PLANES) -> dict:
    """Zeroed int8 operand buffers for an (M, N, K) problem and the pipeline that reads them.

    ``da`` is ``(planes, Mp, Kp)`` and ``db`` ``(planes, Np, Kp)``: one plane per slice (Ozaki-I) or
    per modulus (Ozaki-II), rows padded to whole tiles, K contiguous. The pipeline sees them as
    ``(Mp, Kp, planes)`` and ``(Kp, Np, planes)``: a tile is (tile index, plane). Its Numba type holds
    these shapes, so both schemes, sharing the plane count, share one compiled kernel per shape.
    Returns ``{"padded": (Mp, Np, Kp), "da", "db", "pipe"}``.
    """
    import cupy as cp

    mp, np_, kp = config.padded(m, n, k)
    st = {"padded": (mp, np_, kp)}
    st["da"] = cp.zeros((planes, mp, kp), dtype=cp.int8)  # planes past the ones used stay zero
    st["db"] = cp.zeros((planes, np_, kp), dtype=cp.int8)
    a_view = cuda.as_cuda_array(st["da"].transpose(1, 2, 0))
    b_view = cuda.as_cuda_array(st["db"].transpose(2, 1, 0))
    st["pipe"] = matmul_description(config).suggest_device_pipeline(config.depth, a_view, b_view)
    return st


def work_buffers(cache: dict, config: OzakiConfig, m: int, n: int, k: int, planes: int = PLANES,
                 more=None) -> dict:
    """An emulated GEMM's work buffers for an (M, N, K) problem, made once and reused while calls
    keep that shape: both schemes' launchers (:class:`OzakiGemm`, ``gpu_ozaki2.Ozaki2Gemm``) get
    theirs here.

    ``cache`` is the launcher's ``{(M, N, K): buffers}``. It holds one shape at a time, as the
    buffers are large: the buffers of a new shape replace the last ones once they are made. What
    both schemes use: :func:`digit_buffers` (the ``planes`` int8 planes of A and B, and the
    pipeline), then ``ea``/``eb`` (int32 exponents of A's rows and B's columns) and
    ``bad_a``/``bad_b`` (int32 flags of the rows and columns that hold an Inf or a NaN). A scheme
    adds its own with ``more(buffers, m, n, k)``.
    """
    key = (m, n, k)
    if key in cache:
        return cache[key]
    import cupy as cp

    st = digit_buffers(config, m, n, k, planes)
    st["ea"] = cp.empty(m, dtype=cp.int32)
    st["eb"] = cp.empty(n, dtype=cp.int32)
    st["bad_a"] = cp.empty(m, dtype=cp.int32)
    st["bad_b"] = cp.empty(n, dtype=cp.int32)
    if more is not None:
        more(st, m, n, k)
    cache.clear()
    cache[key] = st
    return st


def compile_once(kernel, args, smem: int, seconds: dict, key) -> None:
    """Compile ``kernel`` for ``args`` and allow it ``smem`` bytes of dynamic shared memory, once per
    ``key``; the compile time goes into ``seconds[key]``."""
    if key in seconds:
        return
    from ..tensor_cores.toolchain import set_max_dynamic_shared_memory

    t0 = time.perf_counter()
    set_max_dynamic_shared_memory(kernel, args, smem)  # compiles for these argument types
    seconds[key] = time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# The launcher


METHODS = ("unfused", "partial", "fused")


class OzakiGemm:
    """``alpha * A @ B + beta * C`` in float64, emulated on INT8 tensor cores.

    ``method`` picks the kernels: ``"unfused"`` (a product per slice pair, then reconstruction),
    ``"partial"`` (a sum per diagonal, then reconstruction) or ``"fused"`` (one kernel). Inputs are
    CuPy (or any CUDA-array-interface) float64 matrices, C-contiguous; the result is a CuPy array.
    Work buffers are kept per shape, and each pipeline kernel compiles once per padded shape
    (cuBLASDx's pipeline description holds the global shapes). Rows of A and columns of B holding
    Inf or NaN are sliced as zeros, then recomputed by cuBLAS's DGEMM (``nonfinite``): the result
    has DGEMM's Inf and NaN.
    """

    def __init__(self, slices: int = 7, method: str = "fused", config: OzakiConfig | None = None,
                 kernel=None, reconstruct=None):
        if not isinstance(slices, (int, np.integer)) or not 1 <= slices <= MAX_SLICES:
            raise KernelLabArgumentError(f"slices must be 1..{MAX_SLICES}, got {slices!r}")
        if method not in METHODS:
            raise KernelLabArgumentError(f"method must be one of {METHODS}, got {method!r}")
        self.slices, self.method = int(slices), method
        self.config = config or OzakiConfig()
        # A learner's kernels: ``kernel`` is ``make(MM, cfg) -> function`` for the method's pipeline
        # kernel; ``reconstruct`` a ``cuda.jit`` kernel with reconstruct_kernel's arguments.
        self.make_kernel = kernel
        self.reconstruct = reconstruct
        self._shape_state = {}
        self.compile_seconds = {}
        self.last_nonfinite = 0

    # -- buffers and pipelines, per shape --------------------------------------------------------

    def _state(self, m, n, k):
        return work_buffers(self._shape_state, self.config, m, n, k, more=self._own_buffers)

    def _own_buffers(self, st, m, n, k):
        """Ozaki-I's buffers beside the shared ones: B's column maxima, and the INT32 products that
        the unfused (one per slice pair) and partial (one per diagonal) methods keep."""
        import cupy as cp

        s = self.slices
        st["amax_b"] = cp.empty(n, dtype=cp.float64)
        if self.method == "unfused":
            from .reference import triangular_pairs

            pairs = triangular_pairs(s)
            st["pair_t"] = cp.asarray([t for t, _ in pairs], dtype=cp.int32)
            st["pair_u"] = cp.asarray([u for _, u in pairs], dtype=cp.int32)
            st["parts"] = cp.empty((len(pairs), m, n), dtype=cp.int32)
        elif self.method == "partial":
            st["parts"] = cp.empty((s, m, n), dtype=cp.int32)

    # -- the steps -------------------------------------------------------------------------------

    def slice_operands(self, a, b, st):
        """Exponents and digits of A (by rows) and B (by columns) into the shape's buffers."""
        m, k = a.shape
        n = b.shape[1]
        s = self.slices
        mp, np_, kp = st["padded"]
        row_exponents_kernel()[m, ROW_THREADS](a, st["ea"], st["bad_a"])
        st["amax_b"].fill(0)
        st["bad_b"].fill(0)
        col_max, col_finish = col_exponents_kernels()
        col_max[(-(-n // TILE), -(-k // COL_ROWS)), (TILE, 8)](b, st["amax_b"], st["bad_b"])
        col_finish[-(-n // 128), 128](st["amax_b"], st["eb"], st["bad_b"])
        words = st["da"][:s].view(np.int32)  # (s, Mp, Kp/4)
        slice_rows_kernel(s)[(-(-(kp // 4) // 32), -(-mp // 8)), (32, 8)](a, st["ea"], st["bad_a"], words)
        slice_cols_kernel(s)[(np_ // TILE, kp // TILE), (TILE, 8)](b, st["eb"], st["bad_b"], st["db"])

    def _launch(self, st, alpha, beta, c):
        """(kernel, grid, args, dynamic shared memory) of the method's pipeline kernel."""
        cfg = self.config
        mp, np_, _ = st["padded"]
        pipe = st["pipe"]
        grid = (mp // cfg.tile_m, np_ // cfg.tile_n)
        s = self.slices
        if self.method == "fused":
            _, kern = fused_kernel(cfg, self.make_kernel)
            args = (np.int32(s), st["ea"], st["eb"], np.float64(alpha), np.float64(beta), c, pipe)
            smem = pipe.buffer_size + 4 * (cfg.tile_m + cfg.tile_n)
        elif self.method == "partial":
            _, kern = diagonal_sums_kernel(cfg, self.make_kernel)
            args = (st["parts"], pipe)
            grid = grid + (s,)
            smem = pipe.buffer_size
        else:
            _, kern = pair_products_kernel(cfg, self.make_kernel)
            args = (st["pair_t"], st["pair_u"], st["parts"], pipe)
            grid = grid + (st["pair_t"].size,)
            smem = pipe.buffer_size
        compile_once(kern, args, smem, self.compile_seconds, (self.method, st["padded"], self.make_kernel))
        return kern, grid, args, smem

    def compile(self, m: int, n: int, k: int) -> float:
        """Compile this method's kernels for an (M, N, K) problem without running them; seconds."""
        import cupy as cp

        st = self._state(m, n, k)
        c = cp.empty((m, n), dtype=cp.float64)
        t0 = time.perf_counter()
        self._launch(st, 1.0, 0.0, c)
        return time.perf_counter() - t0

    def multiply(self, st, alpha, beta, c):
        """The INT8 products and the float64 result, by ``self.method``."""
        kern, grid, args, smem = self._launch(st, alpha, beta, c)
        kern[grid, st["pipe"].block_dim, 0, smem](*args)
        if self.method != "fused":
            m, n = c.shape
            rec = self.reconstruct or reconstruct_kernel(self.slices, self.method == "unfused")
            rec[(-(-n // 32), -(-m // 8)), (32, 8)](st["parts"], st["ea"], st["eb"], np.float64(alpha),
                                                   np.float64(beta), c)

    def stages(self, a, b, c, alpha: float = 1.0, beta: float = 0.0) -> dict:
        """The method's steps as separate launchers, to time each: ``{"slicing": f, "products": f,
        "reconstruction": f}`` (no reconstruction for the fused method). Call the GEMM once first."""
        a, b, c = _check_operands(a, b, c, beta)
        st = self._state(a.shape[0], b.shape[1], a.shape[1])
        kern, grid, args, smem = self._launch(st, alpha, beta, c)
        out = {"slicing": lambda: self.slice_operands(a, b, st),
               "products": lambda: kern[grid, st["pipe"].block_dim, 0, smem](*args)}
        if self.method != "fused":
            m, n = c.shape
            rec = self.reconstruct or reconstruct_kernel(self.slices, self.method == "unfused")
            out["reconstruction"] = lambda: rec[(-(-n // 32), -(-m // 8)), (32, 8)](
                st["parts"], st["ea"], st["eb"], np.float64(alpha), np.float64(beta), c)
        return out

    def __call__(self, a, b, c=None, alpha: float = 1.0, beta: float = 0.0):
        import cupy as cp

        a, b, c = _check_operands(a, b, c, beta)
        m, k = a.shape
        n = b.shape[1]
        if c is None:
            c = cp.empty((m, n), dtype=cp.float64)
        if m == 0 or n == 0:
            return c
        if k == 0:
            c[...] = beta * c if beta != 0 else 0.0
            return c
        limit = max_exact_k(self.slices)
        if k > limit:  # INT32 sums would overflow: chunks of K, each exact, added in float64
            for k0 in range(0, k, limit):
                self(a[:, k0:k0 + limit], b[k0:k0 + limit], c, alpha, beta if k0 == 0 else 1.0)
            return c
        st = self._state(m, n, k)
        self.slice_operands(a, b, st)
        self.multiply(st, alpha, beta, c)
        bad_a, bad_b = st["bad_a"], st["bad_b"]
        bad = int(bad_a.sum() + bad_b.sum())  # a sync: only a few bytes
        self.last_nonfinite = bad
        if bad:  # the flagged lines were read as zeros: DGEMM's result over them (ozaki.nonfinite)
            patch_nonfinite(c, a, b, bad_a, bad_b, alpha)
        return c


def _check_operands(a, b, c, beta):
    import cupy as cp

    for name, x in (("A", a), ("B", b)):
        if not hasattr(x, "__cuda_array_interface__"):
            raise KernelLabArgumentError(f"{name} must be an array on the GPU (CuPy), got {type(x).__name__}")
    a, b = cp.asarray(a), cp.asarray(b)
    for name, x in (("A", a), ("B", b)):
        if x.ndim != 2:
            raise KernelLabArgumentError(f"{name} must be a matrix, got shape {x.shape}")
        if x.dtype != cp.float64:
            raise KernelLabArgumentError(f"{name} must be float64 (the format being emulated), got {x.dtype}")
    if a.shape[1] != b.shape[0]:
        raise KernelLabArgumentError(f"A is {a.shape[0]}x{a.shape[1]} and B is {b.shape[0]}x{b.shape[1]}: "
                                     "A's columns must equal B's rows")
    a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
    if c is not None:
        c = cp.asarray(c)
        if c.shape != (a.shape[0], b.shape[1]) or c.dtype != cp.float64 or not c.flags.c_contiguous:
            raise KernelLabArgumentError(f"C must be a C-contiguous float64 {a.shape[0]}x{b.shape[1]} matrix, "
                                         f"got {c.dtype} {c.shape}")
    elif beta != 0:
        raise KernelLabArgumentError("beta is not 0 but no C was given")
    return a, b, c


# ---------------------------------------------------------------------------------------------
# Compiling ahead of time


def _warm_job(spec):
    import os

    os.environ.setdefault("KERNEL_LAB_QUIET", "1")
    import kernel_lab  # noqa: F401  (GPU backend before numba.cuda)

    method, shape, slices, cfg_dict = spec
    t0 = time.perf_counter()
    try:
        OzakiGemm(slices, method, OzakiConfig(**cfg_dict)).compile(*shape)
        return spec, time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001 - reported to the caller
        return spec, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"


def precompile(jobs, processes: int | None = None, log=print) -> list:
    """Fill the code-generation cache for ``jobs`` = [(method, (M, N, K)), ...] in parallel processes.

    cuBLASDx code generation (NVRTC inside libmathdx, minutes per problem shape) is CPU work and
    the same for every kernel that uses one pipeline: side by side on a many-core host it costs the
    time of the slowest job, and kernels compiled afterwards (a learner's too) take seconds.
    Each job may add ``slices`` and an ``OzakiConfig`` as third and fourth items.
    """
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    specs = []
    for job in jobs:
        method, shape = job[0], tuple(job[1])
        slices = job[2] if len(job) > 2 else 7
        cfg = (job[3] if len(job) > 3 else OzakiConfig()).as_dict()
        specs.append((method, shape, slices, cfg))
    if not specs:
        return []
    processes = processes or max(1, min(len(specs), (os.cpu_count() or 2) - 1, 14))
    results = []
    with ProcessPoolExecutor(max_workers=processes, mp_context=mp.get_context("spawn")) as pool:
        for spec, seconds, error in pool.map(_warm_job, specs):
            results.append((spec, seconds, error))
            if log:
                log(f"compiled {spec[0]} for {spec[1]} in {seconds:.0f} s" + (f": FAILED {error}" if error else ""))
    return results
