"""A learner's first-compile time on a GPU, without and with a warm cache, in one run.

    python scripts/gpu_compile_time_probe.py                       # cold, warm here, then warm learner
    python scripts/gpu_compile_time_probe.py --warm-cache DIR      # use a cache warmed elsewhere (CPU)
    python scripts/gpu_compile_time_probe.py --jobs 06 --skip-cold

Each measurement is a fresh Python process doing what a notebook does (import, build the kernel,
first launch through ``launcher``), so its time is the learner's wait, imports included:

1. cold: empty ``KERNEL_LAB_CACHE_DIR``;
2. warm: ``python -m kernel_lab.tensor_cores.warm --arch <this GPU>`` for the same kernels (it
   compiles without the GPU, as an image build would), unless ``--warm-cache`` gives a cache
   warmed elsewhere, e.g. on a CPU-only machine: that also proves the keys match across machines;
3. warm learner: empty ``KERNEL_LAB_CACHE_DIR``, the warm cache as ``KERNEL_LAB_WARM_CACHE``
   (read-only, as an image ships it), and the result checked against CuPy, so a cubin from the
   cache is proven to run and be right.

Kernels: module 06's fp16 pipeline GEMM at 4096^3 (06.2) and module 07's fused Ozaki kernel at
8192^3 (07.5), each step running the two side by side. Prints one line per measurement and a JSON
summary at the end. Budget: about 6-7 minutes on an H100 host (cold about 3, warm step about 3, warm
learners well under 1), under 1 minute with ``--warm-cache`` and ``--skip-cold``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEARNER = r'''
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import cupy as cp
import kernel_lab  # noqa: F401
from kernel_lab.tensor_cores import codegen_cache, cubin_cache
job = sys.argv[1]
t_import = time.perf_counter() - t0
if job == "06":
    from kernel_lab.tensor_cores import gemm
    from kernel_lab.tensor_cores.configs import PipelineConfig
    N = 4096
    rng = np.random.default_rng(1)
    A = cp.asarray(rng.standard_normal((N, N)).astype(np.float16))
    B_T = cp.asarray(rng.standard_normal((N, N)).astype(np.float16))
    OUT = cp.full((N, N), cp.nan, cp.float32)
    t1 = time.perf_counter()
    run = gemm.PipelineGemm(PipelineConfig(128, 128, 32, 128, "float16", depth=3)).launcher(A, B_T, OUT)
    run()
    cp.cuda.Device().synchronize()
    t_compile = time.perf_counter() - t1
    want = A[:256].astype(cp.float32) @ B_T.T.astype(cp.float32)
    err = float(cp.abs(OUT[:256] - want).max() / cp.abs(want).max())
    ok = err < 1e-3
else:
    from kernel_lab.ozaki import gpu as ozg
    N = 8192
    rng = np.random.default_rng(2)
    a = cp.asarray(rng.standard_normal((N, N)))
    b = cp.asarray(rng.standard_normal((N, N)))
    t1 = time.perf_counter()
    c = ozg.OzakiGemm(7, "fused")(a, b)
    cp.cuda.Device().synchronize()
    t_compile = time.perf_counter() - t1
    want = a[:256] @ b
    err = float(cp.abs(c[:256] - want).max() / cp.abs(want).max())
    ok = err < 1e-9
print(json.dumps({"job": job, "import_s": round(t_import, 1), "first_call_s": round(t_compile, 1),
                  "total_s": round(time.perf_counter() - t0, 1), "max_rel_err": err, "ok": ok,
                  "codegen": codegen_cache.stats(), "cubin": cubin_cache.stats()}))
'''

WARM_JOBS = {"06": "06 pipeline identity [128,128,32,128,float16,3] 4096x4096x4096",
             "07": "07 ozaki fused [128,256,128,256,3] 8192x8192x8192"}


def learners(jobs, cache_root, warm_cache=None):
    """One fresh process per job, side by side (single-threaded compiles on a many-core host do not
    slow each other down); returns their results in order."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "utilities"), KERNEL_LAB_QUIET="1")
    env.pop("KERNEL_LAB_WARM_CACHE", None)
    if warm_cache:
        env["KERNEL_LAB_WARM_CACHE"] = str(warm_cache)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", LEARNER, job], text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              env=dict(env, KERNEL_LAB_CACHE_DIR=str(Path(cache_root) / job)))
             for job in jobs]
    out = []
    for job, proc in zip(jobs, procs):
        stdout, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        if proc.returncode:
            out.append({"job": job, "error": stderr[-2000:], "wall_s": round(wall, 1)})
            continue
        r = json.loads(stdout.strip().splitlines()[-1])
        r["wall_s"] = round(wall, 1)
        out.append(r)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default="06,07")
    p.add_argument("--warm-cache", default=None, help="a cache root warmed elsewhere (skips the warm step)")
    p.add_argument("--skip-cold", action="store_true")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "utilities"))
    import cupy as cp

    major, minor = cp.cuda.Device().compute_capability[:-1], cp.cuda.Device().compute_capability[-1]
    arch = f"sm_{major}{minor}"
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    results = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "arch": arch,
               "cpus": os.cpu_count(), "cold": [], "warm": []}
    tmp = Path(tempfile.mkdtemp(prefix="kl-compile-probe-"))
    if not args.skip_cold:
        for r in learners(jobs, tmp / "cold"):
            results["cold"].append(r)
            print("cold  ", json.dumps(r), flush=True)
    warm_root = args.warm_cache
    if not warm_root:
        warm_root = tmp / "warm"
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "kernel_lab.tensor_cores.warm", "--arch", arch]
        for job in jobs:
            cmd += ["--only", WARM_JOBS[job]]
        subprocess.run(cmd, env=dict(os.environ, KERNEL_LAB_CACHE_DIR=str(warm_root),
                                     PYTHONPATH=str(ROOT / "utilities")), check=False)
        results["warm_step_s"] = round(time.perf_counter() - t0, 1)
        print(f"warm step (both kernels side by side, no GPU used): {results['warm_step_s']} s", flush=True)
    for r in learners(jobs, tmp / "learner", warm_cache=warm_root):
        results["warm"].append(r)
        print("warm  ", json.dumps(r), flush=True)
    print(json.dumps(results))
    bad = [r for r in results["cold"] + results["warm"] if r.get("error") or not r.get("ok")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
