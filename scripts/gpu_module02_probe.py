#!/usr/bin/env python3
"""Module 02 on a GPU in one call: check every kernel, then print the numbers the notes need.

    PYTHONPATH=utilities python scripts/gpu_module02_probe.py            # on a GPU (a few minutes)
    PYTHONPATH=utilities python scripts/gpu_module02_probe.py --sim      # in the simulator, tiny sizes

1. checks: every reduction, scan and GEMM kernel of the package (kernel_lab.reductions_gemm: scans, sgemm)
   through module 02's checks, on the checks' adversarial sizes;
2. reductions and scans at 2^26 float32 elements: fraction of the copy roofline, beside CuPy
   (abs().max(), argmax, sum, cumsum); the error of float32, float64 and Kahan sums;
3. the SGEMM progression at 4096^3 and 8192^3 with the ratio of each kernel to cuBLAS SGEMM,
   registers and spills per kernel (``kernel_lab.reductions_gemm.bench``), and the autotuned kernel;
4. DGEMM on CUDA cores at 4096^3 beside cuBLAS DGEMM (FP64 tensor cores on Hopper), and this GPU's
   FP32 and FP64 FMA rates measured by a small kernel.
Everything is printed; with $OUT set, also written to $OUT/module02_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402


def section(title):
    print(f"\n=== {title} ===", flush=True)


def run_checks(sim: bool):
    from numba import cuda

    from kernel_lab.reductions_gemm import scans, sgemm
    from kernel_lab.checks import reductions_gemm as checks

    t = scans.THREADS
    f32 = lambda launch: (lambda out, x: launch(out.view(np.uint32), x.view(np.uint32)))  # noqa: E731
    checks.check_absmax(f32(scans.absmax_one_pass), name="absmax, one atomic per block", block=t)
    checks.check_absmax(f32(scans.absmax_two_pass), name="absmax, two passes", block=t)
    checks.check_absmax(f32(scans.absmax_grid_stride), name="absmax, grid-stride", block=t)

    def argmax(out, x):
        scans.argmax_grid_stride(out, x.view(np.uint32))
    checks.check_argmax(argmax, block=t)
    for acc, kernel in [("float32", scans.sum_f32), ("float64", scans.sum_f64_accumulate), ("kahan", scans.sum_kahan)]:
        checks.check_sum(scans.sum_launcher(kernel), accumulation=acc, block=t)
    checks.check_scan(scans.scan_three_kernels, tile=scans.TILE, name="three-kernel scan")
    checks.check_scan(scans.scan_single_pass_launch, tile=scans.TILE, name="single-pass scan",
                      kernel=scans.scan_single_pass)
    for label, launch in sgemm.PROGRESSION:
        tiles = (sgemm.TILE,) * 3 if label[0] in "123" else (
            (sgemm.BM4, sgemm.BN4, sgemm.BK4) if label[0] == "4" else (sgemm.BM, sgemm.BN, sgemm.BK))
        shapes = checks.gemm_shapes(*tiles, large=0 if sim else None)
        if sim:
            shapes = shapes[:3]
        checks.check_gemm(launch, name=f"SGEMM {label}", tiles=tiles, shapes=shapes)
    d = sgemm.DGEMM_TILES
    checks.check_gemm(sgemm.launch_dgemm, name="DGEMM", precision="float64", tiles=(d.bm, d.bn, d.bk),
                      shapes=checks.gemm_shapes(d.bm, d.bn, d.bk, large=0 if sim else None)[: 3 if sim else 5])
    cuda.synchronize()


def memory_bound(results: dict):
    """Reductions and scans at 2^26 elements against the copy roofline, beside CuPy."""
    from numba import cuda

    from kernel_lab.reductions_gemm import scans
    from kernel_lab.checks.reductions_gemm import sum_errors

    n = 1 << 26
    rng = np.random.default_rng(0)
    x = cuda.to_device(rng.standard_normal(n).astype(np.float32))
    bits = x.view(np.uint32)
    out_u = cuda.device_array(1, np.uint32)
    out_i = cuda.device_array(1, np.int64)
    out_d = cuda.device_array(1, np.float64)
    key = cuda.device_array(1, np.uint64)
    partials = cuda.device_array(-(-n // scans.THREADS), np.uint32)
    y = cuda.device_array(n, np.float32)
    tiles = -(-n // scans.TILE)
    three = (cuda.device_array(tiles, np.float32), cuda.device_array(tiles, np.float32))
    single = scans.single_pass_scratch(tiles)

    def argmax_no_copy():
        scans.zero_first[1, 1](key)
        scans.argmax_persistent[scans.persistent_blocks(n), scans.THREADS](bits, key)

    read = 4 * n
    cases = [
        ("absmax one atomic per block", lambda: scans.absmax_one_pass(out_u, bits), read),
        ("absmax two passes", lambda: scans.absmax_two_pass(out_u, bits, partials), read),
        ("absmax grid-stride", lambda: scans.absmax_grid_stride(out_u, bits), read),
        ("argmax grid-stride", argmax_no_copy, read),
        ("sum float32", lambda: scans.sum_launcher(scans.sum_f32)(out_d, x), read),
        ("sum float64 accumulation", lambda: scans.sum_launcher(scans.sum_f64_accumulate)(out_d, x), read),
        ("sum Kahan", lambda: scans.sum_launcher(scans.sum_kahan)(out_d, x), read),
        ("scan three kernels", lambda: scans.scan_three_kernels(y, x, three), 8 * n),
        ("scan single pass", lambda: scans.scan_single_pass_launch(y, x, single), 8 * n),
    ]
    try:
        import cupy as cp

        cx = cp.asarray(x)
        cy = cp.asarray(y)
        cases += [("CuPy abs(x).max()", lambda: cp.abs(cx).max(), read),
                  ("CuPy argmax", lambda: cp.argmax(cx), read),
                  ("CuPy sum", lambda: cp.sum(cx), read),
                  ("CuPy cumsum", lambda: cp.cumsum(cx, out=cy), 8 * n)]
    except Exception as exc:  # noqa: BLE001
        print(f"(no CuPy baselines: {exc})")
    rows = []
    for label, fn, nbytes in cases:
        m = kl.benchmark(label, fn, bytes=nbytes, repeat=10, quiet=True)
        rows.append(dict(kernel=label, ms=m.ms, gbps=m.gbps, fraction=m.fraction))
        print(f"{label:<30} {m.ms * 1000:9.1f} us {m.gbps:8.0f} GB/s {100 * m.fraction:5.1f}% of copy", flush=True)
    results["memory_bound"] = rows
    errs = sum_errors({"float32": scans.sum_launcher(scans.sum_f32),
                       "float64 accumulation": scans.sum_launcher(scans.sum_f64_accumulate),
                       "Kahan": scans.sum_launcher(scans.sum_kahan)}, 1 << 24)
    for k, v in errs.items():
        print(f"sum error, {k:<22} {v:10.4f} units of float32 roundoff (worst of 3, n = 2^24)")
    results["sum_errors_u"] = errs


def dgemm(results: dict, size=4096):
    from numba import cuda

    from kernel_lab.reductions_gemm import sgemm
    from kernel_lab.bench import time_ms
    from kernel_lab.reductions_gemm.bench import fma_peak_tflops, kernel_resources

    f32 = fma_peak_tflops(np.float32)
    f64 = fma_peak_tflops(np.float64)
    print(f"FMA rate measured on CUDA cores: float32 {f32:.1f} TFLOP/s, float64 {f64:.1f} TFLOP/s")
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.uniform(-1, 1, (size, size)))
    b = cuda.to_device(rng.uniform(-1, 1, (size, size)))
    c = cuda.device_array((size, size), np.float64)
    flops = 2.0 * size**3
    launch = sgemm.warptile_launcher(sgemm.DGEMM_TILES)
    ms = statistics.median(time_ms(lambda: launch(c, a, b), warmup=1, repeat=5))
    row = dict(kernel="DGEMM CUDA cores", ms=ms, tflops=flops / ms / 1e9, fp64_fma_tflops=f64,
               fp32_fma_tflops=f32, resources=kernel_resources(launch, c, a, b))
    try:
        import cupy as cp

        ca, cb = cp.asarray(a), cp.asarray(b)
        cc = cp.empty((size, size))
        base = statistics.median(time_ms(lambda: cp.matmul(ca, cb, out=cc), warmup=2, repeat=5))
        row["cublas_ms"] = base
        row["cublas_tflops"] = flops / base / 1e9
        row["error"] = float(cp.abs(cp.asarray(c) - cc).max() / cp.abs(cc).max())
    except Exception as exc:  # noqa: BLE001
        print(f"(no cuBLAS DGEMM: {exc})")
    print(f"DGEMM {size}^3 on CUDA cores: {row['tflops']:.2f} TFLOP/s = {row['tflops'] / f64:.0%} of the FP64 FMA rate"
          + (f"; cuBLAS DGEMM {row['cublas_tflops']:.2f} TFLOP/s (tensor cores on Hopper): ratio "
             f"{row['tflops'] / row['cublas_tflops']:.2f}x; max rel. difference {row['error']:.1e}"
             if "cublas_tflops" in row else "") + f"; {row['resources']}")
    results["dgemm"] = row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="run in the CUDA simulator at tiny sizes (no timings)")
    p.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--skip-checks", action="store_true")
    args = p.parse_args(argv)
    if args.sim and not kl.on_simulator():
        print("--sim: set NUMBA_ENABLE_CUDASIM=1 (this machine has a GPU)", file=sys.stderr)
        return 2
    env = kl.setup()
    if env.simulator and not args.sim:
        print("no GPU found: running the simulator path (--sim)")
    start = time.time()
    results = {"gpu": env.gpu.name, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if not args.skip_checks:
        section("checks")
        run_checks(env.simulator)
    if env.simulator:
        section("SGEMM progression in the simulator (correctness only)")
        from kernel_lab.reductions_gemm.bench import simulator_progression

        simulator_progression()
        print(f"\nsimulator probe done in {time.time() - start:.0f} s")
        return 0
    section("rooflines")
    results["rooflines"] = kl.rooflines()
    section("reductions and scans, 2^26 float32 elements")
    memory_bound(results)
    section("SGEMM progression")
    from kernel_lab.reductions_gemm.bench import progression, table

    rows = progression(args.sizes, log=lambda s: print(s, flush=True))
    results["sgemm"] = rows
    print("\n" + table(rows))
    section("DGEMM")
    dgemm(results)
    print(f"\nprobe done in {time.time() - start:.0f} s")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "module02_probe.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
