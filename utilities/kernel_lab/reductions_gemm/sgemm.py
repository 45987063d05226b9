"""Matrix multiplication on CUDA cores, kernel by kernel: module 02's SGEMM progression.

``C = A @ B`` for row-major float32 ``A`` (M x K), ``B`` (K x N), ``C`` (M x N). Each numbered
kernel adds one idea to the one before (the progression every kernel engineer learns from; Simon
Boehm's "How to optimize a CUDA matmul kernel for cuBLAS-like performance" is the best-known
write-up, in CUDA C):

1. naive: one thread per element of C, neighbouring threads on neighbouring *rows*;
2. coalesced: neighbouring threads on neighbouring *columns*;
3. shared-memory tiles: a block stages 32 x 32 tiles of A and B in shared memory;
4. 1D register blocking: each thread computes TM elements of a column of C;
5. 2D register blocking: each thread computes a TM x TN block of C;
6. vectorised: 16-byte loads from device and shared memory, A's tile stored transposed;
7. warp tiling: each warp owns a sub-tile of the block's tile, arranged so that its shared-memory
   reads are free of bank conflicts;
8. double buffering: the next tiles are loaded while the current ones are used;
8b. two tiles per trip of the main loop, so that each half reads a constant stage of shared memory;
9. autotuned: the tile sizes of kernel 8 chosen by timing candidates on this GPU.

Every kernel is correct for any M, N, K (edges are zero-filled in shared memory and masked on
store). Kernels 6-9 take a fast path with 16-byte accesses only where a tile lies inside the
matrices and rows are 16-byte aligned (K and N multiples of 4), and a scalar path elsewhere.

The launch constants come from ``kl.sizes``: the same code with smaller tiles in the simulator,
where every thread is a Python thread (``GPU_CONFIG`` vs the simulator's ``CONFIG``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import SimpleNamespace

import numpy as np

from ..environment import on_simulator
from ..sizes import sizes as _sizes
from ..validate import KernelLabArgumentError, require_array

from numba import cuda, float32, float64, int32  # noqa: E402  (kernel_lab chose GPU or simulator already)

from ..vector_loads import load2, load4, store2, store4  # noqa: E402

KERNEL_VERSION = "02.3"  # part of the tuner's cache key: bump it when a kernel changes

# --- tile constants: GPU sizes, simulator sizes (same code) ------------------------------------
_TILES_GPU = dict(tile=32, bm4=64, bn4=64, bk4=8, tm4=8, bm=128, bn=128, bk=8, tm=8, tn=8)
_T = _sizes(
    gpu=_TILES_GPU,
    sim=dict(tile=8, bm4=16, bn4=16, bk4=4, tm4=4, bm=32, bn=32, bk=8, tm=4, tn=4),
)
TILE = _T.tile  # kernels 1-3: TILE x TILE threads per block
BM4, BN4, BK4, TM4 = _T.bm4, _T.bn4, _T.bk4, _T.tm4  # kernel 4
THREADS4 = BM4 * BN4 // TM4
BM, BN, BK, TM, TN = _T.bm, _T.bn, _T.bk, _T.tm, _T.tn  # kernels 5 and 6
THREADS5 = (BM // TM) * (BN // TN)


def gpu_constants() -> dict:
    """The tile constants of kernels 1-6 at the GPU's sizes wherever this runs, by the names 02.3
    gives them (``TILE``, ``BM4`` ... ``THREADS5``). With :func:`with_constants` a check in the
    simulator runs a kernel at the GPU's tiles too: 8 x 8 results a thread, two 16-byte loads a row
    of them, where the simulator's 4 x 4 take one."""
    g = _TILES_GPU
    return dict(TILE=g["tile"], BM4=g["bm4"], BN4=g["bn4"], BK4=g["bk4"], TM4=g["tm4"],
                THREADS4=g["bm4"] * g["bn4"] // g["tm4"], BM=g["bm"], BN=g["bn"], BK=g["bk"], TM=g["tm"],
                TN=g["tn"], THREADS5=(g["bm"] // g["tm"]) * (g["bn"] // g["tn"]))


def with_constants(function, **constants):
    """``function`` (a kernel or a device function) compiled again with some of the module-level
    names its body reads meaning other values: ``with_constants(sgemm_vectorized, **gpu_constants())``
    is that kernel at the GPU's tiles. Names its body does not read are left out; the functions it
    calls keep their own. A plain Python function (a launcher) comes back rebound, not compiled."""
    import types

    fn = getattr(function, "py_func", None) or getattr(function, "fn", function)  # a dispatcher, or the simulator's
    if not isinstance(fn, types.FunctionType):
        raise KernelLabArgumentError(f"with_constants takes a function, not {type(function).__name__}")
    used = {name: value for name, value in constants.items() if name in fn.__code__.co_names}
    if not used:
        raise KernelLabArgumentError(f"{fn.__name__} reads none of {', '.join(constants)}: the names it uses are "
                                     f"{', '.join(sorted(fn.__code__.co_names))}")
    rebound = types.FunctionType(fn.__code__, dict(fn.__globals__, **used), fn.__name__, fn.__defaults__,
                                 fn.__closure__)
    if function is fn:
        return rebound
    device = getattr(function, "_device", None)  # the simulator's kernels say it so
    if device is None:
        device = bool(getattr(function, "targetoptions", {}).get("device", False))
    return cuda.jit(device=True)(rebound) if device else cuda.jit(rebound)


def _flat(x):
    return x.reshape(x.size)


def check_operands(c, a, b):
    """Shapes and dtypes of a float32 GEMM's operands, with a readable error."""
    require_array(a, "A", ndim=2, dtype=np.float32, contiguous=True)
    require_array(b, "B", ndim=2, dtype=np.float32, contiguous=True)
    require_array(c, "C", ndim=2, dtype=np.float32, contiguous=True)
    if a.shape[1] != b.shape[0]:
        raise KernelLabArgumentError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}: "
                                     "A's columns must match B's rows")
    if c.shape != (a.shape[0], b.shape[1]):
        raise KernelLabArgumentError(f"C has shape {c.shape}, expected ({a.shape[0]}, {b.shape[1]})")


# ================================================================================================
# 1. naive


@cuda.jit
def sgemm_naive(a, b, c):
    row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # neighbouring threads: rows
    col = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
        c[row, col] = acc


def launch_naive(c, a, b):
    sgemm_naive[(-(-c.shape[0] // TILE), -(-c.shape[1] // TILE)), (TILE, TILE)](a, b, c)


# ================================================================================================
# 2. coalesced


@cuda.jit
def sgemm_coalesced(a, b, c):
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # neighbouring threads: columns
    row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]  # a warp reads one a[row, k] (broadcast), 32 neighbours of b
        c[row, col] = acc


def launch_coalesced(c, a, b):
    sgemm_coalesced[(-(-c.shape[1] // TILE), -(-c.shape[0] // TILE)), (TILE, TILE)](a, b, c)


# ================================================================================================
# 3. shared-memory tiles


@cuda.jit
def sgemm_shared(a, b, c):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, n, kk = c.shape[0], c.shape[1], a.shape[1]
    acc = float32(0)
    for k0 in range(0, kk, TILE):
        # each thread loads one element of each tile; outside the matrices: 0
        a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < kk else float32(0)
        b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < kk and col < n else float32(0)
        cuda.syncthreads()  # the tiles are complete before anyone uses them
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()  # everyone is done with the tiles before the next load overwrites them
    if row < m and col < n:
        c[row, col] = acc


def launch_shared(c, a, b):
    sgemm_shared[(-(-c.shape[1] // TILE), -(-c.shape[0] // TILE)), (TILE, TILE)](a, b, c)


# ================================================================================================
# 4. 1D register blocking: each thread computes TM4 elements of one column of C


@cuda.jit
def sgemm_1d_blocking(a, b, c):
    a_tile = cuda.shared.array((BM4, BK4), float32)
    b_tile = cuda.shared.array((BK4, BN4), float32)
    t = cuda.threadIdx.x
    tx, ty = t % BN4, t // BN4  # column of C in the tile; group of TM4 rows
    row0, col0 = cuda.blockIdx.y * BM4, cuda.blockIdx.x * BN4
    m, n, kk = c.shape[0], c.shape[1], a.shape[1]
    acc = cuda.local.array(TM4, float32)
    for i in range(TM4):
        acc[i] = 0
    ar, ac = t // BK4, t % BK4  # the element of the A tile this thread loads (BM4 x BK4 = THREADS4)
    br, bc = t // BN4, t % BN4  # ... and of the B tile (BK4 x BN4 = THREADS4)
    for k0 in range(0, kk, BK4):
        a_tile[ar, ac] = a[row0 + ar, k0 + ac] if row0 + ar < m and k0 + ac < kk else float32(0)
        b_tile[br, bc] = b[k0 + br, col0 + bc] if k0 + br < kk and col0 + bc < n else float32(0)
        cuda.syncthreads()
        for k in range(BK4):
            bv = b_tile[k, tx]  # one shared load reused TM4 times
            for i in range(TM4):
                acc[i] += a_tile[ty * TM4 + i, k] * bv
        cuda.syncthreads()
    for i in range(TM4):
        r = row0 + ty * TM4 + i
        if r < m and col0 + tx < n:
            c[r, col0 + tx] = acc[i]


def launch_1d_blocking(c, a, b):
    sgemm_1d_blocking[(-(-c.shape[1] // BN4), -(-c.shape[0] // BM4)), THREADS4](a, b, c)


# ================================================================================================
# 5. 2D register blocking: each thread computes a TM x TN block of C


@cuda.jit
def sgemm_2d_blocking(a, b, c):
    a_tile = cuda.shared.array((BM, BK), float32)
    b_tile = cuda.shared.array((BK, BN), float32)
    t = cuda.threadIdx.x
    tx, ty = t % (BN // TN), t // (BN // TN)  # this thread's TM x TN block in the tile
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    m, n, kk = c.shape[0], c.shape[1], a.shape[1]
    acc = cuda.local.array((TM, TN), float32)
    a_reg = cuda.local.array(TM, float32)
    b_reg = cuda.local.array(TN, float32)
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = 0
    for k0 in range(0, kk, BK):
        for l in range(BM * BK // THREADS5):  # BM * BK / THREADS5 elements each
            e = t + l * THREADS5
            r, q = e // BK, e % BK
            a_tile[r, q] = a[row0 + r, k0 + q] if row0 + r < m and k0 + q < kk else float32(0)
        for l in range(BK * BN // THREADS5):
            e = t + l * THREADS5
            r, q = e // BN, e % BN
            b_tile[r, q] = b[k0 + r, col0 + q] if k0 + r < kk and col0 + q < n else float32(0)
        cuda.syncthreads()
        for k in range(BK):
            for i in range(TM):
                a_reg[i] = a_tile[ty * TM + i, k]
            for j in range(TN):
                b_reg[j] = b_tile[k, tx * TN + j]
            for i in range(TM):  # TM x TN multiply-adds from TM + TN shared loads
                for j in range(TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    for i in range(TM):
        r = row0 + ty * TM + i
        for j in range(TN):
            q = col0 + tx * TN + j
            if r < m and q < n:
                c[r, q] = acc[i, j]


def launch_2d_blocking(c, a, b):
    sgemm_2d_blocking[(-(-c.shape[1] // BN), -(-c.shape[0] // BM)), THREADS5](a, b, c)


# ================================================================================================
# 6. vectorised: 16-byte loads, A's tile transposed in shared memory


@cuda.jit(device=True, forceinline=True)
def load_tiles_vec(a, b, a_t, b_t, row0, col0, k0, m, n, kk, t, threads, tm_bm, tn_bn, tk, vec_ok):
    """Copy the block's A tile (tm_bm x tk, stored transposed as a_t[k, m]) and B tile (tk x tn_bn)
    into shared memory; 16-byte loads where the tile lies inside and rows are aligned."""
    inside = vec_ok and row0 + tm_bm <= m and col0 + tn_bn <= n and k0 + tk <= kk
    if inside:
        for l in range(tm_bm * tk // 4 // threads):  # A: 4 consecutive k of one row per load
            e = t + l * threads
            r, q = e // (tk // 4), (e % (tk // 4)) * 4
            v0, v1, v2, v3 = load4(a, (row0 + r) * kk + k0 + q)
            a_t[q, r] = v0
            a_t[q + 1, r] = v1
            a_t[q + 2, r] = v2
            a_t[q + 3, r] = v3
        for l in range(tk * tn_bn // 4 // threads):  # B: 4 consecutive columns per load
            e = t + l * threads
            r, q = e // (tn_bn // 4), (e % (tn_bn // 4)) * 4
            v0, v1, v2, v3 = load4(b, (k0 + r) * n + col0 + q)
            store4(b_t, (r, q), v0, v1, v2, v3)
    else:
        for l in range(tm_bm * tk // threads):
            e = t + l * threads
            r, q = e // tk, e % tk
            a_t[q, r] = a[(row0 + r) * kk + k0 + q] if row0 + r < m and k0 + q < kk else float32(0)
        for l in range(tk * tn_bn // threads):
            e = t + l * threads
            r, q = e // tn_bn, e % tn_bn
            b_t[r, q] = b[(k0 + r) * n + col0 + q] if k0 + r < kk and col0 + q < n else float32(0)


@cuda.jit
def sgemm_vectorized(a, b, c, m, n, kk, vec_ok):
    # a, b, c: the matrices as flat 1D arrays; vec_ok: rows start 16-byte aligned (16-byte accesses allowed)
    a_t = cuda.shared.array((BK, BM), float32)  # transposed: a thread's TM values of A are adjacent
    b_t = cuda.shared.array((BK, BN), float32)
    t = cuda.threadIdx.x
    tx, ty = t % (BN // TN), t // (BN // TN)
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    acc = cuda.local.array((TM, TN), float32)
    a_reg = cuda.local.array(TM, float32)
    b_reg = cuda.local.array(TN, float32)
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = 0
    for k0 in range(0, kk, BK):
        load_tiles_vec(a, b, a_t, b_t, row0, col0, k0, m, n, kk, t, THREADS5, BM, BN, BK, vec_ok)
        cuda.syncthreads()
        for k in range(BK):
            for i in range(0, TM, 4):  # 16-byte shared loads: LDS.128
                a_reg[i], a_reg[i + 1], a_reg[i + 2], a_reg[i + 3] = load4(a_t, (k, ty * TM + i))
            for j in range(0, TN, 4):
                b_reg[j], b_reg[j + 1], b_reg[j + 2], b_reg[j + 3] = load4(b_t, (k, tx * TN + j))
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    store_block(c, acc, row0 + ty * TM, col0 + tx * TN, m, n, vec_ok, TM, TN)


@cuda.jit(device=True, forceinline=True)
def store_block(c, acc, r0, q0, m, n, vec_ok, tm, tn):
    """Write a thread's tm x tn results at (r0, q0) of the flat C: 16-byte stores inside, masked
    scalar stores on the edges."""
    for i in range(tm):
        r = r0 + i
        if r < m:
            if vec_ok and q0 + tn <= n:
                for j in range(0, tn, 4):
                    store4(c, r * n + q0 + j, acc[i, j], acc[i, j + 1], acc[i, j + 2], acc[i, j + 3])
            else:
                for j in range(tn):
                    if q0 + j < n:
                        c[r * n + q0 + j] = acc[i, j]


def vector_ok(c, a, b) -> bool:
    """May kernels 6-9 use 16-byte accesses? Rows of A, B and C must start on 16-byte boundaries:
    K and N multiples of 4 (of 2 for float64), and each matrix's data 16-byte aligned (a view may
    start anywhere)."""
    k, n = a.shape[1], b.shape[1]
    per16 = 16 // np.dtype(a.dtype).itemsize
    if k % per16 or n % per16:
        return False
    if on_simulator():
        return True
    return all(x.__cuda_array_interface__["data"][0] % 16 == 0 for x in (a, b, c))


def launch_vectorized(c, a, b):
    m, kk = a.shape
    n = b.shape[1]
    sgemm_vectorized[(-(-n // BN), -(-m // BM)), THREADS5](_flat(a), _flat(b), _flat(c), int32(m), int32(n), int32(kk),
                                                           vector_ok(c, a, b))


# ================================================================================================
# 7-9. warp tiling, double buffering, autotuning: one kernel family, configured by GemmTiles


@dataclass(frozen=True)
class GemmTiles:
    """Tile sizes of the warp-tiled kernels (7-9).

    A block computes bm x bn of C with ``threads`` threads, stepping bk along K. Its warps tile
    it as (bm / wm) x (bn / wn) warp tiles; a warp covers its wm x wn tile in wm_iter x wn_iter
    steps of (8 * tm) x (4 * tn) (its 32 lanes as 8 rows x 4 columns of threads, each computing
    tm x tn). ``double_buffer``: two stages of shared tiles, the next loaded during the current.
    """

    bm: int = 128
    bn: int = 128
    bk: int = 16
    wm: int = 64
    wn: int = 32
    tm: int = 4
    tn: int = 4
    threads: int = 256
    double_buffer: bool = False
    # or "float64" (module 02's DGEMM on CUDA cores), or "dp4a": int8 operands packed four to an int32
    # word along K (A is M x K/4 words, B is K/4 x N), int32 results, a DP4A per word pair (05.6)
    precision: str = "float32"
    # A cap on registers per thread (Numba's ``max_registers``): 168 lets three 128-thread blocks
    # share an SM (65,536 registers), so one block's barrier waits are covered by the others'
    # work; the compiler spills what does not fit (to L1-cached local memory). None: no cap.
    max_registers: int | None = None

    @property
    def wm_iter(self) -> int:
        return self.wm // (8 * self.tm)

    @property
    def wn_iter(self) -> int:
        return self.wn // (4 * self.tn)

    def label(self) -> str:
        db = (", double-buffered" if self.double_buffer else "") + (f", {self.precision}" if self.precision != "float32"
                                                                    else "")
        db += f", <= {self.max_registers} registers" if self.max_registers else ""
        return (f"block {self.bm}x{self.bn}x{self.bk}, warp {self.wm}x{self.wn}, thread {self.tm * self.wm_iter}x"
                f"{self.tn * self.wn_iter} ({self.wm_iter}x{self.wn_iter} of {self.tm}x{self.tn}), "
                f"{self.threads} threads{db}")

    def problems(self) -> list[str]:
        """Why this configuration cannot work (empty: it can)."""
        p = []
        warps = self.threads // 32
        if self.threads % 32 or self.threads > 1024:
            p.append("threads must be a multiple of 32, at most 1024")
        if (self.bm // max(self.wm, 1)) * (self.bn // max(self.wn, 1)) != warps:
            p.append(f"(bm/wm) x (bn/wn) = {(self.bm // max(self.wm, 1)) * (self.bn // max(self.wn, 1))} warp tiles "
                     f"for {warps} warps")
        if self.bm % self.wm or self.bn % self.wn:
            p.append("bm and bn must be multiples of wm and wn")
        if self.tm % 4 or self.tn % 4:
            p.append("tm and tn must be multiples of 4 (16-byte shared loads)")
        if self.wm % (8 * self.tm) or self.wn % (4 * self.tn):
            p.append("wm must be a multiple of 8 tm and wn of 4 tn")
        if self.bk % 4 or (self.bm * self.bk // 4) % self.threads or (self.bk * self.bn // 4) % self.threads:
            p.append("each thread must load whole 16-byte groups of both tiles")
        size = 8 if self.precision == "float64" else 4
        smem = size * (self.bm + self.bn) * self.bk * (2 if self.double_buffer else 1)
        if smem > 48 * 1024:
            p.append(f"{smem} bytes of shared memory (more than the 48 KiB a static array may take)")
        regs = self.tm * self.wm_iter * self.tn * self.wn_iter
        if regs > 128:
            p.append(f"{regs} accumulators per thread (registers would spill)")
        if self.max_registers is not None and not 64 <= self.max_registers <= 255:
            p.append(f"max_registers {self.max_registers}: between 64 and 255, or None")
        return p


WARPTILE_GPU = GemmTiles()
WARPTILE_SIM = GemmTiles(bm=64, bn=32, bk=8, wm=64, wn=16, tm=4, tn=4, threads=64)  # 2 x 1 warp steps
WARPTILE = WARPTILE_SIM if on_simulator() else WARPTILE_GPU

_WARPTILE_KERNELS: dict = {}


_WARPTILE_PARTS: dict = {}


def warptile_parts(cfg: GemmTiles, *, compute_k=None):
    """The device functions the warp-tiled kernels are built from, for one configuration:
    ``fetch`` (device memory -> registers), ``stash`` (registers -> a shared stage),
    ``load_k`` (a lane's values of row k of a stage -> registers), ``compute_k`` (one step of k:
    ``load_k``, then the multiply-adds), ``compute_stage`` (a stage's steps, unrolled by 4),
    ``lane_map(warp, lane)`` (which part of the block tile a lane computes) and ``main_loop``
    (single- or double-buffered). A notebook can replace ``lane_map`` and ``main_loop`` with its own
    (see :func:`warptile_kernel`), and ``compute_k`` here: 02.4 writes the float64 step (two
    doubles per 16-byte load), 05.6 the DP4A step; every part built on it uses the notebook's."""
    key = (cfg, compute_k)
    if key in _WARPTILE_PARTS:
        return _WARPTILE_PARTS[key]
    bad = cfg.problems()
    if bad:
        raise KernelLabArgumentError(f"tile configuration {cfg.label()} cannot work: " + "; ".join(bad))
    XBM, XBN, XBK, XWM, XWN, XTM, XTN, XTHREADS = cfg.bm, cfg.bn, cfg.bk, cfg.wm, cfg.wn, cfg.tm, cfg.tn, cfg.threads
    WMI, WNI = cfg.wm_iter, cfg.wn_iter
    WARPS_N = XBN // XWN
    STAGES = 2 if cfg.double_buffer else 1
    RM, RN = WMI * XTM, WNI * XTN  # results per thread: RM x RN

    @cuda.jit(device=True, forceinline=True)
    def compute_stage(a_t, b_t, s, acc, a_reg, b_reg, wr, wc, tr, tc):
        for k0 in range(0, XBK, 4):  # unrolled by hand, 4 steps of k per trip: fewer loop instructions
            compute_k(a_t, b_t, s, k0, acc, a_reg, b_reg, wr, wc, tr, tc)
            compute_k(a_t, b_t, s, k0 + 1, acc, a_reg, b_reg, wr, wc, tr, tc)
            compute_k(a_t, b_t, s, k0 + 2, acc, a_reg, b_reg, wr, wc, tr, tc)
            compute_k(a_t, b_t, s, k0 + 3, acc, a_reg, b_reg, wr, wc, tr, tc)

    @cuda.jit(device=True, forceinline=True)
    def load_k(a_t, b_t, s, k, a_reg, b_reg, wr, wc, tr, tc):
        for wi in range(WMI):  # this lane's rows: wr + wi * 8 XTM + tr * XTM + (0..XTM-1)
            for i in range(0, XTM, 4):
                base = wr + wi * 8 * XTM + tr * XTM + i
                (a_reg[wi * XTM + i], a_reg[wi * XTM + i + 1], a_reg[wi * XTM + i + 2],
                 a_reg[wi * XTM + i + 3]) = ld4s(a_t, s, k, base)
        for wj in range(WNI):  # ... and columns: 4 lanes side by side, 16 bytes each
            for j in range(0, XTN, 4):
                base = wc + wj * 4 * XTN + tc * XTN + j
                (b_reg[wj * XTN + j], b_reg[wj * XTN + j + 1], b_reg[wj * XTN + j + 2],
                 b_reg[wj * XTN + j + 3]) = ld4s(b_t, s, k, base)

    if compute_k is not None:  # the notebook's own step: nothing to build
        pass
    elif cfg.precision == "dp4a":  # int8 operands four to a word along K: each step is RM x RN DP4As
        from ..device.dp4a import dp4a

        @cuda.jit(device=True, forceinline=True)
        def compute_k(a_t, b_t, s, k, acc, a_reg, b_reg, wr, wc, tr, tc):
            load_k(a_t, b_t, s, k, a_reg, b_reg, wr, wc, tr, tc)
            for i in range(RM):
                for j in range(RN):
                    acc[i, j] = dp4a(a_reg[i], b_reg[j], acc[i, j])
    elif cfg.precision == "float64":  # 02.4's step: two doubles per 16-byte shared load (below)
        compute_k = make_compute_k64(cfg)
    else:

        @cuda.jit(device=True, forceinline=True)
        def compute_k(a_t, b_t, s, k, acc, a_reg, b_reg, wr, wc, tr, tc):
            load_k(a_t, b_t, s, k, a_reg, b_reg, wr, wc, tr, tc)
            for i in range(RM):
                for j in range(RN):
                    acc[i, j] += a_reg[i] * b_reg[j]

    LOADS_A = XBM * XBK // 4 // XTHREADS  # 16-byte groups of the A tile per thread
    LOADS_B = XBK * XBN // 4 // XTHREADS
    RA, RB = 4 * LOADS_A, 4 * LOADS_B  # registers that carry the tiles from device to shared memory
    DT = {"float64": float64, "dp4a": int32}.get(cfg.precision, float32)
    if cfg.precision == "float64":  # 16 bytes are 2 doubles: a group of 4 is two 16-byte accesses

        @cuda.jit(device=True, forceinline=True)
        def ld4(arr, i):  # 4 elements of a flat array
            x0, x1 = load2(arr, i)
            x2, x3 = load2(arr, i + 2)
            return x0, x1, x2, x3

        @cuda.jit(device=True, forceinline=True)
        def ld4s(arr, s, k, j):  # 4 elements of row k of shared stage s
            x0, x1 = load2(arr, (s, k, j))
            x2, x3 = load2(arr, (s, k, j + 2))
            return x0, x1, x2, x3

        @cuda.jit(device=True, forceinline=True)
        def st4(arr, i, v0, v1, v2, v3):
            store2(arr, i, v0, v1)
            store2(arr, i + 2, v2, v3)

        @cuda.jit(device=True, forceinline=True)
        def st4s(arr, s, k, j, v0, v1, v2, v3):
            store2(arr, (s, k, j), v0, v1)
            store2(arr, (s, k, j + 2), v2, v3)
    else:

        @cuda.jit(device=True, forceinline=True)
        def ld4(arr, i):
            return load4(arr, i)

        @cuda.jit(device=True, forceinline=True)
        def ld4s(arr, s, k, j):
            return load4(arr, (s, k, j))

        @cuda.jit(device=True, forceinline=True)
        def st4(arr, i, v0, v1, v2, v3):
            store4(arr, i, v0, v1, v2, v3)

        @cuda.jit(device=True, forceinline=True)
        def st4s(arr, s, k, j, v0, v1, v2, v3):
            store4(arr, (s, k, j), v0, v1, v2, v3)

    @cuda.jit(device=True, forceinline=True)
    def fetch_a(a, ra, row0, k0, m, kk, t, fast):
        """Device memory -> registers: this thread's groups of 4 of the A tile at k0 (4 consecutive
        k of one row each). ``fast``: the whole tile is inside and aligned, one 16-byte load per
        group; otherwise scalar loads, 0 outside the matrix."""
        for l in range(LOADS_A):
            e = t + l * XTHREADS
            r, q = e // (XBK // 4), (e % (XBK // 4)) * 4  # row r of the tile, 4 consecutive k
            if fast:
                ra[4 * l], ra[4 * l + 1], ra[4 * l + 2], ra[4 * l + 3] = ld4(a, (row0 + r) * kk + k0 + q)
            else:
                for i in range(4):
                    inside = row0 + r < m and k0 + q + i < kk
                    ra[4 * l + i] = a[(row0 + r) * kk + k0 + q + i] if inside else DT(0)

    @cuda.jit(device=True, forceinline=True)
    def fetch_b(b, rb, col0, k0, n, kk, t, fast):
        """The same for the B tile: groups of 4 consecutive columns of one row."""
        for l in range(LOADS_B):
            e = t + l * XTHREADS
            r, q = e // (XBN // 4), (e % (XBN // 4)) * 4  # row r of the tile, 4 consecutive columns
            if fast:
                rb[4 * l], rb[4 * l + 1], rb[4 * l + 2], rb[4 * l + 3] = ld4(b, (k0 + r) * n + col0 + q)
            else:
                for i in range(4):
                    inside = k0 + r < kk and col0 + q + i < n
                    rb[4 * l + i] = b[(k0 + r) * n + col0 + q + i] if inside else DT(0)

    @cuda.jit(device=True, forceinline=True)
    def fetch(a, b, ra, rb, row0, col0, k0, m, n, kk, t, fast):
        """Device memory -> registers: this thread's groups of 4 of the A and B tiles at k0."""
        fetch_a(a, ra, row0, k0, m, kk, t, fast)
        fetch_b(b, rb, col0, k0, n, kk, t, fast)

    @cuda.jit(device=True, forceinline=True)
    def stash_a(a_t, s, ra, t):
        """Registers -> shared stage s: A transposed (a_t[k, m])."""
        for l in range(LOADS_A):
            e = t + l * XTHREADS
            r, q = e // (XBK // 4), (e % (XBK // 4)) * 4
            for i in range(4):
                a_t[s, q + i, r] = ra[4 * l + i]

    @cuda.jit(device=True, forceinline=True)
    def stash_b(b_t, s, rb, t):
        """Registers -> shared stage s: B as it is (16-byte stores)."""
        for l in range(LOADS_B):
            e = t + l * XTHREADS
            r, q = e // (XBN // 4), (e % (XBN // 4)) * 4
            st4s(b_t, s, r, q, rb[4 * l], rb[4 * l + 1], rb[4 * l + 2], rb[4 * l + 3])

    @cuda.jit(device=True, forceinline=True)
    def stash(a_t, b_t, s, ra, rb, t):
        """Registers -> shared stage s: A transposed (a_t[k, m]), B as it is (16-byte stores)."""
        stash_a(a_t, s, ra, t)
        stash_b(b_t, s, rb, t)

    @cuda.jit(device=True, inline="always")
    def lane_map(warp, lane):
        """(row, column) of the warp's tile in the block's, and (row, column) of the lane in the
        warp's 8 x 4 arrangement of threads."""
        return (warp // WARPS_N) * XWM, (warp % WARPS_N) * XWN, lane // 4, lane % 4

    @cuda.jit(device=True, inline="always")
    def one_tile(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc, fast, k0, s):
        """Double buffering, one tile: compute stage s (tile k0) while the next tile travels from
        device memory to registers, then to stage 1 - s."""
        more = k0 + XBK < kk
        if more:  # issue the next tile's loads; they arrive while this stage is computed
            fetch(a, b, ra, rb, row0, col0, k0 + XBK, m, n, kk, t, fast)
        compute_stage(a_t, b_t, s, acc, a_reg, b_reg, wr, wc, tr, tc)
        if more:
            stash(a_t, b_t, 1 - s, ra, rb, t)  # the other stage: nobody reads it now
        cuda.syncthreads()  # one barrier per tile: stage 1-s complete, stage s free

    @cuda.jit(device=True, forceinline=True)
    def main_loop_one(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc, fast):
        """Kernel 8's loop: one tile per trip, the stage a variable (s = 1 - s)."""
        fetch(a, b, ra, rb, row0, col0, 0, m, n, kk, t, fast)
        stash(a_t, b_t, 0, ra, rb, t)
        cuda.syncthreads()
        s = 0
        for k0 in range(0, kk, XBK):
            one_tile(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc, fast, k0, s)
            s = 1 - s

    @cuda.jit(device=True, forceinline=True)
    def main_loop(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc, fast):
        """Single-buffered (kernel 7), or kernel 8b's loop: two tiles per trip (the default)."""
        if STAGES == 1:
            for k0 in range(0, kk, XBK):
                fetch(a, b, ra, rb, row0, col0, k0, m, n, kk, t, fast)
                stash(a_t, b_t, 0, ra, rb, t)
                cuda.syncthreads()  # the tiles are complete
                compute_stage(a_t, b_t, 0, acc, a_reg, b_reg, wr, wc, tr, tc)
                cuda.syncthreads()  # everyone is done with them
        else:
            fetch(a, b, ra, rb, row0, col0, 0, m, n, kk, t, fast)
            stash(a_t, b_t, 0, ra, rb, t)
            cuda.syncthreads()
            # Two tiles per trip, stage 0 then stage 1: the stage is a constant in each half, so
            # every shared-memory address is a fixed offset from a base register (with a stage
            # variable s = 1 - s, each address was recomputed every tile).
            for k0 in range(0, kk, 2 * XBK):
                one_tile(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc,
                         fast, k0, 0)
                if k0 + XBK < kk:
                    one_tile(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc,
                             fast, k0 + XBK, 1)

    parts = SimpleNamespace(fetch=fetch, stash=stash, fetch_a=fetch_a, fetch_b=fetch_b, stash_a=stash_a,
                            stash_b=stash_b, compute_stage=compute_stage, compute_k=compute_k, load_k=load_k,
                            ld4s=ld4s, lane_map=lane_map,
                            main_loop=main_loop, main_loop_one=main_loop_one, one_tile=one_tile, st4=st4, dtype=DT,
                            ra=RA, rb=RB, rm=RM, rn=RN, stages=STAGES)
    _WARPTILE_PARTS[key] = parts
    return parts


@cuda.jit(device=True, forceinline=True)
def no_epilogue(v, row, col, aux):
    """The default epilogue: C = A @ B as it is (compiles to nothing)."""
    return v


def warptile_kernel(cfg: GemmTiles, *, lane_map=None, main_loop=None, epilogue=None, compute_k=None):
    """The warp-tiled kernel for ``cfg`` (compiled on first launch, cached). ``lane_map``,
    ``main_loop`` and ``compute_k`` replace the package's device functions of the same name (a
    notebook's own; a ``main_loop`` of the notebook's takes its parts from
    ``warptile_parts(cfg, compute_k=...)``).

    ``epilogue(v, row, col, aux)`` (a device function) maps each result ``v = (A @ B)[row, col]``
    to what is stored, in registers, before the store: module 03 fuses bias, activations and
    ``beta * C`` this way. ``aux`` is the kernel's last argument, passed through untouched (an
    array, a number or a tuple of them: whatever the epilogue reads)."""
    key = (cfg, lane_map, main_loop, epilogue, compute_k)
    if key in _WARPTILE_KERNELS:
        return _WARPTILE_KERNELS[key]
    parts = warptile_parts(cfg, compute_k=compute_k)
    LANE_MAP = lane_map or parts.lane_map
    MAIN_LOOP = main_loop or parts.main_loop
    EPI = epilogue or no_epilogue
    XBM, XBN, XTM, XTN = cfg.bm, cfg.bn, cfg.tm, cfg.tn
    WMI, WNI = cfg.wm_iter, cfg.wn_iter
    RM, RN, RA, RB, STAGES, DT = parts.rm, parts.rn, parts.ra, parts.rb, parts.stages, parts.dtype
    st4 = parts.st4
    XBK = cfg.bk

    jit_options = {"max_registers": cfg.max_registers} if cfg.max_registers else {}

    @cuda.jit(**jit_options)
    def sgemm_warptiled(a, b, c, m, n, kk, vec_ok, aux):
        a_t = cuda.shared.array((STAGES, XBK, XBM), DT)
        b_t = cuda.shared.array((STAGES, XBK, XBN), DT)
        t = cuda.threadIdx.x
        warp, lane = t // 32, t % 32
        wr, wc, tr, tc = LANE_MAP(warp, lane)  # the warp's tile in the block's; the lane's place in it
        row0, col0 = cuda.blockIdx.y * XBM, cuda.blockIdx.x * XBN
        acc = cuda.local.array((RM, RN), DT)
        a_reg = cuda.local.array(RM, DT)
        b_reg = cuda.local.array(RN, DT)
        ra = cuda.local.array(RA, DT)
        rb = cuda.local.array(RB, DT)
        for i in range(RM):
            for j in range(RN):
                acc[i, j] = 0
        # Decided once per block, so that each copy of the loop keeps only its own registers.
        if vec_ok and row0 + XBM <= m and col0 + XBN <= n and kk % XBK == 0:
            MAIN_LOOP(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc, True)
        else:
            MAIN_LOOP(a, b, a_t, b_t, ra, rb, acc, a_reg, b_reg, row0, col0, m, n, kk, t, wr, wc, tr, tc, False)
        for wi in range(WMI):
            for wj in range(WNI):
                r0 = row0 + wr + wi * 8 * XTM + tr * XTM
                q0 = col0 + wc + wj * 4 * XTN + tc * XTN
                for i in range(XTM):
                    r = r0 + i
                    if r < m:
                        if vec_ok and q0 + XTN <= n:
                            for j in range(0, XTN, 4):
                                q = q0 + j
                                st4(c, r * n + q, EPI(acc[wi * XTM + i, wj * XTN + j], r, q, aux),
                                    EPI(acc[wi * XTM + i, wj * XTN + j + 1], r, q + 1, aux),
                                    EPI(acc[wi * XTM + i, wj * XTN + j + 2], r, q + 2, aux),
                                    EPI(acc[wi * XTM + i, wj * XTN + j + 3], r, q + 3, aux))
                        else:
                            for j in range(XTN):
                                if q0 + j < n:
                                    c[r * n + q0 + j] = EPI(acc[wi * XTM + i, wj * XTN + j], r, q0 + j, aux)

    _WARPTILE_KERNELS[key] = sgemm_warptiled
    return sgemm_warptiled


def warptile_launcher(cfg: GemmTiles, *, lane_map=None, main_loop=None, epilogue=None, compute_k=None):
    """``launch(c, a, b)``, or ``launch(c, a, b, aux)`` with an ``epilogue`` that reads ``aux``."""
    kernel = warptile_kernel(cfg, lane_map=lane_map, main_loop=main_loop, epilogue=epilogue, compute_k=compute_k)

    def launch(c, a, b, aux=0):
        m, kk = a.shape
        n = b.shape[1]
        kernel[(-(-n // cfg.bn), -(-m // cfg.bm)), cfg.threads](_flat(a), _flat(b), _flat(c), int32(m), int32(n),
                                                                int32(kk), vector_ok(c, a, b), aux)
    launch.config = cfg
    launch.kernel = kernel
    return launch


# --- DGEMM (02.4): the same family in float64 ------------------------------------------------------

_COMPUTE_K64: dict = {}


def step_source(cfg: GemmTiles, compute_k=None) -> str:
    """The source of one step of k of the warp-tiled kernel for ``cfg``: ``load_k`` (a lane's values
    from shared memory) and ``compute_k`` (the loads, then the multiply-adds), as 02.3b shows them."""
    import inspect
    import textwrap

    parts = warptile_parts(cfg, compute_k=compute_k)
    texts = []
    for f in (parts.load_k, parts.compute_k):
        fn = getattr(f, "py_func", None) or getattr(f, "fn", f)  # a GPU dispatcher, or the simulator's
        texts.append(textwrap.dedent(inspect.getsource(fn)))
    return "\n".join(texts)


def make_compute_k64(cfg: GemmTiles):
    """02.4's float64 step of k for ``cfg`` (the notebook's exercise 2, the same code): a lane's
    ``RM`` values of A and ``RN`` of B from row ``k`` of shared stage ``s``, two doubles per 16-byte
    load (``load2``), then the ``RM x RN`` multiply-adds. One device function per configuration, so
    that a kernel built twice with it compiles once."""
    if cfg in _COMPUTE_K64:
        return _COMPUTE_K64[cfg]
    WMI, WNI, TM, TN = cfg.wm_iter, cfg.wn_iter, cfg.tm, cfg.tn
    RM, RN = WMI * TM, WNI * TN

    @cuda.jit(device=True, forceinline=True)
    def compute_k64(a_t, b_t, s, k, acc, a_reg, b_reg, wr, wc, tr, tc):
        for wi in range(WMI):  # the lane's rows: 8 lanes down each step of the warp tile, TM each
            for i in range(0, TM, 2):  # 16 bytes are 2 doubles
                a_reg[wi * TM + i], a_reg[wi * TM + i + 1] = load2(a_t, (s, k, wr + wi * 8 * TM + tr * TM + i))
        for wj in range(WNI):  # ... and columns: 4 lanes across each step, TN each
            for j in range(0, TN, 2):
                b_reg[wj * TN + j], b_reg[wj * TN + j + 1] = load2(b_t, (s, k, wc + wj * 4 * TN + tc * TN + j))
        for i in range(RM):
            for j in range(RN):
                acc[i, j] += a_reg[i] * b_reg[j]

    _COMPUTE_K64[cfg] = compute_k64
    return compute_k64


# The GPU's tiles: 02.3's kernel 8 with bk halved (two stages of doubles in 32 KiB), 8 x 8 doubles a
# thread in 256-thread blocks. A register count (02.4's exercise 3) favours 4 x 8 a thread, but
# measured on an H200 at 4096^3 (scripts/probes/dgemm_tiles.py, 2026-11-29) these ran fastest:
# 20.40 TFLOP/s at 244 registers and no spills, against 16.11 for 4 x 8 (170 registers) and 19.99
# for the same thread tile in 128-thread blocks; every shape with 8 x 16 or 4 x 16 a thread spilled.
# The simulator's: the same thread tile (2 x 2 steps of 4 x 4) in one warp.
DGEMM_TILES_GPU = GemmTiles(bm=128, bn=128, bk=8, wm=64, wn=32, tm=4, tn=4, threads=256, double_buffer=True,
                            precision="float64")
DGEMM_TILES_SIM = GemmTiles(bm=64, bn=32, bk=8, wm=64, wn=32, tm=4, tn=4, threads=32, double_buffer=True,
                            precision="float64")
DGEMM_TILES = DGEMM_TILES_SIM if on_simulator() else DGEMM_TILES_GPU


def launch_dgemm(c, a, b, cfg: GemmTiles | None = None):
    """C = A @ B in float64 on CUDA cores (FP64 FMA units): kernel 8b's structure with 02.4's
    float64 step (:func:`make_compute_k64`) and tiles."""
    warptile_launcher(cfg or DGEMM_TILES)(c, a, b)


def launch_warptiled(c, a, b):
    warptile_launcher(WARPTILE)(c, a, b)


DOUBLE_BUFFERED = GemmTiles(**{**asdict(WARPTILE), "double_buffer": True})  # kernels 8 and 8b


def launch_double_buffered(c, a, b):
    """Kernel 8: double buffering, one tile per trip of the main loop."""
    warptile_launcher(DOUBLE_BUFFERED, main_loop=warptile_parts(DOUBLE_BUFFERED).main_loop_one)(c, a, b)


def launch_two_tiles(c, a, b):
    """Kernel 8b: kernel 8 with two tiles per trip, so each half's stage is a constant."""
    warptile_launcher(DOUBLE_BUFFERED)(c, a, b)


# --- 9. autotuning -------------------------------------------------------------------------------


def tuning_candidates(full: bool = False) -> list[GemmTiles]:
    """Tile configurations worth timing (all double-buffered, all valid): a short list of seven
    different shapes by default (each costs a compilation of a few seconds), or every valid
    combination of the usual values (``full=True``)."""
    if on_simulator():
        return [GemmTiles(bm=64, bn=32, bk=8, wm=64, wn=16, tm=4, tn=4, threads=64, double_buffer=True),
                GemmTiles(bm=32, bn=32, bk=8, wm=32, wn=16, tm=4, tn=4, threads=64, double_buffer=True)]
    if not full:
        # 128-thread blocks capped at 168 registers: three fit an SM (12 warps) where one
        # uncapped 256-thread block (165 registers) leaves it at 8. Measured on an H100 with the
        # two-tile main loop (4096^3 / 8192^3, scripts/probes/sgemm_candidates.py): kernel 8
        # 0.77x/0.77x cuBLAS; 128 x 64 with 8 rows per lane 0.79x/0.82x; 64 x 128 with 8 rows
        # per lane 0.82x/0.85x; a cap of 128 (spills in the main loop) lost 5-20%.
        cap = 168
        return [GemmTiles(128, 128, 16, 64, 32, 4, 4, 256, True),   # kernel 8
                GemmTiles(128, 64, 16, 64, 32, 4, 4, 128, True, max_registers=cap),
                GemmTiles(128, 64, 16, 64, 32, 8, 4, 128, True, max_registers=cap),  # 8 rows per lane
                GemmTiles(64, 128, 16, 64, 32, 8, 4, 128, True, max_registers=cap),
                GemmTiles(128, 64, 16, 64, 32, 8, 8, 128, True, max_registers=cap),  # one 8x8 per lane
                GemmTiles(128, 64, 8, 64, 32, 8, 4, 128, True, max_registers=cap),   # shorter K step
                GemmTiles(128, 128, 8, 64, 32, 4, 4, 256, True)]
    out = []
    for bm, bn, threads in [(128, 128, 256), (128, 64, 128), (64, 128, 128), (64, 64, 128), (128, 128, 128)]:
        for bk in (8, 16, 32):
            for wm, wn in [(64, 32), (32, 64), (64, 64), (32, 32), (128, 32), (32, 128)]:
                for tm, tn in [(4, 4), (8, 4), (4, 8)]:
                    for cap in (None, 168) if threads == 128 else (None,):
                        cfg = GemmTiles(bm, bn, bk, wm, wn, tm, tn, threads, True, max_registers=cap)
                        if not cfg.problems():
                            out.append(cfg)
    return out


def autotune(m, n, k, *, candidates=None, refresh=False, log=None, repeat=5):
    """Time each candidate configuration at (m, n, k) on this GPU, keep the fastest (cached on disk
    with the package's tuner, :mod:`kernel_lab.tuner`, keyed by GPU, kernel version, shape). Returns the
    tuner's result."""
    from ..tuner import Tuner

    candidates = list(candidates) if candidates is not None else tuning_candidates()
    tuner = Tuner("sgemm_cuda_cores", kernel_version=KERNEL_VERSION)
    if on_simulator():  # no timing in the simulator: take the first that is correct
        from ..tuner import TuneResult

        return TuneResult(candidates[0], None, "simulator", False, [], 0.0)
    from ..bench import time_ms

    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((m, k), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((k, n), dtype=np.float32))
    c = cuda.device_array((m, n), np.float32)

    def timed(cfg):
        launch = warptile_launcher(cfg)
        times = time_ms(lambda: launch(c, a, b), warmup=2, repeat=repeat)
        return sorted(times)[len(times) // 2]

    return tuner.tune(candidates, timed, shape=(m, n, k), dtypes=("float32",), refresh=refresh,
                      make_config=lambda d: GemmTiles(**{k2: v for k2, v in d.items() if k2 != "type"}), log=log)


# ================================================================================================
# The progression, for the package benchmark and the probe

PROGRESSION = [
    ("1 naive", launch_naive),
    ("2 coalesced", launch_coalesced),
    ("3 shared-memory tiles", launch_shared),
    ("4 1D register blocking", launch_1d_blocking),
    ("5 2D register blocking", launch_2d_blocking),
    ("6 vectorised loads", launch_vectorized),
    ("7 warp tiling", launch_warptiled),
    ("8 double buffering", launch_double_buffered),
    ("8b two tiles per trip", launch_two_tiles),
]
