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
    blocks, signed zeros, and lengths 1, block-1, block+1, 3 blocks + 5 and a large one."""
    e2m1_ties = np.array([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -5.0, -0.0, 0.0, 0.2,
                          5.5], np.float32)  # amax 6: NVFP4 scale 1 (tensor scale 1), MX scale 2**0
    e4m3_ties = np.zeros(32, np.float32)  # amax 448: MXFP8 scale 2**0, E4M3 ties and subnormal ties
    e4m3_ties[:9] = [448.0, 1.0625, 17.0, -17.0, 2.0**-10, 3 * 2.0**-10, -(2.0**-10), 300.0, 0.0078125]
    ties = np.concatenate([e2m1_ties, -e2m1_ties, e4m3_ties,
                           np.array([2688.0, 0.1, -0.3, 7.0, -9.0], np.float32)]).astype(np.float32)
    cases = [("ties", ties)]
    for label, n in [("1", 1), ("block-1", block - 1), ("block+1", block + 1), ("3 blocks+5", 3 * block + 5),
                     ("large", large)]:
        nb = -(-n // block)
        scale = np.repeat(np.exp2(rng.uniform(-20, 20, nb)), block)[:n]
        x = (rng.standard_normal(n) * scale).astype(np.float32)
        if n > 4:
            x[rng.integers(0, n, max(1, n // 50))] = -0.0
            if nb > 2:
                x[block:2 * block] = 0.0  # an all-zero block
        cases.append((label, x))
    return cases


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
        elif np.all(diff > 0):
            hints.append(_hint("scale_rounded_up", rule=rule))
        elif np.all(diff < 0):
            hints.append(_hint("scale_rounded_down", rule=rule))
    if packed:
        gc, wc = MX.unpack_e2m1(got_codes, n), MX.unpack_e2m1(want_codes, n)
        swapped = ((got_codes >> 4) | ((got_codes & 0xF) << 4)).astype(np.uint8)
        if codes_bad.any() and np.array_equal(swapped[: n // 2], want_codes[: n // 2]) and n >= 2:
            hints.append(_hint("packing_order"))
    else:
        gc, wc = got_codes, want_codes
    ebad = gc != wc
    if ebad.any():
        i = np.flatnonzero(ebad)
        lines += _first_lines(i, lambda k: f"  element {k} (x = {float(x[k]):.9g}): expected {_bin(wc[k], elem)}, "
                                           f"got {_bin(gc[k], elem)}")
        sign = 1 << (elem.bits - 1)
        gm, wm = gc & (sign - 1), wc & (sign - 1)
        if not scales_bad.any():
            if np.any(ebad & (wm == 0) & (gm == 0)):
                hints.append(_hint("signed_zero"))
            if np.any(ebad & (wm > 0) & (wm <= (1 << elem.man_bits)) & (gm == 0)):
                hints.append(_hint("subnormals_flushed"))
            if np.all(gm[ebad] == wm[ebad] + 1):
                hints.append(_hint("ties_away"))
    bad_blocks = np.unique(np.concatenate([np.flatnonzero(scales_bad), np.flatnonzero(ebad) // block]))
    if n % block and bad_blocks.size and np.all(bad_blocks == (n - 1) // block):
        hints.append(_hint("partial_block"))
    return "\n".join(lines + hints)


def _large(gpu, sim):
    return sim if on_simulator() else gpu


def check_nvfp4_quantize(launch, *, name="NVFP4 quantize", seed=None) -> None:
    """``launch(packed, scales, x, amax)``: E2M1 codes packed two per byte (element 2i low), one E4M3
    scale code per 16 elements, from float32 ``x`` and the tensor's amax (a one-element float32
    array); bit-exact with :func:`kernel_lab.quant.microscaling.nvfp4_quantize`. Besides the cases of
    :func:`block_inputs`, a tensor of zeros (amax 0: the tensor scale is 1)."""
    require_callable(launch, "launch")
    seed = secrets.randbits(32) if seed is None else seed
    rng = np.random.default_rng(seed)
    cases = block_inputs(MX.NVFP4_BLOCK, rng, _large((1 << 22) + 37, 1001))
    # One more case, not counted in the line a correct kernel prints: a tensor of zeros (and -0), whose
    # amax is 0, so its tensor scale amax / 2688 must be replaced by 1 (else 0 / 0 = NaN for every scale).
    zeros = np.zeros(MX.NVFP4_BLOCK + 5, np.float32)
    zeros[[1, 6, MX.NVFP4_BLOCK + 2]] = -0.0
    for label, x in cases + [("all zeros", zeros)]:
        want_p, want_s, amax = MX.nvfp4_quantize(x)
        got_p, got_s = _run(launch, [_poison_u8(want_p.size), _poison_u8(want_s.size)],
                            [x, np.array([amax], np.float32)], name)
        failure = _block_failure("NVFP4", x, got_p, got_s, want_p, want_s, F.E2M1, f"{name}, case {label}", seed,
                                 MX.NVFP4_BLOCK)
        if failure:
            raise CheckFailed(failure)
    progress.passed(name)
    print(f"{name}: scales and packed codes bit-exact in all {len(cases)} cases (ties, zeros, -0, partial blocks)")


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
