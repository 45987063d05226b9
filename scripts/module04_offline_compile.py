"""Compile module 04's kernels for a GPU without one (code generation needs only the CPU).

The simulator runs kernels as Python, so it cannot see typing errors (a float64 sneaking into a
float32 kernel, a shape that is not a constant); this script compiles the CUDA-core kernels of
``kernel_lab.attention.kernels`` and the register-tiled forward of ``kernel_lab.attention.tiled`` to
PTX and, with ``--tensor-cores``, the cuBLASDx forward of ``kernel_lab.attention.tensor_core`` to
LTO-IR (slow: minutes per kernel; needs nvmath-python with its cuBLASDx extra, e.g.
/work/venv-dx/bin/python). It re-runs itself with the stand-in driver of
``kernel_lab.tensor_cores.offline`` on the library path:

    python scripts/module04_offline_compile.py [--tensor-cores] [--head-dims 64,128] [--cc 9.0]
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cuda_core(head_dims, cc):
    from numba import cuda, types

    from kernel_lab.attention import kernels

    f32 = types.float32
    a4, a3, a2 = (types.Array(f32, n, "C") for n in (4, 3, 2))
    lens = types.Array(types.int32, 1, "C")
    qk, softmax, pv = kernels._naive_kernels()
    todo = {"naive qk": (qk, (a3, a3, a3, f32)),
            "naive softmax": (softmax, (a3, a2, lens, types.int64, types.boolean)),
            "naive pv": (pv, (a3, a3, a3)),
            "online softmax": (kernels._online_softmax_kernel(), (a2, types.Array(f32, 1, "C"), a2))}
    for d in head_dims:
        bm, bn = 64, 32
        todo[f"fused forward d={d}"] = (kernels.fused_forward_kernel(d, bm, bn),
                                        (a4, a3, a4, a4, a4, lens, types.boolean, f32))
        delta, dkdv, dq = kernels.backward_kernels(d, bm, bn)
        common = (a3, a3, a3, a3, a2, a2, lens, types.int64, types.boolean, f32)
        todo[f"backward delta d={d}"] = (delta, (a3, a3, a2))
        todo[f"backward dkdv d={d}"] = (dkdv, (a3, a3) + common)
        todo[f"backward dq d={d}"] = (dq, (a3,) + common)
    from kernel_lab.attention import tiled

    flat, i64 = types.Array(f32, 1, "C"), types.int64
    for d in head_dims:  # the register-tiled forward (04.3's second exercise), its default shape
        todo[f"tiled forward d={d}"] = (tiled.tiled_forward_kernel(tiled.default_config(d)),
                                        (flat, flat, flat, flat, flat, lens, i64, i64, i64, types.boolean, f32))
    from kernel_lab.attention import flash, flash_backward

    for d in head_dims:  # the mma.sync kernels of 04.4 and 04.5 (inline PTX: plain Numba compiles them)
        fwd, bwd = flash.FlashAttention(head_dim=d), flash_backward.FlashBackward(head_dim=d)
        todo[f"mma.sync forward d={d}"] = (fwd.dispatcher, fwd.argument_types())
        todo[f"mma.sync backward d={d}"] = (bwd.dispatcher, bwd.argument_types())
    for name, (kern, sig) in todo.items():
        t0 = time.perf_counter()
        ptx, _ = cuda.compile(kern.py_func, sig, cc=cc, output="ptx")
        local = "local memory" if ".local" in ptx else "no local memory"
        print(f"{name}: compiles for sm_{cc[0]}{cc[1]} ({len(ptx)} bytes of PTX, {local}, "
              f"{time.perf_counter() - t0:.1f} s)", flush=True)


def tensor_cores(head_dims, cc):
    from kernel_lab.attention import tensor_core
    from kernel_lab.tensor_cores import codegen_cache, offline

    codegen_cache.enable()
    for d in head_dims:
        t0 = time.perf_counter()
        fwd = tensor_core.TensorCoreAttention(head_dim=d)
        code = offline.compile_kernel(fwd.dispatcher, fwd.argument_types(), cc)
        print(f"tensor-core forward d={d} ({fwd.label()}): {len(code)} bytes of LTO-IR for sm_{cc[0]}{cc[1]} in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--cc", default="9.0")
    p.add_argument("--tensor-cores", action="store_true", help="also compile the cuBLASDx forward (slow)")
    p.add_argument("--no-cuda-cores", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.child:  # re-run with the stand-in driver on the library path (read at process start)
        sys.path.insert(0, str(ROOT / "utilities"))
        from kernel_lab.tensor_cores.offline import stand_in_environment

        env = stand_in_environment()
        sys.exit(subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=env))
    sys.path.insert(0, str(ROOT / "utilities"))
    import kernel_lab  # noqa: F401  (GPU target: NUMBA_ENABLE_CUDASIM=0 set above)
    from kernel_lab.tensor_cores import offline

    cc = tuple(int(x) for x in args.cc.split("."))
    offline.pretend_gpu(cc)
    dims = [int(x) for x in args.head_dims.split(",")]
    if not args.no_cuda_cores:
        cuda_core(dims, cc)
    if args.tensor_cores:
        tensor_cores(dims, cc)


if __name__ == "__main__":
    main()
