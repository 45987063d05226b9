"""Probe (notebook 05.4): can the NVFP4 quantizer reach 85% of the copy roofline on an H200?

    PYTHONPATH=utilities python3 scripts/probes/nvfp4_quantize_variants.py            # GPU: check, then time
    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=utilities python3 scripts/probes/nvfp4_quantize_variants.py --sim
    python3 scripts/probes/nvfp4_quantize_variants.py --sass    # no GPU: offline sm_90 SASS counts

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
  and no quotient overflows); the code by the float adder alone: ``M = 2^(e + 22)`` with ``e`` the
  exponent of ``max(|q|, 1)`` (one LOP3 and one integer max on the bits, then a multiply), ``g = (|q|
  + M) - M`` is ``|q|`` rounded to E2M1's step in its binade (0.5, 1 or 2), to nearest, ties to even
  (``M / step = 2^23`` is even), exactly; ``g * 2^-126`` (exact, a subnormal for g = 0.5) has the
  E2M1 code in bits 22-24 and zeros elsewhere, so one shift-and-add puts it in the word; the sign
  bit of ``x`` goes in with a shift and a mask. Every other block (partial, tiny, saturated scales,
  infinities) takes the package's code unchanged, so outputs are the package's bit for bit.
  Its hot path (``--sass``): 16.6 instructions a value, 8.4 of them ALU kinds, 6.3 FMA kinds (ptxas
  folds ``M``'s multiply into the two adds as exact FFMAs). A NumPy model of the rounding agrees
  with ``fp8.encode`` on 21 million float32 in [0, 6.5] of both signs, every tie and its 50
  neighbours each side included.
* ``lean x2``: two blocks a thread (a block of threads apart, all eight 16-byte loads first): 128
  bytes in flight a thread, the tensor scale and its reciprocal once for two blocks (16.2 a value,
  8.5 ALU kinds; 60 registers with its fallback, 40 for ``lean``, 39 for the package's).
* ``lean x1, 128 threads``: the lean kernel in blocks of 128 threads.

NaN inputs are outside every kernel's contract here, the package's included: its block amax
(``max``, FMNMX) skips a NaN where the NumPy reference's propagates it. The checks are the
notebook's (``check_nvfp4_quantize``: every E2M1 tie, reciprocal ties for every E4M3 scale, tiny
tensors, partial blocks, -0) and two more against the NumPy reference: an amax a third of the true
one (saturated scales, quotients far above 6) and blocks from 2^-140 to 2^120.

On a GPU: each variant's check, then its output on the notebook's 2^26 activations (and with a
third of their amax) compared with the package's bit for bit, then ``kl.benchmark`` at 2^26 values
(4.5625 bytes a value) beside the package's. Under ``--sim`` the checks only, at the simulator's
sizes. ``--only TEXT`` keeps the variants whose name contains TEXT.

Prediction: with the ALU pipe at about 40% of what it was, every lean variant is held by memory:
85-95% of the copy roofline (the dequantizers, a lookup and a multiply a value, measured 86-91%),
1.15-1.30x the package. If it is not, Nsight's pipe metrics (sm__inst_executed_pipe_alu,
sm__pipe_alu_cycles_active, sm__pipe_fma_cycles_active) and the L1 wavefronts of the 64-byte-strided
16-byte loads are the next things to read.

Result: not yet measured on a GPU (written 2026-11-29 from the offline counts above).
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
    TO_CODE = float32(2.0 ** -126)  # E2M1's exponent bias 1 onto float32's 127: bits 22-24 = the code

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
        """Eight codes (values 8h .. 8h + 7 of the block) as one word, on the fast path."""
        w = uint32(0)
        for j in range(8):
            xv = v[8 * h + j]
            q0 = xv * r
            q = cuda.fma(cuda.fma(-denom, q0, xv), r, q0)  # exactly rounded x / denom (Markstein)
            e = max(float_bits(q) & uint32(0x7F800000), uint32(0x3F800000))  # 2^e, e of max(|q|, 1)
            big = bits_float(e) * MAGIC_UNIT
            y = ((abs(q) + big) - big) * TO_CODE  # |q| on E2M1's grid, to nearest even; bits = code << 22
            cb = float_bits(y)
            if j <= 5:  # '+', not '|': the fields are disjoint, and an add takes the shift with it (LEA.HI)
                w += cb >> uint32(22 - 4 * j)
            else:
                w += cb << uint32(4 * j - 22)
            w |= (float_bits(xv) >> uint32(28 - 4 * j)) & uint32(8 << (4 * j))  # x's sign bit: bit 4j + 3
        return w

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
    print("budget on an H200 at 85% of 4.29 TB/s: about 42 issue slots a value, 21 of them on the ALU pipe")
    return 0


# ================================================================================================


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", action="store_true", help="the checks only, in the simulator")
    p.add_argument("--sass", action="store_true", help="offline sm_90 SASS counts (no GPU)")
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
