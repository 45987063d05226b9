"""Fill the compile caches for the course's cuBLASDx kernels on a machine without a GPU.

    python -m kernel_lab.tensor_cores.warm --arch sm_90,sm_100 [--modules 06,07] [--processes N]
    kernel-lab-warm --arch sm_90                      (the same, as a console script)

Modules 06 and 07 build kernels that call cuBLASDx through nvmath-python. Compiling one the first
time costs minutes, almost all of it on the host CPU: libmathdx runs NVRTC over cuBLASDx's C++
templates for every device function, then Numba lowers the kernel, NVVM turns it into LTO-IR and
nvJitLink links and assembles it (docs/compile-time.md has the measured split). None of this needs a
GPU, so an image for a workshop can be built warm: this command compiles every cuBLASDx kernel the
notebooks build (pipelines, module 06's block GEMMs and stage loop), for each target architecture,
and leaves

- the cuBLASDx code-generation cache (``codegen_cache``: the LTO-IR of every device function and
  the traits libmathdx reports), and
- the cubin cache (``cubin_cache``: the linked kernel, keyed by its LLVM IR, everything it links,
  the architecture and the tool versions)

in ``$KERNEL_LAB_CACHE_DIR`` (default ``~/.cache/kernel_lab``). A learner's process with the same
nvmath-python, libmathdx, NVRTC, CCCL, numba-cuda and nvJitLink finds the entries (every key is a
content hash, not a process-local handle) and compiles the course's kernels in seconds. A learner's
own kernel hits the code-generation cache too (same cuBLASDx descriptions); only its own lowering,
NVVM and link run.

How: the command re-runs itself with a stand-in ``libcuda.so.1`` on the library path
(``offline.stand_in_driver``) and Numba's GPU target forced on, and compiles each (kernel,
architecture) in a worker process, side by side (``--processes``, default: the CPU count).
``--list`` prints the jobs without compiling.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ENV_CACHE_DIR = "KERNEL_LAB_CACHE_DIR"
DEFAULT_ARCHS = "sm_90"
ALL_MODULES = ("06", "07")


class WarmError(ValueError):
    """A command-line value that cannot be used (names the value and what is accepted)."""


def parse_arch(text: str) -> tuple[int, int]:
    """``"sm_90"``, ``"sm_90a"``, ``"90"``, ``"9.0"``, ``"compute_100"`` -> ``(9, 0)`` / ``(10, 0)``."""
    t = text.strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.(\d)", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})a?", t)
    if not m:
        raise WarmError(f"cannot read the architecture {text!r}: write it as sm_90, sm_100, 90 or 9.0")
    digits = m.group(1)
    cc = (int(digits[:-1]), int(digits[-1]))
    if cc < (9, 0):
        raise WarmError(f"{text!r}: cuBLASDx's pipeline kernels need compute capability 9.0 or newer "
                        "(sm_90, sm_100, ...)")
    return cc


def parse_archs(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        if part.strip():
            cc = parse_arch(part)
            if cc not in out:
                out.append(cc)
    if not out:
        raise WarmError("no architecture given: --arch sm_90[,sm_100,...]")
    return out


def parse_modules(text: str) -> list[str]:
    out = []
    for part in text.split(","):
        p = part.strip()
        if not p:
            continue
        p = p.zfill(2)
        if p not in ALL_MODULES:
            raise WarmError(f"module {part!r} has no cuBLASDx kernels to warm; choose from {', '.join(ALL_MODULES)}")
        if p not in out:
            out.append(p)
    if not out:
        raise WarmError(f"no module given: --modules {','.join(ALL_MODULES)}")
    return out


@dataclass(frozen=True)
class Job:
    """One kernel to compile: ``kind`` is "pipeline" (module 06's ``PipelineGemm``), "ozaki"
    (module 07's pipeline kernels), "block" (06.1-06.3's ``BlockGemm``) or "async" (06.1's and
    06.3's ``async_gemm`` stage loop); ``shape`` is the problem (M, N, K) as the notebook passes it
    (a block or async kernel serves every shape: ``()``)."""

    module: str
    kind: str
    shape: tuple
    config: tuple = ()  # (name, value) pairs of PipelineConfig / OzakiConfig
    epilogue: str = "identity"
    method: str = ""
    note: str = field(default="", compare=False)

    def label(self) -> str:
        cfg = ",".join(f"{v}" for _, v in self.config)
        if not self.shape:
            return f"{self.module} {self.kind} [{cfg}]"
        m, n, k = self.shape
        what = self.method if self.kind == "ozaki" else self.epilogue
        return f"{self.module} {self.kind} {what} [{cfg}] {m}x{n}x{k}"


def _pipeline(module, cfg: dict, shape, epilogue="identity", note=""):
    return Job(module, "pipeline", tuple(shape), tuple(cfg.items()), epilogue, note=note)


# 06.1's BlockGemm configurations (06.2 and 06.3 build theirs from the same ones); a test holds
# them together with the notebooks' GemmConfig(...) calls
BLOCK_CONFIGS = [dict(tile_m=128, tile_n=128, tile_k=32, threads=256, precision="float16", prefetch=True),
                 dict(tile_m=128, tile_n=128, tile_k=32, threads=256, precision="float16", prefetch=False),
                 dict(tile_m=128, tile_n=128, tile_k=32, threads=256, precision="bfloat16", prefetch=True),
                 dict(tile_m=128, tile_n=128, tile_k=16, threads=256, precision="tf32", prefetch=True),
                 dict(tile_m=128, tile_n=128, tile_k=64, threads=256, precision="int8", prefetch=True),
                 dict(tile_m=128, tile_n=128, tile_k=64, threads=256, precision="int4", prefetch=True)]


def catalogue(modules=ALL_MODULES, cc=(9, 0)) -> list[Job]:
    """The cuBLASDx kernels the notebooks compile on a GPU (configurations, epilogues and shapes
    taken from the notebooks; keep them in step when a notebook changes)."""
    jobs = []
    if "06" in modules:
        # 06.1's two pipelines (06.2's fused epilogues use the fp16 one); tests/test_tensor_cores_warm.py
        # reads the notebooks' PipelineConfig(...) calls and fails if these drift from them
        int8 = dict(tile_m=128, tile_n=256, tile_k=128, threads=256, precision="int8", depth=3)
        fp16 = dict(tile_m=128, tile_n=256, tile_k=64, threads=256, precision="float16", depth=3)
        fp16_persistent = dict(fp16, depth=4, persistent_group_m=8)  # 06.2's, 06.4's winner
        fp16_walk = dict(fp16, persistent_group_m=8)  # 06.1's Exercise 5 (the fp16 one's code generation)
        for shape in ((300, 333, 200), (4096, 4096, 4096)):
            jobs.append(_pipeline("06", int8, shape, note="06.1"))
            jobs.append(_pipeline("06", fp16, shape, note="06.1"))
            jobs.append(_pipeline("06", fp16_walk, shape, note="06.1"))
        for ep in ("identity", "bias_relu", "bias_gelu"):
            jobs.append(_pipeline("06", fp16_persistent, (4096, 4096, 4096), ep, note="06.2"))
        # 06.1-06.3's block GEMMs (the learners' loaders and epilogues build other kernels of these
        # cuBLASDx descriptions: the code generation is shared) and 06.1/06.3's stage loop, one per
        # layout (its stages and the learner's copies change no cuBLASDx function)
        for cfg in BLOCK_CONFIGS:
            jobs.append(Job("06", "block", (), tuple(cfg.items()), note="06.1-06.3"))
        for layout in ("plain", "suggested"):
            jobs.append(Job("06", "async", (), (("layout", layout), ("stages", 3)), note="06.1, 06.3"))
        try:  # 06.4's tuning space (the notebook's SPACE: a test holds the two together)
            from . import configs

            space = configs.Space(tile_m=(128,), tile_n=(128, 256), threads=(128, 256), depth=(2, 4),
                                  persistent_group_m=(0, 8))
            for c in configs.enumerate_pipeline_configs("float16", cc, space, tile_k=(64,)):
                job = _pipeline("06", c.as_dict(), (4096, 4096, 4096), note="06.4")
                if job not in jobs:
                    jobs.append(job)
        except ImportError:  # pragma: no cover - configs is plain Python
            pass
    if "07" in modules:
        ozaki = dict(tile_m=128, tile_n=256, tile_k=128, threads=256, depth=3)
        # 07.3-07.5 at 8192^3, ozaki.bench's table at 2048 and 4096; one kernel per method and
        # padded shape serves every slice count (the digit buffers have a fixed plane count)
        for n in (8192, 4096, 2048):
            for method in ("unfused", "partial", "fused"):
                jobs.append(Job("07", "ozaki", (n, n, n), tuple(ozaki.items()), method=method, note="07.3-07.5"))
    return jobs


def _program_name() -> str:
    """How the learner started this: ``kernel-lab warm``, ``kernel-lab-warm`` or ``python -m ...``."""
    called = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return called if called.startswith("kernel-lab") else "python -m kernel_lab.tensor_cores.warm"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_program_name(),
        description="Compile the course's cuBLASDx kernels ahead of time (no GPU needed) and fill the "
                    f"compile caches in ${ENV_CACHE_DIR} (default ~/.cache/kernel_lab).")
    p.add_argument("--arch", default=DEFAULT_ARCHS, help="target architectures, comma-separated: sm_90,sm_100")
    p.add_argument("--modules", default=",".join(ALL_MODULES), help="course modules, comma-separated: 06,07")
    p.add_argument("--cache-dir", default=None, help=f"cache root (default ${ENV_CACHE_DIR} or ~/.cache/kernel_lab)")
    p.add_argument("--processes", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--only", action="append", default=None,
                   help="only jobs whose label contains this text (repeat for several)")
    p.add_argument("--list", action="store_true", help="print the jobs and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


@dataclass
class Plan:
    archs: list
    modules: list
    jobs: list  # [(Job, cc)]
    cache_dir: str | None
    processes: int


def plan(argv) -> Plan:
    """Parse the command line into the (job, architecture) pairs to compile; raises WarmError."""
    args = build_parser().parse_args(argv)
    archs = parse_archs(args.arch)
    modules = parse_modules(args.modules)
    pairs = []
    for cc in archs:
        for job in catalogue(modules, cc):
            if any(text in job.label() for text in (args.only or [""])):
                pairs.append((job, cc))
    processes = args.processes or os.cpu_count() or 1
    if processes < 1:
        raise WarmError(f"--processes must be at least 1, got {processes}")
    return Plan(archs, modules, pairs, args.cache_dir, processes)


# ---------------------------------------------------------------------------------------------
# Compiling one job (in a process that has the stand-in driver and the GPU target)


def _numba_types(dispatcher, values):
    return tuple(dispatcher.typeof_pyval(v) for v in values)


def pipeline_kernel_and_types(job: Job, cc):
    """(dispatcher, argument types) of a module-06 ``PipelineGemm`` launch for ``job.shape``, built
    without device memory (``offline.pipeline_for_shapes``)."""
    import numpy as np

    from . import epilogues, gemm, offline
    from .configs import PipelineConfig

    cfg = PipelineConfig(**dict(job.config))
    kernel = gemm.PipelineGemm(cfg, epilogues.by_name(job.epilogue, cfg.tile_m))
    m, n, k = job.shape
    mp, np_, kp = kernel.padded_shape(m, n, k)
    dt = np.int8 if cfg.precision == "int8" else np.float16
    # a: (Mp, Kp) row-major; b_t: (Np, Kp) row-major, read through its (Kp, Np) column-major view
    pipe = offline.pipeline_for_shapes(kernel.MM, cfg.depth, (mp, kp), (kp, 1), (kp, np_), (1, kp), dt)
    out3 = np.empty((1, 1, 1), kernel.out_dtype)
    extra = {"bias": np.empty(1, np.float32), "alpha": 1.0, "beta": 0.0, "gamma": 1.0, "scale": 1.0,
             "zero_point": 0, "c": np.empty((1, 1, 1), np.float32),
             "row_max": np.empty((1, 1, 1), np.float32), "row_sum": np.empty((1, 1, 1), np.float32)}
    args = tuple(extra[name] for name in kernel.epilogue.arg_names)
    types = _numba_types(kernel.dispatcher, (out3, np.int32(m), np.int32(n), args, pipe))
    return kernel.dispatcher, types


def ozaki_kernel_and_types(job: Job, cc):
    """(dispatcher, argument types) of a module-07 pipeline kernel for ``job.shape`` (the digit
    buffers' views as ``ozaki.gpu.digit_buffers`` makes them)."""
    import numpy as np

    from ..ozaki import gpu
    from . import offline

    cfg = gpu.OzakiConfig(**dict(job.config))
    mp, np_, kp = cfg.padded(*job.shape)
    planes = gpu.PLANES
    mm = gpu.matmul_description(cfg)
    pipe = offline.pipeline_for_shapes(mm, cfg.depth, (mp, kp, planes), (kp, 1, mp * kp),
                                       (kp, np_, planes), (1, kp, np_ * kp), np.int8)
    i32v = np.empty(1, np.int32)
    i32c = np.empty((1, 1, 1), np.int32)
    if job.method == "fused":
        _, kern = gpu.fused_kernel(cfg)
        values = (np.int32(7), i32v, i32v, np.float64(1), np.float64(0), np.empty((1, 1)), pipe)
    elif job.method == "partial":
        _, kern = gpu.diagonal_sums_kernel(cfg)
        values = (i32c, pipe)
    else:
        _, kern = gpu.pair_products_kernel(cfg)
        values = (i32v, i32v, i32c, pipe)
    return kern, _numba_types(kern, values)


def block_kernel_and_types(job: Job, cc):
    """(dispatcher, argument types) of a module-06 ``BlockGemm`` with the package's own loaders and
    the identity epilogue (the types ``BlockGemm.prepare`` gives a launch)."""
    from numba import from_dtype, types

    from . import gemm
    from .configs import GemmConfig

    cfg = GemmConfig(**dict(job.config))
    kernel = gemm.BlockGemm(cfg)
    bits = from_dtype(gemm._bits_dtype(cfg.precision))
    a = types.Array(types.int8 if cfg.precision == "int4" else bits, 3, "C")  # int4: A is int8, B is packed
    i32 = types.int32
    return kernel.dispatcher, (a, types.Array(bits, 3, "C"), types.Array(from_dtype(kernel.out_dtype), 3, "C"),
                               i32, i32, i32, types.UniTuple(i32, 8), types.Tuple(()))


def async_kernel_and_types(job: Job, cc):
    """(dispatcher, argument types) of ``async_gemm``'s stage loop around copies that do nothing:
    the learner's copies are Numba code of their own, the loop's cuBLASDx functions are the same."""
    from numba import cuda, types

    from . import async_gemm

    @cuda.jit(device=True)
    def no_copies(a, b, stage, k0, row0, col0, m, n, k, tid):
        pass

    opts = dict(job.config)
    dispatcher, _ = async_gemm.kernel(no_copies, opts["layout"], opts["stages"])
    f16, f32, i32 = types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C"), types.int32
    return dispatcher, (f16, f16, f32, types.Array(types.float32, 1, "C"), i32, i32, i32)  # a, b, out, bias, m, n, k


KERNELS = {"pipeline": pipeline_kernel_and_types, "ozaki": ozaki_kernel_and_types,
           "block": block_kernel_and_types, "async": async_kernel_and_types}


def _pipeline_host_code(types) -> None:
    """Generate the device functions a GPU process's ``DevicePipeline`` runs on the host side (the
    one-thread kernels that build the pipeline's TMA state and tear it down): generating them is
    libmathdx code generation like the kernel's own, so it fills the same cache; only their small
    link and load need the GPU."""
    from nvmath.device import cublasdx, cublasdx_backend
    from nvmath.device.common_cuda import get_default_code_type

    for t in types:
        pipe = getattr(t, "pipeline", None)  # a DevicePipelineType argument
        if not isinstance(pipe, cublasdx.DevicePipeline):
            continue
        mm_desc = cublasdx._blas_tensors_handle(pipe.mm)
        pipe_desc = cublasdx._blas_device_pipeline_handle(pipe)
        code_type = get_default_code_type()
        cublasdx_backend._compile_blas_device_pipeline_init(mm_desc, pipe_desc, code_type=code_type)
        cublasdx_backend._compile_blas_device_pipeline_destroy(mm_desc, pipe_desc, code_type=code_type)


def compile_offline(job: Job, cc, timers=None) -> dict:
    """Compile ``job`` for compute capability ``cc`` the way a GPU process would (same Numba kernel
    object, same target options) and link it to a cubin; fills both caches. Returns timings."""
    from . import offline

    t0 = time.perf_counter()
    offline.pretend_gpu(cc)
    dispatcher, types = KERNELS[job.kind](job, cc)
    t_describe = time.perf_counter()
    from numba.cuda.dispatcher import _Kernel

    from .cubin_cache import link_cc

    kernel = _Kernel(dispatcher.py_func, types, **dispatcher.targetoptions)  # what Dispatcher.compile builds
    t_lower = time.perf_counter()
    kernel.library.get_cubin(cc=link_cc(cc))
    t_link = time.perf_counter()
    _pipeline_host_code(types)
    t_host = time.perf_counter()
    return {"describe_s": t_describe - t0, "lower_s": t_lower - t_describe, "nvvm_link_s": t_link - t_lower,
            "pipeline_host_s": t_host - t_link, "total_s": t_host - t0}


def _worker(spec):
    job, cc, cache_dir = spec
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.setdefault("KERNEL_LAB_QUIET", "1")
    if cache_dir:
        os.environ[ENV_CACHE_DIR] = str(cache_dir)
    t0 = time.perf_counter()
    try:
        from . import codegen_cache, cubin_cache

        codegen_cache.enable()
        cubin_cache.enable()
        times = compile_offline(job, cc)
        return job, cc, times, codegen_cache.stats(), cubin_cache.stats(), None
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        return job, cc, {"total_s": time.perf_counter() - t0}, {}, {}, f"{type(exc).__name__}: {exc}"


def run(p: Plan, compile_one=None, log=print) -> int:
    """Compile every (job, architecture) of the plan in worker processes; return failures.

    ``compile_one(spec)`` replaces the worker (tests pass a fake one and run it in-process)."""
    t0 = time.perf_counter()
    specs = [(job, cc, p.cache_dir) for job, cc in p.jobs]
    failed = 0

    def report(result):
        nonlocal failed
        job, cc, times, cg, cb, err = result
        arch = f"sm_{cc[0]}{cc[1]}"
        if err:
            failed += 1
            log(f"FAILED {arch} {job.label()}: {err}")
        else:
            log(f"{arch} {job.label()}: {times['total_s']:.0f} s (code generation hits {cg.get('hits')}, "
                f"misses {cg.get('misses')}; cubin {'hit' if cb.get('hits') else 'linked'})")

    if compile_one is not None:
        for spec in specs:
            report(compile_one(spec))
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # one task per worker process (maxtasksperchild-like): nvmath keeps every description it
        # built alive, and a fresh process per job keeps memory flat
        fresh = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}
        with ProcessPoolExecutor(max_workers=min(p.processes, len(specs)) or 1,
                                 mp_context=mp.get_context("spawn"), **fresh) as pool:
            for result in pool.map(_worker, specs):
                report(result)
    log(f"{len(specs) - failed} of {len(specs)} compiled in {time.perf_counter() - t0:.0f} s; "
        f"cache: {cache_root(p.cache_dir)}")
    return failed


def cache_root(cache_dir=None) -> Path:
    return Path(cache_dir or os.environ.get(ENV_CACHE_DIR) or Path.home() / ".cache" / "kernel_lab")


def _missing_nvmath() -> str | None:
    try:
        import importlib.util

        if importlib.util.find_spec("nvmath") is None:
            return "nvmath-python is not installed (pip install 'nvmath-python[cu13,dx]')"
    except ValueError:
        pass
    return None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        p = plan(argv)
    except WarmError as exc:
        print(f"kernel-lab warm: {exc}", file=sys.stderr)
        return 2
    if "--list" in argv:
        for job, cc in p.jobs:
            print(f"sm_{cc[0]}{cc[1]} {job.label()}  ({job.note})")
        print(f"{len(p.jobs)} jobs; cache: {cache_root(p.cache_dir)}")
        return 0
    why = _missing_nvmath()
    if why:
        print(f"kernel-lab warm: {why}", file=sys.stderr)
        return 2
    if "--child" not in argv:
        # libmathdx loads libcuda.so.1 when it is imported and the loader reads LD_LIBRARY_PATH once
        # per process: run again with the stand-in driver first on it (the GPU's real driver, where
        # there is one, is not needed for compiling)
        from .offline import stand_in_environment

        env = stand_in_environment()
        if p.cache_dir:
            env[ENV_CACHE_DIR] = str(p.cache_dir)
        return subprocess.call([sys.executable, "-m", "kernel_lab.tensor_cores.warm", "--child", *argv], env=env)
    return 1 if run(p) else 0


def console() -> None:
    """Entry point of the ``kernel-lab-warm`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
