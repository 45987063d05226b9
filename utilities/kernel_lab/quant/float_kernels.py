"""Module 05's floating-point kernels (FP8, NVFP4, MX), as the package's reference kernels.

Notebooks 05.3 and 05.4 have the learner write these; the package keeps the same kernels so that
``scripts/gpu_module05_float_probe.py`` times exactly what the notebooks teach, and so that the
tests can run them in the simulator against the NumPy references (``fp8``, ``microscaling``).

The kernels the notebooks teach get a float's bits in two ways, since Numba itself cannot
reinterpret a float32 *scalar* as its bits:

* from memory: the input is passed twice over the same buffer, or only as a ``uint32`` view
  (``x.view(np.uint32)``, no copy), and the FP8 encoders of 05.3 work on those bits;
* from arithmetic: a value computed in the kernel (a block's scale, ``x / scale``) is split with
  ``math.frexp`` (exact: ``|v| = m * 2**e`` with ``0.5 <= m < 1``, so ``m * 2**24`` is the 24-bit
  significand) and rebuilt with ``math.ldexp`` (exact, a power-of-two scaling; on a GPU its exponent must be an int32).

Both paths end in :func:`round_to_code`, the one place those kernels round (to nearest, ties to
even). The fast block quantizers (05.4's last NVFP4 kernel, which the learner writes in three steps,
and the package's MX quad kernels) instead read the bits with :func:`kernel_lab.bitcast.float_bits`
and round with a handful of integer instructions (:func:`e2m1_code`, :func:`e4m3_magnitude_code`).
Where a notebook defines a kernel or device function of the same name as one here, the two are the
same code (``tests/test_package_copies.py``).
Format constants are passed as arguments (see :data:`ENCODE_ARGS` / :data:`DECODE_ARGS`).

Layouts: FP8 codes are one byte per element. E2M1 codes are packed two per byte, **element 2i in
the low nibble, element 2i+1 in the high nibble** (the order of CUDA's ``__nv_fp4x2_e2m1`` and of
PyTorch's ``float4_e2m1fn_x2``); an odd length leaves the last high nibble 0. NVFP4: one E4M3 scale
per 16 elements; MX: one E8M0 scale per 32; the last block may be shorter.
"""

from __future__ import annotations

import math

import numpy as np

from ..environment import on_simulator
from ..sizes import blocks_for
from . import fp8 as _fp8
from ..bitcast import bits_float, float_bits
from ..validate import KernelLabArgumentError
from ..vector_loads import load4, store4
from .integer import AMAX_FLOOR
from .int8 import floor_amax

from numba import cuda, float32, int32, int64, uint8, uint16, uint32  # noqa: E402  (after kernel_lab chose the target)

if on_simulator():  # the block formats' kernels shuffle within warps: Kernel Lab's simulator extensions
    from .. import simulator as _sim

    _sim.install()

THREADS = 256  # a multiple of 32: the block formats' shuffles need whole warps
FULL_MASK = 0xFFFFFFFF
NVFP4_BLOCK = 16
MX_BLOCK = 32
NVFP4_AMAX_DIVISOR = 6.0 * 448.0  # tensor scale = amax / (E2M1 max * E4M3 max)
SPECIALS = {"none": 0, "e4m3": 1, "ieee": 2}
# The block formats' format arguments for encode_value (M, BIAS, MAX_CODE, SIGN_SHIFT) and decode_value
# (M, BIAS, EXP_BITS, SIGN_SHIFT), as 05.4's kernels spell them (``encode_value(v, *E2M1)``).
E2M1 = (1, 1, 7, 3)
E4M3 = (3, 7, 0x7E, 7)
E2M1_DEC = (1, 1, 2, 3)
E4M3_DEC = (3, 7, 4, 7)


def _eight_bits(fmt):
    f = _fp8.get_format(fmt)
    if f.bits != 8:
        raise KernelLabArgumentError(
            f"the FP8 encoders and decoders take 8-bit formats (E4M3, E5M2), not {f.name}: their sign is bit 7, "
            f"and {f.name} has {f.bits} bits. E2M1 codes come from e2m1_code or encode_value(v, *E2M1) "
            "(kernels) and kernel_lab.quant.fp8.encode (NumPy)")
    return f


def encode_args(fmt, saturate=True):
    """``(M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE)`` of an 8-bit format, for the encoders."""
    f = _eight_bits(fmt)
    nan = f.nan_code if f.nan_code is not None else f.max_code
    return (f.man_bits, f.bias, f.max_code, f.overflow_code(saturate), nan)


def decode_args(fmt):
    """``(M, BIAS, EXP_BITS, SPECIALS)`` of an 8-bit format, for the decoders."""
    f = _eight_bits(fmt)
    return (f.man_bits, f.bias, f.exp_bits, SPECIALS[f.specials])


# ================================================================================================
# element codes


@cuda.jit(device=True)
def round_to_code(e, sig, M, BIAS, MAX_CODE, OVERFLOW_CODE):
    """Magnitude code of ``sig * 2**(e - 23)`` (``sig``: 24-bit significand, implicit 1 included)."""
    eff = max(e, 1 - BIAS)  # below the smallest normal exponent: a subnormal of the format
    shift = 23 - M + eff - e
    if shift >= 25:
        return 0  # less than half the smallest subnormal
    q = sig >> shift
    rem = sig & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if rem > half or (rem == half and (q & 1) == 1):
        q += 1  # to nearest; a tie goes to the even q
    code = ((eff + BIAS - 1) << M) + q  # a carry out of the mantissa moves into the exponent
    if code > MAX_CODE:
        code = OVERFLOW_CODE
    return code


@cuda.jit(device=True)
def encode_bits(b, M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE):
    """8-bit code of the float32 whose bits are ``b`` (an int64 holding the uint32 bits)."""
    sign = (b >> 31) << 7
    a = b & 0x7FFFFFFF
    if a > 0x7F800000:
        return sign | NAN_CODE
    return sign | round_to_code((a >> 23) - 127, (a & 0x7FFFFF) | 0x800000, M, BIAS, MAX_CODE, OVERFLOW_CODE)


@cuda.jit(device=True)
def encode_value(v, M, BIAS, MAX_CODE, SIGN_SHIFT):
    """Saturating code of a float32 value ``v`` computed in the kernel (frexp, no bits). A NaN gives the
    codes of :func:`e2m1_code` and :func:`e4m3_code` (and of ``kernel_lab.quant.fp8.encode``, ml_dtypes'):
    for E2M1, which has no NaN, 0b1000 when its sign bit is clear and 0b0000 when it is set; for E4M3,
    its NaN 0x7F with the sign. Decided on the bits, as those do (a comparison that only a NaN fails
    can be compiled away)."""
    sign = 0
    if math.copysign(float32(1), v) < 0:
        sign = 1 << SIGN_SHIFT
    if (float_bits(v) & uint32(0x7FFFFFFF)) > uint32(0x7F800000):  # NaN: bits above infinity's
        if SIGN_SHIFT == 3:  # E2M1: ml_dtypes' code, -0's pattern with the NaN's sign bit flipped
            return sign ^ 8
        return sign | (MAX_CODE + 1)  # E4M3: S.1111.111
    if v == 0:
        return sign
    mant, ex = math.frexp(v)
    sig = int64(abs(mant) * float32(16777216))  # exact: the mantissa has 24 bits
    return sign | round_to_code(int64(ex) - 1, sig, M, BIAS, MAX_CODE, MAX_CODE)


@cuda.jit(device=True)
def decode_bits(c, M, BIAS, EXP_BITS, SPECIALS):
    """float32 bits (as an int64) of the 8-bit code ``c``."""
    sign = ((c >> 7) & 1) << 31
    e = (c >> M) & ((1 << EXP_BITS) - 1)
    m = c & ((1 << M) - 1)
    top = (1 << EXP_BITS) - 1
    if SPECIALS == 2 and e == top:
        return sign | (0x7F800000 if m == 0 else 0x7FC00000)
    if SPECIALS == 1 and e == top and m == (1 << M) - 1:
        return sign | 0x7FC00000
    if e == 0:
        if m == 0:
            return sign
        e = 1
        while m < (1 << M):  # normalise the subnormal: float32 has exponents to spare
            m <<= 1
            e -= 1
    return sign | ((e - BIAS + 127) << 23) | ((m & ((1 << M) - 1)) << (23 - M))


@cuda.jit(device=True)
def decode_value(c, M, BIAS, EXP_BITS, SIGN_SHIFT):
    """float32 value of a code of a format without inf/NaN (E2M1 elements, E4M3 scales)."""
    e = (c >> M) & ((1 << EXP_BITS) - 1)
    m = c & ((1 << M) - 1)
    if e == 0:
        v = math.ldexp(float32(m), int32(1 - BIAS - M))
    else:
        v = math.ldexp(float32(m + (1 << M)), int32(e - BIAS - M))
    v = float32(v)
    if (c >> SIGN_SHIFT) & 1:
        v = -v
    return v


# ================================================================================================
# FP8 kernels (05.3)


@cuda.jit
def fp8_encode_kernel(xbits, out, M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE):
    i = cuda.grid(1)
    if i < xbits.size:
        out[i] = uint8(encode_bits(int64(xbits[i]), M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE))


@cuda.jit
def fp8_encode_x4_kernel(xbits, out, out4, M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE):
    """Four elements per thread, stored as one uint32 (element 4t in the lowest byte)."""
    t = cuda.grid(1)
    i = 4 * t
    n = xbits.size
    if i + 3 < n:
        word = int64(0)
        for k in range(4):
            word |= encode_bits(int64(xbits[i + k]), M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE) << (8 * k)
        out4[t] = uint32(word)
    else:
        while i < n:
            out[i] = uint8(encode_bits(int64(xbits[i]), M, BIAS, MAX_CODE, OVERFLOW_CODE, NAN_CODE))
            i += 1


@cuda.jit
def fp8_decode_kernel(codes, outbits, M, BIAS, EXP_BITS, SPECIALS):
    i = cuda.grid(1)
    if i < codes.size:
        outbits[i] = uint32(decode_bits(int64(codes[i]), M, BIAS, EXP_BITS, SPECIALS))


@cuda.jit
def fp8_decode_x4_kernel(codes, codes4, outbits, M, BIAS, EXP_BITS, SPECIALS):
    """Four codes per thread, read as one uint32."""
    t = cuda.grid(1)
    i = 4 * t
    n = codes.size
    if i + 3 < n:
        word = int64(codes4[t])
        for k in range(4):
            outbits[i + k] = uint32(decode_bits((word >> (8 * k)) & 0xFF, M, BIAS, EXP_BITS, SPECIALS))
    else:
        while i < n:
            outbits[i] = uint32(decode_bits(int64(codes[i]), M, BIAS, EXP_BITS, SPECIALS))
            i += 1


def _words(arr, n):
    """The first n // 4 * 4 bytes of a uint8 device array as uint32 words (an empty stand-in if none)."""
    whole = n // 4 * 4
    return arr[:whole].view(np.uint32) if whole else cuda.device_array(1, np.uint32)


def fp8_encode(out, x, fmt="E4M3", saturate=True, per_thread=1):
    """Launch an encoder: ``out`` (uint8, n) = codes of ``x`` (float32, n), on the device."""
    args = encode_args(fmt, saturate)
    bits = x.view(np.uint32)
    if per_thread == 4:
        threads = blocks_for(x.size, 4)
        fp8_encode_x4_kernel[blocks_for(threads, THREADS), THREADS](bits, out, _words(out, x.size), *args)
    else:
        fp8_encode_kernel[blocks_for(x.size, THREADS), THREADS](bits, out, *args)


def fp8_decode(out, codes, fmt="E4M3", per_thread=1):
    """Launch a decoder: ``out`` (float32, n) = values of ``codes`` (uint8, n), on the device."""
    args = decode_args(fmt)
    outbits = out.view(np.uint32)
    if per_thread == 4:
        threads = blocks_for(codes.size, 4)
        fp8_decode_x4_kernel[blocks_for(threads, THREADS), THREADS](codes, _words(codes, codes.size), outbits,
                                                                     *args)
    else:
        fp8_decode_kernel[blocks_for(codes.size, THREADS), THREADS](codes, outbits, *args)


# ================================================================================================
# NVFP4 (05.4): E2M1 elements, an E4M3 scale per 16, an FP32 tensor scale from the tensor's amax
#
# The quantizer is at the end of the fast forms below (nvfp4_quantize_blocks, the kernel the learner
# writes last in 05.4). Notebook 05.4's first quantizer (one thread per output byte, eight lanes a
# block, the general encoder) is the learner's alone: nothing else runs it, so the package keeps no copy.


@cuda.jit
def nvfp4_dequantize_tail(packed, scales, amax, out, b0):
    """One thread per byte from byte b0 on (two values, element 2t low): the bytes after the table
    kernel's whole words (all of them for arrays shorter than a word)."""
    t = cuda.grid(1) + b0
    i = 2 * t
    n = out.size
    if i < n:
        a = amax[0]
        ts = (max(a, float32(AMAX_FLOOR)) if a > 0 else a) / float32(NVFP4_AMAX_DIVISOR)  # integer.AMAX_FLOOR
        if ts == 0:
            ts = float32(1)
        denom = decode_value(int64(scales[t // 8]), 3, 7, 4, 7) * ts
        b = int64(packed[t])
        out[i] = decode_value(b & 0xF, 1, 1, 2, 3) * denom
        if i + 1 < n:
            out[i + 1] = decode_value(b >> 4, 1, 1, 2, 3) * denom


# --- the dequantizers' fast form: tables in shared memory, a word of codes per step -------------
#
# A dequantizer decodes a handful of code values (16 E2M1, 256 E4M3) again and again: decode each
# once into a table, keep the tables in shared memory, and let a thread take 4-byte words of codes
# (4 E2M1 values in 2 bytes, 4 E4M3 values in 4), four a block apart loaded before any lookup
# (05.1's tile), each stored with one 16-byte store: one kernel per element width. The products are the same float32 operations as the one-byte kernels'
# (``value * denom`` for NVFP4; for MX ``value * 2^k``, exact as ``ldexp``), so the outputs have the
# same bits. The last bytes (a row end that is not a whole word) take the one-byte kernels.

WORDS_PER_THREAD = 4


@cuda.jit
def _value_tables(e2m1, e4m3, e8m0):
    """e2m1[c] (16), e4m3[c] (256): the values of the codes (no NaN in these uses, as
    ``decode_value``); e8m0[c] (256): 2^(c - 127) as float32 (c = 255, NaN in MX, gives inf: the
    kernels send those blocks to ``ldexp`` instead)."""
    c = cuda.grid(1)
    if c < 16:
        e2m1[c] = decode_value(int64(c), 1, 1, 2, 3)
    if c < 256:
        e4m3[c] = decode_value(int64(c), 3, 7, 4, 7)
        e8m0[c] = float32(math.ldexp(float32(1), int32(c - 127))) if c < 255 else float32(math.inf)


_TABLES = {}


def value_tables():
    """The three tables on the device, made once."""
    if "t" not in _TABLES:
        e2m1, e4m3, e8m0 = (cuda.device_array(k, np.float32) for k in (16, 256, 256))
        _value_tables[1, 256](e2m1, e4m3, e8m0)
        _TABLES["t"] = (e2m1, e4m3, e8m0)
    return _TABLES["t"]


@cuda.jit(device=True, inline="always")
def _shared_tables(e2m1, e4m3, e8m0, l2, l4, l8):
    t, nb = cuda.threadIdx.x, cuda.blockDim.x
    for i in range(t, 256, nb):
        if i < 16:
            l2[i] = e2m1[i]
        l4[i] = e4m3[i]
        l8[i] = e8m0[i]
    cuda.syncthreads()


def _quad_dequantizer(bits: int):
    """The kernel for codes of ``bits`` bits (4: E2M1, packed two to a byte; 8: E4M3), read four at
    a time (a uint16 or a uint32: quad j holds values 4j .. 4j + 3), one 16-byte store per quad,
    four quads per thread a block apart, all loaded first. ``mx`` False: NVFP4 (an E4M3 scale per
    16 values times the tensor scale from ``amax``); True: MX (an E8M0 scale per 32)."""
    MASK = (1 << bits) - 1

    @cuda.jit
    def dequantize_quads(quads, scales, amax, out, mx, e2m1, e4m3, e8m0):
        l2 = cuda.shared.array(16, float32)
        l4 = cuda.shared.array(256, float32)
        l8 = cuda.shared.array(256, float32)
        _shared_tables(e2m1, e4m3, e8m0, l2, l4, l8)
        values = l2 if bits == 4 else l4  # the element format's table
        nb = cuda.blockDim.x
        j0 = cuda.blockIdx.x * WORDS_PER_THREAD * nb + cuda.threadIdx.x
        nq = quads.size
        ts = float32(1)
        if not mx:
            a = amax[0]
            ts = (max(a, float32(AMAX_FLOOR)) if a > 0 else a) / float32(NVFP4_AMAX_DIVISOR)  # integer.AMAX_FLOOR
            if ts == 0:
                ts = float32(1)
        p = cuda.local.array(WORDS_PER_THREAD, int32)
        sc = cuda.local.array(WORDS_PER_THREAD, int32)
        for k in range(WORDS_PER_THREAD):  # every load first
            j = j0 + k * nb
            if j < nq:
                p[k] = int32(quads[j])
                sc[k] = int32(scales[j // 8]) if mx else int32(scales[j // 4])
        for k in range(WORDS_PER_THREAD):
            j = j0 + k * nb
            if j < nq:
                q = p[k]
                code = sc[k]
                if mx:
                    if code == 255:  # NaN scale: ldexp's answer (0 stays 0), not the table's inf
                        for i in range(4):
                            out[4 * j + i] = float32(math.ldexp(values[(q >> (bits * i)) & MASK], int32(128)))
                        continue
                    d = l8[code]
                else:
                    d = l4[code] * ts
                store4(out, 4 * j, values[q & MASK] * d, values[(q >> bits) & MASK] * d,
                       values[(q >> (2 * bits)) & MASK] * d, values[(q >> (3 * bits)) & MASK] * d)

    return dequantize_quads


QUAD_DEQUANTIZERS = {4: _quad_dequantizer(4), 8: _quad_dequantizer(8)}


def _word_grid(nw):
    return max(1, blocks_for(nw, WORDS_PER_THREAD * THREADS))


# --- the block quantizers' fast forms: codes from the bits ---------------------------------------
#
# One thread per output byte (05.4's first kernels, and mxfp4/mxfp8_quantize_kernel below) spends its
# time on instructions: per pair of elements two divisions (or ldexp calls), two general encodes
# (frexp, 64-bit shifts) and one E4M3 scale encode per lane. The fast forms round each element to
# E2M1 or E4M3 from its bits (below) and take more values per thread: NVFP4 a whole block of 16 per
# thread, its 16 quotients from one reciprocal (nvfp4_quantize_blocks, the kernel 05.4's learner
# writes last, in three steps); MX four values per lane from one 16-byte load, eight lanes a block of
# 32 (the quad kernels, the package's own). The products and quotients are the same float32
# operations as the references', so the codes are the same bits.


# Rounding by the float unit's own adder, and by integer arithmetic on the bits: no branch and no
# comparison chain (seven comparisons, one per E2M1 midpoint, were two thirds of this kernel's
# instructions, and the general encoder's frexp and 64-bit shifts most of the rest):
#
# * below a format's smallest normal, its values are the multiples of one step (0.5 for E2M1, 2^-9
#   for E4M3); adding a power of two whose ulp is that step (2^22, 2^14) makes the float adder round
#   to a multiple of it, to nearest, ties to even, and the sum's low mantissa bits are the code;
# * from the smallest normal up, a format with M mantissa bits is float32 with the low 23 - M bits
#   rounded off: add half of their range minus one, plus the lowest kept bit (a tie then carries
#   only when that bit is odd: ties to even), and shift; a carry out of the mantissa moves into the
#   exponent, as it must, and the code is the shifted bits minus the exponent's rebias.


# Numba does integer arithmetic in 64 bits; every step below is cast back to int32 so that the
# compiler keeps it in 32 (a 64-bit add, shift or compare is two or three instructions).


@cuda.jit(device=True, forceinline=True)
def round_bits(b, drop, rebias, top):
    """Code of the magnitude whose float32 bits are ``b`` (at least the format's smallest normal), in a
    format keeping ``23 - drop`` mantissa bits: to nearest, ties to even, at most ``top``. ``rebias``
    is ``(127 - BIAS) << M``: the float32 exponent field less the format's, in place in the code."""
    r = int32(b + int32((1 << (drop - 1)) - 1))  # half a step less one ...
    r = int32(r + int32((b >> drop) & 1))  # ... plus the last kept bit: a tie carries when that bit is odd
    return min(int32(int32(r >> drop) - rebias), top)


@cuda.jit(device=True, forceinline=True)
def e2m1_code(q):
    """Saturating E2M1 code of ``q``: to nearest, ties to even, the sign from its sign bit (-0
    included). A NaN (E2M1 has none) gives ml_dtypes' code: 0b1000 for a NaN whose sign bit is clear,
    0b0000 for one whose sign bit is set (see :mod:`kernel_lab.quant.fp8`). The reference's code
    for every float32."""
    a = abs(q)
    if a < float32(1):  # 0, 0.5 or 1: the adder rounds a + 2^22 to a multiple of its ulp, 0.5
        c = int32(int32(float_bits(a + float32(4194304.0))) - int32(0x4A800000))
    else:  # NaN's bits taken as infinity's: no int32 overflow in round_bits
        c = round_bits(min(int32(float_bits(a)), int32(0x7F800000)), 22, int32(252), int32(7))
    if (float_bits(q) & uint32(0x7FFFFFFF)) > uint32(0x7F800000):  # NaN: bits above infinity's
        c = int32(8)
    return int32(c ^ int32(int32(float_bits(q) >> 28) & int32(8)))  # the sign bit, -0's included


@cuda.jit(device=True, forceinline=True)
def e4m3_magnitude_code(s):
    """Saturating E4M3 code of ``s >= 0`` (NaN: E4M3's NaN, 0x7F): the reference's code."""
    if s < float32(0.015625):  # below 2^-6: steps of 2^-9, the ulp of 2^14: codes 0..8
        c = int32(int32(float_bits(s + float32(16384.0))) - int32(0x46800000))
    else:
        c = round_bits(min(int32(float_bits(s)), int32(0x7F800000)), 20, int32(960), int32(0x7E))
    if (float_bits(s) & uint32(0x7FFFFFFF)) > uint32(0x7F800000):  # NaN: bits above infinity's
        c = int32(0x7F)
    return c


@cuda.jit(device=True, forceinline=True)
def divide(v, d, r):
    """``v / d`` correctly rounded, from ``r = 1 / d`` (correctly rounded, computed once for many
    ``v``): the quotient ``q0 = v r`` is within an ulp, its remainder ``v - q0 d`` is exact in one FMA,
    and one more FMA corrects ``q0`` (Markstein's theorem; the same last three steps as the
    compiler's own division). Three instructions where a division is about ten with a branch. The
    caller keeps ``d`` and ``1 / d`` normal. Two cases return ``q0``: zero (the correction would add
    +0 and lose -0's sign) and a quotient past float32's range (the remainder is then NaN; ``q0`` is
    the infinity the division gives)."""
    q0 = v * r
    q = cuda.fma(cuda.fma(-d, q0, v), r, q0)
    keep = (q0 != float32(0)) & (abs(q) <= float32(3.4028234663852886e38))  # '&', not 'and': a select, no branch
    return q if keep else q0


@cuda.jit(device=True, forceinline=True)
def e4m3_code(q):
    """Saturating E4M3 code of ``q`` with its sign (NaN: 0x7F with its sign): the reference's code."""
    return int32(e4m3_magnitude_code(abs(q)) | int32(int32(float_bits(q) >> 24) & int32(0x80)))


@cuda.jit(device=True, forceinline=True)
def e4m3_magnitude_value(c):
    """The float32 value of an E4M3 code 0..0x7E (no sign)."""
    if c >= 8:
        return bits_float(uint32((c + int32(960)) << 20))
    return float32(c) * float32(0.001953125)  # subnormals: c * 2^-9


def _quad_quantizer(fmt: str):
    """``fmt``: "MXFP4" or "MXFP8" (8 lanes a block of 32): quad j of x (values 4j .. 4j + 3) -> word j
    of the codes (2 bytes of E2M1 codes, or 4 of E4M3); four quads per thread a block apart, all
    loaded first. x.size must be a multiple of 4. One kernel per format: each holds only its own
    path. (NVFP4 had a quad form too, at about 72% of the copy roofline on an H100: its scale's
    divisions and encode ran in each of a block's four lanes; nvfp4_quantize_blocks replaced it.)"""
    fp8 = fmt == "MXFP8"
    EMAX = int32(8 if fp8 else 2)  # the element format's largest exponent (448 = 1.75 * 2^8, 6 = 1.5 * 2^2)

    @cuda.jit
    def quantize_quads(x, words, scales):
        nb = cuda.blockDim.x
        j0 = cuda.blockIdx.x * 4 * nb + cuda.threadIdx.x
        nq = x.size // 4
        v = cuda.local.array((4, 4), float32)
        for k in range(4):  # every load first; quads past the end are zeros and still shuffle
            j = j0 + k * nb
            if j < nq:
                v[k, 0], v[k, 1], v[k, 2], v[k, 3] = load4(x, 4 * j)
            else:
                v[k, 0], v[k, 1], v[k, 2], v[k, 3] = float32(0), float32(0), float32(0), float32(0)
        for k in range(4):
            j = j0 + k * nb
            m = max(max(abs(v[k, 0]), abs(v[k, 1])), max(abs(v[k, 2]), abs(v[k, 3])))
            m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, 1))  # the block's lanes: j % 4 == lane % 4
            m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, 2))
            m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, 4))
            # E8M0 code: floor(log2 m) is m's exponent field less 127 (subnormal m and 0 clamp to 0): the
            # rule of mx_scale_code, read from the bits
            code = min(max(int32(float_bits(m) >> 23) - EMAX, int32(0)), int32(254))
            # v * 2^(127 - code) (ldexp's bits): the power of two built from its exponent field
            f = bits_float(uint32((int32(254) - code) << 23) if code < 254 else uint32(0x400000))
            c = cuda.local.array(4, int32)
            for i in range(4):
                if fp8:
                    c[i] = e4m3_code(v[k, i] * f)
                else:
                    c[i] = e2m1_code(v[k, i] * f)
            if j < nq:
                if fp8:
                    words[j] = uint32(c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24))
                else:
                    words[j] = uint16(c[0] | (c[1] << 4) | (c[2] << 8) | (c[3] << 12))
                if j % 8 == 0:
                    scales[j // 8] = uint8(code)
    return quantize_quads


QUAD_QUANTIZERS = {f: _quad_quantizer(f) for f in ("MXFP4", "MXFP8")}


@cuda.jit
def nvfp4_quantize_blocks(x, packed, packed32, scales, amax):
    """NVFP4, one block of 16 values per thread: 05.4's last kernel, the learner's (exercise 5).

    The block's amax, its scale and the scale's reciprocal are computed once per 16 values (in the
    kernels with one byte per thread, every lane of a block computed them again), the 16 values come
    in with four 16-byte loads and their codes go out as two 4-byte words of ``packed32`` (the uint32
    view of ``packed``'s whole blocks); a last, partial block is read and written element by element,
    through ``packed``. Each code is rounded from the bits (:func:`e2m1_code`), each quotient by the
    block's scale comes from one reciprocal and two FMAs (:func:`divide`), exactly rounded, so the
    codes are the reference's bit for bit. Where a divisor or its reciprocal would not be a normal
    float32 (a tensor or a block far below float32's range), plain divisions take over. On an H100 an
    earlier form of this kernel (whole blocks only) reached 98% of the copy roofline."""
    b = cuda.grid(1)  # this thread's block: x[16b .. 16b + 15], scale code scales[b]
    n = x.size
    if 16 * b >= n:
        return  # no shuffles here: a thread past the end may leave at once
    whole = 16 * b + 16 <= n
    v = cuda.local.array(16, float32)
    if whole:  # four 16-byte loads (16b is a multiple of 4)
        for k in range(4):
            v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3] = load4(x, 16 * b + 4 * k)
    else:  # the last, partial block: zeros past the end
        for i in range(16):
            v[i] = x[16 * b + i] if 16 * b + i < n else float32(0)
    m = float32(0)
    for i in range(16):
        m = max(m, abs(v[i]))
    ts = amax[0] / float32(2688)  # the FP32 tensor scale: amax / (6 * 448)
    if ts == 0:
        ts = float32(1)
    if float32(2.0 ** -125) <= ts <= float32(2.0 ** 125) and m >= float32(2.0 ** -100):  # all normal
        code = e4m3_magnitude_code(divide(divide(m, float32(6), float32(1 / 6)), ts, float32(1) / ts))
    else:
        code = e4m3_magnitude_code((m / float32(6)) / ts)
    denom = e4m3_magnitude_value(code) * ts
    c = cuda.local.array(16, int32)
    if float32(2.0 ** -125) <= denom <= float32(2.0 ** 125):  # 1 / denom normal: one division for 16
        r = float32(1) / denom
        for i in range(16):
            c[i] = e2m1_code(divide(v[i], denom, r))
    else:
        for i in range(16):
            if denom > 0:
                c[i] = e2m1_code(v[i] / denom)
            else:  # a block far below the tensor's scale: zeros, signs kept
                c[i] = int32(int32(float_bits(v[i]) >> 28) & int32(8))
    if whole:  # two words of eight codes, element 16b + i in bits 4(i % 8) of word 2b + i // 8
        for h in range(2):
            w = uint32(0)
            for i in range(8):
                w |= uint32(c[8 * h + i]) << uint32(4 * i)
            packed32[2 * b + h] = w
    else:
        for j in range(8):
            if 16 * b + 2 * j < n:
                packed[8 * b + j] = uint8(c[2 * j] | (c[2 * j + 1] << 4))
    scales[b] = uint8(code)


@cuda.jit(device=True, forceinline=True)
def nvfp4_quantize_block(v, b, n, m, ts, packed, packed32, scales):
    """Block ``b`` of NVFP4 (its 16 values in the local array ``v``, zeros past ``n``; ``m`` their amax,
    ``ts`` the tensor scale): its scale and codes by the lines of :func:`nvfp4_quantize_blocks`, written
    to ``packed32`` (a whole block) or ``packed`` (the last, partial one) and ``scales``. 05.4's lean
    kernel (exercise 6) calls it for every block its fast path does not take: a partial block, a
    tensor or block far below float32's range, and a block whose largest quotient may saturate."""
    if float32(2.0 ** -125) <= ts <= float32(2.0 ** 125) and m >= float32(2.0 ** -100):  # all normal
        code = e4m3_magnitude_code(divide(divide(m, float32(6), float32(1 / 6)), ts, float32(1) / ts))
    else:
        code = e4m3_magnitude_code((m / float32(6)) / ts)
    denom = e4m3_magnitude_value(code) * ts
    c = cuda.local.array(16, int32)
    if float32(2.0 ** -125) <= denom <= float32(2.0 ** 125):  # 1 / denom normal: one division for 16
        r = float32(1) / denom
        for i in range(16):
            c[i] = e2m1_code(divide(v[i], denom, r))
    else:
        for i in range(16):
            if denom > 0:
                c[i] = e2m1_code(v[i] / denom)
            else:  # a block far below the tensor's scale: zeros, signs kept
                c[i] = int32(int32(float_bits(v[i]) >> 28) & int32(8))
    if 16 * b + 16 <= n:  # two words of eight codes
        for h in range(2):
            w = uint32(0)
            for i in range(8):
                w |= uint32(c[8 * h + i]) << uint32(4 * i)
            packed32[2 * b + h] = w
    else:
        for j in range(8):
            if 16 * b + 2 * j < n:
                packed[8 * b + j] = uint8(c[2 * j] | (c[2 * j + 1] << 4))
    scales[b] = uint8(code)


def _check_nvfp4_arrays(packed, scales, x, amax):
    """The launcher's promise, checked before anything runs: a clear message instead of a kernel that
    reads or writes past an array (or a 16-byte load at a misaligned address, on a GPU)."""
    n = x.size
    if x.ndim != 1 or x.dtype != np.float32 or n == 0:
        raise KernelLabArgumentError(f"x must be a non-empty 1-D float32 device array, got {x.dtype} of shape "
                                     f"{x.shape}")
    for name, arr, size, dtype in [("packed", packed, (n + 1) // 2, np.uint8), ("scales", scales, -(-n // 16), np.uint8),
                                   ("amax", amax, 1, np.float32)]:
        if arr.ndim != 1 or arr.dtype != dtype or arr.size != size:
            raise KernelLabArgumentError(f"{name} must be a 1-D {np.dtype(dtype).name} device array of {size} "
                                         f"elements for {n} values, got {arr.dtype} of shape {arr.shape}")
    pointer = getattr(getattr(x, "gpu_data", None), "device_ctypes_pointer", None)
    if pointer is not None and pointer.value and pointer.value % 16:
        raise KernelLabArgumentError("x must start at a 16-byte boundary (a device allocation, or a slice from "
                                     "a multiple of 4): the kernel reads it with 16-byte loads")


def nvfp4_words(packed, n):
    """The uint32 view of the bytes of ``packed`` that hold whole blocks of 16 (8 bytes each), or a
    one-word stand-in when there is none (shorter than one block)."""
    whole = n // 16 * 8
    return packed[:whole].view(np.uint32) if whole else cuda.device_array(1, np.uint32)


def nvfp4_quantize(packed, scales, x, amax):
    """Launch :func:`nvfp4_quantize_blocks`: ``packed`` (uint8, (n + 1) // 2) and ``scales`` (uint8, one
    per 16) from ``x`` (float32, n) and the tensor's amax (a one-element float32 device array).

    ``amax`` is floored in place first (``max(amax, 2^-126)`` unless 0: :func:`kernel_lab.quant.int8.floor_amax`,
    the reference's :func:`kernel_lab.quant.microscaling.nvfp4_tensor_scale`): the kernel is the notebook's,
    which divides amax as it is, and a subnormal amax would make its tensor scale 0, then 1, and the whole
    tensor zeros. The dequantizers floor it the same way, so the array serves both."""
    _check_nvfp4_arrays(packed, scales, x, amax)
    floor_amax[1, 1](amax)
    nblocks = blocks_for(x.size, 16)
    nvfp4_quantize_blocks[blocks_for(nblocks, THREADS), THREADS](x, packed, nvfp4_words(packed, x.size), scales,
                                                                 amax)


def nvfp4_dequantize(out, packed, scales, amax):
    """Whole words (8 values) by the table kernel, the rest of the bytes by the one-byte kernel."""
    n = out.size
    nq = n // 4
    if nq:
        e2m1, e4m3, e8m0 = value_tables()
        QUAD_DEQUANTIZERS[4][_word_grid(nq), THREADS](packed[: 2 * nq].view(np.uint16), scales, amax, out, False,
                                                      e2m1, e4m3, e8m0)
    nbytes = blocks_for(n, 2)
    if nbytes > 2 * nq:
        tail = nbytes - 2 * nq
        nvfp4_dequantize_tail[blocks_for(tail, THREADS), THREADS](packed, scales, amax, out, 2 * nq)


# ================================================================================================
# MX (05.4): an E8M0 scale 2**(code - 127) per 32 elements; MXFP4 (E2M1) and MXFP8 (E4M3)


@cuda.jit(device=True)
def mx_scale_code(amax, EMAX):
    """OCP MX v1.0: X = 2**(floor(log2(amax)) - emax of the element format), as an E8M0 code."""
    if amax == 0:
        return 0
    mant, ex = math.frexp(amax)  # amax = mant * 2**ex, 0.5 <= mant < 1: floor(log2(amax)) = ex - 1
    return min(max(int64(ex) - 1 - EMAX + 127, 0), 254)


@cuda.jit
def mxfp4_quantize_kernel(x, packed, scales):
    """One thread per output byte; 16 neighbouring lanes share a block of 32."""
    t = cuda.grid(1)
    n = x.size
    i = 2 * t
    v0 = x[i] if i < n else float32(0)
    v1 = x[i + 1] if i + 1 < n else float32(0)
    m = max(abs(v0), abs(v1))
    for offset in (1, 2, 4, 8):
        m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, offset))
    code = mx_scale_code(m, 2)  # E2M1: largest value 6 = 1.5 * 2**2
    q0 = encode_value(float32(math.ldexp(v0, int32(127 - code))), *E2M1)
    q1 = encode_value(float32(math.ldexp(v1, int32(127 - code))), *E2M1)
    if i < n:
        if i + 1 >= n:
            q1 = 0
        packed[t] = uint8(q0 | (q1 << 4))
        if t % 16 == 0:
            scales[t // 16] = uint8(code)


@cuda.jit
def mxfp8_quantize_kernel(x, codes, scales):
    """One thread per element; a warp is a block of 32."""
    i = cuda.grid(1)
    n = x.size
    v = x[i] if i < n else float32(0)
    m = abs(v)
    for offset in (1, 2, 4, 8, 16):
        m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, offset))
    code = mx_scale_code(m, 8)  # E4M3: largest value 448 = 1.75 * 2**8
    q = encode_value(float32(math.ldexp(v, int32(127 - code))), *E4M3)
    if i < n:
        codes[i] = uint8(q)
        if i % 32 == 0:
            scales[i // 32] = uint8(code)


@cuda.jit
def mxfp4_dequantize_tail(packed, scales, out, b0):
    """One thread per byte from byte b0 on: the value times 2^(scale - 127), an exact ldexp."""
    t = cuda.grid(1) + b0
    i = 2 * t
    n = out.size
    if i < n:
        k = int64(scales[t // 16]) - 127
        b = int64(packed[t])
        out[i] = float32(math.ldexp(decode_value(b & 0xF, 1, 1, 2, 3), int32(k)))
        if i + 1 < n:
            out[i + 1] = float32(math.ldexp(decode_value(b >> 4, 1, 1, 2, 3), int32(k)))


@cuda.jit
def mxfp8_dequantize_tail(codes, scales, out, i0):
    """One thread per code from code i0 on."""
    i = cuda.grid(1) + i0
    if i < out.size:
        k = int64(scales[i // 32]) - 127
        out[i] = float32(math.ldexp(decode_value(int64(codes[i]), 3, 7, 4, 7), int32(k)))


def mx_quantize(codes, scales, x, elements="E2M1"):
    if x.size % 4 == 0:  # whole quads: the fast form
        nq = x.size // 4
        fp4 = elements.upper() == "E2M1"
        QUAD_QUANTIZERS["MXFP4" if fp4 else "MXFP8"][max(1, blocks_for(nq, 4 * THREADS)), THREADS](
            x, codes.view(np.uint16 if fp4 else np.uint32), scales)
        return
    if elements.upper() == "E2M1":
        nbytes = blocks_for(x.size, 2)
        mxfp4_quantize_kernel[blocks_for(nbytes, THREADS), THREADS](x, codes, scales)
    else:
        mxfp8_quantize_kernel[blocks_for(x.size, THREADS), THREADS](x, codes, scales)


def mx_dequantize(out, codes, scales, elements="E2M1"):
    """Whole words by the table kernels, the rest of the bytes by the one-byte kernels."""
    n = out.size
    e2m1, e4m3, e8m0 = value_tables()
    if elements.upper() == "E2M1":
        nq = n // 4
        if nq:
            QUAD_DEQUANTIZERS[4][_word_grid(nq), THREADS](codes[: 2 * nq].view(np.uint16), scales, scales, out, True,
                                                          e2m1, e4m3, e8m0)
        nbytes = blocks_for(n, 2)
        if nbytes > 2 * nq:
            mxfp4_dequantize_tail[blocks_for(nbytes - 2 * nq, THREADS), THREADS](codes, scales, out, 2 * nq)
    else:
        nw = n // 4
        if nw:
            QUAD_DEQUANTIZERS[8][_word_grid(nw), THREADS](codes[: 4 * nw].view(np.uint32), scales, scales, out, True,
                                                          e2m1, e4m3, e8m0)
        if n > 4 * nw:
            mxfp8_dequantize_tail[1, THREADS](codes, scales, out, 4 * nw)


# ================================================================================================
# numba-cuda's own FP8 conversions (GPU only)


def library_fp8():
    """numba-cuda's bindings of CUDA's ``cuda_fp8.h`` (``numba.cuda._internal.cuda_fp8``), or the
    reason they cannot be used here.

    numba-cuda 0.30 binds the FP8 *types* (``fp8_e4m3``, ``fp8_e5m2``, ``fp8_e8m0`` and their x2/x4
    vectors, constructed from floats and ints and converted back to floats and ints) and the
    conversion *intrinsics* from float/double/bfloat16 to an FP8 byte (``cvt_float_to_fp8(x,
    saturation_t.SATFINITE or NOSAT, fp8_interpretation_t.E4M3 or E5M2)``, the E8M0 ones), but no
    intrinsic from an FP8 byte back to a float (``__nv_cvt_fp8_to_halfraw`` is not bound) and no FP4
    at all. The simulator has none of it (``is_fp8_supported()`` is False there), and the module
    lives in ``_internal``: a private path that may move.
    """
    if on_simulator():
        return None, "numba-cuda's FP8 bindings compile CUDA C++ (cuda_fp8.h) and do not run in the simulator"
    try:
        from numba.cuda.api import is_fp8_supported

        if not is_fp8_supported():
            return None, "numba-cuda reports no FP8 support on this GPU (it needs compute capability 8.9 or newer)"
        from numba.cuda._internal import cuda_fp8 as lib
    except Exception as exc:  # noqa: BLE001 - any failure means: not available, say why
        return None, f"numba.cuda._internal.cuda_fp8 cannot be imported ({type(exc).__name__}: {exc})"
    return lib, None


def library_fp8_encoder(fmt="E4M3", saturate=True, tiled=False):
    """A launcher ``launch(out, x)`` encoding with numba-cuda's ``cvt_float_to_fp8``, or None and
    why. ``tiled``: four values per 16-byte load and one 4-byte store of their codes, four such
    words per thread a block apart, loaded first (05.1's tile); the last ``n % 4`` one by one."""
    lib, why = library_fp8()
    if lib is None:
        return None, why
    sat = lib.saturation_t.SATFINITE if saturate else lib.saturation_t.NOSAT
    interp = lib.fp8_interpretation_t.E4M3 if _fp8.get_format(fmt).name == "E4M3" else lib.fp8_interpretation_t.E5M2
    cvt = lib.cvt_float_to_fp8

    @cuda.jit
    def kernel(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = cvt(x[i], sat, interp)

    @cuda.jit
    def tiled_kernel(x, out, out4):
        nb = cuda.blockDim.x
        w0 = cuda.blockIdx.x * 4 * nb + cuda.threadIdx.x
        nw = x.size // 4
        v = cuda.local.array((4, 4), float32)
        for k in range(4):  # the tile's loads first
            w = w0 + k * nb
            if w < nw:
                v[k, 0], v[k, 1], v[k, 2], v[k, 3] = load4(x, 4 * w)
        for k in range(4):
            w = w0 + k * nb
            if w < nw:
                out4[w] = (uint32(cvt(v[k, 0], sat, interp)) | (uint32(cvt(v[k, 1], sat, interp)) << 8)
                           | (uint32(cvt(v[k, 2], sat, interp)) << 16) | (uint32(cvt(v[k, 3], sat, interp)) << 24))
        i = 4 * nw + cuda.grid(1)
        if i < x.size:  # the n % 4 tail, by the first threads
            out[i] = cvt(x[i], sat, interp)

    def launch(out, x):
        if tiled:
            blocks = max(1, blocks_for(x.size // 4, 4 * THREADS))
            tiled_kernel[blocks, THREADS](x, out, _words(out, x.size))
        else:
            kernel[blocks_for(x.size, THREADS), THREADS](x, out)

    return launch, None
