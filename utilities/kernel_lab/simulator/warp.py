"""Warp-level functions under the simulator, with the GPU's semantics.

A warp is 32 threads of a block with consecutive linear ids (x fastest, then y, then z): threads
0-31 are warp 0, 32-63 warp 1, and so on; a thread's lane is its linear id modulo 32. When the
block size is not a multiple of 32 the last warp is partial: lanes past the end of the block do
not exist.

Every ``*_sync`` function takes a mask naming the lanes that take part. As on the GPU:

* the calling lane must be in the mask (else `WarpMaskError`);
* the function waits until every lane named in the mask has called it with the same mask; lanes
  that do not exist or have returned from the kernel are not waited for (they cannot come);
* every lane named in one mask must call the same function (else `WarpMaskError`).

Shuffles follow the PTX ``shfl.sync`` rules exactly, including ``width`` segments: ``shfl_up``/
``shfl_down`` whose source falls outside the lane's segment return the caller's own value;
``shfl_sync`` takes the source lane modulo ``width``; ``shfl_xor`` may read from an earlier
segment but not from a later one. A source lane that is inside the segment but not taking part
(outside the mask, returned, or nonexistent) gives an undefined value on a GPU; here it gives an
`UndefinedValue`, which raises `UndefinedShuffleValue` only when a lane actually uses it.

Votes (``all_sync``, ``any_sync``, ``eq_sync``, ``ballot_sync``) and ``match_*_sync`` consider
the lanes that took part: non-existent and returned lanes count as absent (for ``ballot`` their bit
is 0), as the CUDA guide specifies for non-exited threads. Return types follow numba-cuda:
``ballot_sync`` and ``match_any_sync`` give int32 (so lane 31 makes it negative), the votes give
bool, ``activemask()`` and ``lanemask_lt()`` give uint32.

``width`` is a simulator extension: CUDA C's ``__shfl_*_sync`` take it, numba-cuda's do not, so a
kernel that passes it will not compile on a GPU. The simulator warns once per call site.
"""

import warnings

import numpy as np

from .errors import WarpMaskError
from .frames import caller_site, format_dim3, format_site
from .scheduler import current_thread
from .undefined import UndefinedValue

IDX, UP, DOWN, BFLY = "idx", "up", "down", "bfly"
FULL_MASK = 0xFFFFFFFF


def _int32(mask):
    """A 32-bit mask as NumPy int32, as numba-cuda's ballot_sync/match_any_sync return it."""
    return np.uint32(mask & FULL_MASK).view(np.int32)


def source_lane(mode, lane, b, width=32):
    """The lane a shuffle of `mode` reads from, or `lane` itself when PTX says "keep your own".

    This is PTX's shfl.sync rule with segment width `width`: ``b`` is used modulo 32, the segment
    of a lane is the `width` lanes around it, and a source beyond the segment's end (or, for
    ``up``, before its start) falls back to the caller's own value.
    """
    segmask = (32 - width) & 0x1F
    cval = 0 if mode == UP else 0x1F
    b5 = b & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask & 0x1F)
    min_lane = lane & segmask
    if mode == UP:
        j = lane - b5
        ok = j >= max_lane
    elif mode == DOWN:
        j = lane + b5
        ok = j <= max_lane
    elif mode == BFLY:
        j = lane ^ b5
        ok = j <= max_lane
    else:
        j = min_lane | (b5 & ~segmask & 0x1F)
        ok = j <= max_lane
    return j if ok else lane


def _lane_text(thread):
    return (
        f"lane {thread.lane} of warp {thread.warp_id} (thread {format_dim3(thread.threadIdx)} "
        f"of block {format_dim3(thread.blockIdx)})"
    )


_warned_width_sites = set()


def _check_width(op, width):
    if width == 32:
        return
    site = caller_site()
    if width not in (1, 2, 4, 8, 16, 32):
        raise WarpMaskError(
            f"cuda.{op} with width={width}: the width must be a power of two from 1 to 32.\n"
            f"  at {format_site(site)}"
        )
    if site[:2] not in _warned_width_sites:
        _warned_width_sites.add(site[:2])
        warnings.warn_explicit(
            f"cuda.{op}(..., width={width}) runs under the simulator, but numba-cuda's shuffles "
            "take no width argument: this kernel will not compile on a GPU. Compute the source "
            "lane of your segment yourself instead, e.g. "
            "cuda.shfl_sync(mask, v, (lane & ~(width - 1)) + src).",
            UserWarning,
            site[0],
            site[1],
        )


def _compute_shuffle(rendezvous, warp, runner):
    payloads, present = rendezvous.payloads, rendezvous.arrived
    results = {}
    for lane, (mode, value, b, width) in payloads.items():
        j = source_lane(mode, lane, b, width)
        if j == lane:
            results[lane] = value
        elif (present >> j) & 1:
            results[lane] = payloads[j][1]
        else:
            thread = warp.threads[lane]
            if not (rendezvous.mask >> j) & 1:
                why = f"which is not in the mask {rendezvous.mask:#010x}"
            elif not (warp.exists >> j) & 1:
                why = (
                    f"which does not exist (the block has {runner.nthreads} threads, so warp "
                    f"{warp.index} only has lanes 0-{warp.nlanes - 1}; a mask on a partial last "
                    "warp should name only the lanes that exist)"
                )
            else:
                why = "which has already returned from the kernel"
            origin = (
                f"cuda.{rendezvous.op} read it from lane {j}, {why}.\n"
                f"  shuffled at {format_site(thread.wait_site)}"
            )
            results[lane] = UndefinedValue(origin, _lane_text(thread))
    return results


def _shuffle(op, mode, mask, value, b, width):
    thread = current_thread(op)
    width = int(width)
    _check_width(op, width)
    payload = (mode, value, int(b), width)
    return thread.runner.warp_collective(thread, op, mask, payload, _compute_shuffle)


def shfl_sync(mask, value, src_lane, width=32):
    """The `value` of lane `src_lane` (modulo `width`) of the caller's segment."""
    return _shuffle("shfl_sync", IDX, mask, value, src_lane, width)


def shfl_up_sync(mask, value, delta, width=32):
    """The `value` of lane ``laneid - delta``; the caller's own if that is outside its segment."""
    return _shuffle("shfl_up_sync", UP, mask, value, delta, width)


def shfl_down_sync(mask, value, delta, width=32):
    """The `value` of lane ``laneid + delta``; the caller's own if that is outside its segment."""
    return _shuffle("shfl_down_sync", DOWN, mask, value, delta, width)


def shfl_xor_sync(mask, value, lane_mask, width=32):
    """The `value` of lane ``laneid ^ lane_mask`` (the butterfly pattern of reductions)."""
    return _shuffle("shfl_xor_sync", BFLY, mask, value, lane_mask, width)


def _vote(op, mask, predicate, combine):
    thread = current_thread(op)
    payload = bool(predicate)  # evaluated by the calling lane, so a misuse points at its line
    return thread.runner.warp_collective(thread, op, mask, payload, combine)


def _all(rendezvous, warp, runner):
    result = all(rendezvous.payloads.values())
    return dict.fromkeys(rendezvous.payloads, result)


def _any(rendezvous, warp, runner):
    result = any(rendezvous.payloads.values())
    return dict.fromkeys(rendezvous.payloads, result)


def _eq(rendezvous, warp, runner):
    result = len(set(rendezvous.payloads.values())) == 1
    return dict.fromkeys(rendezvous.payloads, result)


def _ballot(rendezvous, warp, runner):
    bits = 0
    for lane, predicate in rendezvous.payloads.items():
        if predicate:
            bits |= 1 << lane
    return dict.fromkeys(rendezvous.payloads, _int32(bits))


def all_sync(mask, predicate):
    """True if `predicate` is true for every lane taking part."""
    return _vote("all_sync", mask, predicate, _all)


def any_sync(mask, predicate):
    """True if `predicate` is true for at least one lane taking part."""
    return _vote("any_sync", mask, predicate, _any)


def eq_sync(mask, predicate):
    """True if `predicate` has the same truth value in every lane taking part."""
    return _vote("eq_sync", mask, predicate, _eq)


def ballot_sync(mask, predicate):
    """Bit i set if lane i takes part and its `predicate` is true (int32, like numba-cuda)."""
    return _vote("ballot_sync", mask, predicate, _ballot)


def _match_key(value):
    if type(value) is UndefinedValue:
        value._used("in cuda.match_any_sync / match_all_sync")
    a = np.asarray(value)
    return (a.dtype.str, a.tobytes())


def _match_any(rendezvous, warp, runner):
    groups = {}
    for lane, key in rendezvous.payloads.items():
        groups[key] = groups.get(key, 0) | (1 << lane)
    return {lane: _int32(groups[key]) for lane, key in rendezvous.payloads.items()}


def _match_all(rendezvous, warp, runner):
    same = len(set(rendezvous.payloads.values())) == 1
    result = (_int32(rendezvous.arrived), True) if same else (_int32(0), False)
    return dict.fromkeys(rendezvous.payloads, result)


def match_any_sync(mask, value):
    """The mask of lanes taking part whose `value` equals the caller's (bitwise), as int32."""
    thread = current_thread("match_any_sync")
    return thread.runner.warp_collective(
        thread, "match_any_sync", mask, _match_key(value), _match_any
    )


def match_all_sync(mask, value):
    """``(mask of lanes taking part, True)`` if all their values are equal, else ``(0, False)``."""
    thread = current_thread("match_all_sync")
    return thread.runner.warp_collective(
        thread, "match_all_sync", mask, _match_key(value), _match_all
    )


def _nothing(rendezvous, warp, runner):
    return dict.fromkeys(rendezvous.payloads)


def syncwarp(mask=FULL_MASK):
    """Wait for the lanes of `mask`; shared-memory accesses before it are visible after it."""
    thread = current_thread("syncwarp")
    thread.runner.warp_collective(thread, "syncwarp", mask, None, _nothing)


def activemask():
    """The lanes of the caller's warp that are here together (uint32).

    A GPU reports the lanes that currently execute together. The simulator waits until every
    other lane of the warp has returned or is waiting elsewhere (a barrier, a warp function, a
    different activemask call) and reports the lanes that reached this same call: what a warp
    that runs converged would report. Like on a GPU, this is not a synchronisation.
    """
    thread = current_thread("activemask")
    return thread.runner.converge(thread)


def lanemask_lt():
    """Bits of the lanes below the caller's lane (uint32): ``(1 << laneid) - 1``."""
    thread = current_thread("lanemask_lt")
    return np.uint32((1 << thread.lane) - 1)


FUNCTIONS = {
    "shfl_sync": shfl_sync,
    "shfl_up_sync": shfl_up_sync,
    "shfl_down_sync": shfl_down_sync,
    "shfl_xor_sync": shfl_xor_sync,
    "all_sync": all_sync,
    "any_sync": any_sync,
    "eq_sync": eq_sync,
    "ballot_sync": ballot_sync,
    "match_any_sync": match_any_sync,
    "match_all_sync": match_all_sync,
    "syncwarp": syncwarp,
    "activemask": activemask,
    "lanemask_lt": lanemask_lt,
}
