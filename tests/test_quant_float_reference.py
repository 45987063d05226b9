"""The floating-point references of module 05 against ml_dtypes, and the package's kernels against them.

* encode: every float16 bit pattern (65,536 inputs: every tie of E4M3, E5M2 and E2M1 is a float16)
  and the float32 neighbours of every tie, in both modes, bit-exact with ml_dtypes;
* decode: every code, bit-exact (NaN as NaN);
* the reference kernels (float_kernels) in the simulator, on every tie and boundary, bit-exact with
  the NumPy references, and the device functions' Python bodies on all 65,536 float16 inputs;
* NVFP4 and MX: the scale rules on hand-computed cases, packing order, partial blocks, round trips.
"""

import numpy as np
import pytest

import kernel_lab as kl  # noqa: F401
from kernel_lab.quant import float_kernels as fk
from kernel_lab.quant import fp8 as F
from kernel_lab.quant import microscaling as MX
from numba import cuda

ALL_HALVES = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
MODES = [("E4M3", True), ("E4M3", False), ("E5M2", True), ("E5M2", False), ("E2M1", True)]


def _same_codes(got, want, x, fmt):
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan]), np.flatnonzero(got != want)[:5]
    if F.get_format(fmt).nan_code is not None:
        assert F.is_nan_code(got[nan], fmt).all()


@pytest.mark.parametrize("fmt,saturate", MODES)
def test_encode_matches_ml_dtypes_on_every_float16(fmt, saturate):
    with np.errstate(invalid="ignore"):
        _same_codes(F.encode(ALL_HALVES, fmt, saturate), F.encode_oracle(ALL_HALVES, fmt, saturate), ALL_HALVES, fmt)


@pytest.mark.parametrize("fmt,saturate", MODES)
def test_encode_matches_ml_dtypes_next_to_every_tie(fmt, saturate):
    x = F.boundary_inputs(fmt)
    with np.errstate(invalid="ignore"):
        _same_codes(F.encode(x, fmt, saturate), F.encode_oracle(x, fmt, saturate), x, fmt)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E2M1"])
def test_decode_matches_ml_dtypes_on_every_code(fmt):
    f = F.get_format(fmt)
    codes = np.arange(1 << f.bits, dtype=np.uint8)
    want = codes.view(f.ml_dtypes_type()).astype(np.float32)
    got = F.decode(codes, f)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got.view(np.uint32)[ok], want.view(np.uint32)[ok])  # -0.0 included


def test_the_formats_facts():
    assert (F.E4M3.max_value, F.E4M3.min_normal, F.E4M3.min_subnormal) == (448.0, 2.0**-6, 2.0**-9)
    assert (F.E5M2.max_value, F.E5M2.min_normal, F.E5M2.min_subnormal) == (57344.0, 2.0**-14, 2.0**-16)
    assert F.E2M1.max_value == 6.0
    assert F.decode(np.array([0x7F, 0xFF, 0x7E], np.uint8), "E4M3")[2] == 448.0
    assert np.isnan(F.decode(np.array([0x7F, 0xFF], np.uint8), "E4M3")).all()
    assert np.isinf(F.decode(np.array([0x7C, 0xFC], np.uint8), "E5M2")).all()
    # ties to even at the top: 464 (448 + half a step) stays 448; just above it overflows
    assert F.encode(np.float32([464, 464.00003]), "E4M3", False).tolist() == [0x7E, 0x7F]
    assert F.encode(np.float32([np.inf, -np.inf]), "E4M3", True).tolist() == [0x7E, 0xFE]
    assert F.encode(np.float32([np.inf, 61440, 61439]), "E5M2", False).tolist() == [0x7C, 0x7C, 0x7B]
    assert F.encode(np.float32([-0.0, -1e-30]), "E4M3").tolist() == [0x80, 0x80]
    assert F.encode(np.float32([0.25, 0.75, 2.5, 5.0, 100.0]), "E2M1").tolist() == [0, 2, 4, 6, 7]


SIM_ONLY = pytest.mark.skipif(not kl.on_simulator(), reason="device functions are callable from Python only in "
                              "the simulator (on a GPU, scripts/gpu_module05_float_probe.py runs every float16)")


@SIM_ONLY
@pytest.mark.parametrize("fmt,saturate", MODES[:4])
def test_encode_device_function_body_on_every_float16(fmt, saturate):
    # The device function's Python body (what the simulator runs), element by element, on all 65,536.
    body = fk.encode_bits.fn
    args = fk.encode_args(fmt, saturate)
    bits = ALL_HALVES.view(np.uint32).astype(np.int64)
    got = np.fromiter((body(int(b), *args) for b in bits), np.int64, bits.size).astype(np.uint8)
    _same_codes(got, F.encode(ALL_HALVES, fmt, saturate), ALL_HALVES, fmt)


@pytest.mark.parametrize("fmt,saturate", MODES[:4])
@pytest.mark.parametrize("per_thread", [1, 4])
def test_encode_kernels_in_the_simulator_on_every_tie(fmt, saturate, per_thread):
    x = F.boundary_inputs(fmt)[:-1]  # an odd length: the four-per-thread kernel's tail is used
    out = cuda.device_array(x.size, np.uint8)
    fk.fp8_encode(out, cuda.to_device(x), fmt, saturate, per_thread=per_thread)
    _same_codes(out.copy_to_host(), F.encode(x, fmt, saturate), x, fmt)


@SIM_ONLY
def test_e2m1_value_encoder_agrees_with_the_bit_encoder():
    # encode_value (frexp) is what the block kernels use; on float16 inputs it must equal encode().
    body = fk.encode_value.fn
    x = ALL_HALVES[np.isfinite(ALL_HALVES)][::7]
    got = np.array([body(np.float32(v), 1, 1, 7, 3) for v in x], np.uint8)
    assert np.array_equal(got, F.encode(x, "E2M1"))
    got8 = np.array([body(np.float32(v), 3, 7, 0x7E, 7) for v in x], np.uint8)
    assert np.array_equal(got8, F.encode(x, "E4M3", True))


# ------------------------------------------------------------------------------------------------
# block formats


def test_packing_order_is_low_nibble_first_and_odd_lengths_pad_zero():
    assert MX.pack_e2m1([1, 2, 3]).tolist() == [0x21, 0x03]
    assert MX.unpack_e2m1(np.array([0x21, 0x03], np.uint8), 3).tolist() == [1, 2, 3]


def test_mx_scale_rule_rounds_down_and_saturates():
    # amax 6 -> 2**(2-2) = 1; amax 7.9 -> floor(log2 7.9) = 2 -> 1 as well, so 7.9 saturates to 6
    assert MX.mx_scale_codes(np.float32([6.0, 7.9, 8.0, 0.0, 448.0]), "E2M1").tolist() == [127, 127, 128, 0, 133]
    assert MX.mx_scale_codes(np.float32([448.0, 500.0, 1e-45]), "E4M3").tolist() == [127, 127, 0]
    codes, s = MX.mx_quantize(np.float32([7.9, 1.0]), "E2M1")
    assert s.tolist() == [127] and MX.unpack_e2m1(codes, 2).tolist() == [7, 2]


def test_nvfp4_scales_round_to_nearest_e4m3():
    # tensor amax 2688 -> tensor scale 1; a block of amax 6 * 3.1 wants scale 3.1 -> E4M3 3.0 (nearest)
    x = np.zeros(32, np.float32)
    x[0], x[16] = 2688.0, 6 * 3.1
    _, s, amax = MX.nvfp4_quantize(x)
    assert amax == 2688.0 and F.decode(s, "E4M3").tolist() == [448.0, 3.0]


@pytest.mark.parametrize("n", [1, 15, 17, 33, 95])
def test_block_kernels_match_the_references_including_dequantization(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-10, 10, n))).astype(np.float32)
    x[:: 5] = -0.0
    p, s, amax = MX.nvfp4_quantize(x)
    dp, ds = cuda.device_array(p.size, np.uint8), cuda.device_array(s.size, np.uint8)
    damax = cuda.to_device(np.array([amax], np.float32))
    fk.nvfp4_quantize(dp, ds, cuda.to_device(x), damax)
    assert np.array_equal(dp.copy_to_host(), p) and np.array_equal(ds.copy_to_host(), s)
    out = cuda.device_array(n, np.float32)
    fk.nvfp4_dequantize(out, cuda.to_device(p), cuda.to_device(s), damax)
    assert np.array_equal(out.copy_to_host().view(np.uint32), MX.nvfp4_dequantize(p, s, amax, n).view(np.uint32))
    for elements in ["E2M1", "E4M3"]:
        c, s = MX.mx_quantize(x, elements)
        dc, ds = cuda.device_array(c.size, np.uint8), cuda.device_array(s.size, np.uint8)
        fk.mx_quantize(dc, ds, cuda.to_device(x), elements)
        assert np.array_equal(dc.copy_to_host(), c) and np.array_equal(ds.copy_to_host(), s)
        out = cuda.device_array(n, np.float32)
        fk.mx_dequantize(out, cuda.to_device(c), cuda.to_device(s), elements)
        want = MX.mx_dequantize(c, s, n, elements)
        assert np.array_equal(out.copy_to_host().view(np.uint32), want.view(np.uint32))


def test_round_trips_bound_the_error_by_the_element_precision():
    x = MX.sample_data("weights", 4096, seed=1)
    # an element rounds to within half a step: relative 2**-(M+1) of its binade, at most
    assert np.max(np.abs(MX.mx_roundtrip(x, "E4M3") - x) / np.abs(x).max()) < 2.0**-3
    assert MX.relative_error(x, F.scaled_roundtrip(x, "E4M3")) < 0.04
    assert MX.relative_error(x, MX.nvfp4_roundtrip(x)) < MX.relative_error(x, MX.mx_roundtrip(x, "E2M1"))


def test_error_table_covers_every_format_of_the_module():
    table = MX.error_table(n=1 << 12)
    assert set(table) == {"INT8 (per tensor)", "INT4 g128", "ternary (2-bit packed)", "FP8 E4M3 (per tensor)",
                          "FP8 E5M2 (per tensor)", "NVFP4", "MXFP4", "MXFP8"}
    bits, w, a = table["NVFP4"]
    assert bits == pytest.approx(4.5, abs=0.01) and 0 < w < 0.2
    # outliers hurt the per-tensor integer format most, not the block-scaled ones
    assert table["INT8 (per tensor)"][2] > 4 * table["INT8 (per tensor)"][1]
    assert table["NVFP4"][2] < table["INT4 g128"][2]


def test_block_references_refuse_non_finite_inputs():
    with pytest.raises(Exception, match="finite"):
        MX.nvfp4_quantize(np.float32([1.0, np.nan]))
    with pytest.raises(Exception, match="E2M1"):
        MX.mx_quantize(np.float32([1.0]), "E3M3")


# ------------------------------------------------------------------------------------------------
# the notebooks' own solutions, exhaustively


def _notebook_device_functions(path, names):
    """The solution notebook's device functions ``names``, defined from its cells (definitions only)."""
    import ast
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / path, as_version=4)
    ns = {"cuda": cuda, "np": np, "int64": np.int64, "uint32": np.uint32}
    found = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                exec(compile(ast.Module([node], []), path, "exec"), ns)
                found[node.name] = ns[node.name]
    assert set(found) == set(names), f"{path} no longer defines {set(names) - set(found)}"
    return found


@SIM_ONLY
@pytest.mark.parametrize("fmt,saturate", MODES[:4])
def test_the_notebooks_encoder_is_exact_on_every_float16(fmt, saturate):
    fns = _notebook_device_functions("solutions/05-quantization/05.3-fp8-e4m3-e5m2.ipynb", {"fp8_encode_bits"})
    body, args = fns["fp8_encode_bits"].fn, fk.encode_args(fmt, saturate)
    bits = ALL_HALVES.view(np.uint32).astype(np.int64)
    got = np.fromiter((body(np.int64(b), *args) for b in bits), np.int64, bits.size).astype(np.uint8)
    with np.errstate(invalid="ignore"):
        _same_codes(got, F.encode_oracle(ALL_HALVES, fmt, saturate), ALL_HALVES, fmt)


@SIM_ONLY
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_the_notebooks_decoder_is_exact_on_every_code(fmt):
    fns = _notebook_device_functions("solutions/05-quantization/05.3-fp8-e4m3-e5m2.ipynb", {"fp8_decode_bits"})
    body, args = fns["fp8_decode_bits"].fn, fk.decode_args(fmt)
    got = np.array([body(np.int64(c), *args) for c in range(256)], np.int64).astype(np.uint32).view(np.float32)
    want = np.arange(256, dtype=np.uint8).view(F.get_format(fmt).ml_dtypes_type()).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got.view(np.uint32)[ok], want.view(np.uint32)[ok])


def _near_every_half():
    """Every float16 value as float32 and its float32 neighbours two ulps either side: every E2M1
    and E4M3 rounding midpoint, code boundary, subnormal step, and saturation point is among them."""
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    h = h[np.isfinite(h)]
    bits = h.view(np.int32)[:, None] + np.arange(-2, 3, dtype=np.int32)
    x = bits.ravel().view(np.float32)
    return np.concatenate([x[np.isfinite(x)], np.float32([np.inf, -np.inf, 1e30, -1e30, 6e4, 2 ** -140])])


@SIM_ONLY
def test_e2m1_and_e4m3_codes_from_bits_match_the_reference():
    """The fast form's device functions, called as Python functions in the simulator."""
    x = _near_every_half()
    want = F.encode(x, "E2M1", saturate=True)
    got = np.array([fk.e2m1_code(v) for v in x])
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(float(x[i]), int(got[i]), int(want[i])) for i in bad[:5]]
    want = F.encode(x, "E4M3", saturate=True)
    got = np.array([fk.e4m3_code(v) for v in x])
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(float(x[i]), int(got[i]), int(want[i])) for i in bad[:5]]
    codes = np.arange(0x7F)
    got = np.array([fk.e4m3_magnitude_value(np.int32(c)) for c in codes], np.float32)
    assert np.array_equal(got.view(np.uint32), F.decode(codes.astype(np.uint8), "E4M3").astype(np.float32).view(np.uint32))


def test_division_by_a_shared_reciprocal_is_correctly_rounded():
    """``divide(v, d, 1 / d)`` equals the IEEE quotient: random significands over wide exponents, and
    quotients at every E2M1 rounding midpoint and a few ulps either side (where a wrong last bit
    would change a code)."""
    rng = np.random.default_rng(5)
    d = (rng.uniform(1, 2, 300) * np.exp2(rng.integers(-60, 60, 300))).astype(np.float32)
    v = (rng.uniform(-2, 2, 300) * np.exp2(rng.integers(-60, 60, 300))).astype(np.float32)
    mids = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    dm = np.repeat(d[:40], mids.size * 9)
    qm = (np.repeat(np.tile(mids, 40), 9).view(np.int32) + np.tile(np.arange(-4, 5, dtype=np.int32), 40 * mids.size))
    vm = (qm.view(np.float32).astype(np.float64) * dm).astype(np.float32)

    @cuda.jit
    def kernel(v, d, out):
        i = cuda.grid(1)
        if i < v.size:
            out[i] = fk.divide(v[i], d[i], np.float32(1) / d[i])

    for vv, dd in ((v, d), (vm, dm), (np.float32([3e38, -3e38, 0.0, -0.0]), np.float32([1e-3, 1e-3, 3.0, 3.0]))):
        with np.errstate(over="ignore"):  # 3e38 / 1e-3 is infinite, as on the GPU
            want = vv / dd
            out = cuda.device_array(vv.size, np.float32)
            kernel[-(-vv.size // 256), 256](cuda.to_device(vv), cuda.to_device(dd), out)
        got = out.copy_to_host()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.flatnonzero(got != want)[:5]


def test_e2m1_nan_follows_ml_dtypes_everywhere():
    """E2M1 has no NaN; the course's rule is ml_dtypes' (0b1000 for a NaN whose sign bit is clear,
    0b0000 when it is set): the NumPy encoder, the kernels' e2m1_code and ml_dtypes agree on NaNs of
    both signs and several payloads."""
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF], np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        oracle = nans.astype(F.E2M1.ml_dtypes_type()).view(np.uint8) & 0xF
    assert oracle.tolist() == [8, 0, 8, 0, 8, 0]
    assert F.encode(nans, "E2M1").tolist() == oracle.tolist()
    out = cuda.device_array(nans.size, np.uint8)

    @cuda.jit
    def kernel(x, codes):
        i = cuda.grid(1)
        if i < x.size:
            codes[i] = np.uint8(fk.e2m1_code(x[i]))

    kernel[1, 32](cuda.to_device(nans), out)
    assert out.copy_to_host().tolist() == oracle.tolist()


def test_the_nvfp4_launcher_refuses_arrays_that_do_not_fit():
    x = cuda.to_device(np.ones(40, np.float32))
    amax = cuda.to_device(np.float32([1.0]))
    with pytest.raises(Exception, match="packed must be"):
        fk.nvfp4_quantize(cuda.device_array(19, np.uint8), cuda.device_array(3, np.uint8), x, amax)
    with pytest.raises(Exception, match="scales must be"):
        fk.nvfp4_quantize(cuda.device_array(20, np.uint8), cuda.device_array(2, np.uint8), x, amax)
    with pytest.raises(Exception, match="float32"):
        fk.nvfp4_quantize(cuda.device_array(20, np.uint8), cuda.device_array(3, np.uint8),
                          cuda.to_device(np.ones(40)), amax)


def test_fast_block_quantizers_match_the_references_on_ties_zeros_and_scales():
    """The fast kernels (NVFP4: a block of 16 per thread, the last block partial where x.size is not
    a multiple of 16; MX: quads) against the references, on
    every E2M1 rounding midpoint and its neighbours, signed zeros, and blocks spread over 2^+-12."""
    ties = [6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -0.0,
            0.2, 0.3, 0.7, 0.8, 1.2, 1.3, 1.7, 1.8, 2.4, 2.6, 3.4, 3.6, 4.9, 5.1, 5.9, -6]
    rng = np.random.default_rng(12)
    spread = (rng.standard_normal(1024) * np.repeat(np.exp2(rng.uniform(-12, 12, 64)), 16)).astype(np.float32)
    spread[::7] = -0.0
    for x in (np.array(ties * 4, np.float32), spread, spread[:1012]):  # 1012: quads, not whole blocks of 16
        n = x.size
        assert n % 4 == 0
        amax = np.float32(np.abs(x).max())
        dp, ds = cuda.device_array(n // 2, np.uint8), cuda.device_array(-(-n // 16), np.uint8)
        fk.nvfp4_quantize(dp, ds, cuda.to_device(x), cuda.to_device(np.float32([amax])))
        p, s, _ = MX.nvfp4_quantize(x)
        assert np.array_equal(dp.copy_to_host(), p) and np.array_equal(ds.copy_to_host(), s)
        dc, dsc = cuda.device_array(n // 2, np.uint8), cuda.device_array(-(-n // 32), np.uint8)
        fk.mx_quantize(dc, dsc, cuda.to_device(x), "E2M1")
        c, sc = MX.mx_quantize(x, "E2M1")
        assert np.array_equal(dc.copy_to_host(), c) and np.array_equal(dsc.copy_to_host(), sc)
        dc = cuda.device_array(n, np.uint8)
        fk.mx_quantize(dc, dsc, cuda.to_device(x), "E4M3")
        c, sc = MX.mx_quantize(x, "E4M3")
        assert np.array_equal(dc.copy_to_host(), c) and np.array_equal(dsc.copy_to_host(), sc)
