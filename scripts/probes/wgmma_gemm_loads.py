"""Probe: why 08.3's one-warpgroup wgmma GEMM runs at 0.13-0.18x cuBLAS, and whether its loads are why.

Question. On an H200 (2026-11-29) 08.3's ``wgmma_gemm`` took 1.409 ms with 64 x 128 tiles and 1.025
ms with 64 x 64 tiles at 4096^3 fp16 (cuBLAS 184 us), where the prediction was 0.2-0.5x cuBLAS and
the wider tile the faster. Reading: a thread's ``load_stage`` is a loop of 16-byte global loads,
each stored to shared memory before the next load issues, so a K-tile costs about (loads a thread)
global latencies: 12 at N = 128 (4 of A, 8 of B), 8 at N = 64. This probe prints each variant's
registers, blocks per SM, time and fraction of cuBLAS, so the reading rests on measurements:

* ``package N=128`` / ``package N=64``: 08.3's kernel (kernel_lab.hopper_async.wgmma_gemm);
* ``loads first N=...``: the same kernel with a ``load_stage`` that issues every 16-byte load of
  the K-tile into registers before the first store to shared memory;
* ``prefetch N=...``: the loads of K-tile kt + 1 issued into registers *before* K-tile kt's
  wgmmas, stored to the other stage after ``wgmma_wait_group(1)`` and the sync: the loads' latency
  runs under the tensor cores' work.

    PYTHONPATH=utilities python3 scripts/probes/wgmma_gemm_loads.py          # an H100/H200
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/wgmma_gemm_loads.py --sim

Result (H200, 2026-11-29; cuBLAS 182.7 us, 752 TFLOP/s): package N=128 1.411 ms (0.13x cuBLAS), 164
registers, 3 blocks an SM; loads first N=128 916.4 us (0.20x), 128 registers, 4 blocks; prefetch N=128
527.3 us (0.35x), 168 registers, 3 blocks; package N=64 1.027 ms (0.18x), 122 registers, 4 blocks;
(The first run's "loads first N=64" and "prefetch N=64", 674.5 and 588.3 us, are void: fetch and
place read the module's B_LOADS, which with_constants does not change in device functions, so they
loaded 128 rows of B; they now take their counts from the local arrays' shapes. Measured again the
same day, fixed: loads first N=64 682.6 us (0.26x), prefetch N=64 592.9 us (0.30x), beside package
N=128 1.446 ms (0.12x), loads first N=128 941.5 us (0.19x), prefetch N=128 530.5 us (0.34x) and
cuBLAS 180.4 us.) No variant uses local memory. The reading holds: the loads, one global latency
after another, set the pace; with them in flight under the wgmmas the wider tile is the faster.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import kernel_lab as kl

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
args = ap.parse_args()
env = kl.setup(quiet=True)
if env.simulator != args.sim:
    sys.exit("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and the timings only on a GPU")

from numba import cuda  # noqa: E402

from kernel_lab.device.bulk_copy import fence_proxy_async_shared  # noqa: E402
from kernel_lab.device.wgmma import (  # noqa: E402
    wgmma_acc_f32,
    wgmma_commit_group,
    wgmma_fence,
    wgmma_fence_operand,
    wgmma_mma_async_f16,
    wgmma_wait_group,
)
from kernel_lab.hopper_async import wgmma_gemm as wg  # noqa: E402

M_TILE, KW, THREADS = wg.M_TILE, wg.KW, wg.THREADS
N = wg.N
A_LOADS = M_TILE * 8 // 128  # 16-byte chunks of A's K-tile a thread loads
B_LOADS = N * 8 // 128  # ... of B's (wg.tile_constants(width) gives both for a width)
make_desc, smem_start, store_fragment = wg.make_desc, wg.smem_start, wg.store_fragment


fetch, place = wg.fetch, wg.place  # the package's: 08.3's Exercise 4 calls them too


@cuda.jit
def loads_first_gemm(a, b, c):
    sa = cuda.shared.array((2, M_TILE, KW), np.uint32, alignment=1024)
    sb = cuda.shared.array((2, N, KW), np.uint32, alignment=1024)
    ra = cuda.local.array((A_LOADS, 4), np.uint32)
    rb = cuda.local.array((B_LOADS, 4), np.uint32)
    row0, col0 = cuda.blockIdx.x * M_TILE, cuda.blockIdx.y * N
    ktiles = a.shape[1] // KW
    acc = wgmma_acc_f32(N)
    fetch(a, b, row0, col0, 0, ra, rb)
    place(sa, sb, 0, ra, rb)
    fence_proxy_async_shared()
    cuda.syncthreads()
    for kt in range(ktiles):
        s = kt % 2
        start_a, start_b = smem_start(sa, (s, 0, 0)), smem_start(sb, (s, 0, 0))
        wgmma_fence()
        for ks in range(4):
            acc = wgmma_mma_async_f16(make_desc(start_a + 32 * ks, 16, 1024, 128),
                                      make_desc(start_b + 32 * ks, 16, 1024, 128), acc, 1)
        wgmma_commit_group()
        wgmma_wait_group(1)
        cuda.syncthreads()
        if kt + 1 < ktiles:
            fetch(a, b, row0, col0, (kt + 1) * KW, ra, rb)
            place(sa, sb, 1 - s, ra, rb)
            fence_proxy_async_shared()
        cuda.syncthreads()
    wgmma_wait_group(0)
    acc = wgmma_fence_operand(acc)
    store_fragment(acc, c, row0, col0)


prefetch_gemm = wg.wgmma_gemm_prefetch  # what 08.3's Exercise 4 became (the same order as this probe's first run)


def variants(width):
    consts = wg.tile_constants(width)
    return [(f"package N={width}", wg.with_constants(wg.wgmma_gemm, N=width) if width != wg.N else wg.wgmma_gemm),
            (f"loads first N={width}", wg.with_constants(loads_first_gemm, **consts)),
            (f"prefetch N={width}", wg.with_constants(prefetch_gemm, **consts))]


def occupancy(kernel, args_, width):
    """(registers a thread, local memory bytes a thread, blocks an SM) of the compiled kernel."""
    try:
        k = kernel.overloads[next(iter(kernel.overloads))] if kernel.overloads else None
        regs = k.regs_per_thread if k is not None else None
        local = k.local_mem_per_thread if k is not None else None
        blocks = k.max_cooperative_grid_blocks(THREADS) // env.gpu.multiprocessors if k is not None else None
        return regs, local, blocks
    except Exception as exc:  # noqa: BLE001 - a probe: say what is missing
        return f"? ({type(exc).__name__})", None, None


def main():
    n = 64 if args.sim else 4096
    widths = (wg.N,) if args.sim else (128, 64)
    a16, b16, bt16 = wg.gemm_inputs(n, n, n)
    expected = a16.astype(np.float32) @ b16.astype(np.float32)
    d_a, d_bt = cuda.to_device(a16), cuda.to_device(bt16)
    d_c = cuda.to_device(np.zeros((n, n), np.float32))
    measured = []
    for width in widths:
        for name, kernel in variants(width):
            d_c.copy_to_device(np.full((n, n), np.nan, np.float32))
            wg.launch_gemm(kernel, d_c, d_a, d_bt, n_tile=width)
            err = float(np.nanmax(np.abs(d_c.copy_to_host() - expected)) / np.max(np.abs(expected)))
            ok = err < 1e-3 and not np.isnan(d_c.copy_to_host()).any()
            print(f"{name}: {'correct' if ok else 'WRONG'} (largest error {err:.1e} of the largest |C|)")
            if args.sim or not ok:
                continue
            m = kl.benchmark(name, lambda kernel=kernel, width=width: wg.launch_gemm(kernel, d_c, d_a, d_bt,
                                                                                      n_tile=width),
                             flops=2 * n**3, inputs=(d_a,))
            regs, local, blocks = occupancy(kernel, None, width)
            print(f"    {regs} registers a thread, {local} bytes of local memory, {blocks} blocks an SM")
            measured.append(m)
    if args.sim:
        return
    import cupy as cp

    ca, cbt = cp.asarray(a16), cp.asarray(bt16)
    cublas = kl.benchmark("cuBLAS (cupy.matmul)", lambda: cp.matmul(ca, cbt.T), flops=2 * n**3)
    kl.compare(measured + [cublas], baseline=-1)


main()
