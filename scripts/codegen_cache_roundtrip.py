"""Round-trip the cuBLASDx code-generation cache on a machine without a GPU (CI's offline job).

Compiles module 06 and 07 kernels for sm_90 (jobs of ``kernel_lab.tensor_cores.warm``'s catalogue,
each in a fresh process, as a GPU process would compile them) twice into one empty cache folder:

1. cold: code generation runs in libmathdx and fills the cache;
2. verify (``KERNEL_LAB_CODEGEN_CACHE_VERIFY=1``): every lookup must hit, and every hit is
   generated again and compared with its entry (LTO-IR and ISA version of each code, tensor and
   pipeline traits, Matmul trait queries). The cubin of each kernel must come from the cubin cache
   (the kernel's IR is the same in a second process).

Both passes run in the same working directory: libmathdx's LTO-IR depends on it, so a cache filled
from another folder would be reported as different.

Exit status 1 when a kernel fails to compile, the cold pass stores nothing, the verify pass misses a
lookup or a cubin, a hit goes unverified, or any entry differs from a fresh generation. Needs
nvmath-python's cuBLASDx extra (``pip install -e ".[cu13,test]"``) and a C compiler (the stand-in
``libcuda.so.1`` of ``kernel_lab.tensor_cores.offline``)::

    python scripts/codegen_cache_roundtrip.py [--jobs "LABEL;LABEL"] [--processes N] [--cache-dir DIR] [--keep]
    python scripts/codegen_cache_roundtrip.py --list
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CC = (9, 0)
# One of each kind of kernel the notebooks build, between them every rule of the cache's table:
# a module-06 pipeline GEMM (pipeline traits, the pipeline's host code), a block GEMM and the stage
# loop (tensors, device functions, Matmul trait queries), and module 07's fused Ozaki kernel.
DEFAULT_JOBS = ("06 pipeline identity [128,256,64,256,float16,3] 300x333x200",
                "06 block [128,128,32,256,float16,True]",
                "06 async [plain,3]",
                "07 ozaki fused [128,256,128,256,3] 2048x2048x2048")


def _worker(spec):
    """Compile one job in this (fresh) process; return its label, the caches' statistics, seconds
    and the error, if any."""
    label, cache_dir = spec
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ["KERNEL_LAB_CACHE_DIR"] = cache_dir
    os.environ.setdefault("KERNEL_LAB_QUIET", "1")
    sys.path.insert(0, str(ROOT / "utilities"))
    t0 = time.perf_counter()
    try:
        from kernel_lab.tensor_cores import codegen_cache, cubin_cache, warm

        if codegen_cache.enable() is None:
            raise RuntimeError("the code-generation cache did not install (see the warning above)")
        cubin_cache.enable()
        (job,) = [j for j in warm.catalogue(warm.ALL_MODULES, CC) if j.label() == label]
        warm.compile_offline(job, CC)
        return label, codegen_cache.stats(), cubin_cache.stats(), time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        return label, {}, {}, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"


def _pass(name, labels, cache_dir, processes, verify):
    """Compile every job once, one fresh process each; return (failures, totals, seconds)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from kernel_lab.tensor_cores.codegen_cache import VERIFY_ENV

    if verify:
        os.environ[VERIFY_ENV] = "1"  # spawned workers inherit it
    else:
        os.environ.pop(VERIFY_ENV, None)
    totals = {"kernels": 0, "hits": 0, "misses": 0, "verified_same": 0, "verified_different": 0,
              "cubin_hits": 0, "different": []}
    problems = []
    t0 = time.perf_counter()
    fresh = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}
    with ProcessPoolExecutor(max_workers=max(1, min(processes, len(labels))), mp_context=mp.get_context("spawn"),
                             **fresh) as pool:
        for label, cg, cb, seconds, err in pool.map(_worker, [(label, cache_dir) for label in labels]):
            if err:
                problems.append(f"{label}: failed to compile: {err}")
                print(f"{name}: FAILED {label}: {err}", flush=True)
                continue
            totals["kernels"] += 1
            for k in ("hits", "misses", "verified_same", "verified_different"):
                totals[k] += cg.get(k, 0)
            totals["cubin_hits"] += 1 if cb.get("hits") else 0
            totals["different"] += cg.get("different", [])
            line = f"{name}: {label}: {seconds:.0f} s; code generation hits {cg['hits']}, misses {cg['misses']}"
            if verify:
                line += (f"; verified {cg['verified_same']} same, {cg['verified_different']} different; "
                         f"cubin {'hit' if cb.get('hits') else 'MISSED'}")
                if cg["misses"]:
                    problems.append(f"{label}: {cg['misses']} lookups missed in verify mode ({cg['missed']})")
                if cg["verified_same"] + cg["verified_different"] != cg["hits"]:
                    problems.append(f"{label}: {cg['hits']} hits but {cg['verified_same'] + cg['verified_different']} "
                                    "verified")
                if not cb.get("hits"):
                    problems.append(f"{label}: the cubin was linked again, not found in the cubin cache")
            print(line, flush=True)
    seconds = time.perf_counter() - t0
    if verify and totals["different"]:
        problems.append(f"entries that differ from a fresh generation: {', '.join(totals['different'])}")
    if verify and totals["kernels"] and not totals["hits"]:
        problems.append("verify mode found no entry at all")
    if not verify and totals["kernels"] and not totals["misses"]:
        problems.append("the cold pass generated nothing (was the cache folder empty?)")
    return problems, totals, seconds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", default=";".join(DEFAULT_JOBS),
                   help="labels of kernel_lab.tensor_cores.warm jobs, ';'-separated (see --list)")
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    p.add_argument("--cache-dir", default=None, help="an empty folder (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the cache folder")
    p.add_argument("--list", action="store_true", help="print the labels of the sm_90 jobs and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "utilities"))
    if args.list:
        from kernel_lab.tensor_cores import warm

        for job in warm.catalogue(warm.ALL_MODULES, CC):
            print(job.label())
        return 0
    if not args.child:  # the stand-in driver must be on the library path when Python starts
        from kernel_lab.tensor_cores.offline import stand_in_environment

        env = stand_in_environment()
        env.pop("KERNEL_LAB_WARM_CACHE", None)  # only this run's entries count
        return subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=env)

    from kernel_lab.tensor_cores import warm

    labels = [s.strip() for s in args.jobs.split(";") if s.strip()]
    known = {job.label() for job in warm.catalogue(warm.ALL_MODULES, CC)}
    unknown = [label for label in labels if label not in known]
    if unknown:
        print(f"not jobs of kernel_lab.tensor_cores.warm for sm_90: {unknown} (see --list)", file=sys.stderr)
        return 2
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="kernel_lab_roundtrip_")
    if any(Path(cache_dir).rglob("*.json")):
        print(f"{cache_dir} already holds entries: give an empty folder", file=sys.stderr)
        return 2
    print(f"{len(labels)} kernels for sm_{CC[0]}{CC[1]}, cache {cache_dir}, {args.processes} processes", flush=True)
    problems = []
    try:
        for name, verify in (("cold", False), ("verify", True)):
            found, t, seconds = _pass(name, labels, cache_dir, args.processes, verify)
            problems += found
            summary = (f"{name}: {t['kernels']} of {len(labels)} kernels in {seconds:.0f} s; "
                       f"code generation hits {t['hits']}, misses {t['misses']}")
            if verify:
                summary += (f"; verified {t['verified_same']} same, {t['verified_different']} different; "
                            f"cubin hits {t['cubin_hits']} of {t['kernels']}")
            print(summary, flush=True)
    finally:
        if not args.keep and not args.cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
    for problem in problems:
        print(f"PROBLEM {problem}", flush=True)
    print("round trip: " + ("FAILED" if problems else "every lookup hit, every hit verified, no difference"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
