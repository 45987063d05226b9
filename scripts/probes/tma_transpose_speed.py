"""Probe: why 08.2's tensor-copy transposes run at 25-26% of the copy roofline on an H200.

Question. 08.2's stored run (H200, 2026-11-29, a 16384 x 16384 float32 matrix): Exercise 2's
transpose (one 32 x 32 box a block) 25%, the same with plain rows 26%, the ring of 4 stages 26%,
where 01.3's transpose_fast (the threads' own loads, a padded tile) reached 87%. The swizzle and the
ring changed nothing, so something they share limits all three. This probe times, at the same size,
tensor copies *without* a transposition (box in, same box out) at several box shapes, and the
transposes, one block a box (scripts/hopper_tma.py's tile kernel): if the plain copy is as slow, the
tensor copies of small boxes are the limit; if it is fast, the transposed stores are.

    PYTHONPATH=utilities python3 scripts/probes/tma_transpose_speed.py          # an H100/H200
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/tma_transpose_speed.py --sim

Result (H200, 2026-11-29; 01.3's transpose_fast 87%). One box a block, % of the copy roofline:
copies 32 x 32 (4 KB, swizzle 128) 22%, 64 x 32 32%, 128 x 32 35%, 32 x 64 (no swizzle) 38%, 64 x 64
56%; transposes 32 x 32 19% (swizzle 128) and 20% (plain rows), 64 x 32 in, 32 x 64 out 36%; 08.2's
tma_copy (thread 0 alone) 29%. The transposition costs little and the swizzle nothing measurable:
a tensor copy of a small box, one in flight a block, is what is slow. Second round (--ring), 08.2's
kernels with more boxes in flight: Exercise 2's kernel at 256 / 128 / 64 threads 25 / 26 / 30%; the
ring at 2, 4, 8 blocks an SM (4 stages) 27, 35, 47% (8 blocks x 128 threads), 8 blocks x 2 stages 39%,
4 blocks x 8 stages 35%, 6 blocks x 128 threads x 8 stages 40%. More boxes in flight help, but 4 KB
boxes stay far from the goal: a faster transpose needs larger boxes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import kernel_lab as kl

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
ap.add_argument("--ring", action="store_true", help="only the second round: 08.2's own kernels, blocks and stages varied")
args = ap.parse_args()
env = kl.setup(quiet=True)
if env.simulator != args.sim:
    sys.exit("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and the timings only on a GPU")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from numba import cuda  # noqa: E402

import hopper_tma as ht  # noqa: E402
from kernel_lab.device.tensor_map import TensorMap2D  # noqa: E402
from kernel_lab.hopper_async import tma_tiles as tt  # noqa: E402

# (what, box (rows, cols) of the input, swizzle of the input's tile, of the output's, threads)
VARIANTS = [("copy", (32, 32), 128, 128, 256), ("copy", (64, 32), 128, 128, 256), ("copy", (128, 32), 128, 128, 256),
            ("copy", (32, 64), 0, 0, 256), ("copy", (64, 64), 0, 0, 256),
            ("transpose", (32, 32), 128, 128, 256), ("transpose", (32, 32), 0, 0, 256),
            ("transpose", (64, 32), 128, 0, 256)]


# the second round (--ring): 08.2's package kernels with more boxes in flight an SM. Exercise 2's
# kernel at fewer threads a block (more resident blocks: one box each); the ring at (blocks an SM,
# stages, threads)
ONE_BOX_THREADS = (256, 128, 64)
RING = [(2, 4, 256), (4, 4, 256), (8, 4, 128), (8, 2, 256), (4, 8, 256), (6, 8, 128)]


def ring_round():
    n = 3 * 8 + 4 if args.sim else 16384
    rng = np.random.default_rng(0)
    host = rng.standard_normal((n, n), dtype=np.float32)
    a = cuda.to_device(host)
    out = cuda.device_array((n, n), np.float32)
    box, swizzle = (8, 128) if args.sim else (32, 128)
    sm, dm = tt.tensor_maps(a, out, box, swizzle)
    sms = 2 if args.sim else env.gpu.multiprocessors
    consts = dict(BOX=box, SWIZZLE=swizzle, TILE_ELEMS=tt.tile_elems(box, swizzle))
    measured = []
    runs = [(f"Exercise 2's kernel, {t} threads", lambda t=t, k=tt.with_constants(tt.tma_transpose, **consts):
             tt.launch_tma_transpose(k, sm, dm, threads=t)) for t in ONE_BOX_THREADS]
    for per_sm, stages, threads in RING:
        k = tt.with_constants(tt.tma_transpose_ring, STAGES=stages, **consts)
        runs.append((f"ring: {per_sm} blocks/SM x {threads} threads, {stages} stages",
                     lambda k=k, per_sm=per_sm, stages=stages, threads=threads:
                     tt.launch_tma_ring(k, sm, dm, blocks=min(per_sm * sms, (n // box) ** 2 or 1), stages=stages,
                                        threads=threads)))
    for name, launch in runs:
        out.copy_to_device(np.full((n, n), np.nan, np.float32))
        launch()
        ok = np.array_equal(out.copy_to_host(), host.T)
        print(f"{name}: {'correct' if ok else 'WRONG'}")
        if ok and not args.sim:
            measured.append(kl.benchmark(name, launch, bytes=8 * n * n, inputs=(a,)))
    if measured:
        kl.compare(measured, baseline=0)


def main():
    if args.ring:
        return ring_round()
    n = 64 if args.sim else 16384
    rng = np.random.default_rng(0)
    host = rng.standard_normal((n, n), dtype=np.float32)
    a = cuda.to_device(host)
    out = cuda.device_array((n, n), np.float32)
    nbytes = 8 * n * n
    measured = []
    for what, box, sw_in, sw_out, threads in VARIANTS:
        transpose = what == "transpose"
        kernel = ht.make_tile_kernel(np.float32, transpose)
        src = TensorMap2D(a, box, sw_in)
        dst = TensorMap2D(out, (box[1], box[0]) if transpose else box, sw_out)
        in_bytes = -(-src.smem_bytes // 1024) * 1024
        shared = 1024 + in_bytes + dst.smem_bytes
        grid = (-(-n // box[1]), -(-n // box[0]))

        def launch(kernel=kernel, src=src, dst=dst, grid=grid, shared=shared, box=box, sw_in=sw_in,
                   sw_out=sw_out, in_bytes=in_bytes, threads=threads):
            kernel[grid, threads, 0, shared](src, dst, box[0], box[1], sw_in, sw_out, in_bytes)

        out.copy_to_device(np.full((n, n), np.nan, np.float32))
        launch()
        ok = np.array_equal(out.copy_to_host(), host.T if transpose else host)
        name = f"{what}, box {box[0]} x {box[1]}, swizzle {sw_in}/{sw_out}, one box a block"
        print(f"{name}: {'correct' if ok else 'WRONG'}")
        if ok and not args.sim:
            measured.append(kl.benchmark(name, launch, bytes=nbytes, inputs=(a,)))
    if not args.sim:
        sm, dm = tt.tensor_maps(a, out, 32, 128)
        measured.append(kl.benchmark("08.2 tma_copy (package: thread 0 only)",
                                     lambda: tt.launch_tma_copy(tt.tma_copy, sm, dm), bytes=nbytes))
        measured.append(kl.benchmark("01.3 transpose_fast (package)", lambda: tt.launch_transpose_fast(out, a),
                                     bytes=nbytes))
        kl.compare(measured, baseline=-1)


main()
