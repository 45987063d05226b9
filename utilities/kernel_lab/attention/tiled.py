"""Register-tiled fused attention forward on CUDA cores (Numba): FlashAttention-2's loop with the
inner products of a register-blocked SGEMM.

Why the package's ``kernels.fused_forward`` (one thread per query row) is slow: each thread holds
its query row and output row in registers (165 registers at head_dim 64, 255 and a local-memory
stack at 128), its block of scores sits in a local array indexed by a loop counter (local memory),
and every multiply-add of ``q . k`` and ``p v`` needs its own shared-memory operand: the 16-byte
loads bring the ratio to 4 multiply-adds per shared load, still the limit. This version computes a
*tile* of scores and of outputs per thread, so that every value loaded from shared memory feeds
several multiply-adds, as kernel 5 of the SGEMM series does:

* a block owns ``block_m = warps * (32 // cg) * tm`` query rows; Q (pre-multiplied by
  ``scale * log2(e)``) is loaded into shared memory once; K and V tiles of ``block_n`` keys are
  streamed through shared memory by the whole block (16-byte loads, zero past ``kv_len``);
* a warp owns ``(32 // cg) * tm`` of the rows; its lane ``(rg, cg)`` computes the ``tm x tn``
  scores ``S[rg * tm + i, cg + cg_count * jj]`` (``tm + tn`` 16-byte shared loads per 4 steps of
  head_dim feed ``4 tm tn`` multiply-adds) and the ``tm x (head_dim / cg_count)`` outputs
  ``O[rg * tm + i, ch * 4 cg_count + 4 cg + e]``;
* the row max of a key tile is the lanes' maxima combined with ``shfl_xor`` over the ``cg`` bits
  (the ``cg_count`` lanes of one row group); the normaliser ``l`` stays a per-lane partial sum until
  the end (every lane of a row rescales by the same max, so the partials add up), one shuffle
  reduction at the end;
* ``P`` goes through a per-warp shared buffer (written and read by the same warp: ``syncwarp``,
  not ``syncthreads``): ``O += P V`` then reads ``tm`` rows of P and ``head_dim / cg_count`` values
  of V per key, again a register tile;
* base-2 exponent (``exp2(s log2 e - m)``, one ``MUFU.EX2`` per score), ``lse = ln2 (m + log2 l)``;
* causal: key tiles past the block's last query are never loaded; a warp skips the tiles past its
  own last query; masks are applied only in the tiles that straddle the diagonal or ``kv_len``;
  query blocks run heaviest first (reverse order);
* ``prefetch``: the next K/V tile is loaded from global memory into registers while the current one
  is computed (register double buffering), at the price of ``2 block_n head_dim / threads``
  registers.

Shared-memory banks: K rows are padded to ``head_dim + 4`` floats so that the ``cg_count`` lanes of
a quarter-warp (one 16-byte phase) read ``cg_count`` consecutive keys from 32 different banks; Q and
P reads are broadcasts (a phase's lanes share ``rg``); V reads are 128 contiguous bytes per phase.

The kernel and its core (notebook 04.3's second exercise). The kernel (:func:`tiled_forward_kernel`)
owns the launch geometry, the Q tile, the K/V tile loads and barriers, the causal skip, the masks
and the stores of O and lse. What makes it FlashAttention is four device functions, a
:class:`TileCore`, which :func:`core_parts` builds for a configuration and a notebook may replace
with its own (``tiled_launcher(make_core)``, like ``sgemm.warptile_launcher(cfg, main_loop=...)``):

* ``s_step(sm, sacc, qf, kf, lr0, cg, c)``: ``S += Q[:, c:c+4] K[:, c:c+4]^T`` on the lane's tile;
* ``softmax(sm, sacc, oacc, mrow, lrow, pw, cg)``: the online softmax of one key tile (row max over
  the row group, rescale of ``l`` and ``O``, P to the warp's shared slice, ``syncwarp``);
* ``pv_step(sm, oacc, pf, vf, pw, cg, j)``: ``O += P[:, j:j+4] V[j:j+4, :]`` on the lane's tile;
* ``normaliser(lrow, i)``: ``l`` of the lane's row ``i``, summed over the row group.

:func:`layout` gives the compile-time constants those functions need (:class:`Layout`).

Masks follow :mod:`kernel_lab.attention.reference`: keys ``j < kv_lens[b]`` (checked by every
launcher, ``lengths``), causal with the top-left alignment of PyTorch's ``is_causal`` (``j <= i``),
and a query row with no valid key gets ``O = 0`` and ``lse = -inf`` (SDPA gives NaN there).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..environment import on_simulator
from ..validate import KernelLabArgumentError
from .kernels import _lens, _require

from numba import cuda, float32  # noqa: E402  (kernel_lab chose GPU or simulator already)

from ..vector_loads import load4, store4  # noqa: E402

NEG_INF = -math.inf

if on_simulator():

    def ex2(x):
        """2 ** x (the simulator's stand-in for the GPU's ``ex2.approx.ftz.f32``)."""
        return float32(2.0 ** float(x))

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def ex2(typingctx, x):
        """2 ** x in one ``MUFU.EX2`` (PTX ``ex2.approx.ftz.f32``: relative error about 2**-22,
        results below 2**-126 flushed to 0, ``ex2(-inf) = 0``). ``math.exp2`` compiles to libdevice's
        ``exp2f``: the same instruction plus a range test and two multiplies for subnormal results."""
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.FloatType(), [ir.FloatType()])
            return builder.call(ir.InlineAsm(fnty, "ex2.approx.ftz.f32 $0, $1;", "=f,f"), args)

        return types.float32(types.float32), codegen


LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@dataclass(frozen=True)
class TiledConfig:
    """One shape of the register-tiled forward.

    ``head_dim``; ``block_n`` keys per K/V tile; ``tm`` query rows per lane (``tn = block_n / cg``
    keys per lane); ``cg`` lanes per row group (a power of two, at most 32); ``warps`` per block;
    ``unroll``: steps of 4 (head_dim in S, keys in O += P V) per trip of the inner loops;
    ``prefetch`` the next K/V tile into registers; ``max_registers`` a cap for ptxas (None: none).
    """
    head_dim: int
    block_n: int = 64
    tm: int = 4
    cg: int = 8
    warps: int = 4
    unroll: int = 2
    prefetch: bool = False
    max_registers: int | None = None

    @property
    def tn(self) -> int:
        return self.block_n // self.cg

    @property
    def rows_per_warp(self) -> int:
        return (32 // self.cg) * self.tm

    @property
    def block_m(self) -> int:
        return self.warps * self.rows_per_warp

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def smem_floats(self) -> tuple[int, int, int, int]:
        """Offsets (in floats) of Q, K, V, P in the block's shared memory, and the total."""
        d, bn = self.head_dim, self.block_n
        k_at = self.block_m * d
        v_at = k_at + bn * (d + 4)
        p_at = v_at + bn * d
        return k_at, v_at, p_at, p_at + self.warps * self.rows_per_warp * (bn + 4)

    def smem_bytes(self) -> int:
        return 4 * self.smem_floats()[3]

    def label(self) -> str:
        return (f"d{self.head_dim} {self.block_m}x{self.block_n}, {self.tm}x{self.tn} per lane, "
                f"{self.threads} thr, unroll {self.unroll}{', prefetch' if self.prefetch else ''}"
                f"{f', <= {self.max_registers} regs' if self.max_registers else ''}")

    def problems(self) -> list[str]:
        p = []
        d, bn, c, t = self.head_dim, self.block_n, self.cg, self.threads
        if c not in (1, 2, 4, 8, 16, 32):
            p.append(f"cg {c}: a power of two <= 32")
        elif bn % c:
            p.append(f"block_n {bn} must be a multiple of cg {c}")
        elif d % (4 * c):
            p.append(f"head_dim {d} must be a multiple of 4 * cg = {4 * c} (16-byte output chunks)")
        if self.unroll not in (1, 2) or bn % (4 * self.unroll) or d % (4 * self.unroll):
            p.append(f"unroll {self.unroll}: 1 or 2, and block_n {bn}, head_dim {d} multiples of 4 * unroll")
        if d % 4 or t % (d // 4) or (bn * d // 4) % t or (self.block_m * d // 4) % t:
            p.append(f"{t} threads must be a multiple of head_dim / 4 = {d // 4}, and the Q and K tiles "
                     f"whole numbers of 16-byte loads per thread")
        if self.smem_bytes() > 227 * 1024:
            p.append(f"{self.smem_bytes()} bytes of shared memory: more than a block may have (227 KiB)")
        return p


def default_config(head_dim: int, *, gpu: bool = False) -> TiledConfig:
    """The shape used by ``tiled_forward`` when none is given: tiny in the simulator (one warp,
    8 query rows, 8 keys per tile, so that the checks' sequences are ragged against both).
    ``gpu=True``: the GPU's shape wherever it runs, so that a check in the simulator also runs a
    lane's four query rows and its several 16-byte chunks of V, which the simulator's shape has one of."""
    if on_simulator() and not gpu:
        return TiledConfig(head_dim, block_n=8, tm=1, cg=4, warps=1, unroll=1)
    if head_dim <= 64:
        return TiledConfig(head_dim, block_n=32, tm=4, cg=8, warps=4)
    return TiledConfig(head_dim, block_n=32, tm=4, cg=8, warps=4)


STATIC_SMEM_LIMIT = 48 * 1024  # above this a kernel must opt in to more (dynamic) shared memory
FULL = 0xFFFFFFFF  # every lane of the warp (the mask of shfl_xor_sync and syncwarp)


class Layout(NamedTuple):
    """The compile-time constants of one configuration that the core's device functions use
    (``D, TM, TN, CG, TD, NCH, LOG_CG, K_AT, KP, V_AT, PP = layout(cfg)``).

    A lane ``(rg, cg) = (lane // CG, lane % CG)`` owns ``TM`` query rows (``lr0 + i``, ``i < TM``, in the
    block's Q tile), the ``TN`` keys ``cg + CG * jj`` (``jj < TN``) of each K/V tile, and the ``TD = D / CG``
    output columns ``4 * CG * ch + 4 * cg + e`` (``ch < NCH = TD / 4``, ``e < 4``), kept in ``oacc[i, 4 * ch + e]``.
    Shared memory ``sm`` (float32, flat): Q at 0 (row stride ``D``), K at ``K_AT`` (row stride ``KP = D + 4``),
    V at ``V_AT`` (row stride ``D``), the lane's rows of P at ``pw`` (row stride ``PP = block_n + 4``).
    ``LOG_CG``: the shuffle steps (``shfl_xor`` with ``1 << bit``) that span a row group.
    """
    D: int
    TM: int
    TN: int
    CG: int
    TD: int
    NCH: int
    LOG_CG: int
    K_AT: int
    KP: int
    V_AT: int
    PP: int


def layout(cfg: TiledConfig) -> Layout:
    k_at, v_at, _, _ = cfg.smem_floats()
    td = cfg.head_dim // cfg.cg
    return Layout(cfg.head_dim, cfg.tm, cfg.tn, cfg.cg, td, td // 4, cfg.cg.bit_length() - 1, k_at,
                  cfg.head_dim + 4, v_at, cfg.block_n + 4)


class TileCore(NamedTuple):
    """The four device functions of FlashAttention's loop that the kernel calls (module docstring)."""
    s_step: Callable
    softmax: Callable
    pv_step: Callable
    normaliser: Callable


@functools.lru_cache(maxsize=None)
def core_parts(cfg: TiledConfig) -> TileCore:
    """The package's core for ``cfg`` (the solution of notebook 04.3's second exercise)."""
    D, TM, TN, CG, TD, NCH, LOG_CG, K_AT, KP, V_AT, PP = layout(cfg)

    @cuda.jit(device=True, inline=True)
    def s_step(sm, sacc, qf, kf, lr0, cg, c):
        # S += Q[:, c:c+4] K[:, c:c+4]^T on the lane's TM x TN tile: TM + TN 16-byte loads, 4 TM TN FFMA
        for i in range(TM):
            qf[i, 0], qf[i, 1], qf[i, 2], qf[i, 3] = load4(sm, (lr0 + i) * D + c)
        for jj in range(TN):
            kf[jj, 0], kf[jj, 1], kf[jj, 2], kf[jj, 3] = load4(sm, K_AT + (cg + CG * jj) * KP + c)
        for i in range(TM):
            for jj in range(TN):
                acc = sacc[i, jj]  # one chain of four multiply-adds (FFMA), not a sum of products
                for e in range(4):
                    acc += qf[i, e] * kf[jj, e]
                sacc[i, jj] = acc

    @cuda.jit(device=True, inline=True)
    def softmax(sm, sacc, oacc, mrow, lrow, pw, cg):
        # per row: the max over the row group's CG lanes, rescale l and O, P = 2^(s - m) to shared memory
        for i in range(TM):
            mx = sacc[i, 0]
            for jj in range(1, TN):
                mx = max(mx, sacc[i, jj])
            for bit in range(LOG_CG):  # the other lanes of the row hold its other keys
                mx = max(mx, cuda.shfl_xor_sync(FULL, mx, 1 << bit))
            m_new = max(mrow[i], mx)
            m_use = m_new if m_new > NEG_INF else float32(0)  # no valid key yet: ex2(-inf) = 0, no NaN
            alpha = ex2(mrow[i] - m_use)  # the OLD max
            mrow[i] = m_new
            part = float32(0)
            for jj in range(TN):
                p = ex2(sacc[i, jj] - m_use)
                part += p
                sm[pw + i * PP + cg + CG * jj] = p
            lrow[i] = lrow[i] * alpha + part  # this lane's share of l
            for c in range(TD):
                oacc[i, c] *= alpha
        cuda.syncwarp(FULL)  # P is read by the other lanes of the row group

    @cuda.jit(device=True, inline=True)
    def pv_step(sm, oacc, pf, vf, pw, cg, j):
        # O += P[:, j:j+4] V[j:j+4, :] on the lane's TM x TD tile: TM + 4 NCH 16-byte loads, 4 TM TD FFMA
        for i in range(TM):
            pf[i, 0], pf[i, 1], pf[i, 2], pf[i, 3] = load4(sm, pw + i * PP + j)
        for jj in range(4):
            for ch in range(NCH):
                vf[4 * ch], vf[4 * ch + 1], vf[4 * ch + 2], vf[4 * ch + 3] = load4(
                    sm, V_AT + (j + jj) * D + 4 * CG * ch + 4 * cg)
            for i in range(TM):
                for c in range(TD):
                    oacc[i, c] += pf[i, jj] * vf[c]

    @cuda.jit(device=True, inline=True)
    def normaliser(lrow, i):
        # l of row i: the sum of the row group's partial sums
        ell = lrow[i]
        for bit in range(LOG_CG):
            ell += cuda.shfl_xor_sync(FULL, ell, 1 << bit)
        return ell

    return TileCore(s_step, softmax, pv_step, normaliser)


@functools.lru_cache(maxsize=None)
def tiled_forward_kernel(cfg: TiledConfig, core: TileCore | None = None):
    """The compiled kernel for one configuration (see the module docstring), with the core's device
    functions (default: :func:`core_parts`). Its arguments: flat (1D) float32 ``o, lse, q, k, v``,
    int32 ``kv_lens``, ``heads, n, nk`` (ints), ``causal`` (bool), ``scale`` (float32);
    ``tiled_forward`` launches it with ``cfg.smem_bytes()`` of dynamic shared memory."""
    bad = cfg.problems()
    if bad:
        raise KernelLabArgumentError(f"{cfg.label()}: " + "; ".join(bad))
    if core is None:
        core = core_parts(cfg)
    S_STEP, SOFTMAX, PV_STEP, NORMALISER = core
    D, BN, TM, CG, WARPS, PRE, U = cfg.head_dim, cfg.block_n, cfg.tm, cfg.cg, cfg.warps, cfg.prefetch, cfg.unroll
    TN = cfg.tn
    RPW = cfg.rows_per_warp
    BM = cfg.block_m
    T = cfg.threads
    TD = D // CG  # output columns per lane
    NCH = TD // 4  # ... in 16-byte chunks, 4 * CG floats apart
    D4 = D // 4
    RU = T // D4  # rows of a tile one round of 16-byte loads covers
    NL = BN // RU  # 16-byte loads per thread per K (and V) tile
    NQ = BM // RU  # ... per Q tile
    KP = D + 4  # padded K row: CG consecutive keys lie in 32 different banks
    PP = BN + 4
    K_AT, V_AT, P_AT, _ = cfg.smem_floats()
    jit = {"max_registers": cfg.max_registers} if cfg.max_registers else {}

    @cuda.jit(device=True, inline=True)
    def fetch(k, v, kr, vr, base, j0, kv_len, r0, c0):
        # this thread's NL 16-byte pieces of the K and V tiles at key j0 (zeros past kv_len)
        g = base + (j0 + r0) * D + c0
        if j0 + BN <= kv_len:  # a whole tile (uniform): no per-row test
            for u in range(NL):
                kr[u, 0], kr[u, 1], kr[u, 2], kr[u, 3] = load4(k, g + u * RU * D)
                vr[u, 0], vr[u, 1], vr[u, 2], vr[u, 3] = load4(v, g + u * RU * D)
        else:
            for u in range(NL):
                if j0 + r0 + u * RU < kv_len:
                    kr[u, 0], kr[u, 1], kr[u, 2], kr[u, 3] = load4(k, g + u * RU * D)
                    vr[u, 0], vr[u, 1], vr[u, 2], vr[u, 3] = load4(v, g + u * RU * D)
                else:
                    for e in range(4):
                        kr[u, e] = float32(0)
                        vr[u, e] = float32(0)

    @cuda.jit(device=True, inline=True)
    def stash(sm, kr, vr, r0, c0):
        for u in range(NL):
            r = r0 + u * RU
            store4(sm, K_AT + r * KP + c0, kr[u, 0], kr[u, 1], kr[u, 2], kr[u, 3])
            store4(sm, V_AT + r * D + c0, vr[u, 0], vr[u, 1], vr[u, 2], vr[u, 3])

    @cuda.jit(**jit)
    def kernel(o, lse, q, k, v, kv_lens, heads, n, nk, causal, scale):
        sm = cuda.shared.array(0, float32)  # Q | K (padded rows) | V | P (one slice per warp)
        sacc = cuda.local.array((TM, TN), float32)
        oacc = cuda.local.array((TM, TD), float32)
        qf = cuda.local.array((TM, 4), float32)
        kf = cuda.local.array((TN, 4), float32)
        vf = cuda.local.array(TD, float32)
        mrow = cuda.local.array(TM, float32)
        lrow = cuda.local.array(TM, float32)
        kr = cuda.local.array((NL, 4), float32)
        vr = cuda.local.array((NL, 4), float32)

        z = cuda.blockIdx.y  # batch * heads + head
        b = z // heads
        q0 = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * BM  # heaviest (causal) query blocks first
        t = cuda.threadIdx.x
        w = t // 32
        lane = t % 32
        rg = lane // CG
        cg = lane % CG
        wr0 = w * RPW  # the warp's first row in the block
        lr0 = wr0 + rg * TM  # the lane's first row in the block
        pw = P_AT + (wr0 + rg * TM) * PP  # the lane's first row of P
        r0 = t // D4  # this thread's row and column in the tile loads
        c0 = (t % D4) * 4
        kv_len = min(kv_lens[b], nk)
        kbase = z * nk * D
        qscale = float32(scale * LOG2E)

        # Q tile, pre-scaled, into shared memory (zeros past n)
        for u in range(NQ):
            r = r0 + u * RU
            a0 = a1 = a2 = a3 = float32(0)
            if q0 + r < n:
                a0, a1, a2, a3 = load4(q, (z * n + q0 + r) * D + c0)
            store4(sm, r * D + c0, a0 * qscale, a1 * qscale, a2 * qscale, a3 * qscale)
        for i in range(TM):
            mrow[i] = float32(NEG_INF)
            lrow[i] = float32(0)
            for c in range(TD):
                oacc[i, c] = float32(0)

        k_end = min(kv_len, q0 + BM) if causal else kv_len  # causal: no key tile past the last query
        warp_last = q0 + wr0 + RPW - 1  # the warp's last query row
        if PRE and k_end > 0:
            fetch(k, v, kr, vr, kbase, 0, kv_len, r0, c0)
        for j0 in range(0, k_end, BN):
            cuda.syncthreads()  # everyone is done with the previous tile (and Q is in place)
            if not PRE:
                fetch(k, v, kr, vr, kbase, j0, kv_len, r0, c0)
            stash(sm, kr, vr, r0, c0)
            cuda.syncthreads()
            if PRE and j0 + BN < k_end:
                fetch(k, v, kr, vr, kbase, j0 + BN, kv_len, r0, c0)  # lands while this tile is computed
            if causal and j0 > warp_last:
                continue  # every key of the tile is in this warp's future (uniform per warp)

            # S = Q K^T: a TM x TN register tile per lane; TM + TN 16-byte loads feed 4 TM TN FFMA
            for i in range(TM):
                for jj in range(TN):
                    sacc[i, jj] = float32(0)
            for c1 in range(0, D, 4 * U):  # U steps of 4 written out (LLVM keeps such a loop rolled)
                S_STEP(sm, sacc, qf, kf, lr0, cg, c1)
                if U == 2:
                    S_STEP(sm, sacc, qf, kf, lr0, cg, c1 + 4)

            # masks, only in tiles that cross kv_len or the warp's diagonal (uniform per warp)
            if j0 + BN > kv_len or (causal and j0 + BN - 1 > q0 + wr0):
                for i in range(TM):
                    qi = q0 + lr0 + i
                    for jj in range(TN):
                        j = j0 + cg + CG * jj
                        if j >= kv_len or (causal and j > qi):
                            sacc[i, jj] = float32(NEG_INF)

            # online softmax: row max over the CG lanes of the row group, rescale, P to shared
            SOFTMAX(sm, sacc, oacc, mrow, lrow, pw, cg)

            # O += P V: a TM x TD register tile per lane; TM + NCH 16-byte loads per key feed TM TD FFMA
            for j1 in range(0, BN, 4 * U):
                PV_STEP(sm, oacc, qf, vf, pw, cg, j1)
                if U == 2:
                    PV_STEP(sm, oacc, qf, vf, pw, cg, j1 + 4)
            cuda.syncwarp(FULL)  # P is read before the next tile overwrites it

        # the normaliser: sum of the row group's partials; O = acc / l, lse = ln2 (m + log2 l)
        for i in range(TM):
            ell = NORMALISER(lrow, i)
            row = q0 + lr0 + i
            if row < n:
                inv = float32(1) / ell if ell > 0 else float32(0)
                for ch in range(NCH):
                    store4(o, (z * n + row) * D + 4 * CG * ch + 4 * cg, oacc[i, 4 * ch] * inv,
                           oacc[i, 4 * ch + 1] * inv, oacc[i, 4 * ch + 2] * inv, oacc[i, 4 * ch + 3] * inv)
                if cg == 0:
                    lse[z * n + row] = float32(LN2) * (mrow[i] + math.log2(ell)) if ell > 0 else float32(NEG_INF)

    return kernel


_OPTED_IN: set = set()


def tiled_forward(o, lse, q, k, v, kv_lens=None, causal=False, scale=None, config: TiledConfig | None = None,
                  core: TileCore | None = None):
    """Launch the register-tiled forward (``launch(o, lse, q, k, v, kv_lens, causal, scale)`` like
    ``kernels.fused_forward``; ``config`` defaults to :func:`default_config`, ``core`` to the
    package's :func:`core_parts`)."""
    _require(q, k, v, kv_lens)
    b, h, n, d = q.shape
    nk = k.shape[2]
    cfg = config or default_config(d)
    if cfg.head_dim != d:
        raise KernelLabArgumentError(f"config for head_dim {cfg.head_dim}, inputs have head_dim {d}")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kernel = tiled_forward_kernel(cfg, core)
    smem = cfg.smem_bytes()
    args = (o.reshape(o.size), lse.reshape(lse.size), q.reshape(q.size), k.reshape(k.size), v.reshape(v.size),
            _lens(kv_lens, b, nk), h, n, nk, bool(causal), np.float32(scale))
    if smem > STATIC_SMEM_LIMIT and not on_simulator() and kernel not in _OPTED_IN:
        from ..tensor_cores.toolchain import set_max_dynamic_shared_memory

        set_max_dynamic_shared_memory(kernel, args, smem)
        _OPTED_IN.add(kernel)
    kernel[(-(-n // cfg.block_m), b * h), cfg.threads, 0, smem](*args)


def tiled_launcher(make_core: Callable[[TiledConfig], TileCore] | None = None, config: TiledConfig | None = None):
    """``launch(o, lse, q, k, v, kv_lens, causal, scale)`` (the signature of the module's checks) of
    the tiled kernel with the core that ``make_core(cfg)`` builds (default: the package's
    :func:`core_parts`), for ``config`` or, per head_dim of the inputs, :func:`default_config`.
    ``make_core`` is called once per configuration (cache it, or return the same functions, so
    that a kernel compiles once)."""
    cores: dict = {}

    def launch(o, lse, q, k, v, kv_lens=None, causal=False, scale=None):
        cfg = config or default_config(q.shape[3])
        if cfg not in cores:
            core = (make_core or core_parts)(cfg)
            if not isinstance(core, tuple) or len(core) != 4:
                raise KernelLabArgumentError(
                    "make_core(cfg) must return TileCore(s_step, softmax, pv_step, normaliser): four device "
                    f"functions; it returned {type(core).__name__}")
            cores[cfg] = TileCore(*core)
        tiled_forward(o, lse, q, k, v, kv_lens, causal, scale, config=cfg, core=cores[cfg])

    launch.config = config
    return launch
