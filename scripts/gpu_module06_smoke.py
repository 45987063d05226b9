#!/usr/bin/env python3
"""Module 06 smoke test on a GPU: compile, check and time every kernel the notebooks use.

    PYTHONPATH=utilities:<wheels> python3 scripts/gpu_module06_smoke.py [--budget 540] [--only NAME,...]

Phase 1 (cold compile): with an empty code-generation cache (a fresh folder), every case is
compiled in its own worker process, side by side; each reports its compile time: the *first
compile* a learner waits for (the workers also fill the on-disk cache).
Phase 2 (cached compile, check, time): this process compiles each case again, now from the warm
on-disk cache (a second process: the *cached compile*), checks it against the float64 reference
on shapes that are not multiples of the tiles, and times it beside the library peer at 4096^3.

Each case runs in try/except: a failure prints its full traceback and the others go on. The
table at the end has one row per case; with $OUT set, details go to $OUT/module06_smoke.json and
the log to $OUT/module06_smoke.log. A time budget (default 540 s) skips the remaining cases, and
says so, rather than running over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

T_START = time.time()
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "utilities"))

CHECK = dict(m=300, n=333, k=200)  # not multiples of any tile
BENCH = dict(m=4096, n=4096, k=4096)
LOG_LINES = []


def log(*parts):
    line = " ".join(str(p) for p in parts)
    LOG_LINES.append(line)
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------
# Cases: each returns a dict with the kernel object(s), a check, and a benchmark pair.


def _rng():
    import numpy as np

    return np.random.default_rng(6)


def _randn(shape, dtype, scale=1.0):
    """Random GPU array (not zeros): CuPy, or Numba for bfloat16 (which CuPy may not support)."""
    import cupy as cp
    import numpy as np

    x = _rng().standard_normal(shape) * scale
    if np.dtype(dtype).kind in "iu":
        x = np.clip(np.rint(x * 4), -64, 63)
    x = x.astype(dtype)
    if np.dtype(dtype).name == "bfloat16":
        from numba import cuda

        return cuda.to_device(x)
    return cp.asarray(x)


def host(x):
    import cupy as cp

    return x.copy_to_host() if hasattr(x, "copy_to_host") else cp.asnumpy(x)


def empty(shape, dtype):
    import cupy as cp
    import numpy as np

    if np.dtype(dtype).name == "bfloat16":
        from numba import cuda

        return cuda.device_array(shape, dtype=dtype)
    return cp.empty(shape, dtype=dtype)


def _tk(prec):
    return {"float16": 32, "bfloat16": 32, "tf32": 16, "int8": 64, "int4": 64}[prec]


def case_block(prec, epilogue_name="identity", batch=None):
    """BlockGemm with one epilogue: builder returning (kernel, run_check, bench) callables."""
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import epilogues, gemm, references as ref
    from kernel_lab.tensor_cores.configs import GemmConfig
    from kernel_lab.tensor_cores.precisions import host_dtype

    cfg = GemmConfig(128, 128, _tk(prec), 256, prec)
    kernel = gemm.BlockGemm(cfg, epilogues.by_name(epilogue_name, cfg.tile_m))
    dt = host_dtype(prec)

    def make(m, n, k, bsz=None):
        if prec == "int4":
            a = _randn((m, k), np.int8)
            bvals = np.clip(np.rint(_rng().standard_normal((k, n)) * 3), -8, 7).astype(np.int8)
            b = cp.asarray(ref.pack_int4(bvals))
            b_ref = bvals
        else:
            shape_a = (bsz, m, k) if bsz else (m, k)
            shape_b = (1, k, n) if bsz else (k, n)
            a = _randn(shape_a, dt)
            b = _randn(shape_b, dt)
            if bsz:
                b = cp.broadcast_to(b, (bsz, k, n))  # one B shared by the batch: batch stride 0
            b_ref = np.broadcast_to(host(b[:1]), (bsz, k, n)) if bsz else host(b)
        out = empty(((bsz,) if bsz else ()) + (m, n), kernel.out_dtype)
        extra, ref_fn = (), None
        if epilogue_name == "linear":
            c = _randn((bsz or 1, m, n), np.float32)
            bias = _randn((m,), np.float32)
            extra = (1.5, 0.5, 2.0, c, bias)
            ref_fn = lambda acc: ref.linear(acc, 1.5, 0.5, cp.asnumpy(c).reshape((bsz or 1, m, n))[0] if not bsz  # noqa: E731
                                            else cp.asnumpy(c), 2.0, cp.asnumpy(bias))
        elif epilogue_name.startswith("bias_"):
            bias = _randn((m,), np.float32)
            extra = (bias,)
            ref_fn = lambda acc: ref.bias_activation(acc, cp.asnumpy(bias), epilogue_name[5:])  # noqa: E731
        elif epilogue_name == "quantize_int8":
            extra = (0.01, 3)
            ref_fn = lambda acc: ref.quantize(acc, 0.01, 3)  # noqa: E731
        return a, b, out, extra, ref_fn, b_ref

    def check():
        m, n, k = CHECK["m"], CHECK["n"], CHECK["k"]
        a, b, out, extra, ref_fn, b_ref = make(m, n, k, batch)
        t0 = time.perf_counter()
        kernel(a, b, out, *extra)
        cp.cuda.runtime.deviceSynchronize()
        acc = ref.gemm(host(a) if prec != "tf32" else ref.round_to_tf32(host(a)),
                       b_ref if prec != "tf32" else ref.round_to_tf32(b_ref))
        want = ref_fn(acc) if ref_fn else acc
        return _compare(f"{prec} {epilogue_name}" + (f" batch {batch}" if batch else ""), host(out),
                        want, prec, k, epilogue_name)

    def bench():
        m, n, k = BENCH["m"], BENCH["n"], BENCH["k"]
        a, b, out, extra, _, _ = make(m, n, k, batch)
        ours = kernel.launcher(a, b, out, *extra)
        peer_name, peer = _peer(prec, epilogue_name, a, b, extra, batch)
        return ours, peer_name, peer, 2 * m * n * k * (batch or 1)

    return kernel, check, bench


def _compare(name, got, want, prec, k, epilogue_name):
    import numpy as np

    import kernel_lab as kl

    if epilogue_name == "quantize_int8":
        fmt = "int8"
    elif prec in ("int8", "int4") and epilogue_name == "identity":
        fmt = "int32"
    else:
        fmt = {"int8": "float32", "int4": "float32"}.get(prec, prec)
    kl.check_array(name, got, np.asarray(want), fmt=fmt, k=max(k, 1))
    return "correct"


def _peer(prec, epilogue_name, a, b, extra, batch):
    """The library call a user would make instead, or (None, None)."""
    import cupy as cp

    if epilogue_name in ("bias_relu", "bias_gelu") and prec == "float16":
        try:
            import nvmath
            from nvmath.linalg.advanced import Matmul, MatmulEpilog

            bias16 = extra[0].astype(cp.float16)
            mm = Matmul(a, b)
            mm.plan(epilog=MatmulEpilog.RELU_BIAS if epilogue_name == "bias_relu" else MatmulEpilog.GELU_BIAS,
                    epilog_inputs={"bias": bias16})
            _ = nvmath
            return f"cuBLASLt {epilogue_name.upper()} (nvmath)", lambda: mm.execute()
        except Exception as exc:  # noqa: BLE001
            return f"cuBLASLt epilogue unavailable: {type(exc).__name__}: {exc}"[:120], None
    if prec == "float16":
        return "cuBLAS (cupy.matmul)", lambda: cp.matmul(a, b)
    try:
        import torch
    except ImportError:
        return "no peer (torch not installed)", None
    if prec == "bfloat16":
        ta = torch.as_tensor(host(a).astype("float32"), device="cuda").to(torch.bfloat16)
        tb = torch.as_tensor(host(b).astype("float32"), device="cuda").to(torch.bfloat16)
        return "cuBLAS bf16 (torch.matmul)", lambda: torch.matmul(ta, tb)
    ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
    if prec == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        return "cuBLAS tf32 (torch.matmul)", lambda: torch.matmul(ta, tb)
    if prec == "int8" and batch is None:
        return "cuBLASLt int8 (torch._int_mm)", lambda: torch._int_mm(ta, tb)
    return "no peer", None


def case_softmax():
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import epilogues, gemm, references as ref
    from kernel_lab.tensor_cores.configs import GemmConfig

    cfg = GemmConfig(128, 128, 32, 256, "float16")
    kernel = gemm.BlockGemm(cfg, epilogues.row_softmax_partial(cfg.tile_m))

    def run(m, n, k):
        a, b = _randn((m, k), np.float16, 0.3), _randn((k, n), np.float16, 0.3)
        out = cp.empty((m, n), cp.float32)
        tiles = -(-n // cfg.tile_n)
        rmax, rsum = cp.empty((1, m, tiles), cp.float32), cp.empty((1, m, tiles), cp.float32)
        return a, b, out, rmax, rsum

    def check():
        import kernel_lab as kl

        m, n, k = CHECK["m"], CHECK["n"], CHECK["k"]
        a, b, out, rmax, rsum = run(m, n, k)
        kernel(a, b, out, 0.5, rmax, rsum)
        gemm.softmax_finish(out, rmax, rsum, cfg.tile_n)
        want = ref.row_softmax(ref.gemm(cp.asnumpy(a), cp.asnumpy(b)), 0.5)
        kl.check_array("float16 row softmax", cp.asnumpy(out), want, fmt="float16", k=k)
        return "correct"

    def bench():
        m, n, k = BENCH["m"], BENCH["n"], BENCH["k"]
        a, b, out, rmax, rsum = run(m, n, k)
        first = kernel.launcher(a, b, out, 0.5, rmax, rsum)

        def ours():
            first()
            gemm.softmax_finish(out, rmax, rsum, cfg.tile_n)

        def peer():
            x = cp.matmul(a, b).astype(cp.float32) * 0.5
            x -= x.max(axis=1, keepdims=True)
            cp.exp(x, out=x)
            x /= x.sum(axis=1, keepdims=True)
        return ours, "cupy.matmul + softmax", peer, 2 * m * n * k

    return kernel, check, bench


def case_conv(implicit):
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import gemm, references as ref
    from kernel_lab.tensor_cores.configs import GemmConfig
    from kernel_lab.tensor_cores.validate import ConvGeometry

    cfg = GemmConfig(128, 128, 32, 256, "float16")
    kernel = gemm.BlockGemm(cfg, operand_a="im2col" if implicit else "matrix")

    def run(n, c, h, w, kf, r):
        g = ConvGeometry(n, c, h, w, r, r, r // 2)
        x = _randn((n, c, h, w), np.float16)
        wgt = _randn((kf, c, r, r), np.float16, 0.2)
        wmat = cp.ascontiguousarray(wgt.reshape(kf, -1).T)  # (C*R*S, K)
        out = cp.empty((g.gemm_m, kf), cp.float32)
        cols = None if implicit else cp.empty((g.gemm_m, g.gemm_k), cp.float16)
        return g, x, wgt, wmat, out, cols

    def launch(g, x, wmat, out, cols):
        if implicit:
            return kernel.launcher(x, wmat, out, geometry=g)
        gemm.im2col(x, g, cols)
        run_gemm = kernel.launcher(cols, wmat, out)

        def both():
            gemm.im2col(x, g, cols)
            run_gemm()
        return both

    def check():
        import kernel_lab as kl

        g, x, wgt, wmat, out, cols = run(2, 5, 9, 11, 7, 3)
        launch(g, x, wmat, out, cols)()
        got = ref.conv_as_gemm_output(cp.asnumpy(out), g.n, wgt.shape[0], g.out_h, g.out_w)
        want = ref.conv2d(cp.asnumpy(x), cp.asnumpy(wgt), g.padding)
        kl.check_array(f"conv {'implicit' if implicit else 'im2col'}", got, want, fmt="float16", k=g.gemm_k)
        return "correct"

    def bench():
        g, x, wgt, wmat, out, cols = run(32, 64, 56, 56, 128, 3)
        ours = launch(g, x, wmat, out, cols)
        try:
            import torch

            tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(wgt, device="cuda")
            peer = lambda: torch.nn.functional.conv2d(tx, tw, padding=g.padding)  # noqa: E731
            name = "cuDNN (torch conv2d)"
        except ImportError:
            peer, name = None, "no peer (torch not installed)"
        return ours, name, peer, 2 * g.gemm_m * 128 * g.gemm_k

    return kernel, check, bench


def case_pipeline(prec):
    import cupy as cp
    import numpy as np

    from kernel_lab.tensor_cores import gemm, references as ref
    from kernel_lab.tensor_cores.configs import PipelineConfig

    cfg = PipelineConfig(128, 128, 64 if prec == "int8" else 32, 128, prec, 3)
    kernel = gemm.PipelineGemm(cfg)
    dt = np.int8 if prec == "int8" else np.float16

    def run(m, n, k):
        a, b_t = _randn((m, k), dt), _randn((n, k), dt)
        out = cp.empty((m, n), kernel.out_dtype)
        return a, b_t, out

    def check():
        import kernel_lab as kl

        m, n, k = CHECK["m"], CHECK["n"], CHECK["k"]
        a, b_t, out = run(m, n, k)
        kernel(a, b_t, out)
        want = ref.gemm(cp.asnumpy(a), cp.asnumpy(b_t).T)
        kl.check_array(f"{prec} pipeline", cp.asnumpy(out), want, fmt="int32" if prec == "int8" else "float16", k=k)
        return "correct"

    def bench():
        m, n, k = BENCH["m"], BENCH["n"], BENCH["k"]
        a, b_t, out = run(m, n, k)
        ours = kernel.launcher(a, b_t, out)
        if prec == "float16":
            b = cp.ascontiguousarray(b_t.T)
            return ours, "cuBLAS (cupy.matmul)", lambda: cp.matmul(a, b), 2 * m * n * k
        name, peer = _peer("int8", "identity", a, cp.ascontiguousarray(b_t.T), (), None)
        return ours, name, peer, 2 * m * n * k

    return kernel, check, bench


CASES = {
    "block_fp16": lambda: case_block("float16"),
    "block_bf16": lambda: case_block("bfloat16"),
    "block_tf32": lambda: case_block("tf32"),
    "block_int8": lambda: case_block("int8"),
    "block_int8_quantize": lambda: case_block("int8", "quantize_int8"),
    "block_int4_w4a8": lambda: case_block("int4"),
    "epi_linear": lambda: case_block("float16", "linear"),
    "epi_bias_relu": lambda: case_block("float16", "bias_relu"),
    "epi_bias_gelu": lambda: case_block("float16", "bias_gelu"),
    "epi_bias_sigmoid": lambda: case_block("float16", "bias_sigmoid"),
    "epi_row_softmax": case_softmax,
    "batched_fp16": lambda: case_block("float16", batch=3),
    "conv_im2col": lambda: case_conv(False),
    "conv_implicit": lambda: case_conv(True),
    "pipeline_int8": lambda: case_pipeline("int8"),
    "pipeline_fp16": lambda: case_pipeline("float16"),
}


# ---------------------------------------------------------------------------------------------


def _compile_case(name):
    """Worker: build one case and compile it (through its check's first launch shapes)."""
    import kernel_lab  # noqa: F401

    t0 = time.perf_counter()
    try:
        kernel, check, bench = CASES[name]()
        check()  # compiles, then runs the small check once (also validates the worker's result)
        from kernel_lab.tensor_cores import codegen_cache

        return name, time.perf_counter() - t0, None, codegen_cache.stats()
    except Exception:  # noqa: BLE001
        return name, time.perf_counter() - t0, traceback.format_exc(), {}


def _median_ms(fn, repeat=10):
    import statistics

    from kernel_lab.bench import time_ms

    return statistics.median(time_ms(fn, warmup=2, repeat=repeat, flush_l2=True))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=540.0, help="seconds before remaining cases are skipped")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--cache-dir", default="", help="KERNEL_LAB_CACHE_DIR (default: a fresh temporary folder)")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    names = [n for n in (args.only.split(",") if args.only else CASES) if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="kl06-cache-")
    os.environ["KERNEL_LAB_CACHE_DIR"] = cache_dir  # inherited by the workers
    deadline = T_START + args.budget

    import kernel_lab as kl

    env = kl.setup(requires=["gpu", "nvmath", "cupy", "cc>=8.0", "cuda>=13"])
    log(f"cache folder (empty at start): {cache_dir}")
    rows = {n: {"case": n} for n in names}

    # Phase 1: cold compiles, in parallel worker processes.
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = args.workers or max(1, min(len(names), (os.cpu_count() or 2) - 2, 16))
    log(f"phase 1: first compile of {len(names)} cases in {workers} worker processes (empty cache)")
    t1 = time.time()
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(_compile_case, n): n for n in names}
            for fut in as_completed(futures, timeout=max(30.0, deadline - time.time() - 150)):
                name, seconds, error, stats = fut.result()
                rows[name]["first_compile_s"] = round(seconds, 1)
                rows[name]["first_compile_stats"] = stats
                if error:
                    rows[name]["first_compile_error"] = error
                    log(f"[{name}] FAILED in the worker after {seconds:.0f} s:\n{error}")
                else:
                    log(f"[{name}] first compile + small check: {seconds:.0f} s, codegen {stats}")
    except Exception:  # noqa: BLE001 - timeouts or a broken pool: phase 2 still runs
        log("phase 1 did not finish:\n" + traceback.format_exc())
    log(f"phase 1 took {time.time() - t1:.0f} s")

    # Phase 2: cached compile (this process), check, benchmark.
    from kernel_lab.tensor_cores import codegen_cache

    codegen_cache.enable()
    for name in names:
        row = rows[name]
        if time.time() > deadline:
            row["status"] = "skipped: time budget exceeded"
            log(f"[{name}] skipped: the {args.budget:.0f} s budget is spent")
            continue
        t0 = time.perf_counter()
        try:
            before = dict(codegen_cache.stats())
            kernel, check, bench = CASES[name]()
            row["check"] = check()
            row["cached_compile_s"] = round(kernel.compile_seconds or (time.perf_counter() - t0), 1)
            after = codegen_cache.stats()
            row["cached_codegen_misses"] = after.get("misses", 0) - before.get("misses", 0)
            if time.time() + 20 < deadline:
                ours, peer_name, peer, flops = bench()
                ms = _median_ms(ours)
                row["ms"] = round(ms, 4)
                row["tflops"] = round(flops / ms / 1e9, 1)
                row["peer"] = peer_name
                if peer is not None:
                    try:
                        pms = _median_ms(peer)
                        row["peer_ms"] = round(pms, 4)
                        row["peer_tflops"] = round(flops / pms / 1e9, 1)
                        row["vs_peer"] = round(pms / ms, 2)
                    except Exception as exc:  # noqa: BLE001 - a failing peer does not fail our kernel
                        row["peer"] = f"{peer_name} FAILED: {type(exc).__name__}: {exc}"[:200]
            row["status"] = "ok"
            log(f"[{name}] {json.dumps({k: v for k, v in row.items() if k not in ('first_compile_stats',)})}")
        except Exception:  # noqa: BLE001
            row["status"] = "FAILED"
            row["error"] = traceback.format_exc()
            log(f"[{name}] FAILED:\n{row['error']}")

    # Table
    log("")
    log(f"{'case':<22}{'status':<10}{'1st compile':>12}{'cached':>8}{'check':>9}{'TFLOP/s':>9}{'peer':>9}"
        f"{'vs peer':>8}  peer")
    for name in names:
        r = rows[name]
        log(f"{name:<22}{str(r.get('status', '-'))[:9]:<10}{_f(r.get('first_compile_s'), 's'):>12}"
            f"{_f(r.get('cached_compile_s'), 's'):>8}{str(r.get('check', '-'))[:8]:>9}{_f(r.get('tflops')):>9}"
            f"{_f(r.get('peer_tflops')):>9}{_f(r.get('vs_peer'), 'x'):>8}  {r.get('peer', '')}")
    log(f"GPU: {env.gpu.name}; total {time.time() - T_START:.0f} s; codegen cache {codegen_cache.stats()}; "
        f"disk {codegen_cache.disk_usage(Path(cache_dir) / 'mathdx-codegen')}")
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "module06_smoke.json").write_text(json.dumps(rows, indent=1, default=str))
        (out_dir / "module06_smoke.log").write_text("\n".join(LOG_LINES))
    failed = [n for n in names if rows[n].get("status") == "FAILED"]
    return 1 if failed else 0


def _f(v, unit=""):
    return "-" if v is None else f"{v}{unit}"


if __name__ == "__main__":
    sys.exit(main())
