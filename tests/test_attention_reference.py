"""kernel_lab.attention's NumPy side: the float64 references against first principles (softmax by
its definition, gradients by finite differences), the block-wise online algorithm against them at
every block size, and the memory-traffic model of notebook 04.1."""

import numpy as np
import pytest

from kernel_lab.attention import online, reference


def inputs(rng, b=2, h=2, n=13, d=8):
    return tuple(rng.standard_normal((b, h, n, d)) for _ in range(4))


def test_forward_is_softmax_by_its_definition():
    rng = np.random.default_rng(0)
    q, k, v, _ = inputs(rng)
    o, lse = reference.forward(q, k, v, scale=0.3)
    s = 0.3 * q[0, 1] @ k[0, 1].T
    p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(o[0, 1], p @ v[0, 1], rtol=1e-12)
    np.testing.assert_allclose(lse[0, 1], np.log(np.exp(s).sum(axis=1)), rtol=1e-12)


def test_masks_ragged_lengths_causal_and_empty_rows():
    rng = np.random.default_rng(1)
    q, k, v, _ = inputs(rng, b=3)
    lens = np.array([13, 5, 0])
    o, lse = reference.forward(q, k, v, kv_lens=lens, causal=True)
    # batch 1: query 9 sees keys 0..4 only (ragged), query 2 sees keys 0..2 (causal)
    o_short, _ = reference.forward(q[1:2, :, 9:10], k[1:2, :, :5], v[1:2, :, :5])
    np.testing.assert_allclose(o[1:2, :, 9:10], o_short, rtol=1e-12)
    o_causal, _ = reference.forward(q[1:2, :, 2:3], k[1:2, :, :3], v[1:2, :, :3])
    np.testing.assert_allclose(o[1:2, :, 2:3], o_causal, rtol=1e-12)
    assert (o[2] == 0).all() and np.isneginf(lse[2]).all()  # no valid key: 0 and -inf, never NaN
    assert np.isfinite(o).all()


def test_softmax_rows_of_huge_and_masked_values():
    x = np.array([[1e300, -1e300, 0.0], [-np.inf, -np.inf, -np.inf], [5.0, -np.inf, 5.0]])
    p, lse = reference.softmax_rows(x)
    np.testing.assert_array_equal(p, [[1, 0, 0], [0, 0, 0], [0.5, 0, 0.5]])
    assert lse[0] == 1e300 and np.isneginf(lse[1]) and lse[2] == pytest.approx(5 + np.log(2))


@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_finite_differences(causal):
    rng = np.random.default_rng(2)
    q, k, v, d_o = inputs(rng, b=2, h=1, n=6, d=4)
    lens = np.array([6, 4])
    grads = reference.backward(q, k, v, d_o, kv_lens=lens, causal=causal)

    def loss(q_, k_, v_):
        return float(np.sum(reference.forward(q_, k_, v_, kv_lens=lens, causal=causal)[0] * d_o))

    eps = 1e-6
    for which, g in enumerate(grads):
        for idx in [(0, 0, 0, 0), (1, 0, 3, 2), (0, 0, 5, 3), (1, 0, 5, 1)]:
            args = [q.copy(), k.copy(), v.copy()]
            args[which][idx] += eps
            up = loss(*args)
            args[which][idx] -= 2 * eps
            numeric = (up - loss(*args)) / (2 * eps)
            assert g[idx] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (which, idx)
    assert (grads[1][1, :, 4:] == 0).all() and (grads[2][1, :, 4:] == 0).all()  # padding keys get nothing


@pytest.mark.parametrize("block_n", [1, 3, 4, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_online_algorithm_at_every_block_size(block_n, causal):
    rng = np.random.default_rng(3)
    q, k, v, _ = inputs(rng, b=2, n=11)
    lens = np.array([11, 0])
    o, lse = reference.forward(q, k, v, kv_lens=lens, causal=causal)
    o2, lse2 = online.blocked_forward(q, k, v, kv_lens=lens, causal=causal, block_n=block_n)
    np.testing.assert_allclose(o2, o, atol=2e-6)
    np.testing.assert_allclose(np.where(np.isfinite(lse), lse2, 0), np.where(np.isfinite(lse), lse, 0), atol=2e-6)
    assert np.isneginf(lse2[1]).all() and (o2[1] == 0).all()


def test_online_softmax_matches_the_two_pass_softmax():
    rng = np.random.default_rng(4)
    x = (1e3 * rng.standard_normal((6, 21))).astype(np.float32)
    x[1] = -np.inf
    x[2, ::2] = -np.inf
    p, lse = online.online_softmax(x)
    p_ref, lse_ref = reference.softmax_rows(x.astype(np.float64))
    np.testing.assert_allclose(p, p_ref, atol=1e-6)
    assert np.isneginf(lse[1]) and np.allclose(lse[[0, 2, 3]], lse_ref[[0, 2, 3]], rtol=1e-6)


def test_every_mistake_changes_the_result():
    rng = np.random.default_rng(5)
    q, k, v, d_o = inputs(rng, b=2, n=11)
    lens = np.array([11, 7])
    k[1, :, 7:] = 50.0  # padding keys with huge scores: only then does a mask after the max show
    q += 1.0
    o, lse = online.blocked_forward(q, k, v, kv_lens=lens, causal=True, block_n=4)
    for mistake in online.MISTAKES:
        o2, lse2 = online.blocked_forward(q, k, v, kv_lens=lens, causal=True, block_n=4, block_m=4, mistake=mistake)
        with np.errstate(invalid="ignore"):
            assert not (np.allclose(o2, o, atol=1e-4) and np.allclose(lse2, lse, atol=1e-4)), mistake
    for mistake in online.BACKWARD_MISTAKES:
        wrong = online.backward_with_mistake(q, k, v, d_o, mistake=mistake, kv_lens=lens, causal=True)
        right = reference.backward(q, k, v, d_o, kv_lens=lens, causal=True)
        assert not all(np.allclose(a, b) for a, b in zip(wrong, right)), mistake


def test_traffic_model_and_where_s_stops_fitting():
    # S of one head at seq 4096 in float32 is 64 MiB; the naive version moves it four times
    n = 4096
    naive = reference.naive_traffic_bytes(1, 1, n, 64)
    assert naive == 4 * n * 64 * 4 + 4 * n * n * 4
    fused = reference.fused_traffic_bytes(1, 1, n, 64, block_m=64)
    assert fused < naive / 10
    assert reference.attention_flops(1, 1, n, 64) == 4 * n * n * 64
    assert reference.attention_flops(1, 1, n, 64, causal=True, backward=True) == 5 * n * n * 64
