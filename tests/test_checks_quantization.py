"""Module 05's integer checks: each classic mistake, fed to its check, gets its message; right kernels pass.

Runs under the simulator. The right kernels are the package's (kernel_lab.quant: int8, int4, ternary, int8_gemm, w4a8); each wrong
kernel is one of them with one edit of its source (``mutant``), the mistake a learner makes.
"""

import inspect
import re
import textwrap

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="wrong kernels are fed to the checks in the simulator")

kl.setup(quiet=True)
from numba import cuda  # noqa: E402

from kernel_lab import CheckFailed  # noqa: E402
from kernel_lab.checks import quantization as checks  # noqa: E402
from kernel_lab.device import dp4a as dp4a_mod  # noqa: E402
from kernel_lab.reductions_gemm import scans  # noqa: E402
from kernel_lab.quant import integer as ref  # noqa: E402
from kernel_lab.quant import int8 as I8  # noqa: E402
from kernel_lab.quant import ternary  # noqa: E402
from kernel_lab.quant import int8_gemm  # noqa: E402
from kernel_lab.quant import w4a8  # noqa: E402
from kernel_lab.quant import w4a8_mma  # noqa: E402
from kernel_lab.quant import int4 as I4  # noqa: E402  (05.2's kernels, the notebook's names)

SIZES = [("block-1", 63), ("3 blocks+7", 199)]
SHAPES4 = [("1 x 1", (1, 1)), ("3 x 129", (3, 129)), ("2 x 301", (2, 301))]
GEMM = [("1 x 5 x 5", (1, 5, 5)), ("3 x 6 x 137", (3, 6, 137))]
# Tile kernels (simulator: blocks of 64 threads, a tile of 4 x 64 words = 1024 values): two whole
# tiles, a partial tile of 193 words and a tail of 3 values.
X4_SIZES = [("tiles+partial+3", 2 * 1024 + 193 * 4 + 3)]
ALIGNED4 = [("2 x 132", (2, 132)), ("2 x 4100", (2, 4100))]


def mutant(kernel, old, new=None, **extra_globals):
    """The kernel with ``old`` replaced by ``new`` in its source (which must contain it); ``old`` may
    be a list of (old, new) pairs."""
    fn = kernel.py_func
    src = textwrap.dedent(inspect.getsource(fn))
    for o, n in ([(old, new)] if new is not None else old):
        assert o in src, f"{o!r} is not in {fn.__name__}"
        src = src.replace(o, n)
    src = re.sub(r"@cuda\.jit(\(.*\))?\n", "", src)
    scope = dict(fn.__globals__, **extra_globals)
    exec(compile(src, f"<mutant of {fn.__name__}>", "exec"), scope)
    return cuda.jit(scope[fn.__name__])


def q8_given(kernel):
    def launch(q, s, x, amax):
        kernel[2, 64](x, amax, q, s)
    return launch


# --- the right kernels pass ----------------------------------------------------------------------

def test_right_kernels_pass(capsys):
    checks.check_int8_quantize(q8_given(I8.int8_quantize), sizes=SIZES)
    checks.check_int8_quantize(I8.launch_int8_quantize, given_amax=False, sizes=SIZES)
    checks.check_int8_dequantize(I8.launch_int8_dequantize, sizes=SIZES)
    checks.check_int8_quantize(I8.launch_int8_quantize_x4, sizes=SIZES + X4_SIZES)
    checks.check_int8_quantize(lambda q, s, x, a: I8.launch_int8_quantize_x4(q, s, x, a, fadd=True), sizes=X4_SIZES)
    checks.check_int8_quantize(I8.launch_int8_absmax_quantize_x4, given_amax=False, sizes=X4_SIZES)
    checks.check_int8_dequantize(I8.launch_int8_dequantize_x4, sizes=SIZES + X4_SIZES)
    checks.check_byte_value(I8.byte_value)
    checks.check_affine_rows(I8.launch_affine_quantize_rows)
    checks.check_int4_quantize(I4.launch_int4_quantize, shapes=SHAPES4)
    checks.check_int4_dequantize(I4.launch_int4_dequantize, shapes=SHAPES4)
    checks.check_int4_quantize(I4.launch_int4_quantize_rows, shapes=SHAPES4 + ALIGNED4)
    checks.check_int4_dequantize(I4.launch_int4_dequantize_tile4, shapes=SHAPES4 + ALIGNED4)
    checks.check_ternary_quantize(ternary.launch_ternary_quantize)
    checks.check_int8_rows(ternary.launch_int8_rows)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm, shapes=GEMM)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_warp, shapes=GEMM)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_dp4a, shapes=GEMM + [("2 x 3 x 64", (2, 3, 64))])
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_rows4, shapes=GEMM + [("6 x 3 x 64", (6, 3, 64))])
    checks.check_int8_gemm(int8_gemm.launch_int8_gemm, shapes=GEMM)
    checks.check_int8_gemm(int8_gemm.launch_dp4a_gemm, shapes=GEMM)
    checks.check_int8_gemm(int8_gemm.dp4a_warptile_launcher().checked, shapes=GEMM)
    checks.check_int8_gemm(int8_gemm.dp4a_warptile_launcher(w8a8=True).checked, epilogue=True, shapes=GEMM)
    checks.check_w4a8_gemm(w4a8.launch_w4a8_gemm, shapes=GEMM)
    checks.check_w4a8_gemm(w4a8.launch_w4a8_gemm_rows, shapes=GEMM + [("5 x 9 x 256", (5, 9, 256))])
    checks.check_w4a8_gemm(w4a8_mma.launch_w4a8_fast,
                           shapes=GEMM + [("5 x 9 x 256", (5, 9, 256)), ("1 x 9 x 256", (1, 9, 256))])
    # the fast forms, on their own paths (rows a multiple of 4 or 16) and on the fallback
    checks.check_affine_rows(I8.launch_affine_quantize_rows_x4)
    checks.check_affine_rows(I8.launch_affine_quantize_rows_x4, cols=2052)
    checks.check_int8_rows(ternary.launch_int8_rows_fast)
    checks.check_int8_rows(ternary.launch_int8_rows_fast, shapes=[("2 x 1028", (2, 1028)), ("4 x 64", (4, 64))])
    checks.check_ternary_quantize(ternary.launch_ternary_quantize_fast)
    checks.check_ternary_quantize(ternary.launch_ternary_quantize_fast,
                                  shapes=[("5 x 64", (5, 64)), ("3 x 48 (ties)", (3, 48)), ("2 x 4096", (2, 4096))])
    out = capsys.readouterr().out
    assert out.count("bit-exact") == 23 and out.count("correct for all") == 8, out
    assert "byte_value: right for all 256 byte values" in out


def test_the_fast_w4a8_kernels_have_the_bits_of_the_notebooks():
    """Nibbles x16 and the scale / 16 change no bit: the fast DP4A forms give the notebook kernel's outputs, on rows
    of whole 16-byte chunks and on rows that take the one-word path, with a weight-row count that
    leaves a warp's last rows empty."""
    from kernel_lab.quant import integer as qref

    rng = np.random.default_rng(8)
    for m, n, k in ((5, 9, 256), (2, 6, 136), (3, 7, 256), (1, 5, 256)):  # M = 1..3: T = M rows a pass
        wf = rng.standard_normal((n, k)).astype(np.float32)
        ws = qref.int4_group_scales_f32(wf)
        w32 = cuda.to_device(qref.int4_pack(qref.int4_quantize_f32(wf, ws)).view(np.int32))
        xq, xs = qref.int8_per_row_f32(rng.standard_normal((m, k)).astype(np.float32))
        a32, xsd, wsd = cuda.to_device(ref.as_words(xq)), cuda.to_device(xs), cuda.to_device(ws)
        outs = []
        for launch in (w4a8.launch_w4a8_gemm, w4a8.launch_w4a8_gemm_rows, w4a8.launch_w4a8_gemm_words):
            y = cuda.to_device(np.full((m, n), np.nan, np.float32))
            launch(y, a32, xsd, w32, wsd)
            outs.append(y.copy_to_host())
        for other in outs[1:]:
            assert np.array_equal(outs[0].view(np.uint32), other.view(np.uint32)), (m, n, k)


# --- the references: formats as documented -------------------------------------------------------

def test_ternary_byte_words_decode_every_byte_as_dp4a_reads_it():
    lut = ternary.ternary_byte_words()
    for b in range(256):
        codes = [(b >> (2 * t)) & 3 for t in range(4)]
        want = [1 if c == 1 else -1 if c == 3 else 0 for c in codes]
        assert np.array([lut[b]], np.int32).view(np.int8).tolist() == want


def test_references_round_ties_to_even_saturate_and_keep_signed_zero():
    q = ref.int8_quantize_f32(np.array([0.5, 1.5, 2.5, -0.5, -2.5, 300.0, -300.0, -0.0], np.float32), 1.0)
    assert q.tolist() == [0, 2, 2, 0, -2, 127, -127, 0]
    assert ref.int8_scale_f32(0.0) == 1.0
    s, z = ref.affine_params_f32(np.float32([0.5, -3.0]), np.float32([2.0, -1.0]))
    assert z.tolist() == [0, 255]


@pytest.mark.parametrize("cols", [1, 2, 7, 128, 129, 301])
def test_int4_packing_order_round_trips_every_value(cols):
    q = np.resize(np.arange(-8, 8, dtype=np.int8), (2, cols))
    p = ref.int4_pack(q)
    assert p.shape == (2, -(-cols // 2))
    assert np.array_equal(ref.int4_unpack(p, cols), q)
    assert p[0, 0] & 0x0F == np.uint8(q[0, 0]) & 0x0F  # element 0 in the low nibble
    if cols % 2:
        assert (p[:, -1] >> 4 == 0).all()  # the odd tail's partner nibble is 0
    t = np.resize(np.array([1, -1, 0], np.int8), (3, cols))
    assert np.array_equal(ref.ternary_unpack(ref.ternary_pack(t), cols), t)
    assert ref.ternary_pack(np.array([[-1]], np.int8))[0, 0] == 0b11


def test_dp4a_and_byte_perm_match_their_definitions():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = rng.integers(-128, 128, 4), rng.integers(-128, 128, 4)
        wa, wb = np.array(a, np.int8).view(np.int32)[0], np.array(b, np.int8).view(np.int32)[0]
        assert dp4a_mod.dp4a_py(wa, wb, 7) == int(a @ b) + 7
    x, y = np.int32(0x03020100), np.int32(0x07060504)
    assert dp4a_mod.byte_perm_py(x, y, dp4a_mod.EVEN_BYTES) == 0x06040200
    assert dp4a_mod.byte_perm_py(x, y, dp4a_mod.ODD_BYTES) == 0x07050301


# --- INT8 ----------------------------------------------------------------------------------------

def test_int8_ties_away_from_zero_named():
    bad = mutant(I8.int8_quantize, "v = round(x[i] / s)",
                 "v = math.floor(abs(x[i] / s) + 0.5) * (1 if x[i] >= 0 else -1)", math=__import__("math"))
    with pytest.raises(CheckFailed, match="ties are rounded away from zero"):
        checks.check_int8_quantize(q8_given(bad), sizes=SIZES, seed=1)


def test_int8_truncation_named():
    bad = mutant(I8.int8_quantize, "v = round(x[i] / s)", "v = int(x[i] / s)")
    with pytest.raises(CheckFailed, match="truncated toward zero"):
        checks.check_int8_quantize(q8_given(bad), sizes=SIZES, seed=2)


def test_int8_saturation_missing_named():
    bad = mutant(I8.int8_quantize, "q[i] = int8(min(max(v, -127), 127))", "q[i] = (v + 128) % 256 - 128")
    with pytest.raises(CheckFailed, match="wrapped around instead of saturating"):
        checks.check_int8_quantize(q8_given(bad), sizes=SIZES, seed=3)


def test_int8_minus_128_named():
    bad = mutant(I8.int8_quantize, "q[i] = int8(min(max(v, -127), 127))", "q[i] = int8(min(max(v, -128), 127))")
    with pytest.raises(CheckFailed, match="-128 appears"):
        checks.check_int8_quantize(q8_given(bad), sizes=SIZES, seed=4)


def test_int8_scale_of_zero_tensor_named():
    bad = mutant(I8.int8_quantize, "s = a / float32(127.0) if a > float32(0.0) else float32(1.0)",
                 "s = a / float32(127.0)")
    with pytest.raises(CheckFailed, match="all-zero input has absmax 0"):
        checks.check_int8_quantize(q8_given(bad), sizes=SIZES, seed=5)


def test_int8_scale_from_max_instead_of_absmax_named():
    def launch(q, s, x):
        amax = cuda.to_device(np.array([x.copy_to_host().max()], np.float32))  # the mistake: max, not absmax
        I8.int8_quantize[2, 64](x, amax, q, s)
    with pytest.raises(CheckFailed, match="comes from max\\(x\\), not max\\(\\|x\\|\\)"):
        checks.check_int8_quantize(launch, given_amax=False, sizes=SIZES, seed=6)


def test_int8_dequantize_unsigned_named():
    bad = mutant(I8.int8_dequantize, "out[i] = float32(q[i]) * s", "out[i] = float32(uint8(q[i])) * s")
    with pytest.raises(CheckFailed, match="read as unsigned"):
        checks.check_int8_dequantize(lambda o, q, s: bad[2, 64](q, s, o), sizes=SIZES, seed=7)


def test_affine_zero_point_not_clamped_named():
    bad = mutant(I8.affine_quantize_rows, "z = min(max(round(-lo[r] / s), 0), 255)", "z = round(-lo[r] / s)")
    with pytest.raises(CheckFailed, match="zero point not clamped"):
        checks.check_affine_rows(lambda q, s, z, x, lo, hi: bad[(1, 3), (16, 16)](x, lo, hi, q, s, z), seed=8)


def test_affine_saturation_missing_named():
    bad = mutant(I8.affine_quantize_rows, "uint8(min(max(round(x[r, c] / s) + z, 0), 255))",
                 "(round(x[r, c] / s) + z) % 256")
    with pytest.raises(CheckFailed, match="wrapped around instead of saturating"):
        checks.check_affine_rows(lambda q, s, z, x, lo, hi: bad[(1, 3), (16, 16)](x, lo, hi, q, s, z), seed=9)


# --- INT4 (05.2: kernel_lab.quant.int4, the notebook's kernels under the notebook's names) -------

def int4_flat(quad_codes=None, group_codes=None, quantize_group=None):
    """Exercise 1's flat-grid quantizer built on a (mutated) quad_codes, group_codes or quantize_group."""
    if quad_codes is not None:
        group_codes = mutant(I4.group_codes, "m = warp_max_f32", "m = warp_max_f32", quad_codes=quad_codes)
    qg = quantize_group or (mutant(I4.quantize_group, "cols = x.shape[1]", "cols = x.shape[1]", group_codes=group_codes)
                            if group_codes else I4.quantize_group)
    bad = mutant(I4.int4_quantize_groups, "warp = (", "warp = (", quantize_group=qg)

    def launch(p, s, x):
        warps = x.shape[0] * -(-x.shape[1] // 128)
        bad[-(-warps // 4), 128](x, p, s)
    return launch


def test_int4_nibble_order_swapped_named():
    bad = mutant(I4.quad_codes, "(q0 & 0xF) | ((q1 & 0xF) << 4), (q2 & 0xF) | ((q3 & 0xF) << 4)",
                 "(q1 & 0xF) | ((q0 & 0xF) << 4), (q3 & 0xF) | ((q2 & 0xF) << 4)")
    with pytest.raises(CheckFailed, match="nibble order swapped"):
        checks.check_int4_quantize(int4_flat(quad_codes=bad), shapes=SHAPES4[1:2], seed=10)


def test_int4_codes_not_masked_named():
    bad = mutant(I4.quad_codes, "(q0 & 0xF) | ((q1 & 0xF) << 4), (q2 & 0xF) | ((q3 & 0xF) << 4)",
                 "q0 | (q1 << 4), q2 | (q3 << 4)")
    with pytest.raises(CheckFailed, match="codes not masked to 4 bits"):
        checks.check_int4_quantize(int4_flat(quad_codes=bad), shapes=SHAPES4[1:2], seed=17)


def test_int4_ties_away_named():
    bad = mutant(I4.quad_codes, [(f"q{i} = round_clamp_fadd(v{i} / s, float32(-8.0), float32(7.0))",
                                   f"q{i} = min(max(int(math.floor(abs(v{i} / s) + 0.5)) * (1 if v{i} >= 0 else -1), -8), 7)")
                                  for i in range(4)], math=__import__("math"))
    with pytest.raises(CheckFailed, match="ties are rounded away from zero"):
        checks.check_int4_quantize(int4_flat(quad_codes=bad), shapes=SHAPES4[1:2], seed=11)


def test_int4_odd_tail_dropped_named():
    bad = mutant(I4.quantize_group, "    if c0 < cols:  # the odd tail", "    if c0 + 1 < cols:  # the odd tail")
    with pytest.raises(CheckFailed, match="odd tail was dropped"):
        checks.check_int4_quantize(int4_flat(quantize_group=bad), shapes=SHAPES4[1:], seed=12)


def test_int4_scale_per_row_named():
    def launch(p, s, x):
        I4.launch_int4_quantize(p, s, x)
        h = x.copy_to_host()
        row = np.where(np.abs(h).max(1) > 0, np.abs(h).max(1) / np.float32(7), 1).astype(np.float32)
        s.copy_to_device(np.repeat(row[:, None], s.shape[1], 1))
    with pytest.raises(CheckFailed, match="absmax is per group"):
        checks.check_int4_quantize(launch, shapes=[("2 x 301", (2, 301))], seed=13)


def int4_dq_launcher(nibble_value=None, dequantize_byte=None):
    """Exercise 2's dequantizer built on a (mutated) nibble_value or dequantize_byte."""
    db = dequantize_byte or (mutant(I4.dequantize_byte, "b = int32", "b = int32", nibble_value=nibble_value)
                             if nibble_value else I4.dequantize_byte)
    bad = mutant(I4.int4_dequantize, "r, j = cuda.grid(2)", "r, j = cuda.grid(2)", dequantize_byte=db)
    return lambda o, p, s: bad[(-(-o.shape[0] // 8), -(-p.shape[1] // 32)), (8, 32)](p, s, o)


def test_int4_sign_extension_named():
    bad = mutant(I4.nibble_value, "return float32(int32(v - ((v & 0x8) << 1)))", "return float32(int32(v))")
    with pytest.raises(CheckFailed, match="wrong sign extension"):
        checks.check_int4_dequantize(int4_dq_launcher(nibble_value=bad), shapes=SHAPES4[1:], seed=14)


def test_int4_dequantize_nibbles_swapped_named():
    bad = mutant(I4.nibble_value, "v = (h >> (4 * k)) & 0xF", "v = (h >> (4 * (k ^ 1))) & 0xF")
    with pytest.raises(CheckFailed, match="nibble order swapped"):
        checks.check_int4_dequantize(int4_dq_launcher(nibble_value=bad), shapes=[("2 x 256", (2, 256))], seed=15)


def test_int4_dequantize_odd_tail_named():
    bad = mutant(I4.dequantize_byte, "    if j >= packed.shape[1]:", "    if j >= out.shape[1] // 2:")
    with pytest.raises(CheckFailed, match="odd tail was dropped"):
        checks.check_int4_dequantize(int4_dq_launcher(dequantize_byte=bad), shapes=SHAPES4[1:], seed=16)


# --- ternary -------------------------------------------------------------------------------------

def tern_launcher(kernel):
    def launch(p, s, w):
        total = cuda.device_array(1, np.float64)
        scans.zero_first[1, 1](total)
        ternary.abs_sum[2, 64](w.reshape(w.size), total)
        kernel[(-(-w.shape[0] // 8), -(-p.shape[1] // 32)), (8, 32)](w, total, p, s)
    return launch


def test_ternary_packing_order_named():
    bad = mutant(ternary.ternary_quantize_pack, "byte |= (t & 3) << (2 * i)", "byte |= (t & 3) << (6 - 2 * i)")
    with pytest.raises(CheckFailed, match="packing order"):
        checks.check_ternary_quantize(tern_launcher(bad), seed=17)


def test_ternary_minus_one_code_named():
    bad = mutant(ternary.ternary_quantize_pack, "byte |= (t & 3) << (2 * i)", "byte |= (2 if t < 0 else t) << (2 * i)")
    with pytest.raises(CheckFailed, match="-1 was stored as 10"):
        checks.check_ternary_quantize(tern_launcher(bad), seed=18)


def test_ternary_ties_and_tail_named():
    bad = mutant(ternary.ternary_quantize_pack, "t = min(max(round(w[r, c] / s), -1), 1)",
                 "t = min(max(int(math.floor(abs(w[r, c] / s) + 0.5)) * (1 if w[r, c] >= 0 else -1), -1), 1)",
                 math=__import__("math"))
    with pytest.raises(CheckFailed, match="ties are rounded away from zero"):
        checks.check_ternary_quantize(tern_launcher(bad), seed=19)
    bad = mutant(ternary.ternary_quantize_pack, "        if c < cols:", "        if c < cols - cols % 4:")
    with pytest.raises(CheckFailed, match="not a multiple of 4"):
        checks.check_ternary_quantize(tern_launcher(bad), seed=20)


def test_ternary_scale_from_max_named():
    def launch(p, s, w):
        ternary.launch_ternary_quantize(p, s, w)
        s.copy_to_device(np.array([np.abs(w.copy_to_host()).max()], np.float32))
    with pytest.raises(CheckFailed, match="uses the mean of \\|w\\|"):
        checks.check_ternary_quantize(launch, seed=21)


def test_per_token_scales_named():
    def launch(q, s, x):
        ternary.launch_int8_rows(q, s, x)
        s.copy_to_device(np.full(s.shape, s.copy_to_host()[0], np.float32))
    with pytest.raises(CheckFailed, match="each row's own absmax"):
        checks.check_int8_rows(launch, seed=22)


def test_ternary_gemm_mistakes_named():
    plus3 = mutant(ternary.ternary_gemm, "elif code == 3:\n                    acc -= int32(a[m, k])",
                   "elif code == 3:\n                    acc += 3 * int32(a[m, k])")
    with pytest.raises(CheckFailed, match="code 11 was added as \\+3"):
        checks.check_ternary_gemm(lambda o, a, sa, p, sw: plus3[(1, 1), (16, 8)](a, sa, p, sw, o), shapes=GEMM, seed=23)
    tail = mutant(ternary.ternary_gemm, "            if k < a.shape[1]:",
                  "            if k < a.shape[1] - a.shape[1] % 4:")
    with pytest.raises(CheckFailed, match="were skipped"):
        checks.check_ternary_gemm(lambda o, a, sa, p, sw: tail[(1, 1), (16, 8)](a, sa, p, sw, o),
                                  shapes=[("3 x 6 x 137", (3, 6, 137))], seed=24)


# --- GEMMs ---------------------------------------------------------------------------------------

def test_dp4a_gemm_last_word_skipped_named():
    bad = mutant(int8_gemm.int8_gemm_dp4a, "for w in range(a32.shape[1]):", "for w in range(a32.shape[1] - 1):")
    with pytest.raises(CheckFailed, match="last word of K was skipped"):
        checks.check_int8_gemm(lambda c, a, b: bad[(1, 1), (16, 16)](a, b, c), shapes=GEMM, seed=25)


def test_w8a8_epilogue_missing_named():
    def launch(c, a32, b32, sa, sb):
        ci = cuda.device_array(c.shape, np.int32)
        int8_gemm.launch_dp4a_gemm(ci, a32, b32)
        c.copy_to_device(ci.copy_to_host().astype(np.float32))
    with pytest.raises(CheckFailed, match="did not dequantize"):
        checks.check_int8_gemm(launch, epilogue=True, shapes=GEMM, seed=26)


def test_w4a8_mistakes_named():
    # Each mistake in dot8 (the learner's part in 05.6) and in the group scale, on both of the
    # kernel's paths (16-byte rows and one word at a time: the default shapes have both).
    def with_dot8(bad8):
        return mutant(w4a8.w4a8_gemm, "acc = cuda.local.array(MT, float32)", "acc = cuda.local.array(MT, float32)",
                      dot8=bad8)

    def launch(kernel):
        return lambda o, a, sa, w, s: kernel[-(-o.shape[1] // 4), 128](a, sa, w, s, o)

    no_sign = mutant(w4a8.dot8, [("    even |= (even & uint32(0x08080808)) * uint32(30)", "    pass"),
                              ("    odd |= (odd & uint32(0x08080808)) * uint32(30)", "    pass")])
    with pytest.raises(CheckFailed, match="wrong sign extension"):
        checks.check_w4a8_gemm(launch(with_dot8(no_sign)), seed=27)
    swapped = mutant(w4a8.dot8, [("EVEN_BYTES), int32(even), 0)", "EVEN_BYTES), int32(odd), 0)"),
                              ("ODD_BYTES), int32(odd), d)", "ODD_BYTES), int32(even), d)")])
    with pytest.raises(CheckFailed, match="nibble order swapped"):
        checks.check_w4a8_gemm(launch(with_dot8(swapped)), seed=28)
    one_group = mutant(w4a8.w4a8_gemm, [("s = w_scales[n, w // GROUP_WORDS]  # four", "s = w_scales[n, 0]  # four"),
                                     ("s = w_scales[n, w // GROUP_WORDS]\n", "s = w_scales[n, 0]\n")])
    with pytest.raises(CheckFailed, match="first group's scale"):
        checks.check_w4a8_gemm(launch(one_group), seed=29)
    # 05.6's second part: the 16-byte loop (left as the stub's `pass`), and the row scale forgotten
    no_vector_path = mutant(w4a8.w4a8_gemm, "for w in range(4 * lane, words, 128):",
                            "for w in range(words, words, 128):")
    with pytest.raises(CheckFailed, match="16-byte path"):
        checks.check_w4a8_gemm(launch(no_vector_path), seed=30)
    no_row_scale = mutant(w4a8.w4a8_gemm, "out[m0 + i, n] = v * a_scale[m0 + i]", "out[m0 + i, n] = v")
    with pytest.raises(CheckFailed, match="activation row's scale is missing"):
        checks.check_w4a8_gemm(launch(no_row_scale), seed=31)


# --- the fast forms (05.1 exercises 4-5, 05.2 exercises 3-4) ----------------------------------

def q8_tile(kernel):
    return lambda q, s, x, a: kernel[I8.tile_blocks(x.size), scans.THREADS](x, a, q, I8.int8_words(q), s)


def dq8_tile(kernel):
    return lambda o, q, s: kernel[I8.tile_blocks(q.size), scans.THREADS](q, I8.int8_words(q), s, o)


def q8_tile_mutant(old, new=None):
    return mutant(I8.int8_quantize_x4, old, new, code=I8.code8)


def test_int8_x4_tail_missing_named():
    bad = q8_tile_mutant("    if t < x.size:\n", "    if t < 0:\n")
    with pytest.raises(CheckFailed, match=r"(?s)only the last n % 4 = 3 codes are wrong.*scalar path"):
        checks.check_int8_quantize(q8_tile(bad), sizes=X4_SIZES, seed=31)
    bad = mutant(I8.int8_dequantize_x4, "    if t < q.size:\n", "    if t < 0:\n")
    with pytest.raises(CheckFailed, match=r"only the last n % 4 = 3 values are wrong"):
        checks.check_int8_dequantize(dq8_tile(bad), sizes=X4_SIZES, seed=32)


def test_int8_x4_partial_tile_skipped_named():
    bad = q8_tile_mutant("            if w + k * nb < nw:\n", "            if False:\n")
    with pytest.raises(CheckFailed, match="the last, partial tile was skipped"):
        checks.check_int8_quantize(q8_tile(bad), sizes=X4_SIZES, seed=33)
    bad = mutant(I8.int8_dequantize_x4, "            if w + k * nb < nw:\n", "            if False:\n")
    with pytest.raises(CheckFailed, match="the last, partial tile was skipped"):
        checks.check_int8_dequantize(dq8_tile(bad), sizes=X4_SIZES, seed=34)


def test_int8_x4_misaligned_load_named():
    bad = q8_tile_mutant("a0, a1, a2, a3 = load4(x, 4 * w)", "a0, a1, a2, a3 = load4(x, w)")
    with pytest.raises(CheckFailed, match=r"(?s)misaligned 16-byte access.*load4\(x, 4 \* w\), not load4\(x, w\)"):
        checks.check_int8_quantize(q8_tile(bad), sizes=X4_SIZES, seed=35)


def test_int8_x4_byte_order_reversed_named():
    rev = mutant(I8.pack4, "return int32((c0 & 0xFF) | ((c1 & 0xFF) << 8) | ((c2 & 0xFF) << 16) | (c3 << 24))",
                 "return int32((c3 & 0xFF) | ((c2 & 0xFF) << 8) | ((c1 & 0xFF) << 16) | (c0 << 24))")
    bad = mutant(I8.int8_quantize_x4, "a = amax[0]", "a = amax[0]", code=I8.code8, pack4=rev)
    with pytest.raises(CheckFailed, match="byte order reversed"):
        checks.check_int8_quantize(q8_tile(bad), sizes=X4_SIZES, seed=36)
    rev_dq = mutant(I8.byte_value, "b = (p >> (8 * k)) & 0xFF", "b = (p >> (24 - 8 * k)) & 0xFF")
    bad = mutant(I8.int8_dequantize_x4, "s = scale[0]", "s = scale[0]", byte_value=rev_dq)
    with pytest.raises(CheckFailed, match="byte order reversed"):
        checks.check_int8_dequantize(dq8_tile(bad), sizes=X4_SIZES, seed=37)


def test_int64_shift_pair_named_on_the_cpu():
    """The package's old ``(p << 24) >> 24``: right in the simulator, wrong on a GPU; Numba's CPU
    typing is the GPU's, so check_byte_value finds it without a GPU."""
    def byte_value(p, k):  # noqa: the mistake: a shift pair, computed in int64 by Numba
        return float32((p << (24 - 8 * k)) >> 24)

    from numba import float32
    byte_value.__globals__["float32"] = float32
    with pytest.raises(CheckFailed, match="computed in 64 bits"):
        checks.check_byte_value(byte_value)
    unsigned = mutant(I8.byte_value, "return float32(int32(b - ((b & 0x80) << 1)))", "return float32(b)")
    with pytest.raises(CheckFailed, match="came out unsigned"):
        checks.check_byte_value(unsigned)


def test_int64_shift_result_named_by_the_dequantize_check():
    """What a GPU makes of the shift pair, emulated on the host (the simulator cannot produce it)."""
    def launch(o, q, s):
        h, sc = q.copy_to_host(), np.float32(s.copy_to_host()[0])
        whole = 4 * (h.size // 4)
        words = h[:whole].view(np.int32).astype(np.int64)
        got = np.stack([(words >> (8 * k)).astype(np.float32) * sc for k in range(4)], 1)
        got[:, 3] = h[:whole].reshape(-1, 4)[:, 3].astype(np.float32) * sc
        res = np.concatenate([got.ravel(), h[whole:].astype(np.float32) * sc]).astype(np.float32)
        o.copy_to_device(res)
    with pytest.raises(CheckFailed, match="computed in 64 bits"):
        checks.check_int8_dequantize(launch, sizes=X4_SIZES, seed=38)


def q4_fast(kernel):
    def launch(p, s, x):
        groups = -(-x.shape[1] // 128)
        kernel[(-(-groups // I4.WARPS), x.shape[0]), 32 * I4.WARPS](x, p, I4.packed16_of(p, x.shape[1]), s)
    return launch


def test_int4_load4_without_alignment_test_named():
    bad = mutant(I4.int4_quantize_rows_x4, "    if cols % 4 != 0:", "    if False:")
    with pytest.raises(CheckFailed, match=r"(?s)misaligned 16-byte access.*cols % 4 == 0"):
        checks.check_int4_quantize(q4_fast(bad), shapes=[("3 x 127", (3, 127))], seed=39)


def test_int4_tile_partial_tile_skipped_named():
    bad = mutant(I4.int4_dequantize_tile4, "            dequantize_quad(packed, packed16, scales, out, r, j + k * nb, vec)",
                 "            if not vec:\n                dequantize_quad(packed, packed16, scales, out, r, j + k * nb, vec)")
    with pytest.raises(CheckFailed, match="never written"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("2 x 4100", (2, 4100))], seed=40)


# --- more mistakes of the fast forms, each named (the mutation test's notebook mutants, in small) ---

def test_int8_x4_code_not_masked_named():
    unmasked = mutant(I8.pack4, "((c1 & 0xFF) << 8)", "(c1 << 8)")
    bad = mutant(I8.int8_quantize_x4, "a = amax[0]", "a = amax[0]", code=I8.code8, pack4=unmasked)
    with pytest.raises(CheckFailed, match="a negative code spilled into the bytes above it"):
        checks.check_int8_quantize(q8_tile(bad), sizes=X4_SIZES, seed=41)


def test_int8_x4_partial_tile_of_a_short_array_named():
    """An array shorter than one tile is all partial tile: every word wrong, the tail right."""
    bad = q8_tile_mutant("            if w + k * nb < nw:\n", "            if False:\n")
    with pytest.raises(CheckFailed, match=r"(?s)no whole word was written.*the last, partial tile was skipped"):
        checks.check_int8_quantize(q8_tile(bad), sizes=SIZES, seed=42)


def test_int8_x4_tail_of_a_single_value_named():
    bad = mutant(I8.int8_dequantize_x4, "    if t < q.size:\n", "    if t < 0:\n")
    with pytest.raises(CheckFailed, match="there is no whole word: every value is in the n % 4 tail"):
        checks.check_int8_dequantize(dq8_tile(bad), sizes=[("1", 1)], seed=43)


def test_byte_value_byte_order_reversed_named_on_the_cpu():
    rev = mutant(I8.byte_value, "b = (p >> (8 * k)) & 0xFF", "b = (p >> (24 - 8 * k)) & 0xFF")
    with pytest.raises(CheckFailed, match="byte 0 came from byte 3: the byte order is reversed"):
        checks.check_byte_value(rev)


def test_int8_reciprocal_named_on_planted_values():
    """The inputs hold values where x / s and x * (1 / s) round apart; the tile quantizer with FADD
    rounding and a reciprocal fails on them."""
    recip = mutant(I8.code8_fadd, "return round_clamp_fadd(v / s,", "return round_clamp_fadd(v * (float32(1.0) / s),")
    bad = mutant(I8.int8_quantize_x4, "a = amax[0]", "a = amax[0]", code=recip)
    with pytest.raises(CheckFailed, match="multiplies by 1 / scale"):
        checks.check_int8_quantize(q8_tile(bad), sizes=SIZES, seed=44)
    s = np.float32(0.0123)
    ties = checks._reciprocal_ties(s)
    assert ties.size == 8 and (np.rint(ties / s) != np.rint(ties * (np.float32(1) / s))).all()


def test_fadd_magic_number_two_to_the_23_named():
    magic = mutant(I8.round_clamp_fadd, [("float32(12582912.0)", "float32(8388608.0)"),
                                        ("int32(0x4B400000)", "int32(0x4B000000)")])
    code = mutant(I8.code8_fadd, "return round_clamp_fadd(", "return round_clamp_fadd(", round_clamp_fadd=magic)
    bad = mutant(I8.int8_quantize_x4, "a = amax[0]", "a = amax[0]", code=code)
    with pytest.raises(CheckFailed, match=r"the rounding constant is 2\^23, not 1.5 \* 2\^23"):
        checks.check_int8_quantize(q8_tile(bad), sizes=X4_SIZES, seed=45)


def test_int4_rows_bytes_of_the_two_byte_store_swapped_named():
    for kernel, old in ((I4.int4_quantize_rows_x4, "uint16(lo | (hi << 8))"),
                        (I4.int4_quantize_rows_u64, "uint16(lo | (hi << 8))")):
        bad = mutant(kernel, old, "uint16(hi | (lo << 8))")
        with pytest.raises(CheckFailed, match="the two bytes of each 2-byte store are in reversed order"):
            checks.check_int4_quantize(q4_fast(bad), shapes=ALIGNED4[:1], seed=46)


def test_int4_one_code_of_four_truncated_named():
    bad = mutant(I4.quad_codes, "q0 = round_clamp_fadd(v0 / s, float32(-8.0), float32(7.0))",
                 "q0 = int32(min(max(v0 / s, float32(-8.0)), float32(7.0)))")
    with pytest.raises(CheckFailed, match=r"truncated toward zero.*Only value 4j \+ 0 of each four"):
        checks.check_int4_quantize(int4_flat(quad_codes=bad), shapes=SHAPES4[1:2], seed=47)


def x8_launch(kernel):
    def launch(p, s, x):
        groups = -(-x.shape[1] // 128)
        kernel[(-(-groups // (2 * I4.WARPS)), x.shape[0]), 32 * I4.WARPS](x, p, I4.packed16_of(p, x.shape[1]), s)
    return launch


def test_int4_x8_absmax_over_the_whole_warp_named():
    bad = mutant(I4.int4_quantize_rows_x8, "m = max16(max(m,", "m = warp_max_f32(max(m,")
    with pytest.raises(CheckFailed, match="groups 2k and 2k \\+ 1 of each row got one scale"):
        checks.check_int4_quantize(x8_launch(bad), shapes=[("3 x 512", (3, 512))], seed=57)


def test_int4_x8_groups_skipped_named():
    bad = mutant(I4.int4_quantize_rows_x8, ") * uint64(2)  # the warp's first group", ")  # the warp's first group")
    with pytest.raises(CheckFailed, match="no warp \\(or half warp\\) took those groups"):
        checks.check_int4_quantize(x8_launch(bad), shapes=[("2 x 5296", (2, 5296))], seed=58)


def test_int4_quad_read_from_another_quad_named():
    bad = mutant(I4.int4_dequantize_tile4, "h2 = int32(packed16[r, j + 2 * nb])", "h2 = int32(packed16[r, j + nb])")
    with pytest.raises(CheckFailed, match="the wrong values are the codes of the quad 256 quads before them"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("2 x 5296", (2, 5296))], seed=59)


def test_int4_quad_second_byte_left_out_named():
    quad = mutant(I4.dequantize_quad, "dequantize_byte(packed, scales, out, r, 2 * j + 1)",
                  "dequantize_byte(packed, scales, out, r, 2 * j)")
    bad = mutant(I4.int4_dequantize_tile4, "r = cuda.blockIdx.y", "r = cuda.blockIdx.y", dequantize_quad=quad)
    with pytest.raises(CheckFailed, match="the quad's second byte, 2j \\+ 1, was left out"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=SHAPES4[1:2], seed=60)


def int4_dq_tile(kernel, threads=I4.TILE_THREADS):
    return lambda o, p, s: kernel[(max(1, -(-(-(-o.shape[1] // 4)) // (4 * threads))), o.shape[0]), threads](
        p, I4.packed16_of(p, o.shape[1]), s, o)


def test_int4_dequantize_scale_of_another_group_named():
    quad = mutant(I4.dequantize_quad, "scales[r, c // GROUP]", "scales[r, (c - 1) // GROUP]")
    bad = mutant(I4.int4_dequantize_tile4, "r = cuda.blockIdx.y", "r = cuda.blockIdx.y", dequantize_quad=quad)
    with pytest.raises(CheckFailed, match=r"the wrong values have the scale of another group: value 0 of row 0 "
                                          r"belongs to group 0 // 128 = 0, and got group 1's"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("2 x 256", (2, 256))], seed=48)


def test_int4_dequantize_partial_tile_named():
    bad = mutant(I4.int4_dequantize_tile4, "    else:  # other widths", "    elif not vec:  # other widths")
    with pytest.raises(CheckFailed, match=r"(?s)no value of a row 256 wide.*the last, partial tile was skipped"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=SHAPES4[1:2] + [("4 x 256", (4, 256))], seed=49)
    with pytest.raises(CheckFailed, match=r"columns 4096..4099 of each row were never written: the last, partial"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=ALIGNED4[1:], seed=50)


def test_int4_partial_tile_with_only_the_first_quad_named_at_the_gpus_block():
    """At 256 threads a block a thread's second quad of a partial tile exists only in rows past 1280
    quads (or 256 on the scalar path), a third past 1536 (or 512), a fourth only on the scalar path
    (past 768 quads: on a 16-byte row a thread with four quads has a whole tile): the check's widths
    7296 and 3074 take them all."""
    bad = mutant(I4.int4_dequantize_tile4, "        for k in range(4):\n", "        for k in range(1):\n")
    with pytest.raises(CheckFailed, match=r"columns 1024..1029 of each row were never written, the end of every row"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("2 x 1030", (2, 1030))], seed=52)
    with pytest.raises(CheckFailed, match=r"columns 5120..5295 of each row were never written"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("2 x 5296", (2, 5296))], seed=53)
    bad = mutant(I4.int4_dequantize_tile4, "        for k in range(4):\n", "        for k in range(3):\n")
    with pytest.raises(CheckFailed, match=r"columns 3072..3073 of each row were never written"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("1 x 3074", (1, 3074))], seed=61)
    bad = mutant(I4.int4_dequantize_tile4, "        for k in range(4):\n", "        for k in range(2):\n")
    with pytest.raises(CheckFailed, match=r"never written"):
        checks.check_int4_dequantize(int4_dq_tile(bad), shapes=[("1 x 7296", (1, 7296))], seed=62)


def test_int4_rows_of_two_mod_four_named():
    """Width 2 mod 4: the last quad holds two values, so its second byte does not exist."""
    bad = mutant(I4.quantize_group, "if c0 + 2 < cols:", "if c0 + 1 < cols:")
    with pytest.raises(Exception, match=r"(?i)out of bounds|index"):
        checks.check_int4_quantize(int4_flat(quantize_group=bad), shapes=[("2 x 1030", (2, 1030))], seed=54)
    bad = mutant(I4.int4_quantize_rows_x4, "    if cols % 4 != 0:", "    if cols % 2 != 0:")
    with pytest.raises(CheckFailed, match=r"(?s)(16-byte access|2 mod 4: its rows do not start on 16 bytes)"):
        checks.check_int4_quantize(q4_fast(bad), shapes=[("2 x 1030", (2, 1030))], seed=55)
    bad = mutant(I4.int4_quantize_rows_u64, "(cols & uint64(3)) != uint64(0)", "(cols & uint64(1)) != uint64(0)")
    with pytest.raises(CheckFailed, match=r"(?s)(16-byte access|2 mod 4: its rows do not start on 16 bytes)"):
        checks.check_int4_quantize(q4_fast(bad), shapes=[("2 x 1030", (2, 1030))], seed=56)


def test_int4_high_nibble_alone_not_sign_extended_named():
    def launch(o, p, s):  # the right kernel, then every high nibble read unsigned
        I4.launch_int4_dequantize(o, p, s)
        q = ref.int4_unpack(p.copy_to_host(), o.shape[1]).astype(np.int64)
        h = o.copy_to_host()
        odd = np.arange(o.shape[1]) % 2 == 1
        sc = np.repeat(s.copy_to_host(), 128, 1)[:, : o.shape[1]]
        h[:, odd] = ((q[:, odd] & 0xF).astype(np.float32) * sc[:, odd]).astype(np.float32)
        o.copy_to_device(h)
    with pytest.raises(CheckFailed, match="wrong sign extension.*Here only high nibbles are wrong"):
        checks.check_int4_dequantize(launch, shapes=SHAPES4[1:], seed=51)


def test_the_int4_launchers_cut_tall_matrices_into_slices_of_rows(monkeypatch):
    """gridDim.y holds at most 65,535 rows; taller matrices go in slices. With the limit set to 3, a
    7-row matrix takes three slices (3, 3, 1), on the 16-byte path (256 columns) and the scalar one."""
    monkeypatch.setattr(I4, "MAX_GRID_Y", 3)
    shapes = [("7 x 256 in slices of 3", (7, 256)), ("7 x 201 in slices of 3", (7, 201))]
    checks.check_int4_quantize(I4.launch_int4_quantize_rows, shapes=shapes)
    checks.check_int4_quantize(lambda p, s, x: I4.launch_int4_quantize_rows(p, s, x, unsigned=True), shapes=shapes)
    checks.check_int4_quantize(lambda p, s, x: I4.launch_int4_quantize_rows(p, s, x, form="x8"), shapes=shapes)
    checks.check_int4_dequantize(I4.launch_int4_dequantize_tile4, shapes=shapes)


def test_the_int4_launchers_refuse_arrays_of_the_wrong_shape():
    from kernel_lab.validate import KernelLabArgumentError

    x = cuda.to_device(np.ones((2, 300), np.float32))
    scales = cuda.device_array((2, 3), np.float32)
    with pytest.raises(KernelLabArgumentError, match=r"packed must be uint8 of shape \(2, 150\)"):
        I4.launch_int4_quantize_rows(cuda.device_array((2, 300), np.uint8), scales, x)
    with pytest.raises(KernelLabArgumentError, match=r"scales must be float32 of shape \(2, 3\)"):
        I4.launch_int4_dequantize_tile4(cuda.device_array((2, 300), np.float32), cuda.device_array((2, 150), np.uint8),
                                        cuda.device_array((2, 2), np.float32))


def test_int8_gemm_hints_name_the_classic_mistakes():
    # 05.6's DP4A GEMMs: each classic mistake's result, made on the host, gets its named cause.
    rng = np.random.default_rng(5)

    def case(m, n, k):
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (n, k)).astype(np.int8)
        return a, b, a.astype(np.int64) @ b.astype(np.int64).T

    def hint(got, a, b, exact):
        return " ".join(checks._int8_gemm_hints(np.asarray(got, np.int64), a, b, exact))

    a, b, exact = case(3, 5, 40)  # 10 words: stages of 4 leave a partial stage of 2
    words = lambda x: x.astype(np.int64)  # noqa: E731
    head = words(a[:, :32]) @ words(b[:, :32]).T
    assert "first 8 of the 10 words" in hint(head, a, b, exact)
    stale = exact + words(a[:, 24:32]) @ words(b[:, 24:32]).T  # words 10, 11 of the last stage of 4: words 6, 7 again
    assert "were not zeroed" in hint(stale, a, b, exact)
    a, b, exact = case(4, 12, 48)  # N = K/4: B's words read as (K/4, N) stay inside B
    b_t = np.ascontiguousarray(b.view(np.int32).T).view(np.int8)
    assert "read transposed" in hint(words(a) @ words(b_t).T, a, b, exact)
    assert "landed in the wrong places" in hint(exact[:, ::-1], a, b, exact)
    a, b, exact = case(2, 3, 1100)
    a[0], b[0] = -128, -128
    a[0, 0], b[0, 0] = -127, -127
    exact = words(a) @ words(b).T
    assert "float32" in hint(exact.astype(np.float32).astype(np.int64), a, b, exact)
    assert hint(exact + 1, a, b, exact) == ""  # no cause named where none fits
