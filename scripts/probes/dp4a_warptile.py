#!/usr/bin/env python3
"""Probe: 05.6's DP4A GEMM on module 02's warp-tiled, double-buffered kernel (issue 14's goal: the
DP4A GEMM at >= 2x the ops/s of module 02's best FP32 SIMT GEMM).

    PYTHONPATH=utilities python3 scripts/probes/dp4a_warptile.py          # on a GPU (about a minute)
    PYTHONPATH=utilities python3 scripts/probes/dp4a_warptile.py --sim    # simulator: checks only

DP4A's peak is twice FP32's in operations (a DP4A is four multiply-adds, issued at half the FFMA
rate), so a DP4A kernel as efficient as module 02's best SGEMM runs at twice its rate. 05.6's tiled
DP4A kernel has 02.3's kernel-5 structure (2-D register blocking, scalar shared loads, no warp tiling
or double buffering) and ran at 1.01x the SGEMM. Here each configuration of
``kernel_lab.quant.int8_gemm.dp4a_warptile_configs()`` (module 02's warp-tiled kernel with
``precision="dp4a"``) is checked (``check_int8_gemm``, bit-exact), then timed at M = N = K = 4096
(K counted in int8 values) beside 05.6's tiled DP4A kernel, module 02's ``launch_double_buffered``
(05.6's "best SGEMM" row) and its autotuned best, and cuBLASLt int8 where nvmath-python is installed.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
args = ap.parse_args()
env = kl.setup(quiet=True)
if env.simulator != args.sim:
    sys.exit("run with --sim under the simulator, without it on a GPU")
from numba import cuda  # noqa: E402

from kernel_lab.reductions_gemm import sgemm  # noqa: E402
from kernel_lab.checks import quantization as checks  # noqa: E402
from kernel_lab.quant import integer as qint  # noqa: E402
from kernel_lab.quant import int8_gemm  # noqa: E402

launchers = [(cfg.label(), int8_gemm.dp4a_warptile_launcher(cfg)) for cfg in int8_gemm.dp4a_warptile_configs()]
good = []
for label, launch in launchers:
    try:
        checks.check_int8_gemm(launch.checked, name=f"dp4a warp-tiled {label}")
        good.append((label, launch))
    except Exception as exc:  # noqa: BLE001 - report, go on
        print(f"CHECK FAILED {label}: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
if args.sim:
    sys.exit(0 if len(good) == len(launchers) else 1)

n = 4096
rng = np.random.default_rng(3)
A = rng.integers(-127, 128, (n, n)).astype(np.int8)
B = rng.integers(-127, 128, (n, n)).astype(np.int8)
a32, b32 = cuda.to_device(qint.as_words(A)), cuda.to_device(qint.as_words(B))
b32k = int8_gemm.k_major_words(b32)
c32 = cuda.device_array((n, n), np.int32)
ops = 2 * n ** 3
rows = [kl.benchmark("DP4A, tiled (05.6)", lambda: int8_gemm.launch_dp4a_gemm(c32, a32, b32), flops=ops, peak="sgemm",
                     quiet=True)]
for label, launch in good:
    rows.append(kl.benchmark(f"DP4A warp-tiled {label}", lambda launch=launch: launch(c32, a32, b32k), flops=ops,
                             peak="sgemm", quiet=True))
af = cuda.to_device(A.astype(np.float32))
bf = cuda.to_device(np.ascontiguousarray(B.T).astype(np.float32))
cf = cuda.device_array((n, n), np.float32)
rows.append(kl.benchmark("SGEMM, module 02's launch_double_buffered", lambda: sgemm.launch_double_buffered(cf, af, bf),
                         flops=ops, peak="sgemm", quiet=True))
best_cfg = sgemm.tuning_candidates()[3]  # 64 x 128, 8 rows per lane: 02.3's autotuned winner at 4096^3 on an H100
best = sgemm.warptile_launcher(best_cfg)
rows.append(kl.benchmark(f"SGEMM, {best_cfg.label()}", lambda: best(cf, af, bf), flops=ops, peak="sgemm", quiet=True))
try:
    import cupy as cp
    from kernel_lab.tensor_cores.peers import CublasLtInt8

    lt = CublasLtInt8(n, n, n)
    ca, cb, cc = cp.asarray(A), cp.asarray(B), cp.empty((n, n), cp.int32)
    rows.append(kl.benchmark("cuBLASLt int8 (tensor cores)", lambda: lt(ca, cb, cc), flops=ops, peak="sgemm",
                             quiet=True))
except Exception as exc:  # noqa: BLE001 - optional peer
    print(f"(cuBLASLt int8 not timed: {type(exc).__name__}: {exc})")
sg = max(r.tflops for r in rows if r.name.startswith("SGEMM"))
print(f"\nGPU: {kl.gpu_info().name}; M = N = K = {n}; ops/s as a multiple of module 02's best SGEMM ({sg:.2f} TFLOP/s)")
for r in rows:
    print(f"  {r.name:<96} {r.ms:8.3f} ms  {r.tflops:8.2f} T(FL)OP/s  {r.tflops / sg:5.2f}x  "
          f"{100 * r.fraction:5.1f}% of cuBLAS SGEMM's rate")
