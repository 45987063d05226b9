#!/usr/bin/env python3
"""Time warp-tiled SGEMM configurations beside cuBLAS SGEMM (CuPy) in one run (issue 11's 0.8x goal).

    PYTHONPATH=utilities python3 scripts/probes/sgemm_candidates.py [4096 8192]

For each configuration: a correctness check at a ragged size against float64 NumPy, registers and
spills, then the median time at each size (CUDA events, L2 flushed) and the ratio to cuBLAS timed
in the same process. The register cap (``max_registers``) is the lever under test: 128 lets two
256-thread blocks share an SM.
"""
import statistics
import sys

import numpy as np

import kernel_lab as kl

kl.setup(requires=["gpu", "cupy"])
import cupy as cp  # noqa: E402
from numba import cuda  # noqa: E402

from kernel_lab.reductions_gemm import sgemm  # noqa: E402
from kernel_lab.bench import time_ms  # noqa: E402
from kernel_lab.reductions_gemm.bench import sass_summary  # noqa: E402

G = sgemm.GemmTiles
CANDIDATES = {"k8 (128x128x16, 256 thr)": G(128, 128, 16, 64, 32, 4, 4, 256, True),
              "128x64 tm8, <=168 regs": G(128, 64, 16, 64, 32, 8, 4, 128, True, max_registers=168),
              "128x64 tm8, no cap (2 blocks/SM)": G(128, 64, 16, 64, 32, 8, 4, 128, True),
              "128x64 tm8, <=128 regs (4/SM)": G(128, 64, 16, 64, 32, 8, 4, 128, True, max_registers=128),
              "128x128 tm8, <=128 regs (2/SM)": G(128, 128, 16, 64, 32, 8, 4, 256, True, max_registers=128),
              "64x128 tm8, <=168 regs": G(64, 128, 16, 64, 32, 8, 4, 128, True, max_registers=168),
              "128x64 tm8 tn8, <=168 regs": G(128, 64, 16, 64, 32, 8, 8, 128, True, max_registers=168),
              "128x64x8 tm8, <=168 regs": G(128, 64, 8, 64, 32, 8, 4, 128, True, max_registers=168)}
# The main loop before it took two tiles per trip (stage s = 1 - s each tile): the same kernels
# with it, to measure what constant stage offsets bought.
OLD_LOOP = ("128x64 tm8, <=168 regs", "k8 (128x128x16, 256 thr)")


def old_main_loop(cfg):
    """Kernel 8's loop (02.3): one tile per trip, the stage a variable."""
    return sgemm.warptile_parts(cfg).main_loop_one


LAUNCHERS = {name: sgemm.warptile_launcher(cfg) for name, cfg in CANDIDATES.items()}
for name in OLD_LOOP:
    LAUNCHERS[name + ", old loop"] = sgemm.warptile_launcher(CANDIDATES[name], main_loop=old_main_loop(CANDIDATES[name]))
sizes = [int(s) for s in sys.argv[1:]] or [4096, 8192]

rng = np.random.default_rng(7)
m, n, k = 1000, 1030, 516  # ragged edges, K a multiple of 4 (the vector path) and not of the tile
a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
want = a.astype(np.float64) @ b.astype(np.float64)
for name, launch in LAUNCHERS.items():
    c = cuda.to_device(np.full((m, n), np.nan, np.float32))
    launch(c, cuda.to_device(a), cuda.to_device(b))
    got = c.copy_to_host()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"{name:32s} check {m}x{n}x{k}: rel. error {err:.1e} {'ok' if err < 1e-5 else 'WRONG'}; "
          f"{sass_summary(launch)}", flush=True)

for size in sizes:
    da = cuda.to_device(rng.uniform(-1, 1, (size, size)).astype(np.float32))
    db = cuda.to_device(rng.uniform(-1, 1, (size, size)).astype(np.float32))
    dc = cuda.device_array((size, size), np.float32)
    ca, cb, cc = cp.asarray(da), cp.asarray(db), cp.empty((size, size), cp.float32)
    flops = 2.0 * size**3
    base = statistics.median(time_ms(lambda: cp.matmul(ca, cb, out=cc), warmup=3, repeat=15))
    print(f"\n{size}^3: cuBLAS SGEMM (CuPy) {base:.3f} ms = {flops / base / 1e9:.2f} TFLOP/s", flush=True)
    for name, launch in LAUNCHERS.items():
        ms = statistics.median(time_ms(lambda: launch(dc, da, db), warmup=2, repeat=15))
        print(f"  {name:32s} {ms:.3f} ms = {flops / ms / 1e9:6.2f} TFLOP/s = {base / ms:.2f}x cuBLAS", flush=True)
    base2 = statistics.median(time_ms(lambda: cp.matmul(ca, cb, out=cc), warmup=1, repeat=15))
    print(f"  cuBLAS again {base2:.3f} ms (drift check)", flush=True)
