"""Compile module 05's integer kernels to PTX for sm_90 without a GPU (typing needs only the CPU).

The simulator runs kernels as Python and cannot see what the GPU compiler refuses (a loop over a
tuple of shuffle offsets, a type that does not unify). This script compiles every kernel of
``kernel_lab.quant``'s ``int8``, ``int4``, ``ternary``, ``int8_gemm``, ``w4a8`` and ``w4a8_mma`` with
Numba's GPU target and reports which kernels carry DP4A and PRMT as inline PTX (``ptxas -v`` on the
PTX then shows registers and spills, ``cuobjdump -sass`` the ``IDP.4A`` instructions). Run it
through itself:
it re-executes with the stand-in driver library and ``NUMBA_ENABLE_CUDASIM=0``::

    python scripts/module05_offline_compile.py

NVRTC/NVVM must be findable (a CUDA toolkit, or the nvidia-*-cu13 wheels; set CUDA_HOME).
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _compile_all(cc=(9, 0)):
    sys.path.insert(0, str(ROOT / "utilities"))
    import kernel_lab  # noqa: F401  (GPU target: NUMBA_ENABLE_CUDASIM=0 set by the wrapper)
    import numba.cuda.dispatcher as numba_dispatcher
    from numba import cuda, types

    from kernel_lab.tensor_cores import offline

    numba_dispatcher.get_current_device = lambda: offline._PretendDevice(cc)
    from kernel_lab.quant import int8 as I8
    from kernel_lab.quant import ternary
    from kernel_lab.quant import int8_gemm
    from kernel_lab.quant import w4a8
    from kernel_lab.quant import int4 as I4
    from kernel_lab.quant import w4a8_mma

    arr = {name: types.Array(getattr(types, name.split("_")[0]), int(name[-1]), "C")
           for name in ("float32_1", "float32_2", "float64_1", "int8_1", "int8_2", "uint8_2", "uint16_2", "int32_1",
                        "int32_2")}
    f32v, f32m, f64v = arr["float32_1"], arr["float32_2"], arr["float64_1"]
    i8v, i8m, u8m, i32v, i32m = arr["int8_1"], arr["int8_2"], arr["uint8_2"], arr["int32_1"], arr["int32_2"]
    u16m = arr["uint16_2"]
    u32v, u32m = types.Array(types.uint32, 1, "C"), types.Array(types.uint32, 2, "C")
    kernels = {
        "int8_quantize": (I8.int8_quantize, (f32v, f32v, i8v, f32v)),
        "int8_dequantize": (I8.int8_dequantize, (i8v, f32v, f32v)),
        "int8_quantize_x4": (I8.int8_quantize_x4, (f32v, f32v, i8v, i32v, f32v)),
        "int8_quantize_x4_fadd": (I8.int8_quantize_x4_fadd, (f32v, f32v, i8v, i32v, f32v)),
        "int8_dequantize_x4": (I8.int8_dequantize_x4, (i8v, i32v, f32v, f32v)),
        "affine_quantize_rows": (I8.affine_quantize_rows, (f32m, f32v, f32v, u8m, f32v, i32v)),
        "int4_quantize_groups": (I4.int4_quantize_groups, (f32m, u8m, f32m)),
        "int4_dequantize": (I4.int4_dequantize, (u8m, f32m, f32m)),
        "int4_quantize_rows_x4": (I4.int4_quantize_rows_x4, (f32m, u8m, u16m, f32m)),
        "int4_quantize_rows_u64": (I4.int4_quantize_rows_u64, (f32m, u8m, u16m, f32m)),
        "int4_quantize_rows_x8": (I4.int4_quantize_rows_x8, (f32m, u8m, u16m, f32m)),
        "int4_dequantize_tile4": (I4.int4_dequantize_tile4, (u8m, u16m, f32m, f32m)),
        "abs_sum": (ternary.abs_sum, (f32v, f64v)),
        "ternary_quantize_pack": (ternary.ternary_quantize_pack, (f32m, f64v, u8m, f32v)),
        "int8_rows_quantize": (ternary.int8_rows_quantize, (f32m, i8m, f32v)),
        "ternary_gemm": (ternary.ternary_gemm, (i8m, f32v, u8m, f32v, f32m)),
        "ternary_gemm_dp4a": (ternary.ternary_gemm_dp4a, (i32m, f32v, u8m, f32v, f32m, i32v)),
        "ternary_gemm_rows4": (ternary.ternary_gemm_rows4, (i32m, f32v, u32m, f32v, f32m, i32v)),
        "abs_sum_x4": (ternary.abs_sum_x4, (f32v, f64v)),
        "ternary_pack_x16": (ternary.ternary_pack_x16, (f32v, f64v, u32v, f32v)),
        "int8_gemm_dp4a": (int8_gemm.int8_gemm_dp4a, (i32m, i32m, i32m)),
        "dp4a_gemm tiled": (int8_gemm.launch_dp4a_gemm.kernel, (i32m, i32m, i32m)),
        "w4a8_gemm": (w4a8.w4a8_gemm, (i32m, f32v, i32m, f32m, f32m)),
    }
    w4a8_args = (i32m, f32v, i32m, f32m, f32m)
    # the tensor-core W4A8's tiles at decode shapes, for a GPU of 132 SMs (H100, H200: no GPU to ask here)
    for m, n in ((1, 14336), (16, 14336), (64, 14336), (64, 8192), (16, 8192), (64, 4096)):
        p = w4a8_mma.choose(m, n, sms=132)
        form = p.get("form", "direct")
        kernels[f"w4a8_mma {form} M={m} N={n}"] = (w4a8_mma.FORMS[form](p["NT"], p["MTILES"], p["WR"], p["WK"]),
                                                    w4a8_args)
    failed = 0
    for name, (kern, sig) in kernels.items():
        try:
            ptx, _ = cuda.compile(kern.py_func, sig, cc=cc, output="ptx")
        except Exception as exc:  # noqa: BLE001 - report every kernel, then fail
            failed += 1
            print(f"{name}: FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            continue
        calls = [s for s in ("dp4a.s32.s32", "prmt.b32", "mma.sync.aligned.m16n8k32") if s in ptx]
        # a local array indexed by a value the compiler cannot resolve stays in local memory (the stack)
        stack = "; LOCAL MEMORY (a local array is indexed dynamically)" if "__local_depot" in ptx else ""
        print(f"{name}: compiles for sm_{cc[0]}{cc[1]}" + (f" (PTX has {', '.join(calls)})" if calls else "") + stack,
              flush=True)
    return failed


def main():
    if "--child" not in sys.argv:
        sys.path.insert(0, str(ROOT / "utilities"))
        from kernel_lab.tensor_cores.offline import stand_in_environment

        env = stand_in_environment()
        sys.exit(subprocess.call([sys.executable, __file__, "--child"], env=env))
    sys.exit(1 if _compile_all() else 0)


if __name__ == "__main__":
    main()
