"""The online-softmax attention algorithm in NumPy, block by block, right or with a classic mistake.

A fused kernel visits the keys ``block_n`` at a time and keeps, per query row, a running max ``m``,
a running normaliser ``l`` (the sum of ``exp(s - m)`` so far) and an unnormalised output ``acc``.
When a block raises the max from ``m`` to ``m_new``, everything summed so far was scaled by
``exp(-m)`` and must now be scaled by ``exp(-m_new)``: both ``l`` and ``acc`` are multiplied by
``alpha = exp(m - m_new)``. At the end ``O = acc / l`` (normalised once) and ``lse = m + log l``.

:func:`blocked_forward` follows those steps in float32, vectorised over the rows. With
``mistake=`` it makes one of the mistakes that the checks name (see ``MISTAKES``): the checks run
it to recognise a wrong kernel's output, and the tests use it as a wrong kernel.
"""

from __future__ import annotations

import numpy as np

from .reference import default_scale, key_mask

MISTAKES = {
    "normaliser_stale_max": "the normaliser l is not rescaled when the max grows (alpha computed after m was "
                            "updated, so it is exp(0) = 1 for l)",
    "normaliser_block_max": "the normaliser l is rescaled with this block's max, exp(m - max(block)), instead of "
                            "the new running max, exp(m - m_new)",
    "acc_not_rescaled": "the output accumulator is not multiplied by alpha = exp(m - m_new) when the max grows",
    "mask_after_max": "the running max includes masked scores (the mask is applied after the max)",
    "causal_strict": "the causal mask uses j < i: each query loses its own key (off by one)",
    "causal_plus_one": "the causal mask uses j <= i + 1: each query sees one future key (off by one)",
    "diagonal_block_skipped": "the causal block skip also skips the diagonal block (blocks that straddle the "
                              "diagonal must be computed, with the mask)",
    "lse_without_max": "lse = log(l), without the running max: lse must be m + log(l)",
    "lse_log2": "lse in base 2 (log2) where the natural log is expected",
    "not_normalised": "the output is never divided by l",
}


def blocked_forward(q, k, v, *, scale=None, kv_lens=None, causal=False, block_n=16, block_m=16,
                    mistake: str | None = None, dtype=np.float32):
    """``(O, lse)`` by the online softmax over key blocks, in ``dtype`` (see the module docstring).

    ``block_m`` only matters for ``mistake="diagonal_block_skipped"``.
    """
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}")
    scale = default_scale(q) if scale is None else scale
    q, k, v = (np.asarray(a).astype(dtype) for a in (q, k, v))
    b, h, sq, d = q.shape
    sk = k.shape[2]
    s_all = np.float32(scale) * np.einsum("bhid,bhjd->bhij", q, k).astype(dtype)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    if not causal and mistake in ("causal_strict", "causal_plus_one", "diagonal_block_skipped"):
        mistake = None  # mistakes of the causal mask change nothing without it
    if mistake == "causal_strict":
        allowed = key_mask(sq, sk, kv_lens, False, b) & (j < i)[None, None]
    elif mistake == "causal_plus_one":
        allowed = key_mask(sq, sk, kv_lens, False, b) & (j <= i + 1)[None, None]
    elif mistake == "diagonal_block_skipped":
        allowed = key_mask(sq, sk, kv_lens, True, b) & (j < (i // block_m) * block_m)[None, None]
    else:
        allowed = key_mask(sq, sk, kv_lens, causal, b)
    neg_inf = dtype(-np.inf)
    m = np.full((b, h, sq, 1), neg_inf, dtype)
    ell = np.zeros((b, h, sq, 1), dtype)
    acc = np.zeros((b, h, sq, d), dtype)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j0 in range(0, sk, block_n):
            s = s_all[..., j0:j0 + block_n]
            ok = np.broadcast_to(allowed[..., j0:j0 + block_n], s.shape)
            masked = np.where(ok, s, neg_inf)
            # mask_after_max: the max sees every score (in bounds of the tensor), the mask only zeroes p
            m_new = np.maximum(m, (s if mistake == "mask_after_max" else masked).max(axis=-1, keepdims=True))
            live = m_new > neg_inf  # rows that have seen a valid key: elsewhere exp(-inf - -inf) is NaN
            safe = np.where(live, m_new, dtype(0))
            alpha = np.where(live, np.exp(np.where(live, m - safe, dtype(0))), dtype(1)).astype(dtype)
            p = np.where(ok, np.exp(masked - safe), dtype(0)).astype(dtype)
            if mistake == "normaliser_stale_max":
                ell = ell + p.sum(-1, keepdims=True)
            elif mistake == "normaliser_block_max":
                bmax = masked.max(axis=-1, keepdims=True)
                wrong = np.exp(np.where(np.isfinite(bmax) & live, m - bmax, dtype(0)))
                ell = np.where(np.isfinite(m), wrong, dtype(1)) * ell + p.sum(-1, keepdims=True)
            else:
                ell = alpha * ell + p.sum(-1, keepdims=True)
            pv = np.einsum("bhij,bhjd->bhid", p, v[:, :, j0:j0 + block_n]).astype(dtype)
            acc = pv + (acc if mistake == "acc_not_rescaled" else alpha * acc)
            m = m_new
        empty = ell == 0
        out = np.where(empty, dtype(0), acc if mistake == "not_normalised" else acc / np.where(empty, 1, ell))
        log_l = np.log2(ell) if mistake == "lse_log2" else np.log(ell)
        lse = np.where(empty, neg_inf, log_l if mistake == "lse_without_max" else m + log_l)
    return out.astype(dtype), lse[..., 0].astype(dtype)


# ------------------------------------------------------------------------------------------------
# The register-tiled kernel's lanes (notebook 04.3's second exercise, ``attention.tiled``)

TILED_MISTAKES = {
    "row_max_per_lane": "each lane of a row group takes the max of its own keys only (no shfl_xor over the row "
                        "group): the lanes' partial l, their P values and their O columns use different maxima",
    "normaliser_partial": "the lanes' partial normalisers are not summed over the row group at the end: each "
                          "lane divides its O columns by its own share of l",
}


def tiled_forward(q, k, v, *, scale=None, kv_lens=None, causal=False, block_n=8, row_group=4,
                  mistake: str | None = None, layout: str = "strided"):
    """``(O, lse)`` in float64 as the register-tiled kernel computes them, lane by lane, with one of
    ``TILED_MISTAKES`` (``None``: the right result, up to rounding).

    The ``row_group`` lanes of a row share its keys (lane ``g`` owns the keys ``j`` with
    ``j % row_group == g``) and its output columns (lane ``g`` owns the columns ``c`` with
    ``(c // 4) % row_group == g``); each keeps its own running max, partial normaliser and
    accumulator; every lane reads the P of all the row's keys (written to shared memory) for its
    columns. ``block_n`` keys per tile (a multiple of ``row_group``).

    ``layout="mma"``: the quad of ``mma.sync``'s C fragment (``attention.flash``, 04.4): four lanes a
    row, lane ``t`` owning the keys and the output columns ``x`` with ``(x % 8) // 2 == t``.
    """
    if mistake is not None and mistake not in TILED_MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(TILED_MISTAKES)}")
    scale = default_scale(q) if scale is None else scale
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b, h, sq, d = q.shape
    sk = k.shape[2]
    g_n = row_group
    s_all = np.where(key_mask(sq, sk, kv_lens, causal, b), scale * np.einsum("bhid,bhjd->bhij", q, k), -np.inf)
    m = np.full((b, h, sq, g_n), -np.inf)
    ell = np.zeros((b, h, sq, g_n))
    acc = np.zeros((b, h, sq, g_n, d))
    if layout not in ("strided", "mma"):
        raise ValueError(f"layout must be 'strided' or 'mma', got {layout!r}")
    mma = layout == "mma"
    if mma and g_n != 4:
        raise ValueError("the mma layout has four lanes a row (row_group=4)")
    key_lane = (np.arange(sk) % 8) // 2 if mma else np.arange(sk) % g_n
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j0 in range(0, sk, block_n):
            s = s_all[..., j0:j0 + block_n]
            lanes = key_lane[j0:j0 + block_n]
            own = lanes[None, :] == np.arange(g_n)[:, None]  # [lane, key]: the lane's keys of the tile
            lane_max = np.where(own, s[..., None, :], -np.inf).max(-1)  # [b, h, i, lane]
            mx = lane_max if mistake == "row_max_per_lane" else np.broadcast_to(
                lane_max.max(-1, keepdims=True), lane_max.shape)
            m_new = np.maximum(m, mx)
            m_use = np.where(m_new > -np.inf, m_new, 0.0)  # no valid key yet: exp(-inf) = 0, no NaN
            alpha = np.exp(m - m_use)
            p = np.exp(s - m_use[..., lanes])  # each key's p, with the max of the lane that owns it
            ell = ell * alpha + np.where(own, p[..., None, :], 0.0).sum(-1)
            acc = acc * alpha[..., None] + np.einsum("bhij,bhjd->bhid", p, v[:, :, j0:j0 + block_n])[..., None, :]
            m = m_new
        total = ell if mistake == "normaliser_partial" else np.broadcast_to(ell.sum(-1, keepdims=True), ell.shape)
        col_lane = (np.arange(d) % 8) // 2 if mma else (np.arange(d) // 4) % g_n
        acc_own = np.take_along_axis(acc, col_lane[None, None, None, None, :], axis=3)[..., 0, :]
        l_own = total[..., col_lane]
        out = np.where(l_own > 0, acc_own / np.where(l_own > 0, l_own, 1.0), 0.0)
        lse = np.where(total[..., 0] > 0, m[..., 0] + np.log(total[..., 0]), -np.inf)  # lane 0 writes the lse
    return out, lse


# ------------------------------------------------------------------------------------------------
# Row softmax, one element at a time (notebook 04.2), and the backward pass, with their mistakes

SOFTMAX_MISTAKES = {
    "max_not_subtracted": "exp(x) is taken without subtracting the row's max: it overflows to inf for x > 88 "
                          "(float32), and inf / inf is NaN",
    "normaliser_stale_max": MISTAKES["normaliser_stale_max"],
    "lse_without_max": MISTAKES["lse_without_max"],
    "lse_log2": MISTAKES["lse_log2"],
}


def online_softmax(x, mistake: str | None = None, dtype=np.float32):
    """``(p, lse)`` of each row of ``x`` by the running max and normaliser, one element at a time,
    in ``dtype``; ``mistake`` is one of ``SOFTMAX_MISTAKES``. Rows with no finite entry give 0 and -inf."""
    if mistake is not None and mistake not in SOFTMAX_MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(SOFTMAX_MISTAKES)}")
    x = np.asarray(x).astype(dtype)
    neg_inf = dtype(-np.inf)
    m = np.full(x.shape[0], neg_inf, dtype)
    ell = np.zeros(x.shape[0], dtype)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if mistake == "max_not_subtracted":
            e = np.exp(x)
            ell = e.sum(axis=1)
            p = e / ell[:, None]
            return p.astype(dtype), np.log(ell).astype(dtype)
        for j in range(x.shape[1]):
            xj = x[:, j]
            new = xj > m
            alpha = np.where(new, np.exp(m - xj), dtype(1))
            if mistake == "normaliser_stale_max":
                alpha = np.ones_like(alpha)
            add = np.where(new, dtype(1), np.where(xj > neg_inf, np.exp(xj - m), dtype(0)))
            ell = (alpha * ell + add).astype(dtype)
            m = np.where(new, xj, m)
        empty = ell == 0
        p = np.where(empty[:, None], dtype(0), np.exp(x - m[:, None]) / np.where(empty, 1, ell)[:, None])
        log_l = np.log2(ell) if mistake == "lse_log2" else np.log(ell)
        lse = np.where(empty, neg_inf, log_l if mistake == "lse_without_max" else m + log_l)
    return p.astype(dtype), lse.astype(dtype)


BACKWARD_MISTAKES = {
    "delta_missing": "dS = P * dP: the term D_i = rowsum(dO * O) is not subtracted (dS = P * (dP - D))",
    "p_without_lse": "P recomputed as exp(S) without subtracting the saved lse (P = exp(S - lse))",
    "scale_missing": "dQ and dK miss the softmax scale (dQ = scale * dS K, dK = scale * dS^T Q)",
    "mask_missing": "the backward pass does not apply the mask (causal or key padding) when it recomputes P",
    "causal_off_by_one": "P recomputed with a causal mask that leaves out the diagonal (keys j < i, not j <= i)",
    "ds_times_v": "dQ = scale * dS V: dQ needs the keys, dQ = scale * dS K",
}


def backward_with_mistake(q, k, v, d_o, *, mistake: str, scale=None, kv_lens=None, causal=False):
    """``(dQ, dK, dV)`` in float64 with one of ``BACKWARD_MISTAKES`` (what a wrong kernel computes)."""
    from .reference import forward, probabilities, scores

    if mistake not in BACKWARD_MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(BACKWARD_MISTAKES)}")
    scale = default_scale(q) if scale is None else scale
    q, k, v, d_o = (np.asarray(a, np.float64) for a in (q, k, v, d_o))
    o, lse = forward(q, k, v, scale=scale, kv_lens=kv_lens, causal=causal)
    p, _, mask = probabilities(q, k, scale=scale, kv_lens=kv_lens, causal=causal)
    live = np.isfinite(lse)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        if mistake == "p_without_lse":
            p = np.where(mask & live, np.exp(scores(q, k, scale)), 0.0)
        elif mistake == "mask_missing":
            p = np.where(live, np.exp(scores(q, k, scale) - np.where(live, lse[..., None], 0.0)), 0.0)
        elif mistake == "causal_off_by_one" and causal:  # not causal: nothing to get wrong, P is right
            diagonal = np.eye(q.shape[2], k.shape[2], dtype=bool)
            p = np.where(~diagonal, p, 0.0)
    d_v = np.einsum("bhij,bhid->bhjd", p, d_o)
    d_p = np.einsum("bhid,bhjd->bhij", d_o, v)
    delta = 0.0 if mistake == "delta_missing" else np.sum(d_o * o, axis=-1, keepdims=True)
    d_s = p * (d_p - delta)
    sc = 1.0 if mistake == "scale_missing" else scale
    d_q = sc * np.einsum("bhij,bhjd->bhid", d_s, v if mistake == "ds_times_v" else k)
    return d_q, sc * np.einsum("bhij,bhid->bhjd", d_s, q), d_v
