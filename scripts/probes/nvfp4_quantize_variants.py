"""Probe (notebook 05.4): can the NVFP4 quantizer reach 85% of the copy roofline on an H200?

    PYTHONPATH=utilities python3 scripts/probes/nvfp4_quantize_variants.py            # GPU: check, then time
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/nvfp4_quantize_variants.py --sim
    python3 scripts/probes/nvfp4_quantize_variants.py --sass    # no GPU: offline sm_90 SASS counts
    PYTHONPATH=utilities python3 scripts/probes/nvfp4_quantize_variants.py --model   # no GPU: the code's rounding

The question. 05.4's last kernel (``nvfp4_quantize_blocks``, one block of 16 values a thread, its
quotients from one reciprocal and two FMAs) is the package's best and measured 73.1% of the copy
roofline on an H200 (97.7 us for 2^26 values, 4.5625 bytes a value); the course's goal is 85%.
``h200_memory_bound_ncu.py`` found it held neither by DRAM (65%) nor by the issue slots (69%) but by
an SM pipe (SM throughput 84%), at 31.1 instructions a value.

Why it stops there (offline sm_90 SASS, ptxas 13.0, ``--sass``: the path of a whole block whose
scale, denominator and reciprocal are normal, the division's slow-path calls left out). The
package's kernel issues 29.3 instructions a value there (Nsight counted 31.1 on the GPU, all paths),
and 19.1 a value are of the kinds that Nsight Compute's documentation puts on the ALU pipe (integer
and logic, compares, selects, min/max: LOP3, SHF, IADD3, LEA, VIMNMX, ISETP, SEL, FSETP, FSEL,
FMNMX); 8.6 are FMA-pipe kinds (FFMA, FMUL, FADD, IMAD, VIADD). The ALU pipe takes a warp
instruction every other cycle of a scheduler (16 lanes), so at 85% of 4.29 TB/s and 4.5625 bytes a
value it can afford about 21 a value, where all the issue slots afford about 42. At 73.1% the kernel
would keep the ALU pipe about 80% busy and the issue slots about 60%: close to what the profile
shows (SM throughput 84%, issue 69%). The pipe that holds it is the ALU pipe, and what fills it per
value: ``divide``'s guard (two FSETP and a FSEL), ``e2m1_code`` (FSETP for ``a < 1``, then both of
its branches, if-converted and predicated, so every value pays for the subnormal path, the rounding,
the saturation, the NaN test and the sign: some 13), the packing (2) and the block's amax (FMNMX).
The memory side is as it should be: four LDG.E.128 a block, two 4-byte stores of eight codes and
one byte of scale; 32 registers, no spills.

The variants (each checked bit for bit, then timed):

* ``package``: ``fk.nvfp4_quantize`` (floor the amax, then ``nvfp4_quantize_blocks``), the baseline.
* ``lean``: the same thread layout and the same exact quotient, with a block-level fast path that
  holds for a block of finite values whose scale, denominator and reciprocal are comfortably normal
  and whose largest quotient ``m / denom`` is at most 6.5 (no saturation possible: the E2M1 grid
  rounds below 7 to at most 6). In it: the quotient's two FMA corrections without ``divide``'s guard
  (the guard keeps -0's sign and an overflowing quotient; here the sign is taken from ``x`` itself
  and no quotient overflows); the code from the float adder and the integer unit: ``M = 2^(e + 22)``
  with ``e`` the exponent of ``max(|q|, 1)`` (one LOP3 and one integer max on the bits), ``t = |q| +
  M`` (one FFMA: ptxas folds ``M``'s exact multiply into the add) holds ``k``, the number of E2M1
  steps (0.5, 1 or 2 in the three binades) in ``|q|`` rounded to nearest, ties to even, in its low
  bits: ``bits(t) = bits(M) + k`` since ``t < 2M``, and ``k``'s parity is the code's. The code is
  ``k + 2e``: with ``s = bits(t) >> 23 = 149 + e``, ``bits(t) - (s (2^23 - 2) + 298)`` (a shift and
  an IMAD; the 298s of a word fold into one constant); a second IMAD puts it in its nibble; the
  sign bit of ``x`` goes in with a shift and a LOP3. Every other block (partial, tiny, saturated
  scales, infinities) takes the package's code unchanged, so outputs are the package's bit for bit.
  Its hot path (``--sass``): 18.9 instructions a value, 9.3 of them ALU kinds, 7.8 FMA kinds.
  ``--model`` runs the same arithmetic in NumPy against ``fp8.encode`` on 11.5 million float32 of
  both signs (every float32 within 2^16 ulps of each tie, of 1, 2 and 4 where ``e`` changes, of 0, 6
  and 6.5, and 2^22 random ones in [0, 6.5]): all agree; once, offline, every float32 in [-6.5, 6.5]
  (2.17 billion) agreed too.
* ``lean x2``: two blocks a thread (a block of threads apart, all eight 16-byte loads first): 128
  bytes in flight a thread, the tensor scale and its reciprocal once for two blocks (18.5 a value,
  9.4 ALU kinds; 60 registers with its fallback, 40 for ``lean``, 39 for the package's).
* ``lean x1, 128 threads``: the lean kernel in blocks of 128 threads.

NaN inputs are outside every kernel's contract here, the package's included: its block amax
(``max``, FMNMX) skips a NaN where the NumPy reference's propagates it. The checks are the
notebook's (``check_nvfp4_quantize``: every E2M1 tie, reciprocal ties for every E4M3 scale, tiny
tensors, partial blocks, -0) and two more against the NumPy reference: an amax a third of the true
one (saturated scales, quotients far above 6) and blocks from 2^-140 to 2^120.

On a GPU: each variant's check, then its output on the notebook's 2^26 activations (and with a
third of their amax) compared with the package's bit for bit, then ``kl.benchmark`` at 2^26 values
(4.5625 bytes a value) beside the package's. Under ``--sim`` the checks only, at the simulator's
sizes. ``--model`` the NumPy model of ``lean_word``'s code (no GPU, seconds). ``--only TEXT`` keeps
the variants whose name contains TEXT.

Prediction: with the ALU pipe at about 40% of what it was, every lean variant is held by memory:
85-95% of the copy roofline (the dequantizers, a lookup and a multiply a value, measured 86-91%),
1.15-1.30x the package. If it is not, Nsight's pipe metrics (sm__inst_executed_pipe_alu,
sm__pipe_alu_cycles_active, sm__pipe_fma_cycles_active) and the L1 wavefronts of the 64-byte-strided
16-byte loads are the next things to read.

What went wrong in the first version (commits e94c088, f7157cc). It took the code from ``g = (|q| +
M) - M`` (exact) and ``g * 2^-126``, whose bits hold the code in bits 22-24, shifted into the word:
``w += bits >> (22 - 4j)`` for values 0-5 of a word, ``w += bits << (4j - 22)`` for values 6 and 7. It
passed in the simulator and failed on the H200: in the notebook's "ties" case codes 0.11.x came out
0.00.0 for x = 3.5, 5, 5.5 and -3.5, values 6, 7, 15 and 22 of the tensor (6 and 7 of a word), and
58,904 of 524,288 bytes differed with the saturated scales. Not fastmath: these kernels are compiled without it, the PTX has no ``.ftz`` and
``2^-126 g`` is normal for every code but 1. The PTX is right (16 multiplies by 2^-126 a block, each
shifted and added); ptxas 13.0 at -O2 and -O3 drops the two left-shifted terms of each word, the
whole chain that computes them included (12 of the 16 FFMA pairs and multiplies are left; -O0 and
-O1 keep all 16). Changing one of the pair (``|`` for ``+``, another shift, ``mul.rn`` for the
multiply) brings them back, and a small kernel with the same eight lines keeps them, so it depends
on the surrounding code. The simulator runs the Python and cannot see it. The form above has no
left-shifted float bits and no ``(a + M) - M``, and ``--sass`` now counts the rounding FFMAs of
every variant's hot path and fails unless each value has one (it reports 12 of 16 for the first
version).

Result: the first version's GPU run (above) was wrong. The present one (H200, 2026-11-29): every
variant bit-exact with the package in all checks and on 2^26 activations; package 99.6 us, 71.8% of
the copy roofline; lean 75.9 us, 94.3% (1.31x the package); lean x2 94.1%; lean x1 at 128 threads
94.6%.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "utilities"))

import kernel_lab as kl
from kernel_lab.bitcast import bits_float, float_bits
from kernel_lab.quant.float_kernels import (
    divide,
    e2m1_code,
    e4m3_magnitude_code,
    e4m3_magnitude_value,
)
from kernel_lab.vector_loads import load4
from numba import cuda, float32, int32, uint8, uint32

N_GPU = 1 << 26  # the notebook's size
THREADS = 256


# ================================================================================================
# the kernels


def build(hot_only: bool = False):
    """{name: (kernel, blocks a thread, threads a block)}. ``hot_only`` (``--sass`` only): the
    kernels without their fallbacks, for counting the instructions of the path whole, normal blocks
    take; not correct in general."""
    HOT = hot_only
    TWO_M100, TWO_P100 = float32(2.0 ** -100), float32(2.0 ** 100)
    TWO_M125, TWO_P125 = float32(2.0 ** -125), float32(2.0 ** 125)
    MAGIC_UNIT = float32(4194304.0)  # 2^22: M = 2^e * 2^22 has an ulp of 2^(e - 1), E2M1's step

    @cuda.jit(device=True, forceinline=True)
    def package_block(v, m, ts, rts, ts_ok, c):
        """The package's scale and element codes for one block (nvfp4_quantize_blocks' lines)."""
        if ts_ok and m >= float32(2.0 ** -100):
            code = e4m3_magnitude_code(divide(divide(m, float32(6), float32(1 / 6)), ts, rts))
        else:
            code = e4m3_magnitude_code((m / float32(6)) / ts)
        denom = e4m3_magnitude_value(code) * ts
        if TWO_M125 <= denom <= TWO_P125:
            r = float32(1) / denom
            for i in range(16):
                c[i] = e2m1_code(divide(v[i], denom, r))
        else:
            for i in range(16):
                if denom > 0:
                    c[i] = e2m1_code(v[i] / denom)
                else:
                    c[i] = int32(int32(float_bits(v[i]) >> 28) & int32(8))
        return code

    @cuda.jit(device=True, forceinline=True)
    def lean_word(v, h, denom, r):
        """Eight codes (values 8h .. 8h + 7 of the block) as one word, on the fast path (|q| < 7).
        The float adder rounds: t = |q| + M with M = 2^(e + 22), e the exponent of max(|q|, 1), keeps
        k = round(|q| / 2^(e - 1)) steps of E2M1's grid above M, to nearest even, in its low bits
        (bits(t) = bits(M) + k, as t < 2M). Then code = k + 2e, read from t's bits alone: with
        s = bits(t) >> 23 = 149 + e, bits(t) - (s (2^23 - 2) + 298) = k + 2s - 298 = code (no
        integer wraps). No subtraction of M in floating point, no subnormal: t is the only float
        whose bits are read."""
        w = uint32(0)
        sgn = uint32(0)
        for j in range(8):
            xv = v[8 * h + j]
            q0 = xv * r
            q = cuda.fma(cuda.fma(-denom, q0, xv), r, q0)  # exactly rounded x / denom (Markstein)
            e = max(float_bits(q) & uint32(0x7F800000), uint32(0x3F800000))  # 2^e, e of max(|q|, 1)
            tb = float_bits(abs(q) + bits_float(e) * MAGIC_UNIT)  # M + k steps, rounded to nearest even
            w += (tb - ((tb >> uint32(23)) * uint32(0x7FFFFE) + uint32(298))) << uint32(4 * j)  # code, nibble j
            sgn |= (float_bits(xv) >> uint32(28 - 4 * j)) & uint32(8 << (4 * j))  # x's sign bit: bit 4j + 3
        return w | sgn

    @cuda.jit(device=True, forceinline=True)
    def load_block(x, v, b, n):
        if HOT or 16 * b + 16 <= n:  # four 16-byte loads
            for p in range(4):
                v[4 * p], v[4 * p + 1], v[4 * p + 2], v[4 * p + 3] = load4(x, 16 * b + 4 * p)
        elif 16 * b < n:  # the last, partial block: zeros past the end
            for i in range(16):
                v[i] = x[16 * b + i] if 16 * b + i < n else float32(0)

    @cuda.jit(device=True, forceinline=True)
    def lean_block(v, b, n, ts, rts, ts_ok, packed, packed32, scales):
        if 16 * b >= n:
            return
        whole = 16 * b + 16 <= n
        m = float32(0)
        for i in range(16):
            m = max(m, abs(v[i]))
        hot = False
        code = int32(0)
        denom = float32(1)
        r = float32(1)
        if whole and ts_ok and m >= TWO_M100:
            code = e4m3_magnitude_code(divide(divide(m, float32(6), float32(1 / 6)), ts, rts))
            denom = e4m3_magnitude_value(code) * ts
            if TWO_M100 <= denom <= TWO_P100:
                r = float32(1) / denom
                hot = m * r <= float32(6.5)  # no quotient reaches 7: no saturation
        if hot:
            packed32[2 * b] = lean_word(v, 0, denom, r)
            packed32[2 * b + 1] = lean_word(v, 1, denom, r)
            scales[b] = uint8(code)
        elif not HOT:  # every other block: the package's lines
            c = cuda.local.array(16, int32)
            code = package_block(v, m, ts, rts, ts_ok, c)
            if whole:
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

    def make_lean(BPT):
        """One block of 16 a thread (BPT 1), or two a block of threads apart (BPT 2), each in its own
        local array (a 2-D array indexed by a loop counter went to local memory: 128 bytes of stack)."""

        @cuda.jit
        def nvfp4_quantize_lean(x, packed, packed32, scales, amax):
            nb = cuda.blockDim.x
            b0 = cuda.blockIdx.x * (BPT * nb) + cuda.threadIdx.x
            n = x.size
            v0 = cuda.local.array(16, float32)
            v1 = cuda.local.array(16, float32)
            load_block(x, v0, b0, n)  # every load first
            if BPT == 2:
                load_block(x, v1, b0 + nb, n)
            ts = amax[0] / float32(2688)
            if ts == 0:
                ts = float32(1)
            ts_ok = TWO_M125 <= ts <= TWO_P125
            rts = float32(1) / ts
            lean_block(v0, b0, n, ts, rts, ts_ok, packed, packed32, scales)
            if BPT == 2:
                lean_block(v1, b0 + nb, n, ts, rts, ts_ok, packed, packed32, scales)

        return nvfp4_quantize_lean

    kernels = {"lean": (make_lean(1), 1, 256), "lean x2": (make_lean(2), 2, 256),
               "lean x1, 128 threads": (make_lean(1), 1, 128)}
    if hot_only:  # the package's kernel, its hot path alone (the same lines, fallbacks cut)

        @cuda.jit
        def nvfp4_quantize_blocks_hot(x, packed, packed32, scales, amax):
            b = cuda.grid(1)
            if 16 * b >= x.size:
                return
            v = cuda.local.array(16, float32)
            for k in range(4):
                v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3] = load4(x, 16 * b + 4 * k)
            m = float32(0)
            for i in range(16):
                m = max(m, abs(v[i]))
            ts = amax[0] / float32(2688)
            if ts == 0:
                ts = float32(1)
            code = e4m3_magnitude_code(divide(divide(m, float32(6), float32(1 / 6)), ts, float32(1) / ts))
            denom = e4m3_magnitude_value(code) * ts
            c = cuda.local.array(16, int32)
            r = float32(1) / denom
            for i in range(16):
                c[i] = e2m1_code(divide(v[i], denom, r))
            for h in range(2):
                w = uint32(0)
                for i in range(8):
                    w |= uint32(c[8 * h + i]) << uint32(4 * i)
                packed32[2 * b + h] = w
            scales[b] = uint8(code)

        kernels = {"package": (nvfp4_quantize_blocks_hot, 1, 256), **kernels}
    return kernels


def launcher(kernel, bpt, threads):
    """The package's launcher with another kernel: floor the amax in place, then one thread per
    ``bpt`` blocks of 16."""
    from kernel_lab.quant import float_kernels as fk
    from kernel_lab.quant.int8 import floor_amax
    from kernel_lab.sizes import blocks_for

    def launch(packed, scales, x, amax):
        fk._check_nvfp4_arrays(packed, scales, x, amax)
        floor_amax[1, 1](amax)
        grid = max(1, blocks_for(blocks_for(x.size, 16), bpt * threads))
        kernel[grid, threads](x, packed, fk.nvfp4_words(packed, x.size), scales, amax)

    return launch


def variants(only=""):
    from kernel_lab.quant import float_kernels as fk

    out = {"package": fk.nvfp4_quantize}
    for name, (kernel, bpt, threads) in build().items():
        out[name] = launcher(kernel, bpt, threads)
    return {k: f for k, f in out.items() if only in k or k == "package"}


# ================================================================================================
# checks


def extra_cases(rng, n):
    """(label, x, amax): saturated scales (amax a third of the true one), blocks of every magnitude."""
    x = (rng.standard_normal(n) * np.repeat(np.exp2(rng.uniform(-20, 20, -(-n // 16))), 16)[:n]).astype(np.float32)
    wide = (rng.standard_normal(n) * np.repeat(np.exp2(rng.uniform(-140, 120, -(-n // 16))), 16)[:n]).astype(np.float32)
    wide[::37] = -0.0
    return [("amax / 3 (saturated scales)", x, np.float32(np.max(np.abs(x)) / 3)),
            ("blocks 2^-140 .. 2^120", wide, np.float32(np.max(np.abs(wide))))]


def check_variant(name, launch, n_extra):
    """The notebook's check, then the extra cases against the NumPy reference. True if all pass."""
    from kernel_lab.check import CheckFailed
    from kernel_lab.checks import quant_float as checks
    from kernel_lab.quant import microscaling as mx

    ok = True
    try:
        checks.check_nvfp4_quantize(launch, name=f"{name}", seed=7)
    except CheckFailed as exc:
        print(f"{name}: WRONG: {exc}")
        ok = False
    rng = np.random.default_rng(11)
    for label, x, amax in extra_cases(rng, n_extra):
        want_p, want_s, _ = mx.nvfp4_quantize(x, amax)
        packed = cuda.to_device(np.full(want_p.size, 0x5A, np.uint8))
        scales = cuda.to_device(np.full(want_s.size, 0x5A, np.uint8))
        launch(packed, scales, cuda.to_device(x), cuda.to_device(np.array([amax], np.float32)))
        bad_p = int(np.sum(packed.copy_to_host() != want_p))
        bad_s = int(np.sum(scales.copy_to_host() != want_s))
        if bad_p or bad_s:
            ok = False
        print(f"{name}, {label} (n = {x.size}): {'bit-exact' if not (bad_p or bad_s) else 'WRONG'}"
              f" ({bad_s} of {want_s.size} scales, {bad_p} of {want_p.size} bytes differ from the reference)")
    return ok


def same_as_package(name, launch, ref, x, amax_value):
    """The variant's output at full size against the package's (``ref``: host packed, scales)."""
    packed = cuda.device_array(ref[0].size, np.uint8)
    scales = cuda.device_array(ref[1].size, np.uint8)
    launch(packed, scales, x, cuda.to_device(np.array([amax_value], np.float32)))
    bad = int(np.sum(packed.copy_to_host() != ref[0])) + int(np.sum(scales.copy_to_host() != ref[1]))
    return bad


def lean_code_model(q):
    """``lean_word``'s code for float32 ``q`` (|q| < 7), in NumPy: the same adds, shifts and products
    on the same float32 and uint32 values (NumPy's float32 add rounds to nearest even, as the FFMA)."""
    q = np.asarray(q, np.float32)
    bits = q.view(np.uint32)
    e = np.maximum(bits & np.uint32(0x7F800000), np.uint32(0x3F800000))
    tb = (np.abs(q) + e.view(np.float32) * np.float32(4194304.0)).view(np.uint32)
    code = tb - ((tb >> np.uint32(23)) * np.uint32(0x7FFFFE) + np.uint32(298))
    return (code | ((bits >> np.uint32(28)) & np.uint32(8))).astype(np.uint8)


def check_code_model(reach: int = 1 << 16) -> bool:
    """The model against ``fp8.encode`` (the reference's E2M1 code) on every float32 within ``reach``
    ulps of each E2M1 tie (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5), of each edge where e changes (1, 2, 4),
    of 0, 6 and 6.5, both signs, and 2^22 random float32 in [0, 6.5]. True if all agree."""
    from kernel_lab.quant import fp8 as F

    points = np.float32([0, 0.25, 0.75, 1, 1.25, 1.75, 2, 2.5, 3.5, 4, 5, 6, 6.5]).view(np.uint32).astype(np.int64)
    near = (points[:, None] + np.arange(-reach, reach + 1)[None, :]).ravel()
    near = near[(near >= 0) & (near <= int(np.float32(6.5).view(np.uint32)))]
    rng = np.random.default_rng(3)
    u = np.concatenate([near, rng.integers(0, int(np.float32(6.5).view(np.uint32)) + 1, 1 << 22)]).astype(np.uint32)
    x = np.concatenate([u, u | np.uint32(0x80000000)]).view(np.float32)
    bad = int(np.sum(lean_code_model(x) != F.encode(x, F.E2M1)))
    print(f"lean_word's code (NumPy model) against fp8.encode: {x.size} float32 in [-6.5, 6.5], "
          f"every tie and edge +-{reach} ulps: {'all agree' if not bad else f'{bad} differ: WRONG'}")
    return not bad


# ================================================================================================
# offline SASS counts (--sass)

ALU = ("LOP3", "SHF", "IADD3", "LEA", "IMNMX", "VIMNMX", "ISETP", "SEL", "FSETP", "FSEL", "FMNMX", "PRMT",
       "FCHK", "I2FP", "IABS", "BMSK", "PLOP3")
FMA = ("FFMA", "FMUL", "FADD", "IMAD", "VIADD", "HFMA2")


def hot_path(sass: str):
    """Instructions up to the kernel's last EXIT, less the calls into the division's slow path: for
    each CALL, the instructions from the branch that jumps over it up to that branch's target."""
    rows = []
    for ln in sass.splitlines():
        hit = re.match(r"\s+/\*([0-9a-f]{4})\*/\s*(.*?)\s*;", ln)
        if hit and hit.group(2) != "NOP":
            rows.append((int(hit.group(1), 16), hit.group(2)))
    last = max(k for k, (_, i) in enumerate(rows) if i.endswith("EXIT") and not i.startswith("@"))
    body, cut = rows[: last + 1], set()
    for k, (_, i) in enumerate(body):
        if i.startswith("CALL"):
            j = k
            while "BRA" not in body[j][1]:
                j -= 1
            target = int(re.search(r"BRA\s+(?:`?\(?)?(0x[0-9a-f]+)", body[j][1]).group(1), 16)
            cut.update(e for e in range(j, len(body)) if body[e][0] < target)
    return [i for k, (_, i) in enumerate(body) if k not in cut]


def opcode(ins: str) -> str:
    op = re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]
    return op.split(".")[0]


def sass_counts() -> int:
    import numba.cuda.dispatcher as numba_dispatcher
    from kernel_lab.tensor_cores import offline
    from numba import types

    numba_dispatcher.get_current_device = lambda: offline._PretendDevice((9, 0))
    f32, u8, u32 = (types.Array(t, 1, "C") for t in (types.float32, types.uint8, types.uint32))
    sig = (f32, u8, u32, u8, f32)
    print("hot path of a whole block with normal scales; per value = a thread's count / (16 x blocks a thread)")
    print(f"{'kernel':<24} {'regs':>4} {'instr':>5} {'/value':>7} {'ALU-class':>9} {'FMA-class':>9} {'/byte':>6}")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kernel, bpt, _) in build(hot_only=True).items():
            ptx, _ = cuda.compile(kernel.py_func, sig, cc=(9, 0), output="ptx", device=False, abi="numba")
            p, c = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
            p.write_text(ptx)
            info = subprocess.run(["ptxas", "-arch=sm_90", "-O3", "-v", str(p), "-o", str(c)], check=True,
                                  capture_output=True, text=True).stderr
            regs = re.search(r"Used (\d+) registers", info).group(1)
            sass = subprocess.run(["cuobjdump", "-sass", str(c)], capture_output=True, text=True, check=True).stdout
            ins = hot_path(sass)
            ops = [opcode(i) for i in ins]
            values = 16 * bpt
            alu = sum(o in ALU for o in ops)
            fma = sum(o in FMA for o in ops)
            print(f"{name:<24} {regs:>4} {len(ins):>5} {len(ins) / values:7.1f} {alu / values:9.1f} "
                  f"{fma / values:9.1f} {len(ins) / values / 4.5625:6.2f}")
            hist = {}
            for o in ops:
                hist[o] = hist.get(o, 0) + 1
            print("    " + ", ".join(f"{o} {k}" for o, k in sorted(hist.items(), key=lambda t: -t[1])))
            if name != "package":  # each value's rounding is one FFMA by 2^22 (M's multiply folded in)
                rounded = sum(1 for i in ins if re.match(r"FFMA \S+, \S+, 4194304, \|", i))
                lost = rounded != values
                failed |= lost
                print(f"    values rounded in the SASS: {rounded} of {values}" + ("  <- code lost: WRONG" if lost else ""))
    print("budget on an H200 at 85% of 4.29 TB/s: about 42 issue slots a value, 21 of them on the ALU pipe")
    return 1 if failed else 0


# ================================================================================================


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", action="store_true", help="the checks only, in the simulator")
    p.add_argument("--sass", action="store_true", help="offline sm_90 SASS counts (no GPU)")
    p.add_argument("--model", action="store_true", help="lean_word's code in NumPy against fp8.encode (no GPU)")
    p.add_argument("--only", default="", help="only the variants whose name contains this text")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sass:
        if not args.child:
            missing = [t for t in ("ptxas", "cuobjdump") if shutil.which(t) is None]
            if missing:
                print(f"--sass needs {', '.join(missing)} on PATH (nvidia-cuda-cuobjdump; ptxas from a CUDA toolkit)")
                return 2
            from kernel_lab.tensor_cores.offline import stand_in_environment

            return subprocess.call([sys.executable, __file__, "--sass", "--child"], env=stand_in_environment())
        return sass_counts()

    if args.model:
        return 0 if check_code_model() else 1
    env = kl.setup(quiet=True)
    if env.simulator != args.sim:
        print("run with --sim under the simulator (NUMBA_ENABLE_CUDASIM=1), without it on a GPU")
        return 2
    from kernel_lab.quant import microscaling as mx

    vs = variants(args.only)
    failed = [name for name, launch in vs.items() if not check_variant(name, launch, 1000 if args.sim else 1 << 20)]
    if args.sim:
        print(f"{len(vs) - len(failed)} of {len(vs)} variants bit-exact" + (f"; WRONG: {failed}" if failed else ""))
        return 1 if failed else 0

    n = N_GPU
    host = mx.sample_data("activations", n, seed=1)
    x = cuda.to_device(host)
    amax_true = np.float32(np.max(np.abs(host)))
    refs = {}
    for a in (amax_true, np.float32(amax_true / 3)):
        pk = cuda.device_array((n + 1) // 2, np.uint8)
        sc = cuda.device_array(-(-n // 16), np.uint8)
        vs["package"](pk, sc, x, cuda.to_device(np.array([a], np.float32)))
        refs[float(a)] = (pk.copy_to_host(), sc.copy_to_host())
    for name, launch in vs.items():
        if name == "package":
            continue
        bad = sum(same_as_package(name, launch, refs[float(a)], x, a) for a in (amax_true, np.float32(amax_true / 3)))
        print(f"{name}: 2^26 activations (amax, amax / 3): {'same bytes as the package' if not bad else f'{bad} bytes differ: WRONG'}")
        if bad:
            failed.append(name)

    nbytes = 4 * n + n // 2 + n // 16  # the notebook's q_bytes["NVFP4"]
    packed = cuda.device_array((n + 1) // 2, np.uint8)
    scales = cuda.device_array(-(-n // 16), np.uint8)
    amax = cuda.to_device(np.array([amax_true], np.float32))
    results = {}
    for name, launch in vs.items():
        if name in failed:
            continue
        results[name] = kl.benchmark(f"NVFP4 quantize, {name}", lambda f=launch: f(packed, scales, x, amax),
                                     bytes=nbytes, inputs=(x,), quiet=True)
    base = results.get("package")
    for name, m in results.items():
        rel = f"{base.ms / m.ms:5.2f}x the package" if base else ""
        print(f"{name:<24} {m.ms * 1e3:7.1f} us  {100 * m.fraction:5.1f}% of the copy roofline  {rel}")
    if failed:
        print(f"WRONG (not timed): {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
