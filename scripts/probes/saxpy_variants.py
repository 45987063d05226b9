"""Probe: which SAXPY formulation gets closest to the copy roofline on this GPU?

Run on a GPU machine: python scripts/probes/saxpy_variants.py. Prints each variant's fraction of the
copy bandwidth (median of repeats, L2 flushed), twice for the baseline to show the noise.
"""

import numpy as np

import kernel_lab as kl
from numba import cuda

kl.setup(requires=["gpu"], quiet=True)
n = 1 << 27
rng = np.random.default_rng(0)
a = np.float32(1.5)
x = cuda.to_device(rng.standard_normal(n, dtype=np.float32))
y = cuda.to_device(rng.standard_normal(n, dtype=np.float32))
out = cuda.device_array(n, dtype=np.float32)


@cuda.jit
def one_per_thread(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def four_strided(a, x, y, out):
    # 4 elements per thread, one grid-width apart: each warp access stays coalesced, and each thread
    # has 8 independent loads in flight before its first store.
    i = cuda.grid(1)
    s = cuda.gridsize(1)
    n = out.size
    if i + 3 * s < n:
        x0, x1, x2, x3 = x[i], x[i + s], x[i + 2 * s], x[i + 3 * s]
        y0, y1, y2, y3 = y[i], y[i + s], y[i + 2 * s], y[i + 3 * s]
        out[i] = a * x0 + y0
        out[i + s] = a * x1 + y1
        out[i + 2 * s] = a * x2 + y2
        out[i + 3 * s] = a * x3 + y3
    else:
        for j in range(4):
            k = i + j * s
            if k < n:
                out[k] = a * x[k] + y[k]


@cuda.jit
def grid_stride(a, x, y, out):
    i = cuda.grid(1)
    s = cuda.gridsize(1)
    while i < out.size:
        out[i] = a * x[i] + y[i]
        i += s


sms = kl.gpu_info().multiprocessors
variants = [
    ("one per thread, 256", lambda: one_per_thread[kl.blocks_for(n, 256), 256](a, x, y, out)),
    ("one per thread, 256 (again)", lambda: one_per_thread[kl.blocks_for(n, 256), 256](a, x, y, out)),
    ("one per thread, 512", lambda: one_per_thread[kl.blocks_for(n, 512), 512](a, x, y, out)),
    ("4 strided, 256", lambda: four_strided[kl.blocks_for(n, 4 * 256), 256](a, x, y, out)),
    ("4 strided, 512", lambda: four_strided[kl.blocks_for(n, 4 * 512), 512](a, x, y, out)),
    ("4 strided, 128", lambda: four_strided[kl.blocks_for(n, 4 * 128), 128](a, x, y, out)),
    ("grid-stride, 8 blocks/SM x 256", lambda: grid_stride[8 * sms, 256](a, x, y, out)),
    ("grid-stride, 16 blocks/SM x 256", lambda: grid_stride[16 * sms, 256](a, x, y, out)),
]
results = [kl.benchmark(name, fn, bytes=12 * n, repeat=50, quiet=True) for name, fn in variants]
for m in results:
    print(f"{m.name:34s} {m.ms * 1000:7.1f} us  {100 * m.fraction:5.1f}% of copy  spread {100 * m.spread:.0f}%")
