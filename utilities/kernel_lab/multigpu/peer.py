"""Reading the other GPU's memory (module 09, notebook 1): the peer-read kernels, their launcher, the
peer copy they are measured against, and the line that relates a measurement to it.

With peer access enabled (``probe.enable_peer_access``), a pointer into GPU 1's memory is a valid
address for GPU 0's threads: a load from it crosses NVLink (or PCIe) and comes back like any other
load, only later. The kernels here are what the learner writes in 09.1:

* ``peer_read_scalar(src, dst)``: a grid-stride loop, one 4-byte load a thread per step;
* ``peer_read(src, dst)``: the same loop with 16-byte loads (``load4``/``store4``) over ``n // 4``
  groups, then the last ``n % 4`` elements one each. Fewer, larger requests keep more bytes in flight
  per thread, which a link of high latency needs more than local memory does.

Neither kernel knows where ``src`` lives: launched on GPU 0 with ``src`` on GPU 1 it reads over the
link, with ``src`` on GPU 0 it reads local memory, and in the simulator (or on one GPU) both "GPUs"
are two buffers of one device, which is how the checks run everywhere.

The peer copy, ``peer_copy(dst, src)``, is ``cudaMemcpyPeerAsync`` through CuPy: the copy engines
move the bytes, no thread does. It is 09.1's roofline: the bandwidth the link gives a copy.
"""

from __future__ import annotations

from numba import cuda

from ..validate import KernelLabArgumentError
from ..vector_loads import load4, store4

# The GPU's size: 1 GiB of float32 read over the link. The simulator's: a few vectors' worth, an odd
# number so that the tail (n % 4 elements) is exercised.
GPU = dict(n=1 << 28, THREADS=256)
SIM = dict(n=1027, THREADS=32)
BLOCKS_PER_SM = 8  # 8 x 256 threads: a full SM of an H100/H200, many loads in flight


@cuda.jit
def peer_read_scalar(src, dst):
    i = cuda.grid(1)
    stride = cuda.gridDim.x * cuda.blockDim.x
    while i < src.size:
        dst[i] = src[i]
        i += stride


@cuda.jit
def peer_read(src, dst):
    n4 = src.size // 4  # whole groups of 4 floats: one 16-byte load each
    stride = cuda.gridDim.x * cuda.blockDim.x
    i = cuda.grid(1)
    while i < n4:
        a0, a1, a2, a3 = load4(src, 4 * i)
        store4(dst, 4 * i, a0, a1, a2, a3)
        i += stride
    j = 4 * n4 + cuda.grid(1)  # the last n % 4 elements, one a thread
    if j < src.size:
        dst[j] = src[j]


def read_blocks(blocks_per_sm: int = BLOCKS_PER_SM) -> int:
    """A grid that fills the current GPU: ``blocks_per_sm`` blocks per SM (2 blocks in the simulator)."""
    from ..environment import on_simulator

    if on_simulator():
        return 2
    return blocks_per_sm * cuda.get_current_device().MULTIPROCESSOR_COUNT


def launch_peer_read(kernel, dst, src, *, blocks: int | None = None, threads: int = 256, device: int | None = None):
    """Launch ``kernel(src, dst)`` on GPU ``device`` (default: the current one) with a grid-stride grid;
    ``src`` may live on another GPU (peer access enabled) or on this one."""
    if src.shape != dst.shape or src.dtype != dst.dtype or src.ndim != 1:
        raise KernelLabArgumentError(f"src and dst must be 1-d arrays of one shape and dtype, got "
                                     f"{src.shape} {src.dtype} and {dst.shape} {dst.dtype}")
    if device is None:
        kernel[blocks or read_blocks(), threads](src, dst)
        return
    with cuda.gpus[device]:
        kernel[blocks or read_blocks(), threads](src, dst)


def peer_copy(dst, src, *, cupy=None, stream=None) -> None:
    """``dst[:] = src`` by the copy engines (``cudaMemcpyPeerAsync``): CuPy arrays on two GPUs."""
    if cupy is None:
        import cupy
    if src.nbytes != dst.nbytes:
        raise KernelLabArgumentError(f"src has {src.nbytes} bytes, dst {dst.nbytes}: a copy needs the same size")
    stream_ptr = 0 if stream is None else stream.ptr
    cupy.cuda.runtime.memcpyPeerAsync(dst.data.ptr, dst.device.id, src.data.ptr, src.device.id, src.nbytes,
                                      stream_ptr)


def against_peer_copy(measured, copy, *, also=(), goal: float | None = None) -> list[str]:
    """One line per measurement (``kl.benchmark`` results with ``bytes`` = the bytes read from the
    source): its bandwidth and its fraction of the peer copy's; ``also``: more lines of the same kind
    (a local read) that are not the learner's kernels over the link; then the best of ``measured``
    against ``goal`` (a fraction: 0.85). Prints and returns the lines; under the simulator, says that
    nothing was timed."""
    from ..bench import SIMULATOR_NOTE

    also = list(also)
    if copy.ms is None or any(m.ms is None for m in measured + also):
        lines = [SIMULATOR_NOTE]
    else:
        width = max(len(m.name) for m in [copy, *measured, *also])
        lines = [f"{copy.name:<{width}}  {copy.gbps:7.1f} GB/s  (the roofline of this notebook)"]
        lines += [f"{m.name:<{width}}  {m.gbps:7.1f} GB/s  {100 * m.gbps / copy.gbps:5.1f}% of the peer copy"
                  for m in measured + also]
        if goal is not None:
            best = max(measured, key=lambda m: m.gbps)
            fraction = best.gbps / copy.gbps
            lines.append(f"your best kernel ({best.name}): {100 * fraction:.0f}% of the peer copy's bandwidth "
                         f"(goal {100 * goal:.0f}%: {'met' if fraction >= goal else 'NOT met'})")
    for line in lines:
        print(line)
    return lines
