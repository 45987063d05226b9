#!/usr/bin/env python3
"""Launch module 07's fused kernel (7 slices) a few times at 8192^3, for Nsight Compute.

    ncu -k regex:fused --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section Occupancy python3 scripts/probes/ozaki_fused_ncu.py

What limits the fused kernel at 0.63x DGEMM on an H100, when grouping its tiles for L2 reuse
(scripts/probes/ozaki_grouped_tiles.py) bought only ~4%: tensor-pipe utilisation, and where the
warps wait.
"""
import sys

import kernel_lab as kl

kl.setup(quiet=True)
import cupy as cp  # noqa: E402

from kernel_lab.ozaki.gpu import OzakiConfig, OzakiGemm  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
g = OzakiGemm(7, "fused", OzakiConfig())
a = cp.random.standard_normal((n, n))
b = cp.random.standard_normal((n, n))
c = cp.empty((n, n))
for _ in range(3):
    g(a, b, c)
cp.cuda.Device().synchronize()
print("done", flush=True)
