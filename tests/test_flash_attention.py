"""The mma.sync attention kernels (``kernel_lab.attention.flash``, ``flash_backward``) and the warp
instructions they are made of (``kernel_lab.mma_ptx``), in the simulator, where ``mma_ptx`` computes
each instruction's documented fragment layout with warp shuffles: the forward and the backward
against the float64 reference at tiny sizes (ragged, causal, both m-tile layouts), the learner's
fragment softmax with its classic mistake named by the check, the check's model of the mma quads,
and the shapes and arguments the kernels refuse. On a GPU: scripts/probes/flash_attention.py and
scripts/probes/flash_backward.py, and notebooks 04.4 and 04.5."""

import math

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the mma.sync kernels are checked in the simulator "
                                "here; on a GPU the probes and notebooks 04.4/04.5 check them")

kl.setup(quiet=True)

from numba import cuda, float32  # noqa: E402

from kernel_lab import mma_ptx as ptx  # noqa: E402
from kernel_lab.attention import flash, flash_backward, online, reference  # noqa: E402
from kernel_lab.check import CheckFailed  # noqa: E402
from kernel_lab.checks import attention as checks  # noqa: E402


def _words(a16):
    """A [16, 16] or [k, n] float16 matrix as uint32 words of two neighbouring columns."""
    return a16.view(np.uint32)


def test_mma_matches_the_documented_fragment_layout():
    # A (16 x 16) and B (16 x 8) in the registers the PTX manual gives lane (g, t); D read back the same way
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    aw, btw = _words(a), _words(np.ascontiguousarray(b.T))  # rows of A; columns of B (k pairs)
    out = np.zeros((16, 8), np.float32)

    @cuda.jit
    def one_mma(out, aw, btw, c):
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        d0, d1, d2, d3 = ptx.mma_f16(aw[g, t], aw[g + 8, t], aw[g, t + 4], aw[g + 8, t + 4], btw[g, t], btw[g, t + 4],
                                     c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
        out[g, 2 * t], out[g, 2 * t + 1], out[g + 8, 2 * t], out[g + 8, 2 * t + 1] = d0, d1, d2, d3

    one_mma[1, 32](out, aw, btw, c)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_ldmatrix_gives_each_lane_its_fragment_plain_and_transposed():
    # four 8 x 8 tiles of 16-bit values, rows of 16 bytes; lane i points at row i % 8 of tile i // 8
    tiles = np.arange(4 * 64, dtype=np.uint16).reshape(4, 8, 8)
    out = np.zeros((2, 32, 4), np.uint32)

    @cuda.jit
    def load(out, flat):
        sm = cuda.shared.array(256, np.uint16)
        lane = cuda.threadIdx.x
        for x in range(8):
            sm[lane * 8 + x] = flat[lane * 8 + x]
        cuda.syncthreads()
        r = ptx.ldmatrix_x4(sm, lane * 8)
        rt = ptx.ldmatrix_x4_trans(sm, lane * 8)
        for x in range(4):
            out[0, lane, x] = r[x]
            out[1, lane, x] = rt[x]

    load[1, 32](out, tiles.reshape(-1))
    halves = out.view(np.uint16).reshape(2, 32, 4, 2)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for x in range(4):
            assert halves[0, lane, x].tolist() == [tiles[x, g, 2 * t], tiles[x, g, 2 * t + 1]]
            assert halves[1, lane, x].tolist() == [tiles[x, 2 * t, g], tiles[x, 2 * t + 1, g]]


def test_pack_and_exp2():
    word = int(ptx.pack_f16x2(1.0, -2.0))
    assert np.array([word], np.uint32).view(np.float16).tolist() == [1.0, -2.0]  # low half first
    assert ptx.exp2_approx(3.0) == 8.0 and ptx.exp2_approx(-math.inf) == 0.0


def _forward_case(d, n, kv, causal, **cfg):
    rng = np.random.default_rng(n + kv + causal)
    q, k, v = (rng.standard_normal((1, 1, n, d)).astype(np.float16) for _ in range(3))
    o = cuda.to_device(np.full((1, 1, n, d), np.nan, np.float32))
    lse = cuda.to_device(np.full((1, 1, n), np.nan, np.float32))
    flash.FlashAttention(head_dim=d, **cfg)(o, lse, cuda.to_device(q), cuda.to_device(k), cuda.to_device(v),
                                            np.array([kv], np.int32), causal=causal)
    ro, rl = reference.forward(*(x.astype(np.float64) for x in (q, k, v)), scale=1 / math.sqrt(d),
                               kv_lens=np.array([kv]), causal=causal)
    return o.copy_to_host(), lse.copy_to_host(), ro, rl


@pytest.mark.parametrize("m_tiles, causal", [(1, False), (2, True)], ids=["one m-tile", "two m-tiles, causal"])
def test_forward_matches_the_reference(m_tiles, causal):
    o, lse, ro, rl = _forward_case(64, 21, 18, causal, block_n=16, warps=2, m_tiles=m_tiles)
    assert np.abs(o - ro).max() < 2e-3  # P is rounded to fp16 before P V
    assert np.abs(lse - rl).max() < 1e-4


def test_forward_in_bfloat16():
    import ml_dtypes

    d, n = 64, 12
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 1, n, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = cuda.to_device(np.full((1, 1, n, d), np.nan, np.float32))
    lse = cuda.to_device(np.full((1, 1, n), np.nan, np.float32))
    fa = flash.FlashAttention(head_dim=d, block_n=16, warps=2, m_tiles=1, precision="bfloat16")
    fa(o, lse, *(cuda.to_device(x.view(np.uint16)) for x in (q, k, v)))
    ro, _ = reference.forward(*(x.astype(np.float64) for x in (q, k, v)))
    assert np.abs(o.copy_to_host() - ro).max() < 2e-2  # P rounded to bf16 (8 bits of mantissa)


def test_forward_with_no_keys_writes_zeros_and_minus_infinity():
    o, lse, _, _ = _forward_case(64, 9, 0, False, block_n=16, warps=2, m_tiles=1)
    assert (o == 0).all() and np.isneginf(lse).all()


@cuda.jit(device=True)
def _softmax_without_quad_shuffles(s, acc, m0, m1, l0, l1, scale_log2):
    neg = float32(-math.inf)
    mx0, mx1 = m0, m1
    for nt in range(len(s) // 4):  # the lane's own keys only: the mistake
        mx0 = max(mx0, max(s[nt * 4], s[nt * 4 + 1]))
        mx1 = max(mx1, max(s[nt * 4 + 2], s[nt * 4 + 3]))
    sub0 = float32(0) if mx0 == neg else mx0 * scale_log2
    sub1 = float32(0) if mx1 == neg else mx1 * scale_log2
    alpha0, alpha1 = ptx.exp2_approx(m0 * scale_log2 - sub0), ptx.exp2_approx(m1 * scale_log2 - sub1)
    sum0, sum1 = float32(0), float32(0)
    for nt in range(len(s) // 4):
        for e in range(4):
            s[nt * 4 + e] = ptx.exp2_approx(s[nt * 4 + e] * scale_log2 - (sub0 if e < 2 else sub1))
        sum0 += s[nt * 4] + s[nt * 4 + 1]
        sum1 += s[nt * 4 + 2] + s[nt * 4 + 3]
    for x in range(len(acc) // 4):
        acc[x * 4] *= alpha0
        acc[x * 4 + 1] *= alpha0
        acc[x * 4 + 2] *= alpha1
        acc[x * 4 + 3] *= alpha1
    return mx0, mx1, l0 * alpha0 + sum0, l1 * alpha1 + sum1


def test_the_check_names_a_row_max_not_shared_over_the_quad():
    fa = flash.FlashAttention(head_dim=64, block_n=16, warps=2, m_tiles=1, softmax=_softmax_without_quad_shuffles)
    with pytest.raises(CheckFailed, match="row max not shared"):
        checks.check_attention_forward(fa, name="mma.sync attention", head_dims=(64,), block_m=fa.block_m,
                                       block_n=fa.block_n, dtype=np.float16, fmt="float16", row_group="mma",
                                       seq=19, seed=1)


def test_the_quad_model_is_the_reference_without_a_mistake_and_differs_from_the_strided_one_with_it():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 1, 7, 16)) for _ in range(3))
    k[0, 0, 5] *= 6  # one key far above the others: the lanes' own maxima disagree
    want, _ = reference.forward(q, k, v)
    got, _ = online.tiled_forward(q, k, v, block_n=16, layout="mma")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    mma, _ = online.tiled_forward(q, k, v, block_n=16, layout="mma", mistake="row_max_per_lane")
    strided, _ = online.tiled_forward(q, k, v, block_n=16, mistake="row_max_per_lane")
    assert not np.allclose(mma, strided)
    with pytest.raises(ValueError, match="layout"):
        online.tiled_forward(q, k, v, layout="quad")


def test_backward_matches_the_reference():
    d, n, kv = 64, 9, 7
    rng = np.random.default_rng(5)
    q, k, v, d_o = (rng.standard_normal((1, 1, n, d)).astype(np.float16) for _ in range(4))
    f64 = [x.astype(np.float64) for x in (q, k, v, d_o)]
    lens = np.array([kv], np.int32)
    ro, rl = reference.forward(*f64[:3], scale=1 / math.sqrt(d), kv_lens=lens, causal=True)
    grads = [cuda.to_device(np.full(q.shape, np.nan, np.float32)) for _ in range(3)]
    flash_backward.FlashBackward(head_dim=d, warps=4)(
        *grads, *(cuda.to_device(x) for x in (q, k, v, ro.astype(np.float32), rl.astype(np.float32), d_o)), lens,
        causal=True)
    for got, want in zip(grads, reference.backward(*f64, scale=1 / math.sqrt(d), kv_lens=lens, causal=True)):
        assert np.abs(got.copy_to_host() - want).max() < 5e-3 * (1 + np.abs(want).max())


@pytest.mark.parametrize("bf16", [False, True], ids=["float16 dO", "bfloat16 dO"])
def test_the_backward_s_d_is_the_rowwise_dot_of_do_and_o(bf16):
    import ml_dtypes

    rng = np.random.default_rng(11)
    o = rng.standard_normal((1, 2, 3, 64)).astype(np.float32)
    d_o = rng.standard_normal(o.shape).astype(ml_dtypes.bfloat16 if bf16 else np.float16)
    delta = cuda.to_device(np.full(o.shape[:3], np.nan, np.float32))
    flash_backward._delta_kernel(bf16)[1, 256](delta, cuda.to_device(o), cuda.to_device(
        d_o.view(np.uint16) if bf16 else d_o))
    want = np.einsum("bhid,bhid->bhi", d_o.astype(np.float64), o)
    np.testing.assert_allclose(delta.copy_to_host(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, words", [
    (dict(head_dim=96), "head_dim must be 64 or 128"),
    (dict(head_dim=128, warps=2), "at least 4 warps"),
    (dict(head_dim=64, m_tiles=3), "m_tiles"),
    (dict(head_dim=64, precision="float32"), "precision"),
])
def test_forward_refuses_shapes_it_cannot_run(kwargs, words):
    with pytest.raises(ValueError, match=words):
        flash.FlashAttention(**kwargs)


def test_forward_refuses_bad_arguments():
    fa = flash.FlashAttention(head_dim=64, block_n=16, warps=2, m_tiles=1)
    q = cuda.to_device(np.zeros((1, 1, 4, 64), np.float16))
    o, lse = cuda.to_device(np.zeros((1, 1, 4, 64), np.float32)), cuda.to_device(np.zeros((1, 1, 4), np.float32))
    with pytest.raises(ValueError, match="scale must be positive"):
        fa(o, lse, q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="o must be float32"):
        fa(cuda.to_device(np.zeros((1, 1, 4, 64), np.float16)), lse, q, q, q)
    with pytest.raises(ValueError, match="q must be an array on the GPU"):
        fa(o, lse, np.zeros((1, 1, 4, 64), np.float16), q, q)
    with pytest.raises(ValueError, match="head_dim must be 64 or 128"):
        flash_backward.FlashBackward(head_dim=32)
