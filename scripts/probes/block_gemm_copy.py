#!/usr/bin/env python3
"""Probe: how far module 06's block GEMM gets when cuBLASDx moves the tiles (``copy``), not our loaders.

    PYTHONPATH=utilities python3 scripts/probes/block_gemm_copy.py            # on a GPU (compiles: minutes)
    /work/venv-dx/bin/python scripts/probes/block_gemm_copy.py --offline      # compile for sm_90 on a CPU

06.1's ``BlockGemm`` reaches 0.04x cuBLAS at 4096^3 in fp16. Its SASS (compiled offline for sm_90,
128x128x32, 256 threads) has 64 HMMA against about 3,000 integer instructions (IMAD, LOP3, ISETP,
SHF, IADD3, LEA) and 64 two-byte LDG: the element-by-element loaders, with their bounds tests and
batch indexing, not the tensor cores, set the pace; 255 registers and 43 spills besides.

The variants here are whole-tile kernels (M, N, K multiples of the tile), fp16 in, float32 out:
  copy-1     cuBLASDx's ``copy`` (16-byte, asynchronous) from global-memory tensors into its
             *suggested* (swizzled) shared layouts, one stage: copy, wait, execute
  copy-2     the same, two stages: the next slice's copy in flight while ``execute`` runs
  copy-2 k64 two stages with 64-wide slices (half the calls and barriers per K)
  copy-2 k64 t128  the same with 128 threads (more registers a thread, more blocks an SM)
  plain copy-2     copy-2 into the plain layouts
  discover         where cuBLASDx's suggested layouts put each 16-byte chunk (see below)
  swizzled s2-s4   our own cp.async to those places, 2 to 4 stages
Each is checked against cuBLAS's float32 product first; the timing is CUDA events after warm-up,
L2 flushed, median (``kl.benchmark``), beside cuBLAS fp16 in the same run.

Found (H100, 2026-11-27, 4096^3 fp16, fraction of cuBLAS fp16 in the same run):
  * ``copy`` (copy-1, copy-2): its SASS, linked offline for sm_90, moves one 2-byte element per
    load (LDG.E.U16 and STS.U16: 96 of each), in the suggested and in the plain layouts alike,
    although ``alignment=16`` is passed: nvmath-python 1.0's ``Matmul`` takes no global-memory
    alignment. An earlier session measured the two-stage form at 13 TFLOP/s; not timed again.
  * async s2/s3/s4 (our own 16-byte ``cp.async``, LDGSTS.E.BYPASS.128.ZFILL in the SASS, into the
    plain layouts; that kernel is now ``kernel_lab.tensor_cores.async_gemm`` with layout="plain"): 0.10x at every depth (75, 72, 72 TFLOP/s; ``BlockGemm`` 30.5): the depth does
    not matter; the plain layouts do (HMMA.1688 and scalar LDS for B in the SASS, bank conflicts).
  * discover: cuBLASDx's ``copy`` places a tile of known bit patterns and shared memory is dumped:
    every 16-byte chunk stays whole, and A's chunk c of row r sits at 4 r + (c ^ ((r >> 1) & 3)),
    B's at 128 (r >> 3) + 64 (c >> 3) + 8 (r & 7) + ((c & 7) ^ (r & 7)) (chunk units).
  * swizzled s2/s3/s4 (our cp.async to those offsets, looked up in a table once per thread;
    ``execute`` on the suggested layouts; ``copy_fragment`` out): 0.24x, 0.27x, 0.29x (177, 206,
    217 TFLOP/s against 751).
  * the package's form (``kernel_lab.tensor_cores.async_gemm``, the notebook's copies with bounds
    tests, any size): 0.11x plain, 0.23x suggested with 3 stages, 0.22x with 4, 0.24x with 4 and the
    bounds tests removed (one run; cuBLAS 759 TFLOP/s).
  * H200, 2026-11-27: that form with its loop's costs cut (stage counters instead of ``i % stages``,
    ``mma_ptx.window`` views instead of clamped slices, the epilogue through shared memory by
    ``copy_fragment``; 242 instructions a pass instead of 294): 0.12x plain, 0.22x / 0.28x / 0.26x
    suggested with 2 / 3 / 4 stages, against 0.23x / 0.22x for the earlier form with 3 / 4 stages in
    the same run (cuBLAS 752 TFLOP/s); the table-driven variant below was not run again.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "utilities"))

VARIANTS = {  # name: (tile_m, tile_n, tile_k, threads, stages, shared layouts: suggested or plain)
    "copy-1": (128, 128, 32, 256, 1, "suggested"),
    "copy-2": (128, 128, 32, 256, 2, "suggested"),
    "copy-2 k64": (128, 128, 64, 256, 2, "suggested"),
    "copy-2 k64 t128": (128, 128, 64, 128, 2, "suggested"),
    "plain copy-2": (128, 128, 32, 256, 2, "plain"),
}
def build(n: int, tm: int, tn: int, tk: int, threads: int, stages: int, layouts: str = "suggested"):
    """The kernel for an n x n x n problem (cuBLASDx's global layouts take the leading dimensions
    as constants) and its dynamic shared-memory bytes."""
    import numpy as np
    from numba import cuda
    from nvmath.device import Matmul
    from nvmath.device.common import clear, copy, copy_fragment, copy_wait, make_tensor

    MM = Matmul(size=(tm, tn, tk), precision=(np.float16, np.float16, np.float32), data_type="real",
                arrangement=("row_major", "row_major", "row_major"), execution="Block", block_size=threads,
                static_block_dim=True, alignment=(16, 16, 16))
    if layouts == "plain":  # row-major tiles, like global memory: the copies can be 16 bytes wide
        la, lb, lc = MM.get_layout_smem_a(), MM.get_layout_smem_b(), MM.get_layout_rmem_c()
        from kernel_lab.tensor_cores import fragments

        frag_coords, thread_active = fragments.partition_functions(MM)
    else:
        la, lb, lc = MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b(), MM.suggest_layout_rmem_c()
        frag_coords = thread_active = None
    PLAIN = layouts == "plain"
    ga, gb, gc = MM.get_layout_gmem_a(n), MM.get_layout_gmem_b(n), MM.get_layout_gmem_c(n)
    A_SZ, B_SZ, C_SZ = la.cosize, lb.cosize, lc.cosize
    STAGE = A_SZ + B_SZ
    TWO = stages == 2

    @cuda.jit(launch_bounds=(threads, 1))
    def kernel(a, b, c):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=16)
        row0, col0 = cuda.blockIdx.x * tm, cuda.blockIdx.y * tn
        sa0 = make_tensor(smem[0:A_SZ], la)
        sb0 = make_tensor(smem[A_SZ:STAGE], lb)
        sa1 = make_tensor(smem[STAGE:STAGE + A_SZ], la)
        sb1 = make_tensor(smem[STAGE + A_SZ:2 * STAGE], lb)
        cbuf = cuda.local.array(shape=(C_SZ,), dtype=np.float32)
        acc = make_tensor(cbuf, lc)
        clear(acc)
        steps = a.shape[1] // tk
        copy(make_tensor(a[row0:row0 + tm, 0:tk], ga), sa0, alignment=16)
        copy(make_tensor(b[0:tk, col0:col0 + tn], gb), sb0, alignment=16)
        for s in range(1, steps + 1):
            copy_wait()  # this slice's tiles have landed, for every thread of the block
            if TWO:
                if s < steps:  # the next slice into the other stage, while this one computes
                    k0 = s * tk
                    if s % 2:
                        copy(make_tensor(a[row0:row0 + tm, k0:k0 + tk], ga), sa1, alignment=16)
                        copy(make_tensor(b[k0:k0 + tk, col0:col0 + tn], gb), sb1, alignment=16)
                    else:
                        copy(make_tensor(a[row0:row0 + tm, k0:k0 + tk], ga), sa0, alignment=16)
                        copy(make_tensor(b[k0:k0 + tk, col0:col0 + tn], gb), sb0, alignment=16)
                if s % 2:
                    MM.execute(sa0, sb0, acc)
                else:
                    MM.execute(sa1, sb1, acc)
            else:
                MM.execute(sa0, sb0, acc)
                cuda.syncthreads()  # everyone is done with the stage before it is refilled
                if s < steps:
                    k0 = s * tk
                    copy(make_tensor(a[row0:row0 + tm, k0:k0 + tk], ga), sa0, alignment=16)
                    copy(make_tensor(b[k0:k0 + tk, col0:col0 + tn], gb), sb0, alignment=16)
        if PLAIN:  # the plain partition: kernel_lab's map of register i to (row, column)
            if thread_active():
                for i in range(C_SZ):
                    r, cc = frag_coords(i)
                    c[row0 + r, col0 + cc] = cbuf[i]
        else:
            copy_fragment(acc, make_tensor(c[row0:row0 + tm, col0:col0 + tn], gc), alignment=16)

    return kernel, 2 * STAGE * 2 if TWO else STAGE * 2, MM


def sass_counts(kernel, sig, path):
    """Link the kernel for sm_90 (no GPU: Numba's kernel object without loading it) and count its
    SASS instructions by opcode (cuobjdump on the PATH)."""
    import collections

    from numba.cuda.dispatcher import _Kernel

    from kernel_lab.tensor_cores.cubin_cache import _cubin_bytes

    k = _Kernel(kernel.py_func, sig, **kernel.targetoptions)
    Path(path).write_bytes(_cubin_bytes(k._codelibrary.get_cubin(cc=(9, 0))))
    sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True).stdout
    ops = []
    for ln in sass.splitlines():  # "/*0a30*/  @!P0 HMMA.16816.F32 R4, ..." -> "HMMA"
        words = ln.split("*/", 1)[1].split() if ln.strip().startswith("/*") and "*/" in ln else []
        words = words[1:] if words and words[0].startswith("@") else words
        if words:
            ops.append(words[0].split(".")[0])
    names = collections.Counter(ops)
    res = subprocess.run(["cuobjdump", "-res-usage", str(path)], capture_output=True, text=True).stdout
    return names, [ln.strip() for ln in res.splitlines() if "REG" in ln]


def build_discovery(tm=128, tn=128, tk=32, threads=256):
    """A kernel that lets cuBLASDx's ``copy`` put a tile of known bit patterns (element e holds the
    bits e) into its suggested shared layouts, then dumps shared memory as it is: position p of the
    dump says which element of the row-major tile lives at offset p."""
    import numpy as np
    from numba import cuda
    from nvmath.device import Matmul
    from nvmath.device.common import copy, copy_wait, make_tensor

    MM = Matmul(size=(tm, tn, tk), precision=(np.float16, np.float16, np.float32), data_type="real",
                arrangement=("row_major", "row_major", "row_major"), execution="Block", block_size=threads,
                static_block_dim=True, alignment=(16, 16, 16))
    la, lb = MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b()
    ga, gb = MM.get_layout_gmem_a(tk), MM.get_layout_gmem_b(tn)
    A_SZ, B_SZ = la.cosize, lb.cosize
    SZ = A_SZ + B_SZ

    @cuda.jit
    def discover(a, b, out_a, out_b):
        smem = cuda.shared.array(shape=(SZ,), dtype=np.float16, alignment=16)
        copy(make_tensor(a, ga), make_tensor(smem[0:A_SZ], la))
        copy(make_tensor(b, gb), make_tensor(smem[A_SZ:SZ], lb))
        copy_wait()
        for i in range(cuda.threadIdx.x, A_SZ, threads):
            out_a[i] = smem[i]
        for i in range(cuda.threadIdx.x, B_SZ, threads):
            out_b[i] = smem[A_SZ + i]

    return discover, A_SZ, B_SZ


SWIZZLED = {  # name: (stages,): our cp.async into cuBLASDx's suggested layouts, at the chunk offsets
    "swizzled s2": 2, "swizzled s3": 3, "swizzled s4": 4}  # the discovery kernel finds (128x128x32, 256 threads)


def build_swizzled(n: int, stages: int, tm=128, tn=128, tk=32, threads=256):
    """Our own 16-byte ``cp.async`` copies into cuBLASDx's *suggested* (swizzled) layouts: each
    16-byte chunk of a row-major tile goes to the shared offset the discovery kernel found for it,
    passed in as a table (``dest``: A's chunks, then B's), read once per thread. Whole tiles only
    (n a multiple of the tiles); results through ``copy_fragment`` (the suggested partition)."""
    import numpy as np
    from numba import cuda
    from nvmath.device import Matmul
    from nvmath.device.common import clear, copy_fragment, make_tensor

    from kernel_lab.mma_ptx import cp_async16_at, cp_async_commit, cp_async_wait_group, global_address, shared_address

    MM = Matmul(size=(tm, tn, tk), precision=(np.float16, np.float16, np.float32), data_type="real",
                arrangement=("row_major", "row_major", "row_major"), execution="Block", block_size=threads,
                static_block_dim=True, alignment=(16, 16, 16))
    la, lb, lc = MM.suggest_layout_smem_a(), MM.suggest_layout_smem_b(), MM.suggest_layout_rmem_c()
    gc = MM.get_layout_gmem_c(n)
    A_SZ, B_SZ, C_SZ = la.cosize, lb.cosize, lc.cosize
    STAGE = A_SZ + B_SZ
    A_CH, B_CH = A_SZ // 8, B_SZ // 8
    A_PER, B_PER = A_CH // threads, B_CH // threads
    KC, NC = tk // 8, tn // 8
    PENDING = stages - 2

    @cuda.jit(device=True, inline="always")
    def copy_slice(a, b, st, k0, da0, da1, db0, db1, ra0, ca0, ra1, ca1, rb0, cb0, rb1, cb1):
        """This thread's four 16-byte copies of the slice at k0 into the stage at shared address st."""
        cp_async16_at(st + 2 * da0, global_address(a, (ra0, k0 + ca0)), 16)
        cp_async16_at(st + 2 * da1, global_address(a, (ra1, k0 + ca1)), 16)
        cp_async16_at(st + 2 * (A_SZ + db0), global_address(b, (k0 + rb0, cb0)), 16)
        cp_async16_at(st + 2 * (A_SZ + db1), global_address(b, (k0 + rb1, cb1)), 16)

    @cuda.jit(launch_bounds=(threads, 1))
    def kernel(a, b, c, dest):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=16)
        base = shared_address(smem, 0)
        tid = cuda.threadIdx.x
        row0, col0 = cuda.blockIdx.x * tm, cuda.blockIdx.y * tn
        da0, da1 = dest[tid], dest[tid + threads]  # shared offsets (elements) of this thread's chunks
        db0, db1 = dest[A_CH + tid], dest[A_CH + tid + threads]
        ra0, ca0 = row0 + tid // KC, (tid % KC) * 8
        ra1, ca1 = row0 + (tid + threads) // KC, ((tid + threads) % KC) * 8
        rb0, cb0 = tid // NC, col0 + (tid % NC) * 8
        rb1, cb1 = (tid + threads) // NC, col0 + ((tid + threads) % NC) * 8
        cbuf = cuda.local.array(shape=(C_SZ,), dtype=np.float32)
        acc = make_tensor(cbuf, lc)
        clear(acc)
        steps = a.shape[1] // tk
        for s in range(stages - 1):
            if s < steps:
                copy_slice(a, b, base + 2 * (s % stages) * STAGE, s * tk, da0, da1, db0, db1, ra0, ca0, ra1, ca1,
                           rb0, cb0, rb1, cb1)
            cp_async_commit()
        for i in range(steps):
            cp_async_wait_group(PENDING)
            cuda.syncthreads()
            s = i + stages - 1
            if s < steps:
                copy_slice(a, b, base + 2 * (s % stages) * STAGE, s * tk, da0, da1, db0, db1, ra0, ca0, ra1, ca1,
                           rb0, cb0, rb1, cb1)
            cp_async_commit()
            off = (i % stages) * STAGE
            MM.execute(make_tensor(smem[off:off + A_SZ], la), make_tensor(smem[off + A_SZ:off + STAGE], lb), acc)
        cp_async_wait_group(0)
        copy_fragment(acc, make_tensor(c[row0:row0 + tm, col0:col0 + tn], gc), alignment=16)

    assert A_PER == 2 and B_PER == 2, "the kernel is written for two chunks of A and two of B a thread"
    return kernel, 2 * stages * STAGE, MM


def chunk_table(maps):
    """From the discovery's dumps: the shared offset of each 16-byte chunk of A, then of B."""
    import numpy as np

    out = []
    for e in maps:
        first = e.reshape(-1, 8)[:, 0]  # element index at the start of each shared chunk
        dest = np.empty(len(first), np.int32)
        dest[first // 8] = np.arange(len(first), dtype=np.int32) * 8
        out.append(dest)
    return np.concatenate(out)


def discover_layouts(tm=128, tn=128, tk=32, threads=256):
    """Run the discovery kernel; return, for A and B, the element index at each shared offset, and
    print whether every 16-byte chunk holds 8 consecutive elements (a chunk permutation)."""
    import numpy as np
    from numba import cuda

    kernel, A_SZ, B_SZ = build_discovery(tm, tn, tk, threads)
    a = np.arange(tm * tk, dtype=np.uint16).reshape(tm, tk).view(np.float16)
    b = np.arange(tk * tn, dtype=np.uint16).reshape(tk, tn).view(np.float16)
    oa, ob = cuda.device_array(A_SZ, np.float16), cuda.device_array(B_SZ, np.float16)
    kernel[1, threads](cuda.to_device(a), cuda.to_device(b), oa, ob)
    maps = []
    for name, out, width in (("A", oa, tk), ("B", ob, tn)):
        e = out.copy_to_host().view(np.uint16).astype(np.int64)
        chunks = e.reshape(-1, 8)
        whole = bool(np.all(chunks - chunks[:, :1] == np.arange(8)) and np.all(chunks[:, 0] % 8 == 0))
        print(f"{name}: 16-byte chunks whole: {whole}; first rows of (row, chunk) per shared chunk:")
        ch = chunks[:, 0] // 8
        per_row = width // 8
        print("   ", [(int(x) // per_row, int(x) % per_row) for x in ch[:24]])
        maps.append(e)
    return maps


def offline(n, names, sass_dir=None):
    from numba import types

    from kernel_lab.tensor_cores import codegen_cache, offline as off

    off.pretend_gpu((9, 0))
    codegen_cache.enable()
    f16 = types.Array(types.float16, 2, "C")
    f32 = types.Array(types.float32, 2, "C")
    if "discover" in names:
        kernel, _, _ = build_discovery()
        code = off.compile_kernel(kernel, (f16, f16, types.Array(types.float16, 1, "C"), types.Array(types.float16, 1, "C")))
        print(f"discover: {len(code)} bytes of LTO-IR", flush=True)
        names = [x for x in names if x != "discover"]
    for name in names:
        t0 = time.perf_counter()
        if name in SWIZZLED:
            kernel, smem, _ = build_swizzled(n, SWIZZLED[name])
            code = off.compile_kernel(kernel, (f16, f16, f32, types.Array(types.int32, 1, "C")))
            print(f"{name}: {len(code)} bytes of LTO-IR, {time.perf_counter() - t0:.0f} s", flush=True)
            continue
        kernel, smem, _ = build(n, *VARIANTS[name])
        code = off.compile_kernel(kernel, (f16, f16, f32))
        print(f"{name}: {len(code)} bytes of LTO-IR, {smem} bytes of shared memory, {time.perf_counter() - t0:.0f} s",
              flush=True)
        if sass_dir:
            counts, res = sass_counts(kernel, (f16, f16, f32), Path(sass_dir) / f"{name.replace(' ', '_')}.cubin")
            print(f"  {res[0] if res else ''}\n  {sorted(counts.items(), key=lambda kv: -kv[1])[:24]}", flush=True)


def on_gpu(n, names):
    import cupy as cp
    import numpy as np

    import kernel_lab as kl
    from kernel_lab.tensor_cores import codegen_cache, gemm
    from kernel_lab.tensor_cores.configs import GemmConfig

    kl.setup(quiet=True)
    codegen_cache.enable()
    dest = None
    if "discover" in names:
        maps = discover_layouts()
        np.savez(Path(os.environ.get("OUT", "/tmp")) / "suggested_layouts.npz", a=maps[0], b=maps[1])
        names = [x for x in names if x != "discover"]
        dest = cp.asarray(chunk_table(maps))
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((n, n)).astype(np.float16))
    b = cp.asarray(rng.standard_normal((n, n)).astype(np.float16))
    c = cp.empty((n, n), cp.float32)
    want = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
    flops = 2 * n ** 3
    results = [kl.benchmark("cuBLAS fp16 (cupy.matmul)", lambda: cp.matmul(a, b), flops=flops)]
    if "BlockGemm" in names:
        block = gemm.BlockGemm(GemmConfig(128, 128, 32, 256, "float16", prefetch=True))
        results.append(kl.benchmark("BlockGemm (06.1)", block.launcher(a, b, c), flops=flops))
        names = [x for x in names if x != "BlockGemm"]
    for name in names:
        if name in SWIZZLED:
            try:
                t0 = time.perf_counter()
                kernel, smem, _ = build_swizzled(n, SWIZZLED[name])
                if smem > 48 * 1024:
                    gemm.set_max_dynamic_shared_memory(kernel, (a, b, c, dest), smem)
                launch = kernel[(n // 128, n // 128), 256, 0, smem]
                c[:] = cp.nan
                launch(a, b, c, dest)
                cp.cuda.runtime.deviceSynchronize()
                err = float(cp.max(cp.abs(c - want)) / cp.max(cp.abs(want)))
                print(f"{name}: compiled and ran in {time.perf_counter() - t0:.0f} s, max error {err:.1e} of max |C|",
                      flush=True)
                if err < 1e-3:
                    results.append(kl.benchmark(name, lambda: launch(a, b, c, dest), flops=flops))
            except Exception as exc:  # noqa: BLE001
                print(f"{name}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            continue
        tm, tn, tk, threads = VARIANTS[name][:4]
        t0 = time.perf_counter()
        try:
            kernel, smem, _ = build(n, *VARIANTS[name])
            if smem > 48 * 1024:
                gemm.set_max_dynamic_shared_memory(kernel, (a, b, c), smem)
            launch = kernel[(n // tm, n // tn), threads, 0, smem]
            c[:] = cp.nan
            launch(a, b, c)
            cp.cuda.runtime.deviceSynchronize()
            err = float(cp.max(cp.abs(c - want)) / cp.max(cp.abs(want)))
            print(f"{name}: compiled and ran in {time.perf_counter() - t0:.0f} s, max error {err:.1e} of max |C|",
                  flush=True)
            if not err < 1e-3:
                print(f"{name}: WRONG, not timed", flush=True)
                continue
            results.append(kl.benchmark(name, lambda: launch(a, b, c), flops=flops))
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{name}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
    kl.compare(results, baseline="cuBLAS fp16 (cupy.matmul)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--offline", action="store_true", help="compile for sm_90 on a CPU (venv with nvmath)")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--only", default=",".join(["BlockGemm", *VARIANTS, "discover", *SWIZZLED]))
    p.add_argument("--sass", help="with --offline: link each kernel and count its SASS opcodes, cubins into this folder")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    names = [v for v in args.only.split(",") if v]
    if args.offline and not args.child:
        from kernel_lab.tensor_cores.offline import stand_in_environment

        sys.exit(subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=stand_in_environment()))
    import kernel_lab  # noqa: F401

    if args.offline:
        offline(args.n, names, args.sass)
    else:
        on_gpu(args.n, names)


if __name__ == "__main__":
    main()
