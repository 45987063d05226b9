#!/usr/bin/env python3
"""Launch module 02's SGEMM kernels 3-6 once each at 4096^3, for Nsight Compute to profile.

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        python3 scripts/probes/sgemm_ncu.py

Each kernel is launched once (ncu profiles every launch; compiling happens before the launch, so
it is not in the profile). Answers why kernels 4 and 5 (register blocking) measured no faster
than kernel 3 on an H100 while kernel 6 (flat arrays, 16-byte loads) was 2.6x faster.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab  # noqa: E402,F401
from numba import cuda  # noqa: E402

from kernel_lab.reductions_gemm import sgemm  # noqa: E402

n = 4096
rng = np.random.default_rng(0)
a = cuda.to_device(rng.standard_normal((n, n), dtype=np.float32))
b = cuda.to_device(rng.standard_normal((n, n), dtype=np.float32))
c = cuda.device_array((n, n), np.float32)
for name in ("launch_shared", "launch_1d_blocking", "launch_2d_blocking", "launch_vectorized"):
    getattr(sgemm, name)(c, a, b)
    cuda.synchronize()
    print(name, "launched", flush=True)
