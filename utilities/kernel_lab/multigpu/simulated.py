"""Two GPUs in the simulator: the one-shot all-reduce's protocol run as the two halves of one grid,
and its classic mistakes as variants.

``run_two_halves(block_fn, ...)`` launches one grid of ``2B`` blocks: blocks ``0..B-1`` are GPU 0,
``B..2B-1`` GPU 1, each half calling ``block_fn`` (``one_shot.one_shot_block``'s arguments) with its
own input, staging buffer, flags and output, and the other half's staging and flags as the peer's.
Under the interleaved block schedule (``ksim.block_schedule``) the blocks take turns at the atomics,
fences and flag polls in a seeded order. The staging buffers are ``ksim.DelayedStores`` of scope
``"system"``: what a block stores there reaches the other blocks only after its
``cuda.threadfence_system()`` (or when the launch ends), the worst a GPU may do, so a missing fence
gives a wrong sum. The flag words record what was written to them, so a flag that went down (a
reset) can be named. Each launch is one call (one epoch); inputs change from call to call, so data
left from the previous call is wrong.

The same two-halves kernel runs on one real GPU too (both halves as blocks of one grid; all blocks
must be resident at once, so keep ``B`` small).

Variants (each a device function with ``one_shot_block``'s arguments): ``no_fence`` (the flag may
arrive before the data), ``gpu_fence`` (``cuda.threadfence()``, which orders nothing for another
GPU), ``reset_too_early`` (0/1 flags, each block resets its own flag as soon as it has seen the
peer's), ``no_wait`` (the reader reads the peer's data without waiting for its flag).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import cuda

from ..acquire import load_acquire_system
from .one_shot import FLAG_DTYPE, one_shot_block

STALL_LIMIT = 1500  # scheduling points without a memory change before a spinning grid is a hang


class FlagWords:
    """A flag array that remembers the largest value ever stored in each word, and whether a store
    lowered a word (a reset). Kernels use it like the array (atomics included); ``.base`` is the array."""

    def __init__(self, n: int):
        self.base = np.zeros(n, FLAG_DTYPE)
        self.highest = np.zeros(n, np.int64)
        self.lowered: list[tuple[int, int, int]] = []  # (word, from, to)
        self.shape, self.dtype, self.size, self.ndim = self.base.shape, self.base.dtype, self.base.size, 1

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        return self.base[i]

    def __setitem__(self, i, value):
        old = int(self.base[i])
        self.base[i] = value
        new = int(self.base[i])
        if new < old:
            self.lowered.append((int(i), old, new))
        self.highest[i] = max(self.highest[i], new)


def make_two_halves_kernel(block_fn):
    """The one-grid kernel: block ``blockIdx.x`` is block ``blockIdx.x mod B`` of GPU ``blockIdx.x // B``."""

    @cuda.jit
    def two_halves(x0, x1, s0, s1, f0, f1, o0, o1, epoch):
        nblocks = cuda.gridDim.x // 2
        if cuda.blockIdx.x < nblocks:
            block_fn(cuda.blockIdx.x, nblocks, x0, s0, s1, f0, f1, o0, epoch)
        else:
            block_fn(cuda.blockIdx.x - nblocks, nblocks, x1, s1, s0, f1, f0, o1, epoch)

    return two_halves


def call_inputs(n: int, epoch: int):
    """The two GPUs' inputs of call ``epoch``: small integers (sums exact in float32), different for
    each GPU and each call."""
    i = np.arange(n)
    x0 = ((i * 7 + 3 * epoch) % 23 + 1).astype(np.float32)
    x1 = ((i * 5 + 11 * epoch) % 19 + 100).astype(np.float32)
    return x0, x1


@dataclass
class Outcome:
    """What ``run_two_halves`` saw: ``"ok"``, ``"wrong"`` (a sum differs), ``"hang"`` (blocks waited
    forever) or ``"error"`` (the kernel failed otherwise)."""

    kind: str
    seed: int
    epoch: int = 0  # the call that went wrong
    wrong: list[tuple[int, int, float, float]] = field(default_factory=list)  # (gpu, i, got, expected)
    resets: list[tuple[int, int, int, int]] = field(default_factory=list)  # (gpu, word, from, to)
    flags: list[list[int]] = field(default_factory=list)  # after the run, per GPU
    message: str = ""
    staged: bool = True  # did any block publish into a staging buffer (False: the stub, nothing written)


def run_two_halves(block_fn=one_shot_block, *, n: int = 96, blocks: int = 2, threads: int = 32, calls: int = 2,
                   seed: int = 0, scope: str | None = "system", kernel=None) -> Outcome:
    """Run ``calls`` all-reduces (epochs 1..calls) of two simulated GPUs under the interleaved schedule
    ``seed``; ``scope`` is the staging buffers' (``None``: stores visible at once)."""
    from .. import simulator as ksim
    from ..simulator import grid as sim_grid

    kernel = make_two_halves_kernel(block_fn) if kernel is None else kernel
    staging = [ksim.DelayedStores(np.full(2 * n, np.nan, np.float32), scope) for _ in range(2)]
    flags = [FlagWords(blocks) for _ in range(2)]

    def flag_state():
        return [f.base.tolist() for f in flags]

    def resets():
        return [(g, w, a, b) for g, f in enumerate(flags) for (w, a, b) in f.lowered]

    # Seeds take turns: both GPUs' blocks start together; GPU 1 starts late (its blocks begin once
    # GPU 0's all wait at a flag poll or have finished, as when the host launched GPU 1's kernel
    # second); GPU 0 starts late.
    late_gpu = (None, 1, 0)[seed % 3]
    late_blocks = () if late_gpu is None else range(late_gpu * blocks, (late_gpu + 1) * blocks)
    previous_limit = sim_grid.schedule.stall_limit
    sim_grid.schedule.stall_limit = STALL_LIMIT
    try:
        for epoch in range(1, calls + 1):
            x0, x1 = call_inputs(n, epoch)
            outs = [np.full(n, np.nan, np.float32) for _ in range(2)]
            try:
                with ksim.block_schedule("interleaved", seed=seed * 1000 + epoch, late=late_blocks):
                    kernel[2 * blocks, threads](x0, x1, staging[0], staging[1], flags[0], flags[1],
                                                outs[0], outs[1], np.int32(epoch))
            except ksim.GridStall as exc:
                return Outcome("hang", seed, epoch, resets=resets(), flags=flag_state(), message=str(exc))
            expected = x0 + x1
            wrong = [(g, int(i), float(outs[g][i]), float(expected[i]))
                     for g in range(2) for i in np.flatnonzero(outs[g] != expected)]
            if wrong:
                staged = any(not np.isnan(buf.base).all() for buf in staging)
                return Outcome("wrong", seed, epoch, wrong, resets(), flag_state(), staged=staged)
    finally:
        sim_grid.schedule.stall_limit = previous_limit
    return Outcome("ok", seed, calls, resets=resets(), flags=flag_state())


# --- the classic mistakes ---------------------------------------------------------------------------

def _variant(*, fence="system", flags="epoch", wait=True):
    """``one_shot_block``'s protocol with one mistake, chosen by closure constants (each variant compiles
    to its own code): ``fence`` "system", "gpu" (``cuda.threadfence()``, this GPU's scope only) or None;
    ``flags`` "epoch" or "reset" (0/1 flags, each block lowering its own as soon as it has seen the
    peer's, while the peer may not have seen it yet); ``wait`` False: the reader does not wait."""

    @cuda.jit(device=True)
    def block(b, nblocks, x, mine, peer, my_flags, peer_flags, out, epoch):
        t = cuda.threadIdx.x
        n = x.size
        half = (epoch & 1) * n
        stride = nblocks * cuda.blockDim.x
        i = b * cuda.blockDim.x + t
        while i < n:
            mine[half + i] = x[i]
            i += stride
        cuda.syncthreads()
        if t == 0:
            if fence == "system":
                cuda.threadfence_system()
            elif fence == "gpu":
                cuda.threadfence()
            up = epoch if flags == "epoch" else 1
            cuda.atomic.exch(my_flags, b, up)
            if wait:
                while load_acquire_system(peer_flags, b) < up:
                    pass
            if flags == "reset":
                cuda.atomic.exch(my_flags, b, 0)  # ready for the next call... too early
        cuda.syncthreads()
        i = b * cuda.blockDim.x + t
        while i < n:
            out[i] = x[i] + peer[half + i]
            i += stride

    return block


no_fence = _variant(fence=None)  # the flag may arrive before the data
gpu_fence = _variant(fence="gpu")  # orders nothing for another GPU
reset_too_early = _variant(flags="reset")
no_wait = _variant(wait=False)
MISTAKES = {"no_fence": no_fence, "gpu_fence": gpu_fence, "reset_too_early": reset_too_early, "no_wait": no_wait}
