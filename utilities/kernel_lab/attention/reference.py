"""Attention in float64 NumPy: the references every attention check compares with.

Conventions shared by module 04's kernels, checks and references:

* tensors are ``[batch, heads, seq, head_dim]``, C-contiguous; ``scale`` multiplies the scores
  (``1 / sqrt(head_dim)`` unless said otherwise);
* ``kv_lens`` (int32 ``[batch]``, or None for "all keys") is the number of valid keys of each
  sequence of the batch (ragged lengths, a key-padding mask): key ``j`` of batch ``b`` takes part
  only if ``j < kv_lens[b]``; with ``causal``, also only if ``j <= i`` (query ``i``). That is the
  **top-left** alignment of PyTorch's ``is_causal=True`` (``torch.tril`` of an L x S matrix of ones):
  query ``i`` sees keys ``0 .. i`` whatever the number of keys. FlashAttention 2.1 and later align
  bottom-right instead when ``seq_q != seq_k`` (the last query sees every key); the two agree when
  the lengths are equal, which is every case the course times;
* ``kv_lens[b]`` lies in ``0 .. seq_k``; every launcher refuses anything else (``lengths``);
* a query row with **no** valid key (a batch entry with ``kv_lens[b] == 0``) has output 0 and
  log-sum-exp ``-inf``. That is a choice (PyTorch's SDPA returns NaN there), made so that padded
  batches never spread NaN into the next layer or into gradients; the checks enforce it;
* ``lse[b, h, i] = log(sum_j exp(s_ij))`` over the valid keys, natural logarithm, unscaled by
  anything else: the backward pass recomputes ``P = exp(S - lse)`` from it.
"""

from __future__ import annotations

import numpy as np


def key_mask(seq_q: int, seq_k: int, kv_lens=None, causal: bool = False, batch: int = 1) -> np.ndarray:
    """Boolean ``[batch, 1, seq_q, seq_k]``: True where query i may attend to key j."""
    i = np.arange(seq_q)[:, None]
    j = np.arange(seq_k)[None, :]
    allowed = np.ones((seq_q, seq_k), bool) if not causal else (j <= i)
    lens = np.full(batch, seq_k) if kv_lens is None else np.asarray(kv_lens).reshape(-1)
    return allowed[None, None] & (j[None, None] < lens[:, None, None, None])


def scores(q, k, scale) -> np.ndarray:
    """``S = scale * Q K^T`` in float64, ``[batch, heads, seq_q, seq_k]``."""
    return scale * np.einsum("bhid,bhjd->bhij", np.asarray(q, np.float64), np.asarray(k, np.float64))


def softmax_rows(x, axis: int = -1):
    """Softmax along ``axis`` in float64; ``-inf`` entries are masked; an all ``-inf`` row gives 0.

    Returns ``(p, lse)``: the probabilities and the log-sum-exp of each row (``-inf`` for a row with
    nothing in it). The max is subtracted first: ``exp`` of a float64 above ~709 overflows.
    """
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    empty = ~np.isfinite(m)
    m_safe = np.where(empty, 0.0, m)
    with np.errstate(invalid="ignore"):
        e = np.where(np.isneginf(x), 0.0, np.exp(x - m_safe))
    total = e.sum(axis=axis, keepdims=True)
    p = np.where(empty, 0.0, e / np.where(total == 0, 1.0, total))
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, 1.0, total)))
    return p, np.squeeze(lse, axis=axis)


def probabilities(q, k, *, scale, kv_lens=None, causal=False):
    """``(P, lse, mask)``: the attention weights in float64, their log-sum-exp and the key mask."""
    s = scores(q, k, scale)
    mask = key_mask(s.shape[2], s.shape[3], kv_lens, causal, batch=s.shape[0])
    p, lse = softmax_rows(np.where(mask, s, -np.inf))
    return p, lse, mask


def forward(q, k, v, *, scale=None, kv_lens=None, causal=False):
    """Attention forward in float64: ``(O, lse)`` with ``O = softmax(scale Q K^T + mask) V``."""
    scale = default_scale(q) if scale is None else scale
    p, lse, _ = probabilities(q, k, scale=scale, kv_lens=kv_lens, causal=causal)
    return np.einsum("bhij,bhjd->bhid", p, np.asarray(v, np.float64)), lse


def backward(q, k, v, d_o, *, scale=None, kv_lens=None, causal=False):
    """Gradients ``(dQ, dK, dV)`` of ``sum(O * dO)`` in float64, the way a fused kernel computes them.

    ``P = exp(S - lse)`` (recomputed, never stored); ``dV = P^T dO``; ``dP = dO V^T``;
    ``D_i = sum_d dO_id O_id`` (equal to ``sum_j P_ij dP_ij``); ``dS = P * (dP - D)``;
    ``dQ = scale dS K``; ``dK = scale dS^T Q``. Fully masked rows have ``P = 0``: no gradient.
    """
    scale = default_scale(q) if scale is None else scale
    q, k, v, d_o = (np.asarray(a, np.float64) for a in (q, k, v, d_o))
    p, _, _ = probabilities(q, k, scale=scale, kv_lens=kv_lens, causal=causal)
    o = np.einsum("bhij,bhjd->bhid", p, v)
    d_v = np.einsum("bhij,bhid->bhjd", p, d_o)
    d_p = np.einsum("bhid,bhjd->bhij", d_o, v)
    delta = np.sum(d_o * o, axis=-1, keepdims=True)
    d_s = p * (d_p - delta)
    d_q = scale * np.einsum("bhij,bhjd->bhid", d_s, k)
    d_k = scale * np.einsum("bhij,bhid->bhjd", d_s, q)
    return d_q, d_k, d_v


def default_scale(q) -> float:
    return 1.0 / float(np.sqrt(np.shape(q)[-1]))


# ------------------------------------------------------------------------------------------------
# Sizes of the terms (what the tolerances are relative to; see kernel_lab.check)


def score_magnitude(q, k, scale) -> np.ndarray:
    """``scale * |Q| |K|^T``: the size of the products behind each score."""
    return abs(scale) * np.einsum("bhid,bhjd->bhij", np.abs(np.asarray(q, np.float64)), np.abs(np.asarray(k, np.float64)))


def output_magnitude(q, k, v, *, scale=None, kv_lens=None, causal=False) -> np.ndarray:
    """``P |V|``: the size of the terms behind each output element (P is non-negative)."""
    scale = default_scale(q) if scale is None else scale
    p, _, _ = probabilities(q, k, scale=scale, kv_lens=kv_lens, causal=causal)
    return np.einsum("bhij,bhjd->bhid", p, np.abs(np.asarray(v, np.float64)))


def gradient_magnitudes(q, k, v, d_o, *, scale=None, kv_lens=None, causal=False):
    """The term sizes behind dQ, dK, dV: the formulas of :func:`backward` with every operand and
    every difference replaced by sums of absolute values."""
    scale = default_scale(q) if scale is None else scale
    q, k, v, d_o = (np.abs(np.asarray(a, np.float64)) for a in (q, k, v, d_o))
    p, _, _ = probabilities(q, k, scale=scale, kv_lens=kv_lens, causal=causal)
    d_v = np.einsum("bhij,bhid->bhjd", p, d_o)
    d_p = np.einsum("bhid,bhjd->bhij", d_o, v)
    delta = np.einsum("bhij,bhij->bhi", p, d_p)[..., None]
    d_s = p * (d_p + delta)
    return (abs(scale) * np.einsum("bhij,bhjd->bhid", d_s, k), abs(scale) * np.einsum("bhij,bhid->bhjd", d_s, q),
            d_v)


# ------------------------------------------------------------------------------------------------
# Memory traffic and work (notebook 04.1's model, used by the benchmarks too)


def naive_traffic_bytes(batch, heads, seq, head_dim, itemsize=4) -> int:
    """Bytes the three-kernel attention moves: QK^T writes S, softmax reads S and writes P, PV
    reads P; plus Q, K, V read once and O written once (ideal caching inside each GEMM)."""
    bh = batch * heads
    qkvo = 4 * bh * seq * head_dim * itemsize
    s = bh * seq * seq * itemsize
    return int(qkvo + 4 * s)


def fused_traffic_bytes(batch, heads, seq, head_dim, block_m, itemsize=4, l2_reuse=True) -> int:
    """Bytes the fused kernel moves from memory: Q and O once, the LSE once, and K and V either once
    (``l2_reuse``: the query blocks of one head run at about the same time and find one head's K
    and V, ``2 seq head_dim itemsize`` bytes, in L2) or once per block of ``block_m`` queries (the
    upper bound when nothing is reused)."""
    bh = batch * heads
    kv_reads = 1 if l2_reuse else -(-seq // block_m)
    return int(bh * (2 * seq * head_dim * itemsize + 2 * kv_reads * seq * head_dim * itemsize + 4 * seq))


def attention_flops(batch, heads, seq, head_dim, causal=False, backward=False) -> float:
    """Matrix-product flops of attention: 4 s^2 d per head forward (two products), 2.5x that for
    the backward pass (five products, FlashAttention's count); causal halves both."""
    f = 4.0 * batch * heads * seq * seq * head_dim
    if backward:
        f *= 2.5
    return f / 2 if causal else f
