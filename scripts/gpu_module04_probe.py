#!/usr/bin/env python3
"""Module 04 on a GPU in one call: check every attention kernel, then time them against the goals.

    PYTHONPATH=utilities python scripts/gpu_module04_probe.py            # on a GPU (a few minutes)
    PYTHONPATH=utilities python scripts/gpu_module04_probe.py --sim      # in the simulator: checks only, tiny

1. checks: the package's online softmax, naive and fused forward (head_dim 64 and 128, causal and
   not, ragged and empty sequences), the backward (dQ, dK, dV), and the tensor-core forward (fp16;
   ``--tc-head-dims``, default 128: cuBLASDx's first code generation takes minutes per kernel);
2. fused (and the register-tiled ``attention.tiled``) against naive at N = 4096, head_dim 64,
   float32 (goal >= 3x), causal, and head_dim 128;
3. the tensor-core forward against PyTorch's SDPA at N = 4096, head_dim 128, fp16, batch 4 x 16 heads,
   causal and not (goal >= 0.4x);
4. the CUDA-core backward against SDPA's backward (fp16 and fp32) at N = 4096 (goal >= 0.3x).
Everything is printed; with $OUT set, also written to $OUT/module04_probe.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402

RESULTS: dict = {"checks": {}, "timings": {}, "ratios": {}}


def section(title):
    print(f"\n=== {title} ===", flush=True)


def guarded(name, fn):
    """Run one step; a failure is printed and recorded, and the probe goes on."""
    t0 = time.perf_counter()
    try:
        fn()
        RESULTS["checks"][name] = "ok"
    except Exception as exc:  # noqa: BLE001
        RESULTS["checks"][name] = f"FAILED: {type(exc).__name__}: {exc}"
        print(f"{name}: FAILED\n{traceback.format_exc()}", flush=True)
    print(f"  ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)


def run_checks(sim: bool, tc_dims):
    from kernel_lab.attention import kernels
    from kernel_lab.checks import attention as checks

    dims = (16,) if sim else (64, 128)
    guarded("online softmax", lambda: checks.check_online_softmax(kernels.online_softmax))
    guarded("naive forward", lambda: checks.check_attention_forward(kernels.naive_forward, name="naive attention",
                                                                    head_dims=dims, seq=9 if sim else None))
    guarded("fused forward", lambda: checks.check_attention_forward(kernels.fused_forward, head_dims=dims,
                                                                    block_m=8 if sim else 64,
                                                                    block_n=8 if sim else 32))
    from kernel_lab.attention import tiled

    tcfg = {d: tiled.default_config(d) for d in dims}
    guarded("tiled forward", lambda: [checks.check_attention_forward(
        tiled.tiled_forward, name="tiled attention", head_dims=(d,), block_m=tcfg[d].block_m,
        block_n=tcfg[d].block_n, row_group=tcfg[d].cg) for d in dims])
    guarded("backward", lambda: checks.check_attention_backward(kernels.backward, head_dims=dims,
                                                                block_m=8 if sim else 64))
    if sim or not tc_dims:
        return
    from kernel_lab.attention import tensor_core

    def tc_check():
        fwd = {d: tensor_core.TensorCoreAttention(head_dim=d) for d in tc_dims}
        checks.check_attention_forward(lambda o, l_, q, k, v, lens, c, s: fwd[q.shape[3]](o, l_, q, k, v, lens, c, s),
                                       name="tensor-core attention", head_dims=tc_dims, block_m=64, block_n=32,
                                       dtype=np.float16, fmt="float16")
    guarded("tensor-core forward", tc_check)


def record(m, key=None):
    RESULTS["timings"][key or m.name] = {"ms": m.ms, "tflops": m.tflops}
    return m


def cuda_core_forward():
    from numba import cuda

    from kernel_lab.attention import kernels, reference, tiled

    n, h = 4096, 16
    out = {}
    for d in (64, 128):
        rng = np.random.default_rng(d)
        shape = (1, h, n, d)
        q, k, v = (cuda.to_device(rng.standard_normal(shape).astype(np.float32)) for _ in range(3))
        o, lse = cuda.device_array(shape, np.float32), cuda.device_array(shape[:3], np.float32)
        lens = cuda.to_device(np.full(1, n, np.int32))
        scale = 1 / math.sqrt(d)
        flops = reference.attention_flops(1, h, n, d)
        if d == 64:
            s_buf = cuda.device_array((h, n, n), np.float32)
            out["naive"] = record(kl.benchmark(f"naive fp32 d={d}", lambda: kernels.naive_forward(
                o, lse, q, k, v, lens, False, scale, s_buf), flops=flops, inputs=(q,)))
            del s_buf
        out[f"fused{d}"] = record(kl.benchmark(f"fused fp32 d={d}", lambda: kernels.fused_forward(
            o, lse, q, k, v, lens, False, scale), flops=flops, inputs=(q,)))
        out[f"tiled{d}"] = record(kl.benchmark(f"tiled fp32 d={d}", lambda: tiled.tiled_forward(
            o, lse, q, k, v, lens, False, scale), flops=flops, inputs=(q,)))
        out[f"causal{d}"] = record(kl.benchmark(f"fused fp32 causal d={d}", lambda: kernels.fused_forward(
            o, lse, q, k, v, lens, True, scale), flops=reference.attention_flops(1, h, n, d, causal=True)))
    ratio = out["naive"].ms / out["fused64"].ms
    RESULTS["ratios"]["fused / naive, N=4096, d=64, fp32"] = ratio
    print(f"fused / naive: {ratio:.2f}x (goal 3x: {'reached' if ratio >= 3 else 'NOT reached'})")
    print(f"causal / full time, d=64: {out['causal64'].ms / out['fused64'].ms:.2f}")
    ratio = out["naive"].ms / out["tiled64"].ms
    RESULTS["ratios"]["tiled / naive, N=4096, d=64, fp32"] = ratio
    print(f"tiled (kernel_lab.attention.tiled) / naive: {ratio:.2f}x "
          f"(goal 3x: {'reached' if ratio >= 3 else 'NOT reached'})")


def tensor_core_forward(tc_dims):
    from numba import cuda

    from kernel_lab.attention import reference, tensor_core

    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch not installed: no SDPA comparison")
    b, h, n, d = 4, 16, 4096, 128
    if d not in tc_dims:
        return
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((b, h, n, d)).astype(np.float16) for _ in range(3)]
    q, k, v = (cuda.to_device(a) for a in arrays)
    o, lse = cuda.device_array((b, h, n, d), np.float32), cuda.device_array((b, h, n), np.float32)
    lens = cuda.to_device(np.full(b, n, np.int32))
    fwd = tensor_core.TensorCoreAttention(head_dim=d)
    for causal in (False, True):
        label = "causal" if causal else "full"
        flops = reference.attention_flops(b, h, n, d, causal=causal)
        ours = record(kl.benchmark(f"tensor cores fp16 d={d} {label}", fwd.launcher(o, lse, q, k, v, lens, causal),
                                   flops=flops, inputs=(q,)))
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(a).cuda() for a in arrays)
            sdpa = torch.nn.functional.scaled_dot_product_attention
            theirs = record(kl.benchmark(f"SDPA fp16 d={d} {label}", lambda: sdpa(tq, tk, tv, is_causal=causal),
                                         flops=flops))
            ratio = theirs.ms / ours.ms
            RESULTS["ratios"][f"tensor cores / SDPA, {label}"] = ratio
            print(f"tensor cores / SDPA, {label}: {ratio:.3f}x (goal 0.4x: {'reached' if ratio >= 0.4 else 'NOT reached'})")


def cuda_core_backward():
    from numba import cuda

    from kernel_lab.attention import kernels, reference

    try:
        import torch
    except ImportError:
        torch = None
    n, h = 4096, 16
    for d in (64, 128):
        rng = np.random.default_rng(d)
        host = [rng.standard_normal((1, h, n, d)).astype(np.float32) for _ in range(4)]
        q, k, v, d_o = (cuda.to_device(a) for a in host)
        o, lse = cuda.device_array(q.shape, np.float32), cuda.device_array(q.shape[:3], np.float32)
        lens = cuda.to_device(np.full(1, n, np.int32))
        scale = 1 / math.sqrt(d)
        kernels.fused_forward(o, lse, q, k, v, lens, False, scale)
        grads = [cuda.device_array(q.shape, np.float32) for _ in range(3)]
        dlt = cuda.device_array((h, n), np.float32)
        flops = reference.attention_flops(1, h, n, d, backward=True)
        ours = record(kl.benchmark(f"backward fp32 d={d}", lambda: kernels.backward(
            *grads, q, k, v, o, lse, d_o, lens, False, scale, delta_buffer=dlt), flops=flops, inputs=(q,)))
        if torch is None:
            continue
        for dtype in (torch.float16, torch.float32):
            tq, tk, tv = (torch.from_numpy(a).cuda().to(dtype).requires_grad_() for a in host[:3])
            tdo = torch.from_numpy(host[3]).cuda().to(dtype)
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
            name = f"SDPA backward {str(dtype)[6:]} d={d}"
            theirs = record(kl.benchmark(name, lambda: torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True),
                                         flops=flops))
            ratio = theirs.ms / ours.ms
            RESULTS["ratios"][f"backward / {name}"] = ratio
            print(f"ours / {name}: {ratio:.3f}x (goal 0.3x)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="run in the CUDA simulator (checks only, tiny sizes)")
    p.add_argument("--tc-head-dims", default="128", help="head dims of the tensor-core check ('' to skip)")
    args = p.parse_args()
    if args.sim and not kl.on_simulator():
        print("--sim: set NUMBA_ENABLE_CUDASIM=1 (this machine has a GPU)", file=sys.stderr)
        sys.exit(2)
    env = kl.setup(requires=[])
    tc_dims = tuple(int(x) for x in args.tc_head_dims.split(",") if x)
    if not env.simulator:
        try:
            import nvmath  # noqa: F401
        except ImportError:
            print("nvmath-python not installed: tensor-core kernels skipped")
            tc_dims = ()
    section("checks")
    run_checks(env.simulator, tc_dims)
    if not env.simulator:
        section("fused vs naive, CUDA cores, fp32, N = 4096")
        guarded("timing: CUDA-core forward", cuda_core_forward)
        section("tensor cores vs SDPA, fp16, N = 4096, d = 128")
        guarded("timing: tensor-core forward", lambda: tensor_core_forward(tc_dims))
        section("backward vs SDPA backward, N = 4096")
        guarded("timing: backward", cuda_core_backward)
    out = os.environ.get("OUT")
    if out:
        Path(out, "module04_probe.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    failed = [k for k, v in RESULTS["checks"].items() if v != "ok"]
    print(f"\n{len(RESULTS['checks']) - len(failed)} of {len(RESULTS['checks'])} steps ok" +
          (f"; failed: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
