#!/usr/bin/env python3
"""Module 06's pipeline GEMM for Nsight Compute, and the persistent schedule on ragged shapes.

    PYTHONPATH=utilities python3 scripts/probes/pipeline_ncu.py compile     # fill the caches, side by side
    PYTHONPATH=utilities python3 scripts/probes/pipeline_ncu.py ragged      # persistent kernels on ragged shapes
    ncu -k regex:pipeline --launch-skip 2 --launch-count 1 --set detailed \\
        python3 scripts/probes/pipeline_ncu.py run CONFIG                    # one kernel at 4096^3, 4 launches

CONFIG as in pipeline_configs.py: ``precision:tile_m,tile_n,tile_k,threads,depth[,pG]``. Issue 10
asks why the fp16 pipeline stops at 0.71x cuBLAS at 4096^3 when it reaches 0.83x at 8192^3: the
profile gives tensor-pipe utilisation, where warps wait, and L2 traffic. ``ragged`` runs the
persistent schedule where edge tiles take the per-element store inside the persistent loop (the
notebooks only run it at 4096^3 and 8192^3), checked against cuBLAS/cuBLASLt.

Measured on an H200 (2026-11-26; Nsight Compute locks the clocks, so its durations are longer than
the notebooks' event timings):

* ragged: fp16 persistent 300x333x200 and 1000x1300x700 match a float64 product (max relative error
  4e-7 and 1.2e-6); int8 persistent 300x333x200 and 4097x4099x4096 equal cuBLASLt's result exactly.
* fp16 128x256x64 depth 4, persistent (bands of 8), 4096^3: 299.8 us under ncu; tensor pipe 64.5% of
  the elapsed cycles; 166 registers, one block of 256 threads (8 warps) per SM, 12.5% occupancy;
  warps wait 14.6 cycles between instructions, 5.6 of them (39%) at a block-wide barrier; DRAM 22%,
  L2 hit rate 82%.
* the same, one block per tile: 321.0 us; tensor pipe 60.3%; 512 blocks on 132 SMs, a partial last
  wave ncu puts at up to 25% of the runtime; 37% of the waiting at a barrier.
* int8 128x256x128 depth 3, persistent: 190.6 us; tensor pipe 49.4%; 34% of the waiting for the
  instruction queue of the math pipes, 33% at a barrier.

So at 4096^3 neither memory nor the tile order limits the pipeline: its warps wait at the block's
barriers between pipeline stages (all 8 warps of the one block an SM holds, producer and consumers
alike), where cuBLAS's kernels hand stages between warp-specialised producers and consumers with
per-stage barriers. The persistent schedule removed the partial wave (321.0 -> 299.8 us); the
barrier waits are the next 35-40%.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_configs import parse  # noqa: E402
from two_phase import compile_side_by_side  # noqa: E402

PROFILED = ["float16:128,256,64,256,4,p8", "float16:128,256,64,256,4", "int8:128,256,128,256,3,p8"]
RAGGED = [("float16:128,256,64,256,4,p8", (300, 333, 200)), ("int8:128,256,128,256,3,p8", (300, 333, 200)),
          ("float16:128,256,64,256,4,p8", (1000, 1300, 700)), ("int8:128,256,128,256,3,p8", (4097, 4099, 4096))]


def main():
    mode = sys.argv[1]
    import kernel_lab as kl

    kl.setup(requires=["gpu", "nvmath", "cupy", "cc>=9.0"], quiet=True)
    import cupy as cp

    from kernel_lab.tensor_cores import codegen_cache, gemm, peers
    from kernel_lab.tensor_cores.configs import PipelineConfig

    codegen_cache.enable(quiet=True)
    if mode == "compile":
        specs = [(parse(c), "identity", "matrix", (4096, 4096, 4096)) for c in PROFILED]
        specs += [(parse(c), "identity", "matrix", shape) for c, shape in RAGGED]
        compile_side_by_side(gemm._precompile_worker, specs,
                             lambda s: f"{PipelineConfig(**s[0]).label()} at {s[3]}")
        return 0
    rng = np.random.default_rng(7)
    if mode == "ragged":
        bad = 0
        for text, (m, n, k) in RAGGED:
            cfg = PipelineConfig(**parse(text))
            g = gemm.PipelineGemm(cfg)
            if cfg.precision == "int8":
                a = cp.asarray(rng.integers(-127, 128, (m, k), dtype=np.int8))
                bt = cp.asarray(rng.integers(-127, 128, (n, k), dtype=np.int8))
                out = cp.full((m, n), -7, cp.int32)  # poisoned
                want = cp.empty((m, n), cp.int32)
                peers.CublasLtInt8(m, n, k)(a, bt, want)
                g.launcher(a, bt, out)()
                ok = bool(cp.array_equal(out, want))
                err = int(cp.count_nonzero(out != want))
            else:
                a = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                bt = cp.asarray(rng.standard_normal((n, k)).astype(np.float16))
                out = cp.full((m, n), cp.nan, cp.float32)
                want = a.astype(cp.float64) @ bt.astype(cp.float64).T
                g.launcher(a, bt, out)()
                err = float(cp.abs(out - want).max() / cp.abs(want).max())
                ok = err < 1e-3
            print(f"ragged {cfg.label()} {m}x{n}x{k}: {'correct' if ok else 'WRONG'} ({err})", flush=True)
            bad += not ok
        return 1 if bad else 0
    if mode == "run":
        cfg = PipelineConfig(**parse(sys.argv[2]))
        n = 4096
        g = gemm.PipelineGemm(cfg)
        if cfg.precision == "int8":
            a = cp.asarray(rng.integers(-127, 128, (n, n), dtype=np.int8))
            bt = cp.asarray(rng.integers(-127, 128, (n, n), dtype=np.int8))
            out = cp.empty((n, n), cp.int32)
        else:
            a = cp.asarray(rng.standard_normal((n, n)).astype(np.float16))
            bt = cp.asarray(rng.standard_normal((n, n)).astype(np.float16))
            out = cp.empty((n, n), cp.float32)
        run = g.launcher(a, bt, out)
        for _ in range(4):
            run()
        cp.cuda.Device().synchronize()
        print("ran", cfg.label(), flush=True)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
