#!/usr/bin/env python3
"""On a GPU: the mma.sync attention launchers with ragged kv_lens (host, device, None) against the float64
reference, and a length past the keys refused (kernel_lab.attention.lengths). Prints one line each.

    PYTHONPATH=utilities python3 scripts/probes/attention_lengths_gpu.py
"""

import numpy as np

import kernel_lab as kl

kl.setup(requires=["gpu"], quiet=True)
from numba import cuda  # noqa: E402

from kernel_lab.attention import flash, reference  # noqa: E402
from kernel_lab.validate import KernelLabArgumentError  # noqa: E402

rng = np.random.default_rng(0)
b, h, n, d = 2, 2, 200, 64
q, k, v = (rng.standard_normal((b, h, n, d)).astype(np.float16) for _ in range(3))
o = cuda.device_array((b, h, n, d), np.float32)
lse = cuda.device_array((b, h, n), np.float32)
for label, lens in (("None", None), ("host", [200, 77]), ("device", cuda.to_device(np.array([5, 200], np.int32)))):
    flash.flash_forward(o, lse, cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), lens, True)
    host = None if lens is None else (lens.copy_to_host() if hasattr(lens, "copy_to_host") else np.array(lens))
    ref_o, _ = reference.forward(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), kv_lens=host,
                                 causal=True)
    err = np.abs(o.copy_to_host() - ref_o).max()
    print(f"flash forward, kv_lens {label}: largest error {err:.2e} ({'ok' if err < 2e-2 else 'WRONG'})")
try:
    flash.flash_forward(o, lse, cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), [200, 201], False)
    print("a length past the keys: NOT refused")
except KernelLabArgumentError as e:
    print("a length past the keys: refused:", str(e).splitlines()[0])
