"""Ozaki scheme II on a GPU: check every buffer against the NumPy scheme, then time it beside Ozaki-I.

1. Check (awkward shape 300 x 400 x 200, rows of very different size, alpha and beta, then a NaN
   row and an Inf column): for each number of moduli and each bound, the exponents, the int8
   remainders and the INT32 products must equal ``ozaki2.py``'s exactly; C must be within a few
   units of roundoff of ``ozaki2.emulated_matmul`` (a GPU may fuse ``alpha * x + beta * c``).
2. Time, for each size: cuBLAS DGEMM (CuPy); ``Ozaki2Gemm`` for each number of moduli, end to end
   and step by step (prepare = exponents + remainders, products = N INT8 GEMMs, reconstruct =
   CRT); ``OzakiGemm`` (Ozaki-I) with ``--slices`` for each ``--ozaki1-methods``; cuBLAS's own FP64
   emulation where this cuBLAS has it. The accuracy of each against DGEMM is printed beside it.

Equal accuracy: 14 moduli and 7 slices give the same normwise error on Gaussian inputs (about
8e-16 at K = 1000; tests/test_ozaki2.py), so the timing to compare is 14 moduli against 7 slices.

Usage (on the GPU machine, after the wheels of scripts/gpu_module07_probe.sh are installed):

    PYTHONPATH=$PWD/utilities python3 scripts/gpu_ozaki2_check.py --out $OUT \\
        --sizes 4096,8192 --moduli 13,14,15 --slices 7 --ozaki1-methods fused,unfused

Writes ``ozaki2.json`` to ``--out`` and prints a summary table last.
"""

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "utilities"))

U = 2.0**-53


def check_small(results, moduli_list, cfg):
    import cupy as cp
    import numpy as np

    from kernel_lab.ozaki import ozaki2
    from kernel_lab.ozaki import reference as ref
    from kernel_lab.ozaki.gpu_ozaki2 import Ozaki2Gemm

    rng = np.random.default_rng(7)
    m, n, k = 300, 200, 400
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))
    b = rng.standard_normal((k, n))
    c0 = rng.standard_normal((m, n))
    alpha, beta = 0.9, 1.1
    exact = ref.accurate_matmul(a, b) * alpha + beta * c0
    scale = abs(alpha) * (np.abs(a) @ np.abs(b)) + np.abs(beta * c0)
    for nm in moduli_list:
        for bound in ozaki2.BOUNDS:
            t0 = time.perf_counter()
            line = {"moduli": nm, "bound": bound}
            try:
                plan = ozaki2.crt_plan(nm)
                g = Ozaki2Gemm(nm, bound, cfg)
                c = cp.asarray(c0)
                g(cp.asarray(a), cp.asarray(b), c, alpha, beta)
                got = cp.asnumpy(c)
                st = next(iter(g._shape_state.values()))
                qa, qb = st["q"]
                mu = ozaki2.scale_exponents(a, nm, 1, bound)
                nu = ozaki2.scale_exponents(b, nm, 0, bound)
                line["exponents_exact"] = bool(np.array_equal(qa - cp.asnumpy(st["ea"]), mu)
                                               and np.array_equal(qb - cp.asnumpy(st["eb"]), nu))
                ra = ozaki2.residues(ozaki2.to_integers(a, mu, 1), plan)
                rb = ozaki2.residues(ozaki2.to_integers(b, nu, 0), plan)
                gra, grb = cp.asnumpy(st["ra"]), cp.asnumpy(st["rb"])
                line["residues_exact"] = bool(np.array_equal(gra[:, :m, :k], ra)
                                              and np.array_equal(grb[:, :n, :k], rb.transpose(0, 2, 1))
                                              and not gra[:, m:].any() and not gra[:, :, k:].any()
                                              and not grb[:, n:].any() and not grb[:, :, k:].any())
                line["products_exact"] = bool(np.array_equal(cp.asnumpy(st["parts"]), ozaki2.residue_products(ra, rb)))
                want = ozaki2.emulated_matmul(a, b, nm, alpha, beta, c0, bound=bound)
                line["max_diff_vs_numpy_scheme_in_u"] = float(np.max(np.abs(got - want) / (U * scale)))
                line["normwise_vs_accurate"] = float(np.linalg.norm(got - exact) / np.linalg.norm(exact))
                line["numpy_normwise_vs_accurate"] = float(np.linalg.norm(want - exact) / np.linalg.norm(exact))
                # Inf/NaN: their rows and columns are DGEMM's (+-Inf or NaN), the rest unchanged
                a2, b2 = a.copy(), b.copy()
                a2[5, 7], b2[3, 11] = np.nan, -np.inf
                c2 = g(cp.asarray(a2), cp.asarray(b2))
                got2 = cp.asnumpy(c2)
                want2 = ozaki2.emulated_matmul(a2, b2, nm, bound=bound)
                line["nonfinite_ok"] = bool(np.array_equal(np.isnan(got2), np.isnan(want2))
                                            and np.allclose(got2[~np.isnan(got2)], want2[~np.isnan(want2)],
                                                            rtol=8 * U, atol=0)
                                            and g.last_nonfinite == 2)
                line["seconds"] = round(time.perf_counter() - t0, 1)
                line["ok"] = (line["exponents_exact"] and line["residues_exact"] and line["products_exact"]
                              and line["max_diff_vs_numpy_scheme_in_u"] < 4 and line["nonfinite_ok"])
            except Exception as exc:  # noqa: BLE001
                line.update(error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
            print("check", json.dumps({x: y for x, y in line.items() if x != "trace"}), flush=True)
            results["checks"].append(line)


def time_all(results, sizes, moduli_list, slices, methods, cfg, repeat):
    import cupy as cp
    import numpy as np

    from kernel_lab.bench import time_ms
    from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm
    from kernel_lab.ozaki.gpu_ozaki2 import Ozaki2Gemm
    from kernel_lab.tensor_cores import peers

    def med(fn):
        return float(np.median(time_ms(fn, warmup=2, repeat=repeat)))

    for n in sizes:
        a = cp.random.standard_normal((n, n))
        b = cp.random.standard_normal((n, n))
        ref = a @ b
        refn = float(cp.linalg.norm(ref))
        flops = 2 * n**3
        t = med(lambda: a @ b)
        results["times"].append({"name": "cuBLAS DGEMM", "n": n, "ms": t, "tflops": flops / t / 1e9})
        print("time", json.dumps(results["times"][-1]), flush=True)
        c = cp.empty((n, n))
        for nm in moduli_list:
            line = {"name": f"Ozaki-II, {nm} moduli", "n": n, "int8_gemms": nm}
            try:
                g = Ozaki2Gemm(nm, "norm", OzakiConfig(**cfg))
                t0 = time.perf_counter()
                g(a, b, c)
                cp.cuda.Device().synchronize()
                line["first_call_s"] = round(time.perf_counter() - t0, 1)
                line["diff_vs_dgemm"] = float(cp.linalg.norm(c - ref)) / refn
                st = next(iter(g._shape_state.values()))
                line["ms"] = med(lambda: g(a, b, c))
                line["prepare_ms"] = med(lambda: g.prepare(a, b, st))
                line["products_ms"] = med(lambda: g.products(st))
                line["reconstruct_ms"] = med(lambda: g.reconstruct(st, 1.0, 0.0, c))
                line["tflops"] = flops / line["ms"] / 1e9
                line["int8_tops_in_products"] = nm * flops / line["products_ms"] / 1e9
            except Exception as exc:  # noqa: BLE001
                line.update(error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-1500:])
            print("time", json.dumps({x: y for x, y in line.items() if x != "trace"}), flush=True)
            results["times"].append(line)
            cp.get_default_memory_pool().free_all_blocks()
        for method in methods:
            line = {"name": f"Ozaki-I {method}, {slices} slices", "n": n, "int8_gemms": slices * (slices + 1) // 2}
            try:
                g = OzakiGemm(slices, method, OzakiConfig(**cfg))
                g(a, b, c)
                line["diff_vs_dgemm"] = float(cp.linalg.norm(c - ref)) / refn
                line["ms"] = med(lambda: g(a, b, c))
                line["tflops"] = flops / line["ms"] / 1e9
            except Exception as exc:  # noqa: BLE001
                line.update(error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-1500:])
            print("time", json.dumps({x: y for x, y in line.items() if x != "trace"}), flush=True)
            results["times"].append(line)
            cp.get_default_memory_pool().free_all_blocks()
        why = peers.emulated_dgemm_available()
        line = {"name": "cuBLAS FP64 emulation (fixed point)", "n": n}
        if why is None:
            try:
                got = peers.emulated_dgemm(a, b)
                line["diff_vs_dgemm"] = float(cp.linalg.norm(got - ref)) / refn
                line["ms"] = med(lambda: peers.emulated_dgemm(a, b))
                line["tflops"] = flops / line["ms"] / 1e9
            except Exception as exc:  # noqa: BLE001
                line["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        else:
            line["unavailable"] = why
        print("time", json.dumps(line), flush=True)
        results["times"].append(line)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--moduli", default="13,14,15")
    p.add_argument("--check-moduli", default="8,14,32")
    p.add_argument("--slices", type=int, default=7)
    p.add_argument("--ozaki1-methods", default="fused,unfused")
    p.add_argument("--config", default="128,128,128,128,3")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--skip-check", action="store_true")
    args = p.parse_args()
    import kernel_lab as kl
    from kernel_lab.ozaki.gpu import OzakiConfig

    env = kl.setup(quiet=True)
    print(kl.environment.describe(env), flush=True)
    tm, tn, tk, nt, dp = (int(x) for x in args.config.split(","))
    cfg = dict(tile_m=tm, tile_n=tn, tile_k=tk, threads=nt, depth=dp)
    results = {"checks": [], "times": [], "config": cfg}
    if not args.skip_check:
        check_small(results, [int(x) for x in args.check_moduli.split(",") if x], OzakiConfig(**cfg))
    time_all(results, [int(x) for x in args.sizes.split(",") if x], [int(x) for x in args.moduli.split(",") if x],
             args.slices, [x for x in args.ozaki1_methods.split(",") if x], cfg, args.repeat)
    Path(args.out, "ozaki2.json").write_text(json.dumps(results, indent=1))
    print("\n=== summary ===")
    for c in results["checks"]:
        print("check", c.get("moduli"), c.get("bound"), "OK" if c.get("ok") else "FAIL",
              {x: y for x, y in c.items() if x not in ("trace", "moduli", "bound")})
    for t in results["times"]:
        print("time", {x: (round(y, 4) if isinstance(y, float) else y) for x, y in t.items() if x != "trace"})


if __name__ == "__main__":
    main()
