"""Checks for module 05's integer half: INT8 (symmetric, affine), INT4 groups, ternary, integer GEMMs.

Every format is defined bit for bit by :mod:`kernel_lab.quant.integer` (the scale, round to nearest
with ties to even, the range, the packing order), so quantizers are checked **bit-exactly**: the
scale first, then every code against the reference computed with that scale. GEMMs with integer
accumulators are exact too (int32); those with a float epilogue are judged against the size of
their terms in float32 (kernel_lab.check).

Inputs plant what the classic mistakes get wrong: exact ties (x / scale = k + 1/2), the largest
magnitude negative, zeros and -0.0, values beyond a calibrated range, rows whose length is not a
multiple of the group (or odd, for INT4), zero points outside [0, 255]. A failure names the mistake
when the wrong result is exactly what that mistake produces:

* ties rounded away from zero (``floor(v + 0.5)``, C's ``roundf``) instead of to even;
* truncation (``int(v)``) instead of rounding; multiplying by ``1 / scale`` instead of dividing;
* the scale from ``max(x)`` instead of ``max(|x|)``; an all-zero tensor given scale 0;
* saturation missing (codes wrapped instead of clamped); -128 produced by a symmetric quantizer;
* the zero point not clamped to [0, 255];
* INT4: nibble order swapped, wrong sign extension, the odd last value dropped;
* the fast forms (four values per 16-byte access, codes four to a 32-bit word): the ``n % 4`` tail
  not written, the last partial tile skipped, a misaligned 16-byte access, the bytes of a word in
  reversed order, and a byte read back with a shift pair that Numba computes in 64 bits
  (``(p << 24) >> 24``: right in the simulator, wrong on a GPU; :func:`check_byte_value` finds it
  on the CPU with Numba's own typing); a code not masked to its byte before it is shifted into the
  word; the FADD rounding's constant 2^23 instead of 1.5 * 2^23; multiplying by ``1 / scale`` (the
  "normal" inputs plant values where the two round apart); INT4: the two bytes of a 2-byte store
  swapped, one code of four rounded wrong, a value given another group's scale, the 16-byte path's
  last partial tile skipped;
* ternary: packing order, the code of -1; the sum of |w| (16-byte loads, a grid-stride loop): values
  added twice, a trip or a quad of four missing, float32 accumulation, the sign kept; sixteen codes a
  word: their order, the thread's weights at 4g instead of 16g, a missing load; GEMMs: the last K word
  skipped, group scales misplaced; the warp forms: lanes stopping after their first byte or word, the
  lanes' partial sums never added, four rows reading one row's activations;
* a kernel that never finishes (a loop whose condition stays true): the simulator stops it after
  ``TIME_LIMIT_S`` and the check names the lines its threads were at.

Outputs are poisoned first: floats with NaN, integer codes with the bitwise complement of the right
answer, so that an element never written cannot pass by luck.
"""

from __future__ import annotations

import secrets
import sys
import threading

import numpy as np

from .. import progress
from ..check import UNIT_ROUNDOFF, CheckFailed, finishes_within
from ..environment import on_simulator
from ..quant import integer as ref
from ..validate import require_callable

INT4_GROUP = ref.INT4_GROUP


def _not_done(name, exc):
    return CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})")


def _seed(seed):
    return secrets.randbits(32) if seed is None else seed


def _away(v):
    """Round half away from zero (C's roundf): the classic wrong tie rule."""
    v = np.asarray(v, np.float32)
    return np.trunc(v + np.copysign(np.float32(0.5), v)).astype(np.float32)


def _dev(a):
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def _out(shape, dtype, want=None):
    """A poisoned device output: NaN for floats, the complement of the right answer for integers."""
    from numba import cuda

    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return cuda.to_device(np.full(shape, np.nan, dtype))
    host = np.full(shape, 0x5A, dtype) if want is None else (~np.asarray(want, dtype)).astype(dtype)
    return cuda.to_device(host)


MISALIGNED_HINT = ("a 16-byte access (load4/store4) at an index that is not a multiple of 4: load4(x, 4 * w), not "
                   "load4(x, w) (the index counts floats, and the address must be a multiple of 16 bytes). INT4: use "
                   "load4 only when cols % 4 == 0 (other rows do not start on 16 bytes), and only inside the row.")


def _misaligned(name, text):
    gpu = "" if "load4" in text or "store4" in text else (
        "\nThis error ends the GPU context: restart the notebook's kernel before running anything else.")
    return CheckFailed(f"{name}: misaligned 16-byte access ({text.strip().splitlines()[0][:300]}).\nHint: "
                       + MISALIGNED_HINT + gpu)


# A check's launch takes a few seconds in the simulator at the checks' sizes. One still running after
# TIME_LIMIT_S never finishes (a loop whose condition stays true, a wait for what never comes): the
# simulator stops it and the check names the lines its threads were at. A GPU cannot stop a kernel
# from Python: after GPU_WATCHDOG_S the check only says what is probably happening.
TIME_LIMIT_S = 30.0
GPU_WATCHDOG_S = 20.0
NEVER_ENDS_HINT = ("a loop that does not end, or a wait whose condition never comes true? Look at the lines "
                   "above: a `while` whose condition stays true (a warp sum's `while offset >= 0` with "
                   "`offset //= 2` never ends: 0 // 2 is 0), or a loop variable that never moves.")


def _still_running(name):
    warning = (f"{name}: your kernel has been running for {GPU_WATCHDOG_S:g} s and has not finished.\nHint: "
               + NEVER_ENDS_HINT + " A kernel on the GPU cannot be stopped from Python: restart the notebook's "
               "kernel (Kernel > Restart), mend the loop and run the cells again.")
    print(warning, file=sys.stderr, flush=True)  # a warning, not a check's success line


def _run(name, launch, *args):
    from ..vector_loads import MisalignedVectorAccess

    try:
        with finishes_within(name, TIME_LIMIT_S, hint=NEVER_ENDS_HINT):  # the simulator's: a loop that never ends
            launch(*args)
    except NotImplementedError as exc:
        raise _not_done(name, exc) from None
    except MisalignedVectorAccess as exc:  # the simulator's load4/store4 check the alignment
        raise _misaligned(name, str(exc)) from None
    except (ValueError, OverflowError) as exc:  # the simulator refuses what a GPU silently garbles
        text = str(exc)
        if "NaN" in text and "integer" in text:
            raise CheckFailed(f"{name}: the kernel converted NaN to an integer ({text}).\nHint: a division by a "
                              "scale of 0: an all-zero input has absmax 0; use scale 1 when the absmax is 0.") from None
        if "out of bounds for" in text:
            raise CheckFailed(f"{name}: a value outside the integer type's range was stored ({text}).\nHint: "
                              + SATURATION_HINT) from None
        if "misaligned" in text.lower() and ("load4" in text or "store4" in text):  # wrapped by the simulator
            raise _misaligned(name, text) from None
        raise
    except Exception as exc:  # noqa: BLE001 - a GPU reports a misaligned address as a CUDA error
        if "MISALIGNED" in str(exc).upper():
            raise _misaligned(name, str(exc)) from None
        raise
    from numba import cuda

    watchdog = None if on_simulator() else threading.Timer(GPU_WATCHDOG_S, _still_running, (name,))
    if watchdog is not None:
        watchdog.daemon = True
        watchdog.start()
    try:
        cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the kernel's fault surfaces here on a GPU
        if "MISALIGNED" in str(exc).upper():
            raise _misaligned(name, str(exc)) from None
        raise
    finally:
        if watchdog is not None:
            watchdog.cancel()


def _where(mask, limit=3):
    idx = np.argwhere(mask)[:limit]
    return ", ".join(str(tuple(int(v) for v in i)) if len(i) > 1 else str(int(i[0])) for i in idx)


def _fail(name, case, got, want, hints, seed):
    got = np.asarray(got)
    want = np.asarray(want)
    wrong = got != want
    if got.dtype.kind == "f":
        wrong = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    first = tuple(np.argwhere(wrong)[0]) if wrong.any() else ()
    lines = [f"{name} ({case}): {int(wrong.sum())} of {want.size} values wrong, first at "
             f"{_where(wrong)}: expected {want[first].item()!r}, got {got[first].item()!r} [seed={seed}]"]
    if not hints and wrong.all() and not np.isnan(got.astype(np.float64)).any() and not got.any():
        hints.append("every output is 0: nothing was accumulated (is the exercise done?).")
    if not hints:
        if got.dtype.kind == "f" and np.isnan(got[wrong]).all():
            hints.append("these outputs were never written (they still hold the poison, NaN): is the exercise done, "
                         "and does the grid cover every element?")
        elif got.dtype.kind in "iu" and np.array_equal(got[wrong], (~want.astype(got.dtype))[wrong]):
            hints.append("these outputs were never written (they still hold the poison, the bitwise complement of "
                         "the right answer): is the exercise done, and does the grid cover every element?")
    lines += ["Hint: " + h for h in hints]
    raise CheckFailed("\n".join(lines))


def _same(got, candidate, mask=None):
    if candidate is None:
        return False
    got, candidate = np.asarray(got), np.asarray(candidate)
    if got.shape != candidate.shape:
        return False
    eq = got == candidate
    return bool(eq.all() if mask is None else eq[mask].all())


TIES_HINT = ("ties are rounded away from zero (2.5 -> 3, -0.5 -> -1): that is C's roundf or floor(v + 0.5). "
             "The format rounds ties to even (2.5 -> 2, 3.5 -> 4, -0.5 -> 0), as Python's round() and "
             "np.rint do: use round(v) in the kernel.")
TRUNC_HINT = ("the codes are truncated toward zero (int(v), or a float stored into an integer array): round "
              "first, round(v), ties to even.")
RECIP_HINT = ("a few codes differ by one: the kernel multiplies by 1 / scale, which rounds differently from "
              "x / scale near ties. The format divides: x / scale.")
MAGIC_HINT = ("the codes of negative values are wrong, those of the others right: the rounding constant is 2^23, "
              "not 1.5 * 2^23. v + 2^23 falls below 2^23 for a negative v, where float32's spacing is 0.5 (not 1) "
              "and the exponent bits change, so the low bits are not the integer. With 1.5 * 2^23 (12582912.0, "
              "bits 0x4B400000) every v in [-2^22, 2^22] keeps the exponent, and the low bits are round(v).")
SATURATION_HINT = ("codes beyond the range wrapped around instead of saturating: clamp before converting, "
                   "min(max(round(v), lo), hi). A float out of range converted to int8 or uint8 is garbage.")


def _code_hints(got, x, scale, lo, hi, offset=0):
    """Name the rounding/clamping mistake that produces exactly ``got`` from ``x / scale``."""
    v = np.asarray(x, np.float32) / np.asarray(scale, np.float32)
    off = np.asarray(offset, np.float32)
    hints = []
    for cand, hint in [(np.clip(_away(v) + off, lo, hi), TIES_HINT),
                       (np.clip(np.trunc(v) + off, lo, hi), TRUNC_HINT),
                       (np.clip(ref.rint_f32(np.asarray(x, np.float32) * (np.float32(1) / np.asarray(scale, np.float32)))
                                + off, lo, hi), RECIP_HINT)]:
        if _same(got.astype(np.int64), cand.astype(np.int64)):
            hints.append(hint)
    if not hints and lo == -127 and got.dtype == np.int8:
        with np.errstate(over="ignore", invalid="ignore"):
            t = np.clip(v, np.float32(lo), np.float32(hi)).astype(np.float32) + np.float32(1 << 23)
            low = (t.view(np.int32).astype(np.int64) - 0x4B000000) & 0xFF
        if _same(got, low.astype(np.uint8).view(np.int8)):
            hints.append(MAGIC_HINT)
    if not hints and lo == -127 and _same(got.astype(np.int64), np.clip(ref.rint_f32(v), -128, 127).astype(np.int64)):
        hints.append("-128 appears: the symmetric INT8 range is [-127, 127] (clamp to -127), so that "
                     "negating a code never overflows and the range is the same on both sides.")
    if not hints:
        unclamped = ref.rint_f32(v) + off
        outside = (unclamped < lo) | (unclamped > hi)
        if outside.any():
            right = np.clip(unclamped, lo, hi)
            if _same(got.astype(np.int64), right.astype(np.int64), ~outside) and not _same(
                    got.astype(np.int64), right.astype(np.int64), outside):
                hints.append(SATURATION_HINT)
    return hints


def _word_layout_hints(got, want, n, what):
    """The mistakes of kernels that handle four values per thread (a 32-bit word of codes, a
    16-byte vector of floats): the ``n % 4`` tail, the last partial tile, the byte order."""
    got, want = np.asarray(got), np.asarray(want)
    wrong = got != want
    if got.dtype.kind == "f":
        wrong = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if not wrong.any():
        return []
    whole = 4 * (n // 4)
    idx = np.flatnonzero(wrong)
    if whole and n % 4 and idx[0] >= whole:
        return [f"only the last n % 4 = {n % 4} {what} are wrong (indices {whole}..{n - 1}). In a kernel that takes "
                "four values at a time (a 32-bit word of codes, a 16-byte vector), they are the tail: they have no "
                "whole word, and need the scalar path: thread t of the grid does value 4 * (n // 4) + t (if it "
                "exists), one value at a time."]
    if whole == 0 and got.dtype.kind == "f" and np.isnan(got).all():
        return [f"none of the {n} values was written. With fewer than 4 values there is no whole word: every value "
                "is in the n % 4 tail, which needs the scalar path (thread t of the grid does value 4 * (n // 4) + t, "
                "if it exists), or the exercise is not done yet."]
    if whole >= 8 and _same(got[:whole].reshape(-1, 4)[:, ::-1], want[:whole].reshape(-1, 4)):
        return ["byte order reversed within each word: byte k of word w is element 4w + k (little-endian: the "
                "first value in the LOW byte, code0 | code1 << 8 | code2 << 16 | code3 << 24)."]
    if got.dtype == np.int8 and whole >= 4 and _unmasked_codes(got[:whole], want[:whole]):
        return ["a negative code spilled into the bytes above it: the int32 -3 is 0xFFFFFFFD, and shifted "
                "without a mask its sign bits overwrite the next codes of the word. Mask every code to its byte "
                "before shifting: (c0 & 0xFF) | ((c1 & 0xFF) << 8) | ((c2 & 0xFF) << 16) | (c3 << 24)."]
    first, last = int(idx[0]), int(idx[-1])
    # Every whole word unwritten (still the poison) while the scalar tail after them is right: the
    # kernel ran, but skipped its only tile, a partial one.
    unwritten = (np.isnan(got[wrong]).all() if got.dtype.kind == "f"
                 else np.array_equal(got[wrong], (~want.astype(got.dtype))[wrong]))
    tail_written = n % 4 and whole and last < whole and unwritten
    if last < whole and (0 < first or tail_written) and wrong[first:whole].mean() >= 0.5:
        # (a thread or so may still fit a whole tile)
        where = (f"{int(wrong.sum())} {what} between {first} and {whole - 1} (the last words before the tail) are "
                 "wrong, everything before them right" if first else
                 f"no whole word was written ({int(wrong.sum())} {what}) while the n % 4 tail after them is right "
                 f"(an array of {n // 4} words, shorter than one tile of four words per thread, is all partial tile)")
        return [where + ": the last, partial tile was skipped. Where fewer than four words a block apart are left "
                "(w + 3 * nb >= number of words), the thread still does the words that exist, one at a time."]
    return []


def _unmasked_codes(got, want):
    """Do the words of ``got`` (int8 codes, four per word) match ``want`` packed with some of codes
    0-2 not masked to their byte (a negative code's sign bits OR-ed over the bytes above)?"""
    c = want.reshape(-1, 4).astype(np.int64)
    right = (c[:, 0] & 0xFF) | ((c[:, 1] & 0xFF) << 8) | ((c[:, 2] & 0xFF) << 16) | ((c[:, 3] & 0xFF) << 24)
    for unmasked in range(1, 8):
        word = right.copy()
        for k in range(3):
            if unmasked >> k & 1:
                word |= (c[:, k] << (8 * k)) & 0xFFFFFFFF
        if not np.array_equal(word, right) and _same(got, word.astype(np.uint32).view(np.int8)):
            return True
    return False


def _int64_shift_hint(got, q, scale):
    """The GPU's result of ``float32((p << 24) >> 24)`` etc. with p an int32 word: Numba computes the
    shift of an int32 by an int in int64, so byte k < 3 comes out as ``float32(p >> 8k)``."""
    whole = 4 * (q.size // 4)
    if whole == 0:
        return []
    words = np.ascontiguousarray(q[:whole]).view(np.int32).astype(np.int64)
    wide = np.stack([(words >> (8 * k)).astype(np.float32) * np.float32(scale) for k in range(4)], 1)
    wide[:, 3] = q[:whole].reshape(-1, 4)[:, 3].astype(np.float32) * np.float32(scale)
    with np.errstate(invalid="ignore"):
        if np.allclose(got[:whole].reshape(-1, 4), wide, rtol=1e-6, atol=0) and not np.array_equal(
                wide.ravel(), ref.int8_dequantize_f32(q[:whole], scale)):
            return [BYTE_SHIFT_HINT]
    return []


BYTE_SHIFT_HINT = ("bytes 0-2 of each word came out as (word >> 8k) itself, not sign-extended: the shift pair "
                   "(p << 24) >> 24 is computed in 64 bits (Numba types int32 << int as int64), where it changes "
                   "nothing. The simulator computes in NumPy's int32 and hides it. Use masks, right in any width: "
                   "b = (p >> (8 * k)) & 0xFF, then b - ((b & 0x80) << 1) (bit 7 weighs -128).")


def check_byte_value(byte_value, *, name: str = "byte_value") -> None:
    """``byte_value(p, k)``: byte ``k`` (0..3) of the int32 word ``p`` as a signed value (float32),
    checked for every byte value at every position **on the CPU with Numba** (``numba.njit`` of the
    device function's Python source). Numba types integer arithmetic the same way on the CPU and
    the GPU, so this sees what the simulator (NumPy's int32) hides: a shift computed in 64 bits."""
    import numba

    fn = getattr(byte_value, "py_func", byte_value)
    require_callable(fn, "byte_value")
    try:
        cpu = numba.njit(fn)
        cpu(np.int32(0), 0)
    except NotImplementedError as exc:
        raise _not_done(name, exc) from None
    except Exception as exc:  # noqa: BLE001 - a function Numba's CPU target cannot compile: say so, skip
        print(name + f": not checked on the CPU (Numba's CPU target could not compile it: "
              f"{type(exc).__name__}); the dequantizer's check below still runs")  # not a pass: no progress
        return
    rng = np.random.default_rng(0)
    for k in range(4):
        words = rng.integers(-2**31, 2**31, 256, dtype=np.int64).astype(np.int32)
        u = words.view(np.uint32) & ~np.uint32(0xFF << (8 * k))
        words = (u | (np.arange(256, dtype=np.uint32) << np.uint32(8 * k))).view(np.int32)
        want = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.float32)
        got = np.array([cpu(w, k) for w in words], np.float64)
        if np.array_equal(got, want.astype(np.float64)):
            continue
        bad = int(np.flatnonzero(got != want)[0])
        hints = []
        if k < 3 and np.array_equal(got, (words.astype(np.int64) >> (8 * k)).astype(np.float32).astype(np.float64)):
            hints.append(BYTE_SHIFT_HINT)
        elif np.array_equal(got, np.arange(256, dtype=np.float64)):
            hints.append("the byte came out unsigned (0..255): sign-extend it, bit 7 weighs -128.")
        elif np.array_equal(got, (words.view(np.uint32) >> np.uint32(24 - 8 * k) & np.uint32(0xFF)).astype(np.uint8)
                            .view(np.int8).astype(np.float64)):
            hints.append(f"byte {k} came from byte {3 - k}: the byte order is reversed. Byte k is bits 8k..8k+7 "
                         "(byte 0 the LOW byte, the first code of the word, as pack4 put it): (p >> (8 * k)) & 0xFF.")
        raise CheckFailed("\n".join([f"{name} (byte {k}, Numba on the CPU): {int((got != want).sum())} of 256 "
                                     f"byte values wrong, first word {int(words[bad]):#010x}: expected "
                                     f"{float(want[bad])!r}, got {got[bad]!r}"] + ["Hint: " + h for h in hints]))
    progress.passed(name)
    print(f"{name}: right for all 256 byte values at all 4 positions (Numba's typing, on the CPU)")


# ================================================================================================
# 05.1 symmetric INT8, per tensor


def _int8_inputs(n, rng, kind):
    """(x, amax given to the kernel or None, label). Planted: the largest magnitude negative, exact
    ties at scale 1 (absmax 127), zeros and -0.0."""
    if kind == "ties":
        x = rng.uniform(-126, 126, n).astype(np.float32)
        ties = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, 126.5, -126.5, 0.0, -0.0], np.float32)
        x[: min(n, ties.size)] = ties[: min(n, ties.size)]
        x[n - 1] = -127.0  # the largest magnitude, negative, in the last element: scale = 1 exactly
        return x, None
    if kind == "normal":
        x = (rng.standard_normal(n) * 0.37).astype(np.float32)
        x[rng.integers(n)] = -np.abs(x).max() * np.float32(1.25)
        _plant_reciprocal_ties(x)
        return x, None
    if kind == "zeros":
        x = np.zeros(n, np.float32)
        x[::2] = -0.0
        return x, None
    # "clipped": a calibrated clip value below the absmax: the outliers must saturate
    x = (rng.standard_normal(n) * 2.0).astype(np.float32)
    x[0], x[n - 1] = 50.0, -60.0
    return x, np.float32(np.percentile(np.abs(x), 90))


def _reciprocal_ties(scale, count=8):
    """Values x (|x| < 101 scale) that round differently as ``x / scale`` and as ``x * (1 / scale)``
    in float32: near a tie, the reciprocal's own rounding moves the product across it."""
    s = np.float32(scale)
    inv = np.float32(1) / s
    found = []
    for k in range(100):
        base = np.float32((k + 0.5) * float(s))
        for d in range(-4, 5):
            v = np.float32(base)
            for _ in range(abs(d)):
                v = np.nextafter(v, np.float32(np.inf) if d > 0 else np.float32(-np.inf))
            for x in (v, -v):
                if np.rint(x / s) != np.rint(np.float32(x * inv)):
                    found.append(np.float32(x))
            if len(found) >= count:
                return np.array(found[:count], np.float32)
    return np.array(found, np.float32)


def _plant_reciprocal_ties(x):
    """Put a few of :func:`_reciprocal_ties` into ``x`` (in place, evenly spaced, never over its
    absmax): a kernel that multiplies by 1 / scale then fails, and RECIP_HINT names it. Deterministic,
    so the rest of the draw is unchanged."""
    amax = np.float32(np.abs(x).max())
    keep = int(np.argmax(np.abs(x)))
    ties = _reciprocal_ties(ref.int8_scale_f32(amax))
    if x.size < 2 * ties.size + 2 or not ties.size:
        return
    at = [i for i in np.linspace(1, x.size - 2, ties.size).astype(int) if i != keep]
    x[at] = ties[:len(at)]


def check_int8_quantize(launch, *, name: str = "int8 quantize", given_amax: bool = True, sizes=None,
                        seed=None) -> None:
    """Symmetric per-tensor INT8: ``q = clamp(rint(x / s), -127, 127)``, ``s = amax / 127`` (1 for 0).

    ``given_amax=True``: ``launch(q, scale, x, amax)``: ``amax`` (float32, 1 element, on the device)
    is the tensor's absmax, or a calibrated clip value below it (then outliers saturate).
    ``given_amax=False``: ``launch(q, scale, x)`` computes the absmax on the GPU itself.
    ``q`` (int8) and ``scale`` (float32, 1 element) are outputs.
    """
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    sizes = sizes or [("block-1", 255), ("3 blocks+7", 775), ("large", 3001 if on_simulator() else (1 << 22) + 13)]
    kinds = ["ties", "normal", "zeros"] + (["clipped"] if given_amax else [])
    for label, n in sizes:
        for kind in kinds:
            x, clip = _int8_inputs(n, rng, kind)
            amax = np.float32(np.abs(x).max()) if clip is None else clip
            want_s = ref.int8_scale_f32(amax)
            want_q = ref.int8_quantize_f32(x, want_s)
            q, s = _out(n, np.int8, want_q), _out(1, np.float32)
            args = (q, s, _dev(x)) + ((_dev(np.array([amax], np.float32)),) if given_amax else ())
            _run(name, launch, *args)
            got_q, got_s = q.copy_to_host(), s.copy_to_host()[0]
            case = f"size {label} = {n}, {kind} input"
            if not got_s == want_s:
                hints = []
                if np.isnan(got_s):
                    hints.append("scale[0] was never written: one thread (i == 0) must store the scale, the "
                                 "dequantizer needs it.")
                elif kind == "zeros":
                    hints.append("an all-zero tensor has absmax 0: dividing by a scale of 0 gives NaN codes. "
                                 "Use scale 1 when amax is 0 (every code is 0 anyway).")
                elif got_s == ref.int8_scale_f32(np.float32(x.max())):
                    hints.append("the scale comes from max(x), not max(|x|): here the largest magnitude is "
                                 "negative, so values below -max(x) would saturate. Take the absmax.")
                elif got_s == amax:
                    hints.append("the scale is the absmax itself: divide by 127, so that the absmax maps to 127.")
                raise CheckFailed("\n".join([f"{name} ({case}): scale {float(got_s)!r}, expected {float(want_s)!r} "
                                             f"(absmax {float(amax)!r} / 127) [seed={seed}]"] + ["Hint: " + h for h in hints]))
            if not np.array_equal(got_q, want_q):
                _fail(name, case, got_q, want_q, _word_layout_hints(got_q, want_q, n, "codes")
                      or _code_hints(got_q, x, want_s, -127, 127), seed)
    progress.passed(name)
    print(f"{name}: bit-exact for all {len(sizes)} sizes ({', '.join(lb for lb, _ in sizes)}) and inputs "
          f"({', '.join(kinds)})")


def check_int8_dequantize(launch, *, name: str = "int8 dequantize", sizes=None, seed=None) -> None:
    """``launch(out, q, scale)``: ``out = float32(q) * scale[0]`` exactly (one rounding)."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    sizes = sizes or [("1", 1), ("3 blocks+7", 775), ("large", 3001 if on_simulator() else (1 << 22) + 13)]
    for label, n in sizes:
        q = rng.integers(-127, 128, n).astype(np.int8)
        q[: min(n, 3)] = np.array([-127, 127, 0], np.int8)[: min(n, 3)]
        scale = np.float32(rng.uniform(0.001, 0.1))
        want = ref.int8_dequantize_f32(q, scale)
        out = _out(n, np.float32)
        _run(name, launch, out, _dev(q), _dev(np.array([scale], np.float32)))
        got = out.copy_to_host()
        if np.array_equal(got, want):
            continue
        hints = _word_layout_hints(got, want, n, "values") or _int64_shift_hint(got, q, scale)
        if hints:
            pass
        elif _same(got, (q.astype(np.uint8).astype(np.float32) * scale).astype(np.float32)):
            hints.append("negative codes came out as large positive values: q was read as unsigned (uint8). "
                         "Convert the int8 value itself: float32(q[i]) * scale.")
        elif np.isnan(got).any():
            hints.append(f"{int(np.isnan(got).sum())} outputs were never written (e.g. at {_where(np.isnan(got))}).")
        _fail(name, f"size {label} = {n}", got, want, hints, seed)
    progress.passed(name)
    print(f"{name}: bit-exact for all {len(sizes)} sizes")


# ================================================================================================
# 05.1 asymmetric UINT8 per channel (row), from a calibrated range


def check_affine_rows(launch, *, name: str = "affine uint8 per channel", seed=None, cols: int = 37) -> None:
    """``launch(q, scale, zero_point, x, lo, hi)``: per row r, ``scale[r] = (hi - lo) / 255``,
    ``zero_point[r] = clamp(rint(-lo / scale), 0, 255)`` (int32), ``q = clamp(rint(x / scale) + zp, 0, 255)``.

    Rows: an ordinary range; an all-positive one (lo > 0, the zero point clamps to 0); an all-negative
    one (clamps to 255); an empty one (lo == hi: scale 1); a calibrated range narrower than the data
    (saturation); a row of exact ties.
    """
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    rows = 7
    # Then the same rows one column wide: the thread of column 0 is then the row's only thread.
    for width in (cols, 1):
        _affine_case(launch, name, rng, rows, width, seed)
    progress.passed(name)
    print(f"{name}: bit-exact on {rows} channels (zero points clamped at both ends, empty range, saturation, ties)")


def _affine_case(launch, name, rng, rows, cols, seed) -> None:
    x = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    lo, hi = x.min(axis=1), x.max(axis=1)
    x[1] = rng.uniform(0.5, 2.0, cols)
    lo[1], hi[1] = 0.5, 2.0  # a ReLU-like channel: 0 is outside its range
    x[2] = rng.uniform(-3.0, -1.0, cols)
    lo[2], hi[2] = -3.0, -1.0
    x[3] = 0.25
    lo[3] = hi[3] = 0.25
    x[4] = rng.standard_normal(cols) * 3
    lo[4], hi[4] = -1.0, 1.0  # calibrated narrower than the data
    x[5] = (np.arange(cols) - cols // 2 + 0.5).astype(np.float32)  # ties at scale 1
    lo[5], hi[5] = -127.0, 128.0
    x[6, 0] = 0.0
    if cols > 1:
        x[6, 1] = -0.0
    lo, hi = lo.astype(np.float32), hi.astype(np.float32)
    want_s, want_z = ref.affine_params_f32(lo, hi)
    want_q = ref.affine_quantize_f32(x, want_s[:, None], want_z[:, None])
    q, s, z = _out(x.shape, np.uint8, want_q), _out(rows, np.float32), _out(rows, np.int32, want_z)
    _run(name, launch, q, s, z, _dev(x), _dev(lo), _dev(hi))
    got_q, got_s, got_z = q.copy_to_host(), s.copy_to_host(), z.copy_to_host()
    if not np.array_equal(got_s, want_s):
        hints = []
        if cols == 1 and np.isnan(got_s).any():
            hints.append("with a single column, no scale was written: each row's parameters must be stored by "
                         "the thread of column 0, the one thread every row has.")
        elif np.isnan(got_s).all():
            hints.append("no scale was written: the thread of column 0 of each row stores scale[r] and zp[r] "
                         "(is the exercise done?).")
        elif np.isnan(got_s[3]) or got_s[3] == 0:
            hints.append("row 3 has an empty range (lo == hi): its scale must be 1, not 0 (or NaN).")
        _fail(name, "scales", got_s, want_s, hints, seed)
    if not np.array_equal(got_z, want_z):
        unclamped = ref.rint_f32(-lo / want_s).astype(np.int64)
        hints = []
        if _same(got_z.astype(np.int64), unclamped):
            hints.append("zero point not clamped: rows 1 and 2 have ranges without 0 (all positive, all "
                         f"negative), so -lo / scale is {int(unclamped[1])} and {int(unclamped[2])}, outside "
                         "uint8. Clamp the zero point to [0, 255].")
        _fail(name, "zero points", got_z, want_z, hints, seed)
    if not np.array_equal(got_q, want_q):
        _fail(name, "codes", got_q, want_q, _code_hints(got_q, x, want_s[:, None], 0, 255, want_z[:, None]), seed)


# ================================================================================================
# 05.2 INT4 groups


def _int4_matrix(rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 0.5).astype(np.float32)
    g0 = min(cols, INT4_GROUP)
    ties = np.array([7.0, -0.5, 0.5, 1.5, -1.5, 2.5, -2.5, 3.5, -6.5, 0.0, -0.0, 6.5], np.float32)
    k = min(g0, ties.size)
    x[0, :g0] = np.clip(x[0, :g0] * 2, -6.9, 6.9)
    x[0, :k] = ties[:k]  # absmax 7 in this group: scale 1, exact ties
    if rows > 1:
        x[1, :] = 0.0  # an all-zero row: scale 1
    if rows > 2:
        x[2, cols - 1] = -5.0  # the largest magnitude of the last group, negative, in the odd tail
    if rows > 3:  # a group of float32 subnormals, |x| <= 3 * 2^-149: unfloored, absmax / 7 rounds to 0
        x[3, :g0] = (rng.integers(-3, 4, g0) * 2.0 ** -149).astype(np.float32)
        x[3, 0] = np.float32(3 * 2.0 ** -149)
    return x


def _swap_nibbles(p):
    p = np.asarray(p, np.uint8)
    return ((p >> 4) | (p << 4)).astype(np.uint8)


def int4_shapes():
    """Widths of every remainder mod 4 (the scalar path of a kernel with 16-byte accesses, where a
    row's last quad holds 1, 2 or 3 values), then multiples of 4 (its vector path): a last group of
    4 values (132), several groups, and a row of a single quad. Two widths are for the tile of four
    quads a block apart at the GPU's 256 threads a block (1024 quads a tile): 3074 (2 mod 4, 769
    quads) gives threads all four quads on the scalar path, 7296 (1824 quads) a whole tile and then
    a partial one in which threads have three quads (with a fourth their tile would be whole)."""
    return [("1 x 1", (1, 1)), ("3 x 127", (3, 127)), ("3 x 129", (3, 129)), ("4 x 256", (4, 256)),
            ("5 x 301", (5, 301)), ("2 x 132", (2, 132)), ("3 x 264", (3, 264)), ("1 x 3074", (1, 3074)),
            ("1 x 7296", (1, 7296)), ("2 x 4", (2, 4))]


def _int4_run(name, label, cols, launch, *args):
    """:func:`_run`, naming the 16-byte path taken on rows that are not 16-byte aligned: there the
    launchers pass a (1, 1) dummy for the uint16 view (``packed16_of``), so the first access past
    its one element is the symptom."""
    try:
        _run(name, launch, *args)
    except IndexError as exc:
        if cols % 4 == 0 or "size 1" not in str(exc):
            raise
        raise CheckFailed(
            f"{name} (shape {label}): {str(exc).splitlines()[0]}\nHint: a width of {cols} is {cols % 4} mod 4: its rows "
            "do not start on 16 bytes and have no uint16 view (the launcher passes a (1, 1) dummy), yet the 16-byte "
            "path read or wrote it. Take that path only when cols % 4 == 0 (cols % 2 == 0 is not enough: a width "
            "of 2 mod 4 is even and still misaligned); other widths take the scalar path.") from None


def check_int4_quantize(launch, *, name: str = "int4 quantize", shapes=None, seed=None) -> None:
    """``launch(packed, scales, x)``: x (rows, cols) float32; ``scales`` (rows, ceil(cols/128)) =
    absmax of each group / 7; ``packed`` (rows, ceil(cols/2)) uint8, element 2j in the low nibble of
    byte j, 4-bit two's complement, the odd last value's high nibble 0."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or int4_shapes()
    for label, (rows, cols) in shapes:
        x = _int4_matrix(rng, rows, cols)
        want_s = ref.int4_group_scales_f32(x)
        q = ref.int4_quantize_f32(x, want_s)
        want_p = ref.int4_pack(q)
        p, s = _out(want_p.shape, np.uint8, want_p), _out(want_s.shape, np.float32)
        _int4_run(name, label, cols, launch, p, s, _dev(x))
        got_p, got_s = p.copy_to_host(), s.copy_to_host()
        case = f"shape {label}"
        if not np.array_equal(got_s, want_s):
            hints = []
            per_row = np.where(np.abs(x).max(1) > 0, np.abs(x).max(1) / np.float32(7), 1).astype(np.float32)
            if _same(got_s, np.repeat(per_row[:, None], want_s.shape[1], 1)) and want_s.shape[1] > 1:
                hints.append("every group of a row got the row's scale: the absmax is per group of 128 values (with "
                             "a group on 16 lanes: the maximum crossed into the other half of the warp; shuffle "
                             "with xor offsets 8, 4, 2, 1 only).")
            elif _same(got_s * np.float32(8), want_s * np.float32(7)) or _same(got_s * 15, want_s * 7):
                hints.append("the scale divides by the wrong number: the largest code is 7, so scale = absmax / 7.")
            elif np.isnan(got_s).all():
                hints.append("no scale was written: lane 0 of each warp stores its group's scale (is the exercise done?).")
            elif (tiny := want_s <= np.float32(ref.AMAX_FLOOR / 7)).any() and (got_s[tiny] != want_s[tiny]).any() \
                    and np.array_equal(got_s[~tiny], want_s[~tiny]):
                hints.append("only the groups of float32 subnormals (row 3's first, |x| at most 3 x 2^-149) have "
                             "wrong scales: there m / 7 rounds to 0 (and the codes divide by it). Floor the absmax "
                             "first, s = max(m, AMAX_FLOOR) / 7 with AMAX_FLOOR = 2^-126 (float32's smallest "
                             "normal; kernel_lab.quant.integer), as production quantizers clamp their scales.")
            elif np.isnan(got_s).any():
                hints.append(_int4_unwritten_scales_hint(got_s))
            elif hint := _int4_shared_scale_hint(got_s, want_s):
                hints.append(hint)
            elif (got_s[got_s != want_s] < want_s[got_s != want_s]).all():
                hints.append("some scales are smaller than their group's absmax / 7: the absmax missed some of the "
                             "group's values. Every lane's values must enter the maximum, all of them (four, or "
                             "eight with a group on 16 lanes, whose two quads are 16 quads apart: lane and lane + 16), "
                             "and every lane of the group must take part in the shuffles.")
            _fail(name, case + ", scales", got_s, want_s, hints, seed)
        if np.array_equal(got_p, want_p):
            continue
        hints = []
        if _same(got_p, _swap_nibbles(want_p)):
            hints.append("nibble order swapped: element 2j belongs in the LOW nibble of byte j (bits 0-3) and "
                         "element 2j+1 in the high nibble: byte = (q0 & 0xF) | ((q1 & 0xF) << 4).")
        elif _same(got_p, ref.int4_pack(np.clip(_away(x / np.repeat(want_s, INT4_GROUP, 1)[:, :cols]), -8, 7)
                                        .astype(np.int8))):
            hints.append(TIES_HINT)
        elif cols % 2 and _same(got_p[:, :-1], want_p[:, :-1]) and not _same(got_p[:, -1], want_p[:, -1]):
            hints.append(f"only the last byte of each row is wrong: with {cols} values (odd) the last byte holds "
                         "one value in its low nibble. The odd tail was dropped (or its missing partner read "
                         "past the row): write it with a high nibble of 0.")
        elif np.array_equal(got_p[got_p != want_p], _int4_pack_unmasked(q)[got_p != want_p]):
            hints.append("codes not masked to 4 bits: a negative code (-3 is ...11111101) shifted left by 4 keeps its "
                         "sign bits, which fill the high nibble and overwrite the other code. Mask each code to its "
                         "nibble before shifting and combining: (q0 & 0xF) | ((q1 & 0xF) << 4).")
        elif cols % 4 == 0 and _same(got_p.reshape(rows, -1, 2)[:, :, ::-1], want_p.reshape(rows, -1, 2)):
            hints.append("the two bytes of each 2-byte store are in reversed order: a uint16 is little-endian, its "
                         "LOW byte comes first in memory. The byte of values 4j, 4j + 1 is the low one: "
                         "uint16(lo | (hi << 8)).")
        else:
            hints += _int4_code_hints(got_p, want_p, x, want_s, cols)
        _fail(name, case + ", packed bytes", got_p, want_p, hints, seed)
    progress.passed(name)
    print(f"{name}: bit-exact for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


def _int4_unwritten_scales_hint(got_s):
    """Scales never written: only each row's last group (the shorter one), or groups that no warp took."""
    missing = np.isnan(got_s)
    if missing.all(axis=1).any() and not missing.all(axis=1).all() and not missing[~missing.all(axis=1)].any():
        rows_missing = [int(r) for r in np.flatnonzero(missing.all(axis=1))][:6]
        return (f"no scale of rows {rows_missing} was written, and every other row's all were: the blocks of those "
                "rows wrote to another row. On a 2-D grid the row is the block's second coordinate, "
                "cuda.blockIdx.y (the groups of a row go along x).")
    if missing[:, :-1].any():
        cols_missing = sorted({int(c) for c in np.nonzero(missing)[1]})[:6]
        return (f"the scales of groups {cols_missing} of a row were never written: no warp (or half warp) took those "
                "groups. Check the group index: a block covers WARPS warps' groups, so block bx starts at group "
                "bx * WARPS (times the groups a warp does), plus the warp's number in the block.")
    return "some scales were never written (the last, shorter group of a row?)."


def _int4_shared_scale_hint(got_s, want_s):
    """Groups 2k and 2k + 1 got one scale, that of the larger absmax: a group on 16 lanes whose maximum
    crossed into the other half of the warp (a shuffle at xor offset 16)."""
    if want_s.shape[1] < 2:
        return None
    g = want_s.shape[1] - want_s.shape[1] % 2
    pair = np.maximum(want_s[:, 0:g:2], want_s[:, 1:g:2])
    if _same(got_s[:, 0:g:2], pair) and _same(got_s[:, 1:g:2], pair):
        return ("groups 2k and 2k + 1 of each row got one scale, the larger absmax of the two: the maximum was "
                "taken over the whole warp, whose two halves hold two groups. Shuffle with xor offsets 8, 4, 2, 1 "
                "only (offset 16 crosses into the other half).")
    return None


def _int4_pack_unmasked(q):
    """What packing gives when the codes are not masked to 4 bits: ``q0 | (q1 << 4)`` in 8 bits."""
    q = np.asarray(q, np.int64)
    if q.shape[1] % 2:
        q = np.concatenate([q, np.zeros((q.shape[0], 1), np.int64)], axis=1)
    return ((q[:, 0::2] | (q[:, 1::2] << 4)) & 0xFF).astype(np.uint8)


def _int4_code_hints(got_p, want_p, x, scales, cols):
    """Name a rounding mistake from the codes that are wrong (a kernel may round some of its four
    values right and one wrong): every wrong code is what truncation (or ties away from zero) gives."""
    got_q = ref.int4_unpack(got_p, cols).astype(np.int64)
    want_q = ref.int4_unpack(want_p, cols).astype(np.int64)
    wrong = got_q != want_q
    if not wrong.any():
        return []
    v = x / np.repeat(scales, INT4_GROUP, 1)[:, :cols]
    for cand, hint in [(np.clip(np.trunc(v), -8, 7), TRUNC_HINT), (np.clip(_away(v), -8, 7), TIES_HINT)]:
        if np.array_equal(got_q[wrong], cand.astype(np.int64)[wrong]):
            cols_wrong = np.unique(np.argwhere(wrong)[:, 1] % 4)
            which = (f" (Only value 4j + {', '.join(str(int(c)) for c in cols_wrong)} of each four is wrong.)"
                     if cols_wrong.size < 4 else "")
            return [hint + which]
    return []


def _group_scale_hint(got, want, q, scales):
    """Every wrong value is its code times the scale of ANOTHER group of its row: name the group
    index (value c belongs to group c // 128)."""
    wrong = (got != want) & (q != 0)
    if not wrong.any() or scales.shape[1] < 2 or np.isnan(got[wrong]).any():
        return []
    rows_w, cols_w = np.nonzero(wrong)
    cand = q[rows_w, cols_w, None].astype(np.float32) * scales[rows_w]  # (wrong, groups)
    hit = cand == got[rows_w, cols_w, None]
    if not hit.any(axis=1).all():
        return []
    used = hit.argmax(axis=1)
    c, g = int(cols_w[0]), int(used[0])
    return [f"the wrong values have the scale of another group: value {c} of row {int(rows_w[0])} belongs to "
            f"group {c} // {INT4_GROUP} = {c // INT4_GROUP}, and got group {g}'s. Work out the group from the "
            f"value's column c (c // {INT4_GROUP}, the same for the four values of a quad), not from a byte or "
            "quad index, and not from a neighbouring column."]


def _another_quad_hint(got, want, q, scales):
    """Every wrong value is the code of the quad d quads away, times its own group's scale: a load
    read another quad's codes (in a tile: the index of one of its four loads)."""
    wrong = got != want
    if not wrong.any() or np.isnan(got[wrong]).any():
        return []
    s_full = np.repeat(scales, INT4_GROUP, 1)[:, : got.shape[1]]
    codes = np.rint(got / s_full)
    rows_w, cols_w = np.nonzero(wrong)
    r, c = int(rows_w[0]), int(cols_w[0])
    c0 = c - c % 4
    candidates = [c1 for c1 in range(0, got.shape[1] - 3, 4) if c1 != c0
                  and np.array_equal(q[r, c1:c1 + 4], codes[r, c0:c0 + 4])]
    for c1 in sorted(candidates, key=lambda c1: abs(c1 - c0)):
        d = c0 - c1
        src = cols_w - d
        if (src >= 0).all() and (src < got.shape[1]).all() and np.array_equal(codes[rows_w, cols_w], q[rows_w, src]):
            return [f"the wrong values are the codes of the quad {abs(d) // 4} quads {'before' if d > 0 else 'after'} "
                    f"them (value {c} of row {r} has the code of value {c - d}), each times its own scale: a load read "
                    "another quad's codes. In a tile, thread t's quads are j, j + nb, j + 2 nb and j + 3 nb: check "
                    "the index of each of the four loads."]
    return []


def _which_nibbles(wrong, all_of_them):
    if all_of_them:
        return ""
    odd = np.argwhere(wrong)[:, 1] % 2 == 1
    which = "high" if odd.all() else "low" if not odd.any() else "some of the"
    return f" Here only {which} nibbles are wrong: extend every nibble the same way."


def _partial_tile_hint(got, want, cols, scalar_passed):
    """A tile kernel (four quads a block apart per thread) that skips the last, partial tile of a row
    leaves, on a row whose width is a multiple of 4, the values after its whole tiles unwritten: the
    end of every row, or all of it when a row is shorter than one tile."""
    wrong = got != want
    if not np.isnan(got[wrong]).all():
        return None
    starts = [int(np.flatnonzero(w)[0]) if w.any() else cols for w in wrong]
    ends_unwritten = all(np.isnan(got[r, c:]).all() for r, c in enumerate(starts))
    if not ends_unwritten or min(starts) % 4 or (min(starts) == 0 and (cols % 4 or not scalar_passed)):
        return None
    if cols % 4:  # rows that are not 16-byte aligned go quad by quad, every tile of them
        return (f"columns {min(starts)}..{cols - 1} of each row were never written, the end of every row. A tile "
                f"kernel (a width of {cols} is not a multiple of 4: its quad-by-quad path) must do each of a thread's "
                "quads j, j + nb, j + 2 nb, j + 3 nb that is inside the row, not only the first (dequantize_quad does "
                "nothing for a quad past the row); a kernel with a thread per byte or quad needs a grid that covers "
                "the whole row.")
    where = (f"columns {min(starts)}..{cols - 1} of each row were never written" if min(starts) > 0 else
             f"no value of a row {cols} wide (a multiple of 4: the 16-byte path) was written, while the widths "
             f"that are not a multiple of 4 came out right; a row of {cols // 4} quads is shorter than one tile, so "
             "all of it is the last, partial tile")
    return (f"{where}: the last, partial tile was skipped, or only each thread's first quad of it was done. Where "
            "fewer than four quads a block apart are left (j + 3 * nb >= cols // 4), the thread still does every "
            "quad that exists, one at a time (dequantize_quad), on the 16-byte path too.")


def check_int4_dequantize(launch, *, name: str = "int4 dequantize", shapes=None, seed=None) -> None:
    """``launch(out, packed, scales)``: out (rows, cols) float32 = sign-extended nibble * its group's scale."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or int4_shapes()
    scalar_passed = False  # a width that is not a multiple of 4 (the scalar path) came out right
    for label, (rows, cols) in shapes:
        q = rng.integers(-8, 8, (rows, cols)).astype(np.int8)
        q[0, : min(cols, 4)] = np.array([-8, 7, -1, 1], np.int8)[: min(cols, 4)]
        packed = ref.int4_pack(q)
        scales = rng.uniform(0.01, 1.0, (rows, -(-cols // INT4_GROUP))).astype(np.float32)
        want = ref.int4_dequantize_f32(packed, scales, cols)
        out = _out((rows, cols), np.float32)
        _int4_run(name, label, cols, launch, out, _dev(packed), _dev(scales))
        got = out.copy_to_host()
        if np.array_equal(got, want):
            scalar_passed = scalar_passed or cols % 4 != 0
            continue
        hints = []
        s_full = np.repeat(scales, INT4_GROUP, 1)[:, :cols]
        unsigned = (q.astype(np.uint8) & 0xF).astype(np.float32) * s_full
        swapped = ref.int4_unpack(_swap_nibbles(packed), 2 * packed.shape[1])[:, :cols].astype(np.float32) * s_full
        wrong = got != want  # (NaN included)
        if not np.isnan(got).any() and np.array_equal(got[wrong], swapped.astype(np.float32)[wrong]):
            hints.append("nibble order swapped: the low nibble of byte j is element 2j, the high one 2j+1 (in a "
                         "uint16 of four values, nibble k is value 4j + k)."
                         + ("" if wrong.all() or _same(got, swapped.astype(np.float32)) else
                            " Here only some of the values are swapped: read every nibble the same way."))
        elif np.array_equal(got[wrong], unsigned.astype(np.float32)[wrong]):  # every nibble, or only the high ones
            hints.append("wrong sign extension: nibbles 8..15 stand for -8..-1 (4-bit two's complement). "
                         "v = b & 0xF; if v >= 8: v -= 16  (or (v ^ 8) - 8)."
                         + _which_nibbles(wrong, _same(got, unsigned.astype(np.float32))))
        elif _same(got, swapped.astype(np.float32)):
            hints.append("nibble order swapped: the low nibble of byte j is element 2j, the high one 2j+1.")
        elif cols > 1 and cols % 2 and _same(got[:, :-1], want[:, :-1]) and np.isnan(got[:, -1]).all():
            hints.append(f"the last value of every row is missing: {cols} is odd, so the last byte carries one "
                         "value (its low nibble). The odd tail was dropped.")
        elif hint := _partial_tile_hint(got, want, cols, scalar_passed):
            hints.append(hint)
        elif np.isnan(got).any():
            unwritten = np.isnan(got)
            if cols > 2 and not (unwritten & (np.arange(cols) % 4 < 2)).any():
                hints.append(f"{int(unwritten.sum())} outputs were never written, all of them values 4j + 2 and "
                             "4j + 3 of a quad (e.g. at " + _where(unwritten) + "): the quad's second byte, "
                             "2j + 1, was left out (bytes 2j and 2j + 1 hold the quad's four values).")
            else:
                hints.append(f"{int(unwritten.sum())} outputs were never written (e.g. at {_where(unwritten)}).")
        else:
            hints += _another_quad_hint(got, want, q, scales) or _group_scale_hint(got, want, q, scales)
        _fail(name, f"shape {label}", got, want, hints, seed)
    progress.passed(name)
    print(f"{name}: bit-exact for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


# ================================================================================================
# 05.5 ternary weights and per-token activations


def _ternary_weights(rng, rows, cols, ties):
    if ties:  # half the weights +-0.5, half +-1.5: mean |w| = 1 exactly, so w / s = +-0.5 are exact ties
        mags = np.where(rng.permutation(rows * cols) % 2 == 0, 0.5, 1.5)
        return (mags * rng.choice([-1.0, 1.0], rows * cols)).reshape(rows, cols).astype(np.float32)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    w.flat[-1] = -0.0
    return w


def _sum_trip_floats():
    """Floats that one trip of a 16-byte grid-stride sum covers at the notebooks' persistent grid:
    ``persistent_blocks`` blocks of ``THREADS`` threads (kernel_lab.reductions_gemm.scans), four 16-byte
    loads a thread."""
    from ..reductions_gemm.scans import THREADS, persistent_blocks

    return 16 * THREADS * persistent_blocks(1 << 40)


def ternary_word_shapes():
    """Shapes for a quantizer with sixteen weights a thread (rows a multiple of 16 long). First a
    matrix large enough for three trips of the 16-byte sum's grid-stride loop at the persistent grid,
    the last one partial, and for several blocks of words, the last one partial; then one word, ties,
    and a partial block of words."""
    cols = 16 * -(-(2 * _sum_trip_floats() + 4 * 37) // (3 * 16))
    return [(f"3 x {cols} (three trips of the sum)", (3, cols)), ("1 x 16", (1, 16)), ("3 x 48 (ties)", (3, 48)),
            ("5 x 80", (5, 80))]


def check_abs_sum(launch, *, name: str = "abs sum", sizes=None, seed=None) -> None:
    """``launch(total, x)``: ``total[0] = sum |x|`` in float64, x float32 with a size that is a multiple
    of 4 (the launcher zeroes ``total``, which holds NaN when it is called). Judged against an exact sum,
    with the rounding of a float64 sum in any order allowed. The first size takes three trips of a
    grid-stride loop at the notebooks' persistent grid, the last one partial."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    big = 2 * _sum_trip_floats() + 4 * 37
    sizes = sizes or [(f"n = {big} (three trips, the last partial)", big), ("n = 4 (one quad)", 4),
                      ("n = 100 (a partial block)", 100), ("n = 64, all zero", 64)]
    for label, n in sizes:
        if n % 4:
            raise ValueError(f"check_abs_sum: sizes must be multiples of 4, got {n}")
        x = np.zeros(n, np.float32) if "all zero" in label else (
            rng.standard_normal(n) * rng.uniform(0.5, 2.0, n)).astype(np.float32)
        total = _out(1, np.float64)
        _run(name, launch, total, _dev(x))
        got = float(total.copy_to_host()[0])
        mags = np.abs(x.astype(np.float64))
        want = float(np.sum(mags, dtype=np.float64))
        tol = 4 * n * 2.0 ** -53 * want + 1e-300  # a float64 sum of n terms, in any order
        if abs(got - want) <= tol:
            continue
        raise CheckFailed("\n".join([f"{name} ({label}): sum |x| = {want!r}, got {got!r} [seed={seed}]"]
                                    + ["Hint: " + h for h in _abs_sum_hints(got, want, x, mags)]))
    progress.passed(name)
    print(f"{name}: correct for all {len(sizes)} sizes ({', '.join(lb for lb, _ in sizes)})")


def _abs_sum_hints(got, want, x, mags):
    n = x.size
    if np.isnan(got):
        return ["the total is NaN: it holds NaN until the launcher sets it to 0 (zero_first), so nothing was "
                "added to it after that, or a NaN was."]
    if got == 0 and want > 0:
        return ["nothing was added: is the exercise done?"]
    if abs(got - float(np.sum(x, dtype=np.float64))) <= 1e-6 * want:
        return ["this is the sum of x, not of |x|: take abs() of each value."]
    if abs(got - want) <= 1e-5 * want:
        return ["the sum is right to float32 precision only: add each value as a float64 (float64(abs(a0)) + ...), "
                "as the given abs_sum does; float32 keeps 7 digits, and the sum of 67 million weights needs more."]
    if got > want:
        return ["some values were added more than once: the quads of one trip must not overlap (thread t of block "
                "b takes quads j, j + nb, j + 2 nb, j + 3 nb with j = b * 4 nb + t, nb = blockDim.x), and the next "
                "trip starts a whole grid later: j += gridDim.x * 4 * nb."]
    prefix = np.concatenate([[0.0], np.cumsum(mags)])
    p = int(np.argmin(np.abs(prefix - got)))
    if 0 < p < n and abs(prefix[p] - got) <= 1e-9 * want:
        return [f"only the first {p} of the {n} values were added: the grid-stride loop stopped early. Every trip "
                "counts (while j < nq: ... j += stride), and in the last, partial trip each of the four quads "
                "needs its own test (jk < nq), not one test for the whole trip."]
    for k in (1, 2, 3):
        if abs(got - k * want / 4) <= 0.1 * want:
            return [f"about {k}/4 of the sum: each trip adds all four quads of the thread (k = 0, 1, 2, 3), "
                    "a block apart."]
    return ["values are missing from the sum: every trip of the grid-stride loop, and all four quads of each "
            "trip (each tested on its own against nq in the last, partial trip)?"]


def check_ternary_quantize(launch, *, name: str = "ternary quantize", shapes=None, seed=None,
                           whole_words: bool = False) -> None:
    """``launch(packed, scale, w)``: ``scale[0] = mean |w|`` (float32), ``q = clamp(rint(w / s), -1, 1)``,
    four 2-bit codes per byte (01 = +1, 11 = -1, 00 = 0), element 4j+t in bits 2t..2t+1 of byte j.
    ``whole_words``: rows a multiple of 16 long (a quantizer that writes sixteen codes as one 32-bit
    word), :func:`ternary_word_shapes` unless ``shapes`` are given."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    default = ternary_word_shapes() if whole_words else [
        ("1 x 3", (1, 3)), ("5 x 38 (ties)", (5, 38)), ("5 x 37", (5, 37)), ("8 x 64", (8, 64))]
    shapes = shapes or default
    zero = ("2 x 16, all zero", (2, 16)) if whole_words else ("2 x 5, all zero", (2, 5))
    for label, (rows, cols) in shapes + [zero]:  # the last: mean |w| = 0, scale 1
        w = (np.zeros((rows, cols), np.float32) if "all zero" in label
             else _ternary_weights(rng, rows, cols, ties="ties" in label))
        want_s = ref.ternary_scale_f32(w)
        packed, s = _out((rows, -(-cols // 4)), np.uint8), _out(1, np.float32)
        _run(name, launch, packed, s, _dev(w))
        got_s = s.copy_to_host()[0]
        case = f"shape {label}"
        # The mean is a float64 sum in some order: allow the float32 rounding to land one unit either way.
        if not abs(float(got_s) - float(want_s)) <= 2 * float(np.spacing(want_s)):
            hints = []
            if got_s == np.float32(np.abs(w).max()):
                hints.append("the scale is max |w|: BitNet b1.58 uses the mean of |w| (absmean), so that most "
                             "weights do not round to 0.")
            elif np.isnan(got_s):
                hints.append("scale[0] was never written: thread (0, 0) stores it (is the exercise done?).")
            elif got_s == 0 and want_s == 1:
                hints.append("every weight is 0, so mean |w| is 0: use a scale of 1 there, or w / s divides by 0.")
            elif got_s == 1 and np.abs(w).sum() > 0:
                hints.append("the scale is 1, the kernel's choice for a mean of 0: nothing reached the sum of |w| "
                             "(is the sum's exercise done?).")
            elif got_s > want_s:
                hints.append("the scale is larger than mean |w|: the sum of |w| added some weights more than once.")
            elif got_s < want_s:
                hints.append("the scale is smaller than mean |w|: the sum of |w| missed some weights.")
            raise CheckFailed("\n".join([f"{name} ({case}): scale {float(got_s)!r}, expected mean |w| = "
                                         f"{float(want_s)!r} [seed={seed}]"] + ["Hint: " + h for h in hints]))
        q = ref.ternary_quantize_f32(w, got_s)
        want_p = ref.ternary_pack(q)
        got_p = packed.copy_to_host()
        if np.array_equal(got_p, want_p):
            continue
        hints = []
        padded = np.zeros((rows, 4 * want_p.shape[1]), np.uint8)
        padded[:, :cols] = q.astype(np.uint8) & 3
        reversed_order = (padded[:, 3::4] | (padded[:, 2::4] << 2) | (padded[:, 1::4] << 4) | (padded[:, 0::4] << 6))
        sign_mag = np.where(q < 0, 2, q).astype(np.int8)
        if _same(got_p, reversed_order.astype(np.uint8)):
            hints.append("packing order: element 4j+t goes to bits 2t..2t+1 of byte j (the first element in "
                         "the lowest bits), as INT4's element 2j in the low nibble.")
        elif _same(got_p, ref.ternary_pack(sign_mag)):
            hints.append("-1 was stored as 10: the format stores 2-bit two's complement, -1 -> 11 (q & 3).")
        elif _same(got_p, ref.ternary_pack(np.clip(_away(w / got_s), -1, 1).astype(np.int8))):
            hints.append(TIES_HINT)
        elif cols % 4 and _same(got_p[:, :-1], want_p[:, :-1]):
            hints.append(f"only the last byte of each row is wrong: {cols} is not a multiple of 4, the last byte "
                         "holds the tail's codes (the rest of its bits 0).")
        elif cols % 16 == 0:
            hints += _word_hints(got_p, want_p, q)
        _fail(name, case + ", packed codes", got_p, want_p, hints, seed)
    progress.passed(name)
    print(f"{name}: bit-exact for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


def _word_codes(words):
    """(..., 16) codes of uint32 words of sixteen 2-bit codes, code t in bits 2t..2t+1."""
    return ((words[..., None] >> (2 * np.arange(16, dtype=np.uint32))) & np.uint32(3)).astype(np.uint32)


def _pack_words(codes):
    return np.bitwise_or.reduce(codes.astype(np.uint32) << (2 * np.arange(16, dtype=np.uint32)), axis=-1)


def _word_hints(got_p, want_p, q):
    """Hints for a quantizer that writes a row's codes sixteen to a uint32 word (rows a multiple of 16)."""
    got_w = np.ascontiguousarray(got_p).view("<u4").reshape(-1)
    want_w = np.ascontiguousarray(want_p).view("<u4").reshape(-1)
    if _same(got_w, _pack_words(_word_codes(want_w)[:, ::-1])):
        return ["the sixteen codes of each word are in reverse order: the thread's weight t goes to bits 2t..2t+1 "
                "(the first lowest), so that byte i of the word is byte i of the packed row (memory is little-endian)."]
    flat = (q.reshape(-1).astype(np.int64) & 3).astype(np.uint32)
    starts = 4 * np.arange(want_w.size)
    inside = starts + 16 <= flat.size
    if inside.sum() > 1:
        shifted = _pack_words(flat[starts[inside, None] + np.arange(16)])
        if _same(got_w[inside], shifted):
            return ["word g holds the codes of weights 4g..4g+15: a thread's sixteen weights start at 16 * g (its four "
                    "16-byte loads at float indices 16 g, 16 g + 4, 16 g + 8 and 16 g + 12), not at 4 * g."]
    wrong = (_word_codes(got_w) != _word_codes(want_w)).any(axis=0)
    quads = sorted({int(t) // 4 for t in np.flatnonzero(wrong)})
    if quads and len(quads) < 4:
        names = ", ".join(f"{4 * k}-{4 * k + 3}" for k in quads)
        return [f"only codes {names} of each word's sixteen are wrong: load k (k = 0..3) brings weights 4k..4k+3 of "
                "the thread's sixteen, at float index 16 * g + 4 * k: is one missing, or at another offset?"]
    return []


def check_int8_rows(launch, *, name: str = "int8 per token", shapes=None, seed=None) -> None:
    """``launch(q, scales, x)``: per row r, ``scales[r] = absmax(x[r]) / 127``, ``q = clamp(rint(x / s), -127, 127)``."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or [("1 x 5", (1, 5)), ("6 x 45", (6, 45)), ("3 x 200", (3, 200))]
    for label, (rows, cols) in shapes:
        x = (rng.standard_normal((rows, cols)) * rng.uniform(0.1, 10, (rows, 1))).astype(np.float32)
        x[0, :min(cols, 4)] = np.array([-127.0, 2.5, -0.5, 0.5], np.float32)[:min(cols, 4)]
        x[0, min(cols, 4):] = np.clip(x[0, min(cols, 4):], -126, 126)
        if rows > 1:
            x[1] = 0.0
        want_q, want_s = ref.int8_per_row_f32(x)
        q, s = _out((rows, cols), np.int8, want_q), _out(rows, np.float32)
        _run(name, launch, q, s, _dev(x))
        got_q, got_s = q.copy_to_host(), s.copy_to_host()
        if not np.array_equal(got_s, want_s):
            hints = []
            if np.unique(got_s[~np.isnan(got_s)]).size == 1 and rows > 2:
                hints.append("every row got the same scale: per-token quantization takes each row's own absmax.")
            _fail(name, f"shape {label}, scales", got_s, want_s, hints, seed)
        if not np.array_equal(got_q, want_q):
            _fail(name, f"shape {label}, codes", got_q, want_q, _code_hints(got_q, x, want_s[:, None], -127, 127), seed)
    progress.passed(name)
    print(f"{name}: bit-exact for all {len(shapes)} shapes")


# ================================================================================================
# GEMMs


def gemm_shapes():
    """(label, (M, N, K)): decode rows (M = 1), K not a multiple of 4 or of the group, edges of tiles."""
    return [("1 x 7 x 5", (1, 7, 5)), ("3 x 17 x 130", (3, 17, 130)), ("19 x 9 x 64", (19, 9, 64)),
            ("large", (10, 12, 261) if on_simulator() else (257, 1031, 1100))]


def _float_result(name, case, got, want, magnitude, seed, hints_fn):
    tol = UNIT_ROUNDOFF["float32"] * 8 * magnitude + 1e-30
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got.astype(np.float64) - want) <= tol)
    if bad.any():
        want32 = want.astype(np.float32)
        # Outputs within the tolerance are right: the message counts and shows only the others.
        _fail(name, case, np.where(bad, got, want32), want32, hints_fn(), seed)


def ternary_gemm_shapes():
    """A K long enough for every lane of a warp to take a second 16-code word, and some a third
    (K > 2 x 32 x 16: a warp whose lanes stop after their first byte or word misses the rest), then
    :func:`gemm_shapes`. First, because its K is a multiple of 4: a lane's share left out of the warp's
    sum cannot pass there for the K % 4 tail left out, as it can at 1 x 7 x 5."""
    return [("1 x 8 x 1100 (two or three words a lane)", (1, 8, 1100))] + gemm_shapes()


def check_ternary_gemm(launch, *, name: str = "ternary gemm", shapes=None, seed=None) -> None:
    """``launch(out, a, a_scale, w_packed, w_scale)``: out (M, N) float32 =
    ``a_scale[m] * w_scale[0] * sum_k a[m, k] * t[n, k]``; a (M, K) int8, w_packed (N, ceil(K/4)).
    Shapes: :func:`ternary_gemm_shapes`."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or ternary_gemm_shapes()
    for label, (m, n, k) in shapes:
        a = rng.integers(-127, 128, (m, k)).astype(np.int8)
        t = rng.integers(-1, 2, (n, k)).astype(np.int8)
        sa = rng.uniform(0.01, 0.1, m).astype(np.float32)
        sw = np.float32(rng.uniform(0.5, 1.5))
        packed = ref.ternary_pack(t)
        exact = ref.int8_gemm_exact(a, t).astype(np.float64)
        want = exact * sa[:, None].astype(np.float64) * float(sw)
        mag = ref.int8_gemm_exact(np.abs(a), np.abs(t)) * sa[:, None].astype(np.float64) * float(sw)
        out = _out((m, n), np.float32)
        _run(name, launch, out, _dev(a), _dev(sa), _dev(packed), _dev(np.array([sw], np.float32)))
        got = out.copy_to_host()

        def hints():
            h = []
            scale = sa[:, None] * sw
            with np.errstate(invalid="ignore"):
                if np.allclose(got, ref.int8_gemm_exact(a, np.where(t < 0, 3, t)) * scale, rtol=1e-5):
                    h.append("code 11 was added as +3: it stands for -1 (subtract the activation).")
                elif k % 4 and np.allclose(got, ref.int8_gemm_exact(a[:, : k - k % 4], t[:, : k - k % 4]) * scale,
                                           rtol=1e-5):
                    h.append(f"the last {k % 4} values of K were skipped: K = {k} is not a multiple of 4, the last "
                             "byte holds the tail.")
                elif np.allclose(got, exact, rtol=1e-5):
                    h.append("the scales were left out: multiply the integer sum by a_scale[m] * w_scale.")
                else:
                    h += _warp_gemm_hints(got, want, a, t, scale)
            return h
        _float_result(name, f"shape {label}", got, want, mag, seed, hints)
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes")


def _warp_gemm_hints(got, want, a, t, scale):
    """Hints for the warp forms: a lane's share of K left out of the warp's sum, lanes that stop after
    their first byte or word, and a four-row pass whose rows all read the first row's activations."""
    k = a.shape[1]
    ks = np.arange(k)

    def product(mask=None, upto=k):
        aa = a[:, :upto] if mask is None else np.where(mask, a, 0).astype(np.int8)
        return ref.int8_gemm_exact(aa, t[:, :upto]) * scale

    with np.errstate(invalid="ignore"):
        for per_lane, what in ((4, "byte"), (16, "16-code word")):
            if k > 32 * per_lane and np.allclose(got, product(upto=32 * per_lane), rtol=1e-5):
                return [f"only the first {32 * per_lane} values of K were added: each lane took its first {what} and "
                        f"stopped. K = {k} needs more: lane l takes {what}s l, l + 32, l + 64, ... to the row's end."]
        for per_lane in (4, 16):
            if k > per_lane and np.allclose(got, product(mask=(ks // per_lane) % 32 == 0), rtol=1e-5):
                return ["only lane 0's share of K is in the result: the 32 lanes' partial sums must be added together "
                        "(the warp sum, with shuffles) before lane 0 writes the output."]
        rows = np.arange(got.shape[0])
        first = ref.int8_gemm_exact(a[rows - rows % 4], t) * scale  # row 4i's activations, each row's own scale
        wrong = ~np.isclose(got, want, rtol=1e-5).all(axis=1)
        if wrong.any() and (rows[wrong] % 4).all() and np.allclose(got[wrong], first[wrong], rtol=1e-5):
            which = ", ".join(f"4i+{r}" for r in sorted(set(rows[wrong] % 4)))
            return [f"rows {which} hold row 4i's product (with their own scales): each of the four accumulators takes "
                    "its own row's activation word (a_words[r1, j] for acc1, r2 for acc2, r3 for acc3)."]
    return []


def int8_gemm_shapes():
    """(label, (M, N, K)) for the DP4A GEMMs: first M = N = K/4 (a kernel that reads B's words
    transposed, or exchanges the two scales of W8A8, stays inside its arrays there, and the check can
    name the mistake), then 05's GEMM shapes (M = 1, K not a multiple
    of 4, edges of tiles), whole tiles with K a multiple of every stage (the fast paths of module 02's
    kernel), and a K past 1024 where one sum exceeds 2^24 (a float32 accumulator loses its last bits)."""
    sim = on_simulator()
    return ([("M = N = K/4: 12 x 12 x 48" if sim else "M = N = K/4: 300 x 300 x 1200",
              (12, 12, 48) if sim else (300, 300, 1200))]
            + gemm_shapes()
            + [("whole tiles", (64, 32, 256) if sim else (512, 512, 1024)), ("a sum past 2^24", (2, 3, 1100))])


def _int8_gemm_hints(got, a, b, exact):
    """Named causes of a wrong int32 result (``got``, int64) of ``a @ b.T``; a and b int8, K padded to 4."""
    m, k = a.shape
    n = b.shape[0]
    kp = 4 * -(-k // 4)
    ap, bp = pad_cols_int8(a), pad_cols_int8(b)
    kw = kp // 4
    wrong = got != exact
    # a sum of words 0..t-1 only: the last word, or the last partial tile of K, skipped
    part = np.zeros((m, n), np.int64)
    for t in range(kw):
        if t and _same(got, part):
            if t == kw - 1:
                return ["the last word of K was skipped: loop over all K/4 words (range(a32.shape[1])); in a tiled "
                        "kernel, step the stages over range(0, K/4, BKW), so that the last, partial one runs too."]
            return [f"only the first {t} of the {kw} words of K were summed: the last, partial tile of K was "
                    "skipped. Step the tiles over range(0, K/4, BKW) and stage zeros where a word lies past K."]
        part += ap[:, 4 * t: 4 * t + 4].astype(np.int64) @ bp[:, 4 * t: 4 * t + 4].astype(np.int64).T
    # the last tile's words past K not zeroed: they still hold the previous tile's words
    for bkw in (2, 4, 8, 16, 32):
        k0 = (kw // bkw) * bkw
        if kw % bkw and k0 >= bkw:
            lo, hi = 4 * (kw - bkw), 4 * k0  # the previous tile's words at the stale positions
            stale = exact + ap[:, lo:hi].astype(np.int64) @ bp[:, lo:hi].astype(np.int64).T
            if _same(got, stale):
                return [f"the words past the end of K in the last tile (tiles of {bkw} words) were not zeroed: "
                        "they still held the previous tile's words. Stage a 0 where k0 + kw >= K/4 (and where "
                        "a row lies past M or N)."]
    if _same(got, ref.int8_gemm_exact(a.view(np.uint8), b.view(np.uint8))):
        return ["the bytes were multiplied as unsigned: DP4A here is signed x signed (__dp4a on int)."]
    if n == kw:  # B's words (N, K/4) read as (K/4, N): element [w, n] taken for [n, w]
        words = bp.view(np.int32).reshape(n, kw)
        b_swapped = np.ascontiguousarray(words.T).view(np.int8).reshape(n, kp)
        if _same(got, ref.int8_gemm_exact(ap, b_swapped)):
            return ["B's words were read transposed: b32 is (N, K/4), a row per output column, and the kernel "
                    "read it as (K/4, N) (b32[w, n] for b32[n, w]); module 02's kernel is the one that takes B "
                    "K-major, (K/4, N): qk.k_major_words(b32)."]
    big = np.abs(exact) > 2 ** 24
    if big.any() and not (wrong & ~big).any() and np.allclose(got[big], exact[big], rtol=1e-6, atol=0):
        return ["the sums past 2^24 lost their last bits: the accumulator was float32 (24 bits of "
                "significand). DP4A adds into an int32: keep acc an int32 (cuda.local.array(..., int32))."]
    values = set(np.unique(exact).tolist())
    moved = [v for v in got[wrong].tolist() if v != 0]  # zeros: outputs from rows or columns past the edge
    if len(moved) > 1 and 2 * len(moved) >= wrong.sum() and np.mean([v in values for v in moved]) > 0.9:
        return ["the right sums landed in the wrong places: a row index and a column index were exchanged "
                "(in a register-blocked step, a_reg indexed with j or b_reg with i; in one output per thread, "
                "m and n of the grid swapped)."]
    return []


def pad_cols_int8(x):
    from ..quant.integer import pad_cols

    return pad_cols(np.asarray(x, np.int8), 4)


def check_int8_gemm(launch, *, name: str = "int8 gemm", epilogue: bool = False, shapes=None, seed=None) -> None:
    """DP4A GEMM on int8 operands read as int32 words, K zero-padded to a multiple of 4:
    ``launch(c, a32, b32)`` with c (M, N) int32 = exact ``a @ b.T`` (bit-exact); or, with
    ``epilogue=True`` (W8A8), ``launch(c, a32, b32, a_scale, b_scale)`` with c float32 =
    ``a_scale[m] * b_scale[n] * sum``. A wrong result is compared with the classic mistakes
    (:func:`_int8_gemm_hints`): K's last word or partial tile skipped, stale words past K, B read
    transposed, unsigned bytes, a float32 accumulator, rows and columns exchanged."""
    from ..quant.integer import as_words

    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or int8_gemm_shapes()
    for label, (m, n, k) in shapes:
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (n, k)).astype(np.int8)
        if k > 1024:  # one sum past 2^24, and odd: a float32 accumulator cannot hold it
            a[0], b[0] = -128, -128
            a[0, 0], b[0, 0] = -127, -127
        else:
            a[0, 0], b[0, 0] = -128, -128  # the products' extremes
        exact = ref.int8_gemm_exact(a, b)
        a32, b32 = _dev(as_words(pad_cols_int8(a))), _dev(as_words(pad_cols_int8(b)))
        if not epilogue:
            c = _out((m, n), np.int32, exact.astype(np.int32))
            _run(name, launch, c, a32, b32)
            got_i = c.copy_to_host().astype(np.int64)
            if not np.array_equal(got_i, exact):
                _fail(name, f"shape {label}", got_i, exact, _int8_gemm_hints(got_i, a, b, exact), seed)
            continue
        sa = rng.uniform(0.001, 0.1, m).astype(np.float32)
        sb = rng.uniform(0.001, 0.1, n).astype(np.float32)
        want = ref.w8a8_reference(a, sa, b, sb)
        mag = ref.int8_gemm_exact(np.abs(a.astype(np.int64)), np.abs(b.astype(np.int64))) * np.outer(sa, sb)
        c = _out((m, n), np.float32)
        _run(name, launch, c, a32, b32, _dev(sa), _dev(sb))
        got = c.copy_to_host()

        def hints():
            with np.errstate(invalid="ignore"):
                if np.allclose(got, exact, rtol=1e-5):
                    return ["the epilogue did not dequantize: multiply the int32 sum by a_scale[m] * b_scale[n]."]
                if (m > 1 or n > 1) and np.allclose(got, exact * float(sa[0]) * float(sb[0]), rtol=1e-5):
                    return ["one scale for the whole matrix: a_scale is per row m (token), b_scale per column n."]
                if m == n > 1 and np.allclose(got, exact * np.outer(sb, sa), rtol=1e-5):
                    return ["the scales were exchanged: a_scale[col] and b_scale[row] where the activation scale "
                            "belongs to the row (a_scale[row]) and the weight scale to the column (b_scale[col])."]
                sums = got.astype(np.float64) / np.outer(sa, sb).astype(np.float64)  # the int32 sums, if the
                if np.all(np.isfinite(sums)) and np.allclose(sums, np.rint(sums), atol=1e-2):  # epilogue is right
                    return _int8_gemm_hints(np.rint(sums).astype(np.int64), a, b, exact)
            return []
        _float_result(name, f"shape {label}", got, want, mag, seed, hints)
    progress.passed(name)
    print(f"{name}: {'correct' if epilogue else 'bit-exact'} for all {len(shapes)} shapes")


def check_w4a8_gemm(launch, *, name: str = "w4a8 gemm", shapes=None, seed=None) -> None:
    """``launch(out, a32, a_scale, w32, w_scales)``: W4A8 with INT4 weights in groups of 128 along K.

    a32: (M, Kp/4) int32 words of int8 activations, w32: (N, Kp/8) words of packed INT4 (the format of
    05.2, K zero-padded to Kp, a multiple of 8), w_scales (N, ceil(Kp/128)) float32, a_scale (M,).
    out (M, N) float32 = ``a_scale[m] * sum_g w_scales[n, g] * sum_{k in g} a[m, k] w[n, k]``.
    """
    from ..quant.integer import as_words, pad_cols

    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    # and a K that is a multiple of 32 over several groups: rows of whole 16-byte vectors, the
    # path a kernel built for bandwidth takes (the other shapes take its one-word path)
    # and whole groups of 128 (the rows a tensor-core kernel takes in chunks of one group)
    shapes = shapes or gemm_shapes() + [("16-byte rows", (3, 5, 1056) if on_simulator() else (65, 1031, 4096)),
                                        ("whole groups", (9, 19, 256) if on_simulator() else (70, 333, 1152))]
    for label, (m, n, k) in shapes:
        kp = 8 * -(-k // 8)
        a = pad_cols(rng.integers(-127, 128, (m, k)).astype(np.int8), 8)
        wq = pad_cols(rng.integers(-8, 8, (n, k)).astype(np.int8), 8)
        scales = rng.uniform(0.01, 0.1, (n, -(-kp // INT4_GROUP))).astype(np.float32)
        sa = rng.uniform(0.01, 0.1, m).astype(np.float32)
        packed = ref.int4_pack(wq)
        want, mag = ref.w4a8_reference(a, sa, wq, scales)
        out = _out((m, n), np.float32)
        _run(name, launch, out, _dev(as_words(a)), _dev(sa), _dev(packed.view(np.int32)), _dev(scales))
        got = out.copy_to_host()

        def hints():
            h = []
            with np.errstate(invalid="ignore"):
                tol = dict(rtol=1e-4, atol=1e-4 * float(mag.max()))
                unsigned = np.where(wq < 0, wq + 16, wq)
                swapped = ref.int4_unpack(_swap_nibbles(packed), kp)
                if np.allclose(got, ref.w4a8_reference(a, sa, unsigned, scales)[0], **tol):
                    h.append("wrong sign extension: the nibbles were used as 0..15; 8..15 stand for -8..-1.")
                elif np.allclose(got, ref.w4a8_reference(a, sa, swapped, scales)[0], **tol):
                    h.append("nibble order swapped: the low nibble of each byte is the EVEN element of K.")
                elif scales.shape[1] > 1 and np.allclose(
                        got, ref.w4a8_reference(a, sa, wq, np.repeat(scales[:, :1], scales.shape[1], 1))[0], **tol):
                    h.append("every group used the first group's scale: word w of a row lies in group w // 16 "
                             "(16 words of 8 values per group of 128).")
                elif np.allclose(got, (unscaled := ref.w4a8_reference(a, sa, wq, np.ones_like(scales)))[0],
                                 rtol=1e-4, atol=1e-4 * float(unscaled[1].max())):
                    h.append("the group scales were left out: multiply each group's integer sum by "
                             "w_scales[n, group] (group = word // 16).")
                elif np.allclose(got, want / sa[:, None], **dict(tol, atol=tol["atol"] / float(sa.min()))):
                    h.append("the activation row's scale is missing: multiply row m's sum by a_scale[m].")
                elif (kp // 8) % 4 == 0 and not np.any(got) and np.any(want):
                    h.append(f"every output is 0 on this shape, whose rows are {kp // 8} words (a multiple of 4): "
                             "rows of whole 16-byte vectors take the 16-byte path (four words a lane, "
                             "load4), which added nothing.")
            return h
        _float_result(name, f"shape {label}", got, want, mag, seed, hints)
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes")
