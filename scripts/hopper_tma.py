"""Hopper's tensor copies (TMA) from Numba: a tiled copy and a tiled transpose through shared memory with
host tensor maps (kernel_lab.device.tensor_map.TensorMap2D, kernel_lab.device.tma), their protocol
mutants, a probe of the shared-memory layout of each swizzle mode, and a compile for sm_90a without a GPU.

``make_tile_kernel(dtype, transpose, mutant)``: one block per box. Thread 0 acquires both tensor maps
(fence_proxy_tensormap_acquire), initialises one barrier, announces the box's bytes and issues the
tensor load; every thread waits, then copies its elements from the loaded tile to a second tile (at
[c, r] for the transpose), both read and written with ``tma_tile_index`` in their map's swizzle
order; after fence_proxy_async_shared and a sync, thread 0 stores the second tile with the tensor
store, commits and waits for the read. The tiles start at ``tile_start(smem, 1024)``. ``run_tiles``
pads each array's rows to a multiple of 16 bytes, plus one row, fills the padding with a sentinel and
describes the unpadded part, so sizes that are not multiples of the box test both edges: zeros in,
nothing out of bounds written. Mutants (``MUTANTS``) are the named mistakes of
kernel_lab.device.tma_sim; tests/test_tma_intrinsics.py runs everything in the simulator.

``make_layout_probe(dtype)`` loads one box into a tile whose every byte first holds a sentinel and
copies the tile's raw elements out: the positions must be those of
kernel_lab.device.tensor_map.box_offsets (each row padded to the swizzle span), the rest untouched.

    NUMBA_ENABLE_CUDASIM=0 /tmp/nvenv/bin/python scripts/hopper_tma.py --offline
    python scripts/hopper_tma.py --gpu         # an H100/H200: prints ok/WRONG per case

Question it answers: do the tensor-copy intrinsics assemble, and do they run as the simulator's model
says (layout of each swizzle mode, edges, the map in global memory behind its fence)?
``--offline`` also compiles and assembles 08.2's three kernels (kernel_lab.hopper_async.tma_tiles: tma_copy,
tma_transpose, tma_transpose_ring) at the GPU's sizes (32 x 32 float32 boxes, 128-byte swizzle, 4 stages);
``--gpu`` also runs them through their checks (kernel_lab.checks.hopper_tma).
Result (offline, CUDA 13.0 ptxas, no GPU): the copy, transpose (float32, float16) and probe kernels assemble
for sm_90a (40 registers for the tile kernels, 31 for the probe); sm_80 is refused by each tensor intrinsic.
08.2's tma_copy, tma_transpose and tma_transpose_ring assemble with 4, 31 and 40 registers (ptxas -v).
Result (H200, 2026-11-29, --gpu): every layout probe matched the model, and every copy and transpose
was right inside the matrix, but where a row is not a multiple of 16 bytes the store also wrote the
rest of the row's last 16-byte chunk (with the tile's zeros): 37 x 45 float32 3 columns past the
edge, 70 x 130 float16 6, 33 x 70 int8 10; scripts/probes/tma_edge_granularity.py showed it stops
at the chunk, however wide the padding. The model now writes the same (tensor_map.chunk_end), and the
padding here has a chunk to spare, so a write past it still shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from numba import (
    cuda,  # at module level: the simulator swaps the kernel module's `cuda` for its own
)

ROOT = Path(__file__).resolve().parents[1]

MUTANTS = {
    "expect too many": "arrive_expect_tx announces 16 bytes more than the box carries (the phase never completes)",
    "expect too few": "arrive_expect_tx announces 16 bytes fewer than the box carries (the phase completes with "
                      "part of the box in flight)",
    "no tensormap fence": "no fence_proxy_tensormap_acquire before the first copy with the maps",
    "misaligned tile": "the loaded tile starts 16 bytes past tile_start(smem, 1024) (not 128-byte aligned)",
    "no wait": "the threads read the loaded tile without waiting on the barrier (they read bytes in flight)",
    "no proxy fence": "the threads write the tile to store without fence_proxy_async_shared() before the sync",
}
SENTINEL = -7
# (dtype, box, swizzle, sizes) of the GPU run; the tests run a subset
CASES = [
    (np.float32, (16, 32), 0, [(64, 64), (37, 45), (5, 3)]),
    (np.float32, (8, 8), 32, [(37, 45), (8, 8)]),
    (np.float32, (16, 16), 64, [(37, 45)]),
    (np.float32, (32, 32), 128, [(37, 45), (100, 70)]),
    (np.float16, (64, 64), 128, [(70, 130)]),
    (np.int8, (32, 64), 64, [(33, 70)]),
]


def make_tile_kernel(dtype=np.float32, transpose: bool = False, mutant: str | None = None):
    """Kernel ``(src_map, dst_map, box_rows, box_cols, swizzle_in, swizzle_out, in_bytes)``; launch it
    with ``run_tiles``."""
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
    from kernel_lab.device.tma import (
        cp_async_bulk_tensor_2d_load,
        cp_async_bulk_tensor_2d_store,
        fence_proxy_tensormap_acquire,
        tile_start,
        tma_tile_index,
    )

    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {', '.join(MUTANTS)}")
    itemsize = np.dtype(dtype).itemsize
    extra = {"expect too many": 16, "expect too few": -16}.get(mutant, 0)
    acquire = mutant != "no tensormap fence"
    shift = 16 // itemsize if mutant == "misaligned tile" else 0
    wait = mutant != "no wait"
    proxy_fence = mutant != "no proxy fence"

    @cuda.jit
    def tile_kernel(src_map, dst_map, box_rows, box_cols, swizzle_in, swizzle_out, in_bytes):
        smem = cuda.shared.array(0, dtype)
        bars = cuda.shared.array(1, np.uint64)
        tid = cuda.threadIdx.x
        t_in = tile_start(smem, 1024)
        t_out = t_in + in_bytes // itemsize
        x = cuda.blockIdx.x * box_cols
        y = cuda.blockIdx.y * box_rows
        if tid == 0:
            if acquire:
                fence_proxy_tensormap_acquire(src_map)
                fence_proxy_tensormap_acquire(dst_map)
            mbarrier_init(bars, 0, 1)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            mbarrier_arrive_expect_tx(bars, 0, box_rows * box_cols * itemsize + extra)
            cp_async_bulk_tensor_2d_load(smem, t_in + shift, src_map, x, y, bars, 0)
        if wait:
            mbarrier_wait_parity(bars, 0, 0)
        for i in range(tid, box_rows * box_cols, cuda.blockDim.x):
            r = i // box_cols
            c = i - r * box_cols
            v = smem[t_in + tma_tile_index(r, c, box_cols, itemsize, swizzle_in)]
            if transpose:
                smem[t_out + tma_tile_index(c, r, box_rows, itemsize, swizzle_out)] = v
            else:
                smem[t_out + tma_tile_index(r, c, box_cols, itemsize, swizzle_out)] = v
        if proxy_fence:
            fence_proxy_async_shared()  # the threads' writes, made visible to the copy engine
        cuda.syncthreads()
        if tid == 0:
            if transpose:
                cp_async_bulk_tensor_2d_store(dst_map, y, x, smem, t_out)
            else:
                cp_async_bulk_tensor_2d_store(dst_map, x, y, smem, t_out)
            cp_async_bulk_commit_group()
            cp_async_bulk_wait_group_read(0)

    return tile_kernel


def make_layout_probe(dtype=np.float32):
    """Kernel ``(src_map, out, tile_elems, sentinel)``: one box at (0, 0) into a tile pre-filled with
    ``sentinel``; ``out[:tile_elems]`` receives the tile's raw elements."""
    from kernel_lab.device.bulk_copy import fence_proxy_async_shared
    from kernel_lab.device.mbarrier import (
        fence_mbarrier_init,
        mbarrier_arrive_expect_tx,
        mbarrier_init,
        mbarrier_wait_parity,
    )
    from kernel_lab.device.tma import (
        cp_async_bulk_tensor_2d_load,
        fence_proxy_tensormap_acquire,
        tile_start,
    )

    @cuda.jit
    def layout_probe(src_map, out, tile_elems, box_bytes, sentinel):
        smem = cuda.shared.array(0, dtype)
        bars = cuda.shared.array(1, np.uint64)
        tid = cuda.threadIdx.x
        t0 = tile_start(smem, 1024)
        for i in range(tid, tile_elems, cuda.blockDim.x):
            smem[t0 + i] = sentinel
        fence_proxy_async_shared()  # the generic writes, ordered before the copy engine's
        if tid == 0:
            fence_proxy_tensormap_acquire(src_map)
            mbarrier_init(bars, 0, 1)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            mbarrier_arrive_expect_tx(bars, 0, box_bytes)
            cp_async_bulk_tensor_2d_load(smem, t0, src_map, 0, 0, bars, 0)
        mbarrier_wait_parity(bars, 0, 0)
        for i in range(tid, tile_elems, cuda.blockDim.x):
            out[i] = smem[t0 + i]

    return layout_probe


def _make_tensor_only(kind: str):
    """One tensor intrinsic and nothing else Hopper-only before it (the offline check's sm_80 refusals)."""
    from kernel_lab.device.tma import (
        cp_async_bulk_tensor_2d_load,
        cp_async_bulk_tensor_2d_store,
    )

    if kind == "load":
        @cuda.jit
        def load_only(tmap, out, n, nbytes, sentinel):
            smem = cuda.shared.array(0, np.float32)
            bars = cuda.shared.array(1, np.uint64)
            cp_async_bulk_tensor_2d_load(smem, 0, tmap, 0, 0, bars, 0)

        return load_only

    @cuda.jit
    def store_only(tmap, out, n, nbytes, sentinel):
        smem = cuda.shared.array(0, np.float32)
        cp_async_bulk_tensor_2d_store(tmap, 0, 0, smem, 0)

    return store_only


def _padded(rows: int, cols: int, dtype, fill):
    """A host array of ``rows + 1`` rows whose pitch is a multiple of 16 bytes, with one 16-byte chunk
    to spare past the row's last chunk, filled with ``fill``."""
    per16 = 16 // np.dtype(dtype).itemsize
    ld = -(-cols // per16) * per16 + per16  # one chunk more: a store writes a row's last chunk whole
    return np.full((rows + 1, ld), fill, dtype)


def test_input(rows: int, cols: int, dtype, seed: int = 0) -> np.ndarray:
    """Values that are not zeros and differ from the sentinel (exact in every dtype used)."""
    a = np.random.default_rng(seed).integers(1, 100, size=(rows, cols))
    return a.astype(dtype)


def run_tiles(kernel, a: np.ndarray, box, swizzle: int, transpose: bool = False, threads: int = 64,
              read_as=None, shared_bytes=None):
    """Launch ``kernel`` over ``a`` (rows, cols); returns the padded output (host), whose
    ``[:out_rows, :out_cols]`` is the result and whose other elements must still be SENTINEL.
    ``read_as``: the swizzle the kernel assumes when it reads and writes the tiles (the maps' own
    by default); ``shared_bytes``: the dynamic shared memory (enough for both tiles by default)."""
    from kernel_lab.device.tensor_map import TensorMap2D

    rows, cols = a.shape
    host_in = _padded(rows, cols, a.dtype, SENTINEL)
    host_in[:rows, :cols] = a
    out_rows, out_cols = (cols, rows) if transpose else (rows, cols)
    d_in = cuda.to_device(host_in)
    d_out = cuda.to_device(_padded(out_rows, out_cols, a.dtype, SENTINEL))
    src_map = TensorMap2D(d_in[:rows, :cols], box, swizzle)
    dst_map = TensorMap2D(d_out[:out_rows, :out_cols], (box[1], box[0]) if transpose else box, swizzle)
    in_bytes = -(-src_map.smem_bytes // 1024) * 1024
    shared = 1024 + in_bytes + dst_map.smem_bytes if shared_bytes is None else shared_bytes
    grid = (-(-cols // box[1]), -(-rows // box[0]))
    sw_in, sw_out = (src_map.swizzle, dst_map.swizzle) if read_as is None else (read_as, read_as)
    kernel[grid, threads, 0, shared](src_map, dst_map, box[0], box[1], sw_in, sw_out, in_bytes)
    return d_out.copy_to_host()


def check_tiles(out: np.ndarray, a: np.ndarray, transpose: bool) -> str | None:
    """None when ``out`` holds the copy (or transpose) of ``a`` and the sentinel everywhere else."""
    want = a.T if transpose else a
    r, c = want.shape
    if not np.array_equal(out[:r, :c], want):
        bad = np.argwhere(out[:r, :c] != want)
        return f"{len(bad)} of {want.size} elements wrong, the first at {tuple(int(i) for i in bad[0])}"
    from kernel_lab.device.tensor_map import chunk_end

    rest = out.copy()
    rest[:r, :chunk_end(c, out.dtype.itemsize)] = SENTINEL  # the store writes a row's last 16-byte chunk whole
    if not (rest == SENTINEL).all():
        bad = np.argwhere(rest != SENTINEL)
        return f"{len(bad)} elements written outside the array, the first at {tuple(int(i) for i in bad[0])}"
    return None


def run_layout_probe(dtype, box, swizzle, threads: int = 64):
    """(what the probe's tile holds, what the model says it holds), both as host arrays of elements."""
    from kernel_lab.device.tensor_map import TensorMap2D, box_offsets

    rows, cols = box
    a = test_input(rows, cols, dtype, seed=1)
    host_in = _padded(rows, cols, dtype, SENTINEL)
    host_in[:rows, :cols] = a
    d_in = cuda.to_device(host_in)
    tmap = TensorMap2D(d_in[:rows, :cols], box, swizzle)
    itemsize = np.dtype(dtype).itemsize
    tile_elems = tmap.smem_bytes // itemsize
    out = cuda.to_device(np.zeros(tile_elems, dtype))
    make_layout_probe(dtype)[1, threads, 0, 1024 + tmap.smem_bytes](tmap, out, tile_elems, tmap.box_bytes,
                                                                    SENTINEL)
    want = np.full(tile_elems, SENTINEL, dtype)
    want[(box_offsets(box, itemsize, swizzle) // itemsize).reshape(-1)] = a.reshape(-1)
    return out.copy_to_host(), want


def _ptx(cc, make, sig):
    kernel = make()
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
    return ptx


def offline() -> int:
    import offline_sm90 as off
    from numba import types

    off.pretend_hopper()  # device functions (mbarrier_wait_parity, tile_start) ask the current GPU for its cc
    tmap_t = types.Array(types.uint64, 1, "C")
    i64 = types.int64
    tile_sig = (tmap_t, tmap_t, i64, i64, i64, i64, i64)
    kernels = {
        "tile_copy": (lambda: make_tile_kernel(np.float32, False), tile_sig),
        "tile_transpose": (lambda: make_tile_kernel(np.float32, True), tile_sig),
        "tile_copy_f16": (lambda: make_tile_kernel(np.float16, False), tile_sig),
        "layout_probe": (lambda: make_layout_probe(np.float32),
                         (tmap_t, types.Array(types.float32, 1, "C"), i64, i64, types.float32)),
    }
    needed = {
        "tile_copy": ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
                      "fence.proxy.tensormap::generic.acquire.sys", "cp.async.bulk.commit_group",
                      "cp.async.bulk.wait_group.read 0", "fence.proxy.async.shared::cta",
                      "mbarrier.try_wait.parity.shared::cta.b64"),
        "layout_probe": ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                         "fence.proxy.tensormap::generic.acquire.sys"),
    }
    ok = True
    for name, (make, sig) in kernels.items():
        ptx = _ptx((9, 0, "a"), make, sig)
        missing = [s for s in needed.get(name, needed["tile_copy"]) if s not in ptx]
        if missing:
            print(f"{name}: FAILED: the PTX lacks", missing)
            return 1
        lines = [ln.strip() for ln in ptx.splitlines() if "cp.async.bulk.tensor" in ln or "tensormap" in ln]
        target = next(ln for ln in ptx.splitlines() if ln.startswith(".target"))
        print(f"{name}: PTX for {target.split()[1]}: {len(ptx)} characters, every instruction present")
        for ln in lines:
            print(f"    {ln}")
        ok &= off.assemble(name, ptx)
    ok &= _offline_notebook_kernels(off)
    probe_sig = kernels["layout_probe"][1]
    kernels["load_only"] = (lambda: _make_tensor_only("load"), probe_sig)
    kernels["store_only"] = (lambda: _make_tensor_only("store"), probe_sig)
    for name in ("tile_copy", "layout_probe", "load_only", "store_only"):
        make, sig = kernels[name]
        ok &= off.refused_below_hopper(name, lambda make=make, sig=sig: _ptx((8, 0), make, sig))
    return 0 if ok else 1


def _offline_notebook_kernels(off) -> bool:
    """08.2's three kernels (the package's copies, kernel_lab.hopper_async.tma_tiles) at the GPU's sizes
    (tma_tiles.GPU): PTX for sm_90a with the tensor load and store, assembled by ptxas."""
    from kernel_lab.hopper_async import tma_tiles as tt
    from numba import types

    tmap_t = types.Array(types.uint64, 1, "C")
    sizes = {k: v for k, v in tt.GPU.items() if k != "THREADS"}
    needed = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
              "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "cp.async.bulk.wait_group.read 0")
    ok = True
    for kernel, sig in ((tt.tma_copy, (tmap_t, tmap_t)), (tt.tma_transpose, (tmap_t, tmap_t)),
                        (tt.tma_transpose_ring, (tmap_t, tmap_t, types.int64, types.int64))):
        name = kernel.py_func.__name__
        ptx, _ = cuda.compile_ptx(tt.with_constants(kernel, **sizes).py_func, sig, cc=(9, 0, "a"))
        ok &= off.assemble_checked(name, ptx, needed, prefix="08.2 ")
    return ok


def _gpu_notebook_kernels() -> int:
    """08.2's three kernels through their checks (checks.hopper_tma; on a GPU, at the GPU's sizes)."""
    import offline_sm90 as off
    from kernel_lab.checks import hopper_tma as checks
    from kernel_lab.hopper_async import tma_tiles as tt

    return off.run_checks("08.2 ", [(kernel.py_func.__name__, lambda check=check, kernel=kernel: check(kernel))
                                    for check, kernel in ((checks.check_tma_copy, tt.tma_copy),
                                                          (checks.check_tma_transpose, tt.tma_transpose),
                                                          (checks.check_tma_transpose_ring, tt.tma_transpose_ring))])


def gpu() -> int:
    failed = _gpu_notebook_kernels()
    for dtype, box, swizzle, sizes in CASES:
        got, want = run_layout_probe(dtype, box, swizzle)
        ok = np.array_equal(got, want)
        failed += not ok
        print(f"layout {np.dtype(dtype).name} box {box} swizzle {swizzle}: {'ok' if ok else 'WRONG'}")
        for transpose in (False, True):
            if transpose and swizzle and box[0] * np.dtype(dtype).itemsize > swizzle:
                continue  # the transposed box's rows would exceed the swizzle span
            kernel = make_tile_kernel(dtype, transpose)
            for rows, cols in sizes:
                a = test_input(rows, cols, dtype)
                problem = check_tiles(run_tiles(kernel, a, box, swizzle, transpose), a, transpose)
                failed += problem is not None
                what = "transpose" if transpose else "copy"
                print(f"{what} {np.dtype(dtype).name} {rows} x {cols} box {box} swizzle {swizzle}: "
                      f"{'ok' if problem is None else 'WRONG: ' + problem}")
    # the inner box narrower than the swizzle span: each row padded to the span (the model's reading)
    got, want = run_layout_probe(np.float32, (8, 16), 128)
    ok = np.array_equal(got, want)
    failed += not ok
    print(f"layout float32 box (8, 16) swizzle 128 (rows padded to 128 bytes): {'ok' if ok else 'WRONG'}")
    return 1 if failed else 0


def main():
    import offline_sm90

    return offline_sm90.main(__doc__, offline, gpu, "run the copies, transposes and layout probes on the GPU")


if __name__ == "__main__":
    sys.exit(main())
