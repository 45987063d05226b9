#!/usr/bin/env python3
"""Run the tensor-core W4A8 once at a decode shape, for Nsight Compute (on a GPU):

    ncu -k regex:w4a8_mma --launch-skip 1 --launch-count 1 --section SpeedOfLight ... \\
        python3 scripts/probes/w4a8_mma_profile.py --m 64 --mtiles 2 --wr 2 --wk 4
    (the package's choice at M = 64 on a wide layer: --form tokens-inner --mtiles 2 --wr 4 --wk 2)

Launches twice (the first compiles and warms up); profile the second.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402
from numba import cuda  # noqa: E402  (after kernel_lab)

from kernel_lab.quant import integer as qref  # noqa: E402
from kernel_lab.quant import w4a8_mma as wm  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--n", type=int, default=14336)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--mtiles", type=int, default=2)
    p.add_argument("--wr", type=int, default=2)
    p.add_argument("--wk", type=int, default=4)
    p.add_argument("--nt", type=int, default=0, help="token tiles a block (0: all of M, at most 8)")
    p.add_argument("--minb", type=int, default=0)
    p.add_argument("--form", default="direct", choices=sorted(wm.FORMS), help="w4a8_mma.FORMS: the kernel's loop")
    a = p.parse_args()
    kl.setup(quiet=True)
    rng = np.random.default_rng(1)
    wf = rng.standard_normal((a.n, a.k)).astype(np.float32)
    scales = qref.int4_group_scales_f32(wf)
    w32 = cuda.to_device(qref.int4_pack(qref.int4_quantize_f32(wf, scales)).view(np.int32))
    ws = cuda.to_device(scales)
    xq, xs = qref.int8_per_row_f32(rng.standard_normal((a.m, a.k)).astype(np.float32))
    a32, xsd = cuda.to_device(qref.as_words(xq)), cuda.to_device(xs)
    y = cuda.device_array((a.m, a.n), np.float32)
    params = dict(MTILES=a.mtiles, WR=a.wr, WK=a.wk, MINB=a.minb, form=a.form)
    if a.nt:
        params["NT"] = a.nt
    for _ in range(2):
        wm.launch_w4a8_mma(y, a32, xsd, w32, ws, **params)
    cuda.synchronize()
    print("ran", params)


if __name__ == "__main__":
    main()
