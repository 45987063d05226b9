"""Timing a collective over the GPUs of one process, and 09.2's comparison with NCCL.

``time_collective(fn, streams)`` measures what nccl-tests measures: ``iters`` calls issued back to back,
the time from the first to the last on every GPU, divided by ``iters``. Two things differ from one
kernel on one GPU (``kl.benchmark``):

* the work spans GPUs: each GPU records its own CUDA events on its stream, and a repeat's time is the
  longest of them (the collective is done when the last GPU is done);
* from Python, issuing a call (two Numba launches, or NCCL's group) takes the host tens of
  microseconds, longer than a small all-reduce takes the GPUs. So each repeat first puts a spin
  kernel on every stream that lasts longer than the host needs to issue all ``iters`` calls (measured
  during warm-up): the calls then queue up behind it and run back to back, and the events time the
  GPUs, not the host.

Sizes and ratios follow NCCL's definitions (``nccl.bus_bandwidth``): latency is the time of one call;
bus bandwidth is ``size / time x 2(n-1)/n``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from ..validate import KernelLabArgumentError, require_callable, require_positive_int
from .nccl import bus_bandwidth

# 4 KB to 1 GB, a factor of 4 apart: the message sizes of 09.2's comparison (bytes per GPU)
MESSAGE_BYTES = tuple(4096 * 4**k for k in range(10))
SMALL_BYTES = 64 * 1024  # at and below this, latency is what counts (goal: >= 1.0x NCCL)
LARGE_BYTES = 256 * 1024**2  # bus bandwidth is what counts (goal: >= 0.8x NCCL)

_SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def _spin_kernels(cupy, devices):
    kernels = {}
    for d in devices:
        with cupy.cuda.Device(d):
            kernels[d] = cupy.RawKernel(_SPIN_SOURCE, "spin")
    return kernels


def _clock_hz(cupy, device: int) -> float:
    """The SM clock in Hz (cudaDevAttrClockRate, in kHz; CUDA 13 dropped cudaDeviceProp.clockRate); 2 GHz,
    above any current GPU's, if it cannot be read: the spin then lasts longer, never shorter."""
    rt = cupy.cuda.runtime
    try:
        return float(rt.deviceGetAttribute(getattr(rt, "cudaDevAttrClockRate", 13), device)) * 1e3
    except Exception:  # noqa: BLE001
        return 2e9


def time_collective(fn, streams, devices=(0, 1), *, iters: int = 20, repeat: int = 5, warmup: int = 3,
                    cupy=None) -> list[float]:
    """Milliseconds per call of ``fn()`` (which issues one collective on ``streams``, one CuPy stream per
    GPU of ``devices``), one value per repeat: see the module docstring."""
    require_callable(fn, "fn")
    iters, repeat = require_positive_int(iters, "iters"), require_positive_int(repeat, "repeat")
    warmup = require_positive_int(warmup, "warmup", allow_zero=True)
    if len(streams) != len(devices):
        raise KernelLabArgumentError(f"give one stream per GPU: {len(streams)} streams for devices {tuple(devices)}")
    if cupy is None:
        import cupy
    host_s = []
    for _ in range(max(warmup, 2)):
        t0 = time.perf_counter()
        fn()
        host_s.append(time.perf_counter() - t0)
        for s in streams:
            s.synchronize()
    issue_s = statistics.median(host_s[1:])  # the first call compiles
    spin = _spin_kernels(cupy, devices)
    times = []
    for _ in range(repeat):
        starts, ends = [], []
        cover_s = 2 * issue_s * iters + 200e-6
        for d, s in zip(devices, streams):
            with cupy.cuda.Device(d):
                clock_hz = _clock_hz(cupy, d)
                with s:  # a RawKernel runs on the current stream
                    spin[d]((1,), (1,), (np.int64(cover_s * clock_hz),))
                starts.append(cupy.cuda.Event())
                starts[-1].record(s)
        for _ in range(iters):
            fn()
        for d, s in zip(devices, streams):
            with cupy.cuda.Device(d):
                ends.append(cupy.cuda.Event())
                ends[-1].record(s)
        for e in ends:
            e.synchronize()
        times.append(max(cupy.cuda.get_elapsed_time(a, b) for a, b in zip(starts, ends)) / iters)
    return times


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def all_reduce_table(rows, n_ranks: int = 2) -> list[str]:
    """``rows``: (bytes per GPU, ms of yours, ms of NCCL's). One line per size: latency of each, the speed
    ratio (above 1x yours is faster) and both bus bandwidths; then the goals of 09.2. Prints and returns."""
    lines = [f"{'size':>7}  {'yours':>10}  {'NCCL':>10}  {'speed':>6}  {'busbw yours':>12}  {'busbw NCCL':>11}"]
    for size, mine, theirs in rows:
        bw_mine = bus_bandwidth(size, mine / 1e3, n_ranks)[1] / 1e9
        bw_theirs = bus_bandwidth(size, theirs / 1e3, n_ranks)[1] / 1e9
        lines.append(f"{_fmt_bytes(size):>7}  {mine * 1e3:8.1f} us  {theirs * 1e3:8.1f} us  {theirs / mine:5.2f}x  "
                     f"{bw_mine:7.1f} GB/s  {bw_theirs:6.1f} GB/s")
    small = [theirs / mine for size, mine, theirs in rows if size <= SMALL_BYTES]
    if small:
        worst = min(small)
        lines.append(f"<= 64 KB: your latency at {worst:.2f}x NCCL's at worst (goal >= 1.0x: "
                     f"{'met' if worst >= 1.0 else 'NOT met'}; the aim is 2x)")
    large = [(mine, theirs) for size, mine, theirs in rows if size == LARGE_BYTES]
    if large:
        mine, theirs = large[0]
        lines.append(f"256 MB: your bus bandwidth at {theirs / mine:.2f}x NCCL's (goal >= 0.8x: "
                     f"{'met' if theirs / mine >= 0.8 else 'NOT met'})")
    for line in lines:
        print(line)
    return lines


def measure_all_reduce(kernel, sizes=MESSAGE_BYTES, devices=(0, 1), *, iters: int = 20, repeat: int = 5,
                       cupy=None) -> list[tuple[int, float, float]]:
    """09.2's measurement on two GPUs: for each message size (bytes per GPU, float32), the one-shot
    all-reduce with ``kernel`` (``one_shot_kernel``'s arguments) and NCCL's, side by side in one run.
    Each size is checked first: both GPUs must hold ``x0 + x1`` exactly (one float32 addition, the same
    on both). Returns ``(bytes, ms of yours, ms of NCCL's)`` per size, medians of ``repeat`` repeats."""
    from ..check import CheckFailed
    from .nccl import NcclAllReduce
    from .one_shot import OneShotWorkspace, one_shot_all_reduce

    if cupy is None:
        import cupy
    cp = cupy
    nccl = NcclAllReduce(devices, cupy=cp)
    streams = []
    for d in devices:
        with cp.cuda.Device(d):
            streams.append(cp.cuda.Stream(non_blocking=True))
    rows = []
    for size in sizes:
        n = size // 4
        xs, outs, nccl_outs = [], [], []
        for g, d in enumerate(devices):
            with cp.cuda.Device(d):
                xs.append(cp.random.default_rng(g).standard_normal(n, dtype=cp.float32))
                outs.append(cp.empty(n, cp.float32))
                nccl_outs.append(cp.empty(n, cp.float32))
        for d in devices:
            cp.cuda.Device(d).synchronize()
        workspace = OneShotWorkspace(n, devices=devices, cupy=cp)

        def yours():
            one_shot_all_reduce(xs, outs, workspace, streams, kernel=kernel)

        def theirs():
            nccl(xs, nccl_outs, streams)

        yours()
        for s in streams:
            s.synchronize()
        with cp.cuda.Device(devices[0]):
            expected = xs[0] + cp.asarray(xs[1])
            for g in range(len(devices)):
                got = cp.asarray(outs[g])
                if not bool(cp.array_equal(got, expected)):
                    wrong = int(cp.count_nonzero(got != expected))
                    raise CheckFailed(f"one-shot all-reduce on two GPUs, {size:,} bytes: {wrong:,} of {n:,} sums wrong on "
                                      f"GPU {devices[g]}. The simulator's check passed, so look at what differs on a "
                                      "GPU: the launcher's workspace, or a grid larger than the GPU can run at once")
        mine = statistics.median(time_collective(yours, streams, devices, iters=iters, repeat=repeat, cupy=cp))
        ref = statistics.median(time_collective(theirs, streams, devices, iters=iters, repeat=repeat, cupy=cp))
        rows.append((size, mine, ref))
        del xs, outs, nccl_outs, workspace
    return rows


def plot_all_reduce(rows, n_ranks: int = 2):
    """Latency and bus bandwidth against message size, yours and NCCL's (two panels)."""
    import matplotlib.pyplot as plt

    sizes = [r[0] for r in rows]
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(11, 4))
    for col, label in ((1, "one-shot (yours)"), (2, "NCCL")):
        ms = [r[col] for r in rows]
        lat.plot(sizes, [m * 1e3 for m in ms], "o-", label=label)
        bw.plot(sizes, [bus_bandwidth(s, m / 1e3, n_ranks)[1] / 1e9 for s, m in zip(sizes, ms)], "o-", label=label)
    for ax, ylabel in ((lat, "latency (us)"), (bw, "bus bandwidth (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size per GPU (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    lat.set_yscale("log")
    fig.tight_layout()
    return fig
