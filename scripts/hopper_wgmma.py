"""One warpgroup's GEMM tile with Hopper's wgmma from Numba: C (64 x N) = A (64 x K) B (K x N), both
operands in shared memory behind wgmma descriptors, for fp16/bf16 (float32 C) and int8 (int32 C), in
each swizzle mode; its protocol mutants; and a compile for sm_90a without a GPU.

``make_gemm_tile(kind, n, k, swizzle, mutant)`` builds the kernel ``(a, b, c)``: ``a`` is A laid out
on the host in ``TileLayout(64, k, ..., swizzle)`` (``kernel_lab.device.wgmma.TileLayout.place``),
``b`` is B transposed (N x K, K-major) laid out the same way, ``c`` is C row-major. One block of 128
threads (one warpgroup) copies both tiles into shared memory (aligned to 1024 bytes), fences them for
the tensor cores (``fence_proxy_async_shared``) and syncs; then each K-step of 32 bytes issues one
``wgmma_mma_async`` on descriptors that start 32 bytes further along K (``TileLayout.k_step_offset``),
inside ``wgmma_fence`` / ``wgmma_commit_group`` / ``wgmma_wait_group(0)``; each thread writes its
fragment of C. ``MUTANTS`` are the protocol mistakes the simulator's model names.
tests/test_wgmma_intrinsics.py runs it in the simulator. Offline (no GPU):

    NUMBA_ENABLE_CUDASIM=0 /tmp/nvenv/bin/python scripts/hopper_wgmma.py --offline

compiles the tile for sm_90a at each N and type (and a kernel with setmaxnreg), checks the PTX holds
the wgmma instructions, assembles it with ptxas, and checks that sm_80 is refused. On an H100/H200,
``python scripts/hopper_wgmma.py --gpu`` runs every variant against NumPy.
Question it answers: can Numba's inline assembler carry wgmma's accumulators, for which N and types?
Result (offline, numba-cuda 0.30.4 through NVRTC/NVVM, CUDA 13.0 ptxas, no GPU): every case of
``OFFLINE`` compiles and assembles for sm_90a: fp16 at N = 64, 128, 256 (128B swizzle; 72, 94 and 158
registers; 0 bytes spilled), bf16 at N = 64 (64B) and 128 (32B), int8 at N = 64 (128B), 128 (no
swizzle) and 256 (128B), fp16 at N = 64 with no swizzle. N = 256 means 128 outputs tied to 128
inputs in one inline asm (259 operands): NVVM takes it. No "Performance Loss" line from ptxas once
the wgmmas sit outside any branch on the thread index (with ``if tid < 128:`` around them ptxas 13.0
said "(C7520) ... wgmma.mma_async instructions are serialized due to program dependence on
compiler-inserted WG.AR in divergent path"). The setmaxnreg kernel assembles with 168 registers at
entry (launch_bounds=(384, 1); without it ptxas said "(C7508) ... 'setmaxnreg' ignored; unable to
determine register count at entry"). sm_80 is refused with kernel_lab's message. Not yet run on a GPU.
``--offline`` also compiles and assembles 08.3's kernels (kernel_lab.hopper_async.wgmma_gemm: wgmma_step,
wgmma_gemm, wgmma_gemm_prefetch) at the GPU's N = 128; ``--gpu`` also runs them through their checks
(kernel_lab.checks.hopper_wgmma). Offline they assemble with 96 (wgmma_step), 164 (wgmma_gemm, 48 KB of
static shared memory) and 168 (wgmma_gemm_prefetch, its registers ra and rb kept in registers, no local
memory) registers, without a "Performance Loss" line.
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
    "no fence": "the warpgroup issues its first wgmma_mma_async without wgmma_fence()",
    "no wait": "the threads commit the last group but write C without wgmma_wait_group(0)",
    "no commit": "the wgmmas are never committed (and so never waited on)",
    "early exit": "the kernel waits only for the groups before the last one (wait_group(1)) and ends",
    "misaligned tile": "B's tile starts 128 bytes (one swizzled row) into its 1024-byte aligned shared array",
    "half a warpgroup": "only threads 0..63 issue the wgmmas",
    "overwrite in flight": "a thread writes B's tile again before the wait",
}
ELEM = {"f16": (np.uint16, 2), "bf16": (np.uint16, 2), "s8": (np.int8, 1)}


def layouts(kind, n, k, swizzle):
    from kernel_lab.device.wgmma import TileLayout

    size = ELEM[kind][1]
    return TileLayout(64, k, size, swizzle), TileLayout(n, k, size, swizzle)


def make_gemm_tile(kind: str = "f16", n: int = 64, k: int = 64, swizzle: int = 128, mutant: str | None = None):
    """The tile kernel ``(a, b, c)``; launch ``[1, 128]``."""
    from kernel_lab.device.bulk_copy import fence_proxy_async_shared
    from kernel_lab.device.wgmma import (
        wgmma_acc_f32,
        wgmma_acc_s32,
        wgmma_commit_group,
        wgmma_desc,
        wgmma_fence,
        wgmma_fence_operand,
        wgmma_mma_async_bf16,
        wgmma_mma_async_f16,
        wgmma_mma_async_s8,
        wgmma_wait_group,
    )

    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {', '.join(MUTANTS)}")
    mma = {"f16": wgmma_mma_async_f16, "bf16": wgmma_mma_async_bf16, "s8": wgmma_mma_async_s8}[kind]
    zeros = wgmma_acc_s32 if kind == "s8" else wgmma_acc_f32
    dtype, size = ELEM[kind]
    la, lb = layouts(kind, n, k, swizzle)
    a_elems, b_elems = la.nbytes // size, lb.nbytes // size
    b_room = b_elems + 1024 // size  # room for the misaligned mutant's shift
    lbo_a, sbo_a, lbo_b, sbo_b = la.lbo, la.sbo, lb.lbo, lb.sbo
    steps = k * size // 32
    # the start of K-step s, in bytes from the tile's start (TileLayout.k_step_offset, as arithmetic)
    width = swizzle if swizzle else 32
    block_a = 64 * swizzle if swizzle else 0
    block_b = n * swizzle if swizzle else 0
    step_lbo = 2 * 128 if not swizzle else 0
    fence = mutant != "no fence"
    wait = mutant != "no wait"
    commit = mutant != "no commit"
    last_wait = 1 if mutant == "early exit" else 0
    b_shift = 128 // size if mutant == "misaligned tile" else 0
    half = mutant == "half a warpgroup"
    overwrite = mutant == "overwrite in flight"

    @cuda.jit
    def gemm_tile(a, b, c):
        sa = cuda.shared.array(a_elems, dtype, alignment=1024)
        sb = cuda.shared.array(b_room, dtype, alignment=1024)
        tid = cuda.threadIdx.x
        for i in range(tid, a_elems, 128):
            sa[i] = a[i]
        for i in range(tid, b_elems, 128):
            sb[b_shift + i] = b[i]
        fence_proxy_async_shared()  # the threads' writes, made visible to the tensor cores (async proxy)
        cuda.syncthreads()
        acc = zeros(n)
        if not half or tid < 64:  # (constant True without the mutant: no branch around the wgmmas)
            for s in range(steps):
                kb = 32 * s
                off_a = (kb // width) * block_a + kb % width if swizzle else s * step_lbo
                off_b = (kb // width) * block_b + kb % width if swizzle else s * step_lbo
                da = wgmma_desc(sa, off_a // size, lbo_a, sbo_a, swizzle)
                db = wgmma_desc(sb, b_shift + off_b // size, lbo_b, sbo_b, swizzle)
                if fence:
                    wgmma_fence()
                acc = mma(da, db, acc, 1)
                if overwrite and tid == 0:
                    sb[b_shift] = sb[b_shift + 1]
                if commit:
                    wgmma_commit_group()
                if wait and s < steps - 1:
                    wgmma_wait_group(0)
            if wait:
                wgmma_wait_group(last_wait)
        acc = wgmma_fence_operand(acc)
        if mutant != "early exit":
            warp, lane = tid // 32, tid % 32
            row = 16 * warp + lane // 4
            col = 2 * (lane % 4)
            for j in range(n // 8):
                c[row, 8 * j + col] = acc[4 * j]
                c[row, 8 * j + col + 1] = acc[4 * j + 1]
                c[row + 8, 8 * j + col] = acc[4 * j + 2]
                c[row + 8, 8 * j + col + 1] = acc[4 * j + 3]

    return gemm_tile


def inputs(kind, n, k, seed=0):
    """Random A (64 x k), B (k x n) as float64 (or int64) values exactly representable in ``kind``."""
    rng = np.random.default_rng(seed)
    if kind == "s8":
        return rng.integers(-128, 128, (64, k)), rng.integers(-128, 128, (k, n))
    a, b = rng.standard_normal((64, k)), rng.standard_normal((k, n))
    if kind == "bf16":
        import ml_dtypes

        return (a.astype(ml_dtypes.bfloat16).astype(np.float64), b.astype(ml_dtypes.bfloat16).astype(np.float64))
    return a.astype(np.float16).astype(np.float64), b.astype(np.float16).astype(np.float64)


def device_bits(kind, values):
    """The element bits the kernel's arrays hold (uint16 for fp16/bf16, int8)."""
    if kind == "s8":
        return values.astype(np.int8)
    if kind == "bf16":
        import ml_dtypes

        return values.astype(ml_dtypes.bfloat16).view(np.uint16)
    return values.astype(np.float16).view(np.uint16)


def run_gemm_tile(kind="f16", n=64, k=64, swizzle=128, mutant=None, seed=0):
    """Launch on random inputs; returns (A, B, C) with C from the kernel."""
    a, b = inputs(kind, n, k, seed)
    la, lb = layouts(kind, n, k, swizzle)
    da = la.place(device_bits(kind, a))
    db = lb.place(device_bits(kind, b.T.copy()))
    c = np.zeros((64, n), np.int32 if kind == "s8" else np.float32)
    d_c = cuda.to_device(c)
    make_gemm_tile(kind, n, k, swizzle, mutant)[1, 128](cuda.to_device(da), cuda.to_device(db), d_c)
    return a, b, d_c.copy_to_host()


def make_setmaxnreg_kernel():
    """A warp-specialised skeleton of 384 threads: warpgroup 0 (a producer) gives registers back,
    warpgroups 1 and 2 (consumers) take more. Compile with ``launch_bounds=(384, 1)``."""
    from kernel_lab.device.wgmma import setmaxnreg_dec, setmaxnreg_inc

    @cuda.jit(launch_bounds=(384, 1))
    def specialised(out):
        if cuda.threadIdx.x // 128 == 0:
            setmaxnreg_dec(40)
        else:
            setmaxnreg_inc(232)
        out[cuda.threadIdx.x] = cuda.threadIdx.x

    return specialised


def _make_fence_only():
    """wgmma's fence, commit and wait alone: the sm_80 refusal names a wgmma intrinsic."""
    from kernel_lab.device.wgmma import (
        wgmma_commit_group,
        wgmma_fence,
        wgmma_wait_group,
    )

    @cuda.jit
    def fence_only(out):
        wgmma_fence()
        wgmma_commit_group()
        wgmma_wait_group(0)
        out[0] = 1

    return fence_only


OFFLINE = [("f16", 64, 128), ("f16", 128, 128), ("f16", 256, 128), ("bf16", 64, 64), ("bf16", 128, 32),
           ("s8", 64, 128), ("s8", 128, 0), ("s8", 256, 128), ("f16", 64, 0)]


def _ptx(cc, kind, n, swizzle):
    from numba import types

    kernel = make_gemm_tile(kind, n, 64 if kind != "s8" else 128, swizzle)
    elem = types.uint16 if kind != "s8" else types.int8
    out = types.int32 if kind == "s8" else types.float32
    ptx, _ = cuda.compile_ptx(kernel.py_func, (elem[::1], elem[::1], out[:, ::1]), cc=cc)
    return ptx


def offline(cases=OFFLINE) -> int:
    import offline_sm90 as off
    from numba import types

    ok = True
    for kind, n, swizzle in cases:
        name = f"gemm_tile_{kind}_n{n}_sw{swizzle}"
        try:
            ptx = _ptx((9, 0, "a"), kind, n, swizzle)
        except Exception as exc:  # noqa: BLE001 - the evidence of what Numba refused
            print(f"{name}: FAILED to compile: {type(exc).__name__}: {str(exc).splitlines()[0][:400]}")
            ok = False
            continue
        shape = f"m64n{n}k{32 if kind == 's8' else 16}"
        needed = ["wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
                  f"wgmma.mma_async.sync.aligned.{shape}", "fence.proxy.async.shared::cta"]
        missing = [s for s in needed if s not in ptx]
        if missing:
            print(f"{name}: FAILED: the PTX lacks {missing}")
            ok = False
            continue
        ok &= off.assemble(name, ptx)
    ptx, _ = cuda.compile_ptx(make_setmaxnreg_kernel().py_func, (types.int32[::1],), cc=(9, 0, "a"),
                              launch_bounds=(384, 1))
    if "setmaxnreg.dec.sync.aligned.u32 40" not in ptx or "setmaxnreg.inc.sync.aligned.u32 232" not in ptx:
        print("setmaxnreg: FAILED: the PTX lacks the instructions")
        ok = False
    else:
        ok &= off.assemble("setmaxnreg", ptx)
    ok &= _offline_notebook_kernels(off)
    refusals = {"gemm_tile": lambda: _ptx((8, 0), "f16", 64, 128),
                "fence_only": lambda: cuda.compile_ptx(_make_fence_only().py_func, (types.int32[::1],), cc=(8, 0)),
                "setmaxnreg": lambda: cuda.compile_ptx(make_setmaxnreg_kernel().py_func, (types.int32[::1],),
                                                       cc=(8, 0))}
    for name, compile_for_sm80 in refusals.items():
        ok &= off.refused_below_hopper(name, compile_for_sm80)
    return 0 if ok else 1


def _offline_notebook_kernels(off) -> bool:
    """08.3's three kernels (the package's copies, kernel_lab.hopper_async.wgmma_gemm) at the GPU's tile
    width (wgmma_gemm.GPU, N = 128): PTX for sm_90a with their wgmmas, assembled by ptxas."""
    from kernel_lab.hopper_async import wgmma_gemm as wg
    from numba import types

    off.pretend_hopper()  # device functions compiled on their first call (store_fragment, smem_start) ask for a GPU
    u16, u32, f32 = (types.Array(t, 2, "C") for t in (types.uint16, types.uint32, types.float32))
    n = wg.GPU["N"]
    ok = True
    for kernel, sig, count in ((wg.wgmma_step, (u16, u16, f32), 1), (wg.wgmma_gemm, (u32, u32, f32), 4),
                               (wg.wgmma_gemm_prefetch, (u32, u32, f32), 4)):
        name = kernel.py_func.__name__
        ptx, _ = cuda.compile_ptx(wg.with_constants(kernel, **wg.tile_constants(n)).py_func, sig, cc=(9, 0, "a"))
        shape = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16"
        found = ptx.count(shape)
        if found < count or "wgmma.commit_group.sync.aligned" not in ptx:
            print(f"08.3 {name}: FAILED: the PTX has {found} {shape} (expected {count} at least) "
                  "or no commit_group")
            ok = False
            continue
        ok &= off.assemble(name, ptx, prefix="08.3 ")
    return ok


def _gpu_notebook_kernels() -> int:
    """08.3's kernels through their checks (checks.hopper_wgmma; on a GPU, at N = 128)."""
    import offline_sm90 as off
    from kernel_lab.checks import hopper_wgmma as checks
    from kernel_lab.hopper_async import wgmma_gemm as wg

    return off.run_checks("08.3 ", [("descriptors", lambda: checks.check_descriptors(wg.make_desc, wg.tile_descriptors)),
                                    ("wgmma_step", lambda: checks.check_wgmma_step(wg.wgmma_step)),
                                    ("wgmma_gemm", lambda: checks.check_wgmma_gemm(wg.wgmma_gemm)),
                                    ("wgmma_gemm_prefetch",
                                     lambda: checks.check_wgmma_gemm_prefetch(wg.wgmma_gemm_prefetch))])


def gpu() -> int:
    failed = _gpu_notebook_kernels()
    for kind, n, swizzle in OFFLINE:
        for sw in sorted({swizzle, 0, 32, 64, 128}):
            k = 64 if kind != "s8" else 128
            a, b, c = run_gemm_tile(kind, n, k, sw)
            ref = a @ b
            if kind == "s8":
                ok = np.array_equal(c, ref.astype(np.int64).astype(np.int32))
            else:
                ok = np.linalg.norm(c - ref) <= 1e-5 * np.linalg.norm(ref)
            failed += not ok
            print(f"{kind} m64n{n} k{k} swizzle {sw}: {'ok' if ok else 'WRONG'}")
    return 1 if failed else 0


def main():
    import offline_sm90

    return offline_sm90.main(__doc__, offline, gpu, "run the tiles on the GPU")


if __name__ == "__main__":
    sys.exit(main())
