"""The SGEMM progression of module 02 on this GPU: every numbered kernel beside cuBLAS.

    python -m kernel_lab.reductions_gemm.bench          # 4096^3 and 8192^3, with the autotuned kernel
    python -m kernel_lab.reductions_gemm.bench --sizes 2048 --no-tune
    python -m kernel_lab.reductions_gemm.bench --sim    # the simulator: tiny sizes, correctness only

For each size, each kernel is compiled, checked against cuBLAS's result (CuPy) and timed (CUDA
events, L2 flushed, median of a few repeats); the table gives TFLOP/s and the ratio to cuBLAS
SGEMM on the same matrices in the same run. The slow early kernels are skipped at sizes where one
run would take seconds. Also: registers and local memory (spills) per thread of each kernel, and
the FP32/FP64 FMA rates of this GPU measured by a small kernel (the "vector peak").
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import time

import numpy as np

import kernel_lab  # noqa: F401  (chooses GPU or simulator before numba.cuda)

from ..environment import gpu_info, on_simulator


def _cupy():
    try:
        import cupy as cp

        return cp
    except Exception:  # noqa: BLE001 - CuPy absent or broken: no cuBLAS baseline
        return None


def _kernel_of(launch):
    """The compiled kernel behind one of the package's launchers (None if unknown)."""
    from . import sgemm

    kernel = {sgemm.launch_naive: sgemm.sgemm_naive, sgemm.launch_coalesced: sgemm.sgemm_coalesced,
              sgemm.launch_shared: sgemm.sgemm_shared, sgemm.launch_1d_blocking: sgemm.sgemm_1d_blocking,
              sgemm.launch_2d_blocking: sgemm.sgemm_2d_blocking,
              sgemm.launch_vectorized: sgemm.sgemm_vectorized}.get(launch)
    if kernel is not None:
        return kernel
    if getattr(launch, "kernel", None) is not None:
        return launch.kernel
    if launch is sgemm.launch_double_buffered:
        cfg = sgemm.DOUBLE_BUFFERED
        return sgemm.warptile_kernel(cfg, main_loop=sgemm.warptile_parts(cfg).main_loop_one)
    cfg = getattr(launch, "config", None)
    if cfg is None and launch is sgemm.launch_warptiled:
        cfg = sgemm.WARPTILE
    if cfg is None and launch is sgemm.launch_two_tiles:
        cfg = sgemm.DOUBLE_BUFFERED
    return sgemm.warptile_kernel(cfg) if cfg is not None else None


def kernel_resources(launch, c=None, a=None, b=None) -> str:
    """Registers and local memory per thread of the kernel a launcher last used (GPU only)."""
    try:
        kernel = _kernel_of(launch)
        if kernel is None or not kernel.overloads:
            return ""
        # overloads maps argument-type tuples to compiled kernels (get_regs_per_thread wants a
        # Signature, not that tuple: asked with the key, it raised and the column stayed empty)
        compiled = next(iter(kernel.overloads.values()))
        regs = compiled.regs_per_thread
        local = compiled.local_mem_per_thread
        return f"{regs} regs" + (f", {local} B local (spills)" if local else "")
    except Exception:  # noqa: BLE001 - an informative extra; never fail the benchmark for it
        return ""


def sass_summary(launch, c=None, a=None, b=None) -> str:
    """Registers, spills and the instruction mix of the main loop of a launcher's kernel, from its
    SASS (:func:`main_loop_mix`). The FFMA share of the loop's instructions bounds the fraction of
    the FMA units' peak the kernel can reach. Needs ``nvdisasm`` (CUDA toolkit) for the SASS;
    without it, only the registers."""
    if on_simulator():
        from ..bench import SIMULATOR_NOTE

        return SIMULATOR_NOTE
    resources = kernel_resources(launch)
    kernel = _kernel_of(launch)
    try:
        sass = kernel.inspect_sass()
        if isinstance(sass, dict):
            sass = next(iter(sass.values()))
    except Exception as exc:  # noqa: BLE001 - nvdisasm missing, or an old numba-cuda
        return f"{resources}; no SASS here ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    cfg = getattr(launch, "config", None)
    per_tile = None
    if cfg is not None and hasattr(cfg, "wm_iter"):
        per_tile = cfg.tm * cfg.wm_iter * cfg.tn * cfg.wn_iter * cfg.bk
    return f"{resources}; {main_loop_mix(sass, fma_per_tile=per_tile)}"


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def main_loop_mix(sass: str, fma_per_tile: int | None = None) -> str:
    """What the hot loop of a GEMM kernel executes, read from its SASS text.

    Counting every instruction between the first and last FFMA of the kernel mixes in code that
    runs once (the edge path, the prologue): it said 36% FFMA for a loop that is 78% FFMA. Here the
    loops are found from their backward branches; the main loop is the shortest loop that holds
    FFMAs (the interior tiles' path, not the longer edge path), and each inner loop it holds (the
    k steps of one tile, when not fully unrolled) is counted once per trip of its own:
    ``fma_per_tile`` (FFMAs per thread per tile of K) says how many trips that is."""
    # cuobjdump writes branch targets as addresses (BRA 0x1c40), nvdisasm (Numba's inspect_sass)
    # as labels (BRA `(.L_x_3)) on a line of their own before the target instruction
    ins, labels, pending = [], {}, []
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L\w*):", line)
        if label:
            pending.append(label.group(1))
            continue
        m = _SASS_LINE.search(line)
        if m:
            addr = int(m.group(1), 16)
            labels.update((name, addr) for name in pending)
            pending = []
            ins.append((addr, m.group(2).split(".")[0], m.group(3)))
    if not ins:
        return "no SASS instructions found"
    where = {addr: i for i, (addr, _, _) in enumerate(ins)}
    loops = []
    for i, (addr, op, rest) in enumerate(ins):
        if op != "BRA":
            continue
        by_label = re.search(r"\((\.L\w*)\)", rest)
        by_addr = re.search(r"0x([0-9a-f]+)", rest)
        target = labels.get(by_label.group(1)) if by_label else int(by_addr.group(1), 16) if by_addr else None
        if target is not None and target < addr and target in where:
            loops.append((where[target], i))
    fma_ops = ("FFMA", "DFMA")

    def count(lo, hi):
        return sum(1 for _, op, _ in ins[lo:hi + 1] if op in fma_ops)

    with_fma = [lp for lp in loops if count(*lp)]
    if not with_fma:
        total = count(0, len(ins) - 1)
        return f"{len(ins)} instructions, {total} FFMA/DFMA, no loop around them"
    # an outer loop: one that contains another FFMA loop; the interior path's is the shortest
    def inside(o, lp):
        return o != lp and lp[0] <= o[0] and o[1] <= lp[1]

    outer = [lp for lp in with_fma if any(inside(o, lp) for o in with_fma)]
    main = min(outer or with_fma, key=lambda lp: lp[1] - lp[0])
    # the loops directly inside it (the k steps of a tile, when they are not fully unrolled); each
    # runs fma_per_tile / (its FFMAs) times per tile, so its body counts that many times
    nested = [o for o in with_fma if inside(o, main)]
    children = [o for o in nested if not any(inside(o, p) for p in nested)]
    n_main, f_main = main[1] - main[0] + 1, count(*main)
    ins_trip, fma_trip = n_main, f_main
    around = collections.Counter(op for _, op, _ in ins[main[0]:main[1] + 1] if op not in fma_ops)
    notes = []
    for child in children:
        n_c, f_c = child[1] - child[0] + 1, count(*child)
        trips = max(1, round(fma_per_tile / f_c)) if fma_per_tile else 1
        ins_trip += (trips - 1) * n_c
        fma_trip += (trips - 1) * f_c
        for _, op, _ in ins[child[0]:child[1] + 1]:
            if op not in fma_ops:
                around[op] -= 1
        notes.append(f"{n_c} instructions, {100 * f_c / n_c:.0f}% FFMA/DFMA, {trips}x")
    tiles = max(1, round(fma_trip / fma_per_tile)) if fma_per_tile else 1
    top = ", ".join(f"{op} {k // tiles}" for op, k in around.most_common(6) if k // tiles > 0)
    unit = "per tile of K" if fma_per_tile else "per trip"
    text = (f"main loop, {unit}: {fma_trip // tiles} FFMA/DFMA among {ins_trip // tiles} instructions "
            f"({100 * fma_trip / ins_trip:.0f}%)")
    if children:
        text += f"; inner loops ({tiles} tile{'s' if tiles > 1 else ''} per trip): " + "; ".join(notes)
    return text + (f"; the rest: {top}" if top else "")


def fma_peak_tflops(dtype=np.float32, *, iterations: int = 4096) -> float | None:
    """This GPU's FMA rate in TFLOP/s for float32 or float64 (CUDA cores, no tensor cores), measured
    by a kernel whose threads each run 8 independent FMA chains."""
    if on_simulator():
        return None
    from numba import cuda

    from ..bench import time_ms

    kernel = _fma_kernel(np.dtype(dtype))
    sms = gpu_info().multiprocessors or 80
    blocks, threads = sms * 8, 256
    out = cuda.device_array(blocks * threads, dtype=dtype)
    times = time_ms(lambda: kernel[blocks, threads](out, iterations), warmup=2, repeat=5, flush_l2=False)
    flops = 2 * 8 * iterations * blocks * threads
    return flops / statistics.median(times) / 1e9


_FMA = {}


def _fma_kernel(dtype):
    if dtype in _FMA:
        return _FMA[dtype]
    from numba import cuda, float32, float64

    T = float64 if dtype == np.float64 else float32

    @cuda.jit
    def fma_chains(out, iterations):
        x = T(cuda.threadIdx.x) * T(1e-3)
        a0, a1, a2, a3 = x, x + T(1), x + T(2), x + T(3)
        a4, a5, a6, a7 = x + T(4), x + T(5), x + T(6), x + T(7)
        m, c = T(0.999), T(1e-4)
        for _ in range(iterations):  # 8 independent chains: the FMA units, not latency, limit it
            a0 = a0 * m + c
            a1 = a1 * m + c
            a2 = a2 * m + c
            a3 = a3 * m + c
            a4 = a4 * m + c
            a5 = a5 * m + c
            a6 = a6 * m + c
            a7 = a7 * m + c
        out[cuda.grid(1)] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7

    _FMA[dtype] = fma_chains
    return fma_chains


def progression(sizes=(4096, 8192), *, tune: bool = True, repeat: int = 5, log=print, slow_limit_gflop=300):
    """Time every kernel of the progression (and the autotuned one, and cuBLAS) at each size.

    Returns a list of dicts: size, kernel, ms, tflops, ratio (to cuBLAS SGEMM at that size),
    error (max |C - C_cuBLAS| / max |C_cuBLAS|), resources. Kernels whose single run would exceed
    ``slow_limit_gflop`` GFLOP at their expected speed are skipped (naive kernels at 8192^3).
    """
    from numba import cuda

    from . import sgemm
    from ..bench import time_ms

    cp = _cupy()
    rows = []
    for size in sizes:
        m = n = k = int(size)
        rng = np.random.default_rng(0)
        a = cuda.to_device(rng.uniform(-1, 1, (m, k)).astype(np.float32))
        b = cuda.to_device(rng.uniform(-1, 1, (k, n)).astype(np.float32))
        c = cuda.device_array((m, n), np.float32)
        flops = 2.0 * m * n * k
        ref = None
        base_ms = None
        if cp is not None:
            ca, cb = cp.asarray(a), cp.asarray(b)
            cc = cp.empty((m, n), dtype=cp.float32)
            base_ms = statistics.median(time_ms(lambda: cp.matmul(ca, cb, out=cc), warmup=2, repeat=repeat))
            ref = cc
        launches = list(sgemm.PROGRESSION)
        if tune:
            t0 = time.perf_counter()
            result = sgemm.autotune(m, n, k)
            log(f"autotune {size}: {sgemm.GemmTiles.label(result.best)} "
                f"({'from the cache' if result.from_cache else f'{time.perf_counter() - t0:.0f} s'})")
            launches.append(("9 autotuned", sgemm.warptile_launcher(result.best)))
        for label, launch in launches:
            if label[0] in "123" and flops / 1e9 > slow_limit_gflop * (4 if label[0] == "3" else 1):
                rows.append(dict(size=size, kernel=label, ms=None, tflops=None, ratio=None, error=None,
                                 resources="skipped: too slow at this size"))
                continue
            launch(c, a, b)
            cuda.synchronize()
            err = None
            if ref is not None:
                diff = cp.abs(cp.asarray(c) - ref).max()
                err = float(diff / cp.abs(ref).max())
            ms = statistics.median(time_ms(lambda: launch(c, a, b), warmup=1, repeat=repeat))
            tf = flops / ms / 1e9
            rows.append(dict(size=size, kernel=label, ms=ms, tflops=tf, ratio=(base_ms / ms) if base_ms else None,
                             error=err, resources=kernel_resources(launch, c, a, b)))
            log(format_row(rows[-1]))
        if base_ms:
            rows.append(dict(size=size, kernel="cuBLAS SGEMM (CuPy)", ms=base_ms, tflops=flops / base_ms / 1e9,
                             ratio=1.0, error=0.0, resources=""))
            log(format_row(rows[-1]))
    return rows


def format_row(r) -> str:
    if r["ms"] is None:
        return f"{r['size']:>5}  {r['kernel']:<24} {'':>9} {'':>8} {'':>8}  {r['resources']}"
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
    err = f"err {r['error']:.1e}" if r["error"] is not None else ""
    return (f"{r['size']:>5}  {r['kernel']:<24} {r['ms']:8.3f}ms {r['tflops']:6.2f} TF {ratio:>7}  {err}"
            f"{'  ' + r['resources'] if r['resources'] else ''}")


def table(rows) -> str:
    head = f"{'size':>5}  {'kernel':<24} {'time':>10} {'TFLOP/s':>9} {'vs cuBLAS':>8}"
    return "\n".join([head] + [format_row(r) for r in rows])


def simulator_progression(log=print) -> list:
    """Every kernel once at a tiny shape in the simulator, against NumPy (no timing)."""
    from numba import cuda

    from . import sgemm

    rng = np.random.default_rng(0)
    m, n, k = sgemm.WARPTILE.bm + 3, sgemm.WARPTILE.bn + 1, sgemm.WARPTILE.bk + 4
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b
    out = []
    launches = list(sgemm.PROGRESSION) + [("9 autotuned", sgemm.warptile_launcher(sgemm.autotune(m, n, k).best))]
    for label, launch in launches:
        c = cuda.to_device(np.full((m, n), np.nan, np.float32))
        t0 = time.perf_counter()
        launch(c, cuda.to_device(a), cuda.to_device(b))
        err = float(np.abs(c.copy_to_host() - want).max() / np.abs(want).max())
        out.append((label, err))
        log(f"{label:<24} {m}x{n}x{k}: max error {err:.1e} ({time.perf_counter() - t0:.1f} s in the simulator)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernel_lab.reductions_gemm.bench",
                                description="Module 02's SGEMM progression beside cuBLAS on this GPU.")
    p.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--no-tune", action="store_true", help="leave out kernel 9 (autotuning)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sim", action="store_true", help="run in the simulator: tiny sizes, correctness only")
    args = p.parse_args(argv)
    if args.sim or on_simulator():
        if not on_simulator():
            print("--sim needs the simulator: run with NUMBA_ENABLE_CUDASIM=1", file=sys.stderr)
            return 2
        kernel_lab.setup(quiet=True)
        errors = simulator_progression()
        return 0 if all(e < 1e-5 for _, e in errors) else 1
    kernel_lab.setup()
    rows = progression(args.sizes, tune=not args.no_tune, repeat=args.repeat, log=lambda s: print(s, flush=True))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
