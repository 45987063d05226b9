#!/usr/bin/env python3
"""Why 05.5's warp-per-row ternary GEMM is latency-bound, and what fixes it (N = K = 4096).

    PYTHONPATH=utilities python3 scripts/probes/ternary_variants.py

The warp-per-row kernel took 54 us at M = 1 on an H100 (3% of the copy roofline on its 4 MB),
growing ~linearly with M. Variants, each checked with check_ternary_gemm, then timed beside CuPy:
  warp       : the notebook's (branches around each activation load, one weight byte per trip)
  select     : the activation loaded unconditionally, added through a select (no branch)
  select x4  : and four weight bytes loaded per trip before any is used (4 loads in flight)
"""
import numpy as np

import kernel_lab as kl

env = kl.setup(requires=["warp"])
from numba import cuda, float32, int32  # noqa: E402

from kernel_lab.checks import quantization as checks  # noqa: E402
from kernel_lab.quant import kernels as qk  # noqa: E402

W8 = 8


@cuda.jit(device=True, inline="always")
def add_byte(acc, b, j, a, m, kk):
    for i in range(4):
        k = 4 * j + i
        v = int32(a[m, k]) if k < kk else int32(0)
        code = (b >> (2 * i)) & 3
        acc += v if code == 1 else (-v if code == 3 else int32(0))
    return acc


@cuda.jit
def tern_select(a, a_scale, w, w_scale, out):
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * W8 + cuda.threadIdx.x // 32
    m = cuda.blockIdx.y
    if n >= out.shape[1] or m >= out.shape[0]:
        return
    acc = int32(0)
    for j in range(lane, w.shape[1], 32):
        acc = add_byte(acc, int32(w[n, j]), j, a, m, a.shape[1])
    offset = 16
    while offset > 0:
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, offset)
        offset //= 2
    if lane == 0:
        out[m, n] = float32(acc) * a_scale[m] * w_scale[0]


@cuda.jit
def tern_select4(a, a_scale, w, w_scale, out):
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * W8 + cuda.threadIdx.x // 32
    m = cuda.blockIdx.y
    if n >= out.shape[1] or m >= out.shape[0]:
        return
    nb = w.shape[1]
    kk = a.shape[1]
    acc = int32(0)
    for j in range(lane, nb, 128):
        b0 = int32(w[n, j])
        b1 = int32(w[n, j + 32]) if j + 32 < nb else int32(0)
        b2 = int32(w[n, j + 64]) if j + 64 < nb else int32(0)
        b3 = int32(w[n, j + 96]) if j + 96 < nb else int32(0)
        acc = add_byte(acc, b0, j, a, m, kk)
        acc = add_byte(acc, b1, j + 32, a, m, kk)
        acc = add_byte(acc, b2, j + 64, a, m, kk)
        acc = add_byte(acc, b3, j + 96, a, m, kk)
    offset = 16
    while offset > 0:
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, offset)
        offset //= 2
    if lane == 0:
        out[m, n] = float32(acc) * a_scale[m] * w_scale[0]


def launcher(kernel):
    def launch(out, a, a_scale, w, w_scale):
        kernel[(-(-out.shape[1] // W8), out.shape[0]), 32 * W8](a, a_scale, w, w_scale, out)
    return launch


VARIANTS = {"warp": qk.launch_ternary_gemm_warp, "select": launcher(tern_select), "select x4": launcher(tern_select4)}


def main():
    for name, launch in VARIANTS.items():
        checks.check_ternary_gemm(launch, name=name)
    if env.simulator:
        return
    import cupy as cp

    n = k = 4096
    rng = np.random.default_rng(8)
    W = cuda.to_device(rng.standard_normal((n, k)).astype(np.float32))
    packed = cuda.device_array((n, k // 4), np.uint8)
    w_scale = cuda.device_array(1, np.float32)
    qk.launch_ternary_quantize(packed, w_scale, W)
    for m in (1, 4, 16):
        X = cuda.to_device(rng.standard_normal((m, k)).astype(np.float32))
        aq, a_scale = cuda.device_array((m, k), np.int8), cuda.device_array(m, np.float32)
        qk.launch_int8_rows(aq, a_scale, X)
        Y = cuda.device_array((m, n), np.float32)
        moved = packed.size + aq.size + 4 * Y.size
        res = [kl.benchmark(f"{name}, M={m}", lambda launch=launch: launch(Y, aq, a_scale, packed, w_scale),
                            bytes=moved, inputs=(aq,), quiet=True) for name, launch in VARIANTS.items()]
        cw, cx = cp.asarray(W), cp.asarray(X)
        res.append(kl.benchmark(f"CuPy SGEMM, M={m}", lambda: cx @ cw.T, bytes=4 * (cw.size + cx.size + m * n), quiet=True))
        kl.compare(res, baseline=-1)


main()
