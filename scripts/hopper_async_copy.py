"""Hopper's bulk copies from Numba, both directions: a round trip through an mbarrier, one that writes
back through the bulk store and its groups, their protocol mutants, and a compile for sm_90a without
a GPU.

The kernel copies ``rounds`` tiles of ``n`` float32 from global memory into one shared tile with
``cp_async_bulk`` (thread 0 issues it) and writes each back, reusing the tile and its two barriers
every round: ``full`` (count 1: the producer's arrive_expect_tx plus the copy's bytes) and ``empty``
(count = the block's threads: each arrives once it has read the tile, so the producer may overwrite
it). Round ``r`` waits on ``full`` with parity ``r & 1``; the producer waits on ``empty`` with
parity ``(r & 1) ^ 1`` (on a fresh barrier parity 1 passes at once, so round 0 does not wait).

``make_round_trip(mutant)`` builds the kernel or one of the classic mistakes (``MUTANTS``).

The second kernel, ``make_store_round_trip(mutant)``, writes back through the bulk store: each round
loads a tile as above (one barrier, ``full``), the threads write twice each value into a second
shared tile, fence it for the copy engine (``fence_proxy_async_shared``) and sync, and thread 0
stores that tile to global memory with ``cp_async_bulk_store``, commits the group and waits until
the store has read the tile (``cp_async_bulk_wait_group_read(0)``) before a second sync lets the
threads overwrite it. Its mistakes are in ``STORE_MUTANTS``. tests/test_async_copy_intrinsics.py runs
both kernels and every mutant in the simulator. Offline (no GPU):

    NUMBA_ENABLE_CUDASIM=0 /tmp/nvenv/bin/python scripts/hopper_async_copy.py --offline

compiles both kernels to PTX for sm_90a with numba-cuda, assembles them with ptxas (from the CUDA
toolkit on PATH), and checks that a compile for sm_80 is refused with kernel_lab's message.
On an H100/H200: ``python scripts/hopper_async_copy.py --gpu`` runs both kernels at 16 B .. 48 KB.
Question it answers: do the intrinsics assemble and run as the simulator's model says?
``--offline`` also compiles 08.1's three kernels (kernel_lab.hopper_async.bulk_copies) at the GPU's sizes.
Result (offline, CUDA 13.0 ptxas, no GPU): both kernels and 08.1's three assemble for sm_90a; the GPU run is
still to be done.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from numba import (
    cuda,  # at module level: the simulator swaps the kernel module's `cuda` for its own
)

ROOT = Path(__file__).resolve().parents[1]

MUTANTS = {
    "wrong parity": "the producer waits on `empty` with parity r & 1 instead of (r & 1) ^ 1 (hangs in round 0)",
    "expect too many": "arrive_expect_tx announces 16 bytes more than the copy carries (the phase never completes)",
    "expect too few": "arrive_expect_tx announces 16 bytes fewer than the copy carries (the phase completes early)",
    "no wait": "the threads read the tile without waiting on `full` (over two rounds the others may arrive "
               "on `empty` twice before thread 0 first waits on it, and thread 0 then waits for ever)",
    "no fence": "thread 0 initialises the barriers without fence_mbarrier_init()",
}
STORE_MUTANTS = {
    "no commit": "thread 0 issues the bulk store without cp_async_bulk_commit_group(), so its wait has no group "
                 "to wait for",
    "no store wait": "thread 0 commits the store but does not call cp_async_bulk_wait_group_read(0) before the "
                     "threads overwrite the shared tile",
    "no proxy fence": "the threads write the tile to store without fence_proxy_async_shared() before the sync",
}
SIZES_BYTES = (16, 48, 256, 4096, 48 * 1024)


def make_round_trip(mutant: str | None = None):
    """The round-trip kernel ``(src, out, n, rounds)``; launch ``[1, threads, 0, 4 * n]``."""
    from kernel_lab.device.bulk_copy import cp_async_bulk
    from kernel_lab.device.mbarrier import (
        fence_mbarrier_init,
        mbarrier_arrive,
        mbarrier_arrive_expect_tx,
        mbarrier_init,
        mbarrier_wait_parity,
    )

    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {', '.join(MUTANTS)}")
    empty_flip = 0 if mutant == "wrong parity" else 1
    extra = {"expect too many": 16, "expect too few": -16}.get(mutant, 0)
    wait_full = mutant != "no wait"
    fence = mutant != "no fence"

    @cuda.jit
    def round_trip(src, out, n, rounds):
        tile = cuda.shared.array(0, np.float32)
        bars = cuda.shared.array(2, np.uint64)  # 0: full, 1: empty
        tid = cuda.threadIdx.x
        nbytes = 4 * n
        if tid == 0:
            mbarrier_init(bars, 0, 1)
            mbarrier_init(bars, 1, cuda.blockDim.x)
            if fence:
                fence_mbarrier_init()
        cuda.syncthreads()
        for r in range(rounds):
            if tid == 0:
                mbarrier_wait_parity(bars, 1, (r & 1) ^ empty_flip)  # everyone has read round r - 1
                mbarrier_arrive_expect_tx(bars, 0, nbytes + extra)
                cp_async_bulk(tile, 0, src, r * n, nbytes, bars, 0)
            if wait_full:
                mbarrier_wait_parity(bars, 0, r & 1)
            for i in range(tid, n, cuda.blockDim.x):
                out[r * n + i] = tile[i]
            mbarrier_arrive(bars, 1)

    return round_trip


def make_store_round_trip(mutant: str | None = None):
    """The kernel ``(src, out, n, rounds)`` that writes ``out = 2 * src`` back through bulk stores;
    launch ``[1, threads, 0, 8 * n]`` (two tiles of shared memory)."""
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk,
        cp_async_bulk_commit_group,
        cp_async_bulk_store,
        cp_async_bulk_wait_group_read,
        fence_proxy_async_shared,
    )
    from kernel_lab.device.mbarrier import (
        fence_mbarrier_init,
        mbarrier_arrive_expect_tx,
        mbarrier_init,
        mbarrier_wait_parity,
    )

    if mutant is not None and mutant not in STORE_MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {', '.join(STORE_MUTANTS)}")
    commit = mutant != "no commit"
    wait = mutant != "no store wait"
    fence = mutant != "no proxy fence"

    @cuda.jit
    def store_round_trip(src, out, n, rounds):
        tile = cuda.shared.array(0, np.float32)  # [0, n): the tile loaded; [n, 2n): the tile stored
        bars = cuda.shared.array(1, np.uint64)
        tid = cuda.threadIdx.x
        nbytes = 4 * n
        if tid == 0:
            mbarrier_init(bars, 0, 1)
            fence_mbarrier_init()
        cuda.syncthreads()
        for r in range(rounds):
            if tid == 0:
                mbarrier_arrive_expect_tx(bars, 0, nbytes)
                cp_async_bulk(tile, 0, src, r * n, nbytes, bars, 0)
            mbarrier_wait_parity(bars, 0, r & 1)
            for i in range(tid, n, cuda.blockDim.x):
                tile[n + i] = 2 * tile[i]
            if fence:
                fence_proxy_async_shared()  # the writes above, made visible to the copy engine
            cuda.syncthreads()
            if tid == 0:
                cp_async_bulk_store(out, r * n, tile, n, nbytes)
                if commit:
                    cp_async_bulk_commit_group()
                if wait:
                    cp_async_bulk_wait_group_read(0)  # the store has read the tile
            cuda.syncthreads()  # both tiles may be written again

    return store_round_trip


def _make_store_only():
    """A bulk store of the first ``n`` floats of a shared tile (the offline check's sm_80 refusal)."""
    from kernel_lab.device.bulk_copy import (
        cp_async_bulk_commit_group,
        cp_async_bulk_store,
        cp_async_bulk_wait_group_read,
    )

    @cuda.jit
    def store_only(src, out, n, rounds):
        tile = cuda.shared.array(0, np.float32)
        cp_async_bulk_store(out, 0, tile, 0, 4 * n)
        cp_async_bulk_commit_group()
        cp_async_bulk_wait_group_read(0)

    return store_only


def run_round_trip(kernel, nbytes: int, rounds: int = 2, threads: int = 32, seed: int = 0, tiles: int = 1):
    """Launch on random input; returns (input, output) as host arrays. ``tiles``: shared tiles of
    ``nbytes`` each (2 for the store round trip)."""
    n = nbytes // 4
    src = np.random.default_rng(seed).standard_normal(rounds * n).astype(np.float32)
    out = np.zeros_like(src)
    d_src, d_out = cuda.to_device(src), cuda.to_device(out)
    from kernel_lab import on_simulator

    if tiles * nbytes > 32 * 1024 and not on_simulator():
        # the barriers are static shared memory too: 48 KB of tiles needs the opt-in past 48 KB in all
        from kernel_lab.tensor_cores.toolchain import set_max_dynamic_shared_memory

        set_max_dynamic_shared_memory(kernel, (d_src, d_out, n, rounds), tiles * nbytes)
    kernel[1, threads, 0, tiles * nbytes](d_src, d_out, n, rounds)
    return src, d_out.copy_to_host()


def _ptx(cc, make=None):
    from numba import types

    kernel = (make or make_round_trip)()
    sig = (types.float32[::1], types.float32[::1], types.int32, types.int32)
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
    return ptx


def offline() -> int:
    import offline_sm90 as off

    off.pretend_hopper()  # a device function (mbarrier_wait_parity) asks the current GPU for its cc
    kernels = {
        "round_trip": (make_round_trip, (
            "mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
            "mbarrier.try_wait.parity.shared::cta.b64", "fence.mbarrier_init.release.cluster",
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")),
        "store_round_trip": (make_store_round_trip, (
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", "fence.proxy.async.shared::cta",
            "cp.async.bulk.global.shared::cta.bulk_group", "cp.async.bulk.commit_group",
            "cp.async.bulk.wait_group.read 0")),
    }
    ok = True
    for name, (make, needed) in kernels.items():
        ptx = _ptx((9, 0, "a"), make)
        missing = [s for s in needed if s not in ptx]
        if missing:
            print(f"{name}: FAILED: the PTX lacks", missing)
            return 1
        target = next(ln for ln in ptx.splitlines() if ln.startswith(".target"))
        print(f"{name}: PTX for {target.split()[1]}: {len(ptx)} characters, every instruction present")
        ok &= off.assemble(name, ptx)
    ok &= _offline_notebook_kernels(off)
    kernels["store_only"] = (_make_store_only, ())  # the store's own refusal, with no mbarrier before it
    for name, (make, _needed) in kernels.items():
        ok &= off.refused_below_hopper(name, lambda make=make: _ptx((8, 0), make))
    return 0 if ok else 1


def _offline_notebook_kernels(off) -> bool:
    """08.1's three kernels (the package's copies, kernel_lab.hopper_async.bulk_copies) at the GPU's
    sizes: PTX for sm_90a, assembled by ptxas."""
    from numba import types

    from kernel_lab.hopper_async import bulk_copies as bc

    f32 = types.float32[::1]
    ok = True
    for kernel, sig in ((bc.tile_copy, (f32, f32)), (bc.rounds_copy, (f32, f32, types.int64)),
                        (bc.ring_copy, (f32, f32, types.int64))):
        name = kernel.py_func.__name__
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0, "a"))
        ok &= off.assemble_checked(name, ptx, ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",),
                                   prefix="08.1 ")
    return ok


def gpu() -> int:
    failed = 0
    for name, kernel, tiles, factor in (("round trip", make_round_trip(), 1, 1),
                                        ("store round trip", make_store_round_trip(), 2, 2)):
        for nbytes in SIZES_BYTES:
            if tiles * nbytes > 96 * 1024:
                continue  # run_round_trip opts in past 48 KB; 2 x 48 KB is as far as this goes
            src, out = run_round_trip(kernel, nbytes, tiles=tiles)
            ok = np.array_equal(factor * src, out)
            failed += not ok
            print(f"{name}: {nbytes:6d} B x 2 rounds: {'ok' if ok else 'WRONG'}")
    return 1 if failed else 0


def main():
    import offline_sm90

    return offline_sm90.main(__doc__, offline, gpu, "run the round trips on the GPU")


if __name__ == "__main__":
    sys.exit(main())
