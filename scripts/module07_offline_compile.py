"""Compile module 07's pipeline kernels without a GPU (code generation only needs the CPU).

Type-checks the kernels and fills the cuBLASDx code-generation cache for the given shapes, so a GPU
host with the same nvmath-python / libmathdx / NVRTC / CCCL versions compiles them in seconds.
Needs nvmath-python with its cuBLASDx extra. Run it through the wrapper, which provides the
stand-in driver library and forces Numba's GPU target:

    python scripts/module07_offline_compile.py --shapes 300x200x400,2048 --methods fused,partial,unfused
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _job(spec):
    method, (m, n, k), cfg_dict, slices, cc, cache_dir = spec
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    sys.path.insert(0, str(ROOT / "utilities"))
    from kernel_lab.tensor_cores import codegen_cache, offline

    offline.pretend_gpu(cc)
    codegen_cache.enable(cache_dir)
    import numpy as np
    from numba import types

    from kernel_lab.ozaki import gpu

    cfg = gpu.OzakiConfig(**cfg_dict)
    mp, np_, kp = cfg.padded(m, n, k)
    t0 = time.perf_counter()
    mm = gpu.matmul_description(cfg)
    planes = gpu.PLANES
    pipe = offline.pipeline_for_shapes(mm, cfg.depth, (mp, kp, planes), (kp, 1, mp * kp),
                                       (kp, np_, planes), (1, kp, np_ * kp), np.int8)
    factory = {"fused": gpu.fused_kernel, "partial": gpu.diagonal_sums_kernel,
               "unfused": gpu.pair_products_kernel}[method]
    _, kern = factory(cfg)
    pipe_t = kern.typeof_pyval(pipe)
    i32v = types.Array(types.int32, 1, "C")
    f64m = types.Array(types.float64, 2, "C")
    i32c = types.Array(types.int32, 3, "C")
    sig = {"fused": (types.int32, i32v, i32v, types.float64, types.float64, f64m, pipe_t),
           "partial": (i32c, pipe_t),
           "unfused": (i32v, i32v, i32c, pipe_t)}[method]
    code = offline.compile_kernel(kern, sig, cc)
    stats = codegen_cache.stats()
    return (f"{method} {m}x{n}x{k} ({cfg.label()}): {len(code)} bytes of LTO-IR in "
            f"{time.perf_counter() - t0:.0f} s; cache hits {stats.get('hits')}, misses {stats.get('misses')}")


def _plain_kernels(slices, cc):
    """Compile the plain Numba kernels of ``kernel_lab.ozaki.gpu`` (no cuBLASDx) to PTX: typing errors
    that the simulator, which runs kernels as Python, cannot see."""
    from numba import cuda, types

    from kernel_lab.ozaki import gpu

    f64m = types.Array(types.float64, 2, "C")
    f64v = types.Array(types.float64, 1, "C")
    i32v = types.Array(types.int32, 1, "C")
    i32c = types.Array(types.int32, 3, "C")
    i8c = types.Array(types.int8, 3, "C")
    col_max, col_finish = gpu.col_exponents_kernels()
    kernels = {
        "row_exponents": (gpu.row_exponents_kernel(), (f64m, i32v, i32v)),
        "col_max": (col_max, (f64m, f64v, i32v)),
        "col_finish": (col_finish, (f64v, i32v, i32v)),
        "slice_rows": (gpu.slice_rows_kernel(slices), (f64m, i32v, i32v, i32c)),
        "slice_cols": (gpu.slice_cols_kernel(slices), (f64m, i32v, i32v, i8c)),
        "reconstruct_pairs": (gpu.reconstruct_kernel(slices, True), (i32c, i32v, i32v, types.float64, types.float64, f64m)),
        "reconstruct_diagonals": (gpu.reconstruct_kernel(slices, False), (i32c, i32v, i32v, types.float64, types.float64, f64m)),
    }
    from kernel_lab.ozaki import gpu_ozaki2 as g2

    i8c, f64v2 = types.Array(types.int8, 3, "C"), types.Array(types.float64, 2, "C")
    kernels.update({
        "ozaki2 row_exponents": (g2.row_exponents_kernel("norm"), (f64m, i32v, i32v)),
        "ozaki2 col_partials": (g2.col_partials_kernel(), (f64m, f64v2, f64v2)),
        "ozaki2 col_exponents": (g2.col_exponents_kernel("norm"), (f64v2, f64v2, i32v, i32v)),
        "ozaki2 residue_rows": (g2.residue_rows_kernel(14), (f64m, i32v, types.int32, i32v, i8c)),
        "ozaki2 residue_cols": (g2.residue_cols_kernel(14), (f64m, i32v, types.int32, i32v, i8c)),
        "ozaki2 crt": (g2.crt_kernel(14), (i32c, i32v, i32v, types.int32, types.float64, types.float64, f64m)),
    })
    for name, (kern, sig) in kernels.items():
        cuda.compile(kern.py_func, sig, cc=cc, output="ptx")
        print(f"plain kernel {name}: compiles", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="300x200x400", help="MxNxK or a single size N for NxNxN, comma-separated")
    p.add_argument("--methods", default="fused,partial,unfused")
    p.add_argument("--slices", type=int, default=7)
    p.add_argument("--config", default="128,256,128,256,3", help="tile_m,tile_n,tile_k,threads,depth[,group_m]; ';' between several")
    p.add_argument("--cc", default="9.0")
    p.add_argument("--cache-dir", default=os.environ.get("KERNEL_LAB_CACHE_DIR"))
    p.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    p.add_argument("--plain", action="store_true", help="also compile the plain Numba kernels to PTX")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.child:  # re-run with the stand-in driver on the library path (read at process start)
        sys.path.insert(0, str(ROOT / "utilities"))
        from kernel_lab.tensor_cores.offline import stand_in_environment

        env = stand_in_environment()
        sys.exit(subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=env))
    shapes = []
    for s in args.shapes.split(","):
        dims = [int(x) for x in s.split("x")]
        shapes.append(tuple(dims * 3) if len(dims) == 1 else tuple(dims))
    cfgs = []
    for c in args.config.split(";"):
        values = [int(x) for x in c.split(",")]
        cfgs.append(dict(zip(("tile_m", "tile_n", "tile_k", "threads", "depth", "group_m"), values)))
    cc = tuple(int(x) for x in args.cc.split("."))
    if args.plain:
        sys.path.insert(0, str(ROOT / "utilities"))
        import kernel_lab  # noqa: F401  (GPU target: NUMBA_ENABLE_CUDASIM=0 set by the wrapper)
        from kernel_lab.tensor_cores import offline

        offline.pretend_gpu(cc)  # device functions ask the current device for its compute capability
        _plain_kernels(args.slices, cc)
        if not args.methods:
            return
    specs = [(meth, shape, cfg, args.slices, cc, args.cache_dir)
             for cfg in cfgs for shape in shapes for meth in args.methods.split(",")]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(args.processes, len(specs)), mp_context=mp.get_context("spawn")) as ex:
        futures = [ex.submit(_job, s) for s in specs]
        failed = 0
        for spec, fut in zip(specs, futures):
            try:
                print(fut.result(), flush=True)
            except Exception as exc:  # noqa: BLE001
                failed += 1
                print(f"FAILED {spec[0]} {spec[1]}: {type(exc).__name__}: {exc}", flush=True)
    print(f"{len(specs) - failed} of {len(specs)} compiled in {time.perf_counter() - t0:.0f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
