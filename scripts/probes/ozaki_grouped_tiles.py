#!/usr/bin/env python3
"""Module 07's fused kernel with its output tiles taken in groups of tile rows (L2 reuse), at 8192^3.

    PYTHONPATH=utilities python3 scripts/probes/ozaki_grouped_tiles.py [--groups 0,16] [--n 8192]
    PYTHONPATH=utilities python3 scripts/probes/ozaki_grouped_tiles.py --configs "128,256,128,384,3,0;..."

(``--configs``: whole configurations, tile_m,tile_n,tile_k,threads,depth,group_m, instead of group
sizes of the default one.)

Phase 1 compiles every group size's kernel at once, one process each (filling the cubin cache);
phase 2 times them one after the other, each in a fresh process that finds its kernel in the cache:
end to end with slicing (CUDA events, L2 flushed, median), the error against DGEMM, and the ratio to
cuBLAS DGEMM timed in the same process. (Timing processes side by side on one GPU measures their
contention, not the kernels.)
"""
import argparse
import time

from two_phase import child_main, compile_then_time


KEYS = ("tile_m", "tile_n", "tile_k", "threads", "depth", "group_m")


def parse(spec: str) -> dict:
    """"16" (a group size of the default configuration) or "128,256,128,384,3,0" (a whole one)."""
    values = [int(v) for v in spec.split(",")]
    return {"group_m": values[0]} if len(values) == 1 else dict(zip(KEYS, values))


def child(spec: str, n: int, compile_only: bool) -> dict:
    import kernel_lab as kl

    kl.setup(quiet=True)
    import cupy as cp
    import numpy as np

    from kernel_lab.bench import time_ms
    from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm

    cfg = OzakiConfig(**parse(spec))
    out = {"config": cfg.label(), "n": n}
    try:
        g = OzakiGemm(7, "fused", cfg)
        a = cp.random.standard_normal((n, n))
        b = cp.random.standard_normal((n, n))
        c = cp.empty((n, n))
        t0 = time.perf_counter()
        g(a, b, c)
        cp.cuda.Device().synchronize()
        out["first_call_s"] = round(time.perf_counter() - t0, 1)
        if compile_only:
            return out
        g(a, b, c)  # the second launch (the one that failed)
        cp.cuda.Device().synchronize()
        t = float(np.median(time_ms(lambda: g(a, b, c), warmup=2, repeat=9)))
        ref = a @ b
        out["diff_vs_dgemm"] = float(cp.linalg.norm(c - ref) / cp.linalg.norm(ref))
        td = float(np.median(time_ms(lambda: a @ b, warmup=2, repeat=9)))
        out.update(ms=round(t, 3), tflops=round(2 * n**3 / t / 1e9, 2), dgemm_ms=round(td, 3),
                   ratio_to_dgemm=round(td / t, 3))
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--groups", default="0,16")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--configs", default=None)
    p.add_argument("--child", default=None)
    p.add_argument("--compile-only", action="store_true")
    args = p.parse_args()
    if args.child is not None:
        child_main(child, args.child, args.n, args.compile_only)
        return
    compile_then_time(__file__, args.configs.split(";") if args.configs else args.groups.split(","), args.n)


main()
