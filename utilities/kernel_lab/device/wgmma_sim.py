"""Hopper's ``wgmma`` in the CUDA simulator: :mod:`kernel_lab.device.wgmma` as Python.

* **Descriptors.** ``wgmma_desc(tile, index, lbo, sbo, swizzle)`` encodes the tile's address in a
  made-up shared window of the block: each shared array (and the dynamic shared memory) gets its own
  range there, starting at a multiple of 1024 bytes, as ``cuda.shared.array(n, dtype,
  alignment=1024)`` gives on a GPU. An element that is not 16-byte aligned is refused (the
  descriptor drops the low 4 bits of the address).
* **The product.** Every thread of the warpgroup calls ``wgmma_mma_async_*`` with the same
  descriptors. The model decodes them, gathers A (64 x K) and B (stored N x K) from the block's
  shared memory through the canonical K-major layouts and the swizzle (``wgmma.TileLayout`` lays
  tiles out the same way), and computes the thread's own fragment of ``D = A B (+ D)`` in float64
  (exact int64 for int8, wrapped to int32), in the register layout of the PTX manual
  (``wgmma.fragment_coordinates``).
* **Asynchrony.** The call returns at once an accumulator that is *in flight*: an array whose
  values (NaN, or 0x7D7D7D7D for int32) are filled when a ``wgmma_wait_group`` covers its group.
  Passing it to the next ``mma_async`` is allowed (the tensor cores chain them); reading it
  before the wait stops the kernel with :class:`WgmmaProtocolError`. The tiles are read at issue
  and again at the wait: a tile written in between is named too (the tensor cores may read it at
  any moment until the wait).
* **Named mistakes** (:class:`WgmmaProtocolError`, with the thread and the kernel's line): an
  ``mma_async`` before any ``wgmma_fence()`` of the thread, or on accumulators written by other code
  with no fence since the last wait; an accumulator read before the wait that covers it (or never
  committed); a kernel that ends with ``mma_async`` groups never waited on (or never committed); a
  ``mma_async`` that reads shared bytes a bulk or tensor copy has not delivered yet (a wait on the
  wrong parity, or none, before the wgmma: checked at issue against the copies in flight of
  :mod:`kernel_lab.device.async_copy_sim`); a
  descriptor whose swizzled tile does not start at its pattern's boundary (1024, 512 or 256 bytes
  for 128-, 64- and 32-byte swizzle), whose base offset is not 0, or whose K-step crosses a
  swizzled row; a tile read past the end of its array; a block without the whole warpgroup, and a
  warpgroup whose threads did not all issue the same number of ``mma_async``.

Not modelled: the ``fence_proxy_async_shared()`` that threads' own writes to a tile need before a
wgmma reads it (use it, as on a GPU), register-sourced A, MN-major (transposed) operands, and the
race detector does not see the tensor cores' reads. Slow-ish (a gather and a small product per thread
and call): for tests at one or a few tiles.
"""

from __future__ import annotations

import threading

import numpy as np

from ..simulator.errors import KernelLabSimulatorError
from . import async_copy_sim as _acs
from .wgmma_layout import (
    K_BYTES,
    SWIZZLE_CODES,
    VALID_N,
    decode_desc,
    encode_desc,
    fragment_coordinates,
    swizzle_address,
)

WINDOW_ALIGN = 1024
IN_FLIGHT = {"f32": np.float32(np.nan), "s32": np.int32(0x7D7D7D7D)}
_FRAGMENT = {n: fragment_coordinates(n) for n in range(8, 257, 8)}


class WgmmaProtocolError(KernelLabSimulatorError):
    """A wgmma instruction used against its rules (undefined behaviour on a GPU)."""


_lock = threading.RLock()


def _fail(thread, message):
    raise WgmmaProtocolError(f"thread {tuple(thread.threadIdx)} of block {tuple(thread.blockIdx)}, at "
                             f"{_acs._site()}: {message}")


class _Op:
    """One thread's ``mma_async``: what it read, where its result goes."""

    def __init__(self, kind, n, desc_a, desc_b, acc_in, scale_d, out, site):
        self.kind, self.n, self.desc_a, self.desc_b = kind, n, int(desc_a), int(desc_b)
        self.acc_in, self.scale_d, self.out, self.site = acc_in, scale_d, out, site
        self.a_seen, self.b_seen = None, None
        self.committed = False


class _Fragment(np.ndarray):
    """An accumulator returned by ``wgmma_mma_async_*``: in flight until a wait covers its group."""

    def __array_finalize__(self, obj):
        self._op = getattr(obj, "_op", None)

    def _check(self):
        op = self._op
        if op is not None:
            thread, _ = _acs._runner("reading a wgmma accumulator")
            how = ("and no wgmma_wait_group covered it yet" if op.committed else
                   "and it was never committed: wgmma_commit_group() closes the group that a wait covers")
            _fail(thread, f"an accumulator of the wgmma_mma_async at {op.site} is read before the tensor "
                          f"cores wrote it: the wgmma is asynchronous, {how}. Call wgmma_commit_group() and "
                          "wgmma_wait_group(0) (or n, leaving the n newest groups in flight) before reading it.")

    def __getitem__(self, key):
        self._check()
        return np.ndarray.__getitem__(self, key)

    def __iter__(self):
        self._check()
        return np.ndarray.__iter__(self.view(np.ndarray))

    def __float__(self):
        self._check()
        return np.ndarray.__float__(self)


class _Thread:
    def __init__(self):
        self.fenced_ever = False
        self.fenced_since_wait = False
        self.uncommitted = []
        self.groups = []
        self.issued = 0


class _Block:
    def __init__(self):
        self.windows = []  # (window offset, base ndarray, name)
        self.next_window = 0
        self.threads = {}
        self.issued = {}  # thread id -> mma_async calls, at exit
        self.index_cache = {}

    def thread(self, tid) -> _Thread:
        state = self.threads.get(tid)
        if state is None:
            state = self.threads[tid] = _Thread()
        return state

    def window_of(self, base, name) -> int:
        start = _acs._host_range(base)[0]
        for off, b, _ in self.windows:
            if _acs._host_range(b)[0] == start and b.nbytes == base.nbytes:
                return off
        off = self.next_window
        self.windows.append((off, base, name))
        self.next_window = off + -(-base.nbytes // WINDOW_ALIGN) * WINDOW_ALIGN
        if self.next_window > 0x40000:
            raise WgmmaProtocolError("wgmma_desc: the block's shared arrays pass 256 KB, more than the 18 bits "
                                     "of address a descriptor holds")
        return off

    def array_at(self, address):
        for off, base, name in self.windows:
            if off <= address < off + base.nbytes:
                return off, base, name
        return None


def _block(runner) -> _Block:
    with _lock:
        blocks = runner.__dict__.get("_kernel_lab_wgmma")
        if blocks is None:
            blocks = runner._kernel_lab_wgmma = {}
            _check_at_exit(runner, blocks)
        key = tuple(runner.blockIdx)
        if key not in blocks:
            blocks[key] = _Block()
        return blocks[key]


def _check_at_exit(runner, blocks):
    """A thread that ends with wgmmas in flight, and a warpgroup whose threads issued different
    numbers of them, stop the launch with a named error."""
    original = runner.thread_exited

    def thread_exited(thread):
        error = None
        with _lock:
            block = blocks.setdefault(tuple(thread.blockIdx), _Block())  # threads that issued no wgmma count too
            if runner.error is None:
                state = block.threads.get(thread.thread_id)
                if state is not None and (state.uncommitted or state.groups):
                    pending = len(state.uncommitted) + sum(len(g) for g in state.groups)
                    site = (state.uncommitted or [op for g in state.groups for op in g])[0].site
                    never = ("never committed (wgmma_commit_group) nor waited on" if state.uncommitted
                             else "committed but never waited on")
                    error = WgmmaProtocolError(
                        f"thread {tuple(thread.threadIdx)} of block {tuple(thread.blockIdx)} ended with {pending} "
                        f"wgmma_mma_async still in flight (the first at {site}), {never}: before the kernel ends "
                        "(and before the accumulators are read) call wgmma_commit_group() and wgmma_wait_group(0).")
                if state is not None:
                    block.issued[thread.thread_id] = state.issued
                last = runner.alive == 1  # (threads that exited before the first wgmma call were not seen here)
                if error is None and last and block.issued:
                    error = _uneven_warpgroups(block, runner.nthreads)
        if error is not None:
            runner.thread_failed(thread, error)
        original(thread)

    runner.thread_exited = thread_exited


def _uneven_warpgroups(block, nthreads):
    for wg in range(-(-nthreads // 128)):
        counts = {t: block.issued.get(t, 0) for t in range(128 * wg, min(128 * wg + 128, nthreads))}
        if len(set(counts.values())) > 1:
            most = max(counts.values())
            short = [t for t, c in counts.items() if c < most]
            return WgmmaProtocolError(
                f"warpgroup {wg} (threads {128 * wg}..{128 * wg + 127}): {len(short)} of its threads (the first: "
                f"{short[0]}) issued fewer wgmma_mma_async than the others ({min(counts.values())} instead of {most}). "
                "wgmma is .sync.aligned: all 128 threads of the warpgroup issue each one together, with the "
                "same descriptors (no branch that only some of them take).")
    return None


# --- the intrinsics' models -----------------------------------------------------------------------

def wgmma_desc(array, index, lbo, sbo, swizzle):
    thread, runner = _acs._runner("wgmma_desc")
    swizzle = int(swizzle)
    if swizzle not in SWIZZLE_CODES:
        _fail(thread, f"wgmma_desc: swizzle is 0, 32, 64 or 128 (bytes), got {swizzle}")
    data = _acs._ndarray(array)
    with _lock:
        name, base = _acs._shared_base(runner, data)
        if name is None:
            _fail(thread, "wgmma_desc: the tile must be in shared memory (wgmma reads its operands there)")
        element = _acs._flat_bytes(thread, data, index, data.itemsize, "wgmma_desc")
        offset = _acs._host_range(element)[0] - _acs._host_range(base)[0]
        address = _block(runner).window_of(base, name) + offset
    if address % 16:
        _fail(thread, f"wgmma_desc: {name}[{index}] is {offset} bytes into the array, not a multiple of 16: a "
                      "descriptor holds the address without its low 4 bits, so a tile starts 16-byte aligned")
    return np.uint64(encode_desc(address, int(lbo), int(sbo), swizzle))


def wgmma_fence():
    thread, runner = _acs._runner("wgmma_fence")
    with _lock:
        state = _block(runner).thread(thread.thread_id)
        state.fenced_ever = state.fenced_since_wait = True


def wgmma_commit_group():
    thread, runner = _acs._runner("wgmma_commit_group")
    with _lock:
        state = _block(runner).thread(thread.thread_id)
        for op in state.uncommitted:
            op.committed = True
        state.groups.append(state.uncommitted)
        state.uncommitted = []


def wgmma_wait_group(n):
    thread, runner = _acs._runner("wgmma_wait_group")
    n = int(n)
    if n < 0:
        _fail(thread, f"wgmma_wait_group: n (the groups left in flight) is >= 0, got {n}")
    with _lock:
        block = _block(runner)
        state = block.thread(thread.thread_id)
        state.fenced_since_wait = False
        while len(state.groups) > n:
            for op in state.groups.pop(0):
                _complete(thread, block, op)


def _gather(thread, block, desc, rows, kind, what):
    """The ``rows x K`` operand a descriptor points at, as float64 (int64 for int8)."""
    fields = decode_desc(desc)
    key = (int(desc), rows, kind)
    cached = block.index_cache.get(key)
    if cached is None:
        start, lbo, sbo, sw = fields["address"], fields["lbo"], fields["sbo"], fields["swizzle"]
        found = block.array_at(start)
        if found is None:
            _fail(thread, f"{what}: the descriptor's address {start:#x} is in no shared array that wgmma_desc "
                          "described in this block")
        off, base, name = found
        if sw:
            if fields["base_offset"]:
                _fail(thread, f"{what}: the descriptor's base offset is {fields['base_offset']}; the model supports "
                              "0 only: start the swizzled tile at its pattern's boundary")
            row_start = start - start % sw
            if row_start % (8 * sw):
                _fail(thread, f"{what}: a {sw}-byte swizzled tile repeats its pattern every {8 * sw} bytes and must "
                              f"start at a multiple of {8 * sw} (with base offset 0), but the descriptor's row starts "
                              f"{row_start - off} bytes into {name} (shared address {row_start:#x}). Align the tile "
                              "(cuda.shared.array(..., alignment=1024)) and move the start only within a row "
                              "(the K-steps: 32 bytes each)")
            if start % sw + K_BYTES > sw:
                _fail(thread, f"{what}: the K-step starts {start % sw} bytes into a {sw}-byte swizzled row and "
                              f"its {K_BYTES} bytes would cross the row's end")
        r = np.arange(rows)[:, None]
        kb = np.arange(K_BYTES)[None, :]
        if sw == 0:
            addr = start + (r // 8) * sbo + (r % 8) * 16 + (kb // 16) * lbo + kb % 16
        else:
            addr = swizzle_address(start + (r // 8) * sbo + (r % 8) * sw + kb, sw)
        addr = addr - off
        if addr.min() < 0 or addr.max() >= base.nbytes:
            _fail(thread, f"{what}: the descriptor (lbo {lbo}, sbo {sbo}, swizzle {sw}) reads {rows} rows "
                          f"that run past the end of {name} ({base.nbytes} bytes)")
        cached = block.index_cache[key] = (base, addr)
    base, addr = cached
    raw = base.reshape(-1).view(np.uint8)
    if kind == "s8":
        return raw.view(np.int8)[addr].astype(np.int64)
    bits = raw[addr[:, 0::2]].astype(np.uint16) | (raw[addr[:, 1::2]].astype(np.uint16) << 8)
    if kind == "bf16":
        import ml_dtypes

        return bits.view(ml_dtypes.bfloat16).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def _make_mma(kind):
    name = f"wgmma_mma_async_{kind}"
    acc_kind = "s32" if kind == "s8" else "f32"
    acc_dtype = np.int32 if kind == "s8" else np.float32

    def mma(desc_a, desc_b, acc, scale_d):
        thread, runner = _acs._runner(name)
        nthreads = runner.nthreads
        wg = thread.thread_id // 128
        if 128 * (wg + 1) > nthreads:
            _fail(thread, f"{name}: the block has {nthreads} threads, so warpgroup {wg} has only "
                          f"{nthreads - 128 * wg} of its 128: a wgmma needs four whole warps (launch a multiple "
                          "of 128 threads)")
        values = np.asarray(acc).view(np.ndarray) if isinstance(acc, _Fragment) else np.asarray(acc)
        n = 2 * values.size
        if n not in VALID_N[kind]:
            _fail(thread, f"{name}: N = {n} (2 x the accumulator's length) is not a shape of wgmma.mma_async "
                          f"for {kind}: {VALID_N[kind]}")
        with _lock:
            block = _block(runner)
            state = block.thread(thread.thread_id)
            if not state.fenced_ever:
                _fail(thread, f"{name} before any wgmma_fence() of this thread: the first wgmma_mma_async (and "
                              "any after the accumulators were written by other instructions) must follow a "
                              "wgmma_fence(), which orders the registers and shared memory written before it")
            chained = isinstance(acc, _Fragment)
            if not chained and not state.fenced_since_wait and state.issued:
                _fail(thread, f"{name}: the accumulator was written by other code (it is not what an earlier "
                              "wgmma_mma_async returned), and no wgmma_fence() came since the last "
                              "wgmma_wait_group: call wgmma_fence() before this wgmma")
            site = _acs._site()
            out = np.full(n // 2, IN_FLIGHT[acc_kind], acc_dtype).view(_Fragment)
            op = _Op(kind, n, desc_a, desc_b, acc, int(scale_d), out, site)
            op.a_seen = _gather(thread, block, desc_a, 64, kind, f"{name} (A)")
            op.b_seen = _gather(thread, block, desc_b, n, kind, f"{name} (B)")
            _check_landed(thread, runner, block, desc_a, 64, kind, "A")
            _check_landed(thread, runner, block, desc_b, n, kind, "B")
            out._op = op
            state.uncommitted.append(op)
            state.issued += 1
        return out

    return mma


def _check_landed(thread, runner, block, desc, rows, kind, which):
    """Stop a wgmma that reads shared bytes a bulk or tensor copy has not delivered yet (its barrier's
    phase was not waited for: a wait on the wrong parity, no wait, or an expect-tx too small)."""
    state = _acs._current_state(runner)
    copies = list(state.copies) if state is not None else []
    if not copies:
        return
    base, addr = block.index_cache[(int(desc), rows, kind)]
    start = _acs._host_range(base)[0]
    lo, hi = start + int(addr.min()), start + int(addr.max())
    for copy in copies:
        pending = copy.pending_addresses()
        if not pending.size or pending.max() < lo or pending.min() > hi:
            continue
        if np.isin(start + addr.reshape(-1), pending).any():
            _fail(thread, f"the wgmma reads {which}'s tile while {copy.describe()} (issued at {copy.site}) is still "
                          "landing in it: the tensor cores would read bytes that have not arrived. Wait on the "
                          "stage's full barrier for the phase that load completes (parity (q // STAGES) & 1 for "
                          "the stage's q-th use) before the wgmma, with expect-tx = all the stage's bytes.")


def _complete(thread, block, op):
    a = _gather(thread, block, op.desc_a, 64, op.kind, "wgmma_wait_group (A)")
    b = _gather(thread, block, op.desc_b, op.n, op.kind, "wgmma_wait_group (B)")
    if not (np.array_equal(a, op.a_seen, equal_nan=True) and np.array_equal(b, op.b_seen, equal_nan=True)):
        which = "A" if not np.array_equal(a, op.a_seen, equal_nan=True) else "B"
        _fail(thread, f"the shared tile of {which} of the wgmma_mma_async at {op.site} was written while the wgmma "
                      "was in flight (between its issue and the wgmma_wait_group that covers it): the tensor "
                      "cores read it at any moment until the wait. Wait first, or write another stage.")
    coords = _FRAGMENT[op.n][thread.thread_id % 128]
    rows = np.array([coords[0, 0], coords[2, 0]])  # registers 0 and 2 hold the thread's two rows
    product = a[rows] @ b.T  # 2 x N
    acc_in = op.acc_in.view(np.ndarray) if isinstance(op.acc_in, _Fragment) else np.asarray(op.acc_in)
    if isinstance(op.acc_in, _Fragment) and op.acc_in._op is not None:
        _fail(thread, "internal: a chained accumulator completed out of order")
    d = product[(coords[:, 0] != rows[0]).astype(int), coords[:, 1]]
    if op.kind == "s8":
        total = d.astype(np.int64) + (acc_in.astype(np.int64) if op.scale_d else 0)
        values = ((total + 2**31) % 2**32 - 2**31).astype(np.int32)
    else:
        values = (d + (acc_in.astype(np.float64) if op.scale_d else 0.0)).astype(np.float32)
    op.out.view(np.ndarray)[:] = values
    op.out._op = None


def setmaxnreg(n, how):
    thread, _ = _acs._runner(f"setmaxnreg_{how}")
    n = int(n)
    if not (24 <= n <= 256 and n % 8 == 0):
        _fail(thread, f"setmaxnreg_{how}: n is a multiple of 8 in 24 .. 256, got {n}")


def functions() -> dict:
    return {"wgmma_fence": wgmma_fence, "wgmma_commit_group": wgmma_commit_group,
            "wgmma_wait_group": wgmma_wait_group, "wgmma_desc": wgmma_desc,
            "wgmma_mma_async_f16": _make_mma("f16"), "wgmma_mma_async_bf16": _make_mma("bf16"),
            "wgmma_mma_async_s8": _make_mma("s8"), "wgmma_fence_operand": lambda acc: acc,
            "wgmma_acc_f32": lambda n: np.zeros(int(n) // 2, np.float32),
            "wgmma_acc_s32": lambda n: np.zeros(int(n) // 2, np.int32),
            "setmaxnreg_inc": lambda n: setmaxnreg(n, "inc"), "setmaxnreg_dec": lambda n: setmaxnreg(n, "dec")}


__all__ = ["IN_FLIGHT", "WgmmaProtocolError", "functions"]
