"""Compile the kernels of modules 01, 02, 03 and 05 for a real GPU (sm_90) on a machine without one.

The simulator runs kernels as Python, so it accepts code that Numba's GPU compiler rejects (a
float64 that does not unify with a float32, math functions the GPU target lacks, fp16 in a kernel,
a device-array method that only NumPy has). Code generation needs no GPU: Numba types and lowers
the kernel, NVVM emits PTX, and nvJitLink (ptxas inside) assembles it and reports registers and
spills. This script drives the package's *launchers* with device arrays that hold no memory, so
every kernel is compiled for exactly the argument types its launcher passes; a launch compiles and
returns without running. With ``--notebooks`` it also executes the solution notebooks' code cells
the same way (results are garbage, so checks fail and are ignored; every kernel a cell launches is
compiled). One line per kernel: ``OK`` with registers/spills, or the compile error.

Needs numba-cuda with the CUDA 13 NVVM and nvJitLink libraries (e.g. /work/venv-dx/bin/python);
not run in CI. It re-runs itself with the stand-in driver of ``kernel_lab.tensor_cores.offline``::

    /work/venv-dx/bin/python scripts/offline_compile_kernels.py --modules 02,03,05 [--notebooks] [--cc 9.0] [--only TEXT] [--sass DIR]

Module 01 has no package kernels: ``--modules 01 --notebooks`` compiles the transpose notebook's
kernels (its shared tiles' shapes must be compile-time constants, which the simulator does not ask).

Exit status 1 when any kernel fails to compile.
"""

import argparse
import ast
import contextlib
import ctypes
import json
import os
import re
import subprocess
import sys
import time
import traceback
import types as pytypes
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {"01": [ROOT / "solutions/01-gpu-in-practice/03-transpose-shared-memory-banks.ipynb"],
             "02": sorted((ROOT / "solutions/02-reductions-and-gemm").glob("*.ipynb")),
             "03": sorted((ROOT / "solutions/03-fusion").glob("*.ipynb")),
             "05": [ROOT / "solutions/05-quantization/05.2-int4-groups.ipynb",
                    ROOT / "solutions/05-quantization/05.3-fp8-e4m3-e5m2.ipynb",
                    ROOT / "solutions/05-quantization/05.4-nvfp4-and-mx.ipynb",
                    ROOT / "solutions/05-quantization/05.5-ternary.ipynb"]}

RESULTS = {}  # (kernel name, argument types) -> line printed
CONTEXT = {"where": ""}


class _NoMemory:
    """Stands in for device memory: device arrays built on it can be typed, sliced, viewed and
    reshaped (what launchers do), never read."""

    def __init__(self, size=0):
        self.size = size
        self.device_ctypes_pointer = ctypes.c_void_p(1 << 20)  # 16-byte aligned, never dereferenced
        self.handle = None

    def view(self, start, stop=None):
        return _NoMemory(0)

    def own(self):
        return self

    def __getattr__(self, name):
        return None


SASS_DIR = {"path": None}  # --sass DIR: each kernel's cubin and its SASS (cuobjdump) saved there


def _save_sass(cubin: bytes, name: str) -> str:
    """Write ``name``.cubin and ``name``.sass under --sass's folder; ', N SASS instructions' (static
    count: every instruction line of the listing), or '' without cuobjdump on PATH."""
    import shutil

    folder = Path(SASS_DIR["path"])
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120]
    (folder / f"{stem}.cubin").write_bytes(cubin)
    tool = shutil.which("cuobjdump")
    if tool is None:
        return ""
    sass = subprocess.run([tool, "-sass", str(folder / f"{stem}.cubin")], capture_output=True, text=True).stdout
    (folder / f"{stem}.sass").write_text(sass)
    count = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+[A-Z@]", sass, flags=re.M))
    return f", {count} SASS instructions ({stem}.sass)"


def _ptxas_report(ptx: str, cc, name: str = "kernel") -> str:
    """'N registers, S bytes spilled' from nvJitLink's ptxas (-verbose)."""
    from cuda.bindings import nvjitlink as nj

    handle = nj.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
    cubin = None
    try:
        data = ptx.encode()
        nj.add_data(handle, nj.InputType.PTX, data, len(data), "kernel.ptx")
        nj.complete(handle)
        buf = bytearray(nj.get_info_log_size(handle))
        nj.get_info_log(handle, buf)
        if SASS_DIR["path"]:
            cubin = bytearray(nj.get_linked_cubin_size(handle))
            nj.get_linked_cubin(handle, cubin)
    finally:
        nj.destroy(handle)
    log = buf.decode(errors="replace")
    regs = re.findall(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    smem = re.findall(r"(\d+) bytes smem", log)
    out = f"{regs[-1] if regs else '?'} registers"
    if spill:
        out += f", spills {spill[-1][0]} B stores / {spill[-1][1]} B loads"
    if smem and smem[-1] != "0":
        out += f", {smem[-1]} B smem"
    if cubin is not None:
        out += _save_sass(bytes(cubin), name)
    return out


def _install_patches(cc):
    """Make launches compile-only and device allocations memory-free; pretend a GPU of ``cc``."""
    import warnings

    import numba.cuda.dispatcher as D
    from numba import cuda

    warnings.filterwarnings("ignore", message="Grid size")  # tiny launches: occupancy is not the point here
    from kernel_lab import environment
    from kernel_lab.tensor_cores import offline
    from numba.cuda.cudadrv import devicearray as DA
    from numba.cuda.cudadrv import devices

    device = offline._PretendDevice(cc)
    # kl.setup() in a notebook asks the driver for a GPU: answer with an H100-like device of ``cc``
    environment._GPU = environment.GPUInfo(count=1, name=f"pretend sm_{cc[0]}{cc[1]} (offline compile)",
                                           compute_capability=tuple(cc), multiprocessors=132,
                                           driver_cuda_version=(13, 0), l2_bytes=50 << 20, memory_bytes=80 << 30)
    D.get_current_device = lambda: device
    devices.get_context = lambda devnum=None: pytypes.SimpleNamespace(device=device)
    devices._runtime.ensure_context = lambda: contextlib.nullcontext()
    import numba.cuda.api

    numba.cuda.api.is_fp8_supported = lambda: cc >= (8, 9)  # it asks the driver otherwise
    D._Kernel.bind = lambda self: None  # linking into a context needs a driver: ptxas runs below instead

    def fake_array(shape, dtype=np.float32, strides=None, order="C", stream=0):
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        dtype = np.dtype(dtype)
        if strides is None:
            strides = np.empty(shape, dtype, order=order).strides if np.prod(shape) < 1 << 24 else None
            if strides is None:
                s, acc = [], dtype.itemsize
                for d in reversed(shape):
                    s.insert(0, acc)
                    acc *= d
                strides = tuple(s)
        return DA.DeviceNDArray(shape, strides, dtype, gpu_data=_NoMemory())

    def to_device(obj, stream=0, copy=True, to=None):
        if isinstance(obj, DA.DeviceNDArray):
            return obj
        a = np.asarray(obj)
        return fake_array(a.shape, a.dtype, a.strides if a.flags.c_contiguous or a.flags.f_contiguous else None)

    DA.DeviceNDArray.copy_to_host = lambda self, ary=None, stream=0: (
        ary if ary is not None else np.zeros(self.shape, self.dtype))
    DA.DeviceNDArray.copy_to_device = lambda self, ary, stream=0: None
    DA.DeviceNDArray.__setitem__ = lambda self, key, value: None  # a host write into device memory
    for name, fn in {"device_array": fake_array, "to_device": to_device,
                     "device_array_like": lambda a, stream=0: fake_array(a.shape, a.dtype),
                     "pinned_array": lambda shape, dtype=np.float32, **k: np.zeros(shape, dtype),
                     "synchronize": lambda: None}.items():
        setattr(cuda, name, fn)

    class _Event:
        def record(self, stream=0): pass
        def synchronize(self): pass
        def wait(self, stream=0): pass
        def elapsed_time(self, other): return 1.0
        def query(self): return True
    cuda.event = lambda timing=True: _Event()

    def call(self, args, launch_config=None):
        name = self.py_func.__qualname__
        try:
            argtypes = tuple(self.typeof_pyval(a) for a in args)
        except Exception as exc:  # noqa: BLE001 - report it as this kernel's failure
            key = (name, repr(args)[:60])
            if key not in RESULTS:
                RESULTS[key] = f"FAIL {CONTEXT['where']}{name}: argument typing: {type(exc).__name__}: {exc}"
                print(RESULTS[key], file=sys.__stdout__, flush=True)
            return
        key = (id(self), argtypes)
        if key in RESULTS:
            return
        t0 = time.perf_counter()
        try:
            kernel = self.compile(argtypes)
            ptx = kernel._codelibrary.get_asm_str(cc)
            try:
                report = _ptxas_report(ptx, cc, f"{CONTEXT['where']}{name}")
            except Exception as exc:  # noqa: BLE001
                report = f"PTX only, not assembled here ({type(exc).__name__}; a kernel linking CUDA C++ code needs it)"
            line = f"OK   {CONTEXT['where']}{name} {_short(argtypes)}: {report} ({time.perf_counter() - t0:.1f} s)"
        except Exception as exc:  # noqa: BLE001 - one line per kernel, then go on
            msg = " ".join(str(exc).split())
            line = f"FAIL {CONTEXT['where']}{name} {_short(argtypes)}: {type(exc).__name__}: {msg[:700]}"
        RESULTS[key] = line
        print(line, file=sys.__stdout__, flush=True)  # the notebook's own prints are silenced

    D.CUDADispatcher.call = call
    return fake_array


def _short(argtypes):
    def one(t):
        s = str(t)
        m = re.match(r"array\((\w+), (\d)d, (\w)\)", s)
        return f"{m[1]}[{m[2]}d{'' if m[3] == 'C' else ',' + m[3]}]" if m else s
    return "(" + ", ".join(one(t) for t in argtypes) + ")"


# --- the package's launchers, module by module -------------------------------------------------


def drive_02(dev):
    from kernel_lab.reductions_gemm import scans, sgemm

    f32 = lambda *s: dev(s, np.float32)
    x = f32(1000)
    bits = x.view(np.uint32)
    u32, i64 = dev(1, np.uint32), dev(1, np.int64)
    yield "scans.absmax_one_pass", lambda: scans.absmax_one_pass(u32, bits)
    yield "scans.absmax_two_pass", lambda: scans.absmax_two_pass(u32, bits)
    yield "scans.absmax_grid_stride", lambda: scans.absmax_grid_stride(u32, bits)
    yield "scans.argmax_grid_stride", lambda: scans.argmax_grid_stride(i64, bits)
    for k in (scans.sum_f32, scans.sum_f64_accumulate, scans.sum_kahan):
        yield f"scans.sum_launcher({k.py_func.__name__})", lambda k=k: scans.sum_launcher(k)(dev(1, np.float64), x)
    yield "scans.scan_three_kernels", lambda: scans.scan_three_kernels(f32(1000), x)
    yield "scans.scan_single_pass_launch", lambda: scans.scan_single_pass_launch(f32(1000), x)
    yield "scans.scan_status_word_launch", lambda: scans.scan_status_word_launch(f32(1000), x)
    yield "scans.make_status_scan(by_ticket=False)", lambda: scans.make_status_scan(by_ticket=False)(f32(1000), x)
    m, n, k = 130, 66, 36
    a, b, c = f32(m, k), f32(k, n), f32(m, n)
    for name in ("launch_naive", "launch_coalesced", "launch_shared", "launch_1d_blocking",
                 "launch_2d_blocking", "launch_vectorized", "launch_warptiled", "launch_double_buffered"):
        yield f"sgemm.{name}", lambda name=name: getattr(sgemm, name)(c, a, b)
    for cfg in sgemm.tuning_candidates():
        yield f"sgemm.warptile_launcher({cfg.label()})", lambda cfg=cfg: sgemm.warptile_launcher(cfg)(c, a, b)
    d64 = lambda *s: dev(s, np.float64)
    yield "sgemm.launch_dgemm", lambda: sgemm.launch_dgemm(d64(m, n), d64(m, k), d64(k, n))


def drive_03(dev):
    from kernel_lab.fusion import conv, epilogues, layernorm
    from kernel_lab.fusion import gemm_bias_relu as gbr

    f32 = lambda *s: dev(s, np.float32)
    m, n, k = 130, 66, 36
    a, b, c, bias = f32(m, k), f32(k, n), f32(m, n), f32(n)
    yield "gemm_bias_relu.launch_unfused", lambda: gbr.launch_unfused(c, a, b, bias)
    yield "gemm_bias_relu.launch_fused", lambda: gbr.launch_fused(c, a, b, bias)
    for name in epilogues.EPILOGUES:
        yield f"epilogues.gemm_with({name})", lambda name=name: epilogues.gemm_with(epilogues.EPILOGUES[name][0])(
            c, a, b, epilogues.epilogue_args(bias, c))
    yield "epilogues.launch_row_softmax", lambda: epilogues.launch_row_softmax(f32(m, n), a, b)
    bb, cin, cout, h, w = 2, 5, 7, 19, 23
    x, wt, cb, y = f32(bb, cin, h, w), f32(cout, cin, 3, 3), f32(cout), f32(bb, cout, h, w)  # conv.check_shapes
    for name, launch in conv.VARIANTS.items():
        yield f"conv.{name}", lambda launch=launch: launch(y, x, wt, cb)
    yield "conv.igemm_launcher(default tiles)", lambda: conv.igemm_launcher(conv.igemm_tiles())(y, x, wt, cb)
    rows, cols = 37, 300
    xs = f32(rows, cols)
    g, be = f32(cols), f32(cols)
    yield "layernorm.launch_warp_per_row", lambda: layernorm.launch_warp_per_row(f32(rows, cols), f32(rows), f32(rows),
                                                                                 xs, g, be)
    xl = f32(5, 3000)
    yield "layernorm.launch_block_per_row", lambda: layernorm.launch_block_per_row(
        f32(5, 3000), f32(5), f32(5), xl, f32(3000), f32(3000))
    # the package's kernel (03.3's last exercise): teams of 8 and 16 lanes, a warp, blocks of 64 to 1024
    # threads; groups of four (float16 with tanh.approx) and rows that are not a multiple of 4
    for n in (128, 130, 256, 1000, 3001, 8192, 16384):
        for dt in (np.float32, np.float16):
            yield (f"layernorm.launch_layernorm_gelu({np.dtype(dt).name}, rows of {n})",
                   lambda n=n, dt=dt: layernorm.launch_layernorm_gelu(dev((rows, n), dt), f32(rows), f32(rows),
                                                                      dev((rows, n), dt), f32(n), f32(n)))


def drive_05(dev):
    from kernel_lab.quant import float_kernels as F

    n = 1000
    x, u8, f = dev(n, np.float32), dev(n, np.uint8), dev(n, np.float32)
    for fmt in ("E4M3", "E5M2"):
        for pt in (1, 4):
            yield f"fp8_encode({fmt}, per_thread={pt})", lambda fmt=fmt, pt=pt: F.fp8_encode(u8, x, fmt, True, pt)
            yield f"fp8_decode({fmt}, per_thread={pt})", lambda fmt=fmt, pt=pt: F.fp8_decode(f, u8, fmt, pt)
    packed, s16, s32 = dev(n // 2, np.uint8), dev(-(-n // 16), np.uint8), dev(-(-n // 32), np.uint8)
    amax = dev(1, np.float32)
    yield "nvfp4_quantize", lambda: F.nvfp4_quantize(packed, s16, x, amax)
    x16, p16, s1024 = dev(1024, np.float32), dev(512, np.uint8), dev(64, np.uint8)
    yield "nvfp4_quantize(blocks of 16)", lambda: F.nvfp4_quantize(p16, s1024, x16, amax)
    yield "nvfp4_dequantize", lambda: F.nvfp4_dequantize(f, packed, s16, amax)
    yield "mx_quantize(E2M1)", lambda: F.mx_quantize(packed, s32, x, "E2M1")
    yield "mx_quantize(E4M3)", lambda: F.mx_quantize(u8, s32, x, "E4M3")
    yield "mx_dequantize(E2M1)", lambda: F.mx_dequantize(f, packed, s32, "E2M1")
    yield "mx_dequantize(E4M3)", lambda: F.mx_dequantize(f, u8, s32, "E4M3")

    def library_encoder():
        launch, why = F.library_fp8_encoder("E4M3", True)
        if launch is None:
            raise RuntimeError(why)
        launch(u8, x)
    yield "library_fp8_encoder(E4M3)", library_encoder

    def library_encoder_tiled():
        launch, why = F.library_fp8_encoder("E4M3", True, tiled=True)
        if launch is None:
            raise RuntimeError(why)
        launch(u8, x)
    yield "library_fp8_encoder(E4M3, tiled)", library_encoder_tiled

    from kernel_lab.quant import int8_gemm

    from kernel_lab.quant import int4 as I4

    rows, cols = 3, 300  # 16-byte-aligned rows: the vector paths are compiled too (one kernel serves both)
    xq, pk = dev((rows, cols), np.float32), dev((rows, cols // 2), np.uint8)
    sc, fo = dev((rows, -(-cols // 128)), np.float32), dev((rows, cols), np.float32)
    yield "int4 quantize (flat grid)", lambda: I4.launch_int4_quantize(pk, sc, xq)
    yield "int4 quantize rows (2-D grid)", lambda: I4.launch_int4_quantize_rows(pk, sc, xq)
    yield "int4 quantize rows (2-D grid, unsigned)", lambda: I4.launch_int4_quantize_rows(pk, sc, xq, unsigned=True)
    yield "int4 quantize rows x8 (a group on 16 lanes)", lambda: I4.launch_int4_quantize_rows(pk, sc, xq, form="x8")
    po, so = dev((rows, 151), np.uint8), dev((rows, 3), np.float32)  # a width that is not 16-byte aligned
    fo2 = dev((rows, 301), np.float32)
    yield "int4 dequantize (one thread per byte)", lambda: I4.launch_int4_dequantize(fo2, po, so)
    yield "int4 dequantize tile4", lambda: I4.launch_int4_dequantize_tile4(fo, pk, sc)
    mm, nn, kw = 136, 260, 72  # K = 288 int8 values, 72 words
    a32, b32k, c32 = dev((mm, kw), np.int32), dev((kw, nn), np.int32), dev((mm, nn), np.int32)
    for cfg in int8_gemm.dp4a_warptile_configs():
        yield f"dp4a warp-tiled {cfg.label()}", lambda cfg=cfg: int8_gemm.dp4a_warptile_launcher(cfg)(c32, a32, b32k)


def drive_01(dev):
    """Module 01 keeps no kernel in the package: its notebooks' cells (--notebooks) are all there is."""
    return iter(())


DRIVERS = {"01": drive_01, "02": drive_02, "03": drive_03, "05": drive_05}


def run_package(module, dev, only=""):
    for label, thunk in DRIVERS[module](dev):
        if only not in label:
            continue
        CONTEXT["where"] = f"[{module}] {label}: "
        before = len(RESULTS)
        try:
            thunk()
        except Exception as exc:  # noqa: BLE001 - a launcher that fails before launching
            if os.environ.get("OFFLINE_COMPILE_VERBOSE"):
                traceback.print_exc()
            print(f"FAIL {CONTEXT['where']}launcher raised {type(exc).__name__}: {' '.join(str(exc).split())[:400]}",
                  flush=True)
            RESULTS[(label, "launcher")] = "FAIL"
            continue
        if len(RESULTS) == before:
            print(f"--   {CONTEXT['where']}no new kernel (already compiled for these types)", flush=True)


def run_notebook(path):
    """Execute the notebook's code cells in order (magics dropped), launches compile-only."""
    nb = json.loads(path.read_text())
    ns = {"__name__": "__main__"}
    CONTEXT["where"] = f"[{path.stem[:4]} notebook] "
    errors = 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            statements = ast.parse(src).body
        except SyntaxError:
            errors += 1
            continue
        # statement by statement: a check that fails on the garbage results must not stop the
        # launches after it in the same cell
        for stmt in statements:
            try:
                with contextlib.redirect_stdout(open(os.devnull, "w")):
                    code = compile(ast.Module([stmt], type_ignores=[]), f"{path.name}#cell{i}", "exec")
                    exec(code, ns)  # noqa: S102 - the notebook is ours
            except Exception:  # noqa: BLE001 - results are garbage here: checks fail; kernels compiled anyway
                errors += 1
                if os.environ.get("OFFLINE_COMPILE_VERBOSE"):
                    traceback.print_exc()
    print(f"--   {path.name}: executed ({errors} statements raised: expected, results are not real)", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modules", default="02,03,05")
    p.add_argument("--notebooks", action="store_true", help="also execute the solution notebooks' cells")
    p.add_argument("--cc", default="9.0")
    p.add_argument("--only", default="", help="only the package kernels whose label contains this text")
    p.add_argument("--sass", metavar="DIR", help="save each kernel's cubin and SASS (cuobjdump on PATH) in DIR")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "utilities"))
    if not args.child:  # the stand-in libcuda must be on the library path when the process starts
        from kernel_lab.tensor_cores.offline import stand_in_environment

        env = stand_in_environment(PYTHONPATH=str(ROOT / "utilities"))
        sys.exit(subprocess.call([sys.executable, __file__, "--child", *sys.argv[1:]], env=env))
    import kernel_lab  # noqa: F401  (GPU target: NUMBA_ENABLE_CUDASIM=0 set above)

    cc = tuple(int(v) for v in args.cc.split("."))
    dev = _install_patches(cc)
    SASS_DIR["path"] = args.sass
    import matplotlib

    matplotlib.use("Agg")
    modules = [m.strip().zfill(2) for m in args.modules.split(",") if m.strip()]
    for module in modules:
        run_package(module, dev, args.only)
        if args.notebooks:
            for path in NOTEBOOKS[module]:
                run_notebook(path)
    failed = [v for v in RESULTS.values() if v.startswith("FAIL")]
    print(f"{len(RESULTS) - len(failed)} kernels compiled for sm_{cc[0]}{cc[1]}, {len(failed)} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
