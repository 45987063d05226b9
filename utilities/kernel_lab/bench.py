"""How fast is it, and how close to what this GPU can do?

Timing rules (each has bitten someone):
- CUDA events around the launch, not a host clock: launches return before the kernel finishes.
- Warm-up runs first, so JIT compilation and module loading are not timed.
- The GPU is kept busy while the host launches (see :func:`time_ms`), so Python's launch overhead
  is not counted as kernel time.
- The median of many repeats, not the mean: one preempted run should not move the number.
- The L2 cache is flushed between repeats (a buffer twice the L2 size is read), so a kernel
  whose data would fit in L2 is not timed reading it from there when the real workload would not.
- Inputs are never zeros: zeros hide wrong indexing and can run faster than real data.

Numbers are reported against *rooflines measured on this GPU*: the bandwidth of a large
device-to-device copy (bytes read + bytes written), and the FLOP rate of cuBLAS SGEMM and DGEMM
through CuPy. They are measured once per GPU and cached on disk (``~/.cache/kernel_lab``, or the
folder in ``KERNEL_LAB_CACHE_DIR``).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .environment import gpu_info, on_simulator
from .validate import KernelLabArgumentError, require_callable, require_positive_int

SIMULATOR_NOTE = "timing skipped: kernels run in the CUDA simulator, whose speed says nothing about a GPU"


@dataclass
class Measurement:
    """One timed kernel: the median time, and what it means for this GPU."""

    name: str
    ms: float | None  # median milliseconds; None under the simulator
    times_ms: list = field(default_factory=list)
    bytes: float | None = None
    flops: float | None = None
    roofline: str | None = None  # "copy", "sgemm", "dgemm"
    roofline_value: float | None = None  # GB/s for "copy", TFLOP/s for the GEMMs

    @property
    def gbps(self) -> float | None:
        return self.bytes / self.ms / 1e6 if self.ms and self.bytes else None

    @property
    def tflops(self) -> float | None:
        return self.flops / self.ms / 1e9 if self.ms and self.flops else None

    @property
    def fraction(self) -> float | None:
        """Fraction of the roofline reached (bandwidth for 'copy', FLOP rate for GEMM peaks)."""
        if self.roofline_value is None or self.ms is None:
            return None
        achieved = self.gbps if self.roofline == "copy" else self.tflops
        return achieved / self.roofline_value if achieved else None

    @property
    def spread(self) -> float | None:
        """(max - min) / median of the repeats: how noisy this measurement is."""
        if not self.times_ms or not self.ms:
            return None
        return (max(self.times_ms) - min(self.times_ms)) / self.ms

    def __str__(self) -> str:
        if self.ms is None:
            return f"{self.name}: {SIMULATOR_NOTE}"
        parts = [f"{self.name}: {_fmt_time(self.ms)}"]
        if self.gbps:
            parts.append(_fmt_rate(self.gbps * 1e9, "B/s"))
        if self.tflops:
            parts.append(_fmt_rate(self.tflops * 1e12, "FLOP/s"))
        if self.fraction is not None:
            unit = "GB/s" if self.roofline == "copy" else "TFLOP/s"
            what = {"copy": "copy bandwidth", "sgemm": "cuBLAS SGEMM", "dgemm": "cuBLAS DGEMM"}[self.roofline]
            parts.append(f"{100 * self.fraction:.0f}% of this GPU's {what} ({self.roofline_value:,.0f} {unit})")
        return ", ".join(parts)


def _fmt_time(ms: float) -> str:
    return f"{ms * 1000:.1f} us" if ms < 1 else f"{ms:.3f} ms"


def _fmt_rate(value: float, unit: str) -> str:
    for scale, prefix in [(1e12, "T"), (1e9, "G"), (1e6, "M")]:
        if value >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


# ---------------------------------------------------------------------------------------------
# Timing

_FLUSH = {}


def _flush_l2() -> None:
    """Evict whatever the last repeat left in L2 by reading a buffer twice the L2's size.

    Reading, not writing: a memset would leave the cache full of dirty lines, and writing those
    back would then cost the timed kernel bandwidth (up to ~15% of a 100 us kernel on an H200).
    """
    from numba import cuda

    if "buf" not in _FLUSH:
        l2 = gpu_info().l2_bytes or 64 << 20

        @cuda.jit
        def read_all(buf, sink):
            i = cuda.grid(1)
            stride = cuda.gridsize(1)
            while i < buf.size:
                if buf[i] == 12345.0:  # never true; keeps the loads from being optimised away
                    sink[0] = buf[i]
                i += stride

        _FLUSH["buf"] = cuda.to_device(np.zeros(2 * l2 // 8, dtype=np.float64))
        _FLUSH["sink"] = cuda.device_array(1, dtype=np.float64)
        _FLUSH["kernel"] = read_all
        _FLUSH["grid"] = 4 * (gpu_info().multiprocessors or 32)
    _FLUSH["kernel"][_FLUSH["grid"], 512](_FLUSH["buf"], _FLUSH["sink"])


_SPIN = {}


def _spin(nanoseconds: int) -> None:
    """Keep the GPU busy for about ``nanoseconds`` (one thread sleeping), so the host can enqueue
    the timed launch while the GPU is still working on something else."""
    if "k" not in _SPIN:
        from numba import cuda

        cc = gpu_info().compute_capability or (0, 0)
        if cc < (7, 0):  # nanosleep needs Volta or newer; older GPUs time without the cover
            _SPIN["k"] = None
        else:
            @cuda.jit
            def spin(total_ns):
                slept = 0
                while slept < total_ns:
                    cuda.nanosleep(1000)
                    slept += 1000

            _SPIN["k"] = spin
    if _SPIN["k"] is not None:
        _SPIN["k"][1, 1](nanoseconds)


def time_ms(fn, *, warmup: int = 3, repeat: int = 20, flush_l2: bool = True) -> list[float]:
    """Milliseconds of each of ``repeat`` calls of ``fn()``, timed with CUDA events after warm-up.

    A Python launch costs the host 20-60 us (Numba prepares the arguments). Recorded naively, the
    start event would fire on an idle GPU and the kernel would start only when the host got round
    to launching it, so that host time would be counted as kernel time. So before each repeat a
    one-thread kernel keeps the GPU asleep for longer than the host needs to launch ``fn``
    (measured during warm-up): the start event and the kernel then run back to back.
    """
    from numba import cuda

    require_callable(fn, "fn")
    warmup = require_positive_int(warmup, "warmup", allow_zero=True)
    repeat = require_positive_int(repeat, "repeat")
    host_s = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        host_s.append(time.perf_counter() - t0)
        cuda.synchronize()
    # Host time to issue fn, without the first call (compilation); at least 100 us of cover.
    issue_s = statistics.median(host_s[1:]) if len(host_s) > 1 else 100e-6
    cover_ns = int(min(2 * issue_s, 0.05) * 1e9) + 100_000
    times = []
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    for _ in range(repeat):
        if flush_l2:
            _flush_l2()
        _spin(cover_ns)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end))
    return times


def _looks_like_zeros(arr) -> bool:
    """Is a sample of this array all zeros? (Reads at most 64 KiB back from the device.)"""
    flat = arr.reshape(-1) if hasattr(arr, "reshape") else arr
    sample = flat[: 16384]
    if hasattr(sample, "copy_to_host"):
        sample = sample.copy_to_host()
    elif hasattr(sample, "get"):
        sample = sample.get()
    sample = np.asarray(sample)
    return sample.size > 0 and not np.any(sample)


def benchmark(name: str, fn, *, bytes=None, flops=None, peak: str | None = None, inputs=(),
              warmup: int = 3, repeat: int = 20, flush_l2: bool = True, quiet: bool = False) -> Measurement:
    """Time ``fn()`` (which launches the kernel) and relate it to this GPU's rooflines.

    ``bytes``: the fewest bytes the kernel must move through device memory (each input read once,
    each output written once); with it the result is compared with the copy bandwidth.
    ``flops``: floating-point operations; with ``peak="sgemm"`` or ``"dgemm"`` the result is compared
    with cuBLAS's rate. ``inputs``: arrays to vet (they must not be zeros). Prints one line.
    """
    if not isinstance(name, str):
        raise KernelLabArgumentError("benchmark(name, fn, ...): name must be a string")
    require_callable(fn, "fn")
    for value, label in [(bytes, "bytes"), (flops, "flops")]:
        if value is not None and (not isinstance(value, (int, float, np.integer, np.floating)) or value <= 0):
            raise KernelLabArgumentError(f"{label} must be a positive number, got {value!r}")
    if peak not in (None, "sgemm", "dgemm"):
        raise KernelLabArgumentError(f"peak must be 'sgemm', 'dgemm' or None, got {peak!r}")
    if peak and not flops:
        raise KernelLabArgumentError(f"peak={peak!r} compares a FLOP rate: also pass flops=")
    if on_simulator():
        m = Measurement(name, None, bytes=bytes, flops=flops)
        if not quiet:
            print(m)
        return m
    for i, arr in enumerate(inputs):
        if _looks_like_zeros(arr):
            raise KernelLabArgumentError(f"benchmark input {i} is all zeros: zeros hide indexing bugs and can "
                                         "run faster than real data; fill it with random numbers")
    times = time_ms(fn, warmup=warmup, repeat=repeat, flush_l2=flush_l2)
    roof = rooflines(quiet=True)
    kind = peak if peak else ("copy" if bytes else None)
    value = roof.get({"copy": "copy_gbps", "sgemm": "sgemm_tflops", "dgemm": "dgemm_tflops"}[kind]) if kind else None
    m = Measurement(name, statistics.median(times), times, bytes, flops, kind if value else None, value)
    if not quiet:
        print(m)
    return m


def compare(measurements, *, baseline: str | int = -1) -> str:
    """A table of measurements side by side, with each one's speed relative to the baseline.

    ``baseline`` names (or indexes) the library version a user would use instead. Returns the table
    and prints it.
    """
    ms = list(measurements)
    if not ms or not all(isinstance(m, Measurement) for m in ms):
        raise KernelLabArgumentError("compare() takes a list of Measurements returned by kl.benchmark")
    if any(m.ms is None for m in ms):
        print(SIMULATOR_NOTE)
        return SIMULATOR_NOTE
    if isinstance(baseline, str):
        names = [m.name for m in ms]
        if baseline not in names:
            raise KernelLabArgumentError(f"baseline {baseline!r} is not among {names}")
        base = ms[names.index(baseline)]
    else:
        base = ms[baseline]
    width = max(len(m.name) for m in ms)
    rows = [f"{'kernel':<{width}}  {'time':>10}  {'throughput':>13}  {'of roofline':>11}  {'speed vs ' + base.name}"]
    for m in ms:
        if m.tflops and m.roofline in ("sgemm", "dgemm"):
            rate = _fmt_rate(m.tflops * 1e12, "FLOP/s")
        else:
            rate = _fmt_rate(m.gbps * 1e9, "B/s") if m.gbps else "-"
        frac = f"{100 * m.fraction:.0f}% {m.roofline}" if m.fraction is not None else "-"
        rows.append(f"{m.name:<{width}}  {_fmt_time(m.ms):>10}  {rate:>13}  {frac:>11}  {base.ms / m.ms:.2f}x")
    table = "\n".join(rows)
    print(table)
    return table


def your_best(mine, *, package=None, library=None, goal: float | None = None) -> str:
    """One line that tells the learner where their fastest kernel stands: the notebook's last word.

    ``mine``: the learner's measurements (their fastest one is chosen); ``package``: the package's
    best kernel for the same job, timed in the same run, where the notebook keeps one beside the
    learner's; ``library``: what a user would call instead; ``goal``: the notebook's goal as a
    fraction of the roofline (0.8 for "80% of the copy roofline"). Prints and returns, e.g.::

        your best kernel (fast): 94% of the copy roofline (goal 80%: met), 2.87x cupy.copyto(out, a.T)

    Under the simulator it says that no timing was taken. Every ratio is a speed ratio: above 1x
    yours is faster.
    """
    ms = [mine] if isinstance(mine, Measurement) else list(mine)
    others = [m for m in (package, library) if m is not None]
    if not ms or not all(isinstance(m, Measurement) for m in ms + others):
        raise KernelLabArgumentError("your_best() takes Measurements returned by kl.benchmark")
    if goal is not None and not (isinstance(goal, (int, float)) and 0 < goal <= 2):
        raise KernelLabArgumentError(f"goal is a fraction of the roofline (0.8 for 80%), got {goal!r}")
    if any(m.ms is None for m in ms + others):
        line = f"your best kernel: {SIMULATOR_NOTE}"
        print(line)
        return line
    best = min(ms, key=lambda m: m.ms)
    parts = []
    if best.fraction is not None:
        what = {"copy": "the copy roofline", "sgemm": "cuBLAS SGEMM", "dgemm": "cuBLAS DGEMM"}[best.roofline]
        frac = f"{100 * best.fraction:.0f}% of {what}"
        if goal is not None:
            frac += f" (goal {100 * goal:.0f}%: {'met' if best.fraction >= goal else 'NOT met'})"
        parts.append(frac)
    if package is not None:
        parts.append(f"{package.ms / best.ms:.2f}x the package's best ({package.name})")
    if library is not None:
        parts.append(f"{library.ms / best.ms:.2f}x {library.name}")
    line = f"your best kernel ({best.name}): " + ", ".join(parts or [_fmt_time(best.ms)])
    print(line)
    return line


def sweep(fn, values, *, desc: str = "sweep"):
    """``[fn(v) for v in values]`` with a progress bar (tqdm): for benchmarks over many sizes."""
    try:  # a graphical bar in JupyterLab when ipywidgets is there, a text bar otherwise
        import ipywidgets  # noqa: F401
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm

    require_callable(fn, "fn")
    values = list(values)
    return [fn(v) for v in tqdm(values, desc=desc, disable=on_simulator())]


# ---------------------------------------------------------------------------------------------
# Rooflines measured on this GPU

_ROOFLINES: dict = {}


def _cache_file() -> Path:
    root = os.environ.get("KERNEL_LAB_CACHE_DIR") or Path.home() / ".cache" / "kernel_lab"
    return Path(root) / "rooflines.json"


def _gpu_key() -> str:
    g = gpu_info()
    return f"{g.name} | {g.uuid} | driver CUDA {g.driver_cuda_version}"


_COPY_KERNEL = {}


def _copy_kernel():
    """A plain copy kernel moving 16 bytes per thread (one complex128: two 8-byte loads and stores),
    which reaches the bandwidth of the driver's memcpy or better."""
    if "k" not in _COPY_KERNEL:
        from numba import cuda

        @cuda.jit
        def copy16(src, dst):
            i = cuda.grid(1)
            if i < src.size:
                dst[i] = src[i]

        _COPY_KERNEL["k"] = copy16
    return _COPY_KERNEL["k"]


def _measure_copy_gbps() -> float:
    """The faster of the driver's device-to-device memcpy and a copy kernel, over 1 GiB (or 1/8 of
    the GPU's memory), counting bytes read plus bytes written."""
    from numba import cuda

    g = gpu_info()
    nbytes = min(1 << 30, (g.memory_bytes or 8 << 30) // 8) // 16 * 16
    src = cuda.to_device((np.arange(nbytes // 4, dtype=np.float32) + 1).view(np.complex128))  # never zeros
    dst = cuda.device_array_like(src)
    kernel, threads = _copy_kernel(), 256
    blocks = (src.size + threads - 1) // threads
    best = float("inf")
    for fn in (lambda: dst.copy_to_device(src), lambda: kernel[blocks, threads](src, dst)):
        best = min(best, statistics.median(time_ms(fn, warmup=3, repeat=15, flush_l2=False)))
    return 2 * nbytes / best / 1e6


def _measure_gemm_tflops(dtype) -> float | None:
    try:
        import cupy as cp
    except Exception:
        return None
    n = 8192
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cp.float64).astype(dtype)
    b = rng.standard_normal((n, n), dtype=cp.float64).astype(dtype)
    c = cp.empty((n, n), dtype=dtype)
    times = time_ms(lambda: cp.matmul(a, b, out=c), warmup=2, repeat=7, flush_l2=False)
    del a, b, c
    # CuPy's pool would keep these 2 GiB (and the float64 temporaries) for the rest of the
    # learner's session: give them back, a GPU shared by several learners needs them.
    cp.get_default_memory_pool().free_all_blocks()
    return 2 * n**3 / statistics.median(times) / 1e9


def rooflines(*, refresh: bool = False, quiet: bool = False) -> dict:
    """This GPU's ceilings: ``copy_gbps``, ``sgemm_tflops``, ``dgemm_tflops`` (None if unknown).

    Measured once per GPU (a few seconds) and cached on disk; ``refresh=True`` measures again.
    SGEMM/DGEMM need CuPy (cuBLAS); without it they are None. Under the simulator all are None.
    """
    empty = {"copy_gbps": None, "sgemm_tflops": None, "dgemm_tflops": None}
    if on_simulator():
        if not quiet:
            print(SIMULATOR_NOTE)
        return dict(empty)
    key = _gpu_key()
    if not refresh and key in _ROOFLINES:
        return dict(_ROOFLINES[key])
    path = _cache_file()
    stored = {}
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            stored = {}
    if not refresh and key in stored and stored[key].get("sgemm_tflops") is not None:
        _ROOFLINES[key] = stored[key]
    else:
        if not quiet:
            print("measuring this GPU's rooflines (once per GPU; cached) ...")
        values = {"copy_gbps": _measure_copy_gbps(),
                  "sgemm_tflops": _measure_gemm_tflops(np.float32),
                  "dgemm_tflops": _measure_gemm_tflops(np.float64)}
        _ROOFLINES[key] = values
        stored[key] = values
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(stored, indent=1))
        except OSError:
            pass  # a read-only home: keep the in-memory cache only
    values = dict(_ROOFLINES[key])
    if not quiet:
        print(describe_rooflines(values))
    return values


def describe_rooflines(values: dict) -> str:
    g = gpu_info()
    parts = [f"{g.name}: copy bandwidth {values['copy_gbps']:,.0f} GB/s (read + write)"]
    for key, label in [("sgemm_tflops", "cuBLAS SGEMM"), ("dgemm_tflops", "cuBLAS DGEMM")]:
        v = values.get(key)
        parts.append(f"{label} {v:.1f} TFLOP/s" if v else f"{label} unknown (needs CuPy)")
    return ", ".join(parts)


def ridge_point(values: dict, peak: str = "sgemm") -> float | None:
    """Arithmetic intensity (FLOP per byte) above which a kernel can be compute-bound here."""
    p = values.get(f"{peak}_tflops")
    return p * 1e12 / (values["copy_gbps"] * 1e9) if p and values.get("copy_gbps") else None
