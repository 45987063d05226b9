"""Ozaki scheme II on the GPU: scaling and remainder kernels, N INT8 products, CRT reconstruction.

The scheme is ``ozaki2.py``'s (Ozaki, Uchino and Imamura, arXiv:2504.08009); this module runs it
with the INT8 pipeline of ``gpu.py``. The remainders of A and B modulo the N moduli are stored
exactly like Ozaki-I's slices, as ``(N, rows, K)`` int8 buffers (K contiguous, padded to whole
tiles with zeros), so ``gpu.pair_products_kernel`` multiplies them with the pairs
``(0, 0), (1, 1), ..., (N-1, N-1)``: one INT8 GEMM per modulus, INT32 products in ``(N, M, N)``.

Kernels (plain Numba: they also run in the CUDA simulator, where the tests compare each one with
its NumPy counterpart in ``ozaki2.py`` bit for bit):

``row_exponents_kernel(bound)``   one block per row of A: ``E`` with ``||row|| < 2**E`` (norm
                                  rule) or the top exponent (max rule), and ``bad`` for Inf/NaN;
``col_partials_kernel`` + ``col_exponents_kernel(bound)``
                                  the same for B's columns: a 2D grid of (32 columns x 256 rows)
                                  blocks writes each chunk's maximum and scaled sum of squares, a
                                  second kernel combines the chunks in a fixed order (the same
                                  result every run, no atomics);
``residue_rows_kernel(n)``        A (M, K) float64 -> remainders (N, Mp, Kp) int8, one element
                                  per thread;
``residue_cols_kernel(n)``        B (K, N) float64 -> remainders (N, Np, Kp) int8 through a
                                  shared-memory tile (K becomes contiguous, as in ``slice_cols``);
``crt_kernel(n)``                 INT32 products (N, M, N) -> float64 C, with alpha, beta and the
                                  unscaling (``ozaki2.crt_reconstruct``'s float64 windows).

Launchers (``launch_exponents``, ``launch_residues``, ``launch_crt``) take any CUDA arrays (CuPy,
Numba device arrays, or NumPy arrays under the simulator) and pick the grids. ``Ozaki2Gemm`` puts
them together with the pipeline GEMM; it is used exactly like ``gpu.OzakiGemm``::

    g = Ozaki2Gemm(moduli=14)              # bound="norm" (default) or "max"; config=gpu.OzakiConfig()
    c = g(a, b)                            # CuPy float64 in, CuPy float64 out
    g(a, b, c, alpha=0.5, beta=1.0)        # in place: c = 0.5 * a @ b + c

Not yet run on a GPU (the pipeline part cannot run in the simulator): ``scripts/gpu_ozaki2_check.py``
checks every buffer against ``ozaki2.py`` and times it beside ``gpu.OzakiGemm``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda  # after kernel_lab chose GPU or simulator (the package's __init__ runs first)

from ..validate import KernelLabArgumentError
from . import ozaki2
from .gpu import (PLANES, TILE, TILE_PADDED, OzakiConfig, _check_operands, compile_once, load_columns_tile,
                  pair_products_kernel, work_buffers)
from .nonfinite import patch_nonfinite
from .slicing import max_exact_k

ROW_THREADS = 128  # threads per row in row_exponents
# TILE (32): columns per block of col_partials, and the transpose tile of residue_cols (from gpu)
COL_ROWS = 256  # rows of B each block of col_partials reduces
TWO53 = 2.0**53
FMAX = float(np.finfo(np.float64).max)  # x <= FMAX: finite (for x >= 0), with no Inf - Inf warnings
SPLIT = 26  # an integer <= 2**53 is hi * 2**26 + lo with hi, lo < 2**27: reductions stay exact in float64


# ---------------------------------------------------------------------------------------------
# Exponents (the scaling of rows and columns)


@functools.lru_cache(maxsize=None)
def row_exponents_kernel(bound: str):
    """``row_exponents[M, ROW_THREADS](a, e, bad)``: per row of A, ``e = E`` of
    ``ozaki2.norm_exponents`` (``bound="norm"``) or ``frexp(max|row|)[1]`` (``"max"``), 0 for a
    row of zeros; ``bad[row] = 1`` (and e = 0) when the row holds Inf or NaN."""
    _require_bound(bound)
    T = ROW_THREADS
    NORM = bound == "norm"
    SLACK = 1.0 + ozaki2.NORM_SLACK

    @cuda.jit
    def row_exponents(a, e, bad):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        part = cuda.shared.array(T, np.float64)
        k = a.shape[1]
        amax = 0.0
        for j in range(tid, k, T):
            v = abs(a[row, j])
            if v > amax or v != v:  # NaN wins and stays (a NaN amax compares False with anything)
                amax = v
        part[tid] = amax
        cuda.syncthreads()
        half = T // 2
        while half > 0:
            if tid < half:
                other = part[tid + half]
                if other > part[tid] or other != other:
                    part[tid] = other
            cuda.syncthreads()
            half //= 2
        amax = part[0]
        cuda.syncthreads()  # part is reused below
        top = 0
        if 0.0 < amax <= FMAX:
            top = math.frexp(amax)[1]
        if NORM:
            acc = 0.0
            for j in range(tid, k, T):
                v = math.ldexp(a[row, j], -top)
                acc += v * v
            part[tid] = acc
            cuda.syncthreads()
            half = T // 2
            while half > 0:
                if tid < half:
                    part[tid] += part[tid + half]
                cuda.syncthreads()
                half //= 2
        if tid == 0:
            if not amax <= FMAX:  # Inf or NaN: no exponent; the row is treated as zeros
                e[row] = 0
                bad[row] = 1
            else:
                bad[row] = 0
                if amax == 0.0:
                    e[row] = 0
                elif NORM:
                    e[row] = top + math.frexp(math.sqrt(part[0]) * SLACK)[1]
                else:
                    e[row] = top

    return row_exponents


@functools.lru_cache(maxsize=None)
def col_partials_kernel():
    """``col_partials[(ceil(N/32), ceil(K/256)), (32, 8)](b, pmax, psum)``: for each chunk of 256
    rows of B and each column, the chunk's max |b| (NaN if it holds Inf or NaN) into ``pmax[chunk,
    col]`` and its sum of squares scaled by the chunk's own top exponent into ``psum``."""
    R = COL_ROWS

    @cuda.jit
    def col_partials(b, pmax, psum):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        col = cuda.blockIdx.x * TILE + tx
        k0 = cuda.blockIdx.y * R
        part = cuda.shared.array((8, TILE), np.float64)
        k, n = b.shape
        m = 0.0
        if col < n:
            for r in range(k0 + ty, min(k0 + R, k), 8):
                v = abs(b[r, col])
                if v > m or v != v:  # NaN wins and stays
                    m = v
        part[ty, tx] = m
        cuda.syncthreads()
        if ty == 0:
            for y in range(1, 8):
                o = part[y, tx]
                if o > m or o != o:
                    m = o
            part[0, tx] = m
        cuda.syncthreads()
        m = part[0, tx]
        cuda.syncthreads()
        top = 0
        if 0.0 < m <= FMAX:
            top = math.frexp(m)[1]
        acc = 0.0
        if col < n:
            for r in range(k0 + ty, min(k0 + R, k), 8):
                v = math.ldexp(b[r, col], -top)
                acc += v * v
        part[ty, tx] = acc
        cuda.syncthreads()
        if ty == 0 and col < n:
            for y in range(1, 8):
                acc += part[y, tx]
            pmax[cuda.blockIdx.y, col] = m
            psum[cuda.blockIdx.y, col] = acc

    return col_partials


@functools.lru_cache(maxsize=None)
def col_exponents_kernel(bound: str):
    """``col_exponents[ceil(N/128), 128](pmax, psum, e, bad)``: combines the chunks of
    ``col_partials`` in order: ``e`` as in :func:`row_exponents_kernel`, per column of B."""
    _require_bound(bound)
    NORM = bound == "norm"
    SLACK = 1.0 + ozaki2.NORM_SLACK

    @cuda.jit
    def col_exponents(pmax, psum, e, bad):
        col = cuda.grid(1)
        if col >= e.size:
            return
        chunks = pmax.shape[0]
        amax = 0.0
        for c in range(chunks):
            v = pmax[c, col]
            if v > amax or v != v:
                amax = v
        if not amax <= FMAX:  # Inf or NaN
            e[col] = 0
            bad[col] = 1
            return
        bad[col] = 0
        if amax == 0.0:
            e[col] = 0
            return
        top = math.frexp(amax)[1]
        if not NORM:
            e[col] = top
            return
        total = 0.0
        for c in range(chunks):
            v = pmax[c, col]
            if v > 0.0:
                total += math.ldexp(psum[c, col], 2 * (math.frexp(v)[1] - top))
        e[col] = top + math.frexp(math.sqrt(total) * SLACK)[1]

    return col_exponents


def _require_bound(bound):
    if bound not in ozaki2.BOUNDS:
        raise KernelLabArgumentError(f"bound must be one of {ozaki2.BOUNDS}, got {bound!r}")


def col_chunks(k: int) -> int:
    """Rows of the ``(chunks, N)`` partial buffers of :func:`launch_exponents` for B (K rows)."""
    return max(1, -(-k // COL_ROWS))


def launch_exponents(x, axis: int, bound: str, e, bad, pmax=None, psum=None):
    """Per-row (``axis=1``, A) or per-column (``axis=0``, B) exponents into ``e`` (int32) and Inf/NaN
    flags into ``bad`` (int32). For columns, ``pmax``/``psum`` are float64 work buffers of shape
    ``(col_chunks(K), N)``.

    >>> a = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, np.nan]])
    >>> e, bad = np.zeros(3, np.int32), np.zeros(3, np.int32)
    >>> launch_exponents(a, 1, "norm", e, bad)      # ||row 0|| = 5 < 2**3
    >>> e.tolist(), bad.tolist()
    ([3, 0, 0], [0, 0, 1])
    >>> b = a[:2].T.copy()                           # the same numbers as columns of B
    >>> eb, bad_b = np.zeros(2, np.int32), np.zeros(2, np.int32)
    >>> pmax, psum = np.empty((col_chunks(2), 2)), np.empty((col_chunks(2), 2))
    >>> launch_exponents(b, 0, "norm", eb, bad_b, pmax, psum)
    >>> eb.tolist()
    [3, 0]
    """
    rows, cols = x.shape
    if axis == 1:
        if rows:
            row_exponents_kernel(bound)[rows, ROW_THREADS](x, e, bad)
        return
    if pmax is None or psum is None:
        raise KernelLabArgumentError("columns need the work buffers pmax and psum, (col_chunks(K), N) float64")
    if cols:
        col_partials_kernel()[(-(-cols // TILE), col_chunks(rows)), (TILE, 8)](x, pmax, psum)
        col_exponents_kernel(bound)[-(-cols // 128), 128](pmax, psum, e, bad)


# ---------------------------------------------------------------------------------------------
# Remainders


@functools.lru_cache(maxsize=None)
def _residue_device(n_moduli: int):
    """Device functions for the remainders of ``rint(x * 2**shift)`` modulo each modulus, exactly
    as ``ozaki2.to_integers`` then ``ozaki2.residues``.

    ``integer_parts`` returns ``(hi, lo, sh, neg)``, the integer being ``(-1)**neg (hi * 2**26 +
    lo) * 2**sh`` with ``hi, lo < 2**27`` as float64. ``residue`` reduces it with float64
    arithmetic, as the paper does: ``v - m * floor(v / m)`` with ``v < 2**27`` is exact (every
    product and difference is an integer below 2**53), and a quotient one off after rounding
    ``v * (1/m)`` is caught by one comparison each way. Integer division by a modulus only known
    at run time would cost some twenty instructions; these are three float64 operations."""
    plan = ozaki2.crt_plan(n_moduli)
    MODS = np.array(plan.moduli, dtype=np.float64)
    INVS = 1.0 / MODS
    HALF = plan.half.astype(np.float64)
    POW2 = plan.pow2.astype(np.float64)  # 2**j mod m
    P_SPLIT = np.array([pow(2, SPLIT, m) for m in plan.moduli], dtype=np.float64)
    SCALE = float(2**SPLIT)

    @cuda.jit(device=True)
    def reduce(v, m, inv):
        r = v - m * math.floor(v * inv)
        if r >= m:
            r -= m
        elif r < 0.0:
            r += m
        return r

    @cuda.jit(device=True)
    def integer_parts(x, shift):
        v = math.ldexp(x, shift)
        neg = v < 0.0
        v = abs(v)
        sh = 0
        if v < TWO53:
            v = np.float64(round(v))  # to nearest, ties to even, like NumPy's rint; at most 2**53
        else:  # already an integer: v = sig * 2**sh with sig < 2**53
            f, ex = math.frexp(v)
            v = math.ldexp(f, 53)
            sh = ex - 53
        hi = np.float64(math.floor(v / SCALE))  # exact: a power of two
        return hi, v - hi * SCALE, sh, neg

    @cuda.jit(device=True)
    def residue(hi, lo, sh, neg, idx):
        m = MODS[idx]
        inv = INVS[idx]
        r = reduce(reduce(hi, m, inv) * P_SPLIT[idx] + lo, m, inv)  # below 2**16 + 2**27
        if sh > 0:
            r = reduce(r * POW2[idx, sh], m, inv)
        if neg and r != 0.0:
            r = m - r
        if r > m - 1.0 - HALF[idx]:
            r -= m
        return np.int32(r)

    return integer_parts, residue


@functools.lru_cache(maxsize=None)
def residue_rows_kernel(n_moduli: int):
    """``residue_rows[(ceil(Kp/32), ceil(Mp/8)), (32, 8)](a, e, q, bad, out)``: A (M, K) ->
    ``out`` (N, Mp, Kp) int8, the symmetric remainders of ``rint(a * 2**(q - e[row]))``; zeros in
    the padding and in rows with ``bad``."""
    N = n_moduli
    integer_parts, residue = _residue_device(n_moduli)

    @cuda.jit
    def residue_rows(a, e, q, bad, out):
        col, row = cuda.grid(2)
        if row >= out.shape[1] or col >= out.shape[2]:
            return
        m, k = a.shape
        x = 0.0
        shift = 0
        if row < m and col < k:
            if bad[row] == 0:
                x = a[row, col]
                shift = q - e[row]
        hi, lo, sh, neg = integer_parts(x, shift)
        for idx in range(N):
            out[idx, row, col] = residue(hi, lo, sh, neg, idx)

    return residue_rows


@functools.lru_cache(maxsize=None)
def residue_cols_kernel(n_moduli: int):
    """``residue_cols[(ceil(Np/32), ceil(Kp/32)), (32, 8)](b, e, q, bad, out)``: B (K, N) ->
    ``out`` (N, Np, Kp) int8 (column j of B becomes row j, K contiguous), through a shared tile."""
    N = n_moduli
    integer_parts, residue = _residue_device(n_moduli)

    @cuda.jit
    def residue_cols(b, e, q, bad, out):
        n0 = cuda.blockIdx.x * TILE
        k0 = cuda.blockIdx.y * TILE
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tile = cuda.shared.array((TILE, TILE_PADDED), np.float64)  # a literal shape: Numba needs one
        n = b.shape[1]
        load_columns_tile(b, bad, tile, n0, k0)
        for r in range(ty, TILE, 8):  # write rows of the remainders: consecutive tx, consecutive k
            nn = n0 + r
            kk = k0 + tx
            if nn < out.shape[1] and kk < out.shape[2]:
                shift = q - e[nn] if nn < n else 0
                hi, lo, sh, neg = integer_parts(tile[tx, r], shift)
                for idx in range(N):
                    out[idx, nn, kk] = residue(hi, lo, sh, neg, idx)

    return residue_cols


def launch_residues(x, axis: int, e, q: int, bad, out):
    """Remainders of A (``axis=1``: rows scaled by ``2**(q - e)``) or B (``axis=0``: columns) into
    ``out``, ``(N, rows padded, K padded)`` int8, N = ``out.shape[0]``; the padding gets zeros.

    >>> a = np.array([[0.75, -0.5]])
    >>> out = np.full((2, 1, 4), 9, np.int8)         # 2 moduli (256, 255), K padded to 4
    >>> launch_residues(a, 1, np.zeros(1, np.int32), 10, np.zeros(1, np.int32), out)
    >>> out[:, 0].tolist()                           # 768 and -512 modulo 256 and 255
    [[0, 0, 0, 0], [3, -2, 0, 0]]
    """
    n_moduli, rows_p, kp = out.shape
    if axis == 1:
        residue_rows_kernel(n_moduli)[(-(-kp // 32), -(-rows_p // 8)), (32, 8)](x, e, np.int32(q), bad, out)
    else:
        residue_cols_kernel(n_moduli)[(-(-rows_p // TILE), -(-kp // TILE)), (TILE, 8)](x, e, np.int32(q), bad, out)


# ---------------------------------------------------------------------------------------------
# Reconstruction


@functools.lru_cache(maxsize=None)
def crt_kernel(n_moduli: int):
    """``crt[(ceil(N/32), ceil(M/8)), (32, 8)](parts, ea, eb, q, alpha, beta, c)``: float64
    ``c = alpha * C' * 2**(ea + eb - q) + beta * c`` where C' is rebuilt from the INT32 products
    ``parts`` (N, M, N) as ``ozaki2.crt_reconstruct`` does it, operation for operation (C is not
    read when beta is 0). ``q = qa + qb``; ``ea``/``eb`` the row/column exponents."""
    plan = ozaki2.crt_plan(n_moduli)
    N = plan.n
    W = len(plan.window_low)
    MODS = np.array(plan.moduli, dtype=np.float64)
    INVS = 1.0 / MODS
    HALF = plan.half.astype(np.float64)
    FRACS = plan.fractions.copy()
    WEIGHTS = plan.weights.copy()
    MWIN = plan.product_windows.copy()

    @cuda.jit
    def crt(parts, ea, eb, q, alpha, beta, c):
        col, row = cuda.grid(2)
        m, n = c.shape
        if row >= m or col >= n:
            return
        r = cuda.local.array(N, np.float64)
        quot = 0.0
        for idx in range(N):
            mod = MODS[idx]
            v = np.float64(parts[idx, row, col])  # |v| < 2**31: the reduction below is exact
            x = v - mod * math.floor(v * INVS[idx])
            if x >= mod:
                x -= mod
            elif x < 0.0:
                x += mod
            if x > mod - 1.0 - HALF[idx]:
                x -= mod
            r[idx] = x
            quot = quot + x * FRACS[idx]
        qq = np.float64(round(quot))  # to nearest, ties to even, like NumPy's rint
        total = 0.0
        for w in range(W):
            s = 0.0
            for idx in range(N):
                s = s + r[idx] * WEIGHTS[idx, w]  # exact: products and sums below 2**53 units
            s = s - qq * MWIN[w]
            if w == 0:
                total = s
            else:
                total = total + s
        x = math.ldexp(total, ea[row] + eb[col] - q)
        if beta == 0.0:
            c[row, col] = alpha * x
        else:
            c[row, col] = alpha * x + beta * c[row, col]

    return crt


def launch_crt(parts, ea, eb, q: int, alpha, beta, c):
    """Run :func:`crt_kernel` for ``parts`` (N, M, N) INT32 into ``c`` (M, N) float64.

    >>> parts = np.array([[[-1000]], [[-1000 + 255 * 7]]], np.int32)   # C' = -1000 (mod 256, mod 255)
    >>> c = np.zeros((1, 1))
    >>> launch_crt(parts, np.array([2], np.int32), np.array([1], np.int32), 5, 1.0, 0.0, c)
    >>> c.tolist()                                   # -1000 * 2**(2 + 1 - 5)
    [[-250.0]]
    """
    m, n = c.shape
    if m and n:
        crt_kernel(parts.shape[0])[(-(-n // 32), -(-m // 8)), (32, 8)](
            parts, ea, eb, np.int32(q), np.float64(alpha), np.float64(beta), c)


# ---------------------------------------------------------------------------------------------
# The launcher


class Ozaki2Gemm:
    """``alpha * A @ B + beta * C`` in float64 by Ozaki scheme II on INT8 tensor cores.

    Used like ``gpu.OzakiGemm``: CuPy (or CUDA-array-interface) float64 C-contiguous inputs, CuPy
    result; ``moduli`` INT8 products per call (14 reach float64 accuracy for K up to a few
    thousand: ``ozaki2`` and ``auto.choose_moduli``); ``bound`` the scaling rule of ``ozaki2``.
    Work buffers are kept for one shape at a time; the pipeline compiles once per padded shape.
    K above the INT32 limit (131,071) runs as chunks, each its own emulated GEMM, added in float64.
    Inf and NaN: as ``gpu.OzakiGemm`` (their rows and columns recomputed by DGEMM, ``nonfinite``).

    Steps, each callable on its own for timing: :meth:`prepare` (exponents and remainders),
    :meth:`products` (the N INT8 GEMMs), :meth:`reconstruct` (CRT, alpha, beta).

    >>> g = Ozaki2Gemm(14)                                  # doctest: +SKIP
    >>> c = g(cp.asarray(a), cp.asarray(b))                 # doctest: +SKIP
    """

    def __init__(self, moduli: int = 14, bound: str = "norm", config: OzakiConfig | None = None):
        self.moduli = len(ozaki2.coprime_moduli(moduli))
        _require_bound(bound)
        self.bound = bound
        self.config = config or OzakiConfig()
        self._shape_state = {}
        self.compile_seconds = {}
        self.last_nonfinite = 0

    def _state(self, m, n, k):
        # The same buffers and pipeline as Ozaki-I (16 planes): up to 16 moduli share its kernel.
        return work_buffers(self._shape_state, self.config, m, n, k, planes=max(PLANES, self.moduli),
                            more=self._own_buffers)

    def _own_buffers(self, st, m, n, k):
        """Ozaki-II's buffers beside the shared ones: the operands' bits, the planes the moduli use,
        B's column partials, and one INT32 product per modulus."""
        import cupy as cp

        nm = self.moduli
        st["q"] = ozaki2.operand_bits(nm, k, self.bound)
        st["ra"], st["rb"] = st["da"][:nm], st["db"][:nm]  # the planes the moduli use
        st["pmax"] = cp.empty((col_chunks(k), n), dtype=cp.float64)
        st["psum"] = cp.empty((col_chunks(k), n), dtype=cp.float64)
        st["parts"] = cp.empty((nm, m, n), dtype=cp.int32)
        st["pair"] = cp.arange(nm, dtype=cp.int32)  # pairs (l, l): pair_t = pair_u

    def prepare(self, a, b, st):
        """Exponents of A's rows and B's columns, then the remainders of both, into the buffers."""
        qa, qb = st["q"]
        launch_exponents(a, 1, self.bound, st["ea"], st["bad_a"])
        launch_exponents(b, 0, self.bound, st["eb"], st["bad_b"], st["pmax"], st["psum"])
        launch_residues(a, 1, st["ea"], qa, st["bad_a"], st["ra"])
        launch_residues(b, 0, st["eb"], qb, st["bad_b"], st["rb"])

    def products(self, st):
        """``parts[l] = ra[l] @ rb[l]^T`` (INT32) for every modulus: gpu.pair_products_kernel."""
        cfg = self.config
        mp, np_, _ = st["padded"]
        pipe = st["pipe"]
        _, kern = pair_products_kernel(cfg)
        args = (st["pair"], st["pair"], st["parts"], pipe)
        compile_once(kern, args, pipe.buffer_size, self.compile_seconds, ("pairs", st["padded"]))
        kern[(mp // cfg.tile_m, np_ // cfg.tile_n, self.moduli), pipe.block_dim, 0, pipe.buffer_size](*args)

    def reconstruct(self, st, alpha, beta, c):
        """C from the INT32 products (CRT), unscaled, with alpha and beta."""
        qa, qb = st["q"]
        launch_crt(st["parts"], st["ea"], st["eb"], qa + qb, alpha, beta, c)

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
        limit = max_exact_k(1)
        if k > limit:  # INT32 sums would overflow: chunks of K, each exact, added in float64
            for k0 in range(0, k, limit):
                self(a[:, k0:k0 + limit], b[k0:k0 + limit], c, alpha, beta if k0 == 0 else 1.0)
            return c
        st = self._state(m, n, k)
        self.prepare(a, b, st)
        self.products(st)
        self.reconstruct(st, alpha, beta, c)
        bad_a, bad_b = st["bad_a"], st["bad_b"]
        bad = int(bad_a.sum() + bad_b.sum())  # a sync: only a few bytes
        self.last_nonfinite = bad
        if bad:  # the flagged lines were read as zeros: DGEMM's result over them (ozaki.nonfinite)
            patch_nonfinite(c, a, b, bad_a, bad_b, alpha)
        return c
