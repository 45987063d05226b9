#!/usr/bin/env python3
"""Where module 06's pipeline GEMM loses to the library: the epilogue (issue 10's speed goals).

    PYTHONPATH=utilities python3 scripts/probes/pipeline_epilogue.py [CONFIG ...] [--sizes 4096 8192]

scripts/probes/pipeline_configs.py measured (H100, 2026-11-26) the package's int8 pipeline with module
07's tiles (128x256x128, two warpgroups, depth 3) at 0.42x cuBLASLt at 8192^3, where module 07's
fused kernel runs the same main loop at 0.94x: 07 amortises one epilogue over four products, 06 pays
one per product. The package's epilogue copies the accumulator to a local fragment
(``get_results``), then stores element by element at ``map_fragment_index`` coordinates, in two
passes (``prepare``, then ``store``). Kernels here, each with the same main loop:

* ``package``: ``gemm.PipelineGemm`` with the identity epilogue (the notebooks' kernel);
* ``copy``: ``get_results``, then cuBLASDx's own store of the fragment into the C tile
  (``acc.partition_and_copy(frag, gmem_c)``: vector stores, no coordinates computed in Python);
* ``bias``: a fused epilogue's shape: each element plus ``bias[column]`` (coordinates from
  ``map_fragment_index``) into a second fragment, then the same cuBLASDx store;
* ``none``: no epilogue at all (wrong results): the main loop alone, a bound.

Measured on an H100 at 8192^3 (2026-11-26): int8 128x256x128 (cuBLASLt 787 us): package 1880 us
(0.42x), copy 997 us (0.79x); fp16 128x256x64 (cuBLAS 1444 us): package 2677 us (0.54x), copy 1818
us (0.79x). ``bias`` did not compile (make_fragment_like: "Alignment must be a multiple of 8"; the
package now transforms the fragment in place instead). ``none`` ran at 1.5x the library, faster
than the tensor cores' peak: with nothing stored the compiler drops work, so it bounds nothing.
The package adopted ``copy`` (``Epilogue.elementwise``).

CONFIG is ``precision:tile_m,tile_n,tile_k,threads,depth`` (before ``--sizes``, which takes every number after it). Every (variant, configuration, size) is
compiled first in worker processes (filling the code-generation and cubin caches), then checked and
timed (CUDA events, L2 flushed, median) beside cuBLASLt int8 (nvmath-python) or cuBLAS fp16 (CuPy).
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

from two_phase import compile_side_by_side  # noqa: E402  (this folder: scripts/probes)

DEFAULT = ["int8:128,256,128,256,3", "float16:128,256,64,256,3"]
VARIANTS = ("package", "copy", "bias", "none")


def parse(text):
    prec, _, dims = text.partition(":")
    tm, tn, tk, threads, depth = (int(x) for x in dims.split(","))
    return dict(tile_m=tm, tile_n=tn, tile_k=tk, threads=threads, precision=prec, depth=depth)


def make_kernel(MM, cfg, variant):
    """The pipeline kernel with one of the probe's epilogues (not ``package``)."""
    from numba import cuda
    from nvmath.device import make_fragment_like, make_tensor
    from nvmath.device.cublasdx_numba import pipeline_extensions

    TM, TN, NT = cfg.tile_m, cfg.tile_n, cfg.threads
    V = VARIANTS.index(variant)
    ACC = np.int32 if cfg.precision == "int8" else np.float32

    def kernel(out, n, bias, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=device_pipeline.buffer_alignment)
        row0 = cuda.blockIdx.x * TM
        col0 = cuda.blockIdx.y * TN
        tile = device_pipeline.get_tile(smem, cuda.blockIdx.x, cuda.blockIdx.y)
        acc = MM.suggest_accumulator()
        tile.execute(acc)
        if V != 3:
            frag = acc.get_results()
            gmem_c = make_tensor(out[row0:row0 + TM, col0:col0 + TN], MM.get_layout_gmem_c(n))
            if V == 1:
                acc.partition_and_copy(frag, gmem_c)
            else:
                res = make_fragment_like(frag, ACC)
                for i in range(frag.layout.size):
                    lr, lc = acc.map_fragment_index(i)
                    res[i] = frag[i] + ACC(bias[col0 + lc])
                acc.partition_and_copy(res, gmem_c)
        tile._del()

    return cuda.jit(kernel, extensions=pipeline_extensions, launch_bounds=(NT, 1))


def build(cfg_dict, variant, n):
    """(launch, out, bias, reference-maker) for one variant at n^3, compiled."""
    import cupy as cp

    from kernel_lab.tensor_cores import gemm
    from kernel_lab.tensor_cores.configs import PipelineConfig

    cfg = PipelineConfig(**cfg_dict)
    pg = gemm.PipelineGemm(cfg)
    dt = np.int8 if cfg.precision == "int8" else np.float16
    rng = np.random.default_rng(n)
    if cfg.precision == "int8":
        a = cp.asarray(rng.integers(-127, 128, (n, n), dtype=np.int8))
        bt = cp.asarray(rng.integers(-127, 128, (n, n), dtype=np.int8))
    else:
        a = cp.asarray(rng.standard_normal((n, n)).astype(dt))
        bt = cp.asarray(rng.standard_normal((n, n)).astype(dt))
    out = cp.empty((n, n), pg.acc_dtype)
    bias = cp.asarray(rng.integers(-3, 4, n).astype(np.float32))
    if variant == "package":
        return pg.launcher(a, bt, out), a, bt, out, None
    grid, args, pipeline = pg.prepare(a, bt, out)
    kern = make_kernel(pg.MM, cfg, variant)
    from numba import cuda

    my_args = (cuda.as_cuda_array(out), np.int32(n), cuda.as_cuda_array(bias), pipeline)
    kern.compile(gemm.launch_types(kern, my_args))
    smem = pipeline.buffer_size
    gemm.set_max_dynamic_shared_memory(kern, my_args, smem)
    launch = kern[grid, pipeline.block_dim, 0, smem]
    return (lambda: launch(*my_args)), a, bt, out, bias


def worker(spec):
    os.environ.setdefault("KERNEL_LAB_QUIET", "1")
    import kernel_lab  # noqa: F401  (chooses the GPU backend before numba.cuda)
    from kernel_lab.tensor_cores import codegen_cache

    codegen_cache.enable(quiet=True)
    cfg_dict, variant, n = spec
    t0 = time.perf_counter()
    try:
        build(cfg_dict, variant, n)
        return spec, time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        return spec, time.perf_counter() - t0, f"{type(exc).__name__}: {str(exc)[:400]}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("configs", nargs="*", default=DEFAULT)
    p.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()

    import kernel_lab as kl

    kl.setup(requires=["gpu", "nvmath", "cupy", "cc>=9.0"], quiet=True)
    import cupy as cp

    from kernel_lab.bench import time_ms
    from kernel_lab.tensor_cores import codegen_cache, peers
    from kernel_lab.tensor_cores.configs import PipelineConfig

    codegen_cache.enable(quiet=True)
    cfgs = [parse(c) for c in args.configs]
    specs = [(c, v, n) for n in args.sizes for c in cfgs for v in args.variants]
    compile_side_by_side(worker, specs, lambda spec: f"{spec[1]:8s} {PipelineConfig(**spec[0]).label()} at {spec[2]}^3")

    def median(fn):
        return statistics.median(time_ms(fn, warmup=3, repeat=args.repeat))

    for n in args.sizes:
        flops = 2.0 * n**3
        for c in cfgs:
            cfg = PipelineConfig(**c)
            peer_ms = None
            for v in args.variants:
                t1 = time.perf_counter()
                try:
                    run, a, bt, out, bias = build(c, v, n)
                    run()
                    if peer_ms is None:  # the peer on this config's operands, and the reference
                        if cfg.precision == "int8":
                            lt, ref = peers.CublasLtInt8(n, n, n), cp.empty((n, n), cp.int32)
                            peer = lambda: lt(a, bt, ref)  # noqa: E731
                            peer()
                            peer_name = "cuBLASLt int8"
                        else:
                            b = cp.ascontiguousarray(bt.T)
                            ref = cp.matmul(a, b).astype(cp.float32)
                            peer = lambda: cp.matmul(a, b)  # noqa: E731
                            peer_name = "cuBLAS fp16"
                        peer_ms = median(peer)
                        print(f"\n{n}^3 {cfg.label()}: {peer_name} {peer_ms * 1e3:.1f} us "
                              f"({flops / peer_ms / 1e9:.0f} T/s)", flush=True)
                    want = ref.astype(cp.float64) + (bias.astype(cp.float64)[None, :] if v == "bias" else 0)
                    err = float(cp.abs(out.astype(cp.float64) - want).max() / max(float(cp.abs(want).max()), 1.0))
                    ok = err == 0 if cfg.precision == "int8" else err < 1e-2
                    ms = median(run)
                    print(f"  {v:8s} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.0f} T/s  {peer_ms / ms:5.2f}x peer  "
                          f"{'correct' if ok else ('(no epilogue)' if v == 'none' else f'WRONG {err:.1e}')}  "
                          f"(built here in {time.perf_counter() - t1:.0f} s)", flush=True)
                except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
                    print(f"  {v:8s} FAILED: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
