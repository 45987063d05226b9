"""Module 05's floating-point checks name each classic mistake, and pass a correct kernel.

Each wrong "kernel" below is a launcher whose output has exactly one classic mistake (most are
NumPy stand-ins written to the device output: quick, and precise about the mistake; two are real
CUDA kernels run in the simulator). Each test expects the check to fail with the mistake's named
hint (``kernel_lab.checks.quant_float.MISTAKES``); the correct package kernels must pass.
"""

import dataclasses

import numpy as np
import pytest

import kernel_lab as kl  # noqa: F401  (chooses the simulator before numba.cuda is imported)
from kernel_lab import CheckFailed
from kernel_lab.checks import quant_float as q
from kernel_lab.quant import float_kernels as fk
from kernel_lab.quant import fp8 as F
from kernel_lab.quant import microscaling as MX
from numba import cuda


def _key(key):
    return f"Hint ({key})"


def _host_encoder(fn):
    """A launcher writing ``fn(x_host)`` (uint8 codes) into the device output."""
    def launch(out, x):
        out.copy_to_device(np.ascontiguousarray(fn(x.copy_to_host()), np.uint8))
    return launch


def _host_decoder(fn):
    def launch(out, codes):
        out.copy_to_device(np.ascontiguousarray(fn(codes.copy_to_host()), np.float32))
    return launch


def _fails_with(key, check, *args, **kwargs):
    with pytest.raises(CheckFailed) as err:
        check(*args, seed=7, **kwargs)
    assert _key(key) in str(err.value), str(err.value)
    return str(err.value)


def _ties_away(x, f, saturate):
    # a tie nudged one float32 step away from zero rounds away from zero
    x = np.asarray(x, np.float32)
    tie = np.isin(np.abs(x), F.tie_points(f))
    with np.errstate(invalid="ignore"):
        away = np.nextafter(np.abs(x), np.float32(np.inf)) * np.sign(x)
    return F.encode(np.where(tie, away, x).astype(np.float32), f, saturate)


IEEE_E4M3 = dataclasses.replace(F.E4M3, name="E4M3 as IEEE", max_code=0x77, specials="ieee")


# ------------------------------------------------------------------------------------------------
# encode


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("saturate", [True, False])
def test_encode_ties_away_from_zero_is_named(fmt, saturate):
    _fails_with("ties_away", q.check_fp8_encode, _host_encoder(lambda x: _ties_away(x, F.get_format(fmt), saturate)),
                fmt, saturate)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_encode_without_saturation_is_named(fmt):
    _fails_with("no_saturation", q.check_fp8_encode, _host_encoder(lambda x: F.encode(x, fmt, False)), fmt, True)


def test_encode_e4m3_overflow_to_nan_in_saturating_mode_is_named():
    msg = _fails_with("no_saturation", q.check_fp8_encode, _host_encoder(lambda x: F.encode(x, "E4M3", False)),
                      "E4M3", True)
    assert "1.1111.111" in msg  # the NaN code is shown in binary


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_encode_saturating_in_non_saturating_mode_is_named(fmt):
    _fails_with("saturated_nosat", q.check_fp8_encode, _host_encoder(lambda x: F.encode(x, fmt, True)), fmt, False)


@pytest.mark.parametrize("saturate", [True, False])
def test_encode_e4m3_with_infinities_is_named(saturate):
    _fails_with("e4m3_infinity", q.check_fp8_encode, _host_encoder(lambda x: F.encode(x, IEEE_E4M3, saturate)),
                "E4M3", saturate)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_encode_flushing_subnormals_is_named(fmt):
    f = F.get_format(fmt)

    def flushed(x):
        c = F.encode(x, f, True)
        return np.where(np.abs(x) < f.min_normal, c & 0x80, c)

    _fails_with("subnormals_flushed", q.check_fp8_encode, _host_encoder(flushed), fmt, True)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_encode_losing_the_sign_of_zero_is_named(fmt):
    def unsigned_zero(x):
        c = F.encode(x, fmt, True)
        return np.where((c & 0x7F) == 0, 0, c)

    _fails_with("signed_zero", q.check_fp8_encode, _host_encoder(unsigned_zero), fmt, True)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_encode_with_the_bias_off_by_one_is_named(fmt):
    f = F.get_format(fmt)
    wrong = dataclasses.replace(f, bias=f.bias + 1)
    _fails_with("bias_off_by_one", q.check_fp8_encode, _host_encoder(lambda x: F.encode(x, wrong, True)), fmt, True)


def test_encode_nan_as_a_number_is_named():
    _fails_with("nan", q.check_fp8_encode,
                _host_encoder(lambda x: np.where(np.isnan(x), 0, F.encode(x, "E5M2", True))), "E5M2", True)


def test_encode_truncating_is_named():
    def truncate(x):
        # round towards zero: the largest code whose value does not exceed |x|
        c = F.encode(x, "E4M3", True)
        over = np.abs(F.decode(c, "E4M3")) > np.abs(x)
        return np.where(over & ~np.isnan(x) & ((c & 0x7F) > 0), c - 1, c)

    _fails_with("truncated", q.check_fp8_encode, _host_encoder(truncate), "E4M3", True)


def test_encode_unwritten_outputs_are_named():
    def half(out, x):
        h = x.copy_to_host()
        c = out.copy_to_host()
        c[: h.size // 2] = F.encode(h[: h.size // 2], "E4M3", True)
        out.copy_to_device(c)

    _fails_with("unwritten", q.check_fp8_encode, half, "E4M3", True)


@cuda.jit(device=True)
def _round_half_away(e, sig, M, BIAS, MAX_CODE, OVERFLOW_CODE):
    eff = max(e, 1 - BIAS)
    shift = 23 - M + eff - e
    if shift >= 25:
        return 0
    q_ = sig >> shift
    if sig & (1 << (shift - 1)):  # the mistake: any half or more rounds up, ties included
        q_ += 1
    code = ((eff + BIAS - 1) << M) + q_
    if code > MAX_CODE:
        code = OVERFLOW_CODE
    return code


@cuda.jit
def _encode_half_away_kernel(xbits, out, M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE):
    i = cuda.grid(1)
    if i < xbits.size:
        b = np.int64(xbits[i])
        sign = (b >> 31) << 7
        a = b & 0x7FFFFFFF
        if a > 0x7F800000:
            out[i] = np.uint8(sign | NAN_CODE)
        else:
            out[i] = np.uint8(sign | _round_half_away((a >> 23) - 127, (a & 0x7FFFFF) | 0x800000, M, BIAS, MAX_CODE,
                                                      OVERFLOW_CODE))


def test_a_real_kernel_rounding_ties_away_is_named():
    def launch(out, x):
        _encode_half_away_kernel[kl.blocks_for(x.size, 256), 256](x.view(np.uint32), out,
                                                                  *fk.encode_args("E4M3", True))

    _fails_with("ties_away", q.check_fp8_encode, launch, "E4M3", True)


@pytest.mark.parametrize("fmt,saturate", [("E4M3", True), ("E5M2", False)])  # all four: test_quant_float_reference
def test_encode_correct_kernel_passes(fmt, saturate, capsys):
    q.check_fp8_encode(lambda o, x: fk.fp8_encode(o, x, fmt, saturate), fmt, saturate, seed=3)
    assert "bit-exact" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# decode


@cuda.jit
def _decode_flushing_kernel(codes, outbits, M, BIAS, EXP_BITS, SPECIALS):
    i = cuda.grid(1)
    if i < codes.size:
        c = np.int64(codes[i])
        if (c >> M) & ((1 << EXP_BITS) - 1) == 0:
            outbits[i] = np.uint32(((c >> 7) & 1) << 31)  # the mistake: subnormals become zero
        else:
            outbits[i] = np.uint32(fk.decode_bits(c, M, BIAS, EXP_BITS, SPECIALS))


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_a_real_decoder_flushing_subnormals_is_named(fmt):
    def launch(out, codes):
        _decode_flushing_kernel[kl.blocks_for(codes.size, 256), 256](codes, out.view(np.uint32), *fk.decode_args(fmt))

    _fails_with("subnormals_flushed", q.check_fp8_decode, launch, fmt)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_decode_losing_the_sign_of_zero_is_named(fmt):
    _fails_with("signed_zero", q.check_fp8_decode,
                _host_decoder(lambda c: np.where(c == 0x80, np.float32(0), F.decode(c, fmt))), fmt)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_decode_with_the_bias_off_by_one_is_named(fmt):
    f = F.get_format(fmt)
    wrong = dataclasses.replace(f, bias=f.bias + 1)
    _fails_with("bias_off_by_one", q.check_fp8_decode, _host_decoder(lambda c: F.decode(c, wrong)), fmt)


def test_decode_e4m3_with_infinities_is_named():
    _fails_with("e4m3_infinity", q.check_fp8_decode, _host_decoder(lambda c: F.decode(c, IEEE_E4M3)), "E4M3")


def test_decode_e5m2_without_infinities_is_named():
    no_specials = dataclasses.replace(F.E5M2, specials="none")
    _fails_with("e5m2_specials", q.check_fp8_decode, _host_decoder(lambda c: F.decode(c, no_specials)), "E5M2")


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("per_thread", [1, 4])
def test_decode_correct_kernels_pass(fmt, per_thread, capsys):
    q.check_fp8_decode(lambda o, c: fk.fp8_decode(o, c, fmt, per_thread=per_thread), fmt, seed=5)
    assert "all 256 codes exact" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# block formats


def _nvfp4(mutate):
    """A host NVFP4 launcher whose packed codes and scales pass through ``mutate(x, packed, scales)``."""
    def launch(packed, scales, x, amax):
        xh = x.copy_to_host()
        p, s, _ = MX.nvfp4_quantize(xh, amax.copy_to_host()[0])
        p, s = mutate(xh, p, s)
        packed.copy_to_device(np.ascontiguousarray(p, np.uint8))
        scales.copy_to_device(np.ascontiguousarray(s, np.uint8))
    return launch


def _mx(mutate, elements="E2M1"):
    def launch(codes, scales, x):
        xh = x.copy_to_host()
        c, s = MX.mx_quantize(xh, elements)
        c, s = mutate(xh, c, s)
        codes.copy_to_device(np.ascontiguousarray(c, np.uint8))
        scales.copy_to_device(np.ascontiguousarray(s, np.uint8))
    return launch


def _nvfp4_with_scales(x, scale_fn):
    """NVFP4 of x with the block scales chosen by ``scale_fn(value) -> E4M3 codes``."""
    amax = np.float32(np.max(np.abs(x)))
    ts = MX.nvfp4_tensor_scale(amax)
    blocks = MX._blocks(x, 16)
    s = scale_fn((np.max(np.abs(blocks), axis=1) / np.float32(6)) / ts)
    denom = (F.decode(s, "E4M3") * ts).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(denom[:, None] > 0, blocks / denom[:, None], np.copysign(np.float32(0), blocks))
    codes = F.encode(scaled.astype(np.float32), "E2M1").ravel()[: x.size]
    return MX.pack_e2m1(codes), s


def _scale_up(v):
    c = F.encode(v, "E4M3")
    return np.where(F.decode(c, "E4M3") < v, c + 1, c).astype(np.uint8)


def _scale_down(v):
    c = F.encode(v, "E4M3")
    return np.where(F.decode(c, "E4M3") > v, c - 1, c).astype(np.uint8)


def test_nvfp4_scale_rounded_up_is_named():
    _fails_with("scale_rounded_up", q.check_nvfp4_quantize, _nvfp4(lambda x, p, s: _nvfp4_with_scales(x, _scale_up)))


def test_nvfp4_scale_rounded_down_is_named():
    _fails_with("scale_rounded_down", q.check_nvfp4_quantize,
                _nvfp4(lambda x, p, s: _nvfp4_with_scales(x, _scale_down)))


def test_nvfp4_swapped_packing_order_is_named():
    _fails_with("packing_order", q.check_nvfp4_quantize,
                _nvfp4(lambda x, p, s: (((p >> 4) | (p << 4)).astype(np.uint8), s)))


def test_nvfp4_ties_away_is_named():
    def away(x, p, s):
        codes = MX.unpack_e2m1(p, x.size)
        vals = np.abs(F.decode(codes, "E2M1"))
        denom = np.repeat(F.decode(s, "E4M3") * MX.nvfp4_tensor_scale(np.max(np.abs(x))), 16)[: x.size]
        with np.errstate(invalid="ignore", divide="ignore"):
            tie = np.isin(np.abs(x) / denom, F.tie_points("E2M1")) & (vals < 6)
        return MX.pack_e2m1(np.where(tie, codes + 1, codes)), s

    _fails_with("ties_away", q.check_nvfp4_quantize, _nvfp4(away))


def test_nvfp4_signed_zero_lost_is_named():
    def unsigned(x, p, s):
        codes = MX.unpack_e2m1(p, x.size)
        return MX.pack_e2m1(np.where(codes == 8, 0, codes)), s

    _fails_with("signed_zero", q.check_nvfp4_quantize, _nvfp4(unsigned))


def test_nvfp4_flushed_subnormal_elements_are_named():
    def flushed(x, p, s):
        codes = MX.unpack_e2m1(p, x.size)
        return MX.pack_e2m1(np.where((codes & 7) == 1, codes & 8, codes)), s

    _fails_with("subnormals_flushed", q.check_nvfp4_quantize, _nvfp4(flushed))


def test_nvfp4_wrong_last_partial_block_is_named():
    def last_block(x, p, s):
        if x.size % 16:
            s = s.copy()
            s[-1] = s[-1] + 1
        return p, s

    _fails_with("partial_block", q.check_nvfp4_quantize, _nvfp4(last_block))


def test_nvfp4_all_zero_tensor_needs_a_tensor_scale_of_1():
    # amax = 0: a kernel that keeps ts = amax / 2688 = 0 computes every scale as E4M3((0 / 6) / 0) = NaN
    # (its elements stay right: denom = NaN is not > 0, so they are signed zeros). Every other case passes.
    def unguarded(x, p, s):
        return p, (s if x.any() else np.full_like(s, F.E4M3.nan_code))

    msg = _fails_with("zero_tensor", q.check_nvfp4_quantize, _nvfp4(unguarded))
    assert "case all zeros" in msg and _key("scale_rounded_up") not in msg


def test_mx_scale_rounded_up_is_named():
    def ceil_scale(x, c, s):
        blocks = MX._blocks(x, 32)
        amax = np.max(np.abs(blocks), axis=1).astype(np.float64)
        with np.errstate(divide="ignore"):
            up = np.where(amax > 0, np.ceil(np.log2(amax / 6.0)) + 127, 0)
        s2 = np.clip(up, 0, 254).astype(np.uint8)
        scaled = np.ldexp(blocks, (127 - s2.astype(np.int32))[:, None]).astype(np.float32)
        return MX.pack_e2m1(F.encode(scaled, "E2M1").ravel()[: x.size]), s2

    _fails_with("scale_rounded_up", q.check_mx_quantize, _mx(ceil_scale), "E2M1")


@pytest.mark.parametrize("elements", ["E2M1", "E4M3"])
def test_mx_scale_not_clamped_at_0_is_named(elements):
    # blocks of tiny values: floor(log2(amax)) - emax + 127 < 0, which a kernel without the clamp stores
    # wrapped around in the uint8 (codes 0xF6, ...); every other case passes
    def unclamped(x, c, s):
        amax = np.max(np.abs(MX._blocks(x, 32)), axis=1)
        _, ex = np.frexp(amax)
        code = np.where(amax > 0, ex.astype(np.int64) - 1 - MX.EMAX[elements] + 127, 0)
        return c, np.minimum(code, 254).astype(np.uint8)  # a negative code wraps, as uint8(code) in a kernel

    msg = _fails_with("scale_not_clamped", q.check_mx_quantize, _mx(unclamped, elements), elements)
    assert "case tiny blocks" in msg and _key("scale_rounded_up") not in msg


def test_mx_all_zero_block_is_named_not_called_rounding():
    # amax 0: log2 is -inf, so a kernel without the amax == 0 case writes some other code there; no
    # rounding rule explains that
    def zero_block_wrong(x, c, s):
        amax = np.max(np.abs(MX._blocks(x, 32)), axis=1)
        return c, np.where(amax == 0, np.uint8(1), s).astype(np.uint8)

    msg = _fails_with("zero_block", q.check_mx_quantize, _mx(zero_block_wrong, "E2M1"), "E2M1")
    assert _key("scale_rounded_up") not in msg


def test_mxfp8_swapped_bytes_are_not_called_packing():
    # MXFP8 has one code per byte: a wrong code is reported element by element
    msg = _fails_with("subnormals_flushed", q.check_mx_quantize,
                      _mx(lambda x, c, s: (np.where((c & 0x78) == 0, c & 0x80, c).astype(np.uint8), s), "E4M3"),
                      "E4M3")
    assert _key("packing_order") not in msg


def test_block_format_correct_kernels_pass(capsys):
    q.check_nvfp4_quantize(fk.nvfp4_quantize, seed=11)
    q.check_mx_quantize(lambda c, s, x: fk.mx_quantize(c, s, x, "E2M1"), "E2M1", seed=11)
    q.check_mx_quantize(lambda c, s, x: fk.mx_quantize(c, s, x, "E4M3"), "E4M3", seed=11)
    out = capsys.readouterr().out
    assert out.count("bit-exact") == 3
    # the silent cases (NVFP4's tensor of zeros, MX's tiny blocks) are not counted: the notebooks store these lines
    assert "NVFP4 quantize: scales and packed codes bit-exact in all 10 cases" in out
    assert "MXFP4 quantize: scales and codes bit-exact in all 7 cases" in out
    assert "MXFP8 quantize: scales and codes bit-exact in all 7 cases" in out


# ------------------------------------------------------------------------------------------------
# 05.4's fast NVFP4 steps: scales of the wrong elements, quotients an ulp off, tiny tensors


def _nvfp4_elements(x, quotient):
    """NVFP4 of x with the right scales and each element's code from ``quotient(x, denom)``."""
    amax = np.float32(np.max(np.abs(x)))
    ts = MX.nvfp4_tensor_scale(amax)
    blocks = MX._blocks(x, 16)
    s = F.encode((np.max(np.abs(blocks), axis=1) / np.float32(6)) / ts, "E4M3")
    denom = (F.decode(s, "E4M3") * ts).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scaled = np.where(denom[:, None] > 0, quotient(blocks, denom[:, None]), np.copysign(np.float32(0), blocks))
    codes = F.encode(scaled.astype(np.float32), "E2M1").ravel()[: x.size]
    return MX.pack_e2m1(codes), s


def test_nvfp4_quotients_from_an_uncorrected_reciprocal_are_named():
    msg = _fails_with("reciprocal_ties", q.check_nvfp4_quantize,
                      _nvfp4(lambda x, p, s: _nvfp4_elements(x, lambda b, d: b * (np.float32(1) / d))))
    assert _key("ties_away") not in msg


def test_nvfp4_scales_from_straddling_windows_are_named():
    def straddle(x, p, s):  # block g's scale from x[4g .. 4g + 15]
        xs = np.concatenate([x, np.zeros(16, np.float32)])
        amax = np.float32(np.max(np.abs(x)))
        win = np.array([np.max(np.abs(xs[4 * g: 4 * g + 16])) for g in range(s.size)], np.float32)
        return p, F.encode((win / np.float32(6)) / MX.nvfp4_tensor_scale(amax), "E4M3")
    msg = _fails_with("block_elements", q.check_nvfp4_quantize, _nvfp4(straddle))
    assert "elements 4g .. 4g + 15" in msg


def test_nvfp4_scales_without_the_tensor_scale_are_named():
    def no_ts(x, p, s):
        return p, F.encode(np.max(np.abs(MX._blocks(x, 16)), axis=1) / np.float32(6), "E4M3")
    _fails_with("no_tensor_scale", q.check_nvfp4_quantize, _nvfp4(no_ts))


def test_nvfp4_elements_divided_by_the_block_scale_alone_are_named():
    def alone(x, p, s):
        sv = np.repeat(F.decode(s, "E4M3"), 16)[: x.size]
        with np.errstate(divide="ignore", invalid="ignore"):
            codes = F.encode(np.where(sv > 0, x / sv, np.copysign(np.float32(0), x)).astype(np.float32), "E2M1")
        return MX.pack_e2m1(codes), s
    _fails_with("denom_no_ts", q.check_nvfp4_quantize, _nvfp4(alone))


def test_nvfp4_reciprocals_outside_the_normal_range_are_named():
    def through_reciprocal(b, d):  # no fallback: 1 / d overflows for the tiny tensors' denominators
        return (b * (np.float32(1) / d)).astype(np.float32)

    def mutate(x, p, s):
        if np.max(np.abs(x)) >= 2.0**-100:
            return p, s
        return _nvfp4_elements(x, through_reciprocal)
    _fails_with("reciprocal_range", q.check_nvfp4_quantize, _nvfp4(mutate))

    def inf_ts(x, p, s):  # the scale through 1 / ts, infinite for the tinier tensor
        amax = np.float32(np.max(np.abs(x)))
        ts = MX.nvfp4_tensor_scale(amax)
        if ts >= 2.0**-125:
            return p, s
        with np.errstate(over="ignore", invalid="ignore"):
            v = (np.max(np.abs(MX._blocks(x, 16)), axis=1) / np.float32(6)) * (np.float32(1) / ts)
        return p, F.encode(v.astype(np.float32), "E4M3")
    _fails_with("ts_range", q.check_nvfp4_quantize, _nvfp4(inf_ts))


def test_nvfp4_lost_signs_are_named():
    def unsigned(x, p, s):
        pp, ss = _nvfp4_elements(x, lambda b, d: np.abs(b) / d)
        return pp, ss
    _fails_with("sign_lost", q.check_nvfp4_quantize, _nvfp4(unsigned))


# ------------------------------------------------------------------------------------------------
# 05.4's codes from the bits


def _codes(e2m1=None, e4m3=None):
    """A launcher writing the reference codes, the E2M1 ones through ``e2m1(x, codes)`` and the E4M3
    magnitude codes through ``e4m3(x, codes)`` where given."""
    def launch(out2, out4, x):
        xh = x.copy_to_host()
        with np.errstate(invalid="ignore"):
            c2, c4 = F.encode(xh, "E2M1"), F.encode(np.abs(xh), "E4M3")
        c2 = e2m1(xh, c2) if e2m1 else c2
        c4 = e4m3(xh, c4) if e4m3 else c4
        out2.copy_to_device(np.ascontiguousarray(c2, np.uint8))
        out4.copy_to_device(np.ascontiguousarray(c4, np.uint8))
    return launch


def test_codes_from_the_bits_pass_and_their_mistakes_are_named(capsys):
    q.check_codes_from_bits(_codes(), seed=3)
    assert "E2M1 and E4M3 codes of" in capsys.readouterr().out
    normal = lambda x: (np.abs(x) >= 1) & (np.abs(x) < 6)  # noqa: E731
    _fails_with("rebias", q.check_codes_from_bits,
                _codes(e2m1=lambda x, c: np.where(normal(x), c + 2, c).astype(np.uint8)))
    _fails_with("ties_down", q.check_codes_from_bits,
                _codes(e2m1=lambda x, c: np.where(np.isin(np.abs(x), F.tie_points("E2M1")) & (c & 1 == 0) & (c & 7 > 0),
                                                  c - 1, c).astype(np.uint8)))
    _fails_with("below_normal", q.check_codes_from_bits,
                _codes(e4m3=lambda x, c: np.where(np.abs(x) < 2.0**-6, 0, c).astype(np.uint8)))
    _fails_with("no_clamp", q.check_codes_from_bits,
                _codes(e2m1=lambda x, c: np.where(np.abs(x) >= 7, c ^ 0xF, c).astype(np.uint8)))
    _fails_with("e2m1_nan", q.check_codes_from_bits,
                _codes(e2m1=lambda x, c: np.where(np.isnan(x), c | 8, c).astype(np.uint8)))
    _fails_with("e2m1_sign", q.check_codes_from_bits, _codes(e2m1=lambda x, c: np.where(np.isnan(x), c, c & 7)))
    _fails_with("e4m3_nan", q.check_codes_from_bits, _codes(e4m3=lambda x, c: np.where(np.isnan(x), 0x7E, c)))
    _fails_with("not_done", q.check_codes_from_bits, _codes(e2m1=lambda x, c: np.zeros_like(c)))


def test_checks_refuse_what_they_cannot_check():
    with pytest.raises(Exception, match="E4M3 and E5M2"):
        q.check_fp8_encode(lambda o, x: None, "E2M1")
    with pytest.raises(Exception, match="E2M1"):
        q.check_mx_quantize(lambda c, s, x: None, "E9M9")


def test_a_stub_left_in_place_is_named():
    _fails_with("not_done", q.check_fp8_encode, _host_encoder(lambda x: np.zeros(x.size, np.uint8)), "E4M3", True)
    _fails_with("not_done", q.check_fp8_decode, _host_decoder(lambda c: np.zeros(c.size, np.float32)), "E5M2")
    _fails_with("not_done", q.check_mx_quantize,
                _mx(lambda x, c, s: (c, np.full_like(s, 127))), "E2M1")


def test_a_kernel_that_writes_nothing_is_named():
    _fails_with("unwritten", q.check_nvfp4_quantize, lambda packed, scales, x, amax: None)
