"""08.4's warp-specialised, persistent fp16 GEMM (kernel_lab.hopper_async.ws_gemm) compiled for sm_90a
without a GPU, and run through its checks on one.

Offline (no GPU):

    NUMBA_ENABLE_CUDASIM=0 /tmp/nvenv/bin/python scripts/hopper_ws_gemm.py --offline

compiles the package's kernel (the package's producer and consumer in ``make_ws_gemm``) at the GPU's
sizes (``ws_gemm.GPU``: 128 x 256 tiles, 4 stages), checks that the PTX holds the instructions the
design needs (the tensor loads, the mbarrier waits and arrivals, ``m64n256k16`` wgmmas, ``setmaxnreg``
both ways), assembles it with ptxas for sm_90a and prints ptxas's registers, spills and any
"Performance Loss" line; then checks that a compile for sm_80 is refused with kernel_lab's message.
On an H100/H200, ``python scripts/hopper_ws_gemm.py --gpu`` runs the kernel through 08.4's checks
(kernel_lab.checks.hopper_ws_gemm) at the GPU's sizes.
Question it answers: does the warp-specialised kernel, written in Numba, assemble for sm_90a without
spilling, with setmaxnreg honoured and the wgmmas not serialised?
Result (offline, numba-cuda 0.30.4 through NVRTC/NVVM, CUDA 13.0 ptxas, no GPU): it compiles in about
a second and assembles for sm_90a with 168 registers a thread (the 65536 / 384 that launch_bounds=(384, 1)
gives at entry), 0 bytes of stack, spill stores or spill loads, and no "Performance Loss" line: the
setmaxnreg pair is honoured (the SASS has USETMAXREG.DEALLOC and .TRY_ALLOC) and the wgmmas are not
serialised. nvdisasm of the cubin shows 4 HGMMA.64 (the unrolled K-steps, m64n256k16), 2 UTMALDG.2D (A's
and B's box), SYNCS.PHASECHK.TRANS64.TRYWAIT for the barrier waits, SYNCS.ARRIVE.TRANS64(.A1T0) for the
arrivals and the expect-tx, WARPGROUP.ARRIVE and WARPGROUP.DEPBAR.LE, and no LDL/STL. 197632 bytes of
dynamic shared memory (1 KB of slack and 4 stages of 48 KB), under the 227 KB an H100/H200 block may opt
in to. The accumulators of m64n256k16 are 128 float32 registers a consumer thread, under its 232. sm_80
is refused with kernel_lab's message. Not yet run on a GPU.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from numba import (
    cuda,  # at module level: the simulator swaps the kernel module's `cuda` for its own
)

ROOT = Path(__file__).resolve().parents[1]


def _signature():
    from numba import types

    tmap = types.Array(types.uint64, 1, "C")  # a TensorMap2D is a uint64[16] device array to Numba
    return (tmap, tmap, types.Array(types.float32, 2, "C"), types.int64, types.int64, types.int64)


def _ptx(cc):
    from kernel_lab.hopper_async import ws_gemm as ws

    kernel = ws.make_ws_gemm(ws.produce, ws.consume)
    ptx, _ = cuda.compile_ptx(kernel.py_func, _signature(), cc=cc, launch_bounds=(ws.THREADS, 1))
    return ptx


def offline() -> int:
    import offline_sm90 as off
    from kernel_lab.hopper_async import ws_gemm as ws

    off.pretend_hopper()  # device functions compiled on their first call (an mbarrier wait) ask for a GPU
    if ws.BN != ws.GPU["BN"] or ws.STAGES != ws.GPU["STAGES"]:
        print(f"ws_gemm: FAILED: the module has the simulator's sizes (BN {ws.BN}, STAGES {ws.STAGES})")
        return 1
    start = time.perf_counter()
    try:
        ptx = _ptx((9, 0, "a"))
    except Exception as exc:  # noqa: BLE001 - the evidence of what Numba refused
        print(f"ws_gemm: FAILED to compile: {type(exc).__name__}: {str(exc).splitlines()[0][:400]}")
        return 1
    seconds = time.perf_counter() - start
    shape = f"wgmma.mma_async.sync.aligned.m64n{ws.BN}k16.f32.f16.f16"
    needed = [shape, "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1",
              "wgmma.wait_group.sync.aligned 0", "cp.async.bulk.tensor.2d.shared::cluster.global.tile",
              "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "mbarrier.arrive.shared",
              f"setmaxnreg.dec.sync.aligned.u32 {ws.PRODUCER_REGS}",
              f"setmaxnreg.inc.sync.aligned.u32 {ws.CONSUMER_REGS}", "fence.proxy.tensormap::generic.acquire"]
    counts = ", ".join(f"{ptx.count(i)} {i}" for i in (shape, "cp.async.bulk.tensor.2d", "mbarrier.try_wait.parity",
                                                       "mbarrier.arrive", "setmaxnreg"))
    print(f"ws_gemm: compiled for sm_90a in {seconds:.0f} s at BN = {ws.BN}, STAGES = {ws.STAGES} "
          f"({ws.SMEM_BYTES} bytes of dynamic shared memory); the PTX has {counts}")
    ok = off.assemble_checked("ws_gemm", ptx, needed)
    ok &= off.refused_below_hopper("ws_gemm", lambda: _ptx((8, 0)))
    return 0 if ok else 1


def gpu() -> int:
    import offline_sm90 as off
    from kernel_lab.checks import hopper_ws_gemm as checks
    from kernel_lab.hopper_async import ws_gemm as ws

    return 1 if off.run_checks("08.4 ", [("ws_gemm", lambda: checks.check_ws_gemm(ws.produce, ws.consume))]) else 0


def main():
    import offline_sm90

    return offline_sm90.main(__doc__, offline, gpu, "run the kernel through 08.4's checks on the GPU")


if __name__ == "__main__":
    sys.exit(main())
