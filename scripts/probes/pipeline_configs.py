#!/usr/bin/env python3
"""How far module 06's pipeline GEMM gets with module 07's tile configuration (issue 10's speed goals).

    PYTHONPATH=utilities python3 scripts/probes/pipeline_configs.py [CONFIG ...] [--sizes 4096 8192]

CONFIG is ``precision:tile_m,tile_n,tile_k,threads,depth[,pG]`` (``pG``: persistent blocks walking
bands of G tile rows) (before ``--sizes``, which takes every number after it) (e.g. ``int8:128,256,128,256,3``). Every
(configuration, size) pair is compiled first, side by side in worker processes (code generation is
CPU work: the pool fills the code-generation and cubin caches), then each is checked against the
library and timed (CUDA events, L2 flushed, median) beside its peer in the same process: cuBLASLt's
int8 GEMM through nvmath-python for int8 (``peers.CublasLtInt8``), cuBLAS through CuPy for fp16
(``cupy.matmul``, fp16 out, module 06.1's peer; the pipeline writes fp32, twice the bytes).

Module 07's fused kernel runs the int8 pipeline at 128x256x128 with two warpgroups and depth 3;
module 06's notebooks used 128x128 tiles with one warpgroup. For fp16 configurations the fused
bias+GELU epilogue is timed too, beside cuBLASLt's GELU_BIAS (nvmath-python), as 06.2 does.

Measured on an H100 (2026-11-26), before and after the package's epilogue stored whole tiles with
cuBLASDx's vector stores (``Epilogue.elementwise``; scripts/probes/pipeline_epilogue.py found it):
before, int8 0.26-0.27x cuBLASLt at 4096^3 and 0.36-0.42x at 8192^3, fp16 0.39-0.44x and 0.48-0.53x
cuBLAS, whatever the tiles. After, at 4096^3 (cuBLASLt int8 99.1 us, cuBLAS fp16 183.9 us, cuBLASLt
GELU_BIAS 191.6 us): int8 128x128x64 (128 threads) 221.5 us, 0.45x; int8 128x256x128 (256 threads)
197.9 us, 0.50x; fp16 128x128x32 (128 threads) 360.5 us, 0.51x; fp16 128x256x64 (256 threads) 289.0
us, 0.64x. The fused bias+GELU did not gain (580.7 and 526.0 us, 0.33x and 0.36x GELU_BIAS): its
per-element loop (coordinates from map_fragment_index, the bias load, GELU in float64 because of
Python float constants) costs 220-240 us, next to 8 us for cuBLASLt's. 8192^3 did not fit the call.

Measured on an H200 (2026-11-26), after the persistent schedule (``pG``) and the element-wise
epilogue in chunks of loads. At 4096^3 (cuBLASLt int8 95.4 us, cuBLAS fp16 182.8 us, GELU_BIAS
188.8 us): fp16 128x256x64 depth 4 273.4 us (0.67x), persistent p8 256.7 us (0.71x), its fused
bias+GELU 331.2 us (0.57x) and 278.0 us (0.68x); int8 128x256x128 depth 3 179.6 us (0.53x), p8 163.4
us (0.58x). Bands of 4 or 16 and depth 3 or 4 moved these by 1-5%. At 8192^3 (cuBLASLt int8 733.6
us, cuBLAS fp16 1435.8 us, GELU_BIAS 1478.2 us): fp16 1890.0 us (0.76x), p8 1728.4 us (0.83x), fused
bias+GELU 2110.9 us (0.70x) and 1783.1 us (0.83x); int8 1057.6 us (0.69x), p8 913.7 us (0.80x).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

from two_phase import compile_side_by_side  # noqa: E402  (this folder: scripts/probes)

DEFAULT = ["int8:128,128,64,128,3", "int8:128,256,128,256,3",
           "float16:128,128,64,256,2", "float16:128,256,64,256,3", "float16:256,128,64,256,3"]


def parse(text):
    """``precision:tile_m,tile_n,tile_k,threads,depth[,pG]``; ``pG``: persistent blocks walking bands
    of G tile rows (``PipelineConfig.persistent_group_m``)."""
    prec, _, dims = text.partition(":")
    fields = dims.split(",")
    tm, tn, tk, threads, depth = (int(x) for x in fields[:5])
    cfg = dict(tile_m=tm, tile_n=tn, tile_k=tk, threads=threads, precision=prec, depth=depth)
    if len(fields) > 5:
        if not fields[5].startswith("p"):
            raise SystemExit(f"the sixth field of {text!r} must be pG (persistent, bands of G tile rows)")
        cfg["persistent_group_m"] = int(fields[5][1:])
    return cfg


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("configs", nargs="*", default=DEFAULT)
    p.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()

    import kernel_lab as kl

    kl.setup(requires=["gpu", "nvmath", "cupy", "cc>=9.0"], quiet=True)
    import cupy as cp

    from kernel_lab.bench import time_ms
    from kernel_lab.tensor_cores import codegen_cache, epilogues, gemm, peers
    from kernel_lab.tensor_cores.configs import PipelineConfig

    codegen_cache.enable(quiet=True)
    cfgs = [parse(c) for c in args.configs]
    specs = [(c, ep, "matrix", (n, n, n)) for n in args.sizes for c in cfgs
             for ep in (("identity", "bias_gelu") if c["precision"] == "float16" else ("identity",))]
    compile_side_by_side(gemm._precompile_worker, specs,
                         lambda spec: f"{PipelineConfig(**spec[0]).label()} {spec[1]} at {spec[3][0]}^3")

    def median(fn):
        return statistics.median(time_ms(fn, warmup=3, repeat=args.repeat))

    for n in args.sizes:
        rng = np.random.default_rng(n)
        flops = 2.0 * n**3
        a8 = cp.asarray(rng.integers(-127, 128, (n, n), dtype=np.int8))
        bt8 = cp.asarray(rng.integers(-127, 128, (n, n), dtype=np.int8))
        o8, lt_out = cp.empty((n, n), cp.int32), cp.empty((n, n), cp.int32)
        lt = peers.CublasLtInt8(n, n, n)
        lt(a8, bt8, lt_out)
        lt_ms = median(lambda: lt(a8, bt8, lt_out))
        a16 = cp.asarray(rng.standard_normal((n, n)).astype(np.float16))
        bt16 = cp.asarray(rng.standard_normal((n, n)).astype(np.float16))
        b16 = cp.ascontiguousarray(bt16.T)
        o16 = cp.empty((n, n), cp.float32)
        ref16 = cp.matmul(a16, b16).astype(cp.float32)
        cub16_ms = median(lambda: cp.matmul(a16, b16))
        bias = cp.asarray(rng.standard_normal(n).astype(np.float32))
        gelu_ms = None
        try:  # cuBLASLt's fused GEMM + bias + GELU, as 06.2 measures it
            from nvmath.linalg.advanced import Matmul, MatmulEpilog

            mm = Matmul(a16, b16)
            mm.plan(epilog=MatmulEpilog.GELU_BIAS, epilog_inputs={"bias": bias.astype(cp.float16)})
            gelu_ms = median(mm.execute)
        except Exception as exc:  # noqa: BLE001
            print(f"no cuBLASLt GELU_BIAS: {type(exc).__name__}: {exc}")
        print(f"\n{n}^3: cuBLASLt int8 {lt_ms * 1e3:.1f} us ({flops / lt_ms / 1e9:.0f} TOP/s); cuBLAS fp16 "
              f"{cub16_ms * 1e3:.1f} us ({flops / cub16_ms / 1e9:.0f} TFLOP/s); cuBLASLt GELU_BIAS "
              f"{gelu_ms * 1e3 if gelu_ms else float('nan'):.1f} us", flush=True)
        for c in cfgs:
            cfg = PipelineConfig(**c)
            t1 = time.perf_counter()
            try:
                k = gemm.PipelineGemm(cfg)
                if cfg.precision == "int8":
                    run = k.launcher(a8, bt8, o8)
                    run()
                    ok = bool(cp.array_equal(o8, lt_out))
                    peer = lt_ms
                else:
                    run = k.launcher(a16, bt16, o16)
                    run()
                    ok = float(cp.abs(o16 - ref16).max() / cp.abs(ref16).max()) < 1e-2
                    peer = cub16_ms
                compile_s = time.perf_counter() - t1
                ms = median(run)
                print(f"  {cfg.label():48s} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.0f} T/s  {peer / ms:5.2f}x peer  "
                      f"{'correct' if ok else 'WRONG'}  (compile here {compile_s:.0f} s)", flush=True)
                if cfg.precision == "float16" and gelu_ms is not None:
                    kg = gemm.PipelineGemm(cfg, epilogues.bias_activation("gelu"))
                    run_g = kg.launcher(a16, bt16, o16, bias)
                    run_g()
                    x = ref16 + bias.astype(cp.float32)[:, None]
                    want = 0.5 * x * (1 + cp.tanh(0.7978845608 * (x + 0.044715 * x**3)))
                    ok_g = float(cp.abs(o16 - want).max() / cp.abs(want).max()) < 1e-2
                    ms_g = median(run_g)
                    print(f"  {'  + fused bias+GELU':48s} {ms_g * 1e3:8.1f} us {flops / ms_g / 1e9:6.0f} T/s  "
                          f"{gelu_ms / ms_g:5.2f}x cuBLASLt GELU_BIAS  {'correct' if ok_g else 'WRONG'}", flush=True)
            except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
                print(f"  {cfg.label():48s} FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
