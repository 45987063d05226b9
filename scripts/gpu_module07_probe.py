"""Module 07 on a GPU in one call: check every method, time them, and time the peers.

1. In parallel worker processes, compile the emulated GEMM for each (method, size) asked for (each
   pipeline kernel compiles once per shape; side by side they fill the code-generation cache).
2. Meanwhile, in this process: check every method at an awkward small shape against the NumPy
   scheme (exact INT32 parts, float64 result) and the accurate reference; time the peers:
   cuBLAS DGEMM (CuPy) and cuBLASLt int8 (nvmath-python's bindings), and cuBLAS's own FP64
   emulation where it exists.
3. Time every (method, size) end to end (slicing included), and the slicing alone.

Prints a table last; writes ``probe07.json`` to ``--out``.
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


def _compile_job(spec):
    method, n, slices, cfg = spec
    import kernel_lab  # noqa: F401
    import cupy as cp

    from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm

    t0 = time.perf_counter()
    try:
        g = OzakiGemm(slices, method, OzakiConfig(**cfg))
        a = cp.random.standard_normal((n, n))
        b = cp.random.standard_normal((n, n))
        g(a, b)
        cp.cuda.Device().synchronize()
        return spec, time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001
        return spec, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"


OUT_FILE = [None]


def _save(results):
    if OUT_FILE[0]:
        Path(OUT_FILE[0]).write_text(json.dumps(results, indent=1))


def check_small(results, slices, cfg):
    import cupy as cp
    import numpy as np

    from kernel_lab.ozaki import reference as ref
    from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm

    rng = np.random.default_rng(7)
    m, n, k = 300, 200, 400
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))
    b = rng.standard_normal((k, n))
    c0 = rng.standard_normal((m, n))
    alpha, beta = 0.9, 1.1
    want = ref.emulated_matmul(a, b, slices, alpha, beta, c0)
    exact = ref.accurate_matmul(a, b) * alpha + beta * c0
    da, ea = ref.split(a, slices, 1)
    db, eb = ref.split(b, slices, 0)
    for method in ("unfused", "partial", "fused"):
        t0 = time.perf_counter()
        try:
            g = OzakiGemm(slices, method, OzakiConfig(**cfg))
            c = cp.asarray(c0)
            g(cp.asarray(a), cp.asarray(b), c, alpha, beta)
            got = cp.asnumpy(c)
            line = {"method": method, "seconds": round(time.perf_counter() - t0, 1)}
            st = next(iter(g._shape_state.values()))
            line["exponents_exact"] = bool(np.array_equal(cp.asnumpy(st["ea"]), ea)
                                           and np.array_equal(cp.asnumpy(st["eb"]), eb))
            gda = cp.asnumpy(st["da"])[:slices, :m, :k]
            gdb = cp.asnumpy(st["db"])[:slices, :n, :k]
            line["digits_exact"] = bool(np.array_equal(gda, da) and np.array_equal(gdb, db.transpose(0, 2, 1)))
            if method == "partial":
                line["diagonals_exact"] = bool(np.array_equal(cp.asnumpy(st["parts"]), ref.diagonal_sums(da, db)))
            if method == "unfused":
                line["pairs_exact"] = bool(np.array_equal(cp.asnumpy(st["parts"]), ref.pair_products(da, db)))
            scale = np.abs(alpha) * (np.abs(a) @ np.abs(b)) + np.abs(beta * c0)
            line["max_diff_vs_numpy_scheme_in_u"] = float(np.max(np.abs(got - want) / (2.0**-53 * scale)))
            line["normwise_vs_accurate"] = float(np.linalg.norm(got - exact) / np.linalg.norm(exact))
            line["ok"] = line["max_diff_vs_numpy_scheme_in_u"] < 64 and line["digits_exact"]
        except Exception as exc:  # noqa: BLE001
            line = {"method": method, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        print("check", json.dumps(line), flush=True)
        results["checks"].append(line)
        _save(results)


def time_peers(results, sizes):
    import cupy as cp
    import numpy as np

    from kernel_lab.bench import time_ms
    from kernel_lab.tensor_cores import peers

    for n in sizes:
        a = cp.random.standard_normal((n, n))
        b = cp.random.standard_normal((n, n))
        t = float(np.median(time_ms(lambda: a @ b, warmup=3, repeat=10)))
        results["peers"].append({"name": "cuBLAS DGEMM (CuPy)", "n": n, "ms": t, "tflops": 2 * n**3 / t / 1e9})
        try:
            a8 = cp.random.randint(-128, 128, (n, n), dtype=cp.int8)
            b8 = cp.random.randint(-128, 128, (n, n), dtype=cp.int8)
            out = cp.empty((n, n), dtype=cp.int32)
            lt = peers.CublasLtInt8(n, n, n)
            lt(a8, b8, out)
            ok = bool(cp.array_equal(out[:64], (a8[:64].astype(cp.float64) @ b8.T.astype(cp.float64)).astype(cp.int32)))
            t = float(np.median(time_ms(lambda: lt(a8, b8, out), warmup=3, repeat=10)))
            results["peers"].append({"name": "cuBLASLt int8 (nvmath bindings)", "n": n, "ms": t,
                                     "tops": 2 * n**3 / t / 1e9, "correct": ok})
        except Exception as exc:  # noqa: BLE001
            results["peers"].append({"name": "cuBLASLt int8", "n": n, "error": f"{type(exc).__name__}: {exc}"})
        why = peers.emulated_dgemm_available()
        if why is None:
            try:
                got = peers.emulated_dgemm(a, b)
                err = float(cp.linalg.norm(got - a @ b) / cp.linalg.norm(a @ b))
                t = float(np.median(time_ms(lambda: peers.emulated_dgemm(a, b), warmup=2, repeat=5)))
                results["peers"].append({"name": "cuBLAS FP64 emulation (fixed point)", "n": n, "ms": t,
                                         "tflops": 2 * n**3 / t / 1e9, "diff_vs_dgemm": err})
            except Exception as exc:  # noqa: BLE001
                results["peers"].append({"name": "cuBLAS FP64 emulation", "n": n,
                                         "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print("peers", json.dumps(results["peers"][-3:]), flush=True)
        _save(results)


def time_methods(results, jobs, slices):
    import cupy as cp
    import numpy as np

    from kernel_lab.bench import time_ms
    from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm

    for method, n, _, cfg in jobs:
        try:
            g = OzakiGemm(slices, method, OzakiConfig(**cfg))
            a = cp.random.standard_normal((n, n))
            b = cp.random.standard_normal((n, n))
            c = cp.empty((n, n))
            t0 = time.perf_counter()
            g(a, b, c)
            cp.cuda.Device().synchronize()
            first = time.perf_counter() - t0
            t = float(np.median(time_ms(lambda: g(a, b, c), warmup=2, repeat=7)))
            st = next(iter(g._shape_state.values()))
            ts = float(np.median(time_ms(lambda: g.slice_operands(a, b, st), warmup=2, repeat=7)))
            ref = a @ b
            err = float(cp.linalg.norm(c - ref) / cp.linalg.norm(ref))
            line = {"method": method, "n": n, "cfg": cfg, "ms": t, "tflops": 2 * n**3 / t / 1e9,
                    "slicing_ms": ts, "int8_tops_in_products": slices * (slices + 1) * n**3 / (t - ts) / 1e9,
                    "first_call_s": round(first, 1), "diff_vs_dgemm": err}
        except Exception as exc:  # noqa: BLE001
            line = {"method": method, "n": n, "cfg": cfg, "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc()[-1500:]}
        print("time", json.dumps(line), flush=True)
        results["methods"].append(line)
        _save(results)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    p.add_argument("--slices", type=int, default=7)
    p.add_argument("--jobs", default="fused:4096", help="method:size[:tm,tn,tk,threads,depth[,group_m]];... compiled in parallel, then timed")
    p.add_argument("--peer-sizes", default="4096,8192")
    p.add_argument("--config", default="128,128,128,128,3")
    p.add_argument("--skip-check", action="store_true")
    args = p.parse_args()
    import kernel_lab as kl

    env = kl.setup(quiet=True)
    print(kl.environment.describe(env), flush=True)
    keys = ("tile_m", "tile_n", "tile_k", "threads", "depth", "group_m")
    cfg = dict(zip(keys, (int(x) for x in args.config.split(","))))
    jobs = []
    for item in args.jobs.split(";"):
        if item:
            parts = item.split(":")
            job_cfg = cfg
            if len(parts) == 3:
                values = [int(x) for x in parts[2].split(",")]
                job_cfg = dict(zip(keys, values))
            jobs.append((parts[0], int(parts[1]), args.slices, job_cfg))
    results = {"checks": [], "peers": [], "methods": [], "compiles": []}
    OUT_FILE[0] = str(Path(args.out, "probe07.json"))
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    pool = ProcessPoolExecutor(max_workers=max(1, min(len(jobs), 12)), mp_context=mp.get_context("spawn"))
    futures = [pool.submit(_compile_job, j) for j in jobs]
    if not args.skip_check:
        check_small(results, args.slices, cfg)
    time_peers(results, [int(x) for x in args.peer_sizes.split(",") if x])
    for f in futures:
        spec, secs, err = f.result()
        results["compiles"].append({"job": spec[:2], "cfg": spec[3], "seconds": round(secs, 1), "error": err})
        print("compile", spec[:2], spec[3], round(secs, 1), err or "", flush=True)
        _save(results)
    pool.shutdown()
    print(f"compile phase done at {time.perf_counter() - t0:.0f} s", flush=True)
    time_methods(results, [j for j, c in zip(jobs, results["compiles"]) if not c["error"]], args.slices)
    from kernel_lab.tensor_cores import codegen_cache

    results["codegen_cache"] = codegen_cache.stats()
    Path(args.out, "probe07.json").write_text(json.dumps(results, indent=1))
    print("\n=== summary ===")
    for c in results["checks"]:
        print("check", c.get("method"), "OK" if c.get("ok") else "FAIL", {k: v for k, v in c.items() if k != "trace"})
    for pr in results["peers"]:
        print("peer", pr)
    for mth in results["methods"]:
        print("method", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in mth.items() if k != "trace"})


if __name__ == "__main__":
    main()
