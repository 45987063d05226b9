"""Probe: why 08.1's ring of stages stops at 74-78% of the copy roofline on an H200 while Exercise 2's
kernel (one tile a block, 8 blocks an SM) reaches 88%.

Question. 08.1's stored run (H200, 2026-11-29): the ring at 1, 2, 3 and 4 stages reached 56, 75, 74
and 78% of the copy roofline; it was predicted at 85-95% with four stages, from bytes in flight. The
flat line from two stages to four says the loads in flight are not what limits it. The other
difference from Exercise 2's kernel is the consumers: the ring runs 2 blocks of 256 threads an SM
(16 warps) where Exercise 2's kernel has up to 64 warps an SM copying tiles out of shared memory. This
probe varies one thing at a time on the package's ``ring_copy`` (kernel_lab.hopper_async.bulk_copies):
blocks an SM, threads a block, the tile's size, the stages, and prints each one's fraction of the
copy roofline.

    PYTHONPATH=utilities python3 scripts/probes/ring_copy_in_flight.py          # an H100/H200
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/ring_copy_in_flight.py --sim

Result (H200, 2026-11-29; Exercise 2's kernel 88% in both rounds). First round, 8 KB tiles: 2 blocks
an SM x 256 threads 77% (4 stages) and 74% (2 stages); 4 blocks 80% / 81%; 8 blocks, 2 stages 84%;
512 threads a block 63%, 1024 threads 40%, 4 blocks x 512 threads 61%; 16 KB tiles, 2 blocks, 4
stages 85%. Second round (--round2): 4 KB tiles 53%, 8 KB 77%, 16 KB 85% (4 stages), 87% (2), 85%
(3); 16 KB with 3 or 4 blocks an SM 84%; 2 blocks x 128 threads 85%; 32 KB tiles, 2 blocks, 3
stages 87%; 1 block, 4 stages 88%. Reading: the tile's size sets the pace, not the stages (2 to 4
change 3 points) nor the threads (more are slower): each tile costs the block a fixed round of
barrier waits and arrivals whatever its size, so larger tiles pay it less often.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import kernel_lab as kl

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
ap.add_argument("--round2", action="store_true", help="the second round's variants (ROUND2)")
args = ap.parse_args()
env = kl.setup(quiet=True)
if env.simulator != args.sim:
    sys.exit("--sim runs only in the simulator (NUMBA_ENABLE_CUDASIM=1), and the timings only on a GPU")

from numba import cuda  # noqa: E402

from kernel_lab.hopper_async import bulk_copies as bc  # noqa: E402

# (blocks an SM, threads a block, tile in float32, stages)
VARIANTS = [(2, 256, 2048, 4), (2, 256, 2048, 2), (4, 256, 2048, 4), (4, 256, 2048, 2), (8, 256, 2048, 2),
            (2, 512, 2048, 4), (2, 1024, 2048, 4), (2, 256, 4096, 4), (4, 512, 2048, 3)]
# the second round, after the first found 16 KB tiles at 85%: the tile's size against stages and blocks
ROUND2 = [(2, 256, 2048, 4), (2, 256, 4096, 4), (2, 256, 4096, 2), (2, 256, 4096, 3), (3, 256, 4096, 4),
          (4, 256, 4096, 3), (2, 256, 8192, 3), (1, 256, 8192, 4), (2, 128, 4096, 4), (2, 256, 1024, 4)]
SIM_VARIANTS = [(2, 32, 64, 3), (4, 64, 64, 2)]


def main():
    n = 8 * 4 * 64 * 4 if args.sim else 1 << 28
    rng = np.random.default_rng(0)
    host = rng.standard_normal(n, dtype=np.float32)
    src, out = cuda.to_device(host), cuda.device_array(n, np.float32)
    sms = 2 if args.sim else env.gpu.multiprocessors
    measured = []
    if not args.sim:
        measured.append(kl.benchmark("Exercise 2's kernel (one tile a block, 8 rounds)",
                                     lambda: bc.launch_rounds_copy(bc.rounds_copy, out, src, 8), bytes=8 * n,
                                     inputs=(src,)))
    for per_sm, threads, tile, stages in (SIM_VARIANTS if args.sim else ROUND2 if args.round2 else VARIANTS):
        kernel = bc.with_constants(bc.ring_copy, STAGES=stages, TILE=tile)
        blocks = min(per_sm * sms, -(-n // tile))
        smem = 4 * stages * tile
        if smem > 40 * 1024 and not args.sim:
            from kernel_lab.tensor_cores.toolchain import set_max_dynamic_shared_memory

            set_max_dynamic_shared_memory(kernel, (src, out, n), smem)
        launch = (lambda kernel=kernel, blocks=blocks, tile=tile, stages=stages, threads=threads:
                  bc.launch_ring_copy(kernel, out, src, blocks=blocks, tile=tile, stages=stages, threads=threads))
        out.copy_to_device(np.full(n, np.nan, np.float32))
        launch()
        ok = np.array_equal(out.copy_to_host(), host)
        name = f"ring: {per_sm} blocks/SM x {threads} threads, tiles of {4 * tile // 1024} KB, {stages} stages"
        print(f"{name}: {'correct' if ok else 'WRONG'}")
        if ok and not args.sim:
            measured.append(kl.benchmark(name, launch, bytes=8 * n, inputs=(src,)))
    if measured:
        kl.compare(measured, baseline=0)


main()
