"""08.3's kernels: one warpgroup's GEMM tile with Hopper's ``wgmma``, written by the learner.

The package keeps copies of what the notebook's learner writes (held to the notebook by
tests/test_package_copies.py), so that the checks' tests and later notebooks can run them:

* ``make_desc(start, lbo, sbo, swizzle)``: the 64-bit shared-memory matrix descriptor, packed by hand
  (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address, 16-29 the leading-dimension byte
  offset (LBO), 32-45 the stride-dimension byte offset (SBO), each stored divided by 16; bits 62-63
  the swizzle mode (0 none, 1 128-byte, 2 64-byte, 3 32-byte).
* ``tile_descriptors(sa, sb)``: the descriptors of Exercise 1's tiles, A (64 x 16) and B stored as
  B transposed (N x 16), fp16, K-major, without swizzle: core matrices of 8 rows x 16 bytes (128
  contiguous bytes); the next 16 bytes of K are LBO = 128 bytes on, the next 8 rows SBO = 256 bytes
  on (``kernel_lab.device.wgmma.TileLayout(rows, 16, 2, 0)``).
* ``store_fragment(acc, c, row0, col0)``: a thread's accumulators into ``c`` through the fragment
  layout of wgmma's D (``fragment_coordinates``): warp ``w`` of the warpgroup owns rows ``16 w ..
  16 w + 15``; lane ``l`` holds rows ``16 w + l // 4`` and ``+ 8``, columns ``8 j + 2 (l % 4)`` and
  ``+ 1`` of each 8 columns ``j``.
* ``wgmma_step(a, b, c)``: one ``m64nNk16`` product, ``C = A B``, with the tiles laid out on the host:
  fence, mma_async, commit, wait, then the store.
* ``wgmma_gemm(a, b, c)``: a block's 64 x N tile of ``C = A B`` over all of K: A (M x K) and B
  transposed (N x K), fp16 seen as uint32 words (two halves each, so that one 16-byte load moves
  eight), staged in two stages of 64-wide K-tiles in shared memory with the 128-byte swizzle; each
  K-tile is four wgmmas whose descriptors start 32 bytes further along K; one group stays in flight
  (``wgmma_wait_group(1)``) while the threads load the next K-tile into the other stage.
* ``wgmma_gemm_prefetch(a, b, c)``: the same K loop with ``load_stage`` split in two: ``fetch`` of
  K-tile kt + 1 into registers is issued *before* K-tile kt's wgmmas, and ``place`` stores the
  registers to the other stage after ``wgmma_wait_group(1)`` and the barrier, so the global loads'
  latency runs while the tensor cores work (Exercise 4).

``load_stage`` (the threads' 16-byte copies of a K-tile into the swizzled layout), ``fetch`` and
``place`` (the same copies in two halves, through registers) and the launchers are the package's
own: the learner calls them. ``N`` (the tile's width) is a module constant the kernels read, the
GPU's or the simulator's, and ``B_LOADS`` (a thread's 16-byte chunks of B's K-tile) follows it;
``with_constants(kernel, **tile_constants(n))`` compiles a kernel again at width ``n``.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..device.bulk_copy import fence_proxy_async_shared
from ..device.wgmma import (
    TileLayout,
    wgmma_acc_f32,
    wgmma_commit_group,
    wgmma_desc,
    wgmma_fence,
    wgmma_fence_operand,
    wgmma_mma_async_f16,
    wgmma_wait_group,
)
from ..environment import on_simulator
from ..reductions_gemm.sgemm import with_constants
from ..vector_loads import load4, store4

__all__ = [
    "BK",
    "GPU",
    "KW",
    "M_TILE",
    "SIM",
    "THREADS",
    "A_LOADS",
    "B_LOADS",
    "N",
    "as_words",
    "constants",
    "describe_kernel",
    "fetch",
    "gemm_inputs",
    "launch_gemm",
    "launch_step",
    "load_stage",
    "make_desc",
    "place",
    "resources",
    "smem_start",
    "step_inputs",
    "step_kernel",
    "store_fragment",
    "tile_constants",
    "tile_descriptors",
    "wgmma_gemm",
    "wgmma_gemm_prefetch",
    "wgmma_step",
    "with_constants",
]

# The tile's width N: 128 on a GPU (a 64 x 128 tile of C, 64 float32 accumulators a thread; two
# stages of A (8 KB) and B (16 KB) make 48 KB of shared memory, the most a block gets without
# opting in); 32 in the simulator.
GPU = dict(N=128)
SIM = dict(N=32)
M_TILE = 64  # one warpgroup's wgmma is 64 rows of C
BK = 64  # Exercise 3's K-tile: 64 halves, 128 bytes, one row of the 128-byte swizzle
KW = BK // 2  # ... as uint32 words (a shared array's shape takes names, not expressions)
THREADS = 128  # one warpgroup


def constants(simulator: bool | None = None) -> dict:
    """The sizes for this backend (``simulator``: None asks the environment)."""
    return dict(SIM if (on_simulator() if simulator is None else simulator) else GPU)


N = constants()["N"]
A_LOADS = M_TILE * 8 // THREADS  # a thread's 16-byte chunks of A's K-tile (8 a 128-byte row): 4
B_LOADS = N * 8 // THREADS  # ... of B's: 8 at N = 128, 2 at the simulator's N = 32


def tile_constants(n: int) -> dict:
    """The module constants that follow the tile's width ``n``: ``N`` and ``B_LOADS``."""
    return dict(N=n, B_LOADS=n * 8 // THREADS)


@cuda.jit(device=True)
def smem_start(tile, index):
    """The shared-memory address, in bytes, of ``tile[index]``: the start field of the descriptor
    that ``wgmma_desc`` builds, times 16 (a tile starts 16-byte aligned)."""
    return int(wgmma_desc(tile, index, 0, 0, 0) & 0x3FFF) << 4


# --- exercise 1: the descriptors of two K-major tiles ------------------------------------------

@cuda.jit(device=True)
def make_desc(start, lbo, sbo, swizzle):
    code = 1 if swizzle == 128 else 2 if swizzle == 64 else 3 if swizzle == 32 else 0  # the mode, not the bytes
    desc = (start & 0x3FFFF) >> 4  # bits 0-13: the address / 16
    desc |= ((lbo & 0x3FFFF) >> 4) << 16  # bits 16-29: LBO / 16
    desc |= ((sbo & 0x3FFFF) >> 4) << 32  # bits 32-45: SBO / 16
    desc |= code << 62  # bits 62-63: the swizzle mode
    return desc


@cuda.jit(device=True)
def tile_descriptors(sa, sb):
    # no swizzle: a core matrix is 8 rows x 16 bytes; the next 16 bytes of K are LBO = 128 bytes on,
    # the next 8 rows SBO = 2 x 128 = 256 bytes on (a 32-byte row is two core matrices wide)
    desc_a = make_desc(smem_start(sa, (0, 0)), 128, 256, 0)
    desc_b = make_desc(smem_start(sb, (0, 0)), 128, 256, 0)  # B is stored as B transposed: the same layout
    return desc_a, desc_b


# --- exercise 2: one 64 x N x 16 step, and the fragment's store --------------------------------

@cuda.jit(device=True)
def store_fragment(acc, c, row0, col0):
    tid = cuda.threadIdx.x % 128
    warp, lane = tid // 32, tid % 32
    row = row0 + 16 * warp + lane // 4  # and row + 8
    col = col0 + 2 * (lane % 4)  # and col + 1, in each 8 columns j
    for j in range(len(acc) // 4):
        c[row, col + 8 * j] = acc[4 * j]
        c[row, col + 8 * j + 1] = acc[4 * j + 1]
        c[row + 8, col + 8 * j] = acc[4 * j + 2]
        c[row + 8, col + 8 * j + 1] = acc[4 * j + 3]


@cuda.jit
def wgmma_step(a, b, c):
    sa = cuda.shared.array((M_TILE, 16), np.uint16, alignment=1024)  # A: 64 x 16 halves
    sb = cuda.shared.array((N, 16), np.uint16, alignment=1024)  # B transposed: N x 16 halves
    tid = cuda.threadIdx.x
    for i in range(tid, M_TILE * 16, 128):  # the tiles arrive laid out already (TileLayout(rows, 16, 2, 0))
        sa[i // 16, i % 16] = a[i // 16, i % 16]
    for i in range(tid, N * 16, 128):
        sb[i // 16, i % 16] = b[i // 16, i % 16]
    fence_proxy_async_shared()  # the threads' writes, visible to the tensor cores (the async proxy)
    cuda.syncthreads()
    desc_a, desc_b = tile_descriptors(sa, sb)
    wgmma_fence()  # orders the registers and shared memory written before it
    acc = wgmma_mma_async_f16(desc_a, desc_b, wgmma_acc_f32(N), 0)  # scale_d = 0: D = A B
    wgmma_commit_group()  # the wgmma issued so far: one group
    wgmma_wait_group(0)  # ... which has completed: acc holds D
    acc = wgmma_fence_operand(acc)  # no read of acc is moved above the wait
    store_fragment(acc, c, 0, 0)


# --- exercise 3: the K loop of a block's 64 x N tile -------------------------------------------

@cuda.jit(device=True)
def load_stage(a, b, sa, sb, row0, col0, k0, stage):
    """K-tile ``k0 .. k0 + BK`` of A's rows ``row0 ..`` (64) and of B-transposed's rows ``col0 ..``
    (N) into stage ``stage`` of ``sa`` and ``sb``: 16 bytes (four uint32 words, eight halves) a
    thread at a time, in the 128-byte swizzle: row ``r`` of a tile is 128 bytes (32 words), and its
    16-byte chunk ``j`` lands in chunk ``j ^ (r % 8)`` of the row."""
    tid = cuda.threadIdx.x
    w0 = k0 // 2  # the K-tile's first word in a row of A or B
    for i in range(tid, sa.shape[1] * 8, 128):  # 8 chunks of 16 bytes a row
        r, j = i // 8, i % 8
        v0, v1, v2, v3 = load4(a, (row0 + r, w0 + 4 * j))
        store4(sa, (stage, r, 4 * (j ^ (r % 8))), v0, v1, v2, v3)
    for i in range(tid, sb.shape[1] * 8, 128):
        r, j = i // 8, i % 8
        v0, v1, v2, v3 = load4(b, (col0 + r, w0 + 4 * j))
        store4(sb, (stage, r, 4 * (j ^ (r % 8))), v0, v1, v2, v3)


@cuda.jit
def wgmma_gemm(a, b, c):
    sa = cuda.shared.array((2, M_TILE, KW), np.uint32, alignment=1024)  # 2 stages of A: 64 x 64 halves
    sb = cuda.shared.array((2, N, KW), np.uint32, alignment=1024)  # 2 stages of B transposed: N x 64 halves
    row0, col0 = cuda.blockIdx.x * M_TILE, cuda.blockIdx.y * N
    ktiles = a.shape[1] // KW  # a holds K / 2 words a row
    acc = wgmma_acc_f32(N)
    load_stage(a, b, sa, sb, row0, col0, 0, 0)  # K-tile 0 into stage 0
    fence_proxy_async_shared()
    cuda.syncthreads()
    for kt in range(ktiles):
        s = kt % 2
        start_a, start_b = smem_start(sa, (s, 0, 0)), smem_start(sb, (s, 0, 0))
        wgmma_fence()
        for ks in range(4):  # four K-steps of 16 halves: 32 bytes further along each 128-byte row
            desc_a = make_desc(start_a + 32 * ks, 16, 1024, 128)  # SBO: 8 rows of 128 bytes; LBO unused
            desc_b = make_desc(start_b + 32 * ks, 16, 1024, 128)
            acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 1)
        wgmma_commit_group()
        wgmma_wait_group(1)  # K-tile kt - 1's group has completed: its stage is free
        cuda.syncthreads()  # ... for every thread, before any thread overwrites it
        if kt + 1 < ktiles:
            load_stage(a, b, sa, sb, row0, col0, (kt + 1) * BK, 1 - s)  # while K-tile kt's group runs
            fence_proxy_async_shared()
        cuda.syncthreads()
    wgmma_wait_group(0)
    acc = wgmma_fence_operand(acc)
    store_fragment(acc, c, row0, col0)


# --- exercise 4: the next K-tile's loads before this K-tile's wgmmas ------------------------------

@cuda.jit(device=True)
def fetch(a, b, row0, col0, w0, ra, rb):
    """This thread's 16-byte chunks of the K-tile that starts at word ``w0`` (A's rows ``row0 ..``, B
    transposed's rows ``col0 ..``) into registers: chunk ``i = tid + 128 u`` of a tile (row ``i // 8``,
    chunk ``i % 8`` of the row) into ``ra[u]`` or ``rb[u]``, local arrays of ``(A_LOADS, 4)`` and
    ``(B_LOADS, 4)`` uint32. Nothing waits for the loads here: the first use of the registers
    (``place``) does."""
    tid = cuda.threadIdx.x
    for u in range(ra.shape[0]):
        i = tid + 128 * u
        v0, v1, v2, v3 = load4(a, (row0 + i // 8, w0 + 4 * (i % 8)))
        ra[u, 0], ra[u, 1], ra[u, 2], ra[u, 3] = v0, v1, v2, v3
    for u in range(rb.shape[0]):
        i = tid + 128 * u
        v0, v1, v2, v3 = load4(b, (col0 + i // 8, w0 + 4 * (i % 8)))
        rb[u, 0], rb[u, 1], rb[u, 2], rb[u, 3] = v0, v1, v2, v3


@cuda.jit(device=True)
def place(sa, sb, stage, ra, rb):
    """The registers of :func:`fetch` into stage ``stage`` of ``sa`` and ``sb``, in the 128-byte
    swizzle (chunk ``j`` of row ``r`` into chunk ``j ^ (r % 8)``), as ``load_stage`` stores them."""
    tid = cuda.threadIdx.x
    for u in range(ra.shape[0]):
        i = tid + 128 * u
        r, j = i // 8, i % 8
        store4(sa, (stage, r, 4 * (j ^ (r % 8))), ra[u, 0], ra[u, 1], ra[u, 2], ra[u, 3])
    for u in range(rb.shape[0]):
        i = tid + 128 * u
        r, j = i // 8, i % 8
        store4(sb, (stage, r, 4 * (j ^ (r % 8))), rb[u, 0], rb[u, 1], rb[u, 2], rb[u, 3])


@cuda.jit
def wgmma_gemm_prefetch(a, b, c):
    sa = cuda.shared.array((2, M_TILE, KW), np.uint32, alignment=1024)
    sb = cuda.shared.array((2, N, KW), np.uint32, alignment=1024)
    ra = cuda.local.array((A_LOADS, 4), np.uint32)  # this thread's chunks of the next K-tile: registers
    rb = cuda.local.array((B_LOADS, 4), np.uint32)
    row0, col0 = cuda.blockIdx.x * M_TILE, cuda.blockIdx.y * N
    ktiles = a.shape[1] // KW
    acc = wgmma_acc_f32(N)
    fetch(a, b, row0, col0, 0, ra, rb)  # K-tile 0 into stage 0, through the registers
    place(sa, sb, 0, ra, rb)
    fence_proxy_async_shared()
    cuda.syncthreads()
    for kt in range(ktiles):
        s = kt % 2
        if kt + 1 < ktiles:
            fetch(a, b, row0, col0, (kt + 1) * KW, ra, rb)  # issued now; the data arrives while the wgmmas run
        start_a, start_b = smem_start(sa, (s, 0, 0)), smem_start(sb, (s, 0, 0))
        wgmma_fence()
        for ks in range(4):
            desc_a = make_desc(start_a + 32 * ks, 16, 1024, 128)
            desc_b = make_desc(start_b + 32 * ks, 16, 1024, 128)
            acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 1)
        wgmma_commit_group()
        wgmma_wait_group(1)  # K-tile kt - 1's group has completed: stage 1 - s is free
        cuda.syncthreads()  # ... for every thread
        if kt + 1 < ktiles:
            place(sa, sb, 1 - s, ra, rb)  # the registers wait for their loads here, not before the wgmmas
            fence_proxy_async_shared()
        cuda.syncthreads()
    wgmma_wait_group(0)
    acc = wgmma_fence_operand(acc)
    store_fragment(acc, c, row0, col0)


# --- host side: inputs, layouts, launchers, and the checks' kernels -----------------------------

def step_inputs(n: int, seed: int = 0):
    """Random A (64 x 16) and B (16 x n), float64 values exact in fp16, and the uint16 arrays (64 x 16
    and n x 16) whose bytes hold A and B transposed in Exercise 1's layout (``TileLayout(rows, 16, 2,
    0)``, the tile's elements in the order of its core matrices)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M_TILE, 16)).astype(np.float16)
    b = rng.standard_normal((16, n)).astype(np.float16)
    tile_a = TileLayout(M_TILE, 16, 2, 0).place(a.view(np.uint16)).reshape(M_TILE, 16)
    tile_b = TileLayout(n, 16, 2, 0).place(np.ascontiguousarray(b.T).view(np.uint16)).reshape(n, 16)
    return a.astype(np.float64), b.astype(np.float64), tile_a, tile_b


def launch_step(kernel, c, tile_a, tile_b):
    """One warpgroup: ``kernel[1, 128](tile_a, tile_b, c)``."""
    kernel[1, THREADS](tile_a, tile_b, c)


def gemm_inputs(m: int, n: int, k: int, seed: int = 0):
    """Random A (m x k) and B (k x n) in fp16 (as float16 arrays), B transposed (n x k) beside them."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    return a, b, np.ascontiguousarray(b.T)


def as_words(x):
    """An fp16 matrix (NumPy, Numba or CuPy, C-contiguous) seen as uint32 words: two halves each."""
    return x.view(np.uint32)


def launch_gemm(kernel, c, a, bt, *, n_tile=None):
    """``C = A B`` with ``bt`` = B transposed (both fp16, K-major): a block of 128 threads per 64 x
    ``n_tile`` tile of C. M a multiple of 64, N of ``n_tile``, K of 64."""
    n_tile = n_tile or N
    m, k = a.shape
    n = bt.shape[0]
    if m % M_TILE or n % n_tile or k % BK:
        raise ValueError(f"the tile GEMM takes M a multiple of {M_TILE}, N of {n_tile} and K of {BK}; "
                         f"got {m} x {n} x {k}")
    kernel[(m // M_TILE, n // n_tile), THREADS](as_words(a), as_words(bt), c)


def resources(kernel) -> str:
    """``"164 registers a thread, 3 blocks an SM"`` for a kernel that has run once (its first compiled
    version), the blocks of 128 threads that fit on an SM at once (the driver's occupancy calculator,
    with the kernel's registers and static shared memory). On a GPU only: the simulator has neither."""
    if on_simulator():
        return "registers a thread and blocks an SM: on a GPU only"
    try:
        compiled = next(iter(kernel.overloads.values()))
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        blocks = compiled.max_cooperative_grid_blocks(THREADS) // sms
        local = compiled.local_mem_per_thread
        return (f"{compiled.regs_per_thread} registers a thread"
                + (f", {local} bytes of local memory a thread" if local else "") + f", {blocks} blocks an SM")
    except Exception as exc:  # noqa: BLE001 - an informative extra; never fail a measurement for it
        return f"registers a thread and blocks an SM: not available ({type(exc).__name__})"


def describe_kernel(tile_descriptors):
    """A kernel ``(out)`` that writes the descriptors ``tile_descriptors(sa, sb)`` gives for
    Exercise 1's tiles, and ``wgmma_desc``'s for the same tiles, into ``out[0:4]``: the check decodes
    and compares them field by field."""
    n = N

    @cuda.jit
    def describe(out):
        sa = cuda.shared.array((M_TILE, 16), np.uint16, alignment=1024)
        sb = cuda.shared.array((n, 16), np.uint16, alignment=1024)
        desc_a, desc_b = tile_descriptors(sa, sb)
        if cuda.threadIdx.x == 0:
            out[0] = desc_a
            out[1] = desc_b
            out[2] = wgmma_desc(sa, (0, 0), 128, 256, 0)
            out[3] = wgmma_desc(sb, (0, 0), 128, 256, 0)

    return describe


def step_kernel(tile_descriptors, n=None):
    """Exercise 2's kernel (the package's copy, at width ``n``) around the given ``tile_descriptors``:
    Exercise 1's descriptors driving a real wgmma."""
    n = n or N

    @cuda.jit
    def step(a, b, c):
        sa = cuda.shared.array((M_TILE, 16), np.uint16, alignment=1024)
        sb = cuda.shared.array((n, 16), np.uint16, alignment=1024)
        tid = cuda.threadIdx.x
        for i in range(tid, M_TILE * 16, 128):
            sa[i // 16, i % 16] = a[i // 16, i % 16]
        for i in range(tid, n * 16, 128):
            sb[i // 16, i % 16] = b[i // 16, i % 16]
        fence_proxy_async_shared()
        cuda.syncthreads()
        desc_a, desc_b = tile_descriptors(sa, sb)
        wgmma_fence()
        acc = wgmma_mma_async_f16(desc_a, desc_b, wgmma_acc_f32(n), 0)
        wgmma_commit_group()
        wgmma_wait_group(0)
        acc = wgmma_fence_operand(acc)
        store_fragment(acc, c, 0, 0)

    return step
