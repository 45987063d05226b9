#!/usr/bin/env python3
"""Why 05.5's warp-per-row ternary GEMM is latency-bound, and what fixes it (N = K = 4096).

    PYTHONPATH=utilities python3 scripts/probes/ternary_variants.py

The warp-per-row kernel took 54 us at M = 1 on an H100 (3% of the copy roofline on its 4 MB),
growing ~linearly with M. Variants, each checked with check_ternary_gemm, then timed beside CuPy:
  warp       : the notebook's (branches around each activation load, one weight byte per trip)
  select     : the activation loaded unconditionally, added through a select (no branch)
  select x4  : and four weight bytes loaded per trip before any is used (4 loads in flight)
  dp4a       : the package's (05.5 exercise 3): byte -> four int8 weights by a 256-word table in
               shared memory, one DP4A per byte with the activations read four to a word (with the
               table read from global memory instead it measured 16.1 us at M = 1, against 14.5)
  dp4a mt4   : and four activation rows per warp pass, accumulators in a local array
  dp4a w32   : and the weights read four bytes (16 codes) per lane load (K a multiple of 16)
  rows4      : the package's (exercise 4): w32 with four rows per pass in four scalar accumulators
Measured on an H100 (2026-11-26), speed vs CuPy SGEMM at M = 1 / 4 / 16: warp 0.63 / 0.24 / 0.09x,
select x4 0.86 / 0.35 / 0.14x, dp4a 2.0 / 1.0 / 0.44x, dp4a mt4 1.16 / 0.58 / 0.41x (the array went
to local memory), dp4a w32 2.2 / 1.4 / 0.8x, rows4 1.74 / 2.16 / 1.01x.
"""
import numpy as np

import kernel_lab as kl

env = kl.setup(requires=["warp"])
from numba import cuda, float32, int32  # noqa: E402

from kernel_lab.checks import quantization as checks  # noqa: E402
from kernel_lab.quant import integer as qint  # noqa: E402
from kernel_lab.quant import ternary  # noqa: E402
from kernel_lab.quant import warp as qwarp  # noqa: E402
from kernel_lab.device.dp4a import dp4a  # noqa: E402

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
    acc = qwarp.warp_sum(acc)
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
    acc = qwarp.warp_sum(acc)
    if lane == 0:
        out[m, n] = float32(acc) * a_scale[m] * w_scale[0]


MT4 = 4


@cuda.jit
def tern_dp4a_mt(a_words, a_scale, w, w_scale, out, lut):
    table = cuda.shared.array(256, int32)
    table[cuda.threadIdx.x] = lut[cuda.threadIdx.x]
    cuda.syncthreads()
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * W8 + cuda.threadIdx.x // 32
    m0 = cuda.blockIdx.y * MT4
    if n >= out.shape[1]:
        return
    rows = out.shape[0]
    acc = cuda.local.array(MT4, int32)
    for i in range(MT4):
        acc[i] = int32(0)
    for j in range(lane, w.shape[1], 32):
        wt = table[w[n, j]]
        for i in range(MT4):
            if m0 + i < rows:
                acc[i] = dp4a(a_words[m0 + i, j], wt, acc[i])
    for i in range(MT4):
        v = qwarp.warp_sum(acc[i])
        if lane == 0 and m0 + i < rows:
            out[m0 + i, n] = float32(v) * a_scale[m0 + i] * w_scale[0]


@cuda.jit
def tern_dp4a_w32(a_words, a_scale, w32, w_scale, out, lut):
    table = cuda.shared.array(256, int32)
    table[cuda.threadIdx.x] = lut[cuda.threadIdx.x]
    cuda.syncthreads()
    lane = cuda.threadIdx.x % 32
    n = cuda.blockIdx.x * W8 + cuda.threadIdx.x // 32
    m0 = cuda.blockIdx.y * MT4
    if n >= out.shape[1]:
        return
    rows = out.shape[0]
    acc = cuda.local.array(MT4, int32)
    for i in range(MT4):
        acc[i] = int32(0)
    for jw in range(lane, w32.shape[1], 32):
        word = w32[n, jw]
        for q in range(4):
            wt = table[(word >> (8 * q)) & 0xFF]
            j = 4 * jw + q
            for i in range(MT4):
                if m0 + i < rows:
                    acc[i] = dp4a(a_words[m0 + i, j], wt, acc[i])
    for i in range(MT4):
        v = qwarp.warp_sum(acc[i])
        if lane == 0 and m0 + i < rows:
            out[m0 + i, n] = float32(v) * a_scale[m0 + i] * w_scale[0]


def launch_dp4a_mt(out, a, a_scale, w, w_scale):
    tern_dp4a_mt[(-(-out.shape[1] // W8), -(-out.shape[0] // MT4)), 32 * W8](
        ternary.activation_words(a), a_scale, w, w_scale, out, ternary.ternary_lut_device())


def launch_dp4a_w32(out, a, a_scale, w, w_scale):
    if w.shape[1] % 4:  # the check's ragged K: pad the packed rows to whole words
        w = cuda.to_device(qint.pad_cols(w.copy_to_host(), 4))
    a_words = ternary.activation_words(a)
    if a_words.shape[1] < 4 * w.shape[1] // 4 * 1 and a_words.shape[1] % 4:
        a_words = cuda.to_device(qint.pad_cols(a_words.copy_to_host(), 4))
    tern_dp4a_w32[(-(-out.shape[1] // W8), -(-out.shape[0] // MT4)), 32 * W8](
        a_words, a_scale, w.view(np.uint32), w_scale, out, ternary.ternary_lut_device())


def launcher(kernel):
    def launch(out, a, a_scale, w, w_scale):
        kernel[(-(-out.shape[1] // W8), out.shape[0]), 32 * W8](a, a_scale, w, w_scale, out)
    return launch


VARIANTS = {"warp": ternary.launch_ternary_gemm_warp, "select": launcher(tern_select),
            "select x4": launcher(tern_select4),
            "dp4a (package: exercise 3)": ternary.launch_ternary_gemm_dp4a, "dp4a mt4": launch_dp4a_mt,
            "dp4a w32": launch_dp4a_w32, "rows4 (package: exercise 4)": ternary.launch_ternary_gemm_rows4}


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
    ternary.launch_ternary_quantize(packed, w_scale, W)
    for m in (1, 4, 16):
        X = cuda.to_device(rng.standard_normal((m, k)).astype(np.float32))
        aq, a_scale = cuda.device_array((m, k), np.int8), cuda.device_array(m, np.float32)
        ternary.launch_int8_rows(aq, a_scale, X)
        Y = cuda.device_array((m, n), np.float32)
        moved = packed.size + aq.size + 4 * Y.size
        res = [kl.benchmark(f"{name}, M={m}", lambda launch=launch: launch(Y, aq, a_scale, packed, w_scale),
                            bytes=moved, inputs=(aq,), quiet=True) for name, launch in VARIANTS.items()]
        cw, cx = cp.asarray(W), cp.asarray(X)
        res.append(kl.benchmark(f"CuPy SGEMM, M={m}", lambda: cx @ cw.T, bytes=4 * (cw.size + cx.size + m * n), quiet=True))
        kl.compare(res, baseline=-1)


main()
