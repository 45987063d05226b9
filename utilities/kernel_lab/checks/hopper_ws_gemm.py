"""Module 08's checks for 08.4: the learner's producer and consumer of the warp-specialised, persistent
GEMM, run inside the package's kernel (:func:`kernel_lab.hopper_async.ws_gemm.make_ws_gemm`) with the
simulator's models of the mbarriers, the tensor copies and wgmma, or on a Hopper GPU.

fp16 inputs, float32 accumulation: the reference is the float64 product of the same fp16 values, and
an element of C passes when it is within ``tolerance("float32", K) x (|A| |B|)[i, j]`` of it (as
08.3's checks). C is poisoned with NaN before each launch, so an element no consumer stored shows.

The cases, at this backend's sizes (``ws_gemm.BN``, ``ws_gemm.STAGES``): one tile and one K-tile on
one block; then three tiles on two blocks with ``STAGES + 1`` K-tiles each, so that block 0 walks two
tiles (the grid-stride walk wraps) and makes ``2 (STAGES + 1)`` loads, which take every stage through
at least two uses (phases of both parities), and the count of loads ``q`` runs on from one tile into
the next (a ring restarted at each tile would wait on the wrong phase).

In the simulator every launch is bounded (``check.finishes_within``): a protocol mistake either stops
the kernel with the model's message or hangs, and the hang's report lists the barriers waited on.
The classic mistakes, and what the check says:

* **a wait on the wrong parity** (the consumer's ``(q // STAGES) & 1`` flipped, or the producer's
  wait not one phase behind): a wait that passes at once lets a wgmma read a stage whose boxes are
  still landing (the wgmma model names the load in flight), or one that never passes hangs (the
  report names the barrier, its phase and who waits);
* **expect-tx bytes wrong**: too few, and the phase completes while a box is in flight (the tensor
  copy model stops there, naming the box); too many, and ``full`` never completes (the report names
  the bytes that will never come);
* **a consumer that never arrives on empty**: the producer waits for ever for the stage's release
  (the report names ``empty``);
* **a stage released before its wgmma group completed** (``release`` before ``wgmma_wait_group``, or
  of the stage still in use): the producer's next load into that stage overwrites a tile a wgmma
  still reads (the wgmma model names the write between issue and wait), or the result is wrong.
"""

from __future__ import annotations

import numpy as np

from .. import progress
from ..check import CheckFailed, finishes_within
from ..environment import on_simulator
from ..hopper_async import ws_gemm as ws
from .hopper_wgmma import _compare

SMALL_S = 120  # a case takes seconds in the simulator (384 threads a block); a hang stops at once or after this

PRODUCER_HINT = ("for each of the block's tiles (tile = blockIdx.x, + gridDim.x, ...) and each K-tile kt: s, parity = "
                 "ring_slot(q); wait on empty[s] with parity ^ 1 (the consumers' release of the stage's last use; "
                 "it passes at once the first time round); mbarrier_arrive_expect_tx(full, s, STAGE_BYTES) (both "
                 "boxes' bytes); the two tensor loads at x = kt * BK, y = row0 (A) and y = col0 (B) into "
                 "stage_a(t0, s) and stage_b(t0, s), completing on full[s]; q += 1 (q counts across tiles).")
CONSUMER_HINT = ("q counts the K-tiles across tiles, as the producer's does. For each K-tile: s, parity = "
                 "ring_slot(q); wait on full[s] with parity; acc = mma_ktile(...); wgmma_wait_group(1), after "
                 "which K-tile q - 1's group is done and release(empty, (q - 1) % STAGES) may hand its stage back "
                 "(not in a tile's first K-tile: the previous tile released its last one); after the tile's last "
                 "K-tile wgmma_wait_group(0), release the last stage, then store the fragment.")


def _candidates(a, b):
    """Wrong products a classic mistake gives, each with its sentence."""
    m = a.shape[0]
    upper = a.copy()
    for r0 in range(0, m, ws.BM):
        upper[r0 + 64:r0 + ws.BM] = a[r0:r0 + 64]
    text = ("each tile's lower 64 rows equal to its upper 64 rows' product: both consumers read the same rows of "
            "A's box (consumer `half` multiplies rows 64 half .. 64 half + 63)")
    return [(text, upper @ b)]


def _cases():
    bn, stages = ws.BN, ws.STAGES  # the labels name no size: a GPU and the simulator print the same line
    return [("one tile, one K-tile", (ws.BM, bn, ws.BK), 1),
            ("3 tiles on 2 blocks, STAGES + 1 K-tiles each", (ws.BM, 3 * bn, (stages + 1) * ws.BK), 2)]


def _run(where: str, kernel, dims, blocks: int, seconds: float, hint: str, seed: int) -> None:
    from numba import cuda

    m, n, k = dims
    a16, b16, bt16 = ws.gemm_inputs(m, n, k, seed)
    d_c = cuda.to_device(np.full((m, n), np.nan, np.float32))
    d_a, d_bt = cuda.to_device(a16), cuda.to_device(bt16)

    def launch():
        ws.launch_ws_gemm(kernel, d_c, d_a, d_bt, blocks=blocks)

    if on_simulator():
        from ..device.async_copy_sim import MbarrierProtocolError
        from ..device.wgmma_sim import WgmmaProtocolError

        try:
            with finishes_within(where, seconds, hint):
                launch()
        except (MbarrierProtocolError, WgmmaProtocolError) as exc:
            raise CheckFailed(f"{where}: {exc}") from None
    else:
        launch()
        cuda.synchronize()
    a, b = a16.astype(np.float64), b16.astype(np.float64)
    _compare(where, d_c.copy_to_host(), a, b, _candidates(a, b), hint)


def check_ws_gemm(produce, consume, name: str = "warp-specialised GEMM", hint: str | None = None) -> None:
    """``produce`` and ``consume`` (device functions with the signatures of
    :func:`kernel_lab.hopper_async.ws_gemm.produce` and ``consume``) inside the package's kernel, through
    the cases of this module's docstring. ``hint``: the exercise's (both by default)."""
    hint = hint or (PRODUCER_HINT + " " + CONSUMER_HINT)
    kernel = ws.make_ws_gemm(produce, consume)
    cases = _cases()
    for seed, (label, dims, blocks) in enumerate(cases):
        _run(f"{name} ({label})", kernel, dims, blocks, SMALL_S, hint, seed)
    progress.passed(name)
    print(f"{name}: correct for all {len(cases)} cases ({', '.join(c[0] for c in cases)})")


def check_producer(produce, name: str = "producer") -> None:
    """Exercise 1: the learner's ``produce`` with the package's consumer."""
    check_ws_gemm(produce, ws.consume, name, PRODUCER_HINT)


def check_consumer(consume, produce=None, name: str = "consumer") -> None:
    """Exercise 2: the learner's ``consume`` with ``produce`` (the learner's, or the package's)."""
    check_ws_gemm(produce or ws.produce, consume, name, CONSUMER_HINT)


__all__ = ["check_consumer", "check_producer", "check_ws_gemm"]
