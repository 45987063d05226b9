"""Module 06: float64 references (GEMM, epilogues, quantize, softmax, im2col, int4 packing)."""

import numpy as np
import pytest

from kernel_lab.tensor_cores import references as ref
from kernel_lab.validate import KernelLabArgumentError


def test_gemm_float_and_exact_integer():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    np.testing.assert_allclose(ref.gemm(a.astype(np.float16), b.astype(np.float16)),
                               a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64))
    ai = np.full((2, 4096), 127, np.int8)
    bi = np.full((4096, 2), -128, np.int8)
    out = ref.gemm(ai, bi)
    assert out.dtype == np.int64 and out[0, 0] == 127 * -128 * 4096  # no int32/int8 overflow in the reference


def test_batched_gemm_broadcasts_a_shared_operand():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((1, 5, 2))
    out = ref.batched_gemm(a, b)
    assert out.shape == (3, 4, 2)
    np.testing.assert_allclose(out[2], a[2] @ b[0])


def test_linear_and_bias_activation_use_one_bias_per_row():
    acc = np.arange(6, dtype=np.float64).reshape(2, 3)
    c = np.ones((2, 3))
    bias = np.array([10.0, 20.0])
    np.testing.assert_allclose(ref.linear(acc, 2.0, 0.5, c, 3.0, bias), 2 * acc + 0.5 + 3 * bias[:, None])
    np.testing.assert_allclose(ref.bias_activation(acc - 3, bias * 0, "relu"), np.maximum(acc - 3, 0))
    x = np.linspace(-4, 4, 9)[None, :]
    np.testing.assert_allclose(ref.bias_activation(x, np.zeros(1), "sigmoid"), 1 / (1 + np.exp(-x)))
    g = ref.gelu_tanh(np.array([-10.0, 0.0, 10.0]))
    np.testing.assert_allclose(g, [0.0, 0.0, 10.0], atol=1e-12)
    with pytest.raises(KernelLabArgumentError, match="activation must be one of"):
        ref.bias_activation(x, np.zeros(1), "swish")


def test_quantize_rounds_half_up_clamps_and_inverts():
    acc = np.array([-1000, -3, -1, 0, 1, 3, 1000], dtype=np.int64)
    q = ref.quantize(acc, 0.5, 0)
    assert q.tolist() == [-128, -1, 0, 0, 1, 2, 127]  # -1.5 -> -1, 0.5 -> 1, 1.5 -> 2 (half up)
    q2 = ref.quantize(acc, 0.5, 10)
    assert q2.tolist() == [-128, 9, 10, 10, 11, 12, 127]
    x = np.arange(-50, 50)
    np.testing.assert_allclose(ref.dequantize(ref.quantize(x, 1.0, 3), 1.0, 3), x)
    with pytest.raises(KernelLabArgumentError, match="zero_point"):
        ref.quantize(acc, 1.0, 200)


def test_row_softmax_is_stable_and_normalised():
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]])
    p = ref.row_softmax(x, alpha=1.0)
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p.sum(axis=-1), 1.0)
    np.testing.assert_allclose(p[0], ref.row_softmax(np.array([[0.0, 1.0, 2.0]]))[0])
    np.testing.assert_allclose(ref.row_softmax(x, alpha=0.0), 1 / 3)


@pytest.mark.parametrize("padding", [0, 1, 2])
def test_conv_as_im2col_gemm_equals_direct_convolution(padding):
    rng = np.random.default_rng(padding)
    n, c, h, w, k, r, s = 2, 3, 6, 5, 4, 3, 3
    x = rng.standard_normal((n, c, h, w))
    wgt = rng.standard_normal((k, c, r, s))
    cols = ref.im2col(x, r, s, padding)
    oh, ow = ref.conv_output_shape(h, w, r, s, padding)
    assert cols.shape == (n * oh * ow, c * r * s)
    out = ref.conv_as_gemm_output(cols @ wgt.reshape(k, -1).T, n, k, oh, ow)
    np.testing.assert_allclose(out, ref.conv2d(x, wgt, padding), rtol=1e-12, atol=1e-12)


def test_im2col_rejects_filters_larger_than_the_image():
    with pytest.raises(KernelLabArgumentError, match="does not fit"):
        ref.im2col(np.zeros((1, 1, 2, 2)), 3, 3, 0)
    with pytest.raises(KernelLabArgumentError, match="channels"):
        ref.conv2d(np.zeros((1, 2, 4, 4)), np.zeros((1, 3, 3, 3)))


def test_int4_pack_unpack_round_trip_property():
    rng = np.random.default_rng(4)
    for trial in range(200):
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 17)))
        v = rng.integers(-8, 8, size=shape).astype(np.int8)
        p = ref.pack_int4(v)
        assert p.dtype == np.uint8 and p.shape == (shape[0], (shape[1] + 1) // 2)
        np.testing.assert_array_equal(ref.unpack_int4(p, shape[1]), v)


def test_int4_nibble_order_and_sign():
    p = ref.pack_int4(np.array([1, -1, -8, 7], dtype=np.int8))
    assert p.tolist() == [0xF1, 0x78]  # element 0 in the low nibble; -1 is 0xF
    with pytest.raises(KernelLabArgumentError, match=r"\[-8, 7\]"):
        ref.pack_int4(np.array([8]))
    with pytest.raises(KernelLabArgumentError, match="integers"):
        ref.pack_int4(np.array([0.5]))


def test_tf32_rounding_keeps_10_mantissa_bits():
    x = np.array([1.0, 1.0 + 2**-11, 1.0 + 2**-10, 1.0 + 3 * 2**-12, -1.0 - 2**-11], dtype=np.float32)
    y = ref.round_to_tf32(x)
    assert y.tolist() == [1.0, 1.0 + 2**-10, 1.0 + 2**-10, 1.0 + 2**-10, -1.0 - 2**-10]  # ties away from 0
    rng = np.random.default_rng(5)
    z = rng.standard_normal(10_000).astype(np.float32)
    rel = np.abs(ref.round_to_tf32(z).astype(np.float64) - z) / np.abs(z)
    assert rel.max() <= 2.0**-11


def test_flops_and_bytes():
    assert ref.gemm_flops(2, 3, 4, batch=5) == 240
    assert ref.gemm_bytes(4, 4, 4, 2, 4) == (16 + 16) * 2 + 16 * 4
