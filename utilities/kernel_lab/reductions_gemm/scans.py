"""Device-wide reductions and prefix sums of module 02, as the package's reference kernels.

The notebooks of module 02 have the learner write these kernels; the package keeps the same
kernels so that ``scripts/gpu_module02_probe.py`` and ``python -m kernel_lab.reductions_gemm.bench``
measure exactly what the notebooks teach, without importing a notebook (a test holds the notebooks'
solutions to this file).

Reductions (absmax, argmax, sums) read the inputs' bits through a ``uint32`` view of the same
array: for finite floats, ``bits & 0x7FFFFFFF`` orders like ``|x|``, so an absmax is an integer
``atomic.max``, exact and native; an argmax packs an order-preserving key of the value and the
complement of the index into one ``uint64`` so that one ``atomic.max`` picks the largest value and,
among equal values, the lowest index.

Scans: the three-kernel scan (reduce tiles, scan the tiles' totals, rescan each tile with its
offset) and the single-pass scan with decoupled look-back (Merrill and Garland, "Single-pass
Parallel Prefix Scan with Decoupled Look-back", NVIDIA technical report NVR-2016-002), in two
publications: a flag and a value (two words, ordered by fences and acquire loads), and one 64-bit
status word per tile (flag and value together: no fence; CUB's design for 4-byte values).
"""

from __future__ import annotations

import numpy as np

from ..environment import on_simulator
from ..sizes import sizes as _sizes

# --- launch shapes: the same code, smaller constants in the simulator ---------------------------
_S = _sizes(gpu=dict(threads=256, items=8, blocks_per_sm=8), sim=dict(threads=64, items=4, blocks_per_sm=1))
THREADS = _S.threads  # threads per block (a multiple of 32)
ITEMS = _S.items  # consecutive elements per thread in a scan tile
TILE = THREADS * ITEMS  # elements per scan tile
WARP = 32  # lanes in a warp
WARPS = THREADS // WARP
TOTALS = WARPS + 1  # a shared array's size must be a plain constant (an expression is refused on a GPU)
BLOCKS_PER_SM = _S.blocks_per_sm
FULL_MASK = 0xFFFFFFFF
ABS_MASK = 0x7FFFFFFF

# Tile status for the decoupled look-back.
FLAG_NONE, FLAG_AGGREGATE, FLAG_PREFIX = 0, 1, 2


def _cuda():
    from numba import cuda

    return cuda


cuda = _cuda()
from numba import float32, float64, int32, int64, uint32, uint64  # noqa: E402

from ..acquire import load_acquire, load_relaxed  # noqa: E402
from ..bitcast import bits_float, float_bits  # noqa: E402
from ..vector_loads import load4, store4  # noqa: E402


def persistent_blocks(n: int, threads: int = THREADS) -> int:
    """Blocks that fill every SM once (``BLOCKS_PER_SM`` each), fewer when ``n`` is small."""
    from ..environment import gpu_info

    sms = gpu_info().multiprocessors or 2
    return max(1, min(-(-n // threads), sms * BLOCKS_PER_SM))


# ================================================================================================
# Reductions


@cuda.jit
def zero_first(out):
    """out[0] = 0, as a kernel: a launch is queued behind the GPU's work, where ``out[0] = 0``
    from the host would wait for it (and so put the host's launch time into a measurement)."""
    if cuda.grid(1) == 0:
        out[0] = 0


@cuda.jit(device=True)
def warp_max_u32(v):
    # Shuffles move 32- and 64-bit *signed* integers and floats: the unsigned value travels as the
    # int32 with the same bits (a conversion between same-width integers keeps the bits).
    offset = 16
    while offset > 0:
        other = uint32(cuda.shfl_down_sync(FULL_MASK, int32(v), offset))
        v = max(v, other)
        offset //= 2
    return v


@cuda.jit(device=True)
def block_max_u32(v):
    """The maximum of ``v`` (uint32) over the block, valid in thread 0."""
    partial = cuda.shared.array(WARPS, uint32)
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    v = warp_max_u32(v)
    if lane == 0:
        partial[warp] = v
    cuda.syncthreads()
    result = uint32(0)
    if warp == 0:
        result = warp_max_u32(partial[lane] if lane < WARPS else uint32(0))
    return result


@cuda.jit
def absmax_atomic_per_block(bits, out):
    """One pass, one thread per element: each block's max |x|, then one atomic per block."""
    i = cuda.grid(1)
    v = uint32(0)
    if i < bits.size:
        v = bits[i] & uint32(ABS_MASK)  # |x| as bits: the same order as |x| for finite floats
    m = block_max_u32(v)
    if cuda.threadIdx.x == 0:
        cuda.atomic.max(out, 0, m)


@cuda.jit
def absmax_partials(bits, partials):
    """Pass 1 of 2: each block writes its own max |x| (no atomics)."""
    i = cuda.grid(1)
    v = uint32(0)
    if i < bits.size:
        v = bits[i] & uint32(ABS_MASK)
    m = block_max_u32(v)
    if cuda.threadIdx.x == 0:
        partials[cuda.blockIdx.x] = m


@cuda.jit
def absmax_finish(partials, out):
    """Pass 2 of 2: one block reduces the partials."""
    v = uint32(0)
    i = cuda.threadIdx.x
    while i < partials.size:
        v = max(v, partials[i])
        i += cuda.blockDim.x
    m = block_max_u32(v)
    if cuda.threadIdx.x == 0:
        out[0] = m


@cuda.jit
def absmax_persistent(bits, out):
    """Grid-stride, one block per SM slot: four independent loads in flight per thread."""
    n = bits.size
    stride = cuda.gridsize(1)
    i = cuda.grid(1)
    m0 = uint32(0)
    m1 = uint32(0)
    m2 = uint32(0)
    m3 = uint32(0)
    while i + 3 * stride < n:  # four loads before any use: more bytes in flight
        m0 = max(m0, bits[i] & uint32(ABS_MASK))
        m1 = max(m1, bits[i + stride] & uint32(ABS_MASK))
        m2 = max(m2, bits[i + 2 * stride] & uint32(ABS_MASK))
        m3 = max(m3, bits[i + 3 * stride] & uint32(ABS_MASK))
        i += 4 * stride
    while i < n:
        m0 = max(m0, bits[i] & uint32(ABS_MASK))
        i += stride
    m = block_max_u32(max(max(m0, m1), max(m2, m3)))
    if cuda.threadIdx.x == 0:
        cuda.atomic.max(out, 0, m)


def absmax_one_pass(out_bits, bits):
    """``out_bits[0]`` (uint32, zeroed here) = bits of max |x|."""
    zero_first[1, 1](out_bits)
    absmax_atomic_per_block[-(-bits.size // THREADS), THREADS](bits, out_bits)


def absmax_two_pass(out_bits, bits, partials=None):
    blocks = -(-bits.size // THREADS)
    if partials is None:
        partials = cuda.device_array(blocks, np.uint32)
    absmax_partials[blocks, THREADS](bits, partials)
    absmax_finish[1, 1024 if not on_simulator() else THREADS](partials, out_bits)


def absmax_grid_stride(out_bits, bits):
    zero_first[1, 1](out_bits)
    absmax_persistent[persistent_blocks(bits.size), THREADS](bits, out_bits)


@cuda.jit
def absmax_x4(bits, out):
    """``absmax_persistent`` with 16-byte loads: four ``load4`` (64 bytes) in flight per thread per
    trip, a grid-width of 16-byte chunks apart; the ``n % 4`` last values one by one. 32 registers
    (sm_90), so 8 blocks of 256 per SM fit (``persistent_blocks``). Module 05.1's fast pipeline."""
    g = cuda.gridsize(1)
    c = cuda.grid(1)
    nc = bits.size // 4
    m0 = uint32(0)
    m1 = uint32(0)
    m2 = uint32(0)
    m3 = uint32(0)
    mask = uint32(ABS_MASK)
    while c + 3 * g < nc:
        a0, a1, a2, a3 = load4(bits, 4 * c)
        b0, b1, b2, b3 = load4(bits, 4 * (c + g))
        c0, c1, c2, c3 = load4(bits, 4 * (c + 2 * g))
        d0, d1, d2, d3 = load4(bits, 4 * (c + 3 * g))
        m0 = max(m0, max(max(a0 & mask, a1 & mask), max(a2 & mask, a3 & mask)))
        m1 = max(m1, max(max(b0 & mask, b1 & mask), max(b2 & mask, b3 & mask)))
        m2 = max(m2, max(max(c0 & mask, c1 & mask), max(c2 & mask, c3 & mask)))
        m3 = max(m3, max(max(d0 & mask, d1 & mask), max(d2 & mask, d3 & mask)))
        c += 4 * g
    while c < nc:
        a0, a1, a2, a3 = load4(bits, 4 * c)
        m0 = max(m0, max(max(a0 & mask, a1 & mask), max(a2 & mask, a3 & mask)))
        c += g
    t = 4 * nc + cuda.grid(1)
    if t < bits.size:
        m1 = max(m1, bits[t] & mask)
    m = block_max_u32(max(max(m0, m1), max(m2, m3)))
    if cuda.threadIdx.x == 0:
        cuda.atomic.max(out, 0, m)


def absmax_vectorized(out_bits, bits):
    """Like :func:`absmax_grid_stride` (``out_bits[0]`` = bits of max |x|), with 16-byte loads:
    92.8% of the copy roofline against 79.2% on an H200 (``scripts/probes/quantize_variants.py``,
    2^26 values). ``bits`` must start 16-byte aligned (a whole device allocation does)."""
    zero_first[1, 1](out_bits)
    absmax_x4[persistent_blocks(max(bits.size // 4, 1)), THREADS](bits, out_bits)


# --- argmax: the largest value, the lowest index among equal values ----------------------------


@cuda.jit(device=True)
def argmax_key(b, i):
    """A uint64 that orders like (value, -index): the value's bits made monotone, then ~index."""
    b = uint32(b)
    if b & uint32(0x80000000):
        ordered = ~b  # negative floats: larger magnitude is smaller, so flip every bit
    else:
        ordered = b | uint32(0x80000000)  # positive floats above every negative one
    return (uint64(ordered) << uint64(32)) | uint64(uint32(0xFFFFFFFF) - uint32(i))


@cuda.jit(device=True)
def warp_max_u64(v):
    offset = 16
    while offset > 0:
        other = uint64(cuda.shfl_down_sync(FULL_MASK, int64(v), offset))  # the bits travel as an int64
        v = max(v, other)
        offset //= 2
    return v


@cuda.jit
def argmax_persistent(bits, key):
    """Grid-stride argmax: each thread keeps its best key, then warp, block, one atomic per block."""
    partial = cuda.shared.array(WARPS, uint64)
    best = uint64(0)
    i = cuda.grid(1)
    while i < bits.size:
        best = max(best, argmax_key(bits[i], i))
        i += cuda.gridsize(1)
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    best = warp_max_u64(best)
    if lane == 0:
        partial[warp] = best
    cuda.syncthreads()
    if warp == 0:
        best = warp_max_u64(partial[lane] if lane < WARPS else uint64(0))
        if lane == 0:
            cuda.atomic.max(key, 0, best)


def decode_argmax(key: int) -> tuple[float, int]:
    """(value, index) from an argmax key."""
    key = int(key)
    ordered = key >> 32
    index = 0xFFFFFFFF - (key & 0xFFFFFFFF)
    bits = (~ordered & 0xFFFFFFFF) if not ordered & 0x80000000 else ordered & 0x7FFFFFFF
    value = float(np.array([bits], np.uint32).view(np.float32)[0])
    return value, index


def argmax_grid_stride(out, bits, key=None):
    """``out[0]`` = the index of the largest value (lowest index on ties); int64 output."""
    if key is None:
        key = cuda.device_array(1, np.uint64)
    zero_first[1, 1](key)
    argmax_persistent[persistent_blocks(bits.size), THREADS](bits, key)
    _, index = decode_argmax(key.copy_to_host()[0])
    out[0] = index


# --- sums: float32, float64 accumulation, Kahan -----------------------------------------------


@cuda.jit(device=True)
def block_sum_f64(v):
    partial = cuda.shared.array(WARPS, float64)
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    if lane == 0:
        partial[warp] = v
    cuda.syncthreads()
    total = float64(0)
    if warp == 0:
        total = partial[lane] if lane < WARPS else float64(0)
        offset = 16
        while offset > 0:
            total += cuda.shfl_down_sync(FULL_MASK, total, offset)
            offset //= 2
    return total


@cuda.jit
def sum_f32(x, out):
    """Float32 accumulation in each thread (the block and the atomic in float64, so the
    comparison isolates the long per-thread sums)."""
    acc = float32(0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    total = block_sum_f64(float64(acc))
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


@cuda.jit
def sum_f64_accumulate(x, out):
    """Each float32 element is added into a float64 accumulator."""
    acc = float64(0)
    i = cuda.grid(1)
    while i < x.size:
        acc += float64(x[i])
        i += cuda.gridsize(1)
    total = block_sum_f64(acc)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


@cuda.jit
def sum_kahan(x, out):
    """Kahan's compensated summation in float32: the rounding error of each addition is kept in
    ``c`` and subtracted from the next term."""
    s = float32(0)
    c = float32(0)
    i = cuda.grid(1)
    while i < x.size:
        y = x[i] - c
        t = s + y
        c = (t - s) - y  # what the addition lost (exact in float32 when |s| >= |y|)
        s = t
        i += cuda.gridsize(1)
    total = block_sum_f64(float64(s) - float64(c))
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


def sum_launcher(kernel):
    def launch(out, x):
        zero_first[1, 1](out)
        kernel[persistent_blocks(x.size), THREADS](x, out)
    return launch


# ================================================================================================
# Scans


@cuda.jit(device=True)
def warp_inclusive_scan(v, lane):
    offset = 1
    while offset < WARP:
        up = cuda.shfl_up_sync(FULL_MASK, v, offset)
        if lane >= offset:
            v += up
        offset *= 2
    return v


@cuda.jit(device=True)
def block_exclusive_scan(v, totals):
    """Exclusive scan of one value per thread over the block; returns (exclusive, block total).

    ``totals`` is a shared float32 array of TOTALS = WARPS + 1 elements (the caller's, so that two scans in
    one kernel do not share it). Two barriers; a third protects ``totals`` from the next use.
    """
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
    block_total = totals[WARPS - 1]
    cuda.syncthreads()  # every thread has read totals before anyone reuses it
    return before + inclusive - v, block_total


@cuda.jit(device=True, forceinline=True)
def load_items(x, first, vals):
    """vals[k] = x[first + k] for the thread's ITEMS elements (0 past the end): 16-byte loads
    when all ITEMS are inside (``first`` is a multiple of ITEMS, so they are aligned)."""
    if first + ITEMS <= x.size:
        for k in range(0, ITEMS, 4):
            vals[k], vals[k + 1], vals[k + 2], vals[k + 3] = load4(x, first + k)
    else:
        for k in range(ITEMS):
            vals[k] = x[first + k] if first + k < x.size else float32(0)


@cuda.jit(device=True, forceinline=True)
def store_items(out, first, vals, carry):
    """out[first + k] = carry + vals[k] for the elements inside the array (16-byte stores)."""
    if first + ITEMS <= out.size:
        for k in range(0, ITEMS, 4):
            store4(out, first + k, carry + vals[k], carry + vals[k + 1], carry + vals[k + 2], carry + vals[k + 3])
    else:
        for k in range(ITEMS):
            if first + k < out.size:
                out[first + k] = carry + vals[k]


@cuda.jit(device=True, forceinline=True)
def scan_items(vals):
    """Inclusive scan of the thread's own ITEMS values, in place; returns their total."""
    s = float32(0)
    for k in range(ITEMS):
        s += vals[k]
        vals[k] = s
    return s


@cuda.jit(device=True)
def scan_tile(x, out, tile, carry, totals):
    """Scan tile ``tile`` of x into out, adding ``carry``; each thread owns ITEMS consecutive
    elements. Returns the tile's total (every thread)."""
    first = tile * TILE + cuda.threadIdx.x * ITEMS
    vals = cuda.local.array(ITEMS, float32)
    load_items(x, first, vals)
    s = scan_items(vals)  # a serial scan of the thread's own elements
    before, total = block_exclusive_scan(s, totals)
    store_items(out, first, vals, carry + before)
    return total


@cuda.jit(device=True)
def tile_total(x, tile, totals):
    first = tile * TILE + cuda.threadIdx.x * ITEMS
    vals = cuda.local.array(ITEMS, float32)
    load_items(x, first, vals)
    s = float32(0)
    for k in range(ITEMS):
        s += vals[k]
    _, total = block_exclusive_scan(s, totals)
    return total


@cuda.jit
def scan_reduce_tiles(x, tile_sums):
    """Three-kernel scan, kernel 1: the total of each tile."""
    totals = cuda.shared.array(TOTALS, float32)
    total = tile_total(x, cuda.blockIdx.x, totals)
    if cuda.threadIdx.x == 0:
        tile_sums[cuda.blockIdx.x] = total


@cuda.jit
def scan_tile_sums(tile_sums, tile_offsets):
    """Three-kernel scan, kernel 2 (one block): exclusive scan of the tiles' totals."""
    totals = cuda.shared.array(TOTALS, float32)
    carry = float32(0)
    start = 0
    while start < tile_sums.size:
        i = start + cuda.threadIdx.x
        v = tile_sums[i] if i < tile_sums.size else float32(0)
        before, total = block_exclusive_scan(v, totals)
        if i < tile_sums.size:
            tile_offsets[i] = carry + before
        carry += total
        start += THREADS


@cuda.jit
def scan_add_offsets(x, out, tile_offsets):
    """Three-kernel scan, kernel 3: scan each tile again, starting from its offset."""
    totals = cuda.shared.array(TOTALS, float32)
    scan_tile(x, out, cuda.blockIdx.x, tile_offsets[cuda.blockIdx.x], totals)


def scan_three_kernels(out, x, scratch=None):
    tiles = -(-x.size // TILE)
    if scratch is None:
        scratch = (cuda.device_array(tiles, np.float32), cuda.device_array(tiles, np.float32))
    sums, offsets = scratch
    scan_reduce_tiles[tiles, THREADS](x, sums)
    scan_tile_sums[1, THREADS](sums, offsets)
    scan_add_offsets[tiles, THREADS](x, out, offsets)


@cuda.jit(device=True, forceinline=True)
def window_sum(flag, v, lane):
    """One round of a warp look-back, once all 32 lanes hold a published ``flag`` and its value
    ``v`` (lane ``j`` for the tile ``j`` places back): the sum of the values up to and including the
    nearest inclusive prefix (all 32 if there is none), in lane 0, and whether there was one."""
    has_prefix = cuda.ballot_sync(FULL_MASK, flag == FLAG_PREFIX)
    if has_prefix != 0:
        if lane > cuda.ffs(has_prefix) - 1:  # past the nearest tile with an inclusive prefix
            v = float32(0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    return v, has_prefix != 0


@cuda.jit(device=True)
def look_back_warp(tile, flags, aggregates, prefixes):
    """Warp 0 of the block: the sum of every element before tile ``tile`` (valid in lane 0).

    32 predecessors per round: lane ``j`` watches tile ``window - j``. The round waits until all
    32 have published something, then sums, from the nearest one, the aggregates up to and
    including the nearest inclusive prefix. The flags are polled with ``load_acquire`` (an acquire
    load, executed every time and ordering the value reads after it; see ``kernel_lab.acquire``).
    """
    lane = cuda.threadIdx.x % 32
    exclusive = float32(0)
    window = tile - 1
    while True:
        j = window - lane
        f = int32(FLAG_PREFIX)  # before the first tile: a prefix of 0
        if j >= 0:
            f = load_acquire(flags, j)
        while not cuda.all_sync(FULL_MASK, f != FLAG_NONE):  # the whole warp waits together
            if f == FLAG_NONE:
                f = load_acquire(flags, j)
        v = float32(0)
        if j >= 0:  # read after the acquire load that saw the flag: the published value
            v = prefixes[j] if f == FLAG_PREFIX else aggregates[j]
        v, done = window_sum(f, v, lane)
        exclusive += v
        if done:
            return exclusive
        window -= 32


@cuda.jit
def scan_single_pass(x, out, ticket, flags, aggregates, prefixes):
    """Single-pass scan with decoupled look-back. ``ticket`` (int32[1]) and ``flags`` (int32,
    one per tile) start at 0; ``aggregates``/``prefixes`` (float32, one per tile) need no
    initialisation."""
    totals = cuda.shared.array(TOTALS, float32)
    shared = cuda.shared.array(1, float32)
    tile_id = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        tile_id[0] = cuda.atomic.add(ticket, 0, 1)  # tiles numbered in the order blocks start
    cuda.syncthreads()
    tile = tile_id[0]
    first = tile * TILE + t * ITEMS
    vals = cuda.local.array(ITEMS, float32)
    load_items(x, first, vals)
    s = scan_items(vals)
    before, total = block_exclusive_scan(s, totals)
    if t < 32:
        exclusive = float32(0)
        if tile == 0:
            if t == 0:
                prefixes[0] = total
                cuda.threadfence()  # the value is visible before the flag that announces it
                cuda.atomic.exch(flags, 0, FLAG_PREFIX)
        else:
            if t == 0:
                aggregates[tile] = total
                cuda.threadfence()
                cuda.atomic.exch(flags, tile, FLAG_AGGREGATE)
            exclusive = look_back_warp(tile, flags, aggregates, prefixes)
            if t == 0:
                prefixes[tile] = exclusive + total
                cuda.threadfence()
                cuda.atomic.exch(flags, tile, FLAG_PREFIX)
        if t == 0:
            shared[0] = exclusive
    cuda.syncthreads()
    store_items(out, first, vals, shared[0] + before)


def scan_single_pass_launch(out, x, scratch=None):
    tiles = -(-x.size // TILE)
    if scratch is None:
        scratch = single_pass_scratch(tiles)
    ticket, flags, aggregates, prefixes = scratch
    reset_scratch[max(1, -(-(tiles + 1) // 256)), 256](ticket, flags)
    scan_single_pass[tiles, THREADS](x, out, ticket, flags, aggregates, prefixes)


@cuda.jit
def reset_scratch(ticket, flags):
    """ticket[0] = 0 and every flag (int32) or status word (uint64) = 0 (FLAG_NONE), as a kernel:
    it queues behind the GPU's work instead of waiting for it."""
    i = cuda.grid(1)
    if i == 0:
        ticket[0] = 0
    if i < flags.size:
        flags[i] = 0


# --- one status word per tile ------------------------------------------------------------------
# The flag in the high 32 bits, the float32 total's bits in the low 32. One 64-bit atomic exchange
# publishes both at once and one 64-bit load reads both, so no reader can see a flag without its
# value: no fence on either side, and the polls are relaxed loads (no L1 invalidation after each,
# as an acquire load has). On an H100 at 2^26 floats this took the warp look-back from 50% to 77%
# of the copy roofline (scripts/probes/scan_variants.py).


@cuda.jit(device=True)
def pack_status(flag, value):
    """The status word: ``flag`` (0, 1, 2) in bits 32-63, the bits of float32 ``value`` in 0-31."""
    # float_bits is a uint32: widening an unsigned integer fills the high half with zeros (a signed
    # one would copy a negative value's sign bit into the flag's half).
    return (uint64(flag) << uint64(32)) | uint64(float_bits(value))


@cuda.jit(device=True)
def unpack_status(word):
    """(flag, value) of a status word."""
    return int32(word >> uint64(32)), bits_float(uint32(word & uint64(0xFFFFFFFF)))


# The check of someone else's pack/unpack (02.2's exercise): it lives here, beside the word it checks,
# so that make_status_scan can run it before a launch without this kernel module importing a check
# (kernel_lab.checks.reductions_gemm offers it under the same name).


def _status_roundtrip_kernel(pack, unpack):
    # `cuda` is this module's global: the simulator gives a kernel its own `cuda` through the
    # kernel's globals, which a name imported into a function's scope would bypass.
    @cuda.jit
    def roundtrip(flags, values, words, flags_out, values_out):
        i = cuda.grid(1)
        if i < flags.size:
            w = pack(flags[i], values[i])
            words[i] = w
            f, v = unpack(w)
            flags_out[i] = f
            values_out[i] = v

    return roundtrip


def check_status_word(pack, unpack, *, name: str = "status word", quiet: bool = False) -> None:
    """``pack(flag, value)`` -> uint64 with ``flag`` in bits 32-63 and the bits of float32 ``value``
    in bits 0-31; ``unpack(word)`` -> ``(flag, value)``. Both are ``cuda.jit(device=True)``
    functions; they run in a kernel over values chosen to expose the classic mistakes (negative
    values, -0.0, infinities, a subnormal, non-integers) with each published flag."""
    from .. import progress
    from ..check import CheckFailed, poisoned_host
    from ..validate import require_callable

    require_callable(pack, "pack")
    require_callable(unpack, "unpack")
    roundtrip = _status_roundtrip_kernel(pack, unpack)

    base = np.array([1.5, -1.5, 0.0, -0.0, 3.0e38, -3.0e38, 1e-45, -2.0, 0.1, np.inf, -np.inf, 7.0, -0.75],
                    np.float32)
    values = np.concatenate([base, base])
    flags = np.repeat(np.array([1, 2], np.int32), base.size)
    n = values.size
    words = cuda.to_device(np.full(n, 0xDEADBEEFDEADBEEF, np.uint64))
    flags_out = cuda.to_device(np.full(n, -7, np.int32))
    values_out = cuda.to_device(poisoned_host(n, np.float32))
    try:
        roundtrip[1, 32](cuda.to_device(flags), cuda.to_device(values), words, flags_out, values_out)
        cuda.synchronize()
    except CheckFailed:
        raise
    except Exception as exc:  # a typing error in the learner's functions: say where
        raise CheckFailed(f"{name}: pack/unpack could not run in a kernel: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}. pack(flag, value) returns a uint64; "
                          "unpack(word) returns (flag, value) as a tuple.") from None
    got = words.copy_to_host()
    if np.all(got == 0):
        raise CheckFailed(f"{name}: the exercise is not done yet (pack returns 0 for every flag and value)")
    bits = values.view(np.uint32).astype(np.uint64)
    want = (flags.astype(np.uint64) << np.uint64(32)) | bits
    wrong = np.flatnonzero(got != want)
    if wrong.size:
        i = int(wrong[0])
        high, low = int(got[i]) >> 32, int(got[i]) & 0xFFFFFFFF
        where = f"pack({flags[i]}, {float(values[i])!r}) = {int(got[i]):#018x}, expected {int(want[i]):#018x}"
        negative = values.view(np.int32) < 0
        if np.all(got[~negative] == want[~negative]) and high == 0xFFFFFFFF:
            why = ("the value's bits went through a signed integer: widening a negative int32 to 64 bits copies "
                   "its sign bit into the high half, over the flag. Widen the unsigned bits: "
                   "uint64(kl.float_bits(value)), or mask the low half with & 0xFFFFFFFF.")
        elif low == int(flags[i]) and high == int(bits[i]):
            why = "the halves are swapped: the flag goes in the high 32 bits (<< 32), the value's bits in the low."
        elif high == int(flags[i]) and np.isfinite(values[i]) and low != int(bits[i]) \
                and low == (int(np.trunc(values[i])) & 0xFFFFFFFF):
            why = ("the value was converted to an integer (1.5 became 1), not reinterpreted: put its bits in the "
                   "word with kl.float_bits(value).")
        elif high != int(flags[i]):
            why = "the flag is not in bits 32-63: shift it, uint64(flag) << 32."
        else:
            why = "the low 32 bits are not the value's float32 bits: use kl.float_bits(value)."
        raise CheckFailed(f"{name}: {where}.\n{why}")
    f_out, v_out = flags_out.copy_to_host(), values_out.copy_to_host()
    bad_flag = np.flatnonzero(f_out != flags)
    if bad_flag.size:
        i = int(bad_flag[0])
        raise CheckFailed(f"{name}: unpack of {int(want[i]):#018x} gave flag {int(f_out[i])}, expected {flags[i]}: "
                          "the flag is the high half, int32(word >> 32).")
    bad_value = np.flatnonzero(v_out.view(np.uint32) != values.view(np.uint32))
    if bad_value.size:
        i = int(bad_value[0])
        low = int(want[i]) & 0xFFFFFFFF
        hint = ("it converted the bits' integer value to a float; reinterpret them with "
                "kl.bits_float(uint32(word & 0xFFFFFFFF))." if v_out[i] == np.float32(low) else
                "the value is the low half's bits read as a float32: kl.bits_float(uint32(word & 0xFFFFFFFF)).")
        raise CheckFailed(f"{name}: unpack of {int(want[i]):#018x} gave value {float(v_out[i])!r}, expected {float(values[i])!r}: "
                          f"{hint}")
    if quiet:
        return
    agree = f"pack and unpack agree bit for bit on {n} (flag, value) pairs, negatives, -0.0 and infinities included"
    print(f"{name}: {agree}")
    progress.passed(name)


def make_status_scan(pack=pack_status, unpack=unpack_status, by_ticket: bool = True, validate=check_status_word):
    """The single-pass scan with one status word per tile, warp look-back; ``pack``/``unpack`` are
    device functions (the notebook's own, or the package's). ``by_ticket=False`` numbers tiles by
    ``blockIdx.x`` as CUB does: it saves the ticket's round trip to L2 before the first load, and
    relies on blocks starting in index order, which CUDA does not promise (the simulator's reverse
    schedule stalls it). Returns ``launch(out, x, scratch=None)`` with ``.kernel``.

    Someone else's ``pack``/``unpack`` are checked first, by ``validate(pack, unpack, quiet=True)``
    (:func:`check_status_word` unless another is given; None skips it): a pack that never sets the
    flag would leave every look-back waiting for ever, a hang on a GPU rather than a message."""
    if validate is not None and (pack is not pack_status or unpack is not unpack_status):
        validate(pack, unpack, quiet=True)

    @cuda.jit(device=True)
    def look_back(tile, status):
        lane = cuda.threadIdx.x % 32
        exclusive = float32(0)
        window = tile - 1
        while True:
            j = window - lane
            word = pack(FLAG_PREFIX, float32(0))  # before the first tile: a prefix of 0
            if j >= 0:
                word = load_relaxed(status, j)
            flag, v = unpack(word)
            while not cuda.all_sync(FULL_MASK, flag != FLAG_NONE):  # the whole warp waits together
                if flag == FLAG_NONE:
                    word = load_relaxed(status, j)
                    flag, v = unpack(word)  # flag and value from one load: they belong together
            v, done = window_sum(flag, v, lane)
            exclusive += v
            if done:
                return exclusive
            window -= 32

    @cuda.jit
    def scan_status_word(x, out, ticket, status):
        totals = cuda.shared.array(TOTALS, float32)
        shared = cuda.shared.array(1, float32)
        tile_id = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        if by_ticket:
            if t == 0:
                tile_id[0] = cuda.atomic.add(ticket, 0, 1)  # tiles numbered in the order blocks start
            cuda.syncthreads()
            tile = tile_id[0]
        else:
            tile = cuda.blockIdx.x  # CUB's choice: no round trip, and no guarantee
        first = tile * TILE + t * ITEMS
        vals = cuda.local.array(ITEMS, float32)
        load_items(x, first, vals)
        s = scan_items(vals)
        before, total = block_exclusive_scan(s, totals)
        if t < 32:
            exclusive = float32(0)
            if tile == 0:
                if t == 0:
                    cuda.atomic.exch(status, 0, pack(FLAG_PREFIX, total))
            else:
                if t == 0:  # flag and value in one atomic store: nothing to fence
                    cuda.atomic.exch(status, tile, pack(FLAG_AGGREGATE, total))
                exclusive = look_back(tile, status)
                if t == 0:
                    cuda.atomic.exch(status, tile, pack(FLAG_PREFIX, exclusive + total))
            if t == 0:
                shared[0] = exclusive
        cuda.syncthreads()
        store_items(out, first, vals, shared[0] + before)

    def launch(out, x, scratch=None):
        tiles = -(-x.size // TILE)
        ticket, status = scratch if scratch is not None else status_scratch(tiles)
        reset_scratch[max(1, -(-(tiles + 1) // 256)), 256](ticket, status)
        scan_status_word[tiles, THREADS](x, out, ticket, status)

    launch.kernel = scan_status_word
    return launch


def status_scratch(tiles):
    """Device scratch for the status-word scan: the ticket (int32[1]) and one uint64 per tile."""
    return cuda.device_array(1, np.int32), cuda.device_array(tiles, np.uint64)


scan_status_word_launch = make_status_scan()


def single_pass_scratch(tiles):
    """Device scratch for the single-pass scan: ticket, flags, aggregates, prefixes. The values
    are poisoned (a NaN pattern), so reading one before it is published shows in the result."""
    from ..check import poisoned

    return (cuda.device_array(1, np.int32), cuda.device_array(tiles, np.int32),
            poisoned(tiles, np.float32), poisoned(tiles, np.float32))
