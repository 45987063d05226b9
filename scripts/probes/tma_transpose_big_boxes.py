"""Probe: can a tensor-copy transpose reach 08.2's goal (80% of the copy roofline) with larger boxes?

Question. 08.2's stored run (H200, 2026-11-29, 16384 x 16384 float32): every transpose built on 32 x 32
float32 boxes (4 KB) ran at 25-26% of the copy roofline, a plain tensor copy of those boxes at 28%,
the ring with 8 blocks an SM x 128 threads at 46%, 01.3's transpose_fast at 87%.
tma_transpose_speed.py found tensor copies of larger boxes faster (64 x 64 float32, no swizzle, one box
a block: 56%), and 08.1's ring (ring_copy_in_flight.py) needed 16 KB tiles to pass 85%. This probe
keeps 08.2's persistent ring (tma_tiles.tma_transpose_ring: thread 0 loads box q into stage
q % STAGES, the threads transpose box q - (STAGES - 1) into an output buffer, thread 0 stores it;
the package's intrinsics) and moves more bytes per tensor copy. A variant is

* an input box of rows x cols: 256 x 32, 128 x 32 or 64 x 32 float32 with the 128-byte swizzle (a
  box row stays 128 bytes, the swizzle's span; 32, 16 or 8 KB), or 64 x 64 without swizzle (16 KB);
* the transposed box (cols x rows) stored as several 32 x 32 swizzled boxes (eight, four or two
  stores a loaded box: the stores are asynchronous, one bulk group a loaded box), or as one 32 x 128
  or 64 x 64 box without swizzle;
* the threads' element order: "package" is 08.2's loop as it is (the package's tma_tile_index, k //
  BOX); "rows" is 08.2's order (a warp reads one row of the box and writes one column of the output:
  4-way bank conflicts on the write into a swizzled 32 x 32 tile, 32-way into an unswizzled one)
  with shifts and masks for the indices and a constant trip count; "diagonal" gives lane l row l of
  a 32 x 32 block and column l ^ d in step d, conflict-free for every layout used here (the bank of
  the read and of the write is l ^ d, l ^ d with the swizzle's XOR, or l's row: no two lanes share
  one, for every d);
* STAGES 2-4, one or two output buffers (with one, thread 0 waits for the last store's read before
  the threads write the buffer again), 2 or 4 blocks an SM, 128 or 256 threads.

Every variant is checked bit for bit against NumPy's transpose: at a size that is not a multiple of
the boxes (the load's zeros and the store's clipping, in whole 16-byte chunks: the output's rows are
padded and the poisoned padding must hold NaN from kernel_lab.device.tensor_map.chunk_end on, and the
spare row below it), and on a GPU also at full size; the output is poisoned with NaN before each
launch, and in the simulator each launch is bounded (kernel_lab.check.finishes_within). On a GPU
each correct variant is then timed (kl.benchmark, 16384 x 16384 float32, bytes = 8 n^2) beside 08.2's
ring (the package's tma_transpose_ring, 8 blocks an SM x 128 threads, 4 stages) and 01.3's
transpose_fast; the table is relative to transpose_fast. Shared memory past 48 KB is opted into
(set_max_dynamic_shared_memory), the carveout preference set to the most shared memory, and the
driver's occupancy (resident blocks an SM) printed beside each variant: the persistent grid assumes
all its blocks are resident.

    PYTHONPATH=utilities python3 scripts/probes/tma_transpose_big_boxes.py          # an H100/H200, < 60 s
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/tma_transpose_big_boxes.py --sim
    NUMBA_ENABLE_CUDASIM=0 PYTHONPATH=utilities /tmp/nvenv/bin/python scripts/probes/tma_transpose_big_boxes.py --offline

``--offline`` (no GPU) compiles every variant for sm_90a (scripts/offline_sm90.py's pretend_hopper and
assemble) and prints ptxas's registers.

Result so far (no GPU, 2026-11-30). The simulator's checks pass for every layout and order (9 variants,
two odd-sized matrices each, the ring wrapping in 2 blocks, about 10 s together); four mutants were
caught (a wrong diagonal step, a missing store, an early reuse of the output buffer, which the
simulator's protocol check names, and a check that forgot the store's 16-byte chunk). Offline, CUDA 13.0
ptxas for sm_90a, no spills: 08.2's loop ("package": tma_tile_index and 64-bit divisions) 56
registers and about 65 SASS instructions an element (the loop 2-way unrolled); the same order with
shifts and masks ("rows") 98 registers, and the diagonal order 116-124, both unrolled 16 times where
a thread has 16 elements a box (about 11 instructions an element, 16 shared loads in flight); where a
thread has 32 (128 threads on a 16 KB box) the loop stays a loop, 34 registers. At some 55
instructions an element for the whole roofline (132 SMs, 4 warp-instructions a clock, about 1.75
GHz), 08.2's loop alone would use most of the issue slots. The GPU run has not been made yet:
expected, 08.2's loop on 16 KB boxes 50-65% (instruction-bound), the diagonal order 75-90% with 2 to 4
stages, beside 08.2's ring (46% in 08.2) and transpose_fast (87%).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true", help="the checks only, in the simulator, at small sizes")
ap.add_argument("--offline", action="store_true", help="compile for sm_90a and assemble (no GPU), print registers")
args = ap.parse_args()

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # offline_sm90
sys.path.insert(0, str(ROOT / "utilities"))

import kernel_lab as kl

if args.offline:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        sys.exit("--offline needs Numba's real CUDA target: run with NUMBA_ENABLE_CUDASIM=0")
    env = None
else:
    env = kl.setup(quiet=True)
    if env.simulator != args.sim:
        sys.exit("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and the timings only on a GPU")

from kernel_lab.check import finishes_within
from kernel_lab.device.bulk_copy import (
    cp_async_bulk_commit_group,
    cp_async_bulk_wait_group_read,
    fence_proxy_async_shared,
)
from kernel_lab.device.mbarrier import (
    fence_mbarrier_init,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait_parity,
)
from kernel_lab.device.tensor_map import TensorMap2D, chunk_end
from kernel_lab.device.tma import (
    cp_async_bulk_tensor_2d_load,
    cp_async_bulk_tensor_2d_store,
    fence_proxy_tensormap_acquire,
    tile_start,
    tma_tile_index,
)
from kernel_lab.hopper_async import tma_tiles as tt
from numba import cuda, uint32

MAX_STAGES = 8  # barrier words (a shared array's size is a constant)

# The kernel's constants; each variant compiles it again with its own (tt.with_constants).
IN_ROWS, IN_COLS, SW_IN = 128, 32, 128  # the loaded box and its swizzle (bytes; 0: none)
OUT_ROWS, OUT_COLS, SW_OUT = 32, 32, 128  # one output box: OUT_ROWS == IN_COLS, IN_ROWS // OUT_COLS of them a box
IN_ELEMS = 4096  # float32 of shared memory a loaded box takes (rows padded to the swizzle span)
OUT_TILE_ELEMS = 1024  # ... an output box
OUT_ELEMS = 4096  # ... the IN_ROWS // OUT_COLS output boxes of one loaded box (one output buffer)
STAGES, OUT_BUFS = 4, 2
DIAGONAL = 1  # 1: lane l takes row l and column l ^ d of a 32 x 32 block in step d; 0: 08.2's order
PACKAGE_INDEX = 0  # 1: 08.2's loop as it is (tma_tile_index, divisions; 08.2's order)
THREADS = 256
IN_SHIFT, OUT_SHIFT, CB, CB_SHIFT = 5, 5, 1, 0  # log2(IN_COLS), log2(OUT_COLS); IN_COLS // 32 and its log2


@cuda.jit(device=True)
def word(row, col, cols, swizzle):
    """tma_tile_index(row, col, cols, 4, swizzle) for float32, swizzle 0 or 128, without a division: with
    the 128-byte swizzle a row is 32 words and its 16-byte chunk index is XORed with row % 8."""
    if swizzle == 128:
        return (row << 5) + (col ^ ((row & 7) << 2))
    return row * cols + col


@cuda.jit
def ring_transpose_big(src_map, dst_map, rows, cols):
    smem = cuda.shared.array(0, np.float32)  # slack, STAGES loaded boxes, OUT_BUFS output buffers
    bars = cuda.shared.array(MAX_STAGES, np.uint64)  # full[s] = bars[s]
    tid = cuda.threadIdx.x
    t0 = tile_start(smem, 1024)
    if tid == 0:
        fence_proxy_tensormap_acquire(src_map)
        fence_proxy_tensormap_acquire(dst_map)
        for s in range(STAGES):
            mbarrier_init(bars, s, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    across = (cols + IN_COLS - 1) // IN_COLS  # box i at column (i % across) * IN_COLS, row (i // across) * IN_ROWS
    nboxes = across * ((rows + IN_ROWS - 1) // IN_ROWS)
    mine = (nboxes - cuda.blockIdx.x + cuda.gridDim.x - 1) // cuda.gridDim.x  # boxes b, b + grid, ...
    for q in range(mine + STAGES - 1):
        if tid == 0 and q < mine:  # the producer: box q into stage q % STAGES (freed at the last syncthreads)
            s = q % STAGES
            i = cuda.blockIdx.x + q * cuda.gridDim.x
            mbarrier_arrive_expect_tx(bars, s, IN_ROWS * IN_COLS * 4)
            cp_async_bulk_tensor_2d_load(smem, t0 + s * IN_ELEMS, src_map, (i % across) * IN_COLS,
                                         (i // across) * IN_ROWS, bars, s)
        r = q - (STAGES - 1)  # the consumers: box r
        if r >= 0:
            s = r % STAGES
            t_in = t0 + s * IN_ELEMS
            t_out = t0 + STAGES * IN_ELEMS + (r % OUT_BUFS) * OUT_ELEMS
            if tid == 0:  # the stores that last read t_out have read it
                if OUT_BUFS == 2:
                    cp_async_bulk_wait_group_read(1)
                else:
                    cp_async_bulk_wait_group_read(0)
            cuda.syncthreads()
            mbarrier_wait_parity(bars, s, (r // STAGES) & 1)  # box r has landed
            if PACKAGE_INDEX:  # 08.2's loop: the package's tma_tile_index, k // IN_COLS (64-bit arithmetic)
                for k in range(tid, IN_ROWS * IN_COLS, THREADS):
                    rr = k // IN_COLS
                    c = k - rr * IN_COLS
                    v = smem[t_in + tma_tile_index(rr, c, IN_COLS, 4, SW_IN)]
                    j = rr // OUT_COLS
                    smem[t_out + j * OUT_TILE_ELEMS + tma_tile_index(c, rr - j * OUT_COLS, OUT_COLS, 4, SW_OUT)] = v
            else:  # shifts and masks only; a warp takes 32 elements a step
                lane = tid & 31
                for step in range(IN_ROWS * IN_COLS // THREADS):  # a constant count: THREADS divides the box
                    g = (tid >> 5) + step * (THREADS // 32)
                    if DIAGONAL:  # 32 steps a 32 x 32 block: lane l, row l, column l ^ d
                        blk = g >> 5
                        rr = ((blk >> CB_SHIFT) << 5) + lane
                        c = ((blk & (CB - 1)) << 5) + (lane ^ (g & 31))
                    else:  # 08.2's order: a warp reads 32 elements of one row
                        k = (g << 5) + lane
                        rr = k >> IN_SHIFT
                        c = k & (IN_COLS - 1)
                    v = smem[uint32(t_in + word(rr, c, IN_COLS, SW_IN))]  # unsigned: no negative-index test
                    j = rr >> OUT_SHIFT
                    smem[uint32(t_out + j * OUT_TILE_ELEMS + word(c, rr & (OUT_COLS - 1), OUT_COLS, SW_OUT))] = v
            fence_proxy_async_shared()
            cuda.syncthreads()  # the output buffer is complete; stage s is free
            if tid == 0:
                i = cuda.blockIdx.x + r * cuda.gridDim.x
                x = (i % across) * IN_COLS
                y = (i // across) * IN_ROWS
                for j in range(IN_ROWS // OUT_COLS):
                    if y + j * OUT_COLS < rows:  # a box wholly past the output's last column writes nothing
                        cp_async_bulk_tensor_2d_store(dst_map, y + j * OUT_COLS, x, smem, t_out + j * OUT_TILE_ELEMS)
                cp_async_bulk_commit_group()  # one group a loaded box
    if tid == 0:
        cp_async_bulk_wait_group_read(0)


def _elems(box, swizzle):
    return box[0] * max(swizzle, 4 * box[1]) // 4


class Variant:
    """One configuration of ``ring_transpose_big``: boxes, element order, ring, grid."""

    def __init__(self, in_box, sw_in, out_box, sw_out, order, stages, out_bufs, per_sm, threads):
        assert out_box[0] == in_box[1] and in_box[0] % out_box[1] == 0 and 1 <= stages <= MAX_STAGES
        assert order in ORDERS and sw_in in (0, 128) and sw_out in (0, 128) and threads % 32 == 0
        assert in_box[0] * in_box[1] % threads == 0
        pow2 = lambda n: n & (n - 1) == 0
        assert all(n % 32 == 0 and pow2(n) for n in (*in_box, out_box[1]))  # shifts and masks, 32 x 32 blocks
        self.in_box, self.sw_in, self.out_box, self.sw_out = in_box, sw_in, out_box, sw_out
        self.order, self.stages, self.out_bufs, self.per_sm, self.threads = order, stages, out_bufs, per_sm, threads
        self.stores = in_box[0] // out_box[1]
        log2 = lambda n: n.bit_length() - 1
        self.consts = dict(IN_ROWS=in_box[0], IN_COLS=in_box[1], SW_IN=sw_in, OUT_ROWS=out_box[0],
                           OUT_COLS=out_box[1], SW_OUT=sw_out, IN_ELEMS=_elems(in_box, sw_in),
                           OUT_TILE_ELEMS=_elems(out_box, sw_out), OUT_ELEMS=self.stores * _elems(out_box, sw_out),
                           STAGES=stages, OUT_BUFS=out_bufs, DIAGONAL=int(order == "diagonal"),
                           PACKAGE_INDEX=int(order == "package"), THREADS=threads, IN_SHIFT=log2(in_box[1]),
                           OUT_SHIFT=log2(out_box[1]), CB=in_box[1] // 32, CB_SHIFT=log2(in_box[1] // 32))
        assert self.consts["IN_ELEMS"] % 256 == 0 and self.consts["OUT_TILE_ELEMS"] % 256 == 0  # 1024-byte starts
        self.shared = 1024 + 4 * (stages * self.consts["IN_ELEMS"] + out_bufs * self.consts["OUT_ELEMS"])
        self._kernel = None
        self.registers = self.resident = "?"  # on a GPU, from the driver (prepare)

    @property
    def name(self):
        sw = lambda s: f"sw{s}" if s else "plain"
        out = (f"{self.stores} x {self.out_box[0]}x{self.out_box[1]} {sw(self.sw_out)}" if self.stores > 1
               else f"{self.out_box[0]}x{self.out_box[1]} {sw(self.sw_out)}")
        return (f"{self.in_box[0]}x{self.in_box[1]} {sw(self.sw_in)} -> {out}, "
                f"{self.order}, {self.stages} st x {self.out_bufs} out, "
                f"{self.per_sm}/SM x {self.threads} thr, {self.shared // 1024} KB")

    @property
    def kernel(self):
        if self._kernel is None:
            self._kernel = tt.with_constants(ring_transpose_big, **self.consts)
        return self._kernel

    def maps(self, a_view, out_view):
        return TensorMap2D(a_view, self.in_box, self.sw_in), TensorMap2D(out_view, self.out_box, self.sw_out)

    def blocks(self, rows, cols, sms):
        nboxes = -(-rows // self.in_box[0]) * -(-cols // self.in_box[1])
        return max(1, min(nboxes, self.per_sm * sms))

    def launcher(self, src_map, dst_map, rows, cols, sms):
        kernel, blocks, threads, shared = self.kernel, self.blocks(rows, cols, sms), self.threads, self.shared
        return lambda: kernel[blocks, threads, 0, shared](src_map, dst_map, rows, cols)


# the threads' element order: 08.2's loop as it is; 08.2's order with shifts and masks; the diagonal one
ORDERS = ("package", "rows", "diagonal")
# (input box, its swizzle, output box, its swizzle, order, stages, output buffers, blocks an SM, threads)
SPLIT4 = ((128, 32), 128, (32, 32), 128)  # 16 KB in, four 4 KB swizzled boxes out
SPLIT2 = ((64, 32), 128, (32, 32), 128)  # 8 KB in, two out
WIDE_OUT = ((128, 32), 128, (32, 128), 0)  # 16 KB in, one 16 KB box out without swizzle
SQUARE = ((64, 64), 0, (64, 64), 0)  # 16 KB in and out, no swizzle
SPLIT8 = ((256, 32), 128, (32, 32), 128)  # 32 KB in, eight out
VARIANTS = [Variant(*SPLIT4, "package", 4, 2, 2, 256), Variant(*SPLIT4, "rows", 4, 2, 2, 256),
            Variant(*SPLIT4, "diagonal", 4, 2, 2, 256), Variant(*SPLIT4, "diagonal", 3, 2, 2, 256),
            Variant(*SPLIT4, "diagonal", 2, 2, 2, 256), Variant(*SPLIT4, "diagonal", 2, 1, 4, 128),
            Variant(*SPLIT2, "diagonal", 4, 2, 4, 128), Variant(*SPLIT2, "diagonal", 2, 2, 4, 128),
            Variant(*WIDE_OUT, "diagonal", 4, 2, 2, 256), Variant(*SQUARE, "diagonal", 4, 2, 2, 256),
            Variant(*SQUARE, "diagonal", 2, 1, 4, 128), Variant(*SPLIT8, "diagonal", 2, 1, 2, 256)]
# the simulator: one warp a block, 2 blocks (the ring wraps), every layout and order once
SIM_VARIANTS = [Variant(*SPLIT4, "package", 3, 2, 1, 32), Variant(*SPLIT4, "rows", 2, 1, 1, 64),
                Variant(*SPLIT4, "diagonal", 2, 1, 1, 32), Variant(*SPLIT2, "diagonal", 4, 2, 1, 64),
                Variant(*WIDE_OUT, "diagonal", 3, 2, 1, 32), Variant(*WIDE_OUT, "rows", 2, 2, 1, 32),
                Variant(*SQUARE, "diagonal", 2, 2, 1, 32), Variant(*SQUARE, "rows", 3, 1, 1, 32),
                Variant(*SPLIT8, "diagonal", 2, 1, 1, 32)]


def padded_matrix(rows, cols, host=None):
    """(device array with rows a multiple of 16 bytes apart, one more 16-byte chunk a row and a spare
    row, NaN where ``host`` is not; its rows x cols view): the padding shows writes outside the matrix."""
    return tt.device_matrix(rows, cols, np.nan, host)


def check(v, rows, cols, sms, rng, seconds=None):
    """Transpose a rows x cols matrix with variant ``v``; bit for bit against NumPy's, the padding of the
    output included (the store writes the chunk that holds a row's last column whole: zeros from the load)."""
    host = rng.standard_normal((rows, cols), dtype=np.float32)
    _, a_view = padded_matrix(rows, cols, host)
    o_dev, o_view = padded_matrix(cols, rows)
    src_map, dst_map = v.maps(a_view, o_view)
    prepare(v, src_map, dst_map, rows, cols)
    launch = v.launcher(src_map, dst_map, rows, cols, sms)
    with finishes_within(v.name, seconds or 1e9):
        launch()
    got = o_dev.copy_to_host()
    want = np.full_like(got, np.nan)
    want[:cols, :rows] = host.T
    want[:cols, rows:chunk_end(rows, 4)] = 0.0
    bad = got.view(np.uint32) != want.view(np.uint32)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        return f"WRONG at {rows} x {cols}: {bad.sum()} words differ, first [{r}, {c}]: {got[r, c]!r}, want {want[r, c]!r}"
    return None


_PREPARED = set()


def prepare(v, src_map, dst_map, rows, cols):
    """On a GPU: allow the variant's shared memory past 48 KB and prefer the largest carveout (once)."""
    if args.sim or id(v) in _PREPARED:
        return
    _PREPARED.add(id(v))
    from kernel_lab.tensor_cores.toolchain import (
        launch_types,
        set_max_dynamic_shared_memory,
    )

    a = (src_map, dst_map, rows, cols)
    if v.shared > 48 * 1024:
        set_max_dynamic_shared_memory(v.kernel, a, v.shared)
    cufunc = v.kernel.compile(launch_types(v.kernel, a)).library.get_cufunc()
    try:
        cufunc.set_shared_memory_carveout(100)
        v.resident = resident_blocks(cufunc.handle, v.threads, v.shared)
    except Exception as exc:  # noqa: BLE001 - a report, not a requirement
        v.resident = f"unknown ({type(exc).__name__}: {exc})"
    v.registers = getattr(getattr(cufunc, "attrs", None), "regs", "?")


def resident_blocks(handle, threads, shared):
    """The driver's occupancy: blocks of the kernel resident on one SM (numba-cuda loads a CUkernel; the
    occupancy call takes its CUfunction)."""
    from cuda.bindings import driver as drv

    try:
        err, func = drv.cuKernelGetFunction(handle)
        if err != drv.CUresult.CUDA_SUCCESS:
            func = handle
    except Exception:  # noqa: BLE001 - an older binding: the handle is a CUfunction
        func = handle
    err, blocks = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, threads, shared)
    return blocks if err == drv.CUresult.CUDA_SUCCESS else f"unknown ({err.name})"


def offline() -> int:
    import offline_sm90 as off
    from numba import types

    off.pretend_hopper()
    tmap_t = types.Array(types.uint64, 1, "C")
    sig = (tmap_t, tmap_t, types.int64, types.int64)
    needed = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
              "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "cp.async.bulk.wait_group.read 0",
              "fence.proxy.async.shared::cta", "mbarrier.try_wait.parity.shared::cta.b64")
    ok, seen = True, set()
    for v in VARIANTS:
        key = tuple(sorted(v.consts.items()))
        if key in seen:
            continue
        seen.add(key)
        ptx, _ = cuda.compile_ptx(tt.with_constants(ring_transpose_big, **v.consts).py_func, sig, cc=(9, 0, "a"))
        ok &= off.assemble_checked("ring_transpose_big", ptx, needed, prefix=f"{v.name}: ")
    return 0 if ok else 1


def main() -> int:
    if args.offline:
        return offline()
    rng = np.random.default_rng(0)
    failed = 0
    if args.sim:
        for v in SIM_VARIANTS:  # two odd sizes: edges cut in both directions, the ring wrapping in 2 blocks
            t = time.perf_counter()
            errs = [e for e in (check(v, v.in_box[0] + 37, 3 * v.in_box[1] - 13, 2, rng, 300),
                                check(v, 2 * v.in_box[0] - 3, v.in_box[1] + 5, 2, rng, 300)) if e]
            failed += bool(errs)
            print(f"{v.name}: {errs[0] if errs else 'correct'} ({time.perf_counter() - t:.1f} s)")
        return 1 if failed else 0
    t_start = time.perf_counter()
    sms = env.gpu.multiprocessors
    n = 16384
    host = rng.standard_normal((n, n), dtype=np.float32)
    want = np.ascontiguousarray(host.T).view(np.uint32)
    a = cuda.to_device(host)
    out = cuda.device_array((n, n), np.float32)
    got = np.empty((n, n), np.float32)
    nbytes = 8 * n * n
    good = []
    for v in VARIANTS:
        try:
            err = check(v, 4099, 2053, sms, rng)  # edges cut, the ring wrapping
            if err is None:
                src_map, dst_map = v.maps(a, out)
                launch = v.launcher(src_map, dst_map, n, n, sms)
                out[:] = np.float32(np.nan)
                launch()
                out.copy_to_host(got)
                err = None if np.array_equal(got.view(np.uint32), want) else f"WRONG at {n} x {n}"
        except Exception as exc:  # noqa: BLE001 - one variant's failure should not lose the others' timings
            err = f"FAILED: {type(exc).__name__}: {exc}"
        print(f"{v.name}: {err or 'correct'}; {v.registers} registers, {v.resident} resident blocks an SM "
              f"(grid {v.blocks(n, n, sms)})")
        failed += err is not None
        if err is None:
            good.append((v, launch))
    print(f"checks: {time.perf_counter() - t_start:.1f} s")
    measured = []
    sm, dm = tt.tensor_maps(a, out, 32, 128)
    ring = tt.with_constants(tt.tma_transpose_ring, BOX=32, SWIZZLE=128, STAGES=4, TILE_ELEMS=tt.tile_elems(32, 128))
    measured.append(kl.benchmark("08.2 ring, 32x32 boxes, 4 st, 8/SM x 128 thr (package)",
                                 lambda: tt.launch_tma_ring(ring, sm, dm, blocks=8 * sms, stages=4, threads=128),
                                 bytes=nbytes, inputs=(a,)))
    for v, launch in good:
        measured.append(kl.benchmark(v.name, launch, bytes=nbytes))
    measured.append(kl.benchmark("01.3 transpose_fast (package)", lambda: tt.launch_transpose_fast(out, a),
                                 bytes=nbytes))
    kl.compare(measured, baseline=-1)
    print(f"total: {time.perf_counter() - t_start:.1f} s")
    return 1 if failed else 0


sys.exit(main())
