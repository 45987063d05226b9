#!/usr/bin/env python3
"""Module 05's floating-point formats on a GPU in one call: check every kernel, then time each one.

    PYTHONPATH=utilities python scripts/gpu_module05_float_probe.py          # on a GPU (1-3 minutes)
    PYTHONPATH=utilities python scripts/gpu_module05_float_probe.py --sim    # in the simulator, tiny sizes

1. checks: every FP8 encoder and decoder of kernel_lab.quant.float_kernels (one and four elements
   per thread, E4M3 and E5M2, saturating and not) through module 05's checks, on a GPU including
   all 65,536 float16 bit patterns; numba-cuda's own ``cvt_float_to_fp8`` against the same
   reference on every float16; the NVFP4, MXFP4 and MXFP8 quantizers, and their dequantizers
   against the NumPy references;
2. timings at 2^26 elements (the activations-with-outliers data of the error plot): every encode,
   decode, quantize and dequantize kernel as a fraction of the copy roofline (goal >= 85%), beside
   the same operation composed from CuPy element-wise calls (the NumPy references run on CuPy
   arrays) and PyTorch's native FP8 casts, with the speed-up over each;
3. the table of formats: bits per value, relative error on the plot's two data sets, GB/s and
   fraction of the copy roofline of quantize and dequantize.
Everything is printed; with $OUT set, also written to $OUT/module05_float_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402

GOAL = 0.85


def section(title):
    print(f"\n=== {title} ===", flush=True)


def run_checks(results: dict):
    from numba import cuda

    from kernel_lab.checks import quant_float as checks
    from kernel_lab.quant import float_kernels as fk
    from kernel_lab.quant import fp8

    for fmt in ["E4M3", "E5M2"]:
        for per in [1, 4]:
            checks.check_fp8_decode(lambda o, c, f=fmt, p=per: fk.fp8_decode(o, c, f, per_thread=p), fmt,
                                    name=f"{fmt} decode, {per} per thread")
            for sat in [True, False]:
                checks.check_fp8_encode(lambda o, x, f=fmt, s=sat, p=per: fk.fp8_encode(o, x, f, s, per_thread=p),
                                        fmt, sat, name=f"{fmt} encode ({'sat' if sat else 'nosat'}), {per} per thread")
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    library = {}
    for fmt in ["E4M3", "E5M2"]:
        for sat in [True, False]:
            launch, why = fk.library_fp8_encoder(fmt, sat)
            key = f"{fmt} {'saturating' if sat else 'non-saturating'}"
            if launch is None:
                print(f"numba-cuda cvt_float_to_fp8: {why}")
                library[key] = why
                continue
            out = cuda.device_array(halves.size, np.uint8)
            try:
                launch(out, cuda.to_device(halves))
                got = out.copy_to_host()
            except Exception as exc:  # noqa: BLE001 - report any failure of the library path, go on
                print(f"numba-cuda cvt_float_to_fp8, {key}: failed ({type(exc).__name__}: {exc})")
                library[key] = f"failed: {exc}"
                continue
            want = fp8.encode(halves, fmt, sat)
            nan = np.isnan(halves)
            same = int(np.sum(np.where(nan, fp8.is_nan_code(got, fmt), got == want)))
            print(f"numba-cuda cvt_float_to_fp8, {key}: {same} of {halves.size} float16 inputs agree with the reference")
            library[key] = same
    results["numba_cuda_fp8"] = library
    checks.check_nvfp4_quantize(fk.nvfp4_quantize)
    checks.check_mx_quantize(lambda c, s, x: fk.mx_quantize(c, s, x, "E2M1"), "E2M1")
    checks.check_mx_quantize(lambda c, s, x: fk.mx_quantize(c, s, x, "E4M3"), "E4M3")
    dequantize_checks()
    cuda.synchronize()


def dequantize_checks(n=100_003 if not kl.on_simulator() else 1001):
    from numba import cuda

    from kernel_lab.quant import float_kernels as fk
    from kernel_lab.quant import microscaling as mx

    x = mx.sample_data("activations", n, seed=3)

    def run(launch, *arrays):
        out = cuda.device_array(n, np.float32)
        launch(out, *[cuda.to_device(a) for a in arrays])
        return out.copy_to_host().view(np.uint32)

    p, s, amax = mx.nvfp4_quantize(x)
    ok = np.array_equal(run(fk.nvfp4_dequantize, p, s, np.float32([amax])), mx.nvfp4_dequantize(p, s, amax, n).view(np.uint32))
    print(f"NVFP4 dequantize: {'bit-exact' if ok else 'WRONG'} ({n} elements)")
    for elements, name in [("E2M1", "MXFP4"), ("E4M3", "MXFP8")]:
        c, s = mx.mx_quantize(x, elements)
        got = run(lambda o, c_, s_: fk.mx_dequantize(o, c_, s_, elements), c, s)
        ok2 = np.array_equal(got, mx.mx_dequantize(c, s, n, elements).view(np.uint32))
        print(f"{name} dequantize: {'bit-exact' if ok2 else 'WRONG'} ({n} elements)")
        ok = ok and ok2
    if not ok:
        raise SystemExit("a dequantize kernel disagrees with its reference")


def timings(results: dict, n: int):
    from numba import cuda

    from kernel_lab.reductions_gemm import scans
    from kernel_lab.quant import float_kernels as fk
    from kernel_lab.quant import fp8
    from kernel_lab.quant import microscaling as mx

    try:
        import cupy as cp
    except ImportError:
        cp = None
    try:
        import torch
    except ImportError:
        torch = None
    x_host = mx.sample_data("activations", n, seed=1)
    x = cuda.to_device(x_host)
    codes = cuda.device_array(n, np.uint8)
    values = cuda.device_array(n, np.float32)
    rows = []

    def bench(group, name, fn, nbytes, inputs=()):
        try:
            m = kl.benchmark(name, fn, bytes=nbytes, inputs=inputs, quiet=True)
        except Exception as exc:  # noqa: BLE001 - one failing peer must not cost the rest of the run
            print(f"{group:<18} {name:<36} FAILED: {type(exc).__name__}: {exc}", flush=True)
            if "kernel" in name:
                raise
            return None
        rows.append({"group": group, "name": name, "us": 1000 * m.ms, "gbps": m.gbps, "fraction": m.fraction})
        print(f"{group:<18} {name:<36} {1000 * m.ms:9.1f} us {m.gbps:8.0f} GB/s {100 * m.fraction:6.1f}% of copy",
              flush=True)
        return m

    for fmt in ["E4M3", "E5M2"]:
        fk.fp8_encode(codes, x, fmt, True)
        for per in [1, 4]:
            bench(f"{fmt} encode", f"kernel, {per} per thread", lambda p=per, f=fmt: fk.fp8_encode(codes, x, f, True, per_thread=p),
                  5 * n, (x,))
        lib, why = fk.library_fp8_encoder(fmt, True)
        if lib is not None:
            bench(f"{fmt} encode", "numba-cuda cvt_float_to_fp8", lambda: lib(codes, x), 5 * n)
        if cp is not None:
            cx = cp.asarray(x)
            bench(f"{fmt} encode", "CuPy, composed", lambda f=fmt: fp8.encode(cx, f, True), 5 * n)
        if torch is not None:
            tx = torch.as_tensor(x, device="cuda")
            tdt = torch.float8_e4m3fn if fmt == "E4M3" else torch.float8_e5m2
            bench(f"{fmt} encode", "PyTorch .to(float8)", lambda: tx.to(tdt), 5 * n)
        for per in [1, 4]:
            bench(f"{fmt} decode", f"kernel, {per} per thread", lambda p=per, f=fmt: fk.fp8_decode(values, codes, f, per_thread=p),
                  5 * n)
        if cp is not None:
            cc = cp.asarray(codes)
            bench(f"{fmt} decode", "CuPy, composed", lambda f=fmt: fp8.decode(cc, f), 5 * n)
        if torch is not None:
            t8 = tx.to(tdt)
            bench(f"{fmt} decode", "PyTorch .to(float32)", lambda: t8.to(torch.float32), 5 * n)

    amax = cuda.device_array(1, np.float32)
    bench("NVFP4", "absmax (module 02) for the tensor scale",
          lambda: scans.absmax_grid_stride(amax.view(np.uint32), x.view(np.uint32)), 4 * n)
    packed = cuda.device_array((n + 1) // 2, np.uint8)
    s16 = cuda.device_array(-(-n // 16), np.uint8)
    s32 = cuda.device_array(-(-n // 32), np.uint8)
    nb = {"NVFP4": 4 * n + n // 2 + n // 16, "MXFP4": 4 * n + n // 2 + n // 32, "MXFP8": 5 * n + n // 32}
    bench("NVFP4", "quantize kernel", lambda: fk.nvfp4_quantize(packed, s16, x, amax), nb["NVFP4"])
    bench("NVFP4", "dequantize kernel", lambda: fk.nvfp4_dequantize(values, packed, s16, amax), nb["NVFP4"])
    if cp is not None:
        bench("NVFP4", "CuPy, composed quantize", lambda: mx.nvfp4_quantize(cx), nb["NVFP4"])
    bench("MXFP4", "quantize kernel", lambda: fk.mx_quantize(packed, s32, x, "E2M1"), nb["MXFP4"])
    bench("MXFP4", "dequantize kernel", lambda: fk.mx_dequantize(values, packed, s32, "E2M1"), nb["MXFP4"])
    if cp is not None:
        bench("MXFP4", "CuPy, composed quantize", lambda: mx.mx_quantize(cx, "E2M1"), nb["MXFP4"])
    bench("MXFP8", "quantize kernel", lambda: fk.mx_quantize(codes, s32, x, "E4M3"), nb["MXFP8"])
    bench("MXFP8", "dequantize kernel", lambda: fk.mx_dequantize(values, codes, s32, "E4M3"), nb["MXFP8"])
    if cp is not None:
        bench("MXFP8", "CuPy, composed quantize", lambda: mx.mx_quantize(cx, "E4M3"), nb["MXFP8"])
    results["timings"] = rows

    section(f"goal: every kernel >= {100 * GOAL:.0f}% of the copy roofline, faster than the composed peers")
    for group in dict.fromkeys(r["group"] for r in rows):
        ours = [r for r in rows if r["group"] == group and "kernel" in r["name"]]
        peers = [r for r in rows if r["group"] == group and r not in ours and "absmax" not in r["name"]]
        for r in ours:
            verdict = "reached" if r["fraction"] >= GOAL else "NOT reached"
            vs = ", ".join(f"{p['us'] / r['us']:.1f}x {p['name']}" for p in peers)
            print(f"{group:<12} {r['name']:<22} {100 * r['fraction']:5.1f}%: {verdict}" + (f"; speed-up {vs}" if vs else ""))
    return rows


def formats_table(results: dict, rows, n_err=1 << 16):
    from kernel_lab.quant import microscaling as mx

    table = mx.error_table(n=n_err)
    best = {}
    for r in rows or []:
        if "kernel" in r["name"]:
            key = {"E4M3 encode": "FP8 E4M3 (per tensor)", "E5M2 encode": "FP8 E5M2 (per tensor)"}.get(r["group"], r["group"])
            key = {"E4M3 decode": "FP8 E4M3 (per tensor)", "E5M2 decode": "FP8 E5M2 (per tensor)"}.get(key, key)
            kind = "dequantize" if ("decode" in r["group"] or "dequantize" in r["name"]) else "quantize"
            prev = best.get((key, kind))
            if prev is None or r["fraction"] > prev["fraction"]:
                best[(key, kind)] = r
    print(f"{'format':<24} {'bits':>6} {'err w':>7} {'err a':>7} {'quantize GB/s (roof)':>22} {'dequantize GB/s (roof)':>24}")
    out = {}
    for name, (bits, ew, ea) in table.items():
        q, d = best.get((name, "quantize")), best.get((name, "dequantize"))
        cell = lambda r: f"{r['gbps']:.0f} ({100 * r['fraction']:.0f}%)" if r else "-"  # noqa: E731
        print(f"{name:<24} {bits:>6.2f} {ew:>7.4f} {ea:>7.4f} {cell(q):>22} {cell(d):>24}")
        out[name] = {"bits": bits, "error_weights": ew, "error_activations": ea,
                     "quantize": q and {k: q[k] for k in ("gbps", "fraction")},
                     "dequantize": d and {k: d[k] for k in ("gbps", "fraction")}}
    results["formats"] = out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="run in the CUDA simulator at tiny sizes (no timings)")
    p.add_argument("--n", type=int, default=1 << 26, help="elements for the timings (default 2^26)")
    p.add_argument("--skip-checks", action="store_true")
    args = p.parse_args(argv)
    if args.sim and not kl.on_simulator():
        print("--sim: set NUMBA_ENABLE_CUDASIM=1 (this machine has a GPU)", file=sys.stderr)
        return 2
    env = kl.setup(requires=["warp", "ml_dtypes"])
    if env.simulator and not args.sim:
        print("no GPU found: running the simulator path (--sim)")
    start = time.time()
    results = {"gpu": env.gpu.name, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if not args.skip_checks:
        section("checks")
        run_checks(results)
    rows = None
    if not env.simulator:
        section("rooflines")
        results["rooflines"] = kl.rooflines()
        section(f"timings, {args.n} elements")
        rows = timings(results, args.n)
    section("formats: bits per value, relative error (weights, activations with outliers), speed")
    formats_table(results, rows)
    print(f"\n{'simulator ' if env.simulator else ''}probe done in {time.time() - start:.0f} s")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "module05_float_probe.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
