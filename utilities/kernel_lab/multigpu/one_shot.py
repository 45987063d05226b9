"""The one-shot all-reduce of two GPUs as a Numba kernel, and its launcher (module 09, notebook 2).

Each GPU runs the same kernel on its own grid of ``B`` blocks. Block ``b`` of GPU ``g`` handles the
elements ``i = b*T + t, b*T + t + B*T, ...`` (``T`` threads a block), on both GPUs the same ones:

1. publish: copy its elements of ``x`` into its own *staging* buffer (memory the peer reads over
   peer access), in the half chosen by the epoch's parity;
2. ``cuda.syncthreads()``, then thread 0 fences at system scope (``cuda.threadfence_system()``: the
   staging stores are visible to the other GPU before anything that follows) and sets its flag word
   ``my_flags[b] = epoch`` (``cuda.atomic.exch``);
3. wait: thread 0 polls the peer's flag ``peer_flags[b]`` with an acquire load at system scope
   (``kl.acquire.load_acquire_system``) until it reaches ``epoch``; ``cuda.syncthreads()``;
4. read and sum: ``out[i] = x[i] + peer_staging[half + i]``.

The epoch (1, 2, 3, ... one per call, kept by the launcher) means no flag is ever reset: a flag that
still holds the last call's value is simply below the new epoch. Resetting flags to 0 instead races
with the peer, which may not have seen the 1 yet (notebook 2's "flag reset too early").

Why two halves of staging: call ``e + 1`` on GPU ``g`` may start while the peer still reads call
``e``'s data. It writes the other half; it cannot get to call ``e + 2`` (the first half again) before
the peer has set its flag for ``e + 1``, which the peer does only after finishing call ``e``. A flag
may be one epoch ahead of the reader (hence ``< epoch``, not ``!= epoch``), never two.

All ``B`` blocks of both GPUs must be running at once (block ``b`` of one GPU waits for block ``b`` of
the other): the launcher refuses more blocks than a GPU has SMs.

``one_shot_block`` is the device function that holds the protocol (the learner writes it in
notebook 2); the simulator harness (`simulated`) runs it for two simulated GPUs as the two halves of
one grid.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..acquire import load_acquire_system
from ..validate import KernelLabArgumentError

FLAG_DTYPE = np.int32


@cuda.jit(device=True)
def one_shot_block(b, nblocks, x, mine, peer, my_flags, peer_flags, out, epoch):
    """Block ``b`` of ``nblocks`` on one GPU: publish, fence, flag, wait for the peer, sum."""
    t = cuda.threadIdx.x
    n = x.size
    half = (epoch & 1) * n
    stride = nblocks * cuda.blockDim.x
    i = b * cuda.blockDim.x + t
    while i < n:  # 1. publish this block's share in my staging buffer
        mine[half + i] = x[i]
        i += stride
    cuda.syncthreads()
    if t == 0:
        cuda.threadfence_system()  # 2. the data before the flag, as another GPU sees them
        cuda.atomic.exch(my_flags, b, epoch)
        while load_acquire_system(peer_flags, b) < epoch:  # 3. the peer's block b has published
            pass
    cuda.syncthreads()
    i = b * cuda.blockDim.x + t
    while i < n:  # 4. read the peer's share and sum
        out[i] = x[i] + peer[half + i]
        i += stride


@cuda.jit
def one_shot_kernel(x, mine, peer, my_flags, peer_flags, out, epoch):
    """One GPU's launch: its blocks are ``one_shot_block`` 0..gridDim.x-1."""
    one_shot_block(cuda.blockIdx.x, cuda.gridDim.x, x, mine, peer, my_flags, peer_flags, out, epoch)


class OneShotWorkspace:
    """Staging buffers (two halves of ``n`` elements) and flag words (one per block) on each of two
    GPUs, peer access between them, and the epoch counter. Make one per message size and reuse it:
    flags start at 0 and are never reset.

    ``cupy`` is passed in by tests; a notebook leaves it out.
    """

    def __init__(self, n: int, dtype=np.float32, *, devices=(0, 1), blocks: int | None = None,
                 threads: int = 256, cupy=None):
        if cupy is None:
            import cupy
        self.cp = cupy
        rt = cupy.cuda.runtime
        if len(devices) != 2 or devices[0] == devices[1]:
            raise KernelLabArgumentError(f"the one-shot all-reduce runs on two different GPUs, got devices={devices!r}")
        count = rt.getDeviceCount()
        for d in devices:
            if not 0 <= d < count:
                raise KernelLabArgumentError(f"device {d} does not exist: this machine has {count} GPU(s)")
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise KernelLabArgumentError(f"n (elements per GPU) must be a whole number >= 1, got {n!r}")
        from .probe import enable_peer_access

        missing = enable_peer_access(devices, runtime=rt)
        if missing:
            raise KernelLabArgumentError(
                "peer access is not possible between " + ", ".join(f"GPU {a} -> GPU {b}" for a, b in missing)
                + ": the one-shot all-reduce reads the other GPU's memory directly. NCCL still works "
                "(through host memory), and so does a copy with cupy's peer copy.")
        sms = min(rt.getDeviceProperties(d)["multiProcessorCount"] for d in devices)
        if blocks is None:
            blocks = min(sms, max(1, -(-int(n) // threads)))
        if not 1 <= blocks <= sms:
            raise KernelLabArgumentError(
                f"blocks={blocks}: every block of both GPUs must run at the same time (block b waits for "
                f"the peer's block b), so at most one per SM: 1..{sms}")
        self.n, self.dtype, self.devices = int(n), np.dtype(dtype), tuple(devices)
        self.blocks, self.threads = int(blocks), int(threads)
        self.epoch = 0
        self.staging, self.flags = [], []
        for d in devices:
            with cupy.cuda.Device(d):
                self.staging.append(cupy.zeros(2 * self.n, self.dtype))
                self.flags.append(cupy.zeros(self.blocks, FLAG_DTYPE))

    def next_epoch(self) -> int:
        self.epoch += 1
        if self.epoch >= np.iinfo(FLAG_DTYPE).max:
            raise OverflowError("the flag words' epoch ran out: make a new OneShotWorkspace")
        return self.epoch


def validate_pair(xs, outs, workspace: OneShotWorkspace) -> None:
    """Same shapes and dtypes, one input and one output on each of the workspace's GPUs."""
    if len(xs) != 2 or len(outs) != 2:
        raise KernelLabArgumentError(f"give one input and one output per GPU: got {len(xs)} inputs, {len(outs)} outputs")
    for what, arrays in (("input", xs), ("output", outs)):
        for g, (a, d) in enumerate(zip(arrays, workspace.devices)):
            if a.ndim != 1 or a.size != workspace.n:
                raise KernelLabArgumentError(
                    f"{what} {g} has shape {a.shape}: the workspace was made for 1-d arrays of {workspace.n} elements")
            if a.dtype != workspace.dtype:
                raise KernelLabArgumentError(f"{what} {g} is {a.dtype}, the workspace {workspace.dtype}: "
                                             "the all-reduce sums like with like")
            dev = getattr(getattr(a, "device", None), "id", d)
            if dev != d:
                raise KernelLabArgumentError(f"{what} {g} lives on GPU {dev}, expected GPU {d}")
    if any(x is o for x, o in zip(xs, outs)):
        raise KernelLabArgumentError("an output is its own input: the peer reads the input while you write the output; "
                                     "give separate arrays")


def one_shot_all_reduce(xs, outs, workspace: OneShotWorkspace, streams=None, *, kernel=None) -> int:
    """``outs[g] = xs[0] + xs[1]`` on both GPUs with one launch each (asynchronous; returns the epoch
    used). ``streams``: one CuPy stream per GPU (default: each device's current stream). ``kernel``:
    a kernel with ``one_shot_kernel``'s arguments (the learner's)."""
    validate_pair(xs, outs, workspace)
    cp = workspace.cp
    kernel = one_shot_kernel if kernel is None else kernel
    epoch = workspace.next_epoch()
    for g, d in enumerate(workspace.devices):
        p = 1 - g
        with cp.cuda.Device(d):
            stream = streams[g] if streams is not None else cp.cuda.get_current_stream()
            with cuda.gpus[d]:
                nb_stream = cuda.external_stream(stream.ptr)
                kernel[workspace.blocks, workspace.threads, nb_stream](
                    xs[g], workspace.staging[g], workspace.staging[p], workspace.flags[g], workspace.flags[p],
                    outs[g], np.int32(epoch))
    return epoch
