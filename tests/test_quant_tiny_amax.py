"""Issue 38 §3: quantizing a tensor whose largest magnitude is tiny, and E2M1's NaN.

Every scale derived from an amax (or a range's width) is floored at float32's smallest normal,
``kernel_lab.quant.integer.AMAX_FLOOR`` = 2^-126, where the amax is positive. Without the floor, a
tensor whose amax is a float32 subnormal gets an INT8 scale of 0 (quantizing divides by 0: the
simulator raises OverflowError, a GPU returns garbage) and an NVFP4 tensor scale of 0, replaced by 1,
so that the whole tensor comes back as zeros. Here, at amax = 2^-126 (the smallest normal), at three
subnormals (2^-130, 100 * 2^-149 and 2^-149, the smallest) and at 0, through the NumPy references and
through the package's kernels in the simulator: every scale is finite (and positive), the kernels give
the references' bits, and the round trip is within the format's error bound, which for a floored
scale is the bound of the floored scale (absolute, not relative to the tiny amax).

Not here: 05.2's INT4 kernels (``group_codes``, ``int4_quantize_rows_x8``) and 05.5's ternary kernels
are the notebooks' own code; the INT4 ones compute their scale inside the kernel and still divide
the unfloored amax (a notebook edit, see the issue's note). Ternary's absmean and MX's E8M0 scale need
no floor (see ``integer.AMAX_FLOOR`` and the ``microscaling`` module's text); they are checked with the
formats that do.
"""

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the kernels run in the simulator, at tiny sizes")

kl.setup(quiet=True)
from numba import cuda  # noqa: E402

from kernel_lab.quant import float_kernels as fk  # noqa: E402
from kernel_lab.quant import fp8 as F  # noqa: E402
from kernel_lab.quant import int8 as I8  # noqa: E402
from kernel_lab.quant import integer as ref  # noqa: E402
from kernel_lab.quant import microscaling as MX  # noqa: E402
from kernel_lab.quant import ternary  # noqa: E402
from kernel_lab.validate import KernelLabArgumentError  # noqa: E402

TINY = 2.0 ** -149  # float32's smallest subnormal: the step of every float32 below 2^-126
FLOOR = 2.0 ** -126  # integer.AMAX_FLOOR, written out: these tests must fail without it
AMAXES = [("smallest normal", 2.0 ** -126), ("subnormal 2^-130", 2.0 ** -130), ("subnormal 100 * 2^-149", 100 * TINY),
          ("smallest subnormal", TINY), ("zero", 0.0)]
PATTERN = np.array([1.0, -0.5, 0.3, -1.0, 0.7, 0.0, -0.0, 0.01, -0.26, 0.49, 0.9, -0.75, 0.125, 0.6, -0.05, 0.33,
                    -0.8, 0.2, 0.95, -0.4], np.float64)


def tensor(amax, n=len(PATTERN)):
    """float32 values in [-amax, amax] (amax attained; rounded to float32's subnormal steps)."""
    x = np.resize(PATTERN, n) * amax
    return x.astype(np.float32)


def finite_positive(s):
    s = np.asarray(s, np.float64)
    return bool(np.all(np.isfinite(s)) and np.all(s > 0))


def within(x, x_hat, bound, what):
    x = np.asarray(x, np.float64)
    x_hat = np.asarray(x_hat, np.float64)
    assert np.all(np.isfinite(x_hat)), f"{what}: non-finite values {x_hat[~np.isfinite(x_hat)][:4]}"
    err = np.abs(x - x_hat)
    bound = np.broadcast_to(np.asarray(bound, np.float64), err.shape)
    assert np.all(err <= bound), (f"{what}: error {err.max():.3e} past the bound {bound[np.argmax(err - bound)]:.3e} "
                                  f"at {np.argmax(err - bound)}")


def int_bound(s, qmax):
    """Half a step, plus the subnormal rounding of the scale (half a step of 2^-149, times |q| <= qmax)
    and of the product."""
    return np.asarray(s, np.float64) / 2 + (qmax + 1) * TINY


# --- the NumPy references --------------------------------------------------------------------------

def test_integer_references_keep_a_nonzero_scale_for_tiny_tensors():
    for label, amax in AMAXES:
        x = tensor(amax)
        what = f"amax {label}"
        # INT8 per tensor, float32 (the kernels' reference) and float64 (the error plot's)
        s = ref.int8_scale_f32(np.max(np.abs(x)))
        assert finite_positive(s), f"{what}: INT8 scale {s}"
        within(x, ref.int8_dequantize_f32(ref.int8_quantize_f32(x, s), s), int_bound(s, 127), f"{what}, INT8")
        s64 = ref.int8_absmax_scale(x)
        assert finite_positive(s64), f"{what}: INT8 float64 scale {s64}"
        within(x, ref.int8_absmax_roundtrip(x), int_bound(s64, 127), f"{what}, INT8 float64")
        # INT8 per row
        q, srow = ref.int8_per_row_f32(x.reshape(2, -1))
        assert finite_positive(srow), f"{what}: per-row scales {srow}"
        within(x.reshape(2, -1), ref.int8_dequantize_f32(q, srow[:, None]), int_bound(srow[:, None], 127),
               f"{what}, INT8 per row")
        # INT4 groups (a group of 8 here: two groups a row)
        x2 = x.reshape(2, -1)
        s4 = ref.int4_group_scales_f32(x2, group=8)
        assert finite_positive(s4), f"{what}: INT4 scales {s4}"
        packed = ref.int4_pack(ref.int4_quantize_f32(x2, s4, group=8))
        within(x2, ref.int4_dequantize_f32(packed, s4, x2.shape[1], group=8),
               int_bound(np.repeat(s4, 8, axis=1)[:, : x2.shape[1]], 8), f"{what}, INT4")
        s4_64 = max(float(np.max(np.abs(x))), FLOOR) / 7 if amax else 1.0
        within(x, ref.int4_group_roundtrip(x, group=128), int_bound(s4_64, 8), f"{what}, INT4 float64")
        # UINT8 from a range [lo, hi] that contains the tensor
        lo, hi = np.float32([-amax]), np.float32([0.95 * amax])
        sa, zp = ref.affine_params_f32(lo, hi)
        assert finite_positive(sa), f"{what}: affine scale {sa}"
        xr = np.clip(x, lo[0], hi[0])
        within(xr, ref.affine_dequantize_f32(ref.affine_quantize_f32(xr, sa, zp), sa, zp), sa + 256 * TINY,
               f"{what}, UINT8 affine")
        # ternary (no floor: the mean is the scale, no division by a constant)
        st = ref.ternary_scale_f32(x)
        assert finite_positive(st), f"{what}: ternary scale {st}"
        w_hat = ref.ternary_unpack(ref.ternary_pack(ref.ternary_quantize_f32(x, st)), x.size).astype(np.float32) * st
        within(x, w_hat, np.maximum(float(st) / 2, np.abs(x.astype(np.float64)) - float(st)) + TINY,
               f"{what}, ternary")


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_scaled_fp8_reference_keeps_a_nonzero_scale_for_tiny_tensors(fmt):
    f = F.get_format(fmt)
    for label, amax in AMAXES:
        x = tensor(amax)
        s = float(np.float32(max(float(np.max(np.abs(x))), FLOOR) / f.max_value)) if amax else 1.0
        rel = 2.0 ** -(f.man_bits + 1) * (1 + 2.0 ** -20)  # half a step, and the float32 quotient's rounding
        within(x, F.scaled_roundtrip(x, fmt), rel * np.abs(x.astype(np.float64)) + f.min_subnormal / 2 * s * 1.001,
               f"amax {label}, scaled {fmt}")


def nvfp4_bound(x, amax):
    """An element's error at most its block's amax / 4 (an E2M1 half step at the top is a sixth of the
    largest, and the scale's own E4M3 rounding), plus the absolute floor of the format: a block scale
    below half of E4M3's smallest subnormal times the smallest tensor scale (2^-126 / 2688) is 0."""
    return np.abs(x.astype(np.float64)).max(initial=0.0) / 4 + 6 * 2.0 ** -10 * FLOOR / 2688 + 4 * TINY


def mx_bound(x, elements):
    """At most the block's amax / 3 (saturation at 6 of quotients up to 8, or at 448 of up to 512), plus
    half the element's smallest step at the smallest E8M0 scale, 2^-127."""
    smallest = 0.5 if elements == "E2M1" else 2.0 ** -9
    return np.abs(x.astype(np.float64)).max(initial=0.0) / 3 + smallest / 2 * 2.0 ** -127


def test_block_format_references_do_not_flush_tiny_tensors():
    for label, amax in AMAXES:
        x = tensor(amax, 32)
        what = f"amax {label}"
        ts = MX.nvfp4_tensor_scale(np.float32(np.max(np.abs(x))))
        assert finite_positive(ts), f"{what}: NVFP4 tensor scale {ts}"
        within(x, MX.nvfp4_roundtrip(x), nvfp4_bound(x, amax), f"{what}, NVFP4")
        for elements in ("E2M1", "E4M3"):  # MX: the clamp at E8M0's code 0 is the floor (no change)
            within(x, MX.mx_roundtrip(x, elements), mx_bound(x, elements), f"{what}, MX {elements}")


# --- the kernels, in the simulator -------------------------------------------------------------------

def test_int8_kernels_floor_the_scale_of_tiny_tensors():
    """The per-tensor pipeline (absmax, then the notebook's int8_quantize through the launcher's floor),
    the tile kernels (the floor inside), and the per-token kernels: the references' bits."""
    n = 37
    for label, amax in AMAXES:
        x = tensor(amax, n)
        what = f"amax {label}"
        want_s = ref.int8_scale_f32(np.max(np.abs(x)))
        want_q = ref.int8_quantize_f32(x, want_s)
        dx = cuda.to_device(x)
        for form in ("grid-stride", "x4", "x4 absmax"):
            q, s, out = cuda.device_array(n, np.int8), cuda.device_array(1, np.float32), cuda.device_array(n, np.float32)
            if form == "grid-stride":
                I8.launch_int8_quantize(q, s, dx)
                I8.launch_int8_dequantize(out, q, s)
            elif form == "x4":
                I8.launch_int8_quantize_x4(q, s, dx, cuda.to_device(np.float32([np.max(np.abs(x))])))
                I8.launch_int8_dequantize_x4(out, q, s)
            else:
                I8.launch_int8_absmax_quantize_x4(q, s, dx)
                I8.launch_int8_dequantize_x4(out, q, s)
            got_s = s.copy_to_host()
            assert finite_positive(got_s), f"{what}, {form}: scale {got_s}"
            assert got_s.view(np.uint32)[0] == np.float32(want_s).view(np.uint32), f"{what}, {form}: {got_s} != {want_s}"
            assert np.array_equal(q.copy_to_host(), want_q), f"{what}, {form}: codes"
            within(x, out.copy_to_host(), int_bound(want_s, 127), f"{what}, {form}")
        rows = x[:36].reshape(3, 12)  # per token: 12 values a row (a multiple of 4, for the fast form)
        want_qr, want_sr = ref.int8_per_row_f32(rows)
        for launch in (ternary.launch_int8_rows, ternary.launch_int8_rows_fast):
            q, s = cuda.device_array(rows.shape, np.int8), cuda.device_array(3, np.float32)
            launch(q, s, cuda.to_device(rows))
            got_s = s.copy_to_host()
            assert finite_positive(got_s), f"{what}, {launch.__name__}: scales {got_s}"
            assert np.array_equal(got_s.view(np.uint32), want_sr.view(np.uint32)), f"{what}, {launch.__name__}"
            assert np.array_equal(q.copy_to_host(), want_qr), f"{what}, {launch.__name__}: codes"


def test_affine_kernels_floor_the_width_of_tiny_ranges():
    for label, amax in AMAXES:
        x = np.tile(tensor(amax, 12), (2, 1))
        lo = np.float32([-amax, -0.5 * amax])
        hi = np.float32([0.95 * amax, amax])
        xr = np.clip(x, lo[:, None], hi[:, None])
        want_s, want_z = ref.affine_params_f32(lo, hi)
        want_q = ref.affine_quantize_f32(xr, want_s[:, None], want_z[:, None])
        for launch in (I8.launch_affine_quantize_rows, I8.launch_affine_quantize_rows_x4):
            q, s, z = (cuda.device_array(x.shape, np.uint8), cuda.device_array(2, np.float32),
                       cuda.device_array(2, np.int32))
            launch(q, s, z, cuda.to_device(xr), cuda.to_device(lo), cuda.to_device(hi))
            got_s = s.copy_to_host()
            what = f"amax {label}, {launch.__name__}"
            assert finite_positive(got_s), f"{what}: scales {got_s}"
            assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32)), f"{what}: {got_s} != {want_s}"
            assert np.array_equal(z.copy_to_host(), want_z), what
            assert np.array_equal(q.copy_to_host(), want_q), f"{what}: codes"


def test_block_format_kernels_do_not_flush_tiny_tensors():
    """NVFP4 (the notebook's nvfp4_quantize_blocks behind the launcher's floor, the package's
    dequantizers with theirs) and MX, 37 values (two blocks and a partial one of NVFP4, a quad tail)."""
    for n in (37, 40):
        for label, amax in AMAXES:
            x = tensor(amax, n)
            what = f"amax {label}, n {n}"
            want_p, want_s, a = MX.nvfp4_quantize(x)
            p, s = cuda.device_array(want_p.size, np.uint8), cuda.device_array(want_s.size, np.uint8)
            damax = cuda.to_device(np.float32([a]))
            fk.nvfp4_quantize(p, s, cuda.to_device(x), damax)
            assert np.array_equal(s.copy_to_host(), want_s), f"{what}: NVFP4 scale codes"
            assert np.array_equal(p.copy_to_host(), want_p), f"{what}: NVFP4 codes"
            out = cuda.device_array(n, np.float32)
            fk.nvfp4_dequantize(out, p, s, damax)
            got = out.copy_to_host()
            assert np.array_equal(got.view(np.uint32), MX.nvfp4_dequantize(want_p, want_s, a, n).view(np.uint32)), what
            within(x, got, nvfp4_bound(x, amax), f"{what}, NVFP4 kernels")
            out = cuda.device_array(n, np.float32)
            fk.nvfp4_dequantize(out, p, s, cuda.to_device(np.float32([a])))  # an amax not floored by the quantizer
            assert np.array_equal(out.copy_to_host().view(np.uint32), got.view(np.uint32)), what
            for elements in ("E2M1", "E4M3"):
                want_c, want_e = MX.mx_quantize(x, elements)
                c, e = cuda.device_array(want_c.size, np.uint8), cuda.device_array(want_e.size, np.uint8)
                fk.mx_quantize(c, e, cuda.to_device(x), elements)
                assert np.array_equal(e.copy_to_host(), want_e) and np.array_equal(c.copy_to_host(), want_c), \
                    f"{what}, MX {elements}"
                out = cuda.device_array(n, np.float32)
                fk.mx_dequantize(out, c, e, elements)
                within(x, out.copy_to_host(), mx_bound(x, elements), f"{what}, MX {elements} kernels")


# --- E2M1 and NaN: one rule (ml_dtypes') in every encoder --------------------------------------------

NANS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF], np.uint32).view(np.float32)


def test_every_element_encoder_gives_a_nan_ml_dtypes_code():
    """E2M1 has no NaN: ml_dtypes gives 0b1000 for a NaN whose sign bit is clear and 0b0000 for one
    whose sign bit is set; E4M3's NaN is S.1111.111. The NumPy encoder, the kernels' bit encoders
    (e2m1_code, e4m3_code) and the general encode_value of 05.4's first kernels all follow it."""
    with np.errstate(invalid="ignore"):
        oracle = {fmt: NANS.astype(F.get_format(fmt).ml_dtypes_type()).view(np.uint8) & ((1 << F.get_format(fmt).bits) - 1)
                  for fmt in ("E2M1", "E4M3")}
    assert oracle["E2M1"].tolist() == [8, 0, 8, 0, 8, 0]
    assert oracle["E4M3"].tolist() == [0x7F, 0xFF] * 3
    for fmt in ("E2M1", "E4M3"):
        assert F.encode(NANS, fmt).tolist() == oracle[fmt].tolist(), fmt

    @cuda.jit
    def kernel(x, codes):
        i = cuda.grid(1)
        if i < x.size:
            codes[0, i] = np.uint8(fk.e2m1_code(x[i]))
            codes[1, i] = np.uint8(fk.encode_value(x[i], *fk.E2M1))
            codes[2, i] = np.uint8(fk.e4m3_code(x[i]))
            codes[3, i] = np.uint8(fk.encode_value(x[i], *fk.E4M3))

    out = cuda.device_array((4, NANS.size), np.uint8)
    with np.errstate(invalid="ignore"):
        kernel[1, 32](cuda.to_device(NANS), out)
    got = out.copy_to_host()
    for row, (name, fmt) in enumerate([("e2m1_code", "E2M1"), ("encode_value E2M1", "E2M1"), ("e4m3_code", "E4M3"),
                                       ("encode_value E4M3", "E4M3")]):
        assert got[row].tolist() == oracle[fmt].tolist(), name


def test_the_fp8_launchers_refuse_e2m1():
    """The FP8 encoders put the sign in bit 7; E2M1's is bit 3, and its NaN rule is not theirs: they
    refuse it rather than return +-6 for a NaN and lose every sign."""
    x = cuda.to_device(np.float32([1.0, -1.0, np.nan]))
    with pytest.raises(KernelLabArgumentError, match="8-bit formats"):
        fk.fp8_encode(cuda.device_array(3, np.uint8), x, "E2M1")
    with pytest.raises(KernelLabArgumentError, match="8-bit formats"):
        fk.fp8_decode(cuda.device_array(3, np.float32), cuda.device_array(3, np.uint8), "E2M1")
