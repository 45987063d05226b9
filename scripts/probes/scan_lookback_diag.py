#!/usr/bin/env python3
"""Why 02.2's single-pass scan reads NaN on an H100: instrumented look-backs at 16M elements.

    PYTHONPATH=utilities python3 scripts/probes/scan_lookback_diag.py

Variants of the look-back run by one thread (the notebook's), each five times:
  A: flag by cuda.ldcv, fence, value by cuda.ldcg            (the notebook's solution)
  B: flag and value by atomics (atomic.add of 0): no cache-hint loads at all
  C: the package's warp look-back (kernel_lab.reductions_gemm.scans.scan_single_pass_launch)
For A and B, thread 0 of each tile records what it saw (first flag, polls, the value read, the
exclusive prefix) so that the first wrong tile can be explained.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "utilities"))

import numpy as np  # noqa: E402

import kernel_lab as kl  # noqa: E402
from numba import cuda, float32, int32  # noqa: E402

from kernel_lab.reductions_gemm import scans  # noqa: E402
from kernel_lab.reductions_gemm.scans import (ITEMS, THREADS, TILE, TOTALS, block_exclusive_scan,  # noqa: E402
                                              load_items, scan_items, single_pass_scratch, store_items)

NONE, AGG, PRE = 0, 1, 2


def make(variant):
    @cuda.jit(device=True)
    def look_back(tile, flags, aggregates, prefixes, dbg):
        exclusive = float32(0)
        j = tile - 1
        polls = 0
        first_f = -1
        first_v = float32(-12345)
        while j >= 0:
            if variant == "A":
                f = cuda.ldcv(flags, j)
            else:
                f = cuda.atomic.add(flags, j, 0)
            while f == NONE:
                polls += 1
                if variant == "A":
                    f = cuda.ldcv(flags, j)
                else:
                    f = cuda.atomic.add(flags, j, 0)
            cuda.threadfence()
            if f == PRE:
                v = cuda.ldcg(prefixes, j) if variant == "A" else cuda.atomic.add(prefixes, j, float32(0))
            else:
                v = cuda.ldcg(aggregates, j) if variant == "A" else cuda.atomic.add(aggregates, j, float32(0))
            if first_f == -1:
                first_f = f
                first_v = v
            exclusive += v
            if f == PRE:
                break
            j -= 1
        dbg[tile, 0] = first_f
        dbg[tile, 1] = polls
        dbg[tile, 2] = first_v
        dbg[tile, 3] = exclusive
        dbg[tile, 4] = j
        return exclusive

    @cuda.jit
    def kernel(x, out, ticket, flags, aggregates, prefixes, dbg):
        totals = cuda.shared.array(TOTALS, float32)
        shared = cuda.shared.array(1, float32)
        tile_id = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        if t == 0:
            tile_id[0] = cuda.atomic.add(ticket, 0, 1)
        cuda.syncthreads()
        tile = tile_id[0]
        first = tile * TILE + t * ITEMS
        vals = cuda.local.array(ITEMS, float32)
        load_items(x, first, vals)
        s = scan_items(vals)
        before, total = block_exclusive_scan(s, totals)
        if t == 0:
            exclusive = float32(0)
            if tile == 0:
                prefixes[0] = total
                cuda.threadfence()
                cuda.atomic.exch(flags, 0, PRE)
            else:
                aggregates[tile] = total
                cuda.threadfence()
                cuda.atomic.exch(flags, tile, AGG)
                exclusive = look_back(tile, flags, aggregates, prefixes, dbg)
                prefixes[tile] = exclusive + total
                cuda.threadfence()
                cuda.atomic.exch(flags, tile, PRE)
            shared[0] = exclusive
            dbg[tile, 5] = total
        cuda.syncthreads()
        store_items(out, first, vals, shared[0] + before)

    return kernel


@cuda.jit
def reset(ticket, flags):
    i = cuda.grid(1)
    if i == 0:
        ticket[0] = 0
    if i < flags.size:
        flags[i] = 0


def main():
    kl.setup(requires=["warp"])
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
    tiles = n // TILE
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(np.float32)
    ref = np.cumsum(x.astype(np.float64))
    tile_tot = x.reshape(tiles, TILE).astype(np.float64).sum(1)
    xd = cuda.to_device(x)
    for variant in ("A", "B", "C"):
        kern = make(variant) if variant != "C" else None
        for run in range(5 if n > 1 << 20 else 1):
            out = cuda.to_device(np.full(n, np.nan, np.float32))
            ticket, flags, aggregates, prefixes = single_pass_scratch(tiles)
            dbg = cuda.to_device(np.full((tiles, 6), -7.0, np.float32))
            if kern is None:
                scans.scan_single_pass_launch(out, xd, (ticket, flags, aggregates, prefixes))
            else:
                reset[-(-(tiles + 1) // 256), 256](ticket, flags)
                kern[tiles, THREADS](xd, out, ticket, flags, aggregates, prefixes, dbg)
            cuda.synchronize()
            got = out.copy_to_host().astype(np.float64)
            bad = ~(np.abs(got - ref) <= 1e-3 * (np.abs(ref) + np.sqrt(np.arange(1, n + 1))))
            bad_tiles = np.unique(np.flatnonzero(bad) // TILE)
            line = f"{variant} run {run}: {len(bad_tiles)} wrong tiles"
            if len(bad_tiles):
                t0 = int(bad_tiles[0])
                d = dbg.copy_to_host()
                fl = flags.copy_to_host()
                pr = prefixes.copy_to_host().view(np.uint32)
                ag = aggregates.copy_to_host().view(np.uint32)
                line += (f"; first {t0} (tiles {bad_tiles[:8].tolist()}); nan outputs {int(np.isnan(got[bad]).sum())}"
                         f"; dbg[t0] first_f={d[t0,0]:.0f} polls={d[t0,1]:.0f} first_v={d[t0,2]!r} "
                         f"excl={d[t0,3]!r} stop_j={d[t0,4]:.0f} total={d[t0,5]!r}"
                         f"; final flags[t0-1..t0]={fl[max(t0-1,0):t0+1].tolist()} prefix bits[t0-1]={pr[t0-1]:#x} "
                         f"agg bits[t0-1]={ag[t0-1]:#x}; expected excl={ref[t0*TILE-1] if t0 else 0:.4f} "
                         f"tile total[t0-1]={tile_tot[t0-1]:.4f}")
            print(line, flush=True)


main()
