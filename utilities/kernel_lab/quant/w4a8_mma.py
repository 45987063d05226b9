"""W4A8 on the int8 tensor cores: ``mma.sync.m16n8k32`` with the INT4 weights as the A operand.

Why: the DP4A kernels of 05.6 (``kernels.launch_w4a8_gemm_words``) reach the goal of 60% of the
copy roofline at M = 1 and 2, then fall behind as M grows, because the arithmetic, not the weight
bytes, becomes the limit: at M = 64 on a 14336 x 4096 layer DP4A at its peak (134 TOP/s on an
H100) needs about 56 us, where reading the weights takes about 10 us. One ``mma.sync.m16n8k32``
does 4,096 multiply-adds, 128 DP4As' worth.

The layout ("swap AB", as decode kernels do): a GEMM ``out (M, N) = act (M, K) @ W (N, K)^T`` is
computed as its transpose, W (N rows, the large side) as the 16-row A operand and the M <= 64
activation rows as the 8-column B operand, so that no tensor-core row is wasted on tokens that
do not exist; at M = 1 seven of B's eight columns are idle, which costs nothing here.

The K order is the kernel's own. Inside one ``mma`` a lane contributes its slots of K (four for
``a0``/``b0``, four for ``a2``/``b1``); a dot product does not care which physical K sits in
which slot as long as A and B agree. So lane ``t`` of a quad takes 32 *consecutive* K of each
128-wide chunk, ``[32 t, 32 t + 32)``: for its weight rows that is one 16-byte load of packed
INT4, and for an activation row two 16-byte loads. The chunk is split into four ``mma`` steps of
eight K each: step ``j`` puts the even elements of octet ``j`` in slots 0-3 and the odd ones in
slots 4-7. On the weight side that is exactly what the x16 unpack gives (``(p << 4) & 0xF0F0F0F0``
is the even nibbles times 16, ``p & 0xF0F0F0F0`` the odd ones, as signed bytes: no sign
extension); on the activation side one PRMT each (the bytes 0, 2 and 1, 3 of two words).

A chunk of 128 is one INT4 group, so each ``mma`` chain of four steps gives one group's exact
sum (times 16: |16 d| < 2^24, exact in float32) and is scaled by the group's scale / 16 into the
float32 accumulators.

A block has ``WR x WK`` warps: ``WR`` warps over weight rows (each ``16 x MTILES`` rows) and
``WK`` over K (warp ``k`` takes chunks ``k, k + WK, ...``), their partial sums added in shared
memory in a fixed order, so the result does not vary from run to run. Activation rows go in
tiles of ``8 x NT`` (NT = ceil(M / 8), at most 8) over ``gridDim.y``. Rows whose K is not a
whole number of chunks (128) take the DP4A kernel.

Measured on an H100 (scripts/probes/w4a8_variants.py has the history): on a 14336 x 4096 layer
61-64% of the copy roofline at M = 2 to 8 and 58% at 16, against 56% at M = 4 and 21% at 16 for
the DP4A form. From M = 32 on, every warp reads 8 NT activation rows of each chunk and holds
4 x MTILES x NT accumulators (234 registers at M = 64: one block of 8 warps an SM). There the
time follows the activations' reads from L2: each block reads its token tiles' activations for
all of K once, so the number of blocks along N sets the traffic (at M = 64, 16 weight rows a warp
took 80 us, 32 rows 44 us). Blocks of 128 weight rows (4 x 2 warps) with the tokens-inner loop
(:func:`kernel_tokens_inner`) reach 40% at M = 32 and 31% at M = 64 (34 us; 30% and 23% before).
A kernel that stages both operands in shared memory (tried: ``cp.async``, three stages) spent its
issue slots on the copies' address arithmetic and was slower at every M.

Three forms aim at M = 32-64; none is :func:`choose`'s yet, because none has been timed as it
stands (the probe's notes). ``kernel_tokens_inner(..., SPLIT=S)`` splits K over S blocks, for
layers with fewer blocks than SMs (N = K = 8192 at M = 64: 64 blocks of 128 rows for 132 SMs);
:func:`kernel_resident` also copies each block's slice of the activations into shared memory once.
Both add the splits' partial sums in a fixed order (the last block of each output tile, by an
atomic ticket), so a result does not vary from run to run. :func:`kernel_staged` keeps the
tokens-inner loop and brings each lane's weights in by ``cp.async``, stages ahead, because the
SASS says the tokens-inner form waits on memory more than it issues.
"""

from __future__ import annotations

import functools

from ..bitcast import bits_float, float_bits
from ..environment import on_simulator
from ..mma_ptx import (cp_async4_at, cp_async16_at, cp_async_commit, cp_async_wait_group, global_address, mma_s8,
                       shared_address)
from ..validate import KernelLabArgumentError
from ..vector_loads import load4, store4
from .dp4a import EVEN_BYTES, ODD_BYTES, byte_perm
from .kernels import int4_halves_x16

from numba import cuda, float32, int32, uint64  # noqa: E402  (after kernel_lab)

CHUNK_WORDS = 16  # packed INT4 words per chunk of 128 K (one group, four mma steps)
MAX_NT = 8  # token tiles of 8 per block: M <= 64 in one pass over the weights


@functools.cache
def _parts(MTILES: int, NT: int):
    """The kernel's steps, for MTILES tiles of 16 weight rows and NT tiles of 8 activation rows:
    ``weight_rows`` (each lane's rows, clamped), ``load_weights`` (a chunk's packed words and group
    scales / 16 for rows g and g + 8 of each tile; a zero scale past the last row), ``unpack`` (the
    x16 halves), ``split_bytes`` (an activation row's even and odd bytes), ``tile_mma`` (one token
    tile's four ``mma`` steps per weight tile, scaled into the float32 accumulators),
    ``add_partials`` (the K-warps' sums through shared memory, in a fixed order) and ``store``."""
    NACC = MTILES * NT * 4
    SCALE_DIV = float32(0.0625)

    @cuda.jit(device=True, inline="always")
    def weight_rows(row0, rows, wrow, wmul):
        """Rows g and g + 8 of each tile, as unsigned indices (no wrap-around code in the loop);
        a row past the last reads the last row again, with its scale multiplied by 0."""
        for mt in range(MTILES):
            for h in range(2):
                r = row0 + 16 * mt + 8 * h
                wrow[mt, h] = uint64(min(r, rows - 1))
                wmul[mt, h] = SCALE_DIV if r < rows else float32(0.0)

    @cuda.jit(device=True, inline="always")
    def load_weights(w32, w_scales, wrow, wmul, c, t, pw, sc):
        """Chunk ``c``'s packed words (lane t's 32 consecutive K) and group scales / 16."""
        col = uint64(CHUNK_WORDS) * c + uint64(4) * uint64(t)
        for mt in range(MTILES):
            for h in range(2):
                pw[mt, h, 0], pw[mt, h, 1], pw[mt, h, 2], pw[mt, h, 3] = load4(w32, (wrow[mt, h], col))
                sc[mt, h] = w_scales[wrow[mt, h], c] * wmul[mt, h]

    @cuda.jit(device=True, inline="always")
    def unpack(pw, lo, hi):
        for mt in range(MTILES):
            for h in range(2):
                for j in range(4):
                    lo[mt, h, j], hi[mt, h, j] = int4_halves_x16(pw[mt, h, j])

    @cuda.jit(device=True, inline="always")
    def split_bytes(x0, x1, x2, x3, x4, x5, x6, x7, be, bo):
        """An activation row's 32 bytes as four octets' even bytes (be) and odd bytes (bo)."""
        be[0], bo[0] = byte_perm(x0, x1, EVEN_BYTES), byte_perm(x0, x1, ODD_BYTES)
        be[1], bo[1] = byte_perm(x2, x3, EVEN_BYTES), byte_perm(x2, x3, ODD_BYTES)
        be[2], bo[2] = byte_perm(x4, x5, EVEN_BYTES), byte_perm(x4, x5, ODD_BYTES)
        be[3], bo[3] = byte_perm(x6, x7, EVEN_BYTES), byte_perm(x6, x7, ODD_BYTES)

    @cuda.jit(device=True, inline="always")
    def tile_mma(lo, hi, be, bo, sc, acc, nt):
        for mt in range(MTILES):
            d0, d1, d2, d3 = int32(0), int32(0), int32(0), int32(0)
            for j in range(4):  # slots 0-3: octet j's even elements, slots 4-7: its odd ones
                d0, d1, d2, d3 = mma_s8(lo[mt, 0, j], lo[mt, 1, j], hi[mt, 0, j], hi[mt, 1, j],
                                        be[j], bo[j], d0, d1, d2, d3)
            base = (mt * NT + nt) * 4
            acc[base] += float32(d0) * sc[mt, 0]
            acc[base + 1] += float32(d1) * sc[mt, 0]
            acc[base + 2] += float32(d2) * sc[mt, 1]
            acc[base + 3] += float32(d3) * sc[mt, 1]

    @cuda.jit(device=True, inline="always")
    def add_partials(acc, red, wr, wk, lane, WR, WK):
        """Warps k > 0 leave their sums in ``red`` (int32 words: float bits) and return False; warp
        k = 0 adds them, k = 1, 2, ... in order, and returns True."""
        if wk > 0:
            slot = ((wk - 1) * WR + wr) * NACC * 32
            for i in range(NACC):
                red[slot + i * 32 + lane] = int32(float_bits(acc[i]))
        cuda.syncthreads()
        if wk > 0:
            return False
        for k in range(WK - 1):
            slot = (k * WR + wr) * NACC * 32
            for i in range(NACC):
                acc[i] += bits_float(red[slot + i * 32 + lane])
        return True

    @cuda.jit(device=True, inline="always")
    def store(acc, a_scale, out, row0, tok0, g, t):
        rows, toks = out.shape[1], out.shape[0]
        for mt in range(MTILES):
            for nt in range(NT):
                base = (mt * NT + nt) * 4
                for q in range(4):  # c0, c1: row g, tokens 2t, 2t + 1; c2, c3: row g + 8
                    r = row0 + 16 * mt + 8 * (q >> 1) + g
                    m = tok0 + 8 * nt + 2 * t + (q & 1)
                    if r < rows and m < toks:
                        out[m, r] = acc[base + q] * a_scale[m]

    return weight_rows, load_weights, unpack, split_bytes, tile_mma, add_partials, store


@functools.cache
def _frame(MTILES: int, NT: int, WR: int, WK: int, SPLIT: int = 1):
    """What both forms do around the chunk loop: ``begin`` (this warp's weight tile, K-warp index,
    first chunk, rows and token rows; returns ``(wr, wk, lane, g, t, row0, tok0, chunks)``),
    ``finish`` (the K-warps' partial sums added in shared memory in a fixed order, then the store)
    and ``finish_split`` (the same when K is split over blocks too)."""
    weight_rows, _, _, _, _, add_partials, store = _parts(MTILES, NT)
    NACC = MTILES * NT * 4
    RED = max(WK - 1, 1) * WR * NACC * 32  # the K-warps' partial sums, lane-major

    @cuda.jit(device=True, inline="always")
    def begin(w32, out, wrow, wmul, arow):
        lane = cuda.threadIdx.x & 31
        warp = cuda.threadIdx.x >> 5
        wr, wk = warp % WR, warp // WR
        g, t = lane >> 2, lane & 3
        toks = out.shape[0]
        row0 = (cuda.blockIdx.x * WR + wr) * (16 * MTILES) + g
        tok0 = cuda.blockIdx.y * (8 * NT)
        weight_rows(row0, out.shape[1], wrow, wmul)
        for nt in range(NT):  # past the last activation row: row M - 1 again, never stored
            arow[nt] = uint64(min(tok0 + 8 * nt + g, toks - 1))
        return wr, wk, lane, g, t, row0, tok0, w32.shape[1] // CHUNK_WORDS

    @cuda.jit(device=True, inline="always")
    def finish(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0):
        if WK > 1:
            red = cuda.shared.array(RED, int32)
            if not add_partials(acc, red, wr, wk, lane, WR, WK):
                return
        store(acc, a_scale, out, row0 - g, tok0, g, t)

    @cuda.jit(device=True, inline="always")
    def finish_split(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0, partials, tickets, red):
        """``finish`` for K split over ``gridDim.z`` blocks (``SPLIT`` of them): the K-warps' sums
        added through ``red`` (shared, ``RED`` words or more, free), then each block's owner warps
        (k = 0) leave their sums in ``partials`` (lane-major: [split][tile][weight warp][sum][lane],
        coalesced) and take a ticket for their output tile; the block with the last ticket adds the
        splits' sums in the order 0, 1, ... (the same bits whichever block finishes last), stores,
        and puts the ticket back to 0 for the next launch."""
        owner = True
        if WK > 1:
            owner = add_partials(acc, red, wr, wk, lane, WR, WK)
        ticket = cuda.shared.array(1, int32)
        splits, z = cuda.gridDim.z, cuda.blockIdx.z
        tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
        stride = cuda.gridDim.x * cuda.gridDim.y * (WR * NACC * 32)  # one split's sums
        mine = (tile * WR + wr) * (NACC * 32) + lane
        if owner:
            for i in range(NACC):
                partials[z * stride + mine + i * 32] = acc[i]
        cuda.threadfence()  # the sums are visible to every block before the ticket is taken
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            ticket[0] = cuda.atomic.add(tickets, tile, 1)
        cuda.syncthreads()
        if ticket[0] != splits - 1 or not owner:
            return
        cuda.threadfence()
        if cuda.threadIdx.x == 0:
            tickets[tile] = 0
        rows, toks = out.shape[1], out.shape[0]
        for i in range(NACC):  # every split's sums from memory (this block's too): acc is not indexed
            v = float32(0.0)   # in this loop, which the compiler may keep rolled (acc stays in registers)
            for q in range(SPLIT):  # the fixed order 0, 1, ...
                v += partials[q * stride + mine + i * 32]
            r = row0 + 16 * (i // (4 * NT)) + 8 * ((i & 3) >> 1)
            m = tok0 + 8 * ((i // 4) % NT) + 2 * t + (i & 1)
            if r < rows and m < toks:
                out[m, r] = v * a_scale[m]

    return begin, finish, finish_split, RED


@functools.cache
def _chunk_steps(MTILES: int, NT: int):
    """A chunk's steps in the tokens-inner order, shared by :func:`kernel_tokens_inner`,
    :func:`kernel_resident` and :func:`kernel_staged`: ``load_tokens`` (every token tile's 32 bytes
    of this lane's K into ``x``, all loads issued before any use), ``split_pairs`` (``x`` in place:
    words 2j, 2j + 1 become octet j's even bytes and odd bytes, the B fragment of mma step j) and
    ``chunk_sums`` (the four ``mma`` steps outermost over all ``MTILES x NT`` chains, so that the
    independent chains hide the instruction's latency, then each chain's exact int32 sum scaled by
    its group's scale / 16 into the float32 accumulators)."""
    NACC = MTILES * NT * 4

    @cuda.jit(device=True, inline="always")
    def load_tokens(a32, arow, c, acol, x):
        for nt in range(NT):
            x[nt, 0], x[nt, 1], x[nt, 2], x[nt, 3] = load4(a32, (arow[nt], uint64(32) * c + acol))
            x[nt, 4], x[nt, 5], x[nt, 6], x[nt, 7] = load4(a32, (arow[nt], uint64(32) * c + acol + uint64(4)))

    @cuda.jit(device=True, inline="always")
    def split_pairs(x):
        for nt in range(NT):
            for j in range(4):
                even = byte_perm(x[nt, 2 * j], x[nt, 2 * j + 1], EVEN_BYTES)
                x[nt, 2 * j + 1] = byte_perm(x[nt, 2 * j], x[nt, 2 * j + 1], ODD_BYTES)
                x[nt, 2 * j] = even

    @cuda.jit(device=True, inline="always")
    def chunk_sums(lo, hi, x, d, sc, acc):
        for i in range(NACC):
            d[i] = int32(0)
        for j in range(4):  # step j of every chain, then step j + 1: the chains interleave
            for mt in range(MTILES):
                for nt in range(NT):
                    b = (mt * NT + nt) * 4
                    d[b], d[b + 1], d[b + 2], d[b + 3] = mma_s8(lo[mt, 0, j], lo[mt, 1, j], hi[mt, 0, j],
                                                                hi[mt, 1, j], x[nt, 2 * j], x[nt, 2 * j + 1],
                                                                d[b], d[b + 1], d[b + 2], d[b + 3])
        for mt in range(MTILES):
            for nt in range(NT):
                b = (mt * NT + nt) * 4
                acc[b] += float32(d[b]) * sc[mt, 0]
                acc[b + 1] += float32(d[b + 1]) * sc[mt, 0]
                acc[b + 2] += float32(d[b + 2]) * sc[mt, 1]
                acc[b + 3] += float32(d[b + 3]) * sc[mt, 1]

    return load_tokens, split_pairs, chunk_sums


@functools.cache
def kernel(NT: int, MTILES: int = 2, WR: int = 2, WK: int = 4, MINB: int = 0):
    """The kernel: every warp loads its own activation fragments (from L1/L2). ``NT`` tiles of
    8 activation rows, ``MTILES`` tiles of 16 weight rows a warp, ``WR x WK`` warps a block;
    ``MINB`` > 0 asks the compiler for registers enough for that many blocks an SM (launch bounds)."""
    _, load_weights, unpack, split_bytes, tile_mma, _, _ = _parts(MTILES, NT)
    begin, finish, _, _ = _frame(MTILES, NT, WR, WK)
    NACC = MTILES * NT * 4

    @cuda.jit(launch_bounds=(32 * WR * WK, MINB) if MINB else None)
    def w4a8_mma(a32, a_scale, w32, w_scales, out):
        acc = cuda.local.array(NACC, float32)
        for i in range(NACC):
            acc[i] = float32(0.0)
        pw = cuda.local.array((MTILES, 2, 4), int32)  # packed words: rows g and g + 8 of each tile
        sc = cuda.local.array((MTILES, 2), float32)
        lo = cuda.local.array((MTILES, 2, 4), int32)
        hi = cuda.local.array((MTILES, 2, 4), int32)
        be = cuda.local.array(4, int32)
        bo = cuda.local.array(4, int32)
        wrow = cuda.local.array((MTILES, 2), uint64)
        wmul = cuda.local.array((MTILES, 2), float32)
        arow = cuda.local.array(NT, uint64)
        wr, wk, lane, g, t, row0, tok0, chunks = begin(w32, out, wrow, wmul, arow)
        acol = uint64(8) * uint64(t)

        c = uint64(wk)
        while c < uint64(chunks):
            load_weights(w32, w_scales, wrow, wmul, c, t, pw, sc)
            unpack(pw, lo, hi)
            for nt in range(NT):
                x0, x1, x2, x3 = load4(a32, (arow[nt], uint64(32) * c + acol))
                x4, x5, x6, x7 = load4(a32, (arow[nt], uint64(32) * c + acol + uint64(4)))
                split_bytes(x0, x1, x2, x3, x4, x5, x6, x7, be, bo)
                tile_mma(lo, hi, be, bo, sc, acc, nt)
            c += uint64(WK)
        finish(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0)

    return w4a8_mma


@functools.cache
def kernel_tokens_inner(NT: int, MTILES: int = 1, WR: int = 2, WK: int = 4, MINB: int = 0, SPLIT: int = 1):
    """The same tiles as :func:`kernel`, with the chunk's loop turned: all ``NT`` token tiles'
    activation loads are issued together (one trip to L2 a chunk, not ``NT`` one after another),
    then the four ``mma`` steps run outermost, each over every (weight tile, token tile) pair, so
    that ``MTILES x NT`` independent accumulator chains hide the instruction's latency (the direct
    form has ``MTILES`` chains of four dependent steps at a time). It holds every token tile's
    activation bytes and int32 sums at once: registers for ``8 NT + 4 MTILES NT`` more words.

    ``SPLIT`` > 1 splits K over that many blocks along ``gridDim.z`` (each a contiguous share of
    the chunks), their sums added by ``finish_split``: for layers with fewer blocks than SMs
    (N = 8192 at 128 rows a block: 64). ``partials`` and ``tickets`` are its scratch (see
    :func:`_split_scratch`); with ``SPLIT`` = 1 they are not touched."""
    _, load_weights, unpack, _, _, _, _ = _parts(MTILES, NT)
    load_tokens, split_pairs, chunk_sums = _chunk_steps(MTILES, NT)
    begin, finish, finish_split, RED = _frame(MTILES, NT, WR, WK, SPLIT)
    NACC = MTILES * NT * 4

    @cuda.jit(launch_bounds=(32 * WR * WK, MINB) if MINB else None)
    def w4a8_mma_tokens_inner(a32, a_scale, w32, w_scales, out, partials, tickets):
        acc = cuda.local.array(NACC, float32)
        for i in range(NACC):
            acc[i] = float32(0.0)
        d = cuda.local.array(NACC, int32)
        pw = cuda.local.array((MTILES, 2, 4), int32)
        sc = cuda.local.array((MTILES, 2), float32)
        lo = cuda.local.array((MTILES, 2, 4), int32)
        hi = cuda.local.array((MTILES, 2, 4), int32)
        x = cuda.local.array((NT, 8), int32)  # each token tile's 32 bytes of this lane's K
        wrow = cuda.local.array((MTILES, 2), uint64)
        wmul = cuda.local.array((MTILES, 2), float32)
        arow = cuda.local.array(NT, uint64)
        wr, wk, lane, g, t, row0, tok0, chunks = begin(w32, out, wrow, wmul, arow)
        acol = uint64(8) * uint64(t)
        share = (chunks + SPLIT - 1) // SPLIT  # this block's chunks: [z share, (z + 1) share)
        c = uint64(cuda.blockIdx.z * share + wk)
        c_end = uint64(min(chunks, (cuda.blockIdx.z + 1) * share))
        while c < c_end:
            load_weights(w32, w_scales, wrow, wmul, c, t, pw, sc)
            load_tokens(a32, arow, c, acol, x)
            unpack(pw, lo, hi)
            split_pairs(x)
            chunk_sums(lo, hi, x, d, sc, acc)
            c += uint64(WK)
        if SPLIT > 1:
            red = cuda.shared.array(RED, int32)
            finish_split(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0, partials, tickets, red)
        else:
            finish(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0)

    return w4a8_mma_tokens_inner


def staged_smem_bytes(NT: int, MTILES: int, WR: int, WK: int, ST: int) -> int:
    """:func:`kernel_staged`'s dynamic shared memory: every warp's weight stages, or the K-warps' sums."""
    stage = MTILES * 2 * 32 * 5  # a warp's stage, in words: 4 packed words and a scale per lane and piece
    red = (WK - 1) * WR * MTILES * NT * 4 * 32 if WK > 1 else 0
    return 4 * max(WR * WK * ST * stage, red)


@functools.cache
def kernel_staged(NT: int, MTILES: int = 2, WR: int = 4, WK: int = 2, ST: int = 3, MINB: int = 0):
    """:func:`kernel_tokens_inner` with the weights (and their scales) brought in by ``cp.async``,
    ``ST`` stages deep: each lane copies its own 16-byte pieces of chunk ``i + ST - 1`` into shared
    memory while it computes chunk ``i``, so ``ST - 1`` chunks of weights are in flight a thread
    without holding registers for them. Each lane reads back only what it copied itself, so
    ``cp.async.wait_group`` of its own copies is all the synchronisation the loop needs.

    Why: at M = 64 (NT = 8) the tokens-inner form holds 238 registers, one block of 8 warps an SM,
    and its loop is about 443 instructions for 64 ``mma`` a chunk (sm_90 SASS): issuing them takes a
    fifth of the time measured; the rest is each warp waiting for its chunk's weights, one memory
    round trip after another (16 chunks a warp at K = 4096). Holding the next chunk in registers
    instead (measured, refuted) needs registers the kernel does not have."""
    weight_rows, _, unpack, _, _, add_partials, store = _parts(MTILES, NT)
    load_tokens, split_pairs, chunk_sums = _chunk_steps(MTILES, NT)
    begin, _, _, _ = _frame(MTILES, NT, WR, WK)
    NACC = MTILES * NT * 4
    PIECES = MTILES * 2  # a lane's 16-byte pieces a chunk: rows g and g + 8 of each weight tile
    STAGE = PIECES * 32 * 5  # words: the pieces (4 words a lane), then the scales (1 word a lane)
    PENDING = ST - 2

    @cuda.jit(device=True, inline="always")
    def issue(w32, w_scales, wrow, c, t, lane, dst):
        """Chunk ``c``'s pieces and scales of this lane, to the stage at shared address ``dst``."""
        col = uint64(CHUNK_WORDS) * c + uint64(4) * uint64(t)
        for mt in range(MTILES):
            for h in range(2):
                p = mt * 2 + h
                cp_async16_at(dst + 16 * (p * 32 + lane), global_address(w32, (wrow[mt, h], col)), 16)
                cp_async4_at(dst + 4 * (PIECES * 128 + p * 32 + lane), global_address(w_scales, (wrow[mt, h], c)), 4)

    @cuda.jit(launch_bounds=(32 * WR * WK, MINB) if MINB else None)
    def w4a8_mma_staged(a32, a_scale, w32, w_scales, out):
        ws = cuda.shared.array(0, int32)
        acc = cuda.local.array(NACC, float32)
        for i in range(NACC):
            acc[i] = float32(0.0)
        d = cuda.local.array(NACC, int32)
        pw = cuda.local.array((MTILES, 2, 4), int32)
        sc = cuda.local.array((MTILES, 2), float32)
        lo = cuda.local.array((MTILES, 2, 4), int32)
        hi = cuda.local.array((MTILES, 2, 4), int32)
        x = cuda.local.array((NT, 8), int32)
        wrow = cuda.local.array((MTILES, 2), uint64)
        wmul = cuda.local.array((MTILES, 2), float32)
        arow = cuda.local.array(NT, uint64)
        wr, wk, lane, g, t, row0, tok0, chunks = begin(w32, out, wrow, wmul, arow)
        acol = uint64(8) * uint64(t)
        warp = cuda.threadIdx.x >> 5
        first = warp * (ST * STAGE)  # this warp's stages, in words
        base = shared_address(ws, 0)
        trips = (chunks - wk + WK - 1) // WK if wk < chunks else 0
        for s in range(ST - 1):  # the first ST - 1 chunks on their way
            if s < trips:
                issue(w32, w_scales, wrow, uint64(wk + s * WK), t, lane, base + 4 * (first + s * STAGE))
            cp_async_commit()
        i = 0
        st = 0  # the stage of chunk i
        while i < trips:
            cp_async_wait_group(PENDING)  # chunk i's copies (this lane's) have landed
            at = first + st * STAGE
            for mt in range(MTILES):
                for h in range(2):
                    p = mt * 2 + h
                    pw[mt, h, 0], pw[mt, h, 1], pw[mt, h, 2], pw[mt, h, 3] = load4(ws, at + 4 * (p * 32 + lane))
                    # an unsigned index: no wrap-around code for negative ones (a dynamic array's length is unknown)
                    sc[mt, h] = bits_float(ws[uint64(at + PIECES * 128 + p * 32 + lane)]) * wmul[mt, h]
            refill = st - 1 if st > 0 else ST - 1  # the stage chunk i - 1 used: read, free again
            if i + ST - 1 < trips:
                issue(w32, w_scales, wrow, uint64(wk + (i + ST - 1) * WK), t, lane,
                      base + 4 * (first + refill * STAGE))
            cp_async_commit()  # a group every trip, empty or not: the wait's count stays right
            load_tokens(a32, arow, uint64(wk + i * WK), acol, x)
            unpack(pw, lo, hi)
            split_pairs(x)
            chunk_sums(lo, hi, x, d, sc, acc)
            i += 1
            st = st + 1 if st < ST - 1 else 0
        cp_async_wait_group(0)
        owner = True
        if WK > 1:
            cuda.syncthreads()  # every warp is done with its stages: ws holds the K-warps' sums now
            owner = add_partials(acc, ws, wr, wk, lane, WR, WK)
        if owner:
            store(acc, a_scale, out, row0 - g, tok0, g, t)

    return w4a8_mma_staged


_SCRATCH: dict = {}


def _split_scratch(words: int, tiles: int):
    """The split form's float32 partial sums (``words``) and one ticket per output tile (zeros),
    kept per size and context: the kernel leaves every ticket at 0 again, so they are made once."""
    key = (words, tiles, 0 if on_simulator() else id(cuda.current_context()))
    if key not in _SCRATCH:
        import numpy as np

        _SCRATCH[key] = (cuda.device_array(max(words, 1), np.float32), cuda.to_device(np.zeros(tiles, np.int32)))
    return _SCRATCH[key]


PAD_WORDS = 36  # a token's chunk in shared memory: 128 bytes, then 16 unused (LDS.128 without conflicts)


@functools.cache
def kernel_resident(NT: int, MTILES: int = 2, WR: int = 4, WK: int = 2, CPB: int = 8, MINB: int = 0, SPLIT: int = 1):
    """Activations resident in shared memory, K split over blocks. Block ``(x, y, s)`` takes the
    weight rows of :func:`kernel`'s block ``x``, token tiles ``y`` and the ``CPB`` chunks from
    ``s CPB``: it first copies that slice of the activations into shared memory once (every 8
    bytes already split into even and odd bytes, so the loop does no PRMT), then each warp streams
    its weights, the next chunk's load in flight while this one's ``mma`` steps run, and reads the
    activation fragments with two ``LDS.128`` per token tile. The ``gridDim.z`` (= ``SPLIT``, a
    compile-time constant that the launcher sets) blocks that share an output tile add their sums
    as the tokens-inner form's split does (``_frame``'s ``finish_split``, through ``xs`` once the
    loop is done with it).

    Why: from M = 32 the other forms read every chunk of activations from L2 once per block along
    N, which costs as many bytes as the weights at 128 rows a block; here a block reads its slice
    once, from one coalesced copy. The split over K keeps blocks enough for every SM."""
    _, load_weights, unpack, _, _, add_partials, store = _parts(MTILES, NT)
    _, _, chunk_sums = _chunk_steps(MTILES, NT)
    begin, _, finish_split, _ = _frame(MTILES, NT, WR, WK, SPLIT)
    NACC = MTILES * NT * 4
    TOKS = 8 * NT
    THREADS = 32 * WR * WK
    PIECES = TOKS * CPB * 8  # 16-byte pieces of the slice: 8 per token and chunk

    @cuda.jit(device=True, inline="always")
    def stage(a32, xs, tok0, c0, nch):
        """The slice (tokens tok0.., chunks c0..c0 + nch) into ``xs``, zeros past M and past K."""
        toks = a32.shape[0]
        i = cuda.threadIdx.x
        while i < PIECES:
            tok, r = i // (CPB * 8), i % (CPB * 8)  # consecutive threads: consecutive 16 bytes of a row
            v0, v1, v2, v3 = int32(0), int32(0), int32(0), int32(0)
            if tok0 + tok < toks and (r >> 3) < nch:
                v0, v1, v2, v3 = load4(a32, (uint64(tok0 + tok), uint64(32) * uint64(c0) + uint64(4 * r)))
            dst = ((r >> 3) * TOKS + tok) * PAD_WORDS + 4 * (r & 7)
            store4(xs, dst, byte_perm(v0, v1, EVEN_BYTES), byte_perm(v0, v1, ODD_BYTES),
                   byte_perm(v2, v3, EVEN_BYTES), byte_perm(v2, v3, ODD_BYTES))
            i += THREADS

    @cuda.jit(launch_bounds=(THREADS, MINB) if MINB else None)
    def w4a8_mma_resident(a32, a_scale, w32, w_scales, out, partials, tickets):
        xs = cuda.shared.array(0, int32)
        acc = cuda.local.array(NACC, float32)
        for i in range(NACC):
            acc[i] = float32(0.0)
        pw = cuda.local.array((MTILES, 2, 4), int32)
        sc = cuda.local.array((MTILES, 2), float32)
        scc = cuda.local.array((MTILES, 2), float32)
        d = cuda.local.array(NACC, int32)
        x = cuda.local.array((NT, 8), int32)
        lo = cuda.local.array((MTILES, 2, 4), int32)
        hi = cuda.local.array((MTILES, 2, 4), int32)
        wrow = cuda.local.array((MTILES, 2), uint64)
        wmul = cuda.local.array((MTILES, 2), float32)
        arow = cuda.local.array(NT, uint64)  # begin's token rows: unused here (the copy has its own)
        wr, wk, lane, g, t, row0, tok0, chunks = begin(w32, out, wrow, wmul, arow)
        c0 = cuda.blockIdx.z * CPB
        nch = min(CPB, chunks - c0)
        cl = wk
        if cl < nch:  # the first chunk's weights on their way while the activations are copied
            load_weights(w32, w_scales, wrow, wmul, uint64(c0 + cl), t, pw, sc)
        stage(a32, xs, tok0, c0, nch)
        cuda.syncthreads()
        while cl < nch:
            unpack(pw, lo, hi)
            for mt in range(MTILES):
                for h in range(2):
                    scc[mt, h] = sc[mt, h]
            if cl + WK < nch:  # the next chunk's weights load during this chunk's mma steps
                load_weights(w32, w_scales, wrow, wmul, uint64(c0 + cl + WK), t, pw, sc)
            for nt in range(NT):  # each token tile's octets: words 2j (even bytes) and 2j + 1 (odd) of step j
                at = (cl * TOKS + 8 * nt + g) * PAD_WORDS + 8 * t
                x[nt, 0], x[nt, 1], x[nt, 2], x[nt, 3] = load4(xs, at)
                x[nt, 4], x[nt, 5], x[nt, 6], x[nt, 7] = load4(xs, at + 4)
            chunk_sums(lo, hi, x, d, scc, acc)  # x is split into even and odd bytes already
            cl += WK
        cuda.syncthreads()  # every warp is done with xs: it holds the sums from here on
        if SPLIT > 1:
            finish_split(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0, partials, tickets, xs)
            return
        owner = True
        if WK > 1:
            owner = add_partials(acc, xs, wr, wk, lane, WR, WK)
        if owner:
            store(acc, a_scale, out, row0 - g, tok0, g, t)

    return w4a8_mma_resident


def resident_smem_bytes(NT: int, MTILES: int, WR: int, WK: int, CPB: int) -> int:
    """The resident form's dynamic shared memory: the activation slice, or the K-warps' sums."""
    red = max(WK - 1, 1) * WR * MTILES * NT * 4 * 32 if WK > 1 else 0
    return 4 * max(CPB * 8 * NT * PAD_WORDS, red)


_OPTED_IN: set = set()


def _launch_resident(p, out, a32, a_scale, w32, w_scales):
    m, n = out.shape
    cpb = p.get("CPB", 8)
    chunks = w32.shape[1] // CHUNK_WORDS
    grid = (-(-n // (16 * p["MTILES"] * p["WR"])), -(-m // (8 * p["NT"])), -(-chunks // cpb))
    k = kernel_resident(p["NT"], p["MTILES"], p["WR"], p["WK"], cpb, p.get("MINB", 0), grid[2])
    nacc = p["MTILES"] * p["NT"] * 4
    partials, tickets = _split_scratch(grid[2] * grid[0] * grid[1] * p["WR"] * nacc * 32 if grid[2] > 1 else 0,
                                       grid[0] * grid[1])
    smem = resident_smem_bytes(p["NT"], p["MTILES"], p["WR"], p["WK"], cpb)
    args = (a32, a_scale, w32, w_scales, out, partials, tickets)
    if smem > 48 * 1024 and not on_simulator() and (k, smem) not in _OPTED_IN:
        from ..tensor_cores.gemm import set_max_dynamic_shared_memory

        set_max_dynamic_shared_memory(k, args, smem)
        _OPTED_IN.add((k, smem))
    k[grid, 32 * p["WR"] * p["WK"], 0, smem](*args)


def _launch_staged(p, out, a32, a_scale, w32, w_scales):
    m, n = out.shape
    st = p.get("ST", 3)
    if st < 2:
        raise KernelLabArgumentError(f"ST (stages of weights in flight) must be 2 or more, got {st}")
    k = kernel_staged(p["NT"], p["MTILES"], p["WR"], p["WK"], st, p.get("MINB", 0))
    smem = staged_smem_bytes(p["NT"], p["MTILES"], p["WR"], p["WK"], st)
    args = (a32, a_scale, w32, w_scales, out)
    if smem > 48 * 1024 and not on_simulator() and (k, smem) not in _OPTED_IN:
        from ..tensor_cores.gemm import set_max_dynamic_shared_memory

        set_max_dynamic_shared_memory(k, args, smem)
        _OPTED_IN.add((k, smem))
    grid = (-(-n // (16 * p["MTILES"] * p["WR"])), -(-m // (8 * p["NT"])))
    k[grid, 32 * p["WR"] * p["WK"], 0, smem](*args)


FORMS = {"direct": kernel, "tokens-inner": kernel_tokens_inner, "resident": kernel_resident,
         "staged": kernel_staged}  # launch_w4a8_mma calls each with its own arguments


def choose(m: int, n: int) -> dict:
    """Tiles for ``m`` activation rows and ``n`` weight rows: the probe's winners on an H100
    (scripts/probes/w4a8_variants.py). Wide layers have blocks enough with 2 x 4 warps up to 16
    rows; above that, the activations' reads from L2 (every block reads all of its token tiles'
    activations once) set the time, so the blocks take 128 weight rows (4 x 2 warps, two weight
    tiles each) and the tokens-inner form. Narrower layers split K eight ways for more warps in
    flight; above 16 rows, two weight tiles a warp halve the activation fragments each costs."""
    nt = min(MAX_NT, -(-m // 8))
    if n >= 8192:
        if m <= 16:
            return dict(NT=nt, MTILES=1, WR=2, WK=4)
        return dict(NT=nt, MTILES=2, WR=4, WK=2, form="tokens-inner")
    return dict(NT=nt, MTILES=1 if m <= 16 else 2, WR=1, WK=8)


def launch_w4a8_mma(out, a32, a_scale, w32, w_scales, **params):
    """W4A8 on the int8 tensor cores; the same arguments as ``kernels.launch_w4a8_gemm``.

    ``params`` override :func:`choose`'s ``NT``, ``MTILES``, ``WR``, ``WK``, ``MINB`` (launch
    bounds), ``SPLIT`` (K over that many blocks; the tokens-inner form only), ``CPB`` (chunks a
    block; the resident form only), ``ST`` (stages; the staged form only) and ``form`` (a key of
    ``FORMS``: "direct", :func:`kernel`, "tokens-inner", "resident" or "staged"). Rows whose packed length is not a whole number of 128-value
    groups (16 words), and GPUs older than compute capability 8.0, take the DP4A kernel
    (``kernels.launch_w4a8_gemm_words``)."""
    from .kernels import launch_w4a8_gemm_words

    m, n = out.shape
    if a32.shape[1] != 2 * w32.shape[1]:
        raise KernelLabArgumentError(f"a32 holds {4 * a32.shape[1]} values of K per row, w32 {8 * w32.shape[1]}: "
                                     "pad both to the same multiple of 8")
    if w_scales.shape[1] * CHUNK_WORDS < w32.shape[1]:
        raise KernelLabArgumentError(f"w_scales has {w_scales.shape[1]} groups per row; {w32.shape[1]} words "
                                     f"need {-(-w32.shape[1] // CHUNK_WORDS)} (one per 128 values)")
    if w32.shape[1] % CHUNK_WORDS or not tensor_cores_available():
        return launch_w4a8_gemm_words(out, a32, a_scale, w32, w_scales)
    p = {**choose(m, n), **params}
    form = p.get("form", "direct")
    if form not in FORMS:
        raise KernelLabArgumentError(f"form must be one of {sorted(FORMS)}, got {form!r}")
    if form == "resident":
        return _launch_resident(p, out, a32, a_scale, w32, w_scales)
    if form == "staged":
        return _launch_staged(p, out, a32, a_scale, w32, w_scales)
    split = p.get("SPLIT", 1)
    if split > 1 and form != "tokens-inner":
        raise KernelLabArgumentError(f"SPLIT (K over blocks) is a parameter of the tokens-inner form, not {form!r}")
    grid = (-(-n // (16 * p["MTILES"] * p["WR"])), -(-m // (8 * p["NT"])), split)
    if form == "tokens-inner":
        k = kernel_tokens_inner(p["NT"], p["MTILES"], p["WR"], p["WK"], p.get("MINB", 0), split)
        nsums = p["WR"] * p["MTILES"] * p["NT"] * 4 * 32  # one block's owner warps' sums
        partials, tickets = _split_scratch(split * grid[0] * grid[1] * nsums if split > 1 else 0, grid[0] * grid[1])
        k[grid, 32 * p["WR"] * p["WK"]](a32, a_scale, w32, w_scales, out, partials, tickets)
        return
    k = FORMS[form](p["NT"], p["MTILES"], p["WR"], p["WK"], p.get("MINB", 0))
    k[grid, 32 * p["WR"] * p["WK"]](a32, a_scale, w32, w_scales, out)


def tensor_cores_available() -> bool:
    """``mma.sync.m16n8k32`` on int8 needs compute capability 8.0 (the simulator runs it anyway)."""
    if on_simulator():
        return True
    return tuple(cuda.get_current_device().compute_capability) >= (8, 0)
