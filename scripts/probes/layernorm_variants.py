"""Probe: 03.3's LayerNorm + GELU kernels against the copy roofline and PyTorch, row length by row length.

    PYTHONPATH=utilities python3 scripts/probes/layernorm_variants.py [--sim] [--json PATH]

Variants: the first version (Welford's update as each value arrives, one warp per row), one warp
per row with every load first (compiled per row-length class), the same with four values per access
(``load4``), one block per row with four values per access (128 to 1024 threads), and PyTorch's
LayerNorm then GELU (two kernels). Each kernel is checked first
(``check_layernorm_gelu``), then timed at the sweep's fixed 2^25 values per size. Under ``--sim``:
the checks only, at the simulator's sizes.

Measured on an H200 (2026-11-26), fraction of the copy roofline, float32 / float16, at 2^25 values:
the first version 13-27% / 6-14%; one value per access with every load first 34-51% / 17-27%, and
float16 rows took as long as float32 rows (instruction-bound: ~70 SASS instructions per value, most
of them 64-bit index arithmetic); four values per access, warp per row 72.8% at N = 128 and 94% at
N = 256-1024 / 37-67%; block per row x4 with 128 threads 93-94% at N = 2048-4096 and with 256
threads 89.5% at 8192 / 54-58%; 512 and 1024 threads were slower at every size. PyTorch's LayerNorm
then GELU: 14-41% / 10-33%. Before ``fastmath`` and GELU as v * sigmoid(2u) (libdevice tanhf and
IEEE divisions), the same loads-first kernels reached only 34-52% in float32.

Then (H100, 2026-11-27), for float16 rows: the offline sm_90 SASS of ``row_kernel(32, 4, 4)`` at
N = 512 had about 600 instructions for a lane's 16 values, 37 per value in float16 and float32
alike, mostly float arithmetic, where at the copy roofline an H100 can issue only about 44 per
float16 value (4 bytes). Unsigned indices, the normalisation as two FMAs and, for float16 rows,
GELU by ``tanh.approx`` (``layernorm.gelu_fast``) took it to 472 (29.5 per value): best float16
fraction for N = 128 ... 8192 from 49.1, 68.9, 85.2, 85.4, 82.7, 82.3, 79.0, 73.7% to 65.4, 86.8,
96.2, 91.8, 90.3, 88.4, 85.4, 79.7% (the float16 check passes with the approximate tanh); an exp2
form of GELU without it was worse than before from N = 512; float32 stayed at 91.4-101.5%. Refuted:
a persistent grid (4, 8 or 16 blocks per SM walking the rows, gamma and beta loaded into registers
once) was slower at every size (float16 N = 512: 79.1% against 95.6%; float32 N = 128: 84.7% against
97.8%): a warp's next row cannot start loading before its current row is stored, where a grid of
one warp per row keeps many rows' loads in flight.

Third round (H100 then H200, 2026-11-27): ``row_kernel`` with sub-warp teams (8 or 16 lanes a row),
two-pass statistics (a sum, then the squared deviations about the mean: plain sums, one shuffle a
round) and gamma/beta loaded after the statistics (``late_affine``). H100, float16: 8 lanes a row
96.3% at N = 128 (warp per row 61.8%), 16 lanes 97.1% at 256, a block of 128 with late affine 96.6%
at 1024, 256 with late affine 99.8% at 4096, 512 with late affine 94.6% at 8192 (block of 256 x4:
79.0%). Every winner held about 16 values per thread. H200, the rule "the power of two of threads
that leaves 16 values each, gamma and beta late" against 8 values each and early loads: best or
level at every length, float32 93.3-97.1%, float16 76.6-87.5% (the H200's 4.3 TB/s leaves fewer
instructions per byte). It became the package's kernel (``launch_layernorm_gelu``); 03.3 stores it.
"""

import argparse
import json
import sys

import numpy as np

import kernel_lab as kl

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
ap.add_argument("--json")
ap.add_argument("--ns", help="comma-separated row lengths (default: the sweep's)")
ap.add_argument("--kernels", help="comma-separated parts of the names of the kernels to run (default: all)")
args = ap.parse_args()
env = kl.setup(quiet=True)
if env.simulator != args.sim:
    sys.exit("run with --sim under the simulator, without it on a GPU")
from numba import float32  # noqa: E402

from kernel_lab.checks import fusion as checks  # noqa: E402
from kernel_lab.fusion import layernorm as ln  # noqa: E402

torch = None
if not args.sim:
    try:
        import torch
    except ImportError:
        torch = None

KERNELS = {"Welford per element (first version)": (ln.launch_welford_per_element, 32 * ln.WARP_VALUES),
           "warp per row, loads first": (ln.launch_warp_per_row, 32 * ln.WARP_VALUES),
           "warp per row, x4": (ln.launch_warp_per_row_x4, 32 * ln.WARP_VALUES)}
for t in (128, 256, 512, 1024) if not args.sim else (32, 64):
    KERNELS[f"block of {t} per row, x4"] = (
        lambda y, mean, rstd, x, gamma, beta, t=t: ln.launch_block_per_row_x4(y, mean, rstd, x, gamma, beta, threads=t),
        ln.block_row_limit(t))


def rows_launcher(per_row, stats="two_pass", late=False):
    """``row_kernel`` with ``per_row`` threads per row (x4 where the row allows it)."""
    def launch(y, mean, rstd, x, gamma, beta):
        n = x.shape[1]
        width = 4 if n % 4 == 0 else 1
        k = ln.row_kernel(per_row, ln.values_per_lane(n, width * per_row), width, x.dtype == np.float16, stats, late)
        if per_row <= 32:
            k[-(-x.shape[0] // (128 // per_row)), 128](x, gamma, beta, y, mean, rstd, float32(ln.EPS))
        else:
            k[x.shape[0], per_row](x, gamma, beta, y, mean, rstd, float32(ln.EPS))
    return launch


def policy_launcher(per_thread, late):
    """Threads per row: the power of two (8 to 1024) nearest above n / ``per_thread``."""
    def launch(y, mean, rstd, x, gamma, beta):
        t = min(1024, max(8, 1 << max(0, -(-x.shape[1] // per_thread) - 1).bit_length()))
        rows_launcher(t, late=late)(y, mean, rstd, x, gamma, beta)
    return launch


for vpt in (8, 16):
    for late in (False, True):
        KERNELS[f"{vpt} values per thread{', late affine' if late else ''}"] = (policy_launcher(vpt, late), 8192)
for pr, limit in ((8, 512), (16, 1024), (32, 2048)):
    KERNELS[f"{pr} lanes per row, two-pass"] = (rows_launcher(pr), limit if not args.sim else 2 * pr * 4)
for t in (128, 256, 512) if not args.sim else (64,):
    for late in (False, True):
        KERNELS[f"block of {t} per row, two-pass{', late affine' if late else ''}"] = (
            rows_launcher(t, late=late), ln.block_row_limit(t))
if args.kernels:
    KERNELS = {k: v for k, v in KERNELS.items() if any(part in k for part in args.kernels.split(","))}
for name, (launch, max_n) in KERNELS.items():
    for dt in ("float32", "float16"):
        checks.check_layernorm_gelu(launch, dtype=dt, name=name, max_n=max_n)
if args.sim:
    sys.exit(0)

rng = np.random.default_rng(0)
rows_out = []
for dtype in (np.float32, np.float16):
    for n in ([int(v) for v in args.ns.split(",")] if args.ns else ln.SWEEP.ns):
        rows = ln.sweep_rows(n)
        x, gamma, beta, y, mean, rstd = ln.sweep_arrays(n, dtype, rng)
        nbytes = ln.bytes_moved(rows, n, np.dtype(dtype).itemsize)
        tag = f"{np.dtype(dtype).name} {rows}x{n}"
        res = {}
        for name, (launch, max_n) in KERNELS.items():
            if n <= max_n and not (name.startswith("block of") and 4 * int(name.split()[2]) > 2 * n) and not (
                    "lanes per row" in name and 4 * int(name.split()[0]) * 32 < n):
                res[name] = kl.benchmark(name, lambda launch=launch: launch(y, mean, rstd, x, gamma, beta),
                                         bytes=nbytes, inputs=(x,), quiet=True)
        if torch is not None:
            res["PyTorch LayerNorm, GELU"] = kl.benchmark("torch", ln.torch_unfused(torch, x, gamma, beta),
                                                          bytes=nbytes, quiet=True)
        peer = res.get("PyTorch LayerNorm, GELU")
        for name, m in res.items():
            line = f"{tag:<22} {name:<38} {m.ms * 1e3:9.1f} us {100 * m.fraction:6.1f}% copy"
            if peer is not None and m is not peer:
                line += f"  {peer.ms / m.ms:5.2f}x PyTorch"
            print(line, flush=True)
            rows_out.append(dict(dtype=np.dtype(dtype).name, rows=rows, n=n, kernel=name, us=m.ms * 1e3,
                                 fraction=m.fraction, vs_torch=(peer.ms / m.ms) if peer is not None else None))
if args.json:
    with open(args.json, "w") as f:
        json.dump(dict(gpu=kl.gpu_info().name, rows=rows_out), f, indent=1)
