#!/usr/bin/env python3
"""Module 05's integer half on a GPU in one call: check every kernel, then time each against its ceiling.

    PYTHONPATH=utilities python scripts/gpu_module05_integer_probe.py          # on a GPU (about 2-3 minutes)
    PYTHONPATH=utilities python scripts/gpu_module05_integer_probe.py --sim    # in the simulator, tiny sizes

1. checks: every integer kernel of ``kernel_lab.quant`` (``int8``, ``int4``, ``ternary``, ``int8_gemm``,
   ``w4a8``) through ``kernel_lab.checks.quantization``
   (bit-exact quantizers, exact integer GEMMs), and the count of IDP.4A instructions in the SASS;
2. quantize / dequantize kernels (INT8 per tensor, affine UINT8 per channel, INT4 groups, ternary,
   per-token INT8) on 2^26 values: fraction of the copy roofline (goal >= 85%) and speed against the
   same operation composed from CuPy element-wise calls;
3. the DP4A GEMM at 4096^3 against module 02's best SGEMM (goal >= 2x its ops/s), cuBLAS SGEMM
   (CuPy) and cuBLASLt int8 (nvmath-python), with the W8A8 epilogue;
4. decode shapes (M = 1, 4, 16, 64; N = K = 4096): W4A8 at a fraction of the copy roofline on its
   weight bytes (goal >= 60%), beside W8A8, the ternary GEMM, cuBLAS SGEMM and cuBLASLt int8.
Everything is printed; with $OUT set, also written to $OUT/module05_integer_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402


def section(title):
    print(f"\n=== {title} ===", flush=True)


def run_checks(sim: bool, results: dict):
    from kernel_lab.checks import quantization as checks
    from kernel_lab.reductions_gemm import scans
    from kernel_lab.quant import int8 as I8
    from kernel_lab.quant import ternary
    from kernel_lab.quant import int8_gemm
    from kernel_lab.quant import w4a8
    from kernel_lab.quant import int4 as I4

    small = dict(shapes=[("1 x 5 x 5", (1, 5, 5)), ("3 x 6 x 137", (3, 6, 137))]) if sim else {}

    def given(q, s, x, amax):
        I8.int8_quantize[scans.persistent_blocks(x.size), scans.THREADS](x, amax, q, s)
    checks.check_int8_quantize(given)
    checks.check_int8_quantize(I8.launch_int8_quantize, given_amax=False, name="int8 quantize, absmax on the GPU")
    checks.check_int8_dequantize(I8.launch_int8_dequantize)
    checks.check_int8_quantize(I8.launch_int8_quantize_x4, name="int8 quantize x4")  # any size: a scalar tail
    checks.check_int8_dequantize(I8.launch_int8_dequantize_x4, name="int8 dequantize x4")
    checks.check_affine_rows(I8.launch_affine_quantize_rows)
    checks.check_int4_quantize(I4.launch_int4_quantize)
    checks.check_int4_dequantize(I4.launch_int4_dequantize)
    checks.check_int4_quantize(lambda p, s, x: I4.launch_int4_quantize_rows(p, s, x, form="x8"),
                               name="int4 quantize rows x8")
    checks.check_int4_dequantize(I4.launch_int4_dequantize_tile4, name="int4 dequantize tile4")
    checks.check_ternary_quantize(ternary.launch_ternary_quantize)
    checks.check_abs_sum(ternary.launch_abs_sum_x4, name="abs sum x4")
    checks.check_ternary_quantize(ternary.launch_ternary_quantize_fast, name="ternary quantize x16", whole_words=True)
    checks.check_int8_rows(ternary.launch_int8_rows)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm, **small)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_dp4a, name="ternary gemm, warp + DP4A", **small)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_rows4, name="ternary gemm, four rows per pass", **small)
    checks.check_int8_gemm(int8_gemm.launch_int8_gemm, name="int8 gemm, naive", **small)
    checks.check_int8_gemm(int8_gemm.launch_dp4a_gemm, name="int8 gemm, tiled", **small)
    checks.check_int8_gemm(int8_gemm.dp4a_warptile_launcher(w8a8=True).checked, name="w8a8 gemm", epilogue=True,
                           **small)
    checks.check_w4a8_gemm(w4a8.launch_w4a8_gemm, **small)
    if not sim:
        for label, kern in [("naive", int8_gemm.int8_gemm_dp4a), ("tiled", int8_gemm.launch_dp4a_gemm),
                            ("w4a8", w4a8.w4a8_gemm)]:
            count = int8_gemm.sass_count(kern, "IDP.4A")
            results[f"IDP.4A in {label}"] = count
            print(f"IDP.4A instructions in the SASS of the {label} kernel: {count}", flush=True)


def _cupy():
    try:
        import cupy as cp
        return cp
    except ImportError:
        return None


def _lt():
    try:
        import nvmath  # noqa: F401

        from kernel_lab.tensor_cores.peers import CublasLtInt8
        return CublasLtInt8
    except ImportError:
        return None


def _line(m, extra=""):
    frac = f"{100 * m.fraction:5.1f}% of the copy roofline" if m.fraction is not None else ""
    return f"{m.name:<40} {m.ms * 1000:9.1f} us  {frac}{extra}"


def memory_bound(sim: bool, results: dict):
    from numba import cuda

    from kernel_lab.reductions_gemm import scans
    from kernel_lab.quant import int8 as I8
    from kernel_lab.quant import ternary

    from kernel_lab.quant import int4 as I4
    from kernel_lab.quant.integer import INT4_GROUP

    cp = None if sim else _cupy()
    rows, cols = (4, 300) if sim else (8192, 8192)
    n = rows * cols
    rng = np.random.default_rng(0)
    xh = rng.standard_normal((rows, cols)).astype(np.float32)
    x2 = cuda.to_device(xh)
    x = x2.reshape(n)
    q, scale, amax = cuda.device_array(n, np.int8), cuda.device_array(1, np.float32), cuda.device_array(1, np.float32)
    out = cuda.device_array(n, np.float32)
    I8.launch_int8_quantize(q, scale, x, amax)
    q2, rs = cuda.device_array((rows, cols), np.int8), cuda.device_array(rows, np.float32)
    lo, hi = cuda.to_device(xh.min(1)), cuda.to_device(xh.max(1))
    qa, sa, za = cuda.device_array((rows, cols), np.uint8), cuda.device_array(rows, np.float32), cuda.device_array(rows, np.int32)
    pk = cuda.device_array((rows, cols // 2), np.uint8)
    gs = cuda.device_array((rows, -(-cols // INT4_GROUP)), np.float32)
    I4.launch_int4_quantize(pk, gs, x2)
    out2 = cuda.device_array((rows, cols), np.float32)
    tp, ts = cuda.device_array((rows, -(-cols // 4)), np.uint8), cuda.device_array(1, np.float32)
    int4_bytes = 4 * n + n // 2 + 4 * gs.size
    ours = [
        ("int8 quantize (scale given)",
         lambda: I8.int8_quantize[scans.persistent_blocks(n), scans.THREADS](x, amax, q, scale), 5 * n),
        ("int8 absmax + quantize", lambda: I8.launch_int8_quantize(q, scale, x, amax), 9 * n),
        ("int8 dequantize", lambda: I8.launch_int8_dequantize(out, q, scale), 5 * n),
        ("int8 quantize x4 (tile of 4 x 16 B)", lambda: I8.launch_int8_quantize_x4(q, scale, x, amax), 5 * n),
        ("int8 dequantize x4 (tile of 4 words)", lambda: I8.launch_int8_dequantize_x4(out, q, scale), 5 * n),
        ("uint8 affine per channel", lambda: I8.launch_affine_quantize_rows(qa, sa, za, x2, lo, hi), 5 * n),
        ("int8 per token (rows)", lambda: ternary.launch_int8_rows(q2, rs, x2), 5 * n),
        ("int4 quantize, groups of 128", lambda: I4.launch_int4_quantize(pk, gs, x2), int4_bytes),
        ("int4 dequantize", lambda: I4.launch_int4_dequantize(out2, pk, gs), int4_bytes),
        ("ternary absmean + pack (2 passes)", lambda: ternary.launch_ternary_quantize(tp, ts, x2), 8 * n + n // 4),
        # the package's fast forms (same bits as the kernels above)
        ("uint8 affine per channel, x4 tile (package)",
         lambda: I8.launch_affine_quantize_rows_x4(qa, sa, za, x2, lo, hi), 5 * n),
        ("int8 per token, team per row (package)", lambda: ternary.launch_int8_rows_fast(q2, rs, x2), 5 * n),
        ("int4 quantize, 2-D grid, uint64 (package)",
         lambda: I4.launch_int4_quantize_rows(pk, gs, x2, unsigned=True), int4_bytes),
        ("int4 quantize, a group on 16 lanes (package)",
         lambda: I4.launch_int4_quantize_rows(pk, gs, x2, form="x8"), int4_bytes),
        ("int4 dequantize, tile4 (package)", lambda: I4.launch_int4_dequantize_tile4(out2, pk, gs), int4_bytes),
        ("ternary absmean + pack, x16 (package, 2 passes)", lambda: ternary.launch_ternary_quantize_fast(tp, ts, x2),
         8 * n + n // 4),
    ]
    peers = {}
    if cp is not None:
        cx, cx2, cs, cq = cp.asarray(x), cp.asarray(x2), cp.asarray(scale), cp.asarray(q)
        clo, chi, cpk, cgs = cp.asarray(lo), cp.asarray(hi), cp.asarray(pk), cp.asarray(gs)

        def affine():
            s = (chi - clo) / 255
            z = cp.clip(cp.rint(-clo / s), 0, 255)
            return cp.clip(cp.rint(cx2 / s[:, None]) + z[:, None], 0, 255).astype(cp.uint8)

        def rows_int8():
            s = cp.abs(cx2).max(axis=1) / 127
            return cp.clip(cp.rint(cx2 / s[:, None]), -127, 127).astype(cp.int8)

        def int4_dequant():
            lo4 = ((cpk & 0xF).astype(cp.int8) ^ 8) - 8
            hi4 = ((cpk >> 4).astype(cp.int8) ^ 8) - 8
            both = cp.stack([lo4, hi4], axis=-1).reshape(rows, -1)
            return both.astype(cp.float32) * cp.repeat(cgs, INT4_GROUP, axis=1)

        peers = {"int8 quantize (scale given)": lambda: cp.clip(cp.rint(cx / cs), -127, 127).astype(cp.int8),
                 "int8 quantize x4 (tile of 4 x 16 B)": lambda: cp.clip(cp.rint(cx / cs), -127, 127).astype(cp.int8),
                 "int8 dequantize x4 (tile of 4 words)": lambda: cq.astype(cp.float32) * cs,
                 "int8 absmax + quantize": lambda: cp.clip(cp.rint(cx / (cp.abs(cx).max() / 127)), -127, 127).astype(cp.int8),
                 "int8 dequantize": lambda: cq.astype(cp.float32) * cs,
                 "uint8 affine per channel": affine, "int8 per token (rows)": rows_int8,
                 "int4 dequantize": int4_dequant,
                 "uint8 affine per channel, x4 tile (package)": affine,
                 "int8 per token, team per row (package)": rows_int8,
                 "int4 dequantize, tile4 (package)": int4_dequant}
    table = {}
    for name, fn, moved in ours:
        m = kl.benchmark(name, fn, bytes=moved, inputs=(x,), quiet=True)
        if m.ms is None:
            print(f"{name}: {kl.bench.SIMULATOR_NOTE}")
            continue
        extra, entry = "", {"us": m.ms * 1000, "fraction": m.fraction}
        if name in peers:
            p = kl.benchmark("CuPy " + name, peers[name], bytes=moved, quiet=True)
            entry["cupy_us"] = p.ms * 1000
            extra = f"   CuPy composed: {p.ms * 1000:8.1f} us ({p.ms / m.ms:.1f}x slower)"
        goal = "" if "absmax +" in name else ("  goal 85%: " + ("reached" if m.fraction >= 0.85 else "NOT reached"))
        print(_line(m, extra + goal), flush=True)
        table[name] = entry
    results["memory_bound"] = table


def gemms(sim: bool, results: dict):
    from numba import cuda

    from kernel_lab.reductions_gemm import sgemm
    from kernel_lab.quant import integer as ref
    from kernel_lab.quant import ternary
    from kernel_lab.quant import int8_gemm
    from kernel_lab.quant import w4a8

    cp = None if sim else _cupy()
    Lt = None if sim else _lt()
    n = 48 if sim else 4096
    rng = np.random.default_rng(1)
    A = rng.integers(-127, 128, (n, n)).astype(np.int8)
    B = rng.integers(-127, 128, (n, n)).astype(np.int8)
    a32, b32 = cuda.to_device(ref.as_words(A)), cuda.to_device(ref.as_words(B))
    c32, cf = cuda.device_array((n, n), np.int32), cuda.device_array((n, n), np.float32)
    sa, sb = cuda.to_device(np.full(n, 0.01, np.float32)), cuda.to_device(np.full(n, 0.02, np.float32))
    af, bf = cuda.to_device(A.astype(np.float32)), cuda.to_device(np.ascontiguousarray(B.T).astype(np.float32))
    ops = 2 * n ** 3
    runs = [("DP4A, one output per thread", lambda: int8_gemm.launch_int8_gemm(c32, a32, b32)),
            ("DP4A, tiled", lambda: int8_gemm.launch_dp4a_gemm(c32, a32, b32)),
            ("module 02's double-buffered SGEMM", lambda: sgemm.launch_double_buffered(cf, af, bf))]
    warp_dp4a = int8_gemm.dp4a_warptile_launcher()  # module 02's warp-tiled kernel with a DP4A per FFMA (05.6)
    w8a8 = int8_gemm.dp4a_warptile_launcher(w8a8=True)  # the same with the dequantizing epilogue
    b32k = int8_gemm.k_major_words(b32)
    runs.insert(2, ("W8A8 warp-tiled (dequantizing epilogue)", lambda: w8a8(cf, a32, b32k, sa, sb)))
    runs.insert(2, ("DP4A, warp-tiled (module 02's, package)", lambda: warp_dp4a(c32, a32, b32k)))
    if not sim:  # 02.3's tuner: its fastest tiles at this size, as 05.6 measures
        best_sgemm = sgemm.warptile_launcher(sgemm.autotune(n, n, n).best)
        runs.append(("module 02's best SGEMM (autotuned)", lambda: best_sgemm(cf, af, bf)))
    if cp is not None:
        caf, cbf = cp.asarray(af), cp.asarray(bf)
        runs.append(("cuBLAS SGEMM (CuPy)", lambda: caf @ cbf))
    if Lt is not None:
        lt = Lt(n, n, n)
        ca, cb, cc = cp.asarray(A), cp.asarray(B), cp.empty((n, n), cp.int32)
        runs.append(("cuBLASLt int8", lambda: lt(ca, cb, cc)))
    big = {}
    for name, fn in runs:
        m = kl.benchmark(name, fn, flops=ops, peak="sgemm", inputs=(a32,), quiet=True, repeat=10)
        if m.ms is None:
            print(f"{name}: {kl.bench.SIMULATOR_NOTE}")
            continue
        big[name] = {"us": m.ms * 1000, "tops": m.tflops}
        print(f"{name:<40} {m.ms:8.3f} ms  {m.tflops:6.2f} Tops/s  ({100 * m.fraction:.0f}% of cuBLAS SGEMM's rate)",
              flush=True)
    best = "module 02's best SGEMM (autotuned)"
    if best in big:
        for name in ("DP4A, tiled", "DP4A, warp-tiled (module 02's, package)"):
            r = big[name]["tops"] / big[best]["tops"]
            print(f"{name} / module 02's best SGEMM: {r:.2f}x ops/s (goal >= 2x: {'reached' if r >= 2 else 'NOT reached'})")
            big[f"ratio_vs_module02: {name}"] = r
    results[f"gemm_{n}"] = big

    section("decode shapes: W4A8 and peers, N = K = 4096 (fraction of copy roofline on weight bytes)")
    nn, kk = (12, 256) if sim else (4096, 4096)
    Wf = rng.standard_normal((nn, kk)).astype(np.float32)
    wsc = ref.int4_group_scales_f32(Wf)
    w32 = cuda.to_device(ref.int4_pack(ref.int4_quantize_f32(Wf, wsc)).view(np.int32))
    wsd = cuda.to_device(wsc)
    W8, ws8 = ref.int8_per_row_f32(Wf)
    w8, ws8d = cuda.to_device(ref.as_words(W8)), cuda.to_device(ws8)
    w8k = int8_gemm.k_major_words(w8)
    tern = cuda.to_device(ref.ternary_pack(ref.ternary_quantize_f32(Wf, ref.ternary_scale_f32(Wf))))
    tsc = cuda.to_device(np.array([ref.ternary_scale_f32(Wf)], np.float32))
    int4_bytes = nn * kk // 2 + 4 * wsc.size
    decode = {}
    for m_rows in ((1, 5) if sim else (1, 4, 16, 64)):
        Xf = rng.standard_normal((m_rows, kk)).astype(np.float32)
        Xq, xs = ref.int8_per_row_f32(Xf)
        ax, xsd, aq = cuda.to_device(ref.as_words(Xq)), cuda.to_device(xs), cuda.to_device(Xq)
        Y = cuda.device_array((m_rows, nn), np.float32)
        row = [("W4A8", lambda: w4a8.launch_w4a8_gemm(Y, ax, xsd, w32, wsd), int4_bytes),
               ("W8A8 warp-tiled", lambda: w8a8(Y, ax, w8k, xsd, ws8d), nn * kk),
               ("ternary (simple)", lambda: ternary.launch_ternary_gemm(Y, aq, xsd, tern, tsc), nn * kk // 4)]
        if cp is not None:
            cx, cw = cp.asarray(Xf), cp.asarray(Wf)
            row.append(("cuBLAS SGEMM", lambda: cx @ cw.T, 4 * nn * kk))
        if Lt is not None:
            lt = Lt(m_rows, nn, kk)
            cxq, cwq, cc = cp.asarray(Xq), cp.asarray(W8), cp.empty((m_rows, nn), cp.int32)
            row.append(("cuBLASLt int8", lambda: lt(cxq, cwq, cc), nn * kk))
        entry = {}
        for name, fn, wbytes in row:
            m = kl.benchmark(f"{name}, M={m_rows}", fn, bytes=wbytes, inputs=(ax,), quiet=True)
            if m.ms is None:
                print(f"{name}, M={m_rows}: {kl.bench.SIMULATOR_NOTE}")
                continue
            entry[name] = {"us": m.ms * 1000, "fraction_on_weight_bytes": m.fraction}
            print(_line(m), flush=True)
        if "W4A8" in entry:
            f = entry["W4A8"]["fraction_on_weight_bytes"]
            extra = ""
            if "cuBLAS SGEMM" in entry:
                extra = f"; {entry['cuBLAS SGEMM']['us'] / entry['W4A8']['us']:.1f}x faster than cuBLAS SGEMM"
            print(f"  W4A8 at M={m_rows}: {100 * f:.0f}% of the copy roofline on its weight bytes "
                  f"(goal >= 60%: {'reached' if f >= 0.6 else 'NOT reached'}){extra}", flush=True)
        decode[m_rows] = entry
    results["decode"] = decode


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="run in the simulator at tiny sizes (no timings)")
    args = p.parse_args(argv)
    env = kl.setup(quiet=True)
    if args.sim != env.simulator:
        print("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and without --sim a GPU is needed"
              if args.sim else "no GPU found: run with --sim for the simulator path")
        return 2
    results = {"gpu": None if env.simulator else kl.gpu_info().name}
    if not env.simulator:
        section("rooflines")
        results["rooflines"] = kl.rooflines()
    section("checks")
    run_checks(args.sim, results)
    section("quantize / dequantize: fraction of the copy roofline, beside CuPy's composition")
    memory_bound(args.sim, results)
    section("GEMMs at 4096^3: DP4A beside module 02's best SGEMM, cuBLAS SGEMM and cuBLASLt int8")
    gemms(args.sim, results)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "module05_integer_probe.json").write_text(json.dumps(results, indent=1, default=str))
    print("\nsimulator probe done" if args.sim else "\nprobe done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
