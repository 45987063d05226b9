#!/usr/bin/env python3
"""Where 02.2's single-pass scan loses time: publication (fences vs one status word) and tile size.

    PYTHONPATH=utilities python3 scripts/probes/scan_variants.py [log2 n]

The package's single-pass scan reached 50% of the copy roofline on an H100 (goal 80%). Its SASS
shows two ``MEMBAR.SC.GPU`` per block (``cuda.threadfence()`` before each flag), and a
``CCTL.IVALL`` (L1 invalidation) after every acquire poll. Variants, each checked against a float64
cumsum and then timed (CUDA events, L2 flushed, median) beside the copy roofline and CuPy:

* fence  : value, threadfence, flag (the package's design), warp look-back;
* packed : flag and value in one 64-bit status word: one ``atomic.exch`` publishes both, polls
           are relaxed loads; no fence anywhere (CUB's design for 4-byte values);
* epoch  : packed, with no reset kernel: the ticket wraps by itself (``atomic.inc``) and each word
           carries the launch's number, so an older launch's word reads as "not published";
and, for the tile number: a ticket (``reset``), ``blockidx`` (CUB's: no round trip before the first
load, no guarantee), ``speculate`` (load tile blockIdx.x while the ticket travels, reload if the
ticket differs); each at several (threads, items per thread).

Measured on an H100 at 2^26 floats (2026-11-26), of the copy roofline: fence 256x8 50%, 256x16
57%; packed 256x8 77-78%, 256x12 76%, 256x16 70%, 128x16 71%, 512x8 77%, 128x32 49%; epoch 256x8
77-78%; packed blockidx 81%; speculate 67-69% (the ticket order differs from blockIdx.x often
enough that blocks load twice); CuPy cumsum 33%. Also tried (a package variant, since removed): a
persistent grid (8 blocks per SM) in which each block takes its next ticket while it scans the
current tile, to hide the ticket's round trip and keep the guarantee: 33-35%, because a block's
trips are serial (load, scan, look-back, store) where a fresh block per tile starts loading while
the previous one's stores drain.
"""
import sys

import numpy as np

import kernel_lab as kl

env = kl.setup(requires=["warp"])
from numba import cuda, float32, int32, uint32, uint64  # noqa: E402

from kernel_lab.reductions_gemm import scans  # noqa: E402
from kernel_lab.acquire import load_acquire, load_relaxed  # noqa: E402
from kernel_lab.bitcast import bits_float, float_bits  # noqa: E402
from kernel_lab.reductions_gemm.scans import warp_inclusive_scan, window_sum  # noqa: E402
from kernel_lab.vector_loads import load4, store4  # noqa: E402

FULL = 0xFFFFFFFF
NONE, AGG, PRE = 0, 1, 2


def make_scan(threads, items, publish, ticket_kind="reset"):
    TILE = threads * items
    WARPS = threads // 32
    TOTALS = WARPS + 1

    @cuda.jit(device=True, inline="always")
    def block_exclusive_scan(v, totals):
        lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
        inclusive = warp_inclusive_scan(v, lane)
        if lane == 31:
            totals[warp] = inclusive
        cuda.syncthreads()
        if warp == 0:
            t = totals[lane] if lane < WARPS else float32(0)
            t = warp_inclusive_scan(t, lane)
            if lane < WARPS:
                totals[lane] = t
        cuda.syncthreads()
        before = totals[warp - 1] if warp > 0 else float32(0)
        return before + inclusive - v, totals[WARPS - 1]

    @cuda.jit(device=True, inline="always")
    def look_back_fence(tile, flags, aggregates, prefixes):
        lane = cuda.threadIdx.x % 32
        exclusive = float32(0)
        window = tile - 1
        while True:
            j = window - lane
            f = int32(PRE)
            if j >= 0:
                f = load_acquire(flags, j)
            while not cuda.all_sync(FULL, f != NONE):
                if f == NONE:
                    f = load_acquire(flags, j)
            v = float32(0)
            if j >= 0:
                v = prefixes[j] if f == PRE else aggregates[j]
            v, done = window_sum(f, v, lane)
            exclusive += v
            if done:
                return exclusive
            window -= 32

    @cuda.jit(device=True, inline="always")
    def look_back_packed(tile, status):
        lane = cuda.threadIdx.x % 32
        exclusive = float32(0)
        window = tile - 1
        while True:
            j = window - lane
            w = uint64(PRE) << uint64(32)  # before tile 0: a prefix of 0
            if j >= 0:
                w = load_relaxed(status, j)
            while not cuda.all_sync(FULL, (w >> uint64(32)) != NONE):
                if (w >> uint64(32)) == NONE:
                    w = load_relaxed(status, j)
            f = int32(w >> uint64(32))
            v = bits_float(uint32(w & uint64(0xFFFFFFFF)))
            v, done = window_sum(f, v, lane)
            exclusive += v
            if done:
                return exclusive
            window -= 32

    @cuda.jit(device=True, inline="always")
    def word(flag, value):
        return (uint64(flag) << uint64(32)) | uint64(float_bits(value))

    @cuda.jit(device=True, inline="always")
    def tile_body(x, t, tile, vals):
        first = tile * TILE + t * items
        if first + items <= x.size:
            for k in range(0, items, 4):
                vals[k], vals[k + 1], vals[k + 2], vals[k + 3] = load4(x, first + k)
        else:
            for k in range(items):
                vals[k] = x[first + k] if first + k < x.size else float32(0)
        s = float32(0)
        for k in range(items):
            s += vals[k]
            vals[k] = s
        return first, s

    @cuda.jit(device=True, inline="always")
    def write(out, first, vals, carry):
        if first + items <= out.size:
            for k in range(0, items, 4):
                store4(out, first + k, carry + vals[k], carry + vals[k + 1], carry + vals[k + 2], carry + vals[k + 3])
        else:
            for k in range(items):
                if first + k < out.size:
                    out[first + k] = carry + vals[k]

    @cuda.jit
    def scan_fence(x, out, ticket, flags, aggregates, prefixes):
        totals = cuda.shared.array(TOTALS, float32)
        shared = cuda.shared.array(1, float32)
        tile_id = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        if t == 0:
            tile_id[0] = cuda.atomic.add(ticket, 0, 1)
        cuda.syncthreads()
        tile = tile_id[0]
        vals = cuda.local.array(items, float32)
        first, s = tile_body(x, t, tile, vals)
        before, total = block_exclusive_scan(s, totals)
        if t < 32:
            exclusive = float32(0)
            if tile == 0:
                if t == 0:
                    prefixes[0] = total
                    cuda.threadfence()
                    cuda.atomic.exch(flags, 0, PRE)
            else:
                if t == 0:
                    aggregates[tile] = total
                    cuda.threadfence()
                    cuda.atomic.exch(flags, tile, AGG)
                exclusive = look_back_fence(tile, flags, aggregates, prefixes)
                if t == 0:
                    prefixes[tile] = exclusive + total
                    cuda.threadfence()
                    cuda.atomic.exch(flags, tile, PRE)
            if t == 0:
                shared[0] = exclusive
        cuda.syncthreads()
        write(out, first, vals, shared[0] + before)

    @cuda.jit
    def scan_packed(x, out, ticket, status):
        totals = cuda.shared.array(TOTALS, float32)
        shared = cuda.shared.array(1, float32)
        tile_id = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        vals = cuda.local.array(items, float32)
        if ticket_kind == "speculate":
            # The ticket is almost always blockIdx.x: load that tile while the ticket travels, and
            # load again in the rare block whose ticket says otherwise.
            if t == 0:
                tile_id[0] = cuda.atomic.add(ticket, 0, 1)
            guess = cuda.blockIdx.x
            first, s = tile_body(x, t, guess, vals)
            cuda.syncthreads()
            tile = tile_id[0]
            if tile != guess:
                first, s = tile_body(x, t, tile, vals)
        elif ticket_kind == "blockidx":
            tile = cuda.blockIdx.x
            first, s = tile_body(x, t, tile, vals)
        else:
            if t == 0:
                tile_id[0] = cuda.atomic.add(ticket, 0, 1)
            cuda.syncthreads()
            tile = tile_id[0]
            first, s = tile_body(x, t, tile, vals)
        before, total = block_exclusive_scan(s, totals)
        if t < 32:
            exclusive = float32(0)
            if tile == 0:
                if t == 0:
                    cuda.atomic.exch(status, 0, word(PRE, total))
            else:
                if t == 0:
                    cuda.atomic.exch(status, tile, word(AGG, total))
                exclusive = look_back_packed(tile, status)
                if t == 0:
                    cuda.atomic.exch(status, tile, word(PRE, exclusive + total))
            if t == 0:
                shared[0] = exclusive
        cuda.syncthreads()
        write(out, first, vals, shared[0] + before)


    @cuda.jit(device=True, inline="always")
    def look_back_epoch(tile, status, epoch):
        lane = cuda.threadIdx.x % 32
        exclusive = float32(0)
        window = tile - 1
        mine = uint64(epoch) << uint64(2)
        while True:
            j = window - lane
            w = (mine | uint64(PRE)) << uint64(32)
            if j >= 0:
                w = load_relaxed(status, j)
            while not cuda.all_sync(FULL, (w >> uint64(34)) == uint64(epoch)):
                if (w >> uint64(34)) != uint64(epoch):  # an older launch's word: not yet published
                    w = load_relaxed(status, j)
            f = int32((w >> uint64(32)) & uint64(3))
            v = bits_float(uint32(w & uint64(0xFFFFFFFF)))
            v, done = window_sum(f, v, lane)
            exclusive += v
            if done:
                return exclusive
            window -= 32

    @cuda.jit
    def scan_epoch(x, out, ticket, status, epoch, last_tile):
        totals = cuda.shared.array(TOTALS, float32)
        shared = cuda.shared.array(1, float32)
        tile_id = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        if ticket_kind == "blockidx":
            tile = cuda.blockIdx.x
        else:
            if t == 0:  # wraps to 0 after the last tile: the ticket resets itself
                tile_id[0] = int32(cuda.atomic.inc(ticket, 0, last_tile))
            cuda.syncthreads()
            tile = tile_id[0]
        vals = cuda.local.array(items, float32)
        first, s = tile_body(x, t, tile, vals)
        before, total = block_exclusive_scan(s, totals)
        mine = (uint64(epoch) << uint64(2))
        if t < 32:
            exclusive = float32(0)
            if tile == 0:
                if t == 0:
                    cuda.atomic.exch(status, 0, ((mine | uint64(PRE)) << uint64(32)) | uint64(float_bits(total)))
            else:
                if t == 0:
                    cuda.atomic.exch(status, tile, ((mine | uint64(AGG)) << uint64(32)) | uint64(float_bits(total)))
                exclusive = look_back_epoch(tile, status, epoch)
                if t == 0:
                    cuda.atomic.exch(status, tile,
                                     ((mine | uint64(PRE)) << uint64(32)) | uint64(float_bits(exclusive + total)))
            if t == 0:
                shared[0] = exclusive
        cuda.syncthreads()
        write(out, first, vals, shared[0] + before)

    @cuda.jit
    def reset(ticket, flags):
        i = cuda.grid(1)
        if i == 0:
            ticket[0] = 0
        if i < flags.size:
            flags[i] = 0

    def launcher(n):
        tiles = -(-n // TILE)
        ticket = cuda.device_array(1, np.int32)
        rb = -(-(tiles + 1) // 256)
        if publish == "fence":
            flags = cuda.device_array(tiles, np.int32)
            aggregates = cuda.device_array(tiles, np.float32)
            prefixes = cuda.device_array(tiles, np.float32)

            def launch(out, x):
                reset[rb, 256](ticket, flags)
                scan_fence[tiles, threads](x, out, ticket, flags, aggregates, prefixes)
            launch.kernel = scan_fence
        elif publish == "epoch":
            status = cuda.to_device(np.zeros(tiles, np.uint64))
            uticket = cuda.to_device(np.zeros(1, np.uint32))
            count = [0]

            def launch(out, x):
                count[0] += 1  # this launch's epoch: words of earlier launches read as unpublished
                scan_epoch[tiles, threads](x, out, uticket, status, np.uint32(count[0]), np.uint32(tiles - 1))
            launch.kernel = scan_epoch
        else:
            status = cuda.device_array(tiles, np.uint64)

            def launch(out, x):
                reset[rb, 256](ticket, status)
                scan_packed[tiles, threads](x, out, ticket, status)
            launch.kernel = scan_packed
        return launch

    return launcher


def wrong_fraction(got, ref):
    n = ref.size
    bad = ~(np.abs(got - ref) <= 1e-4 * (np.abs(ref) + np.sqrt(np.arange(1, n + 1))))
    return int(bad.sum())


def main():
    log2n = int(sys.argv[1]) if len(sys.argv) > 1 else (26 if not env.simulator else 12)
    n = (1 << log2n) + (37 if env.simulator else 0)
    rng = np.random.default_rng(7)
    xh = rng.standard_normal(n).astype(np.float32)
    ref = np.cumsum(xh.astype(np.float64))
    x = cuda.to_device(xh)
    y = cuda.device_array(n, np.float32)
    if env.simulator:
        shapes = [(64, 4, "fence"), (64, 4, "packed"), (32, 8, "packed"), (64, 4, "epoch"), (64, 4, "epoch", "blockidx"),
                  (64, 4, "packed", "speculate")]
    else:
        shapes = [(256, 8, "packed"), (256, 8, "packed", "speculate"), (256, 8, "packed", "blockidx"),
                  (512, 8, "packed", "speculate"), (256, 12, "packed", "speculate"), (128, 8, "packed", "speculate"),
                  (256, 8, "epoch")]
    results = []
    scratch = scans.single_pass_scratch(-(-n // scans.TILE))
    for threads, items, publish, *kind in shapes:
        name = f"{publish} {threads}x{items}" + (f" {kind[0]}" if kind else "")
        launch = make_scan(threads, items, publish, *kind)(n)
        for run in range(3):
            y.copy_to_device(np.full(n, np.nan, np.float32))
            launch(y, x)
            cuda.synchronize()
            bad = wrong_fraction(y.copy_to_host().astype(np.float64), ref)
            if bad:
                print(f"{name}: run {run} WRONG at {bad} of {n} elements", flush=True)
                break
        if not env.simulator:
            regs = launch.kernel.get_regs_per_thread() if hasattr(launch.kernel, "get_regs_per_thread") else "?"
            print(f"{name}: registers {regs}", flush=True)
        results.append(kl.benchmark(name, lambda: launch(y, x), bytes=8 * n, inputs=(x,)))
        y.copy_to_device(np.full(n, np.nan, np.float32))
        launch(y, x)  # still right after the benchmark's launches (the epoch and ticket wrap)
        bad = wrong_fraction(y.copy_to_host().astype(np.float64), ref)
        if bad:
            print(f"{name}: after the benchmark WRONG at {bad} of {n} elements", flush=True)
    results.append(kl.benchmark("package: fence 256x8", lambda: scans.scan_single_pass_launch(y, x, scratch), bytes=8 * n))
    if not env.simulator:
        import cupy as cp

        cx, cy = cp.asarray(x), cp.asarray(y)
        results.append(kl.benchmark("CuPy cumsum", lambda: cp.cumsum(cx, out=cy), bytes=8 * n))
        kl.compare(results, baseline=-1)


main()
