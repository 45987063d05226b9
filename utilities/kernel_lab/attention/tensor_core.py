"""The fused attention forward with its two matrix products on tensor cores (cuBLASDx), GPU only.

The structure is the CUDA-core kernel's (``kernels.fused_forward``), one block per ``block_m``
queries of one head, with the two products handed to cuBLASDx's block-level ``Matmul``:

1. ``S = Q K^T``: ``MM1`` of size ``(block_m, block_n, head_dim)``, A = the Q tile (row-major, fp16
   in shared memory for the whole kernel), B = a K tile stored ``[block_n, head_dim]`` row by row,
   which is ``K^T`` in column-major order: no transpose needed. The fp32 result lands in a register
   fragment; each thread writes its values to a float32 ``S`` tile in shared memory, at the
   (row, column) that ``tensor_cores.fragments`` says each register holds;
2. the **row update** (a device function, notebook 04.4's exercise): per row, mask, scale, block
   max, new running max, ``alpha = exp(m - m_new)``, ``p = exp(s - m_new)`` written as fp16 to the
   ``P`` tile, ``l`` updated; ``alpha`` left in shared memory;
3. the output accumulator, a register fragment of ``MM2`` ``(block_m, head_dim, block_n)``, is
   multiplied by ``alpha`` of its row, and ``O += P V`` runs on the tensor cores (V tile row-major).

At the end each thread divides its registers by ``l`` of their row and stores them (float32 output),
and the first ``block_m`` threads write the LSE. Inputs are fp16 (``precision="float16"``) or bf16,
``[batch, heads, seq, head_dim]``; the accumulation is fp32, and P is rounded to the input format
before the second product (as in FlashAttention).

Shared memory at head_dim 128, block 64 x 32: Q 16 KiB, K and V 8 KiB each, P 4 KiB, S 8 KiB:
44 KiB, under the 48 KiB a kernel gets without opting in to more.

Masks follow :mod:`kernel_lab.attention.reference`: keys ``j < kv_lens[b]`` (checked by every
launcher, ``lengths``), causal with the top-left alignment of PyTorch's ``is_causal`` (``j <= i``),
and a query row with no valid key gets ``O = 0`` and ``lse = -inf`` (SDPA gives NaN there).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .lengths import kv_lens_on_device

NEG_INF = -math.inf


def row_update_reference():
    """The package's row update (notebook 04.4's exercise), as a Numba device function.

    ``row_update(sf, pv, m_s, l_s, a_s, r, j0, i, kv_len, causal, scale, block_n)``: row ``r`` of the
    float32 score tile ``sf`` (``[block_m, block_n]``, unscaled ``q.k``) for query ``i`` and keys
    ``j0 ..``; writes ``p`` as fp16 into ``pv[r * block_n + c]``, the running max ``m_s[r]``, the
    normaliser ``l_s[r]`` and the rescale factor ``a_s[r]``.
    """
    from numba import cuda, float32
    from numba.types import float16

    @cuda.jit(device=True, inline="always")
    def row_update(sf, pv, m_s, l_s, a_s, r, j0, i, kv_len, causal, scale, block_n):
        m = m_s[r]
        block_max = float32(NEG_INF)
        for c in range(block_n):
            j = j0 + c
            s = float32(NEG_INF)
            if j < kv_len and (not causal or j <= i):
                s = sf[r, c] * scale
            sf[r, c] = s  # masked before the max
            block_max = max(block_max, s)
        m_new = max(m, block_max)
        alpha = float32(1)
        ell = l_s[r]
        if m_new > NEG_INF:
            alpha = math.exp(m - m_new)
            ell *= alpha
            for c in range(block_n):
                p = math.exp(sf[r, c] - m_new)
                ell += p
                pv[r * block_n + c] = float16(p)
        else:
            for c in range(block_n):
                pv[r * block_n + c] = float16(0)
        m_s[r] = m_new
        l_s[r] = ell
        a_s[r] = alpha

    return row_update


@functools.lru_cache(maxsize=None)
def _build(head_dim: int, block_m: int, block_n: int, threads: int, precision: str, row_update):
    from numba import cuda, float32, uint16

    from ..tensor_cores import fragments
    from ..tensor_cores.toolchain import device_api
    from ..tensor_cores.precisions import matmul_precision

    nd, ndc = device_api()
    prec = matmul_precision(precision)
    common = dict(precision=prec, data_type="real", execution="Block", block_size=threads, static_block_dim=True,
                  alignment=(16, 16, 16))
    D, BM, BN, NT = head_dim, block_m, block_n, threads
    mm1 = nd.Matmul(size=(BM, BN, D), arrangement=("row_major", "col_major", "row_major"), **common)
    mm2 = nd.Matmul(size=(BM, D, BN), arrangement=("row_major", "row_major", "row_major"), **common)
    for mm in (mm1, mm2):
        if mm.block_size != NT:
            raise RuntimeError(f"cuBLASDx chose a block of {mm.block_dim}; expected {NT} threads")
    coords1, active1 = fragments.partition_functions(mm1)
    coords2, active2 = fragments.partition_functions(mm2)
    sizes = {"q": BM * D, "k": BN * D, "p": BM * BN, "v": BN * D}
    layouts = {"q": mm1.get_layout_smem_a(), "k": mm1.get_layout_smem_b(), "p": mm2.get_layout_smem_a(),
               "v": mm2.get_layout_smem_b()}
    for name, layout in layouts.items():
        if layout.cosize != sizes[name]:
            raise RuntimeError(f"cuBLASDx's {name} layout has {layout.cosize} elements; the loaders assume "
                               f"{sizes[name]} (plain row- or column-major)")
    F1, F2 = mm1.get_layout_rmem_c().size, mm2.get_layout_rmem_c().size
    Q0, K0 = 0, BM * D
    P0 = K0 + BN * D
    V0 = P0 + BM * BN
    TOTAL = V0 + BN * D
    VALUE = np.float16
    if precision == "bfloat16":
        from numba.cuda import types as cuda_types

        VALUE = cuda_types.bfloat16
    update = row_update or row_update_reference()

    def kernel(o, lse, q, k, v, kv_lens, causal, scale):
        bits = cuda.shared.array(TOTAL, uint16, alignment=16)
        sf = cuda.shared.array((BM, BN), float32)
        m_s = cuda.shared.array(BM, float32)
        l_s = cuda.shared.array(BM, float32)
        a_s = cuda.shared.array(BM, float32)
        vals = bits.view(VALUE)
        sq = ndc.make_tensor(vals[Q0:K0], mm1.get_layout_smem_a())
        sk = ndc.make_tensor(vals[K0:P0], mm1.get_layout_smem_b())
        sp = ndc.make_tensor(vals[P0:V0], mm2.get_layout_smem_a())
        sv = ndc.make_tensor(vals[V0:TOTAL], mm2.get_layout_smem_b())
        heads = q.shape[1]
        b, h = cuda.blockIdx.y // heads, cuda.blockIdx.y % heads
        t = cuda.threadIdx.x
        q0 = cuda.blockIdx.x * BM
        n = q.shape[2]
        kv_len = kv_lens[b]
        for idx in range(t, BM * D, NT):  # the Q tile, once (zero past the end)
            r, c = idx // D, idx % D
            bits[Q0 + idx] = q[b, h, q0 + r, c] if q0 + r < n else uint16(0)
        for r in range(t, BM, NT):
            m_s[r] = float32(NEG_INF)
            l_s[r] = float32(0)
        of = cuda.local.array(F2, float32)
        for x in range(F2):
            of[x] = float32(0)
        oacc = ndc.make_tensor(of, mm2.get_layout_rmem_c())
        sfr = cuda.local.array(F1, float32)
        k_end = min(kv_len, q0 + BM) if causal else kv_len
        for j0 in range(0, k_end, BN):
            for idx in range(t, BN * D, NT):  # K as K^T column-major, V row-major: both [BN, D] row by row
                r, c = idx // D, idx % D
                inside = j0 + r < kv_len
                bits[K0 + idx] = k[b, h, j0 + r, c] if inside else uint16(0)
                bits[V0 + idx] = v[b, h, j0 + r, c] if inside else uint16(0)
            cuda.syncthreads()
            for x in range(F1):
                sfr[x] = float32(0)
            sacc = ndc.make_tensor(sfr, mm1.get_layout_rmem_c())
            mm1.execute(sq, sk, sacc)  # S = Q K^T on the tensor cores
            if active1():
                for x in range(F1):
                    r, c = coords1(x)
                    sf[r, c] = sfr[x]
            cuda.syncthreads()
            for r in range(t, BM, NT):
                update(sf, vals[P0:V0], m_s, l_s, a_s, r, j0, q0 + r, kv_len, causal, scale, BN)
            cuda.syncthreads()
            if active2():
                for x in range(F2):
                    r, c = coords2(x)
                    of[x] *= a_s[r]  # the accumulator rescaled to the new max of its row
            mm2.execute(sp, sv, oacc)  # O += P V on the tensor cores
            cuda.syncthreads()
        if active2():
            for x in range(F2):
                r, c = coords2(x)
                if q0 + r < n:
                    ell = l_s[r]
                    o[b, h, q0 + r, c] = of[x] / ell if ell > 0 else float32(0)
        for r in range(t, BM, NT):
            if q0 + r < n:
                ell = l_s[r]
                lse[b, h, q0 + r] = m_s[r] + math.log(ell) if ell > 0 else float32(NEG_INF)

    return cuda.jit(kernel, launch_bounds=(NT, 1))


class TensorCoreAttention:
    """``o, lse = attention(q, k, v)`` on tensor cores: fp16 (or bf16) ``q, k, v``
    ``[batch, heads, seq, head_dim]`` in, float32 ``o`` and ``lse`` out (see the module docstring).

    ``row_update`` is a Numba device function with :func:`row_update_reference`'s signature (the
    learner's, in notebook 04.4); the first call compiles (cuBLASDx code generation: minutes the
    first time, cached on disk after).
    """

    def __init__(self, head_dim: int = 64, block_m: int = 64, block_n: int = 32, threads: int = 128,
                 precision: str = "float16", row_update=None):
        if head_dim not in (64, 128):
            raise ValueError(f"head_dim must be 64 or 128 (the tiles are sized for them), got {head_dim}")
        if precision not in ("float16", "bfloat16"):
            raise ValueError(f"precision must be float16 or bfloat16, got {precision!r}")
        self.head_dim, self.block_m, self.block_n, self.threads = head_dim, block_m, block_n, threads
        self.precision = precision
        self.dispatcher = _build(head_dim, block_m, block_n, threads, precision, row_update)

    def label(self) -> str:
        return f"{self.precision}, head_dim {self.head_dim}, blocks {self.block_m}x{self.block_n}, {self.threads} threads"

    def argument_types(self):
        """The Numba types of a launch (for compiling without a GPU: scripts/module04_offline_compile.py)."""
        from numba import types

        f32 = types.float32
        u16 = types.Array(types.uint16, 4, "C")
        return (types.Array(f32, 4, "C"), types.Array(f32, 3, "C"), u16, u16, u16,
                types.Array(types.int32, 1, "C"), types.boolean, f32)

    def _args(self, o, lse, q, k, v, kv_lens, causal, scale):
        from ..tensor_cores.toolchain import as_device

        q, k, v, o, lse = (as_device(x) for x in (q, k, v, o, lse))
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim != 4 or x.shape[3] != self.head_dim or np.dtype(x.dtype).itemsize != 2:
                raise ValueError(f"{name} must be a 16-bit [batch, heads, seq, {self.head_dim}] array, got "
                                 f"{x.dtype} {tuple(x.shape)}")
        if np.dtype(o.dtype) != np.float32 or tuple(o.shape) != tuple(q.shape):
            raise ValueError(f"o must be float32 of q's shape {tuple(q.shape)}, got {o.dtype} {tuple(o.shape)}")
        b, h, n, _ = q.shape
        kv_lens = kv_lens_on_device(kv_lens, b, k.shape[2])
        scale = 1.0 / math.sqrt(self.head_dim) if scale is None else scale
        grid = (-(-n // self.block_m), b * h)
        return grid, (o, lse, q.view(np.uint16), k.view(np.uint16), v.view(np.uint16), as_device(kv_lens),
                      bool(causal), np.float32(scale))

    def __call__(self, o, lse, q, k, v, kv_lens=None, causal=False, scale=None):
        grid, args = self._args(o, lse, q, k, v, kv_lens, causal, scale)
        self.dispatcher[grid, self.threads](*args)

    def launcher(self, o, lse, q, k, v, kv_lens=None, causal=False, scale=None):
        """A no-argument launch for ``kl.benchmark`` (arguments converted once, here)."""
        grid, args = self._args(o, lse, q, k, v, kv_lens, causal, scale)
        kern = self.dispatcher[grid, self.threads]
        return lambda: kern(*args)
