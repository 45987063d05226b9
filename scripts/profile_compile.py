"""Where a cuBLASDx kernel's compile time goes, on this host, without a GPU.

    python scripts/profile_compile.py --job "06 pipeline identity [128,128,32,128,float16,3] 4096x4096x4096"
    python scripts/profile_compile.py --job "07 ozaki fused" --cache-dir /tmp/c --no-cubin-cache --cprofile out.txt

Compiles one job of ``kernel_lab.tensor_cores.warm``'s catalogue (the first whose label contains
``--job``) for ``--arch`` exactly as a GPU process would, and times each stage: libmathdx (NVRTC
over cuBLASDx's templates: descriptor traits, tensor and pipeline finalization, device-function
code), Numba's typing and lowering (the rest of ``compile_cuda``), NVVM (LLVM IR -> LTO-IR) and
nvJitLink (link-time optimisation and SASS for the whole kernel). Prints one JSON line. Needs
nvmath-python; re-runs itself with the stand-in driver (``offline.stand_in_driver``).
"""

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def instrument(totals, counts, cpu):
    """Wrap the expensive entry points with timers (after the caches are installed, so a cache
    hit costs nothing here and a miss is timed where the real work runs)."""
    from nvmath.bindings import mathdx

    from kernel_lab.tensor_cores import codegen_cache

    depth = defaultdict(int)

    def timed(name, fn, bucket):
        def f(*a, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            depth[bucket] += 1
            try:
                return fn(*a, **k)
            finally:
                depth[bucket] -= 1
                if depth[bucket] == 0:  # the outermost call only (compile_cuda recurses)
                    totals[bucket] += time.perf_counter() - t0
                    cpu[bucket] += time.process_time() - c0
                counts[bucket] += 1
        return f

    def bucket_of(name):
        if "finalize_device_functions" in name or "finalize_code" in name:
            return "libmathdx: device-function code (NVRTC)"
        if "finalize_tensors" in name or "finalize_pipelines" in name:
            return "libmathdx: tensor/pipeline finalization (NVRTC)"
        if "get_trait" in name:
            return "libmathdx: descriptor trait queries (NVRTC)"
        return "libmathdx: other calls"

    cache = codegen_cache.active()
    if cache is not None:
        for name in list(cache.orig):
            cache.orig[name] = timed(name, cache.orig[name], bucket_of(name))
    else:
        for name in dir(mathdx):
            fn = getattr(mathdx, name)
            if callable(fn) and not isinstance(fn, type) and name.startswith(("cublasdx_", "commondx_")):
                setattr(mathdx, name, timed(name, fn, bucket_of(name)))
        codegen_cache._rebind_captured_helpers()
    from numba.cuda import compiler
    from numba.cuda.cudadrv import driver, nvvm

    nvvm.compile_ir = timed("nvvm", nvvm.compile_ir, "NVVM (LLVM IR -> LTO-IR)")
    driver._Linker.complete = timed("link", driver._Linker.complete, "nvJitLink (LTO + SASS -> cubin)")
    compiler.compile_cuda = timed("compile_cuda", compiler.compile_cuda, "numba compile_cuda (incl. libmathdx inside)")
    import numba.cuda.dispatcher as disp

    disp.compile_cuda = compiler.compile_cuda


def kernel_lab_types_array():
    from numba import types

    return types.Array(types.int32, 1, "C")


def child(args):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    sys.path.insert(0, str(ROOT / "utilities"))
    t_start = time.perf_counter()
    import kernel_lab  # noqa: F401
    from kernel_lab.tensor_cores import codegen_cache, cubin_cache, warm

    if args.cache_dir:
        os.environ["KERNEL_LAB_CACHE_DIR"] = args.cache_dir
    if args.no_codegen_cache:  # toolchain.device_api() would switch them on
        os.environ["KERNEL_LAB_NO_CODEGEN_CACHE"] = "1"
    if args.no_cubin_cache:
        os.environ["KERNEL_LAB_NO_CUBIN_CACHE"] = "1"
    if not args.no_codegen_cache:
        codegen_cache.enable()
    if not args.no_cubin_cache:
        cubin_cache.enable()
    import nvmath.device  # noqa: F401

    t_import = time.perf_counter() - t_start
    cc = warm.parse_arch(args.arch)
    jobs = [j for j in warm.catalogue(warm.ALL_MODULES, cc) if args.job in j.label()]
    if not jobs:
        sys.exit(f"no job matches {args.job!r}; see python -m kernel_lab.tensor_cores.warm --list")
    job = jobs[0]
    if args.shift_uids:  # compile an unrelated kernel first, as a notebook would have: other uids
        from numba import cuda

        from kernel_lab.tensor_cores import offline

        offline.pretend_gpu(cc)

        @cuda.jit
        def unrelated(x):
            x[0] = 1

        cuda.compile(unrelated.py_func, (kernel_lab_types_array(),), cc=cc, output="ptx")
    totals, counts, cpu = defaultdict(float), defaultdict(int), defaultdict(float)
    instrument(totals, counts, cpu)
    c_start = time.process_time()
    prof = cProfile.Profile() if args.cprofile else None
    if prof:
        prof.enable()
    times = warm.compile_offline(job, cc)
    if prof:
        prof.disable()
        with open(args.cprofile, "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(45)
    mathdx_total = sum(v for k, v in totals.items() if k.startswith("libmathdx"))
    # libmathdx calls made while Numba types and lowers the kernel are inside compile_cuda
    out = {"job": job.label(), "arch": args.arch, "host": os.uname().nodename, "cpus": os.cpu_count(),
           "import_s": round(t_import, 1), **{k: round(v, 1) for k, v in times.items()},
           "stages": {k: round(v, 1) for k, v in sorted(totals.items())},
           "cpu_total_s": round(time.process_time() - c_start, 1),
           "stages_cpu": {k: round(v, 1) for k, v in sorted(cpu.items())},
           "calls": dict(counts), "load_avg": os.getloadavg(), "libmathdx_total_s": round(mathdx_total, 1),
           "codegen_cache": codegen_cache.stats(), "cubin_cache": cubin_cache.stats()}
    print(json.dumps(out), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True, help="text contained in the job's label (warm --list)")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--no-codegen-cache", action="store_true")
    p.add_argument("--no-cubin-cache", action="store_true")
    p.add_argument("--shift-uids", action="store_true",
                   help="compile an unrelated kernel first (Numba numbers functions per process)")
    p.add_argument("--cprofile", default=None, help="write cProfile's top entries to this file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    sys.path.insert(0, str(ROOT / "utilities"))
    from kernel_lab.tensor_cores.offline import stand_in_environment

    env = stand_in_environment()
    sys.exit(subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=env))


if __name__ == "__main__":
    main()
