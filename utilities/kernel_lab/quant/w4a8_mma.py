"""W4A8 on the int8 tensor cores: ``mma.sync.m16n8k32`` with the INT4 weights as the A operand.

Why: the DP4A kernels of 05.6 (``w4a8.launch_w4a8_gemm_words``) reach the goal of 60% of the
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

Three more forms for M = 32-64 were tried and removed (H200, 2026-11-27; the numbers are in
scripts/probes/w4a8_variants.py): K split over blocks along ``gridDim.z`` with a fixed-order sum of
the splits' partial sums, the activations resident in shared memory (K split the same way), and the
tokens-inner loop with the weights staged by ``cp.async``. On the 14336 x 4096 layer none is faster
than the tokens-inner form at M = 16-64 (M = 64: 33.0 us, against 48.7, 49.8 and 61.3 us for the
best of each); at N = K = 8192, M = 64 a split of 2 was 5% ahead (50.3 against 52.8 us, one run),
and at M = 1 and 16 no split beat the direct form that :func:`choose` takes there (06.3: 13.0 and
20.5 us). What limits the tokens-inner form at M = 64 is its warps' latency at 1.8 warps a
scheduler (238 registers: the 64 accumulators, 64 int32 chain sums and the token tiles' bytes), not
DRAM (21%) or the issue rate (25%); the forms that add warps (resident) pay for it in instructions,
those that add blocks (split) do not make each SM faster.

The same day's probe of every tile shape on N = K = 8192 (H200) found the choice of then, made on
the 14336 x 4096 layer, wrong for 8192 rows: its 64 blocks of 128 rows left half of the 132 SMs
idle. Blocks of 64 rows (tokens-inner, 2 x 4 warps: 128 blocks, each still splitting K over its
own warps) took 35.5 us at M = 64 against 53.8 us, and 26.3 against 39.3 us at M = 32; at M = 4
and 16 one weight warp a block (512 blocks) took 16.1 and 18.0 us against 20.8 and 20.4 us.
:func:`choose` now sizes the blocks by the GPU's SM count, which gives the earlier choices on the
other two layers.
"""

from __future__ import annotations

import functools

from ..bitcast import bits_float, float_bits
from ..environment import on_simulator
from ..mma_ptx import mma_s8
from ..validate import KernelLabArgumentError
from ..vector_loads import load4
from ..device.dp4a import EVEN_BYTES, ODD_BYTES, byte_perm
from .w4a8 import int4_halves_x16, launch_w4a8_gemm_words

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
def _frame(MTILES: int, NT: int, WR: int, WK: int):
    """What both forms do around the chunk loop: ``begin`` (this warp's weight tile, K-warp index,
    first chunk, rows and token rows; returns ``(wr, wk, lane, g, t, row0, tok0, chunks)``) and
    ``finish`` (the K-warps' partial sums added in shared memory in a fixed order, then the store)."""
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

    return begin, finish


@functools.cache
def kernel(NT: int, MTILES: int = 2, WR: int = 2, WK: int = 4, MINB: int = 0):
    """The kernel: every warp loads its own activation fragments (from L1/L2). ``NT`` tiles of
    8 activation rows, ``MTILES`` tiles of 16 weight rows a warp, ``WR x WK`` warps a block;
    ``MINB`` > 0 asks the compiler for registers enough for that many blocks an SM (launch bounds)."""
    _, load_weights, unpack, split_bytes, tile_mma, _, _ = _parts(MTILES, NT)
    begin, finish = _frame(MTILES, NT, WR, WK)
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
def kernel_tokens_inner(NT: int, MTILES: int = 1, WR: int = 2, WK: int = 4, MINB: int = 0):
    """The same tiles as :func:`kernel`, with the chunk's loop turned: all ``NT`` token tiles'
    activation loads are issued together (one trip to L2 a chunk, not ``NT`` one after another),
    then the four ``mma`` steps run outermost, each over every (weight tile, token tile) pair, so
    that ``MTILES x NT`` independent accumulator chains hide the instruction's latency (the direct
    form has ``MTILES`` chains of four dependent steps at a time). It holds every token tile's
    activation bytes and int32 sums at once: registers for ``8 NT + 4 MTILES NT`` more words (what
    limits it at M = 64, and the forms tried on top of it: the module's docstring)."""
    _, load_weights, unpack, _, _, _, _ = _parts(MTILES, NT)
    begin, finish = _frame(MTILES, NT, WR, WK)
    NACC = MTILES * NT * 4

    @cuda.jit(launch_bounds=(32 * WR * WK, MINB) if MINB else None)
    def w4a8_mma_tokens_inner(a32, a_scale, w32, w_scales, out):
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
        c = uint64(wk)
        while c < uint64(chunks):
            load_weights(w32, w_scales, wrow, wmul, c, t, pw, sc)
            for nt in range(NT):  # every load of the chunk in flight before the first use
                x[nt, 0], x[nt, 1], x[nt, 2], x[nt, 3] = load4(a32, (arow[nt], uint64(32) * c + acol))
                x[nt, 4], x[nt, 5], x[nt, 6], x[nt, 7] = load4(a32, (arow[nt], uint64(32) * c + acol + uint64(4)))
            unpack(pw, lo, hi)
            for nt in range(NT):  # in place: words 2j, 2j + 1 become octet j's even and odd bytes
                for j in range(4):
                    even = byte_perm(x[nt, 2 * j], x[nt, 2 * j + 1], EVEN_BYTES)
                    x[nt, 2 * j + 1] = byte_perm(x[nt, 2 * j], x[nt, 2 * j + 1], ODD_BYTES)
                    x[nt, 2 * j] = even
            for i in range(NACC):
                d[i] = int32(0)
            for j in range(4):  # step j of every chain, then step j + 1: the chains interleave
                for mt in range(MTILES):
                    for nt in range(NT):
                        b = (mt * NT + nt) * 4
                        d[b], d[b + 1], d[b + 2], d[b + 3] = mma_s8(lo[mt, 0, j], lo[mt, 1, j], hi[mt, 0, j],
                                                                    hi[mt, 1, j], x[nt, 2 * j], x[nt, 2 * j + 1],
                                                                    d[b], d[b + 1], d[b + 2], d[b + 3])
            for mt in range(MTILES):  # each chain's exact int32 sum, scaled by its group's scale / 16
                for nt in range(NT):
                    b = (mt * NT + nt) * 4
                    acc[b] += float32(d[b]) * sc[mt, 0]
                    acc[b + 1] += float32(d[b + 1]) * sc[mt, 0]
                    acc[b + 2] += float32(d[b + 2]) * sc[mt, 1]
                    acc[b + 3] += float32(d[b + 3]) * sc[mt, 1]
            c += uint64(WK)
        finish(acc, a_scale, out, wr, wk, lane, g, t, row0, tok0)

    return w4a8_mma_tokens_inner


PARAMS = {"NT", "MTILES", "WR", "WK", "MINB", "form"}  # what launch_w4a8_mma's params may name

FORMS = {"direct": kernel, "tokens-inner": kernel_tokens_inner}  # the same arguments, the same launch


def _multiprocessors() -> int:
    """This GPU's SM count (132 in the simulator: the H100 and H200 the rule below was measured on)."""
    if on_simulator():
        return 132
    return cuda.get_current_device().MULTIPROCESSOR_COUNT


def choose(m: int, n: int, sms: int | None = None) -> dict:
    """Tiles for ``m`` activation rows and ``n`` weight rows on a GPU of ``sms`` multiprocessors
    (this one's by default): the probe's winners (scripts/probes/w4a8_variants.py) on an H100 and an
    H200 (132 SMs each), on 14336 x 4096, 8192 x 8192 and 4096 x 4096 layers, as one rule about the
    number of blocks.

    Up to 16 rows (one or two token tiles): 16 weight rows a warp, the direct form, 8 warps a block;
    two weight warps a block (K split four ways) when that still gives 3 blocks an SM or more (14336
    rows: 448 blocks), else one (K split eight ways: 8192 rows, 512 blocks, took 18.0 us at M = 16
    on an H200 where two weight warps, 256 blocks, took 20.4 us). Above 16 rows every block reads all
    of its token tiles' activations from L2, so blocks take as many weight rows as possible (32 a
    warp, the tokens-inner form) while the grid still fills the GPU: 4 weight warps (128 rows) when
    that gives at least 0.8 blocks an SM (14336 rows: 112 blocks), else 2 (8192 rows: 128 blocks of
    64 rows took 35.5 us at M = 64 where 64 blocks of 128 took 53.8 us), else 1 (the direct form,
    K split eight ways: 4096 rows)."""
    sms = _multiprocessors() if sms is None else sms
    nt = min(MAX_NT, -(-m // 8))
    if m <= 16:
        wr = 2 if n / 32 >= 3 * sms else 1
        return dict(NT=nt, MTILES=1, WR=wr, WK=8 // wr)
    wr = next((w for w in (4, 2) if n / (32 * w) >= 0.8 * sms), 1)
    return dict(NT=nt, MTILES=2, WR=wr, WK=8 // wr, form="tokens-inner" if wr > 1 else "direct")


def launch_w4a8_mma(out, a32, a_scale, w32, w_scales, **params):
    """W4A8 on the int8 tensor cores; the same arguments as ``w4a8.launch_w4a8_gemm``.

    ``params`` override :func:`choose`'s ``NT``, ``MTILES``, ``WR``, ``WK``, ``MINB`` (launch
    bounds) and ``form`` (a key of ``FORMS``: "direct", :func:`kernel`, or "tokens-inner",
    :func:`kernel_tokens_inner`); any other name is an error. Rows whose packed length is not a
    whole number of 128-value groups (16 words), and GPUs older than compute capability 8.0, take
    the DP4A kernel (``w4a8.launch_w4a8_gemm_words``)."""
    m, n = out.shape
    unknown = sorted(set(params) - PARAMS)
    if unknown:
        raise KernelLabArgumentError(f"unknown parameter(s) {unknown}: launch_w4a8_mma takes {sorted(PARAMS)}")
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
    grid = (-(-n // (16 * p["MTILES"] * p["WR"])), -(-m // (8 * p["NT"])))
    k = FORMS[form](p["NT"], p["MTILES"], p["WR"], p["WK"], p.get("MINB", 0))
    k[grid, 32 * p["WR"] * p["WK"]](a32, a_scale, w32, w_scales, out)


def launch_w4a8_fast(out, a32, a_scale, w32, w_scales):
    """The package's W4A8. One activation row: the words-outer DP4A form with two weight rows a warp
    (65% of the copy roofline on a 14336 x 4096 layer on an H100, a little ahead of the tensor
    cores there). More: the int8 tensor cores (:func:`launch_w4a8_mma`: 61-64% at M = 2 to 8,
    where the DP4A form falls from 62% to 35%); the tensor-core launcher itself hands rows that are
    not whole groups of 128, and GPUs without int8 ``mma``, back to the DP4A form."""
    if out.shape[0] == 1:
        return launch_w4a8_gemm_words(out, a32, a_scale, w32, w_scales)
    return launch_w4a8_mma(out, a32, a_scale, w32, w_scales)


def tensor_cores_available() -> bool:
    """``mma.sync.m16n8k32`` on int8 needs compute capability 8.0 (the simulator runs it anyway)."""
    if on_simulator():
        return True
    return tuple(cuda.get_current_device().compute_capability) >= (8, 0)
