"""The attention backward with ``mma.sync`` in registers: FlashAttention-2's backward in Numba.

One block owns 128 keys of one head (eight warps of 16 keys; four warps and 64 keys is the other
choice) and walks every query block of 64 (in two halves of 32, to keep the registers in bounds),
with the five products per pair of blocks on ``mma.sync`` (see :mod:`kernel_lab.attention.flash` for
the fragment layouts):

* ``Sᵀ = K Qᵀ`` (A: the warp's K rows from shared memory, B: the Q tile), so the scores arrive with
  *keys* as rows: ``Pᵀ = 2^(Sᵀ · scale · log2 e - lse_i · log2 e)``, P recomputed from the saved
  log-sum-exp, is then already the A operand of ``dV += Pᵀ dO``;
* ``dPᵀ = V dOᵀ``, ``dSᵀ = Pᵀ ∘ (dPᵀ - D_i)`` with ``D_i = Σ_d dO_id O_id`` (a small kernel first),
  and ``dK += dSᵀ Q``, again with ``dSᵀ`` straight from registers;
* ``dQ += dS K`` needs dS with queries as rows: each warp writes its ``dSᵀ`` (fp16) to shared memory,
  and after a barrier every warp reads 16 query rows of it back with ``ldmatrix.trans`` and adds its
  products into ``dq`` (float32, zeroed first) with atomic adds: the one reduction across blocks.

dK and dV stay in registers for the whole walk and are written once (dK times ``scale``). The Q and
dO tiles, the queries' lse and ``D`` come by ``cp.async``, two stages. Inputs fp16 (or bf16)
``[batch, heads, seq, head_dim]``; ``o``, ``lse`` float32 from the forward; gradients float32. The
launch matches notebook 04.5's: ``(dq, dk, dv, q, k, v, o, lse, d_o, kv_lens, causal, scale)``.

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
from ..bitcast import bits_float  # noqa: E402
from .lengths import kv_lens_on_device  # noqa: E402
from .flash import LOG2E, _on_device, require_mma_gpu, tile_helpers  # noqa: E402

BQ, HALF = 64, 32  # queries per step, queries per half step (a block owns 16 keys per warp)


def fragment_grad_reference():
    """P and dS on the transposed fragment (notebook 04.5's second exercise; the package's copy).

    ``fragment_grad(s, dp, lse2, dlt, i0, j, t, kv_len, n, causal, masked, scale_log2)``: ``s`` holds
    this lane's raw scores of ``Sᵀ = K Qᵀ`` (keys are the rows): ``s[4 nt + e]`` is key ``j + 8 (e >> 1)``
    and query ``i0 + 8 nt + 2t + (e & 1)``; ``dp`` holds ``dPᵀ`` in the same layout; ``lse2[2 nt + (e & 1)]``
    is that query's log-sum-exp times log2(e), ``dlt[...]`` its ``D``. In place: ``s`` becomes
    ``P = 2^(s · scale_log2 − lse2)``, 0 where the key does not count for the query (only when
    ``masked``: the block crosses ``kv_len``, ``n`` or the diagonal), and ``dp`` becomes
    ``dS = P (dP − D)`` (the kernel applies the scale to dK and dQ).
    """

    @cuda.jit(device=True, inline="always")
    def fragment_grad(s, dp, lse2, dlt, i0, j, t, kv_len, n, causal, masked, scale_log2):
        for nt in range(len(s) // 4):
            for e in range(4):
                x = nt * 4 + e
                c = nt * 2 + (e & 1)
                p = ptx.exp2_approx(s[x] * scale_log2 - lse2[c])  # P recomputed from the saved lse
                if masked:
                    i = i0 + nt * 8 + 2 * t + (e & 1)
                    jj = j + 8 * (e >> 1)
                    if jj >= kv_len or i >= n or (causal and jj > i):
                        p = float32(0)
                s[x] = p
                dp[x] = p * (dp[x] - dlt[c])

    return fragment_grad


@functools.lru_cache(maxsize=None)
def _delta_kernel(bf16: bool):
    """``delta[b, h, i] = Σ_d dO[b, h, i, d] · O[b, h, i, d]``, one warp per row; ``d_o`` arrives as
    float16, or (``bf16``) as the 16-bit patterns of bfloat16 values: the top half of a float32's."""

    @cuda.jit
    def delta_kernel(delta, o, d_o):
        row = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        heads, n, d = o.shape[1], o.shape[2], o.shape[3]
        if row < o.shape[0] * heads * n:
            b, rest = row // (heads * n), row % (heads * n)
            h, i = rest // n, rest % n
            acc = float32(0)
            for c in range(lane, d, 32):
                x = d_o[b, h, i, c]
                acc += (bits_float(uint32(x) << 16) if bf16 else float32(x)) * o[b, h, i, c]
            for k in range(5):  # (a loop over a tuple of offsets trips NVVM: shifts instead)
                acc += cuda.shfl_xor_sync(0xFFFFFFFF, acc, 16 >> k)
            if lane == 0:
                delta[b, h, i] = acc

    return delta_kernel


@cuda.jit
def _zero_kernel(flat):
    i = cuda.grid(1)
    if i < flat.size:
        flat[i] = float32(0)


@functools.lru_cache(maxsize=None)
def _build(head_dim: int, precision: str, warps: int = 8, grad=None):
    W = warps
    NT, BN = 32 * W, 16 * W  # threads; keys of a block
    DQ_PAIRS = (head_dim // 16) // (W // 4)  # dQ: each warp's pairs of 8-column tiles (its m-tile is warp % 4)
    FR = 4 * (BN // 16)  # registers of dS's A fragments over the block's keys
    D = head_dim
    CH = D // 8  # 16-byte chunks of a K, V, Q or dO row
    KT, DT = D // 16, D // 8  # k-steps over head_dim; n-tiles of dK and dV
    QN = HALF // 8  # n-tiles of queries in half a step
    SREGS, OREGS = QN * 4, DT * 4
    COLS = QN * 2  # the query columns a lane holds in half a step
    ROW = 2 * D  # bytes of a K, V, Q or dO row
    # shared memory, in 16-bit elements
    SK, SV = 0, BN * D
    SQ = 2 * BN * D  # two stages of Q, then two of dO
    SDO = SQ + 2 * BQ * D
    SDS = SDO + 2 * BQ * D  # dSᵀ, [BN keys, BQ queries] fp16, swizzled like the rest
    SLSE = SDS + BN * BQ  # two stages of lse, then two of D (float32: 2 elements each)
    SDEL = SLSE + 2 * 2 * BQ
    TOTAL = SDEL + 2 * 2 * BQ
    LOADS_KV = BN * CH // NT
    LOADS_Q = BQ * CH // NT
    mma = ptx.mma_bf16 if precision == "bfloat16" else ptx.mma_f16
    pack = ptx.pack_bf16x2 if precision == "bfloat16" else ptx.pack_f16x2
    update = grad or fragment_grad_reference()

    swizzled, load_rows, a_offset, lane_offsets = tile_helpers(D, NT)

    @cuda.jit(device=True, inline="always")
    def scores(s, aaddr, baddr, koff, aoff):
        # s = A Bᵀ over head_dim: A the warp's 16 rows (K or V), B 32 rows of a query tile (Q or dO)
        for x in range(SREGS):
            s[x] = float32(0)
        for kk in range(KT):
            a0, a1, a2, a3 = ptx.ldmatrix_x4_at(aaddr + aoff[kk % 4] + (kk // 4) * 128)
            for np2 in range(QN // 2):
                b0, b1, b2, b3 = ptx.ldmatrix_x4_at(baddr + koff[kk % 4] + np2 * 16 * ROW + (kk // 4) * 128)
                n0, n1 = np2 * 8, np2 * 8 + 4
                s[n0], s[n0 + 1], s[n0 + 2], s[n0 + 3] = mma(a0, a1, a2, a3, b0, b1, s[n0], s[n0 + 1], s[n0 + 2],
                                                             s[n0 + 3])
                s[n1], s[n1 + 1], s[n1 + 2], s[n1 + 3] = mma(a0, a1, a2, a3, b2, b3, s[n1], s[n1 + 1], s[n1 + 2],
                                                             s[n1 + 3])

    @cuda.jit(device=True, inline="always")
    def accumulate(acc, s, baddr, aoff):
        # acc (16 keys x head_dim) += s (16 keys x 32 queries, as packed A fragments) @ tile (32 queries x D)
        for kt in range(QN // 2):
            e0, e1 = kt * 8, kt * 8 + 4
            p0, p1 = pack(s[e0], s[e0 + 1]), pack(s[e0 + 2], s[e0 + 3])
            p2, p3 = pack(s[e1], s[e1 + 1]), pack(s[e1 + 2], s[e1 + 3])
            for dp in range(DT // 2):
                b0, b1, b2, b3 = ptx.ldmatrix_x4_trans_at(baddr + aoff[dp % 4] + kt * 16 * ROW + (dp // 4) * 128)
                c0, c1 = dp * 8, dp * 8 + 4
                acc[c0], acc[c0 + 1], acc[c0 + 2], acc[c0 + 3] = mma(p0, p1, p2, p3, b0, b1, acc[c0], acc[c0 + 1],
                                                                     acc[c0 + 2], acc[c0 + 3])
                acc[c1], acc[c1 + 1], acc[c1 + 2], acc[c1 + 3] = mma(p0, p1, p2, p3, b2, b3, acc[c1], acc[c1 + 1],
                                                                     acc[c1 + 2], acc[c1 + 3])

    def kernel(dq, dk, dv, qf, kf, vf, dof, lse, delta, keys, kv_lens, causal, scale_log2, scale):
        # qf, kf, vf, dof: the 16-bit inputs flattened; lse, delta: float32 [batch * heads * seq], flat too
        smem = cuda.shared.array(0, uint16)
        smem32 = cuda.shared.array(0, uint32)
        smemf = cuda.shared.array(0, float32)
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        heads = dq.shape[1]
        n = dq.shape[2]
        b, h = cuda.blockIdx.y // heads, cuda.blockIdx.y % heads
        j0 = cuda.blockIdx.x * BN  # this block's keys
        kv_len = min(kv_lens[b], keys)
        kr0 = j0 + warp * 16 + g  # this lane's key rows: kr0, kr0 + 8
        sbase = ptx.shared_address(smem, 0)
        koff = cuda.local.array(4, int32)
        aoff = cuda.local.array(4, int32)
        lane_offsets(koff, aoff, lane)
        r0, c = tid // CH, tid % CH
        dst0 = 2 * swizzled(r0, c, D)
        kv_any = int64(ptx.global_address(kf, (b * heads + h) * keys * D))
        kv_src = 2 * (r0 * D + c * 8) + 2 * j0 * D
        v_any = int64(ptx.global_address(vf, (b * heads + h) * keys * D))
        q_any = int64(ptx.global_address(qf, (b * heads + h) * n * D))
        do_any = int64(ptx.global_address(dof, (b * heads + h) * n * D))
        q_src = q_any + 2 * (r0 * D + c * 8)
        do_src = do_any + 2 * (r0 * D + c * 8)
        stat_any = int64(ptx.global_address(lse, (b * heads + h) * n))
        del_any = int64(ptx.global_address(delta, (b * heads + h) * n))

        dka = cuda.local.array(OREGS, float32)
        dva = cuda.local.array(OREGS, float32)
        for x in range(OREGS):
            dka[x] = float32(0)
            dva[x] = float32(0)
        s = cuda.local.array(SREGS, float32)
        dp = cuda.local.array(SREGS, float32)
        lse2 = cuda.local.array(COLS, float32)
        dlt = cuda.local.array(COLS, float32)

        i_first = (j0 // BQ) * BQ if causal else 0  # causal: the queries before this block's keys see none of them
        steps = (n - i_first + BQ - 1) // BQ if j0 < kv_len else 0
        # the block's K and V, and the first query step's Q, dO, lse and D
        load_rows(sbase + 2 * SK + dst0, kv_any + kv_src, kv_any, j0 + r0, kv_len, LOADS_KV)
        load_rows(sbase + 2 * SV + dst0, v_any + kv_src, v_any, j0 + r0, kv_len, LOADS_KV)
        if steps > 0:
            load_rows(sbase + 2 * SQ + dst0, q_src + i_first * ROW, q_any, i_first + r0, n, LOADS_Q)
            load_rows(sbase + 2 * SDO + dst0, do_src + i_first * ROW, do_any, i_first + r0, n, LOADS_Q)
            if tid < BQ:  # lse and D: one float per copy (a row of them is not 16-byte aligned for every seq)
                ok = i_first + tid < n
                ptx.cp_async4_at(sbase + 2 * SLSE + 4 * tid, stat_any + 4 * (i_first + tid) if ok else stat_any,
                                 4 if ok else 0)
                ptx.cp_async4_at(sbase + 2 * SDEL + 4 * tid, del_any + 4 * (i_first + tid) if ok else del_any,
                                 4 if ok else 0)
        ptx.cp_async_commit()
        for step in range(steps):
            i0 = i_first + step * BQ
            cur = step & 1
            ptx.cp_async_wait_all()
            cuda.syncthreads()  # this step's tiles are in; every warp is done with the last step's
            if step + 1 < steps:
                nq = i0 + BQ
                load_rows(sbase + 2 * (SQ + (1 - cur) * BQ * D) + dst0, q_src + nq * ROW, q_any, nq + r0, n, LOADS_Q)
                load_rows(sbase + 2 * (SDO + (1 - cur) * BQ * D) + dst0, do_src + nq * ROW, do_any, nq + r0, n,
                          LOADS_Q)
                if tid < BQ:
                    ok = nq + tid < n
                    ptx.cp_async4_at(sbase + 2 * (SLSE + (1 - cur) * 2 * BQ) + 4 * tid,
                                     stat_any + 4 * (nq + tid) if ok else stat_any, 4 if ok else 0)
                    ptx.cp_async4_at(sbase + 2 * (SDEL + (1 - cur) * 2 * BQ) + 4 * tid,
                                     del_any + 4 * (nq + tid) if ok else del_any, 4 if ok else 0)
            ptx.cp_async_commit()
            qt = sbase + 2 * (SQ + cur * BQ * D)
            dot = sbase + 2 * (SDO + cur * BQ * D)
            lse_at = SLSE // 2 + cur * BQ  # float32 index of this step's lse (and D below)
            del_at = SDEL // 2 + cur * BQ
            masked = j0 + BN > kv_len or i0 + BQ > n or (causal and i0 < j0 + BN - 1)
            for half in range(2):
                qh = half * HALF
                scores(s, sbase + 2 * SK + warp * 16 * ROW, qt + qh * ROW, koff, aoff)  # Sᵀ = K Qᵀ
                scores(dp, sbase + 2 * SV + warp * 16 * ROW, dot + qh * ROW, koff, aoff)  # dPᵀ = V dOᵀ
                for nt in range(QN):  # the lane's queries' lse (times log2 e) and D
                    for e1 in range(2):
                        col = qh + nt * 8 + 2 * t + e1
                        lse2[nt * 2 + e1] = smemf[lse_at + col] * float32(LOG2E)
                        dlt[nt * 2 + e1] = smemf[del_at + col]
                update(s, dp, lse2, dlt, i0 + qh, kr0, t, kv_len, n, causal, masked, scale_log2)  # P, dS
                accumulate(dva, s, dot + qh * ROW, aoff)  # dV += Pᵀ dO
                accumulate(dka, dp, qt + qh * ROW, aoff)  # dK += dSᵀ Q
                for nt in range(QN):  # dSᵀ to shared memory (fp16 pairs), for dQ
                    col = qh + nt * 8 + 2 * t
                    for r in range(2):
                        row = warp * 16 + g + 8 * r
                        smem32[(SDS + swizzled(row, col >> 3, BQ) + (col & 7)) >> 1] = pack(dp[nt * 4 + 2 * r],
                                                                                          dp[nt * 4 + 2 * r + 1])
            cuda.syncthreads()
            # dQ[i0 + 16 warp ..] += dS K: A = dS (queries x keys) read transposed from dSᵀ, B = K
            a_key = (lane & 7) + ((lane >> 4) << 3)
            mq = warp % 4  # this warp's 16 queries of the step
            a_chunk = mq * 2 + ((lane >> 3) & 1)
            fr = cuda.local.array(FR, uint32)
            for kt in range(BN // 16):
                key = kt * 16 + a_key
                fr[kt * 4], fr[kt * 4 + 1], fr[kt * 4 + 2], fr[kt * 4 + 3] = ptx.ldmatrix_x4_trans_at(
                    sbase + 2 * (SDS + swizzled(key, a_chunk, BQ)))
            qi = i0 + mq * 16 + g
            for dd in range(DQ_PAIRS):
                dpair = (warp // 4) * DQ_PAIRS + dd
                # (not aoff[dpair % 4]: dpair depends on the warp, and a local array indexed at run
                # time would live in local memory)
                b_off = a_offset(lane, dpair % 4)
                acc = cuda.local.array(8, float32)
                for x in range(8):
                    acc[x] = float32(0)
                for kt in range(BN // 16):
                    b0, b1, b2, b3 = ptx.ldmatrix_x4_trans_at(sbase + 2 * SK + b_off + kt * 16 * ROW + (dpair // 4) * 128)
                    acc[0], acc[1], acc[2], acc[3] = mma(fr[kt * 4], fr[kt * 4 + 1], fr[kt * 4 + 2], fr[kt * 4 + 3],
                                                         b0, b1, acc[0], acc[1], acc[2], acc[3])
                    acc[4], acc[5], acc[6], acc[7] = mma(fr[kt * 4], fr[kt * 4 + 1], fr[kt * 4 + 2], fr[kt * 4 + 3],
                                                         b2, b3, acc[4], acc[5], acc[6], acc[7])
                for half8 in range(2):
                    col = dpair * 16 + half8 * 8 + 2 * t
                    if qi < n:
                        cuda.atomic.add(dq, (b, h, qi, col), acc[half8 * 4] * scale)
                        cuda.atomic.add(dq, (b, h, qi, col + 1), acc[half8 * 4 + 1] * scale)
                    if qi + 8 < n:
                        cuda.atomic.add(dq, (b, h, qi + 8, col), acc[half8 * 4 + 2] * scale)
                        cuda.atomic.add(dq, (b, h, qi + 8, col + 1), acc[half8 * 4 + 3] * scale)
        ptx.cp_async_wait_all()
        for dt in range(DT):
            col = dt * 8 + 2 * t
            for r in range(2):
                j = kr0 + 8 * r
                if j < keys:
                    dk[b, h, j, col] = dka[dt * 4 + 2 * r] * scale
                    dk[b, h, j, col + 1] = dka[dt * 4 + 2 * r + 1] * scale
                    dv[b, h, j, col] = dva[dt * 4 + 2 * r]
                    dv[b, h, j, col + 1] = dva[dt * 4 + 2 * r + 1]

    return cuda.jit(kernel, launch_bounds=(NT, 1)), 2 * TOTAL, NT, BN


class FlashBackward:
    """``backward(dq, dk, dv, q, k, v, o, lse, d_o, kv_lens, causal, scale)``: float32 gradients of
    attention for fp16 (or bf16) ``q, k, v, d_o`` and the forward's float32 ``o`` and ``lse`` (see the
    module docstring)."""

    def __init__(self, head_dim: int = 128, precision: str = "float16", warps: int = 8, grad=None):
        if head_dim not in (64, 128):
            raise ValueError(f"head_dim must be 64 or 128, got {head_dim}")
        if precision not in ("float16", "bfloat16"):
            raise ValueError(f"precision must be float16 or bfloat16, got {precision!r}")
        if warps not in (4, 8):
            raise ValueError(f"warps must be 4 or 8 (16 keys each), got {warps}")
        require_mma_gpu("FlashBackward")
        self.head_dim, self.precision, self.warps = head_dim, precision, warps
        self.dispatcher, self.smem_bytes, self.threads, self.block_n = _build(head_dim, precision, warps, grad)
        self._opted_in = False
        self._delta = None

    def label(self) -> str:
        return f"mma.sync backward, {self.precision}, head_dim {self.head_dim}, {self.block_n} keys a block"

    def argument_types(self):
        """The Numba types of a launch (for compiling without a GPU)."""
        from numba import types

        f32 = types.float32
        u16 = types.Array(types.uint16, 1, "C")
        a4 = types.Array(f32, 4, "C")
        f1 = types.Array(f32, 1, "C")
        return (a4, a4, a4, u16, u16, u16, u16, f1, f1, types.int64, types.Array(types.int32, 1, "C"), types.boolean,
                f32, f32)

    def _args(self, dq, dk, dv, q, k, v, o, lse, d_o, kv_lens, causal, scale):
        named = dict(dq=dq, dk=dk, dv=dv, q=q, k=k, v=v, o=o, lse=lse, d_o=d_o)
        arrays = {name: _on_device(x, name) for name, x in named.items()}
        q, k, v, d_o = (arrays[x] for x in ("q", "k", "v", "d_o"))
        for name in ("q", "k", "v", "d_o"):
            x = arrays[name]
            if x.ndim != 4 or x.shape[3] != self.head_dim or np.dtype(x.dtype).itemsize != 2 or not x.is_c_contiguous():
                raise ValueError(f"{name} must be a C-contiguous 16-bit [batch, heads, seq, {self.head_dim}] array, got "
                                 f"{x.dtype} {tuple(x.shape)}")
        if k.shape != v.shape or k.shape[:2] != q.shape[:2] or d_o.shape != q.shape:
            raise ValueError(f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                             f"d_o {tuple(d_o.shape)}")
        for name, shape in (("dq", q.shape), ("dk", k.shape), ("dv", v.shape), ("o", q.shape), ("lse", q.shape[:3])):
            x = arrays[name]
            if np.dtype(x.dtype) != np.float32 or tuple(x.shape) != tuple(shape):
                raise ValueError(f"{name} must be float32 of shape {tuple(shape)}, got {x.dtype} {tuple(x.shape)}")
        from numba import cuda as _cuda

        b, h, n, d = q.shape
        kv_lens = kv_lens_on_device(kv_lens, b, k.shape[2])
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        if self._delta is None or tuple(self._delta.shape) != (b, h, n):
            self._delta = _cuda.device_array((b, h, n), np.float32)
        flat = [x.view(np.uint16).reshape(x.size) for x in (q, k, v, d_o)]
        grid = (-(-k.shape[2] // self.block_n), b * h)
        lse_flat = arrays["lse"].reshape(arrays["lse"].size)
        args = (arrays["dq"], arrays["dk"], arrays["dv"], *flat, lse_flat, self._delta.reshape(self._delta.size),
                k.shape[2], kv_lens,
                bool(causal), np.float32(scale * LOG2E), np.float32(scale))
        return grid, args, arrays

    def _kernel(self, grid, args):
        if self.smem_bytes > 48 * 1024 and not self._opted_in and not on_simulator():
            from ..tensor_cores.toolchain import set_max_dynamic_shared_memory

            set_max_dynamic_shared_memory(self.dispatcher, args, self.smem_bytes)
            self._opted_in = True
        return self.dispatcher[grid, self.threads, 0, self.smem_bytes]

    def _steps(self, grid, args, arrays):
        kern = self._kernel(grid, args)
        dq, o, d_o = arrays["dq"], arrays["o"], arrays["d_o"]
        rows = o.shape[0] * o.shape[1] * o.shape[2]
        flat_dq = dq.reshape(dq.size)
        bf16 = self.precision == "bfloat16"
        d_o16 = d_o.view(np.uint16 if bf16 else np.float16)
        delta_kernel = _delta_kernel(bf16)

        def run():
            _zero_kernel[-(-dq.size // 256), 256](flat_dq)
            delta_kernel[-(-rows // 8), 256](self._delta, o, d_o16)
            kern(*args)

        return run

    def __call__(self, dq, dk, dv, q, k, v, o, lse, d_o, kv_lens=None, causal=False, scale=None):
        grid, args, arrays = self._args(dq, dk, dv, q, k, v, o, lse, d_o, kv_lens, causal, scale)
        self._steps(grid, args, arrays)()

    def launcher(self, dq, dk, dv, q, k, v, o, lse, d_o, kv_lens=None, causal=False, scale=None):
        """A no-argument launch (the zeroing of dq, D and the kernel) for ``kl.benchmark``."""
        grid, args, arrays = self._args(dq, dk, dv, q, k, v, o, lse, d_o, kv_lens, causal, scale)
        return self._steps(grid, args, arrays)
