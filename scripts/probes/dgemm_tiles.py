"""Time the float64 warp-tiled kernel (02.4's step) over tile shapes at 4096^3 on a GPU (one run).

Why: 02.4's register count picked 4 x 8 results a thread (88 registers of accumulators and
operands), but on an H200 02.3's 8 x 8 tiles, at 244 registers without spills, ran faster. This
probe times the candidates side by side so the package's DGEMM tiles are the measured best.
Usage: PYTHONPATH=utilities python3 scripts/probes/dgemm_tiles.py
"""

import numpy as np

import kernel_lab as kl

kl.setup(requires=[], quiet=True)
from numba import cuda  # noqa: E402

from kernel_lab.reductions_gemm import sgemm as ref  # noqa: E402

F64 = dict(double_buffer=True, precision="float64")
CANDIDATES = [
    ref.GemmTiles(128, 128, 8, 64, 32, 4, 4, 256, **F64),
    ref.GemmTiles(128, 64, 8, 64, 32, 4, 4, 128, **F64),
    ref.GemmTiles(64, 128, 8, 32, 64, 4, 4, 128, **F64),
    ref.GemmTiles(128, 128, 8, 64, 64, 4, 4, 128, **F64),
    ref.GemmTiles(64, 64, 8, 32, 32, 4, 4, 128, **F64),
    ref.GemmTiles(64, 64, 16, 32, 16, 4, 4, 256, **F64),
    ref.GemmTiles(128, 128, 8, 64, 32, 4, 4, 256, max_registers=255, **F64),
]
n = 4096
rng = np.random.default_rng(0)
a, b = (cuda.to_device(rng.uniform(-1, 1, (n, n))) for _ in range(2))
c = cuda.device_array((n, n), np.float64)
for cfg in CANDIDATES:
    if cfg.problems():
        print(f"{cfg.label()}: {'; '.join(cfg.problems())}")
        continue
    launch = ref.warptile_launcher(cfg, compute_k=ref.make_compute_k64(cfg))
    m = kl.benchmark(cfg.label(), lambda: launch(c, a, b), flops=2 * n**3, peak="dgemm", repeat=7, warmup=2,
                     quiet=True)
    compiled = next(iter(launch.kernel.overloads.values()))
    print(f"{m.tflops:6.2f} TFLOP/s  {compiled.regs_per_thread:3d} regs  {compiled.local_mem_per_thread:4d} B local  "
          f"{cfg.label()}", flush=True)
