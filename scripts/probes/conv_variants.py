"""Probe: 03.2's 3x3 convolution + bias + ReLU (issue 12) against cuDNN, shape by shape.

    PYTHONPATH=utilities python3 scripts/probes/conv_variants.py [--sim] [--json PATH]

Variants: the best direct kernel of 03.2 (register blocked, 8 output channels x 4 pixels per
thread); the implicit GEMM on CUDA cores (``kl.fusion.conv.igemm_launcher``: module 02's
warp-tiled SGEMM, double-buffered, with a B loader that gathers im2col(x) from NCHW x on the fly and
a bias + ReLU epilogue that stores NCHW y) at a few tile configurations, with the weights reordered
to W' (C_out x 9 C_pad) once outside the timed call, and the default configuration with the reorder
inside the call; cuDNN through PyTorch in true float32 (``allow_tf32 = False``, the goal's
reference) and with TF32 tensor cores (labelled: a different, less accurate computation). Each
kernel is checked first (``check_conv``, with extra shapes whose C_in, C_out and H*W are not
multiples of the tiles), then timed with ``kl.benchmark`` (L2 flushed, median) at the issue's five
shapes; each time is printed with its ratio to cuDNN fp32's. Under ``--sim``: the checks only, at
the simulator's tile sizes.

Goal (issue 12): the best variant within 1.5x of cuDNN fp32's time on the two largest shapes, and
faster than it on at least one small shape.

Measured on an H100 (2026-11-27), time as a multiple of cuDNN fp32's, best implicit-GEMM tiles per
shape: (4, 32, 64, 64) 0.72x (64 x 64), (4, 32, 32, 64) 0.78x (32 x 128), (8, 32, 64, 128) 0.77x,
(8, 64, 64, 512) 0.83x, (8, 128, 128, 512) 0.93x (64 x 128, 42.3 TFLOP/s); the register-blocked
kernel 1.51-2.35x. Goal reached on every shape. Each configuration compiles in about 6 s (57 s
before the package's device functions were inlined by NVVM, ``forceinline=True``, instead of
Numba's ``inline="always"``, whose IR copies dominated the compile). 03.2's implicit-GEMM section
is built on these results (``conv.igemm_tiles_for`` picks the tile by C_out).
"""

import argparse
import json
import sys
import time

import numpy as np

import kernel_lab as kl

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
ap.add_argument("--json")
ap.add_argument("--repeat", type=int, default=10)
args = ap.parse_args()
env = kl.setup(quiet=True)
if env.simulator != args.sim:
    sys.exit("run with --sim under the simulator, without it on a GPU")
from numba import cuda  # noqa: E402

from kernel_lab.checks import fusion as checks  # noqa: E402
from kernel_lab.fusion import conv  # noqa: E402
from kernel_lab.reductions_gemm.sgemm import GemmTiles  # noqa: E402

torch = None
if not args.sim:
    try:
        import torch
    except ImportError:
        torch = None

# Tile configurations of the implicit GEMM: (label, GemmTiles). bm tiles C_out, bn the pixels.
if args.sim:
    CONFIGS = [("32x32x8, 4x4/thread, 64 thr", conv.igemm_tiles()),
               ("32x64x8, 4x8/thread, 64 thr", GemmTiles(32, 64, 8, 32, 32, 4, 4, 64, True)),
               ("32x128x8, 4x16/thread, 64 thr (2 pixels per loader thread)",
                GemmTiles(32, 128, 8, 32, 64, 4, 4, 64, True))]
    EXTRA = [("C_in and C_out past a tile", (2, 11, 33, 6, 8)), ("odd width", (1, 9, 5, 5, 7))]
else:
    CONFIGS = [("64x128x16, 8x8/thread, 128 thr", conv.igemm_tiles()),
               ("128x64x16, 8x8/thread, 128 thr", GemmTiles(128, 64, 16, 64, 32, 8, 4, 128, True, max_registers=168)),
               ("128x128x16, 8x8/thread, 256 thr", GemmTiles(128, 128, 16, 64, 32, 4, 4, 256, True)),
               ("64x64x16, 4x8/thread, 128 thr", GemmTiles(64, 64, 16, 32, 32, 4, 4, 128, True)),
               ("32x128x16, 4x8/thread, 128 thr", GemmTiles(32, 128, 16, 32, 32, 4, 4, 128, True))]
    EXTRA = [("C_in and C_out past a tile", (2, 19, 137, 33, 36)),
             ("wide odd width", (1, 32, 64, 9, 131))]


def shapes_for_check():
    base = [("odd", (2, 3, 5, 7, 6)), ("1 pixel", (1, 1, 1, 1, 1))]
    if not args.sim:
        base.insert(0, ("large", (2, 19, 37, 61, 45)))
    return base + EXTRA


RB_LABEL = f"register blocked ({conv.COB} ch x {conv.PX} px)"
launchers = {RB_LABEL: conv.VARIANTS[RB_LABEL]}
for label, cfg in CONFIGS:
    launchers[f"igemm {label}"] = conv.igemm_launcher(cfg)  # checked with the reorder in the call
DEFAULT = f"igemm {CONFIGS[0][0]}"

for name, launch in launchers.items():
    t0 = time.perf_counter()
    # the register-blocked kernel holds at most MAX_CIN channels' weights: its own shapes only
    checks.check_conv(launch, name=name, shapes=None if name == RB_LABEL else shapes_for_check())
    print(f"   ({time.perf_counter() - t0:.1f} s, compilation included)", flush=True)
if args.sim:
    sys.exit(0)

cudnn_fp32, cudnn_tf32 = "cuDNN fp32 (allow_tf32=False)", "cuDNN TF32 (allow_tf32=True)"
rng = np.random.default_rng(0)
results = []
for shape in conv.SHAPES:
    b, cin, cout, hw = shape
    x = cuda.to_device(rng.standard_normal((b, cin, hw, hw), dtype=np.float32))
    w = cuda.to_device((rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32))
    bias = cuda.to_device(rng.standard_normal(cout, dtype=np.float32))
    y = cuda.device_array((b, cout, hw, hw), np.float32)
    nbytes, nflops = conv.bytes_moved(b, cin, cout, hw, hw), conv.flops(b, cin, cout, hw, hw)
    fns = {RB_LABEL: lambda: launchers[RB_LABEL](y, x, w, bias)}
    for label, cfg in CONFIGS:
        wt = conv.prepare_weights(w, cfg.bk)  # once, outside the timed call
        run = conv.igemm_launcher(cfg, prepared=True)
        fns[f"igemm {label}"] = lambda run=run, wt=wt: run(y, x, wt, bias)
    fns[f"{DEFAULT}, weights reordered in the call"] = lambda: launchers[DEFAULT](y, x, w, bias)
    if torch is not None:
        fns.update(conv.torch_peers(torch, x, w, bias))
    row = {}
    for label, fn in fns.items():
        m = kl.benchmark(f"{label} {shape}", fn, bytes=nbytes, flops=nflops, peak="sgemm", inputs=(x,),
                         repeat=args.repeat, quiet=True)
        row[label] = m.ms
    # The implicit GEMM against cuDNN's own output at full size (fp32): indexing at large sizes
    err = None
    if torch is not None:
        torch.backends.cudnn.allow_tf32 = False
        ref = torch.relu(torch.nn.functional.conv2d(torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda"),
                                                    torch.as_tensor(bias, device="cuda"), padding=1))
        launchers[DEFAULT](y, x, w, bias)
        got = torch.as_tensor(y, device="cuda")
        err = float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref))
        del ref, got
    base = row.get(cudnn_fp32)
    print(f"\n(B, C_in, C_out, H=W) = {shape}: {nflops / 1e9:.1f} GFLOP"
          + (f"; implicit GEMM vs cuDNN fp32 output: relative error {err:.1e}" if err is not None else ""))
    for label, ms in row.items():
        ratio = f"{ms / base:5.2f}x cuDNN fp32" if base else ""
        print(f"  {label:<58} {ms:8.3f} ms  {nflops / ms / 1e9:6.1f} TFLOP/s  {ratio}")
    igemm = {k: v for k, v in row.items() if k.startswith("igemm") and "reordered" not in k}
    best = min(igemm, key=igemm.get)
    results.append(dict(shape=shape, ms=row, best_igemm=best, rel_err_vs_cudnn=err))
    del x, y

if torch is not None:
    print("\nGoal: best variant <= 1.5x cuDNN fp32 on the two largest shapes, < 1.0x on at least one small one")
    for r in results:
        base = r["ms"][cudnn_fp32]
        best = r["best_igemm"]
        print(f"  {str(r['shape']):<22} best igemm {r['ms'][best] / base:.2f}x ({best}); "
              f"default {r['ms'][DEFAULT] / base:.2f}x; register blocked {r['ms'][RB_LABEL] / base:.2f}x; "
              f"TF32 cuDNN {r['ms'][cudnn_tf32] / base:.2f}x")
    large = [r["ms"][r["best_igemm"]] / r["ms"][cudnn_fp32] for r in results[-2:]]
    small = [r["ms"][r["best_igemm"]] / r["ms"][cudnn_fp32] for r in results[:3]]
    print(f"  two largest within 1.5x: {all(v <= 1.5 for v in large)}; faster on a small shape: "
          f"{any(v < 1.0 for v in small)}")
if args.json:
    with open(args.json, "w") as f:
        json.dump(dict(gpu=str(cuda.get_current_device().name), results=results), f, indent=1)
