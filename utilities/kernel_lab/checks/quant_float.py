"""Checks for module 05's floating-point formats (notebooks 05.3 and 05.4).

Every check runs the learner's launcher on inputs chosen where encoders go wrong (every rounding
tie and its float32 neighbours, every value of the format, zeros of both signs, subnormals, the
overflow threshold, infinities and NaN; lengths that are not multiples of the block), compares
*bit for bit* with the references of :mod:`kernel_lab.quant` (themselves tested against
``ml_dtypes``), prints one line on success, and on failure raises :class:`kernel_lab.CheckFailed`
that shows the first wrong elements in binary and names the mistake when it is a classic one
(:data:`MISTAKES`, one source for the messages and for the tests that make each of them fire):

* :func:`check_fp8_decode`: ``launch(out, codes)``, float32 values of uint8 codes, all 256 codes;
* :func:`check_fp8_encode`: ``launch(out, x)``, uint8 codes of float32 values, in the saturating or
  the non-saturating mode; on a GPU also every float16 bit pattern (65,536 inputs);
* :func:`check_nvfp4_quantize`: ``launch(packed, scales, x, amax)``;
* :func:`check_mx_quantize`: ``launch(codes, scales, x)`` for MXFP4 (E2M1) or MXFP8 (E4M3).
"""

from __future__ import annotations

import secrets

import numpy as np

from .. import progress
from ..check import CheckFailed, poisoned_host
from ..environment import on_simulator
from ..quant import fp8 as F
from ..quant import microscaling as MX
from ..validate import KernelLabArgumentError, require_callable

# One sentence per classic mistake. The checks add the one that fits; tests make each one fire.
MISTAKES = {
    "not_done": "every output is the same: the exercise's stub is still in place, or the kernel ignores its input.",
    "unwritten": "some outputs were never written (they still hold the poison byte 0x5A / a signalling NaN): "
                 "launch enough threads for every element, and do not return before the store.",
    "nan": "a NaN input must give a NaN code, sign kept (E4M3: S.1111.111, E5M2: S.11111.10); test "
           "`a > 0x7F800000` on the bits before anything else (NaN is not an overflow).",
    "signed_zero": "signed zero lost: -0.0 (bits 0x80000000) and negative values too small for the format must "
                   "give the code 0x80, not 0x00: the sign bit is copied whatever the magnitude rounds to.",
    "subnormals_flushed": "subnormals flushed to zero: values below the smallest normal "
                          "(2^(1-bias)) still have codes with exponent field 0 (value m * 2^(1-bias-M)); "
                          "decode them as 0.m, encode them by shifting the significand further right.",
    "bias_off_by_one": "exponent bias off by one: results are exactly 2x or 0.5x the right value (one step of "
                       "the exponent field). The bias is 7 for E4M3, 15 for E5M2, 1 for E2M1, 127 for float32: "
                       "field = exponent + bias.",
    "ties_away": "ties rounded away from zero: a value exactly halfway between two codes must go to the one "
                 "with an even last bit (round half to even), so add one only when the dropped bits are "
                 "more than half, or exactly half and the kept part is odd.",
    "truncated": "the result is truncated (rounded towards zero): values more than halfway to the next code "
                 "must round up; add one when the dropped bits exceed half a step.",
    "no_saturation": "no saturation: in the saturating mode every value beyond the largest finite one, "
                     "infinities included, becomes +-max (E4M3 +-448 = S.1111.110, E5M2 +-57344 = "
                     "S.11110.11); here overflows became NaN or infinity.",
    "saturated_nosat": "saturated in the non-saturating mode: there an overflow becomes infinity (E5M2, "
                       "S.11111.00) or NaN (E4M3, which has no infinity, S.1111.111).",
    "e4m3_infinity": "E4M3 treated as having infinities (like IEEE): E4M3 has no infinity, its exponent field "
                     "1111 holds normal numbers 256..448 (S.1111.000 to S.1111.110), and only S.1111.111 is NaN.",
    "e5m2_specials": "E5M2 follows IEEE: exponent field 11111 with mantissa 00 is infinity, any other mantissa "
                     "is NaN.",
    "scale_rounded_up": "the block scale is rounded up: {rule}",
    "scale_rounded_down": "the block scale is rounded down: {rule}",
    "packing_order": "the two E2M1 codes of each byte are swapped: element 2i goes in the LOW nibble "
                     "(bits 0-3) and element 2i+1 in the high nibble (bits 4-7).",
    "partial_block": "only the last, partial block is wrong: its amax must come from the elements that exist "
                     "(threads past the end contribute 0, and still take part in the shuffles).",
    "scale_not_clamped": "the scale code must be clamped to 0..254: a block whose amax is below 2^(emax - 127) "
                         "(tiny float32 values, subnormals) gives floor(log2(amax)) - emax + 127 < 0, which wraps "
                         "around in a uint8; its code is 0 (the scale 2^-127).",
    "zero_block": "only all-zero blocks have a wrong scale: their amax is 0 and log2(0) is -inf, so handle "
                  "amax == 0 first and give such a block the scale code 0 (its elements are zeros anyway).",
    "zero_tensor": "a tensor of zeros has amax 0, so amax / 2688 is a tensor scale of 0 and (m / 6) / ts is "
                   "0 / 0 = NaN: use a tensor scale of 1 when amax is 0 (every scale code is then 0, and the "
                   "elements are zeros that keep their sign).",
    "block_elements": "the scales are the rule's, but of the wrong elements: they match the amax of {where}. "
                      "Block g's scale comes from x[{block}g .. {block}g + {block} - 1], every one of them and "
                      "none of the next block's: a thread's values that straddle two scale blocks, or a butterfly "
                      "over too few lanes, give this.",
    "reciprocal_range": "only blocks whose denom is below 2^-125 are wrong (a tensor far below float32's range): "
                        "there 1 / denom is past float32's normal range (or infinite) and the product by it is not "
                        "the quotient; divide where denom or 1 / denom is not a normal float32.",
    "ts_range": "the scales are wrong in a tensor whose tensor scale ts is below 2^-125 (its amax below about "
                "2^-114): 1 / ts is infinite there. Divide by ts itself where ts, or m / 6, is not a normal float32.",
    "denom_no_ts": "the elements are divided by the block's decoded scale alone: denom is that scale times the "
                   "tensor scale ts.",
    "sign_lost": "signs wrong: a code's sign bit (bit 3 in E2M1, bit 7 in E4M3) is float32's bit 31, kept for "
                 "every value, -0 and the values that round to 0 included.",
    "no_tensor_scale": "the scales are E4M3(amax_block / 6), those of a tensor scale of 1: divide by the tensor "
                       "scale too, (amax_block / 6) / ts with ts = amax / 2688, before rounding to E4M3 (and "
                       "multiply the decoded scale by ts for denom).",
    "reciprocal_ties": "the scales are right and every wrong code is at an E2M1 tie of x / denom (or an ulp or two "
                       "from one): the quotient is off by an ulp there. x * (1 / denom) is not always the exactly "
                       "rounded x / denom, and at a tie one ulp decides the code; correct it (its remainder "
                       "x - q0 * denom is exact in one FMA, one more FMA gives the exact quotient), or divide. The "
                       "check allows no other quotient: bit-exact codes need the correctly rounded one.",
    # codes from the bits (05.4, exercise 3): e2m1_code and e4m3_magnitude_code
    "rebias": "codes one binade off (2 codes in E2M1, 8 in E4M3) from the smallest normal up: the rebias "
              "subtracted after the shift is (127 - bias) << M, the float32 exponent field's offset from the "
              "format's, in place in the code: (127 - 1) << 1 = 252 for E2M1, (127 - 7) << 3 = 960 for E4M3.",
    "ties_down": "ties rounded down: a value exactly halfway between two codes must go to the even one. Adding "
                 "half a step less one rounds every tie down; add the last kept bit, (b >> drop) & 1, as well, so "
                 "that a tie carries exactly when the kept part is odd.",
    "below_normal": "only values below the format's smallest normal (1 for E2M1, 2^-6 for E4M3) are wrong: there "
                    "the code comes from the float adder. |x| + 2^22 (E2M1) or |x| + 2^14 (E4M3) is rounded to a "
                    "multiple of that sum's ulp, 0.5 or 2^-9, the format's step there; the sum's bits less those "
                    "of the power of two (0x4A800000, 0x46800000) are the code, 0 to 2 or 0 to 8.",
    "no_clamp": "values past the format's largest (6 for E2M1, 448 for E4M3) are wrong: their code must be the "
                "largest one (7, 0x7E), so clamp it, min(code, top); one code further spills into the sign bit "
                "(E2M1's 8 is -0) or is E4M3's NaN (0x7F).",
    "e2m1_sign": "signs wrong: E2M1's sign is bit 3, float32's bit 31 ((bits >> 28) & 8), and it is kept for every "
                 "value, -0 and the values that round to 0 included.",
    "e2m1_nan": "a NaN input: E2M1 has no NaN, and the course follows ml_dtypes: code 0b1000 for a NaN whose sign "
                "bit is clear, 0b0000 for one whose sign bit is set (take 8 for a NaN, then XOR the sign bit in, "
                "where the other values OR it).",
    "e4m3_nan": "a NaN input must give E4M3's NaN, 0x7F: test the bits, a NaN's lie above infinity's, 0x7F800000 (a float test such as `not s >= 0` can be compiled away on a GPU).",
}
SCALE_RULES = {
    "NVFP4": "the E4M3 block scale is amax_block / 6 / tensor_scale rounded to the NEAREST E4M3 value (ties to "
             "even, saturating), not up or down.",
    "MX": "the OCP MX rule rounds the scale DOWN to a power of two: code = floor(log2(amax)) - emax + 127 "
          "(emax 2 for E2M1, 8 for E4M3), and lets the block's largest elements saturate.",
}


def _hint(key, **kw) -> str:
    return f"Hint ({key}): " + MISTAKES[key].format(**kw)


def _bin(code: int, f: F.ElementFormat) -> str:
    s = format(int(code) & ((1 << f.bits) - 1), f"0{f.bits}b")
    return f"{s[0]}.{s[1:1 + f.exp_bits]}.{s[1 + f.exp_bits:]}"


def _not_done(name, exc):
    return CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})")


def _run(launch, outs, inputs, name):
    """Run ``launch(*outs_on_device, *inputs_on_device)`` on poisoned outputs; return host outputs."""
    from numba import cuda

    dev_out = [cuda.to_device(o) for o in outs]
    try:
        launch(*dev_out, *[cuda.to_device(i) for i in inputs])
    except NotImplementedError as exc:
        raise _not_done(name, exc) from None
    cuda.synchronize()
    return [d.copy_to_host() for d in dev_out]


def _poison_u8(n):
    return poisoned_host(n, np.uint8)


def _first_lines(idx, describe, limit=4):
    return [describe(int(i)) for i in idx[:limit]]


# ================================================================================================
# FP8 decode


def check_fp8_decode(launch, fmt="E4M3", *, name=None, seed=None) -> None:
    """``launch(out, codes)``: ``out`` (float32) must hold the values of ``codes`` (uint8), exactly.

    All 256 codes (shuffled) and 45 more: 301 elements, not a multiple of any block. NaN codes must
    give a NaN (any NaN); every other code its exact float32, signed zero included.
    """
    require_callable(launch, "launch")
    f = F.get_format(fmt)
    name = name or f"{f.name} decode"
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    codes = np.concatenate([rng.permutation(256), rng.integers(0, 256, 45)]).astype(np.uint8)
    (got,) = _run(launch, [poisoned_host(codes.size, np.float32)], [codes], name)
    failure = decode_failure(codes, got, f, name, seed)
    if failure:
        raise CheckFailed(failure)
    progress.passed(name)
    print(f"{name}: all 256 codes exact (NaN and infinities included), {codes.size} elements")


def decode_failure(codes, got, f, name="decode", seed=None) -> str | None:
    """The failure message for decoded values ``got`` of ``codes``, or None when all are right."""
    want = F.decode(codes, f)
    wb, gb = want.view(np.uint32), np.asarray(got, np.float32).view(np.uint32)
    wnan, gnan = np.isnan(want), np.isnan(got)
    bad = np.where(wnan, ~gnan, gb != wb)
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)
    lines = [f"{name}: {idx.size} of {codes.size} codes decode wrongly [seed={seed}]"]
    lines += _first_lines(idx, lambda i: f"  code {_bin(codes[i], f)} (0x{int(codes[i]):02X}): expected "
                                         f"{float(want[i])!r}, got {float(got[i])!r}")
    c = codes.astype(np.int64)
    e = (c >> f.man_bits) & ((1 << f.exp_bits) - 1)
    m = c & ((1 << f.man_bits) - 1)
    top = (1 << f.exp_bits) - 1
    hints = []
    from ..check import is_poison

    g = np.asarray(got, np.float32).view(np.uint32)
    if np.all(g == g[0]) and not is_poison(np.asarray(got, np.float32)).all():
        return "\n".join(lines + [_hint("not_done")])
    if is_poison(np.asarray(got, np.float32))[bad].any():
        hints.append(_hint("unwritten"))
    if (bad & (e == 0) & (m != 0) & (got == 0)).any():
        hints.append(_hint("subnormals_flushed"))
    if (bad & (c == 0x80) & (got == 0)).any():
        hints.append(_hint("signed_zero"))
    if f.name == "E4M3" and (bad & (e == top) & (m != (1 << f.man_bits) - 1) & ~np.isfinite(got)).any():
        hints.append(_hint("e4m3_infinity"))
    if f.specials == "ieee" and (bad & (e == top)).any():
        hints.append(_hint("e5m2_specials"))
    with np.errstate(invalid="ignore"):
        normal = bad & (e > 0) & (e < top) & np.isfinite(got)
        if normal.any() and np.all((got[normal] == 2 * want[normal]) | (2 * got[normal] == want[normal])):
            hints.append(_hint("bias_off_by_one"))
    return "\n".join(lines + hints)


# ================================================================================================
# FP8 encode


def encode_inputs(fmt, rng, *, every_float16: bool) -> np.ndarray:
    """Boundary inputs (ties and neighbours, every value, zeros, overflow, inf, NaN), float16 bit
    patterns (all of them, or a sample) and random float32 of every magnitude, shuffled; the length
    is never a multiple of 32."""
    f = F.get_format(fmt)
    halves = np.arange(65536, dtype=np.uint16) if every_float16 else rng.integers(0, 65536, 600).astype(np.uint16)
    h = halves.view(np.float16).astype(np.float32)
    mags = np.exp2(rng.uniform(np.log2(f.min_subnormal) - 3, np.log2(f.max_value) + 2, 300))
    r = (mags * rng.choice([-1.0, 1.0], 300) * (1 + rng.uniform(0, 1, 300))).astype(np.float32)
    x = np.concatenate([F.boundary_inputs(f), h, r])
    if x.size % 32 == 0:
        x = np.concatenate([x, np.float32([0.3])])
    return rng.permutation(x).astype(np.float32)


def check_fp8_encode(launch, fmt="E4M3", saturate=True, *, name=None, seed=None, every_float16=None) -> None:
    """``launch(out, x)``: ``out`` (uint8) must hold the codes of ``x`` (float32), bit for bit.

    Rounding to nearest, ties to even; ``saturate`` picks the mode (see :mod:`kernel_lab.quant.fp8`).
    A NaN input may give either NaN code of the format. ``every_float16`` (default: on a GPU) adds
    all 65,536 float16 bit patterns; the simulator runs a sample of 600 besides every tie.
    """
    require_callable(launch, "launch")
    f = F.get_format(fmt)
    if f.bits != 8:
        raise KernelLabArgumentError(f"check_fp8_encode checks the 8-bit formats E4M3 and E5M2, not {f.name}")
    mode = "saturating" if saturate else "non-saturating"
    name = name or f"{f.name} encode ({mode})"
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    every = (not on_simulator()) if every_float16 is None else every_float16
    x = encode_inputs(f, rng, every_float16=every)
    (got,) = _run(launch, [_poison_u8(x.size)], [x], name)
    failure = encode_failure(x, got, f, saturate, name, seed)
    if failure is None and (got == 0x5A).any():  # poison is a valid code: make sure it was written
        (again,) = _run(launch, [np.full(x.size, 0xA5, np.uint8)], [x], name)
        failure = encode_failure(x, again, f, saturate, name, seed)
    if failure:
        raise CheckFailed(failure)
    what = "every float16" if every else "600 float16 samples"
    progress.passed(name)
    print(f"{name}: {x.size} inputs bit-exact (every tie and boundary, {what}, NaN, +-inf, +-0)")


def encode_failure(x, got, f, saturate, name="encode", seed=None, poison=0x5A) -> str | None:
    """The failure message for codes ``got`` of float32 ``x``, or None when all are right."""
    x = np.asarray(x, np.float32)
    got = np.asarray(got, np.uint8)
    want = F.encode(x, f, saturate)
    nan_in = np.isnan(x)
    bad = np.where(nan_in, ~F.is_nan_code(got, f), got != want)
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)
    lines = [f"{name}: {idx.size} of {x.size} codes wrong [seed={seed}]"]
    lines += _first_lines(idx, lambda i: f"  x = {float(x[i]):.9g} (float32 0x{int(x.view(np.uint32)[i]):08X}): expected "
                                         f"{_bin(want[i], f)}, got {_bin(got[i], f)}")
    gm, wm = got & 0x7F, want & 0x7F
    ax = np.abs(x)
    hints = []
    if np.all(got == got[0]) and got[0] != poison:
        return "\n".join(lines + [_hint("not_done")])
    if (got[bad] == poison).all() and bad.sum() > 1:
        hints.append(_hint("unwritten"))
    if (bad & nan_in).any():
        hints.append(_hint("nan"))
    if (bad & ~nan_in & (wm == 0) & (gm == 0)).any():
        hints.append(_hint("signed_zero"))
    if (bad & (wm > 0) & (wm <= (1 << f.man_bits)) & (gm == 0)).any():
        hints.append(_hint("subnormals_flushed"))
    with np.errstate(invalid="ignore"):
        over = ~nan_in & (ax > f.max_value) & (wm == f.overflow_code(saturate))
    special = {F.E4M3.nan_code, F.E5M2.inf_code} if f.name == "E5M2" else {f.nan_code}
    if saturate and (bad & over & np.isin(gm, list(special | {f.inf_code or 0x7F}))).any():
        hints.append(_hint("no_saturation"))
    if not saturate and (bad & over & (gm == f.max_code)).any():
        hints.append(_hint("saturated_nosat"))
    if f.name == "E4M3" and (bad & ~nan_in).any():
        b2 = bad & ~nan_in
        if np.all(ax[b2] > 240) and np.isin(gm[b2], [0x77, 0x78]).any():
            hints.append(_hint("e4m3_infinity"))
    ties = np.isin(ax, F.tie_points(f)) & ~nan_in
    plain = bad & ~nan_in & ~over
    if plain.any():
        if np.all(ties[plain]) and np.all(gm[plain] == wm[plain] + 1):
            hints.append(_hint("ties_away"))
        elif np.all(gm[plain] == wm[plain] - 1):
            hints.append(_hint("truncated"))
        step = 1 << f.man_bits
        normal = plain & (wm >= step)
        if normal.any() and np.mean(np.abs(gm[normal].astype(int) - wm[normal].astype(int)) == step) > 0.5:
            hints.append(_hint("bias_off_by_one"))
    return "\n".join(lines + hints)


# ================================================================================================
# block formats


def block_inputs(block: int, rng, large: int) -> list[tuple[str, np.ndarray]]:
    """Cases for the block formats: a hand-made one where every E2M1 tie occurs exactly (tensor
    amax 2688 makes the NVFP4 tensor scale 1, and a block of amax 6 has scale 1; for MX, a block
    of amax 6 or 448 has scale 2**0), then random data whose blocks span 2**-20..2**20, with zero
    blocks, signed zeros, and lengths 1, block-1, block+1, 2 blocks + 10, 3 blocks + 5 and a large one
    (a last partial block of odd and of even length; NVFP4's large one spans two blocks of 256 threads
    that take 16 values each in the simulator too, the configuration of 05.4's block kernels)."""
    e2m1_ties = np.array([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -5.0, -0.0, 0.0, 0.2,
                          5.5], np.float32)  # amax 6: NVFP4 scale 1 (tensor scale 1), MX scale 2**0
    e4m3_ties = np.zeros(32, np.float32)  # amax 448: MXFP8 scale 2**0, E4M3 ties and subnormal ties
    e4m3_ties[:9] = [448.0, 1.0625, 17.0, -17.0, 2.0**-10, 3 * 2.0**-10, -(2.0**-10), 300.0, 0.0078125]
    ties = np.concatenate([e2m1_ties, -e2m1_ties, e4m3_ties,
                           np.array([2688.0, 0.1, -0.3, 7.0, -9.0], np.float32)]).astype(np.float32)
    cases = [("ties", ties)]
    for label, n in [("1", 1), ("block-1", block - 1), ("block+1", block + 1), ("2 blocks+10", 2 * block + 10),
                     ("3 blocks+5", 3 * block + 5), ("large", large)]:
        nb = -(-n // block)
        scale = np.repeat(np.exp2(rng.uniform(-20, 20, nb)), block)[:n]
        x = (rng.standard_normal(n) * scale).astype(np.float32)
        if n > 4:
            x[rng.integers(0, n, max(1, n // 50))] = -0.0
            if nb > 2:
                x[block:2 * block] = 0.0  # an all-zero block
        cases.append((label, x))
    return cases


def reciprocal_ties() -> np.ndarray:
    """NVFP4 blocks whose elements divided by the block's denominator are exactly E2M1 ties, for every
    normal E4M3 scale: the tensor's amax 4032 makes the tensor scale 1.5, a block of amax 9 s gets the
    scale s (9 s / 6 / 1.5 = s, exact), so denom = 1.5 s and x = tie * denom exactly (a few bits each).
    1 / denom is not exact for most s, and x * (1 / denom) then misses the tie by an ulp for about one
    quotient in ten, which changes the code for about one in twenty: a quotient taken from the
    reciprocal without its correction is found here."""
    ties = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    s = F.decode(np.arange(8, 0x7F, dtype=np.uint8), F.E4M3)
    blocks = np.zeros((s.size + 1, MX.NVFP4_BLOCK), np.float32)
    blocks[0, 0] = 4032.0  # the tensor's amax: tensor scale 4032 / 2688 = 1.5
    denom = np.float32(1.5) * s
    blocks[1:, 0] = np.float32(6) * denom  # the block's amax: 9 s, its scale s
    blocks[1:, 1:8] = ties[None, :] * denom[:, None]
    blocks[1:, 8:15] = -ties[None, :] * denom[:, None]
    blocks[1::2, 15] = -0.0
    return blocks.ravel()[:-3]  # the last block partial


def tiny_tensor(rng, top: int) -> np.ndarray:
    """A tensor whose amax is 2^top, blocks from there down to float32's subnormals. With top = -110
    the tensor scale (~2^-121.4) is a normal float32 but the blocks' amax are below 2^-100; with
    top = -118 the tensor scale itself is subnormal (its reciprocal is infinite). Both give block
    scales whose denominators leave float32's normal range (a kernel that divides through reciprocals
    must fall back to the division there), and blocks whose scale rounds to 0 (zeros, sign kept)."""
    nb = 12
    scale = np.repeat(np.exp2(top - 3.5 * np.arange(nb)), MX.NVFP4_BLOCK)
    x = (rng.uniform(-1, 1, nb * MX.NVFP4_BLOCK) * scale).astype(np.float32)
    x[0] = np.float32(2.0**top)
    x[5::7] = -0.0
    return x[:-5]


def saturating_blocks(rng) -> np.ndarray:
    """NVFP4 blocks whose largest quotient x / denom lies between 6.5 and 9, so that its E2M1 code
    saturates at 6 (code 7): with the tensor's amax 2688 (tensor scale 1), a block of amax 6 (c + f) 2^-9
    gets the subnormal E4M3 scale c 2^-9 (f < 0.5 rounds down), and its largest quotient is
    6 (1 + f / c). Nearest E4M3 scales of normal blocks leave every quotient below 6.375, so random
    data has such blocks only where a scale is subnormal. A fast path that assumes no quotient
    reaches 7 must leave these blocks to the general code."""
    cf = [(1, 0.1), (1, 0.2), (1, 0.3), (1, 0.45), (2, 0.2), (2, 0.35), (2, 0.45), (3, 0.3), (3, 0.45), (4, 0.45)]
    blocks = (rng.uniform(-1, 1, (len(cf) + 1, MX.NVFP4_BLOCK)) * 2.0 ** -9).astype(np.float32)
    blocks[0, 0] = 2688.0  # the tensor's amax: tensor scale 1
    for k, (c, f) in enumerate(cf, start=1):
        top = np.float32(6 * (c + f) * 2.0 ** -9)
        blocks[k] *= np.float32(6 * c * 2.0 ** -9) / np.max(np.abs(blocks[k]))  # the rest below c 2^-9 6
        blocks[k, k % MX.NVFP4_BLOCK] = top if k % 2 else -top  # the largest, either sign
    return blocks.ravel()


def _block_failure(kind, x, got_codes, got_scales, want_codes, want_scales, elem, name, seed, block) -> str | None:
    n = x.size
    packed = elem.name == "E2M1"
    codes_bad = got_codes != want_codes
    scales_bad = got_scales != want_scales
    if not codes_bad.any() and not scales_bad.any():
        return None
    lines = [f"{name} (n = {n}): {int(scales_bad.sum())} of {want_scales.size} scales and "
             f"{int(codes_bad.sum())} of {want_codes.size} {'bytes' if packed else 'codes'} wrong [seed={seed}]"]
    hints = []
    if want_scales.size > 1 and np.all(got_scales == got_scales[0]) and got_scales[0] != 0x5A \
            and not np.all(want_scales == want_scales[0]):
        hints.append(_hint("not_done"))
    if (got_scales[scales_bad] == 0x5A).all() and (got_codes[codes_bad] == 0x5A).all():
        hints.append(_hint("unwritten"))
    if scales_bad.any():
        i = np.flatnonzero(scales_bad)
        lines += _first_lines(i, lambda b: f"  block {b}: scale code expected 0x{int(want_scales[b]):02X}, got "
                                           f"0x{int(got_scales[b]):02X}")
        diff = got_scales[i].astype(int) - want_scales[i].astype(int)
        rule = SCALE_RULES[kind]
        amax_blocks = np.max(np.abs(MX._blocks(x, block)), axis=1)
        if kind == "NVFP4" and not x.any():  # amax = 0: no scale to round, the tensor scale is the mistake
            hints.append(_hint("zero_tensor"))
        elif kind == "MX" and np.all((want_scales[i] == 0) & (amax_blocks[i] > 0)):  # the clamp at 0
            hints.append(_hint("scale_not_clamped"))
        elif kind == "MX" and np.all(amax_blocks[i] == 0):  # log2(0): no rounding rule applies
            hints.append(_hint("zero_block"))
        elif np.all(diff == 1):
            hints.append(_hint("scale_rounded_up", rule=rule))
        elif np.all(diff == -1):
            hints.append(_hint("scale_rounded_down", rule=rule))
        elif kind == "NVFP4" and 0 < MX.nvfp4_tensor_scale(np.float32(np.max(np.abs(x)))) < np.float32(2.0**-125):
            hints.append(_hint("ts_range"))
        elif kind == "NVFP4" and x.any() and np.array_equal(
                got_scales[i], F.encode(amax_blocks[i] / np.float32(6), F.E4M3, saturate=True)):
            hints.append(_hint("no_tensor_scale"))
        else:
            where = _wrong_elements(kind, x, got_scales, i, block, elem.name)
            if where:
                hints.append(_hint("block_elements", where=where, block=block))
    packing = False
    if packed:
        gc, wc = MX.unpack_e2m1(got_codes, n), MX.unpack_e2m1(want_codes, n)
        swapped = ((got_codes >> 4) | ((got_codes & 0xF) << 4)).astype(np.uint8)
        if n >= 2 and codes_bad.any() and np.array_equal(swapped[codes_bad], want_codes[codes_bad]):
            hints.append(_hint("packing_order"))
            packing = True
    else:
        gc, wc = got_codes, want_codes
    ebad = gc != wc
    bad_blocks = np.unique(np.concatenate([np.flatnonzero(scales_bad), np.flatnonzero(ebad) // block]))
    # only the last, partial block wrong, the whole ones right: that block's handling is the mistake
    partial = n % block and n > block and bad_blocks.size and np.all(bad_blocks == (n - 1) // block)
    if ebad.any():
        i = np.flatnonzero(ebad)
        lines += _first_lines(i, lambda k: f"  element {k} (x = {float(x[k]):.9g}): expected {_bin(wc[k], elem)}, "
                                           f"got {_bin(gc[k], elem)}")
        if not scales_bad.any() and not packing and not partial:
            hints += _element_hints(kind, x, gc, wc, ebad, want_scales, elem, block)
    if partial:
        hints.append(_hint("partial_block"))
    return "\n".join(lines + hints)


def _element_hints(kind, x, gc, wc, ebad, want_scales, elem, block) -> list[str]:
    """What the wrong element codes say, the scales being right."""
    sign = 1 << (elem.bits - 1)
    gm, wm = gc & (sign - 1), wc & (sign - 1)
    if kind == "NVFP4":
        ts = MX.nvfp4_tensor_scale(np.float32(np.max(np.abs(x))))
        s = np.repeat(F.decode(want_scales, F.E4M3), block)[: x.size]
        denom = (s * ts).astype(np.float32)
        if np.all(((denom > 0) & (denom < np.float32(2.0**-125)))[ebad]):
            return [_hint("reciprocal_range")]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.abs(np.where(denom > 0, x / denom, 0)).astype(np.float32)
        # ties away from zero change every exact tie that goes down to its even neighbour; a quotient an ulp
        # off (a reciprocal without its correction) changes only some of the ties
        goes_down = np.isin(q, F.tie_points(F.E2M1)) & (F.decode(wm, F.E2M1) < q)
        if not (goes_down.any() and np.all(ebad[goes_down])) and _only_next_to_ties(x, want_scales, ebad, block):
            return [_hint("reciprocal_ties")]
        with np.errstate(divide="ignore", invalid="ignore"):
            alone = F.encode(np.where(s > 0, x / s, 0).astype(np.float32), F.E2M1, saturate=True)
        if np.all(s[ebad] > 0) and np.array_equal(gc[ebad], alone[ebad]):
            return [_hint("denom_no_ts")]
    if np.all((gc[ebad] ^ wc[ebad]) == sign) and np.any(ebad & (wm > 0)):
        return [_hint("sign_lost")]
    hints = []
    if np.any(ebad & (wm == 0) & (gm == 0)):
        hints.append(_hint("signed_zero"))
    if np.any(ebad & (wm > 0) & (wm <= (1 << elem.man_bits)) & (gm == 0)):
        hints.append(_hint("subnormals_flushed"))
    if np.all(gm[ebad] == wm[ebad] + 1):
        hints.append(_hint("ties_away"))
    return hints


def _wrong_elements(kind, x, got_scales, bad, block, elements="E2M1") -> str | None:
    """Which elements the wrong scales were computed from, if they are those of a classic slip: half
    of each block, or windows of ``block`` values that start elsewhere (a thread's values straddling
    two scale blocks). None when no such window explains them."""
    n = x.size
    g = np.arange(got_scales.size)
    candidates = [(f"the first {block // 2} of each block's {block} elements", g * block, block // 2),
                  (f"the last {block // 2} of each block's {block} elements", g * block + block // 2, block // 2)]
    for start, what in [(g * block + block // 2, f"elements {block}g + {block // 2} .. {block}g + {block + block // 2 - 1}"),
                        (g * block - block // 2, f"elements {block}g - {block // 2} .. {block}g + {block // 2 - 1}"),
                        (g * (block // 4), f"elements {block // 4}g .. {block // 4}g + {block - 1}"),
                        (g * (block // 2), f"elements {block // 2}g .. {block // 2}g + {block - 1}")]:
        candidates.append((what, start, block))
    if bad.size < 2:  # one block is too little evidence to name its elements
        return None
    padded = np.zeros(2 * n + 2 * block, np.float32)
    padded[block: block + n] = x
    for what, start, width in candidates:
        idx = np.clip(start, -block, n + block - width)[:, None] + np.arange(width)[None, :] + block
        windows = padded[idx]
        amax = np.max(np.abs(windows), axis=1)
        if not amax[bad].any():  # windows of zeros explain any zero scale: no evidence
            continue
        if kind == "MX":
            if np.array_equal(got_scales[bad], MX.mx_scale_codes(amax, elements)[bad]):
                return what
        else:
            ts = MX.nvfp4_tensor_scale(np.float32(np.max(np.abs(x))))
            codes = F.encode((amax / np.float32(6)) / ts, F.E4M3, saturate=True)
            if np.array_equal(got_scales[bad], codes[bad]):
                return what
    return None


def _only_next_to_ties(x, want_scales, ebad, block) -> bool:
    """Are the wrong elements exactly those whose quotient by the block's denominator is an E2M1 tie
    or within two ulps of one (where a quotient one ulp off the exact one changes the code)?"""
    ts = MX.nvfp4_tensor_scale(np.float32(np.max(np.abs(x))))
    denom = np.repeat((F.decode(want_scales, F.E4M3) * ts).astype(np.float32), block)[: x.size]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.abs(x / denom).astype(np.float32)
    ties = F.tie_points(F.E2M1)
    near = np.zeros(x.size, bool)
    for t in ties:
        near |= np.abs(q.view(np.int32).astype(np.int64) - np.float32(t).view(np.int32).astype(np.int64)) <= 2
    return bool(ebad.any() and np.all(near[ebad]))


def _large(gpu, sim):
    return sim if on_simulator() else gpu


def check_nvfp4_quantize(launch, *, name="NVFP4 quantize", seed=None) -> None:
    """``launch(packed, scales, x, amax)``: E2M1 codes packed two per byte (element 2i low), one E4M3
    scale code per 16 elements, from float32 ``x`` and the tensor's amax (a one-element float32
    array); bit-exact with :func:`kernel_lab.quant.microscaling.nvfp4_quantize`. Besides the cases of
    :func:`block_inputs`, blocks whose quotients are exact E2M1 ties through denominators without an
    exact reciprocal (:func:`reciprocal_ties`), a tensor far below float32's range
    (:func:`tiny_tensor`, twice), and a tensor of zeros (amax 0: the tensor scale is 1).

    Bit-exact means no slack for a kernel that divides differently: a quotient x / denom one ulp away
    from the correctly rounded one lands on the other side of an E2M1 tie now and then, and the
    check then reports it. A kernel that takes its quotients from a shared reciprocal must correct
    them to the exact quotient (two FMAs, :func:`kernel_lab.quant.float_kernels.divide`)."""
    require_callable(launch, "launch")
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    cases = block_inputs(MX.NVFP4_BLOCK, rng, _large((1 << 22) + 37, (1 << 12) + 37))
    cases += [("reciprocal ties", reciprocal_ties()), ("tiny tensor", tiny_tensor(rng, -110)),
              ("tinier tensor", tiny_tensor(rng, -118))]
    # Two more cases, not counted in the line a correct kernel prints: a tensor of zeros (and -0), whose
    # amax is 0, so its tensor scale amax / 2688 must be replaced by 1 (else 0 / 0 = NaN for every scale);
    # and blocks whose largest quotients saturate (saturating_blocks), which random data meets only now
    # and then.
    zeros = np.zeros(MX.NVFP4_BLOCK + 5, np.float32)
    zeros[[1, 6, MX.NVFP4_BLOCK + 2]] = -0.0
    for label, x in cases + [("all zeros", zeros), ("saturating blocks", saturating_blocks(rng))]:
        want_p, want_s, amax = MX.nvfp4_quantize(x)
        got_p, got_s = _run(launch, [_poison_u8(want_p.size), _poison_u8(want_s.size)],
                            [x, np.array([amax], np.float32)], name)
        failure = _block_failure("NVFP4", x, got_p, got_s, want_p, want_s, F.E2M1, f"{name}, case {label}", seed,
                                 MX.NVFP4_BLOCK)
        if failure:
            raise CheckFailed(failure)
    progress.passed(name)
    print(f"{name}: scales and packed codes bit-exact in all {len(cases)} cases (ties, zeros, -0, partial blocks, "
          "ties through a reciprocal, tiny tensors)")


def check_mx_quantize(launch, elements="E2M1", *, name=None, seed=None) -> None:
    """``launch(codes, scales, x)``: MXFP4 (``elements="E2M1"``, packed two per byte) or MXFP8
    (``"E4M3"``, one per byte), one E8M0 scale code per 32 elements; bit-exact with
    :func:`kernel_lab.quant.microscaling.mx_quantize`. Besides the cases of :func:`block_inputs`, blocks
    of tiny values whose scale code clamps to 0."""
    require_callable(launch, "launch")
    elem = F.get_format(elements)
    name = name or ("MXFP4" if elem.name == "E2M1" else "MXFP8") + " quantize"
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    # 1001 values span two blocks of 256 threads of the one-byte kernels in the simulator
    cases = block_inputs(MX.MX_BLOCK, rng, _large((1 << 22) + 37, 1001))
    # One more case, not counted in the line a correct kernel prints: blocks so small (amax from 2^-120 down
    # to subnormals) that floor(log2(amax)) - emax + 127 is negative, so the code must be clamped to 0.
    tiny = rng.standard_normal(3 * MX.MX_BLOCK + 5) * np.repeat(np.exp2([-120.0, -128.0, -136.0, -146.0]),
                                                                MX.MX_BLOCK)[: 3 * MX.MX_BLOCK + 5]
    for label, x in cases + [("tiny blocks", tiny.astype(np.float32))]:
        want_c, want_s = MX.mx_quantize(x, elem.name)
        got_c, got_s = _run(launch, [_poison_u8(want_c.size), _poison_u8(want_s.size)], [x], name)
        failure = _block_failure("MX", x, got_c, got_s, want_c, want_s, elem, f"{name}, case {label}", seed,
                                 MX.MX_BLOCK)
        if failure:
            raise CheckFailed(failure)
    progress.passed(name)
    print(f"{name}: scales and codes bit-exact in all {len(cases)} cases (ties, zeros, -0, partial blocks)")


# ================================================================================================
# codes from the bits (05.4, exercise 3)


def code_inputs(rng, *, every_float16: bool) -> np.ndarray:
    """Where E2M1 and E4M3 encoders go wrong (both formats' ties and their float32 neighbours, every
    value, zeros, overflow, infinities, NaNs of both signs and other payloads), float16 bit patterns
    (all, or a sample), and random float32 of every magnitude, subnormals included; shuffled."""
    halves = np.arange(65536, dtype=np.uint16) if every_float16 else rng.integers(0, 65536, 600).astype(np.uint16)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    mags = np.exp2(rng.uniform(-149, 128, 400)) * rng.choice([-1.0, 1.0], 400)
    with np.errstate(over="ignore"):
        r = mags.astype(np.float32)
    x = np.concatenate([F.boundary_inputs(F.E2M1), F.boundary_inputs(F.E4M3), halves.view(np.float16).astype(np.float32),
                        nans, r])
    return rng.permutation(x).astype(np.float32)


def codes_failure(x, got, want, f, name="codes", seed=None, magnitude=False) -> str | None:
    """The message for codes ``got`` of ``x`` in format ``f`` (E2M1 with its sign, or the E4M3 code of
    |x| when ``magnitude``), or None when they are all ``want``."""
    bad = got != want
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)
    what = f"{f.name} codes of |x|" if magnitude else f"{f.name} codes"
    lines = [f"{name}: {idx.size} of {x.size} {what} wrong [seed={seed}]"]
    lines += _first_lines(idx, lambda i: f"  x = {float(x[i]):.9g} (float32 0x{int(x.view(np.uint32)[i]):08X}): "
                                         f"expected {_bin(want[i], f)}, got {_bin(got[i], f)}")
    if np.all(got == got[0]):
        return "\n".join(lines + [_hint("not_done")])
    if (got[bad] == 0x5A).all():
        return "\n".join(lines + [_hint("unwritten")])
    nan = np.isnan(x)
    with np.errstate(invalid="ignore"):
        ax = np.abs(x).astype(np.float64)
    sign = 0 if magnitude else 1 << (f.bits - 1)
    gm, wm = got & (0x7F if f.bits == 8 else 0x7), want & (0x7F if f.bits == 8 else 0x7)
    top = f.max_code
    hints = []
    finite = bad & ~nan
    if (bad & nan).any():
        hints.append(_hint("e4m3_nan" if magnitude else "e2m1_nan"))
    if not finite.any():
        return "\n".join(lines + hints)
    if sign and np.all((got[finite] ^ want[finite]) == sign):
        return "\n".join(lines + hints + [_hint("e2m1_sign")])
    over = ax >= f.max_value + (f.max_value - float(F.decode(np.uint8([top - 1]), f)[0])) / 2
    if np.all(over[finite]) or (finite & over & (gm > top)).any():
        hints.append(_hint("no_clamp"))
    plain = finite & ~over
    if plain.any():
        ties = np.isin(np.abs(x).astype(np.float32), F.tie_points(f))
        below = ax < f.min_normal
        d = gm[plain].astype(int) - wm[plain].astype(int)
        if np.all(below[plain]):
            hints.append(_hint("below_normal"))
        elif np.all(ties[plain]) and np.all(d == 1):
            hints.append(_hint("ties_away"))
        elif np.all(ties[plain]) and np.all(d == -1):
            hints.append(_hint("ties_down"))
        elif np.all(d == -1):
            hints.append(_hint("truncated"))
        elif np.mean(np.abs(d) == (1 << f.man_bits)) > 0.5:
            hints.append(_hint("rebias"))
    return "\n".join(lines + hints)


def check_codes_from_bits(launch, *, name="codes from the bits", seed=None, every_float16=None) -> None:
    """``launch(e2m1, e4m3, x)``: ``e2m1`` (uint8) must hold the E2M1 code of each float32 in ``x``
    (saturating, ties to even, sign kept, NaN by ml_dtypes' rule: see :mod:`kernel_lab.quant.fp8`),
    ``e4m3`` the saturating E4M3 code of its magnitude |x| (0x7F for a NaN), both bit for bit with
    :func:`kernel_lab.quant.fp8.encode`. On a GPU every float16 bit pattern too (``every_float16``)."""
    require_callable(launch, "launch")
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    every = (not on_simulator()) if every_float16 is None else every_float16
    x = code_inputs(rng, every_float16=every)
    with np.errstate(invalid="ignore"):
        want2 = F.encode(x, F.E2M1, saturate=True)
        want4 = F.encode(np.abs(x), F.E4M3, saturate=True)
    got2, got4 = _run(launch, [_poison_u8(x.size), _poison_u8(x.size)], [x], name)
    for got, want, f, magnitude in [(got2, want2, F.E2M1, False), (got4, want4, F.E4M3, True)]:
        failure = codes_failure(x, got, want, f, name, seed, magnitude)
        if failure:
            raise CheckFailed(failure)
    what = "every float16" if every else "600 float16 samples"
    progress.passed(name)
    print(f"{name}: E2M1 and E4M3 codes of {x.size} inputs bit-exact (every tie and its neighbours, {what}, "
          "subnormals, +-0, +-inf, NaN)")
