#!/usr/bin/env python3
"""Module 07's fused kernel with different per-diagonal epilogues, at 8192^3 (7 slices).

    PYTHONPATH=utilities python3 scripts/probes/ozaki_epilogue_variants.py [--variants "base;horner@128,128,128,256,4"] [--n 8192]

Why: Nsight Compute put the fused kernel's INT tensor pipe at 62% busy with one block per SM, so
every cycle a diagonal's epilogue takes is a cycle without MMAs. The package's epilogue reads and
writes C one element at a time: a load, its use, the store; the next element's load cannot be
issued before that store (the compiler cannot prove the two addresses differ), so a thread waits
one L2 round trip per element, 128 times per diagonal.

Variants (``--variants``; ``name@tile_m,tile_n,tile_k,threads,depth`` picks the configuration):
- ``base``: the package's kernel (since 2026-11-26 batch16 with ``math.ldexp``; ``chunk1`` is the
  earlier one-element-at-a-time epilogue, the "base" of the table below);
- ``chunkN``: the epilogue loads N elements of C first, then converts, scales and stores them;
- ``fastN``: chunkN, and the scale 2**(ea + eb - 12 - 8d) made from its exponent bits instead of
  ``ldexp`` (tiles whose exponents could leave the normal range keep ``ldexp``);
- ``batchN``: fastN, and every load of the chunk (the accumulator's element from the fragment copy
  in local memory, C's element) issued before any arithmetic; one ``map_fragment_index`` per element;
  (Tried and not possible: folding the least significant diagonal into the next one, its INT32 sums
  rounded to the next diagonal's unit and copied into the accumulator instead of ``clear()``, so
  that it needs no pass over C. libmathdx 0.3 refuses ``copy_fragment`` into an accumulator:
  LIBMATHDX_INVALID_VALUE.)
- ``horner``: the tile's running sum kept in registers as float64, ``f = f / 256 + D_d`` after each
  diagonal (Horner's rule, least significant first), and C read and written once, at the end, with
  the row and column exponents, alpha and beta. Needs an accumulator small enough to leave room for
  a float64 per element: 128x128 tiles with 256 threads (64 INT32 + 128 registers of sums a thread);
  (measured: the sums do not stay in registers; NVVM keeps the array in local memory)
- ``smem``: the same running sum in shared memory beside the pipeline's stages (TM*TN float64:
  128 KB for 128x128, so the pipeline gets 96 KB: 128x128x128 at depth 3 or 128x128x64 at depth 6),
  element i of thread t at [i * threads + t] (consecutive threads, consecutive words: no bank
  conflicts);
- ``nothing``: no epilogue except the last diagonal's stores: how long the MMAs alone take (its
  result is wrong; it is the bound on what any epilogue change can gain).

Measured on an H100 (2026-11-26), kernel alone / end to end, ratio to DGEMM in the same process:
  base then, now chunk1 (one at a time)          30.0-30.4 / 30.7-30.9 ms   0.63-0.64x
  chunk8 / chunk16 (C's loads first)      29.3 / 29.1 ms end to end  0.67x
  fast8 / fast16 (and bit-built scales)   29.2-29.4 ms               0.66-0.67x
  batch8 / batch16 (sums' loads too)      25.8 / 25.6 ms kernel, 25.2 / 24.6 ms   0.76x / 0.79x
  nothing (the bound)                     23.4 ms kernel             0.84x
  128x128x128 d3 / 128x128x64 d6, smem    34.5 / 44.2 ms kernel      0.57x / 0.52x
  128x128 nothing d3 / d6                 48.2 / 63.6 ms kernel
  horner 128x128x128 d4 (local memory)    34.5 ms kernel, 45.0 end to end
  64x256 (128 threads, two blocks an SM)  chunk16: 48.2 (tk 64, d4) and 40.7 (tk 128, d2) ms kernel
The package's kernel is batch16 with ``math.ldexp`` (kernel_lab.ozaki.gpu.EPILOGUE_CHUNK).
Nsight Compute's source view of the base kernel (8192^3): 38% of warp samples wait at
WARPGROUP.DEPBAR (the pipeline's wait for its own MMAs), 12% at the epilogue's I2F.F64 (the sum
read back from the fragment copy in local memory), 7% at the DFMA that adds C's old value.

Phase 1 compiles every variant at once, one process each; phase 2 times them one at a time, each in
a fresh process (end to end with slicing, CUDA events, L2 flushed, median) beside cuBLAS DGEMM timed
in the same process.
"""
import argparse
import math
import time

from two_phase import child_main, compile_then_time


_STAGE = []


def stage_exponents():
    """A device function ``(ea, eb, shifts, row0, col0, m, n, TM, TN, NT) -> ok``: the tile's TM row and
    TN column exponents into ``shifts`` (0 past the result), and 1 if each one this thread copied lies
    within +-450. Then every 2**(ea + eb - 12 - 8d) is a normal number, so a scale built from its
    exponent bits is exact (the d-term is -12 .. -60; alpha is applied after, as in the package).
    The caller synchronises (``syncthreads_and`` of the flag where it uses it)."""
    if not _STAGE:
        from numba import cuda

        @cuda.jit(device=True, inline="always")
        def stage(ea, eb, shifts, row0, col0, m, n, TM, TN, NT):
            ok = 1
            for i in range(cuda.threadIdx.x, TM + TN, NT):
                if i < TM:
                    v = ea[row0 + i] if row0 + i < m else 0
                else:
                    v = eb[col0 + i - TM] if col0 + i - TM < n else 0
                shifts[i] = v
                if not -450 < v < 450:
                    ok = 0
            return ok

        _STAGE.append(stage)
    return _STAGE[0]


def make_variant(name: str):
    """``make(MM, cfg)`` for OzakiGemm(kernel=...), or None for the package's kernel."""
    if name == "base":
        return None
    import numpy as np
    from numba import cuda

    if name == "horner":
        return make_horner
    if name == "smem":
        return make_smem_sums
    if name.startswith("batch"):
        return make_batched(int(name[5:]))
    nothing = name == "nothing"
    fast = name.startswith("fast")
    CH = 1 if nothing else int(name[4:]) if fast else int(name[5:])

    def make(MM, cfg):
        TM, TN, NT = cfg.tile_m, cfg.tile_n, cfg.threads
        stage = stage_exponents()

        def fused(slices, ea, eb, alpha, beta, c, pipe):
            smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
            shifts = smem[pipe.buffer_size:].view(np.int32)
            bm = np.int32(cuda.blockIdx.x)
            bn = np.int32(cuda.blockIdx.y)
            m, n = c.shape
            row0 = bm * TM
            col0 = bn * TN
            safe = cuda.syncthreads_and(stage(ea, eb, shifts, row0, col0, m, n, TM, TN, NT)) != 0
            tile = pipe.get_tile(smem, (bm, np.int32(0)), (bn, np.int32(slices - 1)))
            acc = MM.suggest_accumulator()
            for d in range(slices - 1, -1, -1):
                acc.clear()
                for t in range(d + 1):
                    tile.execute(acc)
                    if t < d:
                        pipe.reset_tile(tile, (bm, np.int32(t + 1)), (bn, np.int32(d - t - 1)))
                    elif d > 0:
                        pipe.reset_tile(tile, (bm, np.int32(0)), (bn, np.int32(d - 1)))
                if acc.is_thread_active():
                    res = acc.get_results()
                    first = d == slices - 1
                    if nothing:
                        if d == 0:
                            for i in range(res.layout.size):
                                r, cc = acc.map_fragment_index(i)
                                if row0 + r < m and col0 + cc < n:
                                    c[row0 + r, col0 + cc] = np.float64(res[i])
                        continue
                    old = cuda.local.array(CH, np.float64)
                    for base in range(0, res.layout.size, CH):
                        for j in range(CH):  # every load of the chunk first...
                            r, cc = acc.map_fragment_index(base + j)
                            gr = row0 + r
                            gc = col0 + cc
                            v = 0.0
                            if gr < m and gc < n:
                                if not first:
                                    v = c[gr, gc]
                                elif beta != 0.0:
                                    v = beta * c[gr, gc]
                            old[j] = v
                        for j in range(CH):  # ...then the arithmetic and the stores
                            i = base + j
                            r, cc = acc.map_fragment_index(i)
                            gr = row0 + r
                            gc = col0 + cc
                            if gr < m and gc < n:
                                e = shifts[r] + shifts[TM + cc] - 12 - 8 * d
                                if fast and safe:
                                    scale = cuda.libdevice.longlong_as_double(np.int64(e + 1023) << 52)
                                    x = alpha * (np.float64(res[i]) * scale)
                                else:
                                    x = alpha * math.ldexp(np.float64(res[i]), e)
                                c[gr, gc] = x + old[j]
            tile._del()

        return fused

    make.__name__ = f"make_{name}"
    return make


def make_batched(CH):
    def make(MM, cfg):
        import numpy as np
        from numba import cuda
        TM, TN, NT = cfg.tile_m, cfg.tile_n, cfg.threads
        stage = stage_exponents()

        def fused(slices, ea, eb, alpha, beta, c, pipe):
            smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
            shifts = smem[pipe.buffer_size:].view(np.int32)
            bm = np.int32(cuda.blockIdx.x)
            bn = np.int32(cuda.blockIdx.y)
            m, n = c.shape
            flat = c.reshape(m * n)
            row0 = bm * TM
            col0 = bn * TN
            safe = cuda.syncthreads_and(stage(ea, eb, shifts, row0, col0, m, n, TM, TN, NT)) != 0
            tile = pipe.get_tile(smem, (bm, np.int32(0)), (bn, np.int32(slices - 1)))
            acc = MM.suggest_accumulator()
            top = slices - 1  # the first diagonal written to C
            for d in range(slices - 1, -1, -1):
                acc.clear()
                for t in range(d + 1):
                    tile.execute(acc)
                    if t < d:
                        pipe.reset_tile(tile, (bm, np.int32(t + 1)), (bn, np.int32(d - t - 1)))
                    elif d > 0:
                        pipe.reset_tile(tile, (bm, np.int32(0)), (bn, np.int32(d - 1)))
                if acc.is_thread_active():
                    res = acc.get_results()
                    first = d == top
                    off = cuda.local.array(CH, np.int64)
                    raw = cuda.local.array(CH, np.int32)
                    ex = cuda.local.array(CH, np.int32)
                    old = cuda.local.array(CH, np.float64)
                    for base in range(0, res.layout.size, CH):
                        for j in range(CH):  # every load of the chunk first...
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
                                elif beta != 0.0:
                                    v = beta * flat[o]
                            off[j] = o
                            old[j] = v
                        for j in range(CH):  # ...then the arithmetic and the stores
                            if off[j] >= 0:
                                if safe:
                                    scale = cuda.libdevice.longlong_as_double(np.int64(ex[j] + 1023) << 52)
                                    x = alpha * (np.float64(raw[j]) * scale)
                                else:
                                    x = alpha * math.ldexp(np.float64(raw[j]), ex[j])
                                flat[off[j]] = x + old[j]
            tile._del()

        return fused

    return make


def make_horner(MM, cfg):
    import numpy as np
    from numba import cuda

    TM, TN, NT = cfg.tile_m, cfg.tile_n, cfg.threads
    stage = stage_exponents()
    SIZE = TM * TN // NT  # accumulator elements a thread holds

    def fused(slices, ea, eb, alpha, beta, c, pipe):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
        shifts = smem[pipe.buffer_size:].view(np.int32)
        bm = np.int32(cuda.blockIdx.x)
        bn = np.int32(cuda.blockIdx.y)
        m, n = c.shape
        row0 = bm * TM
        col0 = bn * TN
        stage(ea, eb, shifts, row0, col0, m, n, TM, TN, NT)
        cuda.syncthreads()
        tile = pipe.get_tile(smem, (bm, np.int32(0)), (bn, np.int32(slices - 1)))
        acc = MM.suggest_accumulator()
        f = cuda.local.array(SIZE, np.float64)
        for i in range(SIZE):
            f[i] = 0.0
        for d in range(slices - 1, -1, -1):
            acc.clear()
            for t in range(d + 1):
                tile.execute(acc)
                if t < d:
                    pipe.reset_tile(tile, (bm, np.int32(t + 1)), (bn, np.int32(d - t - 1)))
                elif d > 0:
                    pipe.reset_tile(tile, (bm, np.int32(0)), (bn, np.int32(d - 1)))
            if acc.is_thread_active():
                res = acc.get_results()
                for i in range(SIZE):
                    f[i] = f[i] * 0.00390625 + np.float64(res[i])  # exact scaling, one rounding
        if acc.is_thread_active():
            for i in range(SIZE):
                r, cc = acc.map_fragment_index(i)
                gr = row0 + r
                gc = col0 + cc
                if gr < m and gc < n:
                    x = alpha * math.ldexp(f[i], shifts[r] + shifts[TM + cc] - 12)
                    if beta != 0.0:
                        x += beta * c[gr, gc]
                    c[gr, gc] = x
        tile._del()

    return fused


def make_smem_sums(MM, cfg):
    import numpy as np
    from numba import cuda

    TM, TN, NT = cfg.tile_m, cfg.tile_n, cfg.threads
    stage = stage_exponents()

    def fused(slices, ea, eb, alpha, beta, c, pipe):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=pipe.buffer_alignment)
        shifts = smem[pipe.buffer_size:].view(np.int32)
        sums = smem[pipe.buffer_size + 4 * (TM + TN):].view(np.float64)
        tid = cuda.threadIdx.x
        bm = np.int32(cuda.blockIdx.x)
        bn = np.int32(cuda.blockIdx.y)
        m, n = c.shape
        row0 = bm * TM
        col0 = bn * TN
        stage(ea, eb, shifts, row0, col0, m, n, TM, TN, NT)
        cuda.syncthreads()
        tile = pipe.get_tile(smem, (bm, np.int32(0)), (bn, np.int32(slices - 1)))
        acc = MM.suggest_accumulator()
        for d in range(slices - 1, -1, -1):
            acc.clear()
            for t in range(d + 1):
                tile.execute(acc)
                if t < d:
                    pipe.reset_tile(tile, (bm, np.int32(t + 1)), (bn, np.int32(d - t - 1)))
                elif d > 0:
                    pipe.reset_tile(tile, (bm, np.int32(0)), (bn, np.int32(d - 1)))
            if acc.is_thread_active():
                res = acc.get_results()
                if d == slices - 1:
                    for i in range(res.layout.size):
                        sums[i * NT + tid] = np.float64(res[i])
                else:
                    for i in range(res.layout.size):
                        sums[i * NT + tid] = sums[i * NT + tid] * 0.00390625 + np.float64(res[i])
        if acc.is_thread_active():
            for i in range(acc.get_results().layout.size):
                r, cc = acc.map_fragment_index(i)
                gr = row0 + r
                gc = col0 + cc
                if gr < m and gc < n:
                    x = alpha * math.ldexp(sums[i * NT + tid], shifts[r] + shifts[TM + cc] - 12)
                    if beta != 0.0:
                        x += beta * c[gr, gc]
                    c[gr, gc] = x
        tile._del()

    return fused


def child(name: str, n: int, compile_only: bool) -> dict:
    import kernel_lab as kl

    kl.setup(quiet=True)
    import cupy as cp
    import numpy as np

    from kernel_lab.bench import time_ms
    from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm

    out = {"variant": name, "n": n}
    name, _, spec = name.partition("@")
    keys = ("tile_m", "tile_n", "tile_k", "threads", "depth")
    cfg = OzakiConfig(**dict(zip(keys, map(int, spec.split(","))))) if spec else OzakiConfig()
    out["config"] = cfg.label()
    if name == "smem":  # room for the running sums after the pipeline's buffer and the exponents
        from kernel_lab.ozaki import gpu as ozg

        extra = 8 * cfg.tile_m * cfg.tile_n
        launch, once = OzakiGemm._launch, ozg.compile_once

        def _launch(self, st, alpha, beta, c):
            kern, grid, args, smem = launch(self, st, alpha, beta, c)
            return kern, grid, args, smem + extra

        OzakiGemm._launch = _launch
        ozg.compile_once = lambda kernel, args, smem, seconds, key: once(kernel, args, smem + extra, seconds, key)
    try:
        g = OzakiGemm(7, "fused", cfg, kernel=make_variant(name))
        a = cp.random.standard_normal((n, n))
        b = cp.random.standard_normal((n, n))
        c = cp.empty((n, n))
        t0 = time.perf_counter()
        g(a, b, c)
        cp.cuda.Device().synchronize()
        out["first_call_s"] = round(time.perf_counter() - t0, 1)
        from kernel_lab.ozaki.gpu import fused_kernel

        kern = fused_kernel(cfg, g.make_kernel)[1]
        for key, get in (("regs", kern.get_regs_per_thread), ("local_bytes", kern.get_local_mem_per_thread)):
            v = get()
            out[key] = list(v.values())[0] if isinstance(v, dict) else v
        if compile_only:
            return out
        t = float(np.median(time_ms(lambda: g(a, b, c), warmup=2, repeat=9)))
        ref = a @ b
        out["diff_vs_dgemm"] = float(cp.linalg.norm(c - ref) / cp.linalg.norm(ref))
        cb = c.copy()
        g(a, b, cb, alpha=-0.75, beta=0.5)  # alpha and beta: C = -0.75 AB + 0.5 C
        want = -0.75 * ref + 0.5 * c
        out["diff_alpha_beta"] = float(cp.linalg.norm(cb - want) / cp.linalg.norm(want))
        stages = g.stages(a, b, c)
        out["kernel_ms"] = round(float(np.median(time_ms(stages["products"], warmup=2, repeat=9))), 3)
        td = float(np.median(time_ms(lambda: a @ b, warmup=2, repeat=9)))
        out.update(ms=round(t, 3), tflops=round(2 * n**3 / t / 1e9, 2), dgemm_ms=round(td, 3),
                   ratio_to_dgemm=round(td / t, 3))
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variants", default="base;chunk16;fast16;nothing", help="names separated by ;")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--child", default=None)
    p.add_argument("--compile-only", action="store_true")
    args = p.parse_args()
    if args.child is not None:
        child_main(child, args.child, args.n, args.compile_only)
        return
    compile_then_time(__file__, args.variants.split(";"), args.n)


if __name__ == "__main__":
    main()
