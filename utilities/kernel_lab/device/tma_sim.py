"""Hopper's tensor copies (:mod:`kernel_lab.device.tma`) in the CUDA simulator, built on the bulk-copy model.

The barrier, the copies that land in pieces and the bulk async-groups are those of
:mod:`kernel_lab.device.async_copy_sim` (its lock, block state, ``_Copy`` and ``_Store``); this module adds
what a tensor map changes:

* **The load** reads the box at column ``x``, row ``y`` of the map's array (zeros for the elements
  outside it), lays it out in shared memory in the map's swizzle order
  (:func:`kernel_lab.device.tensor_map.box_offsets`, from the tile's address) and lands it in pieces on
  the barrier as ``cp_async_bulk`` does: the box's bytes are filled with the in-flight byte 0x7D when
  the copy is issued, each poll of a barrier lands a quarter of them and takes them off the tx-count.
  Bytes of the tile that the box does not cover (a row's padding up to the swizzle span) are left alone.
* **The store** belongs to the issuing thread's bulk async-group and lands at the
  ``cp_async_bulk_wait_group_read`` that covers it: the part of the box inside the array is written,
  the rest is dropped. Its source is checked as a bulk store's is (not a tile whose load is still in
  flight, the proxy fence before it, no write before the wait, no exit before the wait).
* **Named mistakes** (:class:`MbarrierProtocolError`, with the thread and the kernel line): a tensor
  map not acquired by the block (``fence_proxy_tensormap_acquire``); a box past the shared tile (the
  tile too small for ``tmap.smem_bytes`` from the given element); a tile not 128-byte aligned (the
  CUDA Programming Guide's TMA alignment table; the swizzle pattern is taken from the address); a map
  of another element type than the tile's; a store whose box starts at negative coordinates (the
  Guide: not allowed for shared -> global); coordinates beyond 32 bits; and expect-tx bytes that are
  not the box's: too few, and the barrier's phase completes while a tensor copy is still in flight
  (stopped there, naming the box and its bytes); too many, and the phase never completes (the time
  limit's report gains a line naming the box).
* ``shared_address(array, i)`` is the element's host address modulo 2**32: its alignment is the
  alignment the model checks, so ``tile_start`` finds the same 1024-byte boundary the model uses.

Not modelled: the ``.sys``-scope ordering of the host's write of the map (the model only asks that a
thread of the block acquired the map before a copy with it), L2 promotion, multicast, clusters.
"""

from __future__ import annotations

import numpy as np

from .async_copy_sim import (
    IN_FLIGHT_BYTE,
    MbarrierProtocolError,
    _barrier,
    _check_not_loading,
    _check_store_sources,
    _Copy,
    _fail,
    _host_range,
    _lock,
    _ndarray,
    _runner,
    _shared_base,
    _site,
    _state,
    _Store,
)
from .tensor_map import TensorMap2D

__all__ = ["MbarrierProtocolError", "functions"]

TILE_ALIGN = 128  # bytes: a tensor copy's shared-memory address (CUDA C++ Programming Guide, TMA section)
_INT32 = (-(1 << 31), (1 << 31) - 1)


class _TmaState:
    def __init__(self):
        self.fenced = set()  # (blockIdx, id(map)) of the maps a block acquired
        self.loads = []  # (barrier, phase at issue, description, site, box bytes) for the time-limit report


def _tma_state(runner) -> _TmaState:
    with _lock:
        state = runner.__dict__.get("_kernel_lab_tma")
        if state is None:
            _state(runner)  # the bulk-copy model's notes first, ours after them
            state = runner._kernel_lab_tma = _TmaState()
            _add_box_notes(runner, state)
        return state


def _add_box_notes(runner, tstate):
    original = runner._describe_unfinished

    def describe():
        text = original()
        lines = text.splitlines()
        extra = [f"  - {note}" for note in _box_notes(runner, tstate)]
        at = next((i for i, ln in enumerate(lines) if ln.startswith("Hint:")), len(lines))
        return "\n".join(lines[:at] + extra + lines[at:])

    runner._describe_unfinished = describe


def _box_notes(runner, tstate):
    out = []
    with _lock:
        state = _state(runner)
        for b in state.barriers.values():
            if not b.waiters or b.pending or b.tx <= 0 or any(c.barrier is b for c in state.copies):
                continue
            loads = [rec for rec in tstate.loads if rec[0] is b and rec[1] == b.phase]
            if not loads:
                continue
            total = sum(rec[4] for rec in loads)
            what = "; ".join(f"{rec[2]} at {rec[3]}" for rec in loads[:3]) + ("; ..." if len(loads) > 3 else "")
            out.append(f"mbarrier {b.name}: the tensor copies of this phase ({what}) have all landed, "
                       f"{total} bytes, and {b.tx} announced bytes will never come: arrive_expect_tx must "
                       "announce exactly the boxes' bytes (box rows x box cols x element size, tmap.box_bytes), "
                       "not the tile's size in shared memory.")
    return out


class _Scatter:
    """The destination of a tensor load as ``_Copy`` sees it: its bytes in landing order (by address),
    scattered over the tile. Slicing gives the span of shared memory the slice covers (what the async
    proxy has seen), assignment writes the bytes where the layout puts them."""

    def __init__(self, raw, index):
        self.raw, self.index = raw, index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, part):
        where = self.index[part]
        return self.raw[where[0]:where[-1] + 1] if len(where) else self.raw[0:0]

    def __setitem__(self, part, values):
        self.raw[self.index[part]] = values


class _TensorCopy(_Copy):
    """A ``_Copy`` that stops the kernel when its barrier's phase completes before it has landed:
    the expect-tx of that phase was smaller than the boxes' bytes."""

    def __init__(self, dst, src, barrier, site, description, box_bytes):
        super().__init__(dst, src, barrier, site)
        self.description, self.box_bytes = description, box_bytes

    def pending_addresses(self):
        return self.dst.raw.__array_interface__["data"][0] + self.dst.index[self.done:]

    def describe(self):
        return f"the tensor load of {self.description}"

    @property
    def held_phase(self):
        return self._held

    @held_phase.setter
    def held_phase(self, phase):
        self._held = phase
        if phase is None:
            return
        thread, _ = _runner("mbarrier_try_wait_parity")
        left = len(self.dst) - self.done
        _fail(thread, f"mbarrier {self.barrier.name} completed its phase {phase - 1} while the tensor copy issued at "
                      f"{self.site} ({self.description}) still had {left} of its {self.box_bytes} bytes in flight: "
                      "the arrive_expect_tx of that phase announced fewer bytes than its tensor copies deliver. A "
                      f"tensor copy delivers the whole box, rows x cols x element size = {self.box_bytes} bytes "
                      "(tmap.box_bytes; the elements outside the array count too, as zeros).")


class _TensorStore(_Store):
    def __init__(self, tmap, x, y, tile, rel, thread, site, source_name):
        super().__init__(None, tile, thread, site, source_name)
        self.tmap, self.x, self.y, self.rel = tmap, x, y, rel

    def describe(self):
        return f"the tensor store of {self.source_name} to {_describe(self.tmap, self.x, self.y)}"

    def land(self):
        values = np.ascontiguousarray(self.src[self.rel]).view(self.tmap.dtype).reshape(self.tmap.box)
        self.tmap.write_box(self.x, self.y, values)


def _describe(tmap, x, y):
    rows, cols = tmap.box
    return f"the {rows} x {cols} {tmap.dtype} box at x={x}, y={y} of {tmap!r}, {tmap.box_bytes} bytes"


def _map(thread, tmap, what):
    if not isinstance(tmap, TensorMap2D):
        _fail(thread, f"{what}: the tensor map argument must be the TensorMap2D object itself (passed to the kernel "
                      f"as an argument), got {type(tmap).__name__}")
    return tmap


def _coords(thread, x, y, what):
    x, y = int(x), int(y)
    for name, v in (("x", x), ("y", y)):
        if not _INT32[0] <= v <= _INT32[1]:
            _fail(thread, f"{what}: the coordinate {name}={v} is past the tensor map's 32-bit signed coordinates")
    return x, y


def _require_acquired(thread, runner, tmap, what):
    if (tuple(thread.blockIdx), id(tmap)) not in _tma_state(runner).fenced:
        _fail(thread, f"{what}: {tmap!r} is used before this block acquired it. The map lives in global memory, "
                      "written by the host before the launch, and the copy engine reads it through the tensormap "
                      "proxy: call fence_proxy_tensormap_acquire(tmap) (fence.proxy.tensormap::generic.acquire.sys) "
                      "once per block, in the thread that issues the copies, before its first copy with the map.")


def _tile(thread, runner, array, index, tmap, what, role):
    """(base bytes of the shared array, offset of the tile in them, the tile's address, the tile's bytes)."""
    data = _ndarray(array)
    name, base = _shared_base(runner, data)
    if name is None:
        _fail(thread, f"{what}: the {role} must be in shared memory (the other side is the tensor map's array)")
    if data.dtype != tmap.dtype:
        _fail(thread, f"{what}: {tmap!r} describes {tmap.dtype} elements, but the shared tile {name} holds "
                      f"{data.dtype}: a tensor map is built for one element type; build it from an array of the "
                      "tile's type, or declare the tile with the map's type")
    if not data.flags.c_contiguous:
        _fail(thread, f"{what}: the simulator models tiles in C-contiguous shared arrays only")
    raw = data.reshape(-1).view(np.uint8)
    if isinstance(index, tuple):
        index = int(np.ravel_multi_index(tuple(int(i) for i in index), data.shape))
    start = int(index) * data.itemsize
    need = tmap.smem_bytes
    if start < 0 or start + need > raw.size:
        layout = (f"{tmap.box[0]} rows of {tmap.swizzle} bytes (the swizzle span)" if tmap.swizzle
                  else f"{tmap.box[0]} rows of {tmap.box[1] * tmap.dtype.itemsize} bytes")
        _fail(thread, f"{what}: the box of {tmap!r} takes {need} bytes of shared memory ({layout}) from "
                      f"{name}[{index}], but {name} has {max(raw.size - start, 0)} bytes from there: the box "
                      "runs past the tile (on a GPU the copy writes over whatever follows it). Make the tile "
                      "tmap.smem_bytes long from its start (plus the slack tile_start skips).")
    tile = raw[start:start + need]
    address = tile.__array_interface__["data"][0]
    if address % TILE_ALIGN:
        _fail(thread, f"{what}: the tile {name}[{index}] starts {address % TILE_ALIGN} bytes past a 128-byte "
                      "boundary; a tensor copy's shared-memory address must be 128-byte aligned (and the swizzle "
                      "pattern is read from the address): start it at tile_start(smem, 1024).")
    base_raw = base.reshape(-1).view(np.uint8)
    return name, base_raw, address - _host_range(base)[0], address, tile


def _byte_offsets(tmap, address):
    """(rows, cols, itemsize) byte offsets of the box's bytes from the tile's start."""
    itemsize = tmap.dtype.itemsize
    return tmap.offsets(address)[:, :, None] + np.arange(itemsize)


# --- the intrinsics' models ---------------------------------------------------------------------

def fence_proxy_tensormap_acquire(tmap):
    what = "fence_proxy_tensormap_acquire"
    thread, runner = _runner(what)
    _map(thread, tmap, what)
    with _lock:
        _tma_state(runner).fenced.add((tuple(thread.blockIdx), id(tmap)))


def cp_async_bulk_tensor_2d_load(dst, dst_index, tmap, x, y, bars, bar_index):
    what = "cp_async_bulk_tensor_2d_load"
    thread, runner = _runner(what)
    tmap = _map(thread, tmap, what)
    x, y = _coords(thread, x, y, what)
    with _lock:
        tstate = _tma_state(runner)
        state, _, word, name, b = _barrier(thread, runner, bars, bar_index, what)
        if not b.fenced:
            _fail(thread, f"{what}: the initialisation of {name} was not made visible to the copy engine "
                          "(the async proxy): the thread that calls mbarrier_init must call "
                          "fence_mbarrier_init() (or fence_proxy_async_shared()) after it, before the "
                          "cuda.syncthreads() that publishes the barrier.")
        _require_acquired(thread, runner, tmap, what)
        _, base_raw, at, address, _tile_bytes = _tile(thread, runner, dst, dst_index, tmap, what, "destination")
        index = (at + _byte_offsets(tmap, address)).reshape(-1)
        values = np.ascontiguousarray(tmap.read_box(x, y)).view(np.uint8).reshape(-1)
        order = np.argsort(index, kind="stable")
        base_raw[index] = IN_FLIGHT_BYTE
        site = _site()
        description = _describe(tmap, x, y)
        copy = _TensorCopy(_Scatter(base_raw, index[order]), values[order].copy(), b, site, description,
                           tmap.box_bytes)
        copy.word = word
        state.copies.append(copy)
        tstate.loads.append((b, b.phase, description, site, tmap.box_bytes))


def cp_async_bulk_tensor_2d_store(tmap, x, y, src, src_index):
    what = "cp_async_bulk_tensor_2d_store"
    thread, runner = _runner(what)
    tmap = _map(thread, tmap, what)
    x, y = _coords(thread, x, y, what)
    if x < 0 or y < 0:
        _fail(thread, f"{what}: the box starts at x={x}, y={y}; a store's box may reach past the array's end but "
                      "not start before it (negative coordinates: the CUDA Programming Guide, TMA section)")
    with _lock:
        state = _state(runner)
        _check_store_sources(thread, state)
        _require_acquired(thread, runner, tmap, what)
        source_name, base_raw, at, address, tile = _tile(thread, runner, src, src_index, tmap, what, "source")
        rel = _byte_offsets(tmap, address).reshape(-1)
        key = _host_range(base_raw)[0]
        where = at + rel
        _check_not_loading(thread, state, key + where, source_name, what)
        seen, known = state.visible.get(key, (None, None))
        if seen is None or not known[where].all() or not np.array_equal(seen[where], base_raw[where]):
            _fail(thread, f"{what}: the threads' writes to {source_name} (the generic proxy) were not made "
                          "visible to the copy engine (the async proxy) that reads it: every thread that "
                          "writes the tile calls fence_proxy_async_shared() after its writes, before the "
                          "cuda.syncthreads() that precedes the store (missing fence, or a write after it).")
        state.uncommitted.setdefault(thread.thread_id, []).append(
            _TensorStore(tmap, x, y, tile, rel, thread, _site(), source_name))


def shared_address(array, index):
    data = _ndarray(array)
    if isinstance(index, tuple):
        index = int(np.ravel_multi_index(tuple(int(i) for i in index), data.shape))
    return (data.__array_interface__["data"][0] + int(index) * data.itemsize) & 0xFFFFFFFF


def functions() -> dict:
    return {"cp_async_bulk_tensor_2d_load": cp_async_bulk_tensor_2d_load,
            "cp_async_bulk_tensor_2d_store": cp_async_bulk_tensor_2d_store,
            "fence_proxy_tensormap_acquire": fence_proxy_tensormap_acquire, "shared_address": shared_address}
