#!/usr/bin/env python3
"""Module 03 (fusion) on a GPU in one call: check every kernel, then time each against its
roofline and its library peer, and judge the issue's goals.

    PYTHONPATH=utilities python scripts/gpu_module03_probe.py            # on a GPU (a few minutes)
    PYTHONPATH=utilities python scripts/gpu_module03_probe.py --sim      # in the simulator: checks only

1. checks: every kernel of kernel_lab.fusion through kernel_lab.checks.fusion (adversarial shapes);
2. GEMM + bias + ReLU at M = N = 4096, K = 32 .. 4096: unfused (three kernels) vs fused (module
   02's warp-tiled SGEMM with the epilogue), beside cuBLAS + one element-wise kernel (CuPy);
   goal: fused never slower than unfused;
3. 3x3 convolution + bias + ReLU over the issue's shapes, every variant, beside cuDNN in true fp32
   and in TF32 (PyTorch, optional); goals: the best variant within 1.5x of cuDNN fp32 on the two
   largest shapes, faster than it on at least one small shape;
4. LayerNorm + GELU, float32 and float16, rows of 128 .. 8192, one warp per row and one block per
   row, fraction of the copy roofline, beside PyTorch's LayerNorm then GELU; goals: >= 85% of the
   copy roofline and >= 2x PyTorch;
5. epilogues at 4096^3: each epilogue's GEMM against the plain GEMM, and each one's compile time.
Everything is printed; with $OUT set, also written to $OUT/module03_probe.json.
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


def section(title):
    print(f"\n=== {title} ===", flush=True)


def optional(name):
    try:
        return __import__(name)
    except ImportError:
        print(f"({name} is not installed: its peer is skipped)")
        return None


def run_checks():
    from kernel_lab.checks import fusion as checks
    from kernel_lab.fusion import conv, epilogues, gemm_bias_relu as gbr, layernorm as ln

    checks.check_gemm_bias_relu(gbr.launch_unfused, name="GEMM + bias + ReLU, unfused")
    checks.check_gemm_bias_relu(gbr.launch_fused, name="GEMM + bias + ReLU, fused")
    checks.check_bytes_moved(gbr.bytes_moved)
    for label, launch in conv.VARIANTS.items():
        checks.check_conv(launch, name=f"conv: {label}")
    for dtype in ("float32", "float16"):
        checks.check_layernorm_gelu(ln.launch_warp_per_row, dtype=dtype, name="LayerNorm + GELU, warp per row")
        checks.check_layernorm_gelu(ln.launch_block_per_row, dtype=dtype, name="LayerNorm + GELU, block per row",
                                    max_n=ln.block_row_limit(ln.BLOCK))
        checks.check_layernorm_gelu(ln.launch_layernorm_gelu, dtype=dtype, name="LayerNorm + GELU, x4 kernels",
                                    max_n=ln.block_row_limit(ln.BLOCK))
    for label, (fn, _) in epilogues.EPILOGUES.items():
        checks.check_epilogue(epilogues.gemm_with(fn), label)
    checks.check_row_softmax(epilogues.launch_row_softmax)


def gemm_bias_relu(results, cp):
    from kernel_lab.fusion import gemm_bias_relu as gbr

    launchers = {"unfused": gbr.launch_unfused, "fused": gbr.launch_fused}
    if cp is not None:
        launchers["cuBLAS + element-wise"] = gbr.cupy_peer(cp)
    sweep = gbr.sweep_k(launchers)
    rows = []
    print(f"M = N = {gbr.SWEEP.m}")
    print(f"{'K':>6} " + " ".join(f"{n:>24}" for n in launchers) + f" {'fused speedup':>14} {'sgemm frac':>11}")
    for i, k in enumerate(gbr.SWEEP.ks):
        ms = {n: sweep[n][i].ms for n in launchers}
        frac = sweep["fused"][i].fraction
        rows.append({"k": k, **{f"{n}_ms": v for n, v in ms.items()}, "fused_speedup": ms["unfused"] / ms["fused"]})
        print(f"{k:>6} " + " ".join(f"{1000 * v:>21.1f} us" for v in ms.values())
              + f" {ms['unfused'] / ms['fused']:>13.2f}x {(100 * frac if frac else float('nan')):>10.0f}%")
    slower = [r["k"] for r in rows if r["fused_ms"] > 1.02 * r["unfused_ms"]]
    print("goal, fused never slower than unfused: " + ("reached" if not slower else f"NOT reached at K = {slower}"))
    results["gemm_bias_relu"] = rows


def convolution(results, torch):
    from kernel_lab.fusion import conv

    table = conv.sweep(conv.VARIANTS, torch=torch)
    base = "direct (i,j,c) + separate ReLU"
    print(conv.sweep_table(table, baseline=base))
    out = {}
    shapes = list(table)
    for shape in shapes:
        row = table[shape]
        best = min(conv.VARIANTS, key=lambda v: row[v].ms)
        line = f"{str(shape):<22} best {best} {row[best].ms:.3f} ms"
        if row[best].fraction:
            line += f" ({100 * row[best].fraction:.0f}% of cuBLAS SGEMM's rate)"
        if torch is not None:
            fp32 = row["cuDNN fp32 (allow_tf32=False)"].ms
            tf32 = row["cuDNN TF32 (allow_tf32=True)"].ms
            line += f"; {row[best].ms / fp32:.2f}x cuDNN fp32's time; cuDNN TF32 {tf32:.3f} ms"
        print(line)
        out[str(shape)] = {label: m.ms for label, m in row.items()}
    if torch is not None:
        fp32 = "cuDNN fp32 (allow_tf32=False)"
        large = all(min(table[s][v].ms for v in conv.VARIANTS) <= 1.5 * table[s][fp32].ms for s in shapes[-2:])
        small = any(min(table[s][v].ms for v in conv.VARIANTS) < table[s][fp32].ms for s in shapes[:3])
        print(f"goal, within 1.5x of cuDNN fp32 on the two largest shapes: {'reached' if large else 'NOT reached'}")
        print(f"goal, faster than cuDNN fp32 on a small shape: {'reached' if small else 'NOT reached'}")
    results["conv"] = out


def layernorm(results, torch):
    from kernel_lab.fusion import layernorm as ln

    rng = np.random.default_rng(0)
    out = []
    print("2^25 values per size; % of the copy roofline; speedup over PyTorch LayerNorm then GELU")
    for dtype in (np.float32, np.float16):
        for n in ln.SWEEP.ns:
            rows_n = ln.sweep_rows(n)
            x, gamma, beta, y, mean, rstd = ln.sweep_arrays(n, dtype, rng)
            nbytes = ln.bytes_moved(rows_n, n, np.dtype(dtype).itemsize)
            row = {"dtype": np.dtype(dtype).name, "n": n}
            ms = {}
            if n <= 32 * ln.WARP_VALUES:
                ms["warp"] = kl.benchmark("warp", lambda: ln.launch_warp_per_row(y, mean, rstd, x, gamma, beta),
                                          bytes=nbytes, inputs=(x,), quiet=True)
            if n <= ln.block_row_limit(ln.BLOCK):
                ms["block"] = kl.benchmark("block", lambda: ln.launch_block_per_row(y, mean, rstd, x, gamma, beta),
                                           bytes=nbytes, inputs=(x,), quiet=True)
            ms["x4"] = kl.benchmark("x4", lambda: ln.launch_layernorm_gelu(y, mean, rstd, x, gamma, beta),
                                    bytes=nbytes, inputs=(x,), quiet=True)
            if torch is not None:
                ms["torch"] = kl.benchmark("torch", ln.torch_unfused(torch, x, gamma, beta), bytes=nbytes, quiet=True)
            best = min((k for k in ms if k != "torch"), key=lambda k: ms[k].ms)
            row.update({f"{k}_frac": m.fraction for k, m in ms.items()})
            row["best"] = best
            line = (f"{row['dtype']:>8} N={n:<5} " + "  ".join(f"{k} {100 * m.fraction:5.1f}%" for k, m in ms.items())
                    + f"  best {best}")
            if "torch" in ms:
                row["vs_torch"] = ms["torch"].ms / ms[best].ms
                line += f", {row['vs_torch']:.2f}x PyTorch"
            ok = 100 * ms[best].fraction >= 85 and ("torch" not in ms or row["vs_torch"] >= 2)
            print(line + ("" if ok else "   <- goal not reached"))
            out.append(row)
    results["layernorm_gelu"] = out


def epilogue_costs(results, size=4096):
    from numba import cuda

    from kernel_lab.reductions_gemm import sgemm
    from kernel_lab.fusion import epilogues as ep

    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((size, size), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((size, size), dtype=np.float32))
    c = cuda.device_array((size, size), np.float32)
    aux = ep.epilogue_args(cuda.to_device(rng.standard_normal(size, dtype=np.float32)),
                           cuda.to_device(rng.standard_normal((size, size), dtype=np.float32)), 0.5, 2.0, 1.0)
    plain = sgemm.warptile_launcher(sgemm.WARPTILE)
    base = kl.benchmark("GEMM, no epilogue", lambda: plain(c, a, b), flops=2 * size**3, peak="sgemm", quiet=True)
    print(f"{'GEMM, no epilogue':<36} {base.ms:8.3f} ms  {base.tflops:6.2f} TFLOP/s")
    out = {"none": base.ms}
    for label, (fn, _) in ep.EPILOGUES.items():
        t0 = time.perf_counter()
        launch = ep.gemm_with(fn)
        launch(c, a, b, aux)
        launch(c, a, b, aux)
        m = kl.benchmark(label, lambda launch=launch: launch(c, a, b, aux), flops=2 * size**3, quiet=True)
        print(f"{label:<36} {m.ms:8.3f} ms  {100 * (m.ms / base.ms - 1):+5.1f}%  compile {launch.compile_s:.2f} s "
              f"(first two launches {time.perf_counter() - t0:.2f} s)")
        out[label] = {"ms": m.ms, "compile_s": launch.compile_s}
    results["epilogues"] = out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="run in the CUDA simulator at tiny sizes (checks only)")
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--only", nargs="*", choices=["gemm", "conv", "layernorm", "epilogues"],
                   help="run only these timing sections")
    args = p.parse_args(argv)
    if args.sim and not kl.on_simulator():
        print("--sim: set NUMBA_ENABLE_CUDASIM=1 (this machine has a GPU)", file=sys.stderr)
        return 2
    env = kl.setup()
    start = time.time()
    results = {"gpu": env.gpu.name, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if not args.skip_checks:
        section("checks")
        run_checks()
    if env.simulator:
        print(f"\nsimulator probe done in {time.time() - start:.0f} s (timings need a GPU)")
        return 0
    cp, torch = optional("cupy"), optional("torch")
    if torch is not None and not torch.cuda.is_available():
        torch = None
    only = set(args.only or ["gemm", "conv", "layernorm", "epilogues"])
    section("rooflines")
    results["rooflines"] = kl.rooflines()
    for key, title, fn in [("gemm", "GEMM + bias + ReLU against K", lambda: gemm_bias_relu(results, cp)),
                           ("conv", "3x3 convolution + bias + ReLU, shape sweep", lambda: convolution(results, torch)),
                           ("layernorm", "LayerNorm + GELU", lambda: layernorm(results, torch)),
                           ("epilogues", "epilogues at 4096^3", lambda: epilogue_costs(results))]:
        if key in only:
            section(title)
            t0 = time.time()
            fn()
            print(f"({time.time() - t0:.0f} s)", flush=True)
    print(f"\nprobe done in {time.time() - start:.0f} s")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "module03_probe.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
