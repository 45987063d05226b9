"""Profiling helpers for module 06: NVTX ranges, throughput reports, and the command lines of
Nsight Compute and compute-sanitizer for a kernel script.

NVTX ranges name the phases of a program on the Nsight Systems timeline (``nsys profile``). They
come from the ``nvtx`` package when installed, else from CuPy's binding, else they do nothing
(and :func:`nvtx_backend` says so).
"""

from __future__ import annotations

import contextlib
import shutil
import sys


def nvtx_backend() -> str:
    try:
        import nvtx  # noqa: F401

        return "nvtx"
    except ImportError:
        pass
    try:
        from cupy.cuda import nvtx  # noqa: F401

        return "cupy"
    except Exception:  # noqa: BLE001
        return "none"


@contextlib.contextmanager
def nvtx_range(name: str, color: str = "green"):
    """``with nvtx_range("gemm"):`` marks the enclosed host code (and the kernels it launches)."""
    backend = nvtx_backend()
    if backend == "nvtx":
        import nvtx

        with nvtx.annotate(name, color=color):
            yield
    elif backend == "cupy":
        from cupy.cuda import nvtx

        nvtx.RangePush(name)
        try:
            yield
        finally:
            nvtx.RangePop()
    else:
        yield


def throughput(ms: float, *, flops: float | None = None, nbytes: float | None = None) -> dict:
    """GFLOP/s, GB/s and arithmetic intensity of one run (None where not given)."""
    if not ms or ms <= 0:
        raise ValueError(f"ms must be a positive time, got {ms!r}")
    out = {"ms": ms, "gflops": None, "gbps": None, "intensity": None}
    if flops:
        out["gflops"] = flops / ms / 1e6
    if nbytes:
        out["gbps"] = nbytes / ms / 1e6
    if flops and nbytes:
        out["intensity"] = flops / nbytes
    return out


def report(name: str, ms: float, *, flops=None, nbytes=None, peak_tflops=None, peak_gbps=None) -> str:
    """One line: time, GFLOP/s and GB/s, each as a fraction of a peak when given."""
    t = throughput(ms, flops=flops, nbytes=nbytes)
    parts = [f"{name}: {ms:.3f} ms"]
    if t["gflops"]:
        s = f"{t['gflops']:,.0f} GFLOP/s"
        if peak_tflops:
            s += f" ({100 * t['gflops'] / (peak_tflops * 1e3):.0f}% of {peak_tflops:.0f} TFLOP/s)"
        parts.append(s)
    if t["gbps"]:
        s = f"{t['gbps']:,.0f} GB/s"
        if peak_gbps:
            s += f" ({100 * t['gbps'] / peak_gbps:.0f}% of {peak_gbps:,.0f} GB/s)"
        parts.append(s)
    if t["intensity"]:
        parts.append(f"{t['intensity']:.1f} FLOP/byte")
    return ", ".join(parts)


def tool(name: str) -> str | None:
    """Path of a CUDA command-line tool (ncu, nsys, compute-sanitizer), or None."""
    return shutil.which(name)


def sanitizer_command(script: str, check: str = "memcheck") -> list[str]:
    """compute-sanitizer on a Python script: memcheck (out-of-bounds and misaligned accesses),
    racecheck (shared-memory hazards between threads of a block), initcheck, synccheck."""
    if check not in ("memcheck", "racecheck", "initcheck", "synccheck"):
        raise ValueError(f"check must be memcheck, racecheck, initcheck or synccheck, got {check!r}")
    # --report-api-errors no: libraries probe the driver with calls that are allowed to fail (a
    # missing optional symbol, a pointer query); those are not kernel bugs, and memcheck would count them.
    return ["compute-sanitizer", "--tool", check, "--report-api-errors", "no", "--error-exitcode", "3",
            sys.executable, script]


def ncu_command(script: str, kernel_regex: str, *, sections=("SpeedOfLight", "MemoryWorkloadAnalysis"),
                count: int = 1) -> list[str]:
    """Nsight Compute on the first ``count`` launches of kernels whose name matches the regex."""
    cmd = ["ncu", "--kernel-name", f"regex:{kernel_regex}", "--launch-count", str(count)]
    for s in sections:
        cmd += ["--section", s]
    return cmd + [sys.executable, script]
