"""Probe: can a float16 LayerNorm + GELU reach 85% of the copy roofline on an H200 at N = 4096 and 8192?

    PYTHONPATH=utilities python3 scripts/probes/layernorm_f16_long_rows.py            # GPU: checks, then times
    PYTHONPATH=utilities NUMBA_ENABLE_CUDASIM=1 python3 scripts/probes/layernorm_f16_long_rows.py --sim
    PATH=<folder with cuobjdump>:$PATH PYTHONPATH=utilities /tmp/nvenv/bin/python \\
        scripts/probes/layernorm_f16_long_rows.py --sass                             # no GPU: SASS counts

The question: 03.3's package kernel (``launch_layernorm_gelu``: a block per row sized to leave 16
values a thread, x4 accesses, two-pass statistics, gamma and beta late) reaches 83.4% of the copy
roofline at N = 4096 and 76.8% at 8192 on an H200 for float16 rows (float32: 94%+). At the H200's
4.3-4.8 TB/s a float16 value (2 bytes read, 2 written) leaves about 30 thread-instructions a value
at the roofline (132 SMs x 128 a clock x 1.98 GHz over 4 bytes a value), and the package kernel
issues about 25 (offline SASS, ``--sass``; h200_memory_bound_ncu.py measured 24.6 with Nsight Compute
and found it issue-bound at 74% of issue slots). The variants cut instructions a value:

  x8                 rows of exactly TEAM x 16 values (one compile per row length: no clamps, no
                     bounds tests, 1/N a constant), 16-byte accesses of x and y (eight halves,
                     ``load8``/``store8`` below: four 32-bit words of two halves each), GELU in float32
                     as the package's (``gelu_fast``). 256 threads a row at 4096, 512 at 8192.
  x8, f16x2 GELU     the same; the normalisation and affine stay float32, then GELU runs on pairs of
                     halves (``mul``/``fma.rn.f16x2``, ``tanh.approx.f16x2``): 4.5 instructions a value
                     where float32 takes 6.5 with the pack (ptxas splits the f16x2 tanh into two
                     ``MUFU.TANH.F16`` and a ``PRMT``, so the pair costs 9, not the 5 the PTX suggests).
  x8, 32/thread      32 values a thread, float32 GELU: half the threads a row (128 at 4096, 256 at
                     8192), so the two block reductions (shuffles, barrier, shared-memory sums) weigh
                     half as much a value.
  x8, f16x2 GELU, 32/thread      both.
  x8, f16x2 GELU, 2 rows/block   16 values a thread of each of two rows (the same columns): gamma and
                     beta loaded once for both rows, both rows' sums reduced behind one barrier.

The statistics are the package's two passes over registers (sum, then squared deviations about the
mean) in float32 in every variant: no cancellation. Each variant is checked with
``check_layernorm_gelu`` (float16) on rows of the lengths it is compiled for (an odd row count, so
that the second row of the last block of the 2-rows variant is past the end), then timed with
``kl.benchmark`` at 2^25 values per size beside the package kernel and PyTorch (LayerNorm then GELU).
``--sim``: the checks only, in the simulator, at rows of one and two warps' teams. ``--sass``:
compiles every variant and the package kernel for sm_90 on this machine (Numba's real target with a
stand-in driver, ``ptxas``, ``cuobjdump -sass``) and prints instructions a value (static count up to
the last EXIT less NOPs, over a thread's values; both sides of a branch count).

Offline (ptxas 13.0, sm_90, 2026-11-29, ``--sass``), SASS instructions a value, N = 4096 / 8192:
package kernel 25.3 / 26.6 (40 registers); x8 20.0 / 21.2 (43-44); x8 f16x2 GELU 18.1 / 19.3 (44-48);
x8 32/thread 16.6 / 16.9 (64); x8 f16x2 GELU 32/thread 14.6 / 14.9 (64); 2 rows/block 17.9 / 19.1
(64); no spills. Of the 32/thread f16x2 kernel's 14.6, 10.5 are the per-value arithmetic (convert,
sum, deviation and its square, normalise, affine: 6; GELU with the pack: 4.5); the rest are the two
reductions, gamma and beta's loads and the addresses. All variants pass the float16 check in the
simulator (``--sim``).

H200 (2026-11-29, float16, 2^25 values, % of the copy roofline, N = 4096 / 8192): package kernel
82.9 / 76.3; x8 79.7 / 66.4; x8 f16x2 GELU 79.5 / 66.0; x8 32/thread 86.1 / 82.8; x8 f16x2 GELU
32/thread 85.5 / 83.1; x8 f16x2 GELU 2 rows/block 89.7 / 82.3; PyTorch 33.1 / 30.6. Every variant
passed the float16 check at full size. 16-byte accesses alone were slower than the package kernel;
with 32 values a thread they were faster at both lengths. 03.3's exercise 7 is the "x8, 32/thread"
form (its own run: 87.5% / 84.0%).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true", help="the checks only, in the simulator (NUMBA_ENABLE_CUDASIM=1)")
ap.add_argument("--sass", action="store_true", help="no GPU: compile for sm_90 and count SASS instructions a value")
ap.add_argument("--json", help="write the GPU measurements here")
ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
args = ap.parse_args()

if args.sass and not args.child:  # re-run with Numba's real target and the stand-in driver (no GPU here)
    missing = [t for t in ("ptxas", "cuobjdump") if shutil.which(t) is None]
    if missing:
        sys.exit(f"--sass needs {', '.join(missing)} on PATH (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    sys.path.insert(0, str(ROOT / "utilities"))
    from kernel_lab.tensor_cores.offline import stand_in_environment

    sys.exit(subprocess.call([sys.executable, __file__, "--sass", "--child"], env=stand_in_environment()))

import kernel_lab as kl  # noqa: E402

if args.sass:
    import numba.cuda.dispatcher as numba_dispatcher

    from kernel_lab.tensor_cores import offline

    numba_dispatcher.get_current_device = lambda: offline._PretendDevice((9, 0))
    env = None
else:
    env = kl.setup(quiet=True)
    if env.simulator != args.sim:
        sys.exit("run with --sim under the simulator, without it on a GPU")

from numba import cuda, float32, uint64  # noqa: E402

from kernel_lab.environment import on_simulator  # noqa: E402
from kernel_lab.fusion import layernorm as ln  # noqa: E402
from kernel_lab.vector_loads import load4  # noqa: E402

GELU_C = math.sqrt(2.0 / math.pi)
H_HALF, H_C, H_C3 = (int(np.float16(v).view(np.uint16)) * 0x10001 for v in (0.5, GELU_C, GELU_C * 0.044715))

# --- eight halves per access, and pairs of halves in 32-bit words ----------------------------------
# load8(x, (row, col)) -> four uint32 words, each two neighbouring halves (col: a multiple of 8);
# store8(y, (row, col), w0, w1, w2, w3); unpack2(w) -> (float32, float32); pack2(a, b) -> word
# (round to nearest); gelu2(w) -> word: GELU's tanh form on both halves in f16x2 arithmetic.

if on_simulator():
    def _word(lo, hi):
        return int(np.float16(lo).view(np.uint16)) | (int(np.float16(hi).view(np.uint16)) << 16)

    def _halves(w):
        return np.uint16(int(w) & 0xFFFF).view(np.float16), np.uint16(int(w) >> 16).view(np.float16)

    def load8(arr, idx):
        row, col = int(idx[0]), int(idx[1])
        assert col % 8 == 0 and col + 8 <= arr.shape[1], f"load8 at column {col}"
        return tuple(_word(arr[row, col + 2 * k], arr[row, col + 2 * k + 1]) for k in range(4))

    def store8(arr, idx, w0, w1, w2, w3):
        row, col = int(idx[0]), int(idx[1])
        assert col % 8 == 0 and col + 8 <= arr.shape[1], f"store8 at column {col}"
        for k, w in enumerate((w0, w1, w2, w3)):
            arr[row, col + 2 * k], arr[row, col + 2 * k + 1] = _halves(w)

    def unpack2(w):
        lo, hi = _halves(w)
        return float32(lo), float32(hi)

    def pack2(a, b):
        return _word(a, b)

    def gelu2(w):
        out = []
        with np.errstate(over="ignore", invalid="ignore"):
            for v in _halves(w):  # every step rounded to float16, as f16x2 arithmetic does
                h = np.float16(0.5) * v
                p = np.float16(np.float16(GELU_C * 0.044715) * (v * v) + np.float16(GELU_C))
                out.append(h * np.float16(math.tanh(np.float32(v * p))) + h)
        return _word(*out)
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    from kernel_lab.vector_loads import _get_element_pointer

    I32, V4 = ir.IntType(32), ir.VectorType(ir.IntType(32), 4)
    H2 = ir.VectorType(ir.HalfType(), 2)

    @intrinsic
    def load8(typingctx, array, index):
        def codegen(context, builder, signature, args):
            ptr = _get_element_pointer(context, builder, signature.args[1], args[1], signature.args[0], args[0])
            vec = builder.load(builder.bitcast(ptr, V4.as_pointer()), align=16)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_element(vec, ir.Constant(I32, k)) for k in range(4)])
        return types.UniTuple(types.uint32, 4)(array, index), codegen

    @intrinsic
    def store8(typingctx, array, index, w0, w1, w2, w3):
        def codegen(context, builder, signature, args):
            ptr = _get_element_pointer(context, builder, signature.args[1], args[1], signature.args[0], args[0])
            vec = ir.Constant(V4, ir.Undefined)
            for k, w in enumerate(args[2:]):
                vec = builder.insert_element(vec, w, ir.Constant(I32, k))
            builder.store(vec, builder.bitcast(ptr, V4.as_pointer()), align=16)
            return context.get_dummy_value()
        return types.void(array, index, types.uint32, types.uint32, types.uint32, types.uint32), codegen

    @intrinsic
    def unpack2(typingctx, w):
        def codegen(context, builder, signature, args):
            h2 = builder.bitcast(args[0], H2)
            f = [builder.fpext(builder.extract_element(h2, ir.Constant(I32, k)), ir.FloatType()) for k in range(2)]
            return context.make_tuple(builder, signature.return_type, f)
        return types.UniTuple(types.float32, 2)(types.uint32), codegen

    @intrinsic
    def pack2(typingctx, a, b):
        def codegen(context, builder, signature, args):
            vec = ir.Constant(H2, ir.Undefined)
            for k, v in enumerate(args):
                vec = builder.insert_element(vec, builder.fptrunc(v, ir.HalfType()), ir.Constant(I32, k))
            return builder.bitcast(vec, I32)
        return types.uint32(types.float32, types.float32), codegen

    _GELU2 = ("{.reg .b32 c0, c1, c3, h, q, p, u, t;\n"
              f"mov.b32 c0, {H_HALF:#010x};\nmov.b32 c1, {H_C:#010x};\nmov.b32 c3, {H_C3:#010x};\n"
              "mul.rn.f16x2 h, $1, c0;\n"
              "mul.rn.f16x2 q, $1, $1;\n"
              "fma.rn.f16x2 p, q, c3, c1;\n"
              "mul.rn.f16x2 u, $1, p;\n"
              "tanh.approx.f16x2 t, u;\n"
              "fma.rn.f16x2 $0, h, t, h;}")

    @intrinsic
    def gelu2(typingctx, w):
        def codegen(context, builder, signature, args):
            return builder.asm(ir.FunctionType(I32, [I32]), _GELU2, "=r,r", [args[0]], side_effect=False)
        return types.uint32(types.uint32), codegen


@cuda.jit(device=True, inline="always")
def gelu_pair_f32(a, b):
    """Two float32 values through GELU in float32 (the package's ``gelu_fast``), packed into a word."""
    return pack2(ln.gelu_fast(a), ln.gelu_fast(b))


@cuda.jit(device=True, inline="always")
def gelu_pair_f16x2(a, b):
    """Two float32 values rounded to halves, then GELU on the pair in f16x2."""
    return gelu2(pack2(a, b))


@functools.cache
def make_kernel(TEAM, GROUPS, ROWS, HALF):
    """Rows of exactly ``TEAM * GROUPS * 8`` halves; ``TEAM`` threads (a multiple of 32: a block), each
    holding ``GROUPS`` groups of eight neighbouring values of each of ``ROWS`` rows (the same columns):
    thread t's groups start at columns 8 (t + TEAM j). ``HALF``: GELU in f16x2."""
    N, WARPS, PER, SIZE = TEAM * GROUPS * 8, TEAM // 32, GROUPS * 8, ROWS * GROUPS * 8
    INV_N = float32(1.0 / N)
    GELU_PAIR = gelu_pair_f16x2 if HALF else gelu_pair_f32

    @cuda.jit(device=True, inline="always")
    def team_sums(s, part, p, lane, warp):
        """Each of the ROWS sums in ``s`` over the team, in place, in every thread (one barrier for all)."""
        for off in (16, 8, 4, 2, 1):
            for r in range(ROWS):
                s[r] += cuda.shfl_xor_sync(0xFFFFFFFF, s[r], off)
        if WARPS > 1:  # the warps' sums meet in shared memory
            if lane == uint64(0):
                for r in range(ROWS):
                    part[p, r, warp] = s[r]
            cuda.syncthreads()
            for r in range(ROWS):
                acc = float32(0)
                for w in range(WARPS):
                    acc += part[p, r, w]
                s[r] = acc

    @cuda.jit(fastmath=True)
    def layernorm_gelu_f16(x, gamma, beta, y, mean_out, rstd_out, eps):
        part = cuda.shared.array((2, ROWS, WARPS), float32)
        v = cuda.local.array(SIZE, float32)
        s = cuda.local.array(ROWS, float32)
        mean = cuda.local.array(ROWS, float32)
        rstd = cuda.local.array(ROWS, float32)
        t = uint64(cuda.threadIdx.x)
        lane, warp = t & uint64(31), t >> uint64(5)
        nrows = uint64(x.shape[0])
        first = uint64(cuda.blockIdx.x) * uint64(ROWS)
        for r in range(ROWS):  # every load first; a row past the end (ROWS > 1) reads the last row, stores nothing
            row = min(first + uint64(r), nrows - uint64(1))
            for j in range(GROUPS):
                w0, w1, w2, w3 = load8(x, (row, uint64(8) * (t + uint64(TEAM * j))))
                k = r * PER + 8 * j
                v[k], v[k + 1] = unpack2(w0)
                v[k + 2], v[k + 3] = unpack2(w1)
                v[k + 4], v[k + 5] = unpack2(w2)
                v[k + 6], v[k + 7] = unpack2(w3)
        for r in range(ROWS):  # two passes over the registers: the sums, then the squared deviations
            acc = float32(0)
            for i in range(PER):
                acc += v[r * PER + i]
            s[r] = acc
        team_sums(s, part, 0, lane, warp)
        for r in range(ROWS):
            mean[r] = s[r] * INV_N
            acc = float32(0)
            for i in range(PER):
                d = v[r * PER + i] - mean[r]
                acc += d * d
            s[r] = acc
        team_sums(s, part, 1, lane, warp)
        for r in range(ROWS):
            rstd[r] = float32(1) / math.sqrt(s[r] * INV_N + eps)
        if t == uint64(0):
            for r in range(ROWS):
                if first + uint64(r) < nrows:
                    mean_out[first + uint64(r)] = mean[r]
                    rstd_out[first + uint64(r)] = rstd[r]
        for j in range(GROUPS):
            col = uint64(8) * (t + uint64(TEAM * j))
            g0, g1, g2, g3 = load4(gamma, col)
            g4, g5, g6, g7 = load4(gamma, col + uint64(4))
            b0, b1, b2, b3 = load4(beta, col)
            b4, b5, b6, b7 = load4(beta, col + uint64(4))
            for r in range(ROWS):
                if ROWS == 1 or first + uint64(r) < nrows:
                    k = r * PER + 8 * j
                    a, sh = rstd[r], -mean[r] * rstd[r]
                    store8(y, (first + uint64(r), col),
                           GELU_PAIR((v[k] * a + sh) * g0 + b0, (v[k + 1] * a + sh) * g1 + b1),
                           GELU_PAIR((v[k + 2] * a + sh) * g2 + b2, (v[k + 3] * a + sh) * g3 + b3),
                           GELU_PAIR((v[k + 4] * a + sh) * g4 + b4, (v[k + 5] * a + sh) * g5 + b5),
                           GELU_PAIR((v[k + 6] * a + sh) * g6 + b6, (v[k + 7] * a + sh) * g7 + b7))
    return layernorm_gelu_f16


# name: (values a thread of each row, rows a block, GELU in f16x2)
VARIANTS = {"x8": (16, 1, False), "x8, f16x2 GELU": (16, 1, True), "x8, 32/thread": (32, 1, False),
            "x8, f16x2 GELU, 32/thread": (32, 1, True), "x8, f16x2 GELU, 2 rows/block": (16, 2, True)}


def shape_of(n, per, rows):
    """(TEAM, GROUPS) for rows of ``n`` at ``per`` values a thread."""
    team = n // per
    if n % (8 * team) or per % 8 or team % 32 or not 32 <= team <= 1024:
        raise ValueError(f"rows of {n} do not split into teams of whole warps holding {per} values each")
    return team, per // 8


def launcher(per, rows, half):
    def launch(y, mean, rstd, x, gamma, beta):
        team, groups = shape_of(x.shape[1], per, rows)
        make_kernel(team, groups, rows, half)[-(-x.shape[0] // rows), team](x, gamma, beta, y, mean, rstd,
                                                                             float32(ln.EPS))
    return launch


def sass_counts():
    from numba import types

    h2, f1 = types.Array(types.float16, 2, "C"), types.Array(types.float32, 1, "C")
    sig = (h2, f1, f1, h2, f1, f1, types.float32)

    def count(kernel, label):
        ptx, _ = cuda.compile(kernel.py_func, sig, cc=(9, 0), output="ptx", device=False, abi="numba",
                              fastmath=True)  # the kernels are jitted with fastmath; py_func does not carry it
        with tempfile.TemporaryDirectory() as tmp:
            p, c = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
            p.write_text(ptx)
            run = subprocess.run(["ptxas", "-arch=sm_90", "-O3", "-v", str(p), "-o", str(c)], check=True,
                                 capture_output=True, text=True)
            regs = re.search(r"Used (\d+) registers", run.stderr).group(1)
            spill = "spill" if re.search(r"[1-9]\d* bytes spill", run.stderr) else "no spills"
            sass = subprocess.run(["cuobjdump", "-sass", str(c)], capture_output=True, text=True, check=True).stdout
        if os.environ.get("LN_SASS_DIR"):  # keep the listings to read
            name = re.sub(r"\W+", "_", label)
            Path(os.environ["LN_SASS_DIR"], f"{name}.sass").write_text(sass)
        ins = [re.sub(r"\s*;.*", "", re.sub(r"^\s*/\*[0-9a-f]{4}\*/\s*", "", ln)).strip()
               for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", ln)]
        ins = [i for i in ins if not i.startswith("NOP")]
        last = max(k for k, i in enumerate(ins) if i.endswith("EXIT") and not i.startswith("@"))
        return last + 1, regs, spill

    for n in (4096, 8192):
        team = ln.team_threads(n, 16)
        pkg = ln.make_team_kernel(team, ln.values_per_lane(n, 4 * team), 4, ln.gelu_fast, ln.make_team_row(team),
                                  ln.make_team_sum(team))
        total, regs, spill = count(pkg, f"{n} package")
        per = ln.values_per_lane(n, team)
        print(f"N = {n}  package kernel ({team} threads){'':<17} {total:4d} instructions / {per:2d} values = "
              f"{total / per:5.1f} a value ({regs} registers, {spill})")
        for name, (per, rows, half) in VARIANTS.items():
            team, groups = shape_of(n, per, rows)
            total, regs, spill = count(make_kernel(team, groups, rows, half), f"{n} {name}")
            label = f"{name} ({team} threads)"
            print(f"N = {n}  {label:<42} {total:4d} instructions / {per * rows:2d} values = "
                  f"{total / (per * rows):5.1f} a value ({regs} registers, {spill})")


if args.sass:
    sass_counts()
    sys.exit(0)

from kernel_lab.check import CheckFailed  # noqa: E402
from kernel_lab.checks import fusion as checks  # noqa: E402

# the checks: rows of the lengths each variant is compiled for, an odd number of them; a variant that
# fails is reported and left out of the timings
wrong = []
for name, (per, rows, half) in VARIANTS.items():
    ns = (32 * per, 64 * per) if args.sim else (4096, 8192)
    shapes = [(f"rows of {n}", (3 if args.sim else 37, n)) for n in ns]
    try:
        checks.check_layernorm_gelu(launcher(per, rows, half), dtype="float16", name=name, shapes=shapes,
                                    max_n=max(ns))
    except CheckFailed as exc:
        print(f"{name}: WRONG: {exc}", flush=True)
        wrong.append(name)
if args.sim:
    sys.exit(1 if wrong else 0)

try:
    import torch
except ImportError:
    torch = None

rng = np.random.default_rng(0)
out = []
for n in (4096, 8192):
    rows_ = ln.sweep_rows(n)
    x, gamma, beta, y, mean, rstd = ln.sweep_arrays(n, np.float16, rng)
    nbytes = ln.bytes_moved(rows_, n, 2)
    arrays = (y, mean, rstd, x, gamma, beta)
    runs = {"package kernel": functools.partial(ln.launch_layernorm_gelu, *arrays)}
    for name, (per, rows, half) in VARIANTS.items():
        if name not in wrong:
            runs[name] = functools.partial(launcher(per, rows, half), *arrays)
    res = {name: kl.benchmark(name, fn, bytes=nbytes, inputs=(x,), quiet=True) for name, fn in runs.items()}
    if torch is not None:
        res["PyTorch LayerNorm, GELU"] = kl.benchmark("torch", ln.torch_unfused(torch, x, gamma, beta), bytes=nbytes,
                                                      quiet=True)
    base, peer = res["package kernel"], res.get("PyTorch LayerNorm, GELU")
    for name, m in res.items():
        line = (f"float16 {rows_}x{n:<5} {name:<32} {m.ms * 1e3:8.1f} us {100 * m.fraction:6.1f}% copy  "
                f"{base.ms / m.ms:5.2f}x package")
        if peer is not None:
            line += f"  {peer.ms / m.ms:5.2f}x PyTorch"
        print(line, flush=True)
        out.append({"n": n, "rows": rows_, "kernel": name, "us": m.ms * 1e3, "fraction": m.fraction})
if args.json:
    with open(args.json, "w") as f:
        json.dump({"gpu": kl.gpu_info().name, "rows": out}, f, indent=1)
