"""The fused attention forward with ``mma.sync`` in registers: FlashAttention-2's structure in Numba.

Notebook 04.4's kernel hands both products to cuBLASDx's block-level ``Matmul``, which reads its
operands from shared memory and leaves its result in a fragment whose layout the kernel does not
control; so ``S`` makes a round trip through shared memory, the row update runs on one thread per
row between two barriers, and ``P`` makes another. This kernel is what FlashAttention-2 does
instead, with the warp-level instructions of :mod:`kernel_lab.mma_ptx`:

* each warp owns ``16 * m_tiles`` query rows (two m-tiles by default: every K or V fragment it loads
  then serves two ``mma``); ``Q``'s A fragments either stay in registers for the whole kernel
  (loaded once from global memory, when they fit in 32 registers) or stay in shared memory and
  ``ldmatrix`` brings each k-step's (head_dim 128 with two m-tiles);
* ``S = Q K^T`` is ``mma.m16n8k16`` with K's fragments read by ``ldmatrix`` (K stored ``[key, d]``
  is ``K^T`` stored column-major: no transpose);
* the softmax runs on the ``S`` fragment in registers (``fragment_softmax_two_chains``: notebook 04.4's
  second exercise, each row's max and sum in two independent chains): a lane holds two rows (``g`` and ``g + 8``), so a row's max is its lane's max combined
  over the four lanes of its quad (two shuffles); the row sums stay per lane until the end;
* the C fragment of ``m16n8`` has exactly the A fragment's layout of ``m16n8k16``, so ``P`` goes from
  float32 registers to packed fp16 (or bf16) registers and into the second product with no data
  movement at all; V's fragments come from ``ldmatrix.trans``;
* K and V tiles arrive by ``cp.async`` into a swizzled layout (16-byte chunk ``c`` of row ``r`` at
  chunk ``c ^ (r % 8)``, so ``ldmatrix``'s eight rows hit eight different bank groups), two stages
  each: one barrier per key block, the next block in flight during this one;
* every shared-memory address is a base plus a compile-time constant plus one of four per-lane
  offsets that carry the swizzle, so each ``ldmatrix`` is ``[register + immediate]``: computing them
  from element indices cost a third of the time (scripts/probes/flash_attention.py);
* softmax in base 2 (``exp2(s * scale * log2 e - m)``, one FFMA and one MUFU.EX2 per score), the mask
  only in blocks that cross ``kv_len`` or the diagonal, the accumulator's rescale skipped when no
  row's max moved, and the queries' blocks launched heaviest first when causal.

Input fp16 or bf16 ``[batch, heads, seq, head_dim]`` (C-contiguous), output float32 ``o`` and ``lse``
(natural log), the same interface and masks as ``tensor_core.TensorCoreAttention``: key ``j`` of
query ``i`` counts if ``j < kv_lens[b]`` and (not causal or ``j <= i``).

Masks follow :mod:`kernel_lab.attention.reference`: keys ``j < kv_lens[b]`` (checked by every
launcher, ``lengths``), causal with the top-left alignment of PyTorch's ``is_causal`` (``j <= i``),
and a query row with no valid key gets ``O = 0`` and ``lse = -inf`` (SDPA gives NaN there).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..environment import on_simulator

from numba import cuda, float32, int32, int64, uint16, uint32  # noqa: E402  (kernel_lab chose GPU or simulator)

from .. import mma_ptx as ptx  # noqa: E402
from .lengths import kv_lens_on_device  # noqa: E402

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def fragment_softmax_two_chains():
    """The online-softmax step on one block's S fragment, as a Numba device function: notebook 04.4's
    second exercise (``fragment_softmax``), with each row's max and each row's sum of ``p`` kept in
    two independent chains (each step of one chain waits for the one before: two chains, half the
    wait). The kernel's default; :class:`FlashAttention` takes the learner's through ``softmax=``.

    ``m0, m1, l0, l1 = fragment_softmax_two_chains(s, acc, m0, m1, l0, l1, scale_log2)``: ``s`` holds
    this lane's ``4 * n_tiles`` raw scores ``q.k`` of one key block (masked ones are ``-inf``), in
    the C-fragment layout of ``mma.m16n8``: ``s[4 nt + 0..1]`` are row ``g``'s keys ``8 nt + 2t, + 1``,
    ``s[4 nt + 2..3]`` row ``g + 8``'s. ``m0, m1`` are the running maxima of the raw scores of rows
    ``g`` and ``g + 8`` (the whole row's: the four lanes of a quad agree on them), ``l0, l1`` this lane's
    part of the normalisers. It turns ``s`` into ``p = 2^(s * scale_log2 - m * scale_log2)`` with the new
    maxima, rescales ``acc`` (the O fragment, same row layout) and ``l`` by ``alpha = 2^((m_old - m_new) *
    scale_log2)``, and returns the new ``m0, m1, l0, l1``.
    """
    NEG_INF = float32(-math.inf)

    @cuda.jit(device=True, inline="always")
    def fragment_softmax_two_chains(s, acc, m0, m1, l0, l1, scale_log2):
        nt_count = len(s) // 4
        mx0, mx0b = m0, s[0]  # this lane's max of each row, in two independent chains
        mx1, mx1b = m1, s[2]  # (each step waits for the one before: two chains, half the wait)
        for nt in range(nt_count):
            mx0 = max(mx0, s[nt * 4 + 1])
            mx1 = max(mx1, s[nt * 4 + 3])
            if nt > 0:
                mx0b = max(mx0b, s[nt * 4])
                mx1b = max(mx1b, s[nt * 4 + 2])
        mx0 = max(mx0, mx0b)
        mx1 = max(mx1, mx1b)
        mx0 = max(mx0, cuda.shfl_xor_sync(0xFFFFFFFF, mx0, 1))  # ... then over the row's four lanes
        mx1 = max(mx1, cuda.shfl_xor_sync(0xFFFFFFFF, mx1, 1))
        mx0 = max(mx0, cuda.shfl_xor_sync(0xFFFFFFFF, mx0, 2))
        mx1 = max(mx1, cuda.shfl_xor_sync(0xFFFFFFFF, mx1, 2))
        # a row with no key yet keeps max -inf: subtract 0 instead, so p = 0 rather than NaN
        sub0 = float32(0) if mx0 == NEG_INF else mx0 * scale_log2
        sub1 = float32(0) if mx1 == NEG_INF else mx1 * scale_log2
        alpha0 = ptx.exp2_approx(m0 * scale_log2 - sub0)
        alpha1 = ptx.exp2_approx(m1 * scale_log2 - sub1)
        sum0, sum0b, sum1, sum1b = float32(0), float32(0), float32(0), float32(0)
        for nt in range(nt_count):  # p = 2^(s * scale * log2 e - max): one FFMA and one MUFU.EX2
            s[nt * 4] = ptx.exp2_approx(s[nt * 4] * scale_log2 - sub0)
            s[nt * 4 + 1] = ptx.exp2_approx(s[nt * 4 + 1] * scale_log2 - sub0)
            s[nt * 4 + 2] = ptx.exp2_approx(s[nt * 4 + 2] * scale_log2 - sub1)
            s[nt * 4 + 3] = ptx.exp2_approx(s[nt * 4 + 3] * scale_log2 - sub1)
            sum0 += s[nt * 4]
            sum0b += s[nt * 4 + 1]
            sum1 += s[nt * 4 + 2]
            sum1b += s[nt * 4 + 3]
        sum0 += sum0b
        sum1 += sum1b
        # Once the running max settles, alpha is exactly 1 in every row of the warp: skip the
        # rescale of the accumulator (a warp-uniform branch) rather than multiply by one.
        if cuda.any_sync(0xFFFFFFFF, alpha0 != 1 or alpha1 != 1):
            for x in range(len(acc) // 4):
                acc[x * 4] *= alpha0
                acc[x * 4 + 1] *= alpha0
                acc[x * 4 + 2] *= alpha1
                acc[x * 4 + 3] *= alpha1
        return mx0, mx1, l0 * alpha0 + sum0, l1 * alpha1 + sum1

    return fragment_softmax_two_chains


@functools.lru_cache(maxsize=None)
def tile_helpers(head_dim: int, threads: int):
    """The shared-memory layout both mma.sync kernels use (this forward and ``flash_backward``), as
    device functions ``(swizzled, load_rows, a_offset, lane_offsets)``:

    * ``swizzled(row, chunk, width)``: the element index of 16-byte chunk ``chunk`` of row ``row`` in
      a tile of rows of ``width`` 16-bit elements, the chunk XOR-swizzled by ``row % 8`` so that
      ``ldmatrix``'s eight rows hit eight different bank groups;
    * ``load_rows(dst, src, src_any, j0, valid, copies)``: this thread's ``copies`` 16-byte
      ``cp.async`` of rows ``threads / (head_dim / 8)`` apart, from global byte address ``src`` (row
      ``j0`` of its first copy) to shared ``dst``; a row at or past ``valid`` is zero-filled (source
      size 0, from the valid address ``src_any``), so no product meets what lies beyond;
    * ``a_offset(lane, q)``: the byte offset, from a tile's row 0, of the row and swizzled chunk this
      lane points ``ldmatrix`` at for an A operand (and a transposed B), at k-steps ``4 n + q``;
    * ``lane_offsets(koff, aoff, lane)``: the four offsets of each kind a lane keeps, ``koff`` for a B
      operand stored n-major (K for ``Q Kᵀ``). Every ``ldmatrix`` address is then a base plus one of
      them plus a compile-time constant (the instruction's immediate offset).
    """
    D = head_dim
    CH = D // 8  # 16-byte chunks per row
    RSTEP = threads // CH  # rows between one thread's copies (its chunk column stays the same)
    ROW = 2 * D  # bytes of a row
    QUADS = min(4, D // 16)

    @cuda.jit(device=True, inline="always")
    def swizzled(row, chunk, width):
        return row * width + ((chunk ^ (row & 7)) << 3)

    @cuda.jit(device=True, inline="always")
    def load_rows(dst, src, src_any, j0, valid, copies):
        for x in range(copies):
            ok = j0 + x * RSTEP < valid
            ptx.cp_async16_at(dst + x * RSTEP * ROW, src + x * RSTEP * ROW if ok else src_any, 16 if ok else 0)

    @cuda.jit(device=True, inline="always")
    def a_offset(lane, q):  # lane i: row i % 8 (+ 8 for tiles 1 and 3), chunk 2q (+ 1 for tiles 2 and 3)
        x7 = lane & 7
        return (x7 + (((lane >> 3) & 1) << 3)) * ROW + (((2 * q + (lane >> 4)) ^ x7) << 4)

    @cuda.jit(device=True, inline="always")
    def lane_offsets(koff, aoff, lane):
        x7 = lane & 7
        for q in range(QUADS):  # K^T: row i % 8 (+ 8 for tiles 2 and 3), chunk 2q (+ 1 for tiles 1 and 3)
            koff[q] = (x7 + ((lane >> 4) << 3)) * ROW + (((2 * q + ((lane >> 3) & 1)) ^ x7) << 4)
            aoff[q] = a_offset(lane, q)

    return swizzled, load_rows, a_offset, lane_offsets


@functools.lru_cache(maxsize=None)
def _build(head_dim: int, block_n: int, warps: int, m_tiles: int, precision: str, min_blocks: int = 1,
           q_smem: bool = False, softmax=None):
    D, BN, W, MT = head_dim, block_n, warps, m_tiles
    NT, BM = 32 * W, 16 * W * MT  # threads; queries of a block (each warp: MT tiles of 16 rows)
    CH = D // 8  # 16-byte chunks per row
    KT, NTILES, DT = D // 16, BN // 8, D // 8  # k-steps of Q K^T, n-tiles of S, n-tiles of O
    QREGS, SREGS, OREGS = KT * 4, NTILES * 4, DT * 4  # registers of one m-tile's Q, S and O fragments
    Q_IN_REGISTERS = not q_smem and MT * QREGS <= 32  # else Q stays in shared memory, ldmatrix brings each k-step
    TILE = BN * D
    Q0 = 0  # shared memory, in 16-bit elements: the Q tile (if there), K's two stages, V's two stages
    K0 = 0 if Q_IN_REGISTERS else BM * D
    V0 = K0 + 2 * TILE
    LOADS = BN * CH // NT  # 16-byte copies per thread per K or V tile
    Q_LOADS = BM * CH // NT
    mma = ptx.mma_bf16 if precision == "bfloat16" else ptx.mma_f16
    pack = ptx.pack_bf16x2 if precision == "bfloat16" else ptx.pack_f16x2
    update = softmax or fragment_softmax_two_chains()
    NEG_INF = float32(-math.inf)

    ROW = 2 * D  # bytes of a tile row
    swizzled, load_rows, _, lane_offsets = tile_helpers(D, NT)

    @cuda.jit(device=True, inline="always")
    def qk(sa, sb, qa, qaddr, kaddr, koff, aoff):
        # sa (and sb, the warp's second m-tile) = Q K^T for one key block: raw scores. Each K fragment
        # from ldmatrix serves every m-tile of the warp. Addresses: a base plus a constant (the
        # instruction's immediate offset) plus one of four per-lane offsets that carry the swizzle.
        for x in range(SREGS):
            sa[x] = float32(0)
            sb[x] = float32(0)
        for kk in range(KT):
            if Q_IN_REGISTERS:
                a0, a1, a2, a3 = qa[kk * 4], qa[kk * 4 + 1], qa[kk * 4 + 2], qa[kk * 4 + 3]
                e = QREGS + kk * 4 if MT == 2 else kk * 4
                c0, c1, c2, c3 = qa[e], qa[e + 1], qa[e + 2], qa[e + 3]
            else:
                q_at = qaddr + aoff[kk % 4] + (kk // 4) * 128
                a0, a1, a2, a3 = ptx.ldmatrix_x4_at(q_at)
                c0, c1, c2, c3 = a0, a1, a2, a3
                if MT == 2:
                    c0, c1, c2, c3 = ptx.ldmatrix_x4_at(q_at + 16 * ROW)
            for np2 in range(NTILES // 2):
                b0, b1, b2, b3 = ptx.ldmatrix_x4_at(kaddr + koff[kk % 4] + np2 * 16 * ROW + (kk // 4) * 128)
                n0, n1 = np2 * 8, np2 * 8 + 4
                sa[n0], sa[n0 + 1], sa[n0 + 2], sa[n0 + 3] = mma(
                    a0, a1, a2, a3, b0, b1, sa[n0], sa[n0 + 1], sa[n0 + 2], sa[n0 + 3])
                sa[n1], sa[n1 + 1], sa[n1 + 2], sa[n1 + 3] = mma(
                    a0, a1, a2, a3, b2, b3, sa[n1], sa[n1 + 1], sa[n1 + 2], sa[n1 + 3])
                if MT == 2:
                    sb[n0], sb[n0 + 1], sb[n0 + 2], sb[n0 + 3] = mma(
                        c0, c1, c2, c3, b0, b1, sb[n0], sb[n0 + 1], sb[n0 + 2], sb[n0 + 3])
                    sb[n1], sb[n1 + 1], sb[n1 + 2], sb[n1 + 3] = mma(
                        c0, c1, c2, c3, b2, b3, sb[n1], sb[n1 + 1], sb[n1 + 2], sb[n1 + 3])

    @cuda.jit(device=True, inline="always")
    def mask(s, j0, kv_len, causal, row0, row1, t):  # -inf where key j does not count for the row
        for nt in range(NTILES):
            for e in range(4):
                j = j0 + nt * 8 + 2 * t + (e & 1)
                i = row0 if e < 2 else row1
                if j >= kv_len or (causal and j > i):
                    s[nt * 4 + e] = NEG_INF

    @cuda.jit(device=True, inline="always")
    def pv(acca, accb, sa, sb, vaddr, aoff):
        # acc += P V, P = s rounded to 16 bits straight from the registers (the C fragment of m16n8 is
        # the A fragment of m16n8k16); each V fragment serves every m-tile of the warp
        for kt in range(NTILES // 2):  # P's k-steps: keys kt*16 .. kt*16+15 = S's n-tiles 2kt, 2kt+1
            e0, e1 = kt * 8, kt * 8 + 4
            p0, p1 = pack(sa[e0], sa[e0 + 1]), pack(sa[e0 + 2], sa[e0 + 3])
            p2, p3 = pack(sa[e1], sa[e1 + 1]), pack(sa[e1 + 2], sa[e1 + 3])
            r0, r1 = pack(sb[e0], sb[e0 + 1]), pack(sb[e0 + 2], sb[e0 + 3])
            r2, r3 = pack(sb[e1], sb[e1 + 1]), pack(sb[e1 + 2], sb[e1 + 3])
            for dp in range(DT // 2):
                b0, b1, b2, b3 = ptx.ldmatrix_x4_trans_at(vaddr + aoff[dp % 4] + kt * 16 * ROW + (dp // 4) * 128)
                c0, c1 = dp * 8, dp * 8 + 4
                acca[c0], acca[c0 + 1], acca[c0 + 2], acca[c0 + 3] = mma(
                    p0, p1, p2, p3, b0, b1, acca[c0], acca[c0 + 1], acca[c0 + 2], acca[c0 + 3])
                acca[c1], acca[c1 + 1], acca[c1 + 2], acca[c1 + 3] = mma(
                    p0, p1, p2, p3, b2, b3, acca[c1], acca[c1 + 1], acca[c1 + 2], acca[c1 + 3])
                if MT == 2:
                    accb[c0], accb[c0 + 1], accb[c0 + 2], accb[c0 + 3] = mma(
                        r0, r1, r2, r3, b0, b1, accb[c0], accb[c0 + 1], accb[c0 + 2], accb[c0 + 3])
                    accb[c1], accb[c1 + 1], accb[c1 + 2], accb[c1 + 3] = mma(
                        r0, r1, r2, r3, b2, b3, accb[c1], accb[c1 + 1], accb[c1 + 2], accb[c1 + 3])

    @cuda.jit(device=True, inline="always")
    def store(o, lse, acc, m0, m1, l0, l1, b, h, row0, n, t, scale):
        l0 += cuda.shfl_xor_sync(0xFFFFFFFF, l0, 1)  # the row's normaliser: its four lanes' parts
        l1 += cuda.shfl_xor_sync(0xFFFFFFFF, l1, 1)
        l0 += cuda.shfl_xor_sync(0xFFFFFFFF, l0, 2)
        l1 += cuda.shfl_xor_sync(0xFFFFFFFF, l1, 2)
        inv0 = float32(1) / l0 if l0 > 0 else float32(0)
        inv1 = float32(1) / l1 if l1 > 0 else float32(0)
        row1 = row0 + 8
        for dt in range(DT):
            col = dt * 8 + 2 * t
            if row0 < n:
                o[b, h, row0, col] = acc[dt * 4] * inv0
                o[b, h, row0, col + 1] = acc[dt * 4 + 1] * inv0
            if row1 < n:
                o[b, h, row1, col] = acc[dt * 4 + 2] * inv1
                o[b, h, row1, col + 1] = acc[dt * 4 + 3] * inv1
        if t == 0:
            if row0 < n:
                lse[b, h, row0] = m0 * scale + math.log(l0) if l0 > 0 else NEG_INF
            if row1 < n:
                lse[b, h, row1] = m1 * scale + math.log(l1) if l1 > 0 else NEG_INF

    def kernel(o, lse, qw, qf, kf, vf, keys, kv_lens, causal, scale_log2):
        # qf, kf, vf: Q, K and V flattened ([batch, heads, seq, head_dim] in C order), for the
        # 16-byte copies; qw: Q as 32-bit words, for the fragments loaded straight into registers
        smem = cuda.shared.array(0, uint16)  # dynamic: Q (if there), then K's and V's two stages each
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        heads = qw.shape[1]
        b, h = cuda.blockIdx.y // heads, cuda.blockIdx.y % heads
        n = qw.shape[2]
        head_base = (b * heads + h) * keys * D  # element index of k[b, h, 0, 0] in the flat k and v
        # heaviest (causal: last) query blocks first, so the short ones fill the last wave
        q0 = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * BM
        qrow0 = warp * 16 * MT  # this warp's first row within the block
        ra = q0 + qrow0 + g  # rows of the lane: ra, ra + 8 (first m-tile), rb, rb + 8 (second)
        rb = ra + 16
        kv_len = min(kv_lens[b], keys)
        k_end = min(kv_len, q0 + BM) if causal else kv_len
        blocks = (k_end + BN - 1) // BN

        # shared-memory byte addresses: the block's window, the lane's ldmatrix offsets, the thread's copies
        sbase = ptx.shared_address(smem, 0)
        koff = cuda.local.array(4, int32)
        aoff = cuda.local.array(4, int32)
        lane_offsets(koff, aoff, lane)
        r0, c = tid // CH, tid % CH
        dst0 = 2 * swizzled(r0, c, D)  # this thread's copies land at dst0 + x * RSTEP rows of a tile
        k_any = int64(ptx.global_address(kf, head_base))
        v_any = int64(ptx.global_address(vf, head_base))
        k_src = k_any + 2 * (r0 * D + c * 8)
        v_src = v_any + 2 * (r0 * D + c * 8)

        qa = cuda.local.array(32, uint32)  # Q's A fragments when they live in registers (all k-steps)
        if Q_IN_REGISTERS:
            for mt in range(MT):
                r = ra + 16 * mt
                for kk in range(KT):
                    for half in range(2):
                        col = kk * 8 + half * 4 + t  # word (two values) index along head_dim
                        qa[mt * QREGS + kk * 4 + half * 2] = qw[b, h, r, col] if r < n else uint32(0)
                        qa[mt * QREGS + kk * 4 + half * 2 + 1] = qw[b, h, r + 8, col] if r + 8 < n else uint32(0)
        else:
            q_any = int64(ptx.global_address(qf, (b * heads + h) * n * D))
            q_src = q_any + 2 * ((q0 + r0) * D + c * 8)
            load_rows(sbase + 2 * Q0 + dst0, q_src, q_any, q0 + r0, n, Q_LOADS)
        acca = cuda.local.array(OREGS, float32)
        accb = cuda.local.array(OREGS, float32)
        for x in range(OREGS):
            acca[x] = float32(0)
            accb[x] = float32(0)
        sa = cuda.local.array(SREGS, float32)
        sb = cuda.local.array(SREGS, float32)
        m0a, m1a, m0b, m1b = NEG_INF, NEG_INF, NEG_INF, NEG_INF  # running max of the raw scores of each row
        l0a, l1a, l0b, l1b = float32(0), float32(0), float32(0), float32(0)  # this lane's part of the normalisers
        qaddr = sbase + 2 * Q0 + qrow0 * ROW

        if blocks > 0:
            load_rows(sbase + 2 * K0 + dst0, k_src, k_any, r0, kv_len, LOADS)
            load_rows(sbase + 2 * V0 + dst0, v_src, v_any, r0, kv_len, LOADS)
        ptx.cp_async_commit()
        for jb in range(blocks):
            j0 = jb * BN
            cur = (jb & 1) * (2 * TILE)  # bytes: this block's stage
            # One barrier a block. After it, block j's K and V are in (for every thread), and every
            # warp is done with block j - 1, whose stages now receive block j + 1.
            ptx.cp_async_wait_all()
            cuda.syncthreads()
            if jb + 1 < blocks:
                nxt = 2 * TILE - cur
                step = (j0 + BN) * ROW
                load_rows(sbase + 2 * K0 + nxt + dst0, k_src + step, k_any, j0 + BN + r0, kv_len, LOADS)
                load_rows(sbase + 2 * V0 + nxt + dst0, v_src + step, v_any, j0 + BN + r0, kv_len, LOADS)
            ptx.cp_async_commit()
            qk(sa, sb, qa, qaddr, sbase + 2 * K0 + cur, koff, aoff)
            # the mask only in a block that crosses kv_len or (causal) the tile's diagonal: a branch of
            # its own, so the other blocks do not pay its compares
            if j0 + BN > kv_len or (causal and j0 + BN - 1 > ra - g):
                mask(sa, j0, kv_len, causal, ra, ra + 8, t)
            m0a, m1a, l0a, l1a = update(sa, acca, m0a, m1a, l0a, l1a, scale_log2)
            if MT == 2:
                if j0 + BN > kv_len or (causal and j0 + BN - 1 > rb - g):
                    mask(sb, j0, kv_len, causal, rb, rb + 8, t)
                m0b, m1b, l0b, l1b = update(sb, accb, m0b, m1b, l0b, l1b, scale_log2)
            pv(acca, accb, sa, sb, sbase + 2 * V0 + cur, aoff)
        ptx.cp_async_wait_all()  # (a block with no keys still issued its Q copies)

        scale = scale_log2 * float32(LN2)
        store(o, lse, acca, m0a, m1a, l0a, l1a, b, h, ra, n, t, scale)
        if MT == 2:
            store(o, lse, accb, m0b, m1b, l0b, l1b, b, h, rb, n, t, scale)

    smem_bytes = 2 * (V0 + 2 * TILE)
    return cuda.jit(kernel, launch_bounds=(NT, min_blocks)), smem_bytes


def require_mma_gpu(what: str) -> None:
    """A clear error on a GPU older than Ampere: ``mma.sync.m16n8k16`` with fp16 or bf16 operands,
    ``cp.async`` and ``ldmatrix`` all need compute capability 8.0 (the simulator runs them anyway)."""
    if on_simulator():
        return
    try:
        cc = cuda.get_current_device().compute_capability
    except Exception:  # no device at all (compiling offline): the launch, not this, would fail
        return
    if tuple(cc) < (8, 0):
        raise RuntimeError(f"{what} needs a GPU of compute capability 8.0 or newer (mma.sync.m16n8k16, cp.async); "
                           f"this one is {cc[0]}.{cc[1]}")


def _on_device(x, name):
    """A Numba device array (a view: no copy) of a Numba, CuPy or PyTorch GPU array."""
    from numba import cuda

    if hasattr(x, "copy_to_host"):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return cuda.as_cuda_array(x)
    raise ValueError(f"{name} must be an array on the GPU (Numba, CuPy or PyTorch), got {type(x).__name__}: "
                     "copy it with cuda.to_device(...)")


class FlashAttention:
    """``o, lse = attention(q, k, v)`` with ``mma.sync`` (see the module docstring): fp16 or bf16
    ``q, k, v`` ``[batch, heads, seq, head_dim]`` in, float32 ``o`` and ``lse`` out. Blocks of
    ``16 * warps`` queries and ``block_n`` keys."""

    def __init__(self, head_dim: int = 128, block_n: int = 64, warps: int = 4, m_tiles: int = 2,
                 precision: str = "float16", min_blocks: int = 1, q_smem: bool = False, softmax=None):
        if head_dim not in (64, 128):
            raise ValueError(f"head_dim must be 64 or 128, got {head_dim}")
        if block_n not in (16, 32, 64, 128):
            raise ValueError(f"block_n must be 16, 32, 64 or 128, got {block_n}")
        if m_tiles not in (1, 2):
            raise ValueError(f"m_tiles (16-row tiles of queries per warp) must be 1 or 2, got {m_tiles}")
        if 32 * warps < head_dim:  # a thread's copies must be a multiple of 8 rows apart (the swizzle's period)
            raise ValueError(f"head_dim {head_dim} needs at least {head_dim // 32} warps, got {warps}")
        if (block_n * head_dim // 8) % (32 * warps):
            raise ValueError(f"{warps} warps cannot share a {block_n} x {head_dim} tile's 16-byte copies evenly")
        if precision not in ("float16", "bfloat16"):
            raise ValueError(f"precision must be float16 or bfloat16, got {precision!r}")
        require_mma_gpu("FlashAttention")
        self.head_dim, self.block_n, self.warps, self.m_tiles, self.precision = head_dim, block_n, warps, m_tiles, precision
        self.block_m, self.threads, self.min_blocks, self.q_smem = 16 * warps * m_tiles, 32 * warps, min_blocks, q_smem
        self.dispatcher, self.smem_bytes = _build(head_dim, block_n, warps, m_tiles, precision, min_blocks,
                                                  bool(q_smem), softmax)
        self._opted_in = False

    def label(self) -> str:
        return (f"mma.sync, {self.precision}, head_dim {self.head_dim}, blocks {self.block_m}x{self.block_n}, "
                f"{self.warps} warps of {16 * self.m_tiles} rows")

    def argument_types(self):
        """The Numba types of a launch (for compiling without a GPU)."""
        from numba import types

        f32 = types.float32
        u16 = types.Array(types.uint16, 1, "C")
        return (types.Array(f32, 4, "C"), types.Array(f32, 3, "C"), types.Array(types.uint32, 4, "C"), u16, u16, u16,
                types.int64, types.Array(types.int32, 1, "C"), types.boolean, f32)

    def _args(self, o, lse, q, k, v, kv_lens, causal, scale):
        q, k, v, o, lse = (_on_device(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (lse, "lse")))
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim != 4 or x.shape[3] != self.head_dim or np.dtype(x.dtype).itemsize != 2:
                raise ValueError(f"{name} must be a 16-bit [batch, heads, seq, {self.head_dim}] array, got "
                                 f"{x.dtype} {tuple(x.shape)}")
            if not x.is_c_contiguous():
                raise ValueError(f"{name} must be C-contiguous (its rows are copied 16 bytes at a time)")
        if k.shape != v.shape or k.shape[:2] != q.shape[:2]:
            raise ValueError(f"k and v must share q's batch and heads and each other's shape: q {tuple(q.shape)}, "
                             f"k {tuple(k.shape)}, v {tuple(v.shape)}")
        if np.dtype(o.dtype) != np.float32 or tuple(o.shape) != tuple(q.shape):
            raise ValueError(f"o must be float32 of q's shape {tuple(q.shape)}, got {o.dtype} {tuple(o.shape)}")
        b, h, n, _ = q.shape
        kv_lens = kv_lens_on_device(kv_lens, b, k.shape[2])
        scale = 1.0 / math.sqrt(self.head_dim) if scale is None else scale
        if not scale > 0:
            raise ValueError(f"scale must be positive (the kernel takes the max of the raw scores), got {scale}")
        grid = (-(-n // self.block_m), b * h)
        flat = [x.view(np.uint16).reshape(x.size) for x in (q, k, v)]
        return grid, (o, lse, q.view(np.uint32), *flat, k.shape[2], kv_lens,
                      bool(causal), np.float32(scale * LOG2E))

    def _kernel(self, grid, args):
        if self.smem_bytes > 48 * 1024 and not self._opted_in and not on_simulator():
            from ..tensor_cores.toolchain import set_max_dynamic_shared_memory

            set_max_dynamic_shared_memory(self.dispatcher, args, self.smem_bytes)
            self._opted_in = True
        return self.dispatcher[grid, self.threads, 0, self.smem_bytes]

    def __call__(self, o, lse, q, k, v, kv_lens=None, causal=False, scale=None):
        grid, args = self._args(o, lse, q, k, v, kv_lens, causal, scale)
        self._kernel(grid, args)(*args)

    def launcher(self, o, lse, q, k, v, kv_lens=None, causal=False, scale=None):
        """A no-argument launch for ``kl.benchmark`` (arguments converted once, here)."""
        grid, args = self._args(o, lse, q, k, v, kv_lens, causal, scale)
        kern = self._kernel(grid, args)
        return lambda: kern(*args)


@functools.lru_cache(maxsize=None)
def _default(head_dim: int, precision: str) -> FlashAttention:
    return FlashAttention(head_dim=head_dim, precision=precision)


def flash_forward(o, lse, q, k, v, kv_lens=None, causal=False, scale=None):
    """The package's forward at its default blocks (128 queries, 64 keys, 4 warps of 32 rows: the
    best of scripts/probes/flash_attention.py on an H100 for head_dim 64 and 128), fp16 or bf16
    (``q.dtype``; a bf16 array from Numba or PyTorch may arrive as 16-bit integers: pass fp16 then)."""
    precision = "bfloat16" if "bfloat16" in str(getattr(q, "dtype", "")) else "float16"
    _default(int(q.shape[3]), precision)(o, lse, q, k, v, kv_lens, causal, scale)

