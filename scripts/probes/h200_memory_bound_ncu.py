#!/usr/bin/env python3
"""Why three memory-bound kernels stop short of the copy roofline on an H200: a driver for Nsight Compute.

The learner's last kernels of 03.3 (LayerNorm + GELU, float16 rows of 4096 and 8192), 05.2 (the INT4
quantizer, a group on 16 lanes) and 05.4 (the NVFP4 quantizer, one reciprocal) are the package's best,
and they reached their notebooks' goals on an H100 (copy roofline about 3.0 TB/s) but not on an H200
(about 4.3 TB/s: 43% more bytes a second from the same 132 SMs at about the same clock). The
question: is each one limited by its instructions (the issue slots busy, DRAM not) or by memory?

    PYTHONPATH=utilities python3 scripts/probes/h200_memory_bound_ncu.py            # time each (events)
    ncu --clock-control none -k regex:'layernorm_gelu_team|int4_quantize_rows_x8|nvfp4_quantize_blocks' \\
        --launch-skip 2 --launch-count 1 --section SpeedOfLight --section SchedulerStats \\
        --section WarpStateStats --section Occupancy --metrics smsp__inst_executed.sum \\
        python3 scripts/probes/h200_memory_bound_ncu.py --launches 3 --only 'fp16 N=8192'

Each case runs ``--launches`` times (ncu profiles one of them). Without ncu the script prints each
kernel's event timing, bytes and fraction of the copy roofline.

Measured on an H200 (2026-11-29; events, then Nsight Compute 2025.3 with --clock-control none).
Instructions a value = smsp__inst_executed.sum x 32 / values (every lane active). The budget: 132 SMs x
4 schedulers x one warp instruction a cycle at about 1.98 GHz is about 33 T thread instructions a second;
at the copy roofline (4.3 TB/s) a kernel moving B bytes a value has about 33 / (4.3 / B) instructions a
value to spend if every scheduler issued every cycle.

=====================================  =======  ========  ==========  =====  ======  =================
kernel                                 of copy  inst/val  budget/val  issue  DRAM    limit
=====================================  =======  ========  ==========  =====  ======  =================
LayerNorm+GELU team, fp16 N=4096       82.3%    24.6      31          74%    64%     issue (schedulers)
LayerNorm+GELU team, fp16 N=8192       75.6%    25.8      31          71%    59%     issue; 512-thread
                                                                                     blocks, 3 an SM
LayerNorm+GELU team, fp32 N=8192       93.4%    29.3      62          48%    76%     memory
INT4 quantize, x8 (16 lanes a group)   85.9%    30.0      35          78%    76%     issue
NVFP4 quantize, one reciprocal         73.5%    31.1      36          69%    65%     a math pipe (SM
                                                                                     throughput 84%)
=====================================  =======  ========  ==========  =====  ======  =================

("issue": smsp__issue_active of the active cycles; "DRAM": dram throughput of its peak.) The float16
LayerNorm and the INT4 quantizer need 79-85% of all issue slots to run at the roofline and get
71-78%: they are limited by the instructions they issue, which the H100's 30% lower bandwidth hid. The
float32 LayerNorm, with twice the bytes a value, has twice the budget and runs at the roofline. The
NVFP4 quantizer's busiest unit is an SM pipe, not DRAM or the issue slots: its division and FMA
corrections, a further change for that kernel.
"""

from __future__ import annotations

import argparse

import numpy as np

import kernel_lab as kl


def cases():
    """(label, launch, bytes moved, values) for each kernel, at its notebook's size."""
    from numba import cuda

    from kernel_lab.fusion import layernorm as ln
    from kernel_lab.quant import float_kernels as fk
    from kernel_lab.quant import int4
    from kernel_lab.reductions_gemm import scans

    rng = np.random.default_rng(0)
    out = []
    for dtype, n in ((np.float16, 4096), (np.float16, 8192), (np.float32, 8192)):
        rows = ln.sweep_rows(n)
        x, gamma, beta, y, mean, rstd = ln.sweep_arrays(n, dtype, rng)
        label = f"LayerNorm+GELU team, {'fp16' if dtype == np.float16 else 'fp32'} N={n}"
        out.append((label, lambda y=y, mean=mean, rstd=rstd, x=x, g=gamma, b=beta: ln.launch_layernorm_gelu(
            y, mean, rstd, x, g, b), ln.bytes_moved(rows, n, np.dtype(dtype).itemsize), rows * n))

    rows, cols = 8192, 8192  # 05.2's timed shape
    x = cuda.to_device(rng.standard_normal((rows, cols)).astype(np.float32))
    packed = cuda.device_array((rows, cols // 2), np.uint8)
    scales = cuda.device_array((rows, cols // int4.GROUP), np.float32)
    n = rows * cols
    out.append(("INT4 quantize, x8 (16 lanes a group)",
                lambda: int4.launch_int4_quantize_rows(packed, scales, x, form="x8"),
                4 * n + n // 2 + 4 * scales.size, n))

    n = 1 << 26  # 05.4's timed size
    from kernel_lab.quant import microscaling as mx

    xv = cuda.to_device(mx.sample_data("activations", n, seed=1))
    amax = cuda.device_array(1, np.float32)
    scans.absmax_grid_stride(amax.view(np.uint32), xv.view(np.uint32))
    packed4 = cuda.device_array((n + 1) // 2, np.uint8)
    nv_scales = cuda.device_array(-(-n // 16), np.uint8)
    out.append(("NVFP4 quantize, one reciprocal", lambda: fk.nvfp4_quantize(packed4, nv_scales, xv, amax),
                4 * n + n // 2 + n // 16, n))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=0, help="launch each case this many times, untimed (for ncu)")
    p.add_argument("--only", default="", help="only the cases whose label contains this text")
    args = p.parse_args()
    kl.environment.setup_command("scripts/probes/h200_memory_bound_ncu.py", ["gpu"])
    from numba import cuda

    for label, launch, nbytes, values in cases():
        if args.only not in label:
            continue
        if args.launches:
            for _ in range(args.launches):
                launch()
            cuda.synchronize()
            print(f"{label}: launched {args.launches} times")
            continue
        m = kl.benchmark(label, launch, bytes=nbytes, quiet=True)
        print(f"{label:<40} {m.ms * 1e3:8.1f} us  {m.gbps:7.0f} GB/s  {100 * m.fraction:5.1f}% of copy  "
              f"{nbytes / values:.2f} bytes a value")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
