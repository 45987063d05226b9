"""Attention kernels on CUDA cores (Numba): the package's own, right, versions of module 04's kernels.

The notebooks have the learner write these; the package keeps one right copy of each for the GPU
probe (``scripts/gpu_module04_probe.py``), the benchmarks and the tests of the checks.

Layout: ``q, k, v, o`` are float32 ``[batch, heads, seq, head_dim]``; ``lse`` float32
``[batch, heads, seq]``; ``kv_lens`` int32 ``[batch]`` (see ``reference`` for the conventions).

* ``naive_forward``: three kernels with ``S`` materialised (``[batch, heads, seq, seq]``): a tiled
  ``S = scale Q K^T``, a row softmax (one block per row, mask applied, ``lse`` written), a tiled
  ``O = P V``;
* ``online_softmax``: one thread per row: running max and normaliser in one pass, then the
  normalised output in a second;
* ``fused_forward``: FlashAttention's forward on CUDA cores: one thread per query row, the row of Q
  and its output accumulator in registers, K and V blocks of ``block_n`` rows streamed through
  shared memory by the whole block (read 16 bytes at a time), running max/normaliser, one division
  at the end, ``lse`` written; with ``causal``, the key blocks that lie entirely above the diagonal
  are never visited;
* ``backward``: dQ, dK, dV recomputing ``P = exp(S - lse)``: a kernel for ``D = rowsum(dO * O)``,
  a kernel with one thread per key row (dK, dV; Q and dO streamed) and one with one thread per
  query row (dQ; K and V streamed). No atomics: each gradient row has one owner.

Masks follow :mod:`kernel_lab.attention.reference`: keys ``j < kv_lens[b]`` (checked by every
launcher, ``lengths``), causal with the top-left alignment of PyTorch's ``is_causal`` (``j <= i``),
and a query row with no valid key gets ``O = 0`` and ``lse = -inf`` (SDPA gives NaN there).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..environment import on_simulator
from ..validate import KernelLabArgumentError
from .lengths import kv_lens_on_device

from numba import cuda, float32  # noqa: E402  (kernel_lab chose GPU or simulator already)

from ..vector_loads import load4  # noqa: E402

NEG_INF = -math.inf
# the naive version's GEMM tiles (TILE x TILE threads) and softmax block: smaller in the simulator,
# which runs every thread in Python
TILE = 4 if on_simulator() else 16
TILE_PAD = TILE + 1  # a padded row: a shared array's shape must be a plain constant
SOFTMAX_THREADS = 8 if on_simulator() else 128


def default_blocks(head_dim: int) -> tuple[int, int]:
    """(block_m, block_n) of the fused kernels: 64 query rows and 32 keys per block on a GPU
    (K and V blocks: 16 KiB at head_dim 64, 32 KiB at 128); 8 and 8 in the simulator."""
    return (8, 8) if on_simulator() else (64, 32)


def _require(q, k, v, kv_lens):
    shapes = [tuple(a.shape) for a in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise KernelLabArgumentError(f"q, k, v must be [batch, heads, seq, head_dim]; got shapes {shapes}")
    if shapes[1] != shapes[2] or shapes[0][:2] != shapes[1][:2] or shapes[0][3] != shapes[1][3]:
        raise KernelLabArgumentError(f"q {shapes[0]}, k {shapes[1]}, v {shapes[2]}: k and v must have the same shape, "
                                     "and batch, heads and head_dim must agree with q")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if np.dtype(a.dtype) != np.float32:
            raise KernelLabArgumentError(f"{name} must be float32 for the CUDA-core kernels, got {a.dtype}")
    if kv_lens is not None and tuple(kv_lens.shape) != (shapes[0][0],):
        raise KernelLabArgumentError(f"kv_lens must have one length per batch entry ({shapes[0][0]}), "
                                     f"got shape {tuple(kv_lens.shape)}")


def _lens(kv_lens, batch, seq_k):
    """The lengths on the device, each checked to lie in 0 .. seq_k (``lengths``)."""
    return kv_lens_on_device(kv_lens, batch, seq_k)


# ------------------------------------------------------------------------------------------------
# Naive: S materialised


@functools.lru_cache(maxsize=None)
def _naive_kernels():
    @cuda.jit
    def qk(q, k, s, scale):
        # s[z, i, j] = scale * q[z, i, :] . k[z, j, :], z = batch * heads + head; 16 x 16 tiles
        qs = cuda.shared.array((TILE, TILE), float32)
        ks = cuda.shared.array((TILE, TILE_PAD), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        j = cuda.blockIdx.x * TILE + tx
        i = cuda.blockIdx.y * TILE + ty
        z = cuda.blockIdx.z
        n, d = q.shape[1], q.shape[2]
        acc = float32(0)
        for d0 in range(0, d, TILE):
            qs[ty, tx] = q[z, i, d0 + tx] if i < n and d0 + tx < d else float32(0)
            kj = cuda.blockIdx.x * TILE + ty  # K tile loaded transposed: coalesced along d
            ks[tx, ty] = k[z, kj, d0 + tx] if kj < k.shape[1] and d0 + tx < d else float32(0)
            cuda.syncthreads()
            for t in range(TILE):
                acc += qs[ty, t] * ks[t, tx]
            cuda.syncthreads()
        if i < n and j < k.shape[1]:
            s[z, i, j] = acc * scale

    @cuda.jit
    def softmax(s, lse, kv_lens, heads, causal):
        # one block per row of S; the row is overwritten by P; masked keys get p = 0
        red = cuda.shared.array(SOFTMAX_THREADS, float32)
        i = cuda.blockIdx.x
        z = cuda.blockIdx.y
        n = s.shape[2]
        t = cuda.threadIdx.x
        valid = min(kv_lens[z // heads], i + 1) if causal else kv_lens[z // heads]
        m = float32(NEG_INF)
        for j in range(t, valid, SOFTMAX_THREADS):
            m = max(m, s[z, i, j])
        red[t] = m
        cuda.syncthreads()
        w = SOFTMAX_THREADS // 2
        while w > 0:
            if t < w:
                red[t] = max(red[t], red[t + w])
            cuda.syncthreads()
            w //= 2
        m = red[0]
        cuda.syncthreads()
        total = float32(0)
        if m > NEG_INF:
            for j in range(t, valid, SOFTMAX_THREADS):
                total += math.exp(s[z, i, j] - m)
        red[t] = total
        cuda.syncthreads()
        w = SOFTMAX_THREADS // 2
        while w > 0:
            if t < w:
                red[t] += red[t + w]
            cuda.syncthreads()
            w //= 2
        total = red[0]
        for j in range(t, n, SOFTMAX_THREADS):
            s[z, i, j] = math.exp(s[z, i, j] - m) / total if j < valid else float32(0)
        if t == 0:
            lse[z, i] = m + math.log(total) if total > 0 else float32(NEG_INF)

    @cuda.jit
    def pv(p, v, o):
        # o[z, i, :] = p[z, i, :] @ v[z, :, :]; 16 x 16 tiles
        ps = cuda.shared.array((TILE, TILE), float32)
        vs = cuda.shared.array((TILE, TILE), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        c = cuda.blockIdx.x * TILE + tx
        i = cuda.blockIdx.y * TILE + ty
        z = cuda.blockIdx.z
        n, nk, d = p.shape[1], p.shape[2], v.shape[2]
        acc = float32(0)
        for j0 in range(0, nk, TILE):
            ps[ty, tx] = p[z, i, j0 + tx] if i < n and j0 + tx < nk else float32(0)
            vs[ty, tx] = v[z, j0 + ty, c] if j0 + ty < nk and c < d else float32(0)
            cuda.syncthreads()
            for t in range(TILE):
                acc += ps[ty, t] * vs[t, tx]
            cuda.syncthreads()
        if i < n and c < d:
            o[z, i, c] = acc

    return qk, softmax, pv


def naive_forward(o, lse, q, k, v, kv_lens=None, causal=False, scale=None, s=None):
    """Three kernels with ``S`` in memory; ``s`` (float32 ``[batch * heads, seq_q, seq_k]``) may be
    given to reuse a buffer (the benchmarks do, so that allocation is not timed)."""
    _require(q, k, v, kv_lens)
    b, h, n, d = q.shape
    nk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qk, softmax, pv = _naive_kernels()
    z = b * h
    q3, k3, v3 = q.reshape(z, n, d), k.reshape(z, nk, d), v.reshape(z, nk, d)
    if s is None:
        s = cuda.device_array((z, n, nk), np.float32)
    qk[(-(-nk // TILE), -(-n // TILE), z), (TILE, TILE)](q3, k3, s, np.float32(scale))
    softmax[(n, z), SOFTMAX_THREADS](s, lse.reshape(z, n), _lens(kv_lens, b, nk), h, bool(causal))
    pv[(-(-d // TILE), -(-n // TILE), z), (TILE, TILE)](s, v3, o.reshape(z, n, d))


# ------------------------------------------------------------------------------------------------
# Online softmax, one thread per row


@functools.lru_cache(maxsize=None)
def _online_softmax_kernel():
    @cuda.jit
    def kernel(out, lse, x):
        r = cuda.grid(1)
        if r >= x.shape[0]:
            return
        m = float32(NEG_INF)
        ell = float32(0)
        for j in range(x.shape[1]):
            xj = x[r, j]
            if xj > m:  # a new max: what was summed so far is rescaled to it
                ell = ell * math.exp(m - xj) + float32(1)
                m = xj
            elif xj > NEG_INF:  # a masked (-inf) entry adds nothing; skipping it avoids exp(-inf + inf)
                ell += math.exp(xj - m)
        for j in range(x.shape[1]):
            out[r, j] = math.exp(x[r, j] - m) / ell if ell > 0 else float32(0)
        lse[r] = m + math.log(ell) if ell > 0 else float32(NEG_INF)

    return kernel


def online_softmax(out, lse, x, threads: int = 128):
    """Row softmax of ``x`` (float32 ``[rows, n]``) into ``out`` and the rows' log-sum-exp into ``lse``."""
    _online_softmax_kernel()[-(-x.shape[0] // threads), threads](out, lse, x)


# ------------------------------------------------------------------------------------------------
# Fused forward on CUDA cores


@functools.lru_cache(maxsize=None)
def fused_forward_kernel(head_dim: int, block_m: int, block_n: int):
    """The compiled fused forward for one head_dim and block shape (see the module docstring).

    Notebook 04.3's kernel with one change: K and V are read from shared memory 16 bytes at a time
    (``load4``), so that one shared-memory instruction feeds four multiply-adds instead of one (a
    warp's scalar shared loads, all of one broadcast address, issue at a quarter of the FMA rate).
    ``head_dim`` must be a multiple of 4.
    """
    if head_dim % 4:
        raise KernelLabArgumentError(f"head_dim must be a multiple of 4 (16-byte loads), got {head_dim}")
    D, BM, BN = head_dim, block_m, block_n

    @cuda.jit
    def kernel(o, lse, q, k, v, kv_lens, causal, scale):
        ks = cuda.shared.array((BN, D), float32)
        vs = cuda.shared.array((BN, D), float32)
        qr = cuda.local.array(D, float32)  # this thread's query row, pre-scaled
        acc = cuda.local.array(D, float32)  # its unnormalised output
        sc = cuda.local.array(BN, float32)  # its scores for the current key block
        b, h = cuda.blockIdx.y // q.shape[1], cuda.blockIdx.y % q.shape[1]
        t = cuda.threadIdx.x
        q0 = cuda.blockIdx.x * BM
        i = q0 + t
        n = q.shape[2]
        kv_len = kv_lens[b]
        row = i < n
        for c in range(D):
            qr[c] = q[b, h, i, c] * scale if row else float32(0)
            acc[c] = float32(0)
        m = float32(NEG_INF)
        ell = float32(0)
        # causal: keys after the block's last query are masked for every row of the block: skip them
        k_end = min(kv_len, q0 + BM) if causal else kv_len
        for j0 in range(0, k_end, BN):
            for idx in range(t, BN * D, BM):  # the whole block loads K and V tiles (zero past the end)
                r, c = idx // D, idx % D
                inside = j0 + r < kv_len
                ks[r, c] = k[b, h, j0 + r, c] if inside else float32(0)
                vs[r, c] = v[b, h, j0 + r, c] if inside else float32(0)
            cuda.syncthreads()
            if row:
                block_max = float32(NEG_INF)
                for jj in range(BN):
                    j = j0 + jj
                    s = float32(NEG_INF)
                    if j < kv_len and (not causal or j <= i):  # mask before the max
                        s = float32(0)
                        for c in range(0, D, 4):  # one 16-byte shared load feeds four multiply-adds
                            k0, k1, k2, k3 = load4(ks, (jj, c))
                            s += qr[c] * k0 + qr[c + 1] * k1 + qr[c + 2] * k2 + qr[c + 3] * k3
                    sc[jj] = s
                    block_max = max(block_max, s)
                m_new = max(m, block_max)
                if m_new > NEG_INF:  # else: nothing valid yet, and exp(-inf - -inf) would be NaN
                    alpha = math.exp(m - m_new)
                    ell *= alpha
                    for c in range(D):
                        acc[c] *= alpha
                    for jj in range(BN):
                        p = math.exp(sc[jj] - m_new)
                        ell += p
                        for c in range(0, D, 4):
                            v0, v1, v2, v3 = load4(vs, (jj, c))
                            acc[c] += p * v0
                            acc[c + 1] += p * v1
                            acc[c + 2] += p * v2
                            acc[c + 3] += p * v3
                    m = m_new
            cuda.syncthreads()
        if row:
            inv = float32(1) / ell if ell > 0 else float32(0)  # normalised once, at the end
            for c in range(D):
                o[b, h, i, c] = acc[c] * inv
            lse[b, h, i] = m + math.log(ell) if ell > 0 else float32(NEG_INF)

    return kernel


def fused_forward(o, lse, q, k, v, kv_lens=None, causal=False, scale=None, block_m=None, block_n=None):
    """Launch the fused forward (one block of ``block_m`` threads per ``block_m`` queries and head)."""
    _require(q, k, v, kv_lens)
    b, h, n, d = q.shape
    bm, bn = default_blocks(d)
    bm, bn = block_m or bm, block_n or bn
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    fused_forward_kernel(d, bm, bn)[(-(-n // bm), b * h), bm](o, lse, q, k, v, _lens(kv_lens, b, k.shape[2]),
                                                              bool(causal), np.float32(scale))


# ------------------------------------------------------------------------------------------------
# Backward on CUDA cores


@functools.lru_cache(maxsize=None)
def backward_kernels(head_dim: int, block_m: int, block_n: int):
    """``(delta, dkdv, dq)`` kernels for one head_dim and block shape."""
    D, BM, BN = head_dim, block_m, block_n

    @cuda.jit
    def delta(d_o, o, out):
        # out[z, i] = sum_c dO[z, i, c] * O[z, i, c]  (= sum_j P_ij dP_ij)
        i = cuda.grid(1)
        z = cuda.blockIdx.y
        if i < o.shape[1]:
            acc = float32(0)
            for c in range(D):
                acc += d_o[z, i, c] * o[z, i, c]
            out[z, i] = acc

    @cuda.jit
    def dkdv(dk, dv, q, k, v, d_o, lse, dlt, kv_lens, heads, causal, scale):
        # one thread per key row j: loops over the query blocks that can see it
        qs = cuda.shared.array((BM, D), float32)
        dos = cuda.shared.array((BM, D), float32)
        ls = cuda.shared.array(BM, float32)
        ds_ = cuda.shared.array(BM, float32)
        kr = cuda.local.array(D, float32)
        vr = cuda.local.array(D, float32)
        dkr = cuda.local.array(D, float32)
        dvr = cuda.local.array(D, float32)
        z = cuda.blockIdx.y
        t = cuda.threadIdx.x
        j0 = cuda.blockIdx.x * BN
        j = j0 + t
        n = q.shape[1]
        kv_len = kv_lens[z // heads]
        col = j < k.shape[1]
        for c in range(D):
            kr[c] = k[z, j, c] if col else float32(0)
            vr[c] = v[z, j, c] if col else float32(0)
            dkr[c] = float32(0)
            dvr[c] = float32(0)
        i_start = (j0 // BM) * BM if causal else 0  # queries before the block's first key never see it
        for i0 in range(i_start, n, BM):
            for idx in range(t, BM * D, BN):
                r, c = idx // D, idx % D
                inside = i0 + r < n
                qs[r, c] = q[z, i0 + r, c] if inside else float32(0)
                dos[r, c] = d_o[z, i0 + r, c] if inside else float32(0)
            for r in range(t, BM, BN):
                inside = i0 + r < n
                ls[r] = lse[z, i0 + r] if inside else float32(NEG_INF)
                ds_[r] = dlt[z, i0 + r] if inside else float32(0)
            cuda.syncthreads()
            if col and j < kv_len:
                for r in range(BM):
                    i = i0 + r
                    if ls[r] > NEG_INF and (not causal or j <= i):
                        s = float32(0)
                        dp = float32(0)
                        for c in range(D):
                            s += qs[r, c] * kr[c]
                            dp += dos[r, c] * vr[c]
                        p = math.exp(s * scale - ls[r])  # P recomputed from the saved lse
                        dsv = p * (dp - ds_[r])
                        for c in range(D):
                            dvr[c] += p * dos[r, c]
                            dkr[c] += dsv * qs[r, c]
            cuda.syncthreads()
        if col:
            for c in range(D):
                dk[z, j, c] = dkr[c] * scale
                dv[z, j, c] = dvr[c]

    @cuda.jit
    def dq(dq_, q, k, v, d_o, lse, dlt, kv_lens, heads, causal, scale):
        # one thread per query row i: loops over the key blocks it can see
        ks = cuda.shared.array((BN, D), float32)
        vs = cuda.shared.array((BN, D), float32)
        qr = cuda.local.array(D, float32)
        dor = cuda.local.array(D, float32)
        dqr = cuda.local.array(D, float32)
        z = cuda.blockIdx.y
        t = cuda.threadIdx.x
        q0 = cuda.blockIdx.x * BM
        i = q0 + t
        n = q.shape[1]
        kv_len = kv_lens[z // heads]
        row = i < n
        for c in range(D):
            qr[c] = q[z, i, c] if row else float32(0)
            dor[c] = d_o[z, i, c] if row else float32(0)
            dqr[c] = float32(0)
        li = lse[z, i] if row else float32(NEG_INF)
        di = dlt[z, i] if row else float32(0)
        k_end = min(kv_len, q0 + BM) if causal else kv_len
        for j0 in range(0, k_end, BN):
            for idx in range(t, BN * D, BM):
                r, c = idx // D, idx % D
                inside = j0 + r < kv_len
                ks[r, c] = k[z, j0 + r, c] if inside else float32(0)
                vs[r, c] = v[z, j0 + r, c] if inside else float32(0)
            cuda.syncthreads()
            if row and li > NEG_INF:
                for jj in range(BN):
                    jk = j0 + jj
                    if jk < kv_len and (not causal or jk <= i):
                        s = float32(0)
                        dp = float32(0)
                        for c in range(D):
                            s += qr[c] * ks[jj, c]
                            dp += dor[c] * vs[jj, c]
                        p = math.exp(s * scale - li)
                        dsv = p * (dp - di)
                        for c in range(D):
                            dqr[c] += dsv * ks[jj, c]
            cuda.syncthreads()
        if row:
            for c in range(D):
                dq_[z, i, c] = dqr[c] * scale

    return delta, dkdv, dq


def backward(dq, dk, dv, q, k, v, o, lse, d_o, kv_lens=None, causal=False, scale=None, block_m=None,
             block_n=None, delta_buffer=None):
    """dQ, dK, dV of attention from the forward's ``o`` and ``lse`` (three kernels, no atomics)."""
    _require(q, k, v, kv_lens)
    b, h, n, d = q.shape
    nk = k.shape[2]
    bm, bn = default_blocks(d)
    bm, bn = block_m or bm, block_n or bn
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    z = b * h
    delta, dkdv, dq_kernel = backward_kernels(d, bm, bn)
    r3 = lambda a, s: a.reshape(z, s, d)  # noqa: E731
    dlt = delta_buffer if delta_buffer is not None else cuda.device_array((z, n), np.float32)
    lens = _lens(kv_lens, b, nk)
    delta[(-(-n // 128), z), 128](r3(d_o, n), r3(o, n), dlt)
    args = (r3(q, n), r3(k, nk), r3(v, nk), r3(d_o, n), lse.reshape(z, n), dlt, lens, h, bool(causal),
            np.float32(scale))
    dkdv[(-(-nk // bn), z), bn](r3(dk, nk), r3(dv, nk), *args)
    dq_kernel[(-(-n // bm), z), bm](r3(dq, n), *args)
