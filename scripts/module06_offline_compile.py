"""Compile module 06's block GEMM with learner-written device functions plugged in, without a GPU.

Proves that the plug points (``BlockGemm(load_a=..., load_b=...)``, ``epilogues.quantize(fn)``,
``epilogues.bias_activation_from(fn)``) still build for sm_90: code generation only needs the CPU
(see ``kernel_lab.tensor_cores.offline``). Needs nvmath-python with its cuBLASDx extra:

    /work/venv-dx/bin/python scripts/module06_offline_compile.py --kernels int4,im2col,async-plain-2,async-suggested-4,async-conv,async-conv-layer
"""

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _learner_functions():
    """Stand-ins for what a learner writes in 06.2 and 06.3 (the notebooks' solutions)."""
    import numpy as np
    from numba import cuda

    from kernel_lab.tensor_cores import epilogues

    mul_rn = epilogues.mul_rn()

    @cuda.jit(device=True)
    def unpack_int4(packed, kk, nn):
        byte = np.int32(packed[kk, nn >> 1])
        nib = (byte >> 4) & 15 if nn & 1 else byte & 15
        return nib - 16 if nib >= 8 else nib

    @cuda.jit(device=True)
    def quantize_value(acc, scale, zero_point):
        q = math.floor(mul_rn(float(acc), float(scale)) + 0.5) + zero_point
        return int(min(max(q, -128.0), 127.0))

    @cuda.jit(device=True)
    def im2col_load(x, gr, gc, geo):
        C, H, W, R, S, P, OH, OW = geo
        ow, oh, nimg = gr % OW, (gr // OW) % OH, gr // (OW * OH)
        s, r, c = gc % S, (gc // S) % R, gc // (S * R)
        ih, iw = oh + r - P, ow + s - P
        if 0 <= ih < H and 0 <= iw < W:
            return x[nimg, c, ih, iw]
        return 0

    @cuda.jit(device=True)
    def bias_gelu(value, bias):
        x = value + bias
        return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

    return unpack_int4, quantize_value, im2col_load, bias_gelu


def _learner_copies():
    """Stand-ins for 06.1's numbered steps and 06.3's gather: the notebooks' solutions
    (scripts/module06_solutions.py) and the package's reference positions."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import module06_solutions as sol

    return sol.make_issue_slice, sol.make_conv_issue, sol.positions()


def _compile(which: str, cc):
    from numba import types

    from kernel_lab.tensor_cores import epilogues, gemm, offline
    from kernel_lab.tensor_cores.configs import GemmConfig

    unpack_int4, quantize_value, im2col_load, bias_gelu = _learner_functions()
    geo = types.UniTuple(types.int32, 8)
    i32 = types.int32
    t0 = time.perf_counter()
    if which == "async-conv":  # 06.3's chunked implicit GEMM: A gathered from a channels-last image
        from kernel_lab.tensor_cores import async_gemm
        from kernel_lab.tensor_cores.validate import ConvGeometry

        _, make_conv_issue, positions = _learner_copies()
        g = ConvGeometry(n=32, c=64, h=56, w=56, r=3, s=3, padding=1)
        kern = async_gemm.AsyncConv(make_conv_issue(g, *positions["suggested"]), g, "suggested", 3)
        x4, f16, f32 = types.Array(types.float16, 4, "C"), types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C")
        bias = types.Array(types.float32, 1, "C")
        code = offline.compile_kernel(kern.dispatcher, (x4, f16, f32, bias, i32, i32, i32), cc)
        return f"{which}: {len(code)} bytes of LTO-IR for sm_{cc[0]}{cc[1]} in {time.perf_counter() - t0:.0f} s"
    if which == "async-conv-layer":  # the same, with 06.3's conv-layer store: bias, ReLU, float16 out
        from kernel_lab.tensor_cores import async_gemm
        from kernel_lab.tensor_cores.validate import ConvGeometry

        sys.path.insert(0, str(ROOT / "scripts"))
        from module06_solutions import make_conv_store

        _, make_conv_issue, positions = _learner_copies()
        g = ConvGeometry(n=32, c=64, h=56, w=56, r=3, s=3, padding=1)
        kern = async_gemm.AsyncConv(make_conv_issue(g, *positions["suggested"]), g, "suggested", 3,
                                    store_tile=make_conv_store())
        x4, f16 = types.Array(types.float16, 4, "C"), types.Array(types.float16, 2, "C")
        code = offline.compile_kernel(kern.dispatcher, (x4, f16, f16, types.Array(types.float32, 1, "C"), i32, i32, i32),
                                      cc)
        return f"{which}: {len(code)} bytes of LTO-IR for sm_{cc[0]}{cc[1]} in {time.perf_counter() - t0:.0f} s"
    if which.startswith("async"):  # 06.1's numbered steps: "async-plain-2", "async-suggested-3", ...
        from kernel_lab.tensor_cores import async_gemm

        _, layout, stages = which.split("-")
        make_issue_slice, _, positions = _learner_copies()
        kern = async_gemm.AsyncGemm(make_issue_slice(*positions[layout]), layout, int(stages))
        f16, f32 = types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C")
        code = offline.compile_kernel(kern.dispatcher, (f16, f16, f32, types.Array(types.float32, 1, "C"), i32, i32, i32),
                                      cc)
        return f"{which}: {len(code)} bytes of LTO-IR for sm_{cc[0]}{cc[1]} in {time.perf_counter() - t0:.0f} s"
    if which == "int4":  # the learner's int4 unpacking and quantizing epilogue on an int8 block GEMM
        kern = gemm.BlockGemm(GemmConfig(128, 128, 64, 256, "int4"), epilogues.quantize(quantize_value),
                              load_b=unpack_int4)
        sig = (types.Array(types.int8, 3, "C"), types.Array(types.uint8, 3, "C"), types.Array(types.int8, 3, "C"),
               i32, i32, i32, geo, types.Tuple((types.float64, types.int64)))
    else:  # the learner's implicit-GEMM gather and bias + GELU on an fp16 block GEMM
        kern = gemm.BlockGemm(GemmConfig(128, 128, 32, 256, "float16"), epilogues.bias_activation_from(bias_gelu),
                              operand_a="im2col", load_a=im2col_load)
        sig = (types.Array(types.uint16, 4, "C"), types.Array(types.uint16, 3, "C"),
               types.Array(types.float32, 3, "C"), i32, i32, i32, geo,
               types.Tuple((types.Array(types.float32, 1, "C"),)))
    code = offline.compile_kernel(kern.dispatcher, sig, cc)
    return f"{which}: {len(code)} bytes of LTO-IR for sm_{cc[0]}{cc[1]} in {time.perf_counter() - t0:.0f} s"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", default="int4,im2col")
    p.add_argument("--cc", default="9.0")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.child:  # the stand-in driver must be on the library path when Python starts
        sys.path.insert(0, str(ROOT / "utilities"))
        from kernel_lab.tensor_cores.offline import stand_in_environment

        env = stand_in_environment()
        sys.exit(subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=env))
    sys.path.insert(0, str(ROOT / "utilities"))
    import kernel_lab  # noqa: F401  (GPU target: NUMBA_ENABLE_CUDASIM=0 set by the wrapper)
    from kernel_lab.tensor_cores import codegen_cache, offline

    cc = tuple(int(x) for x in args.cc.split("."))
    offline.pretend_gpu(cc)
    codegen_cache.enable()
    failed = 0
    for which in args.kernels.split(","):
        try:
            print(_compile(which, cc), flush=True)
        except Exception as exc:  # noqa: BLE001
            failed += 1
            print(f"FAILED {which}: {type(exc).__name__}: {exc}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
