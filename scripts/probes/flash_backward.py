#!/usr/bin/env python3
"""The mma.sync attention backward (``kernel_lab.attention.flash_backward``) beside PyTorch's SDPA
backward (issue 13: backward >= 0.3x SDPA's backward).

    PYTHONPATH=utilities python3 scripts/probes/flash_backward.py
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/flash_backward.py --sim

Checks dQ, dK, dV against the float64 reference (``checks.attention.check_attention_backward``, fp16
tolerance: ragged lengths, padding, empty and length-1 rows, causal and not), then times the backward
(zeroing dQ, the D = rowsum(dO o O) kernel and the main kernel) with ``kl.benchmark`` at batch 1 x 16
heads, seq 4096, fp16 (notebook 04.5's shape), beside SDPA's backward in the same run, counted as
five products of 2 N^2 d flops each (``reference.attention_flops(backward=True)``).

Measured on an H100 (2026-11-27), fp16, x SDPA's fp16 backward in the same run (SDPA 0.407 ms at
d=64, 0.649 ms at d=128, full): 64 keys a block (4 warps): d=64 0.28x full, 0.37x causal; d=128
0.22-0.24x full, 0.25-0.30x causal. 128 keys a block (8 warps, the default): d=64 0.36x full, 0.40x
causal; d=128 0.35x full (182.9 TFLOP/s), 0.36x causal. Each Q and dO tile, barrier and dQ atomic is
paid once per block of keys: twice the keys, half of them.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402


def guarded(name, fn, failed):
    t0 = time.perf_counter()
    try:
        fn()
    except Exception:  # noqa: BLE001
        failed.append(name)
        print(f"{name}: FAILED\n{traceback.format_exc()}", flush=True)
    print(f"  ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)


def check(d, warps=4, seq=None):
    from kernel_lab.attention import flash_backward
    from kernel_lab.checks import attention as checks

    checks.check_attention_backward(flash_backward.FlashBackward(head_dim=d, warps=warps),
                                    name=f"mma.sync backward d={d}, {warps} warps",
                                    head_dims=(d,), block_m=64, dtype=np.float16, fmt="float16", seq=seq)


def timings(head_dims, seq, heads, causal_modes, warps_list):
    from numba import cuda

    from kernel_lab.attention import flash, flash_backward, reference

    import torch

    for d in head_dims:
        rng = np.random.default_rng(d)
        shape = (1, heads, seq, d)
        qh, kh, vh, doh = (rng.standard_normal(shape).astype(np.float16) for _ in range(4))
        q, k, v, d_o = (cuda.to_device(a) for a in (qh, kh, vh, doh))
        o, lse = cuda.device_array(shape, np.float32), cuda.device_array(shape[:3], np.float32)
        grads = [cuda.device_array(shape, np.float32) for _ in range(3)]
        for causal in causal_modes:
            flash.flash_forward(o, lse, q, k, v, None, causal)
            tag = "causal" if causal else "full"
            flops = reference.attention_flops(1, heads, seq, d, causal=causal, backward=True)
            tq, tk, tv = (torch.from_numpy(a).cuda().requires_grad_() for a in (qh, kh, vh))
            tdo = torch.from_numpy(doh).cuda()
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            sdpa = kl.benchmark(f"SDPA bwd d={d} {tag}", lambda: torch.autograd.grad(out, (tq, tk, tv), tdo,
                                                                                    retain_graph=True),
                                flops=flops, quiet=True)
            for w in warps_list:
                bwd = flash_backward.FlashBackward(head_dim=d, warps=w)
                ours = kl.benchmark(f"mma.sync bwd d={d} {tag} {w} warps",
                                    bwd.launcher(*grads, q, k, v, o, lse, d_o, None, causal),
                                    flops=flops, inputs=(q,), quiet=True)
                print(f"d={d} {tag:>6}: SDPA {sdpa.ms:7.3f} ms {sdpa.tflops:6.1f} TFLOP/s; mma.sync, {w} warps "
                      f"{ours.ms:7.3f} ms {ours.tflops:6.1f} TFLOP/s: {sdpa.ms / ours.ms:.3f}x SDPA (goal 0.3x)",
                      flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--warps", default="4,8", help="blocks of 16 keys per warp: 4 or 8 warps")
    args = p.parse_args()
    env = kl.setup(requires=["warp"])
    dims = [int(x) for x in args.head_dims.split(",")]
    failed = []
    warps = [int(x) for x in args.warps.split(",")]
    for d in dims:
        for w in warps:
            guarded(f"check d={d} {w} warps", lambda: check(d, w, seq=9 if env.simulator else None), failed)
    if not env.simulator:
        guarded("timings", lambda: timings(dims, args.seq, args.heads, (False, True), warps), failed)
    print(f"failed: {', '.join(failed)}" if failed else "all steps ok")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
