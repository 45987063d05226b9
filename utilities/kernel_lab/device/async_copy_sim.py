"""Hopper's mbarriers and bulk copies in the CUDA simulator: the protocol as Python.

``kernel_lab.device.mbarrier`` and ``kernel_lab.device.bulk_copy`` are one line of PTX each on a GPU;
under the simulator they are the functions below, which keep what the hardware keeps and fail the
way the hardware misbehaves, so that a wrong protocol shows here as it would on an H100:

* **A barrier** (a 64-bit word in shared memory) has an arrival count (set by ``mbarrier_init``),
  the arrivals still pending in the current phase, a transaction count in bytes (tx-count) and a
  phase number. ``arrive`` takes one pending arrival; ``arrive_expect_tx(n)`` adds ``n`` bytes to
  the tx-count, then arrives; a bulk copy subtracts the bytes it delivers. When no arrival is
  pending and the tx-count is 0 the phase completes: the phase number moves on and the pending
  arrivals start again from the count. The state lives here, keyed by the word's address, in a
  state of its own for each block (made fresh when the block starts, so a grid of many blocks,
  one after another or interleaved, never mixes them up); the word itself holds the number of
  completed phases, for anyone who prints it.
* ``try_wait_parity(p)`` is true when the phase of parity ``p`` has completed, that is when the
  current phase's parity is not ``p`` (a fresh barrier is in phase 0, so parity 1 passes at once:
  PTX treats it as the phase before, which counts as complete).
* **A bulk copy** in flight does not land at once. When it is issued, its destination is filled
  with the *in-flight* byte ``IN_FLIGHT_BYTE`` (0x7D); the bytes arrive in pieces of a quarter of
  the copy (16 bytes at least), one piece of every copy in flight each time any thread of the block
  polls a barrier (``try_wait_parity``), and each piece takes its bytes off the tx-count. A kernel
  that reads the destination before its wait succeeded reads 0x7D bytes (:func:`check_no_in_flight`
  names it). A piece stops where the tx-count would reach 0, so a phase whose expect-tx was too
  small completes early with part of the tile still in flight (on a GPU: early, with the rest
  landing later); the rest waits until the barrier's next phase has begun (an arrival or an
  expect-tx), so every reader of the early phase sees it missing, whatever the threads' timing.
  A phase whose expect-tx was too large never completes (a hang).
* Protocol errors that a GPU leaves undefined stop the kernel with :class:`MbarrierProtocolError`,
  naming the thread and line: a barrier used before ``mbarrier_init``, more arrivals than the
  count, a bulk copy on a barrier whose initialisation no fence made visible to the copy engine
  (the async proxy: ``fence_mbarrier_init()`` or ``fence_proxy_async_shared()`` after the init),
  sizes and addresses the instruction does not accept.
* **A hang** (a wait whose phase never completes): each failed try_wait reports its poll to the
  scheduler, so once every thread of the block waits or polls a barrier whose state no longer
  changes (200 failed polls in a row, half a second at least) the launch stops with ``PollStall``,
  a ``KernelDidNotFinish``, in a notebook's own launch too; otherwise under ``simulator.time_limit``
  (or ``kernel_lab.check.finishes_within``) at the limit. Either report
  gains one line per barrier that threads were waiting on, saying why it could not complete: no
  arrival at all in the awaited phase (a wait on the wrong parity, or for an arrive that comes
  after the wait), or every arrival in but tx bytes that no copy will deliver.

* **A bulk store** (``cp_async_bulk_store``, shared -> global) belongs to the issuing thread's
  current *bulk async-group*; ``cp_async_bulk_commit_group()`` closes the group and
  ``cp_async_bulk_wait_group_read(n)`` waits until at most the ``n`` newest of the thread's committed
  groups are still pending. A store reads its shared source and writes global memory only then, so
  global memory holds none of its bytes before. Its source must not change meanwhile: a thread that
  writes the source of a store still pending, found at its next ``fence_proxy_async_shared()`` or bulk
  store (or by the wait, when the issuing thread wrote it), stops the kernel with
  :class:`MbarrierProtocolError` naming the missing wait or commit. A thread that exits with stores no
  wait covered (uncommitted, or in a group no ``cp_async_bulk_wait_group_read`` waited for) stops the
  kernel there, naming the thread and each store's line: nobody can wait for them any more, and on a
  GPU the block's shared memory is released when the block exits while the copy engine may still be
  reading it (the next block on the SM may already be writing it).
* **A store from a tile still being loaded** (a bulk or tensor load into the store's source whose
  bytes have not all landed: its barrier was not waited on) is refused, naming the load.
* **The proxy fence before a store**: the threads' own writes to shared memory (the generic proxy)
  reach the copy engine only through ``fence_proxy_async_shared()``. The model keeps, per shared
  array, its bytes as the copy engine may see them (taken at each such fence, and where a bulk copy
  landed); a store whose source differs from them was written after the last fence (or with none)
  and is refused with a message that names the fence.

Memory written by a copy goes straight to the arrays (the race detector does not see the copy
engine); only C-contiguous arrays are modelled.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from ..simulator.errors import KernelLabSimulatorError
from ..simulator.scheduler import report_poll

IN_FLIGHT_BYTE = 0x7D  # 2.1e37 as float32, NaN as float16, 0x7D7D7D7D as int32, 125 as int8
MAX_COUNT = (1 << 20) - 1  # PTX: arrival counts and tx-counts are 20-bit quantities
POLL_STALL_READS = 200  # failed try_waits in a row, each after a pause, that make a spin (scheduler.poll)
POLL_PAUSE_S = 1e-4  # a failed try_wait gives the other Python threads the interpreter


class MbarrierProtocolError(KernelLabSimulatorError):
    """An mbarrier or bulk copy used against its rules (undefined behaviour on a GPU)."""


class ReadBeforeWait(AssertionError):
    """A kernel's output holds bytes of a bulk copy that had not landed when the kernel read them."""


_lock = threading.RLock()


class _Barrier:
    def __init__(self, name, count, thread_id):
        self.name, self.count = name, count
        self.pending, self.tx, self.phase = count, 0, 0
        self.init_thread, self.fenced = thread_id, False
        self.waiters = {}  # thread id -> parity it waits on


class _Copy:
    def __init__(self, dst, src, barrier, site):
        self.dst, self.src, self.barrier, self.site = dst, src, barrier, site
        self.done = 0
        self.held_phase = None  # set when the barrier completed a phase before the copy ended
        self.piece = max(16, -(-len(dst) // 64) * 16)  # a quarter, rounded up to 16 bytes

    def pending_addresses(self):
        """Host addresses of the destination's bytes that have not landed yet."""
        start = self.dst.__array_interface__["data"][0]
        return np.arange(start + self.done, start + len(self.dst))

    def describe(self):
        return f"a bulk copy of {len(self.dst)} bytes"


class _BlockState:
    def __init__(self, runner):
        self.runner = runner
        self.run = runner.done  # the block's run this state belongs to (a new event each time a block starts)
        self.barriers = {}  # host address of the word -> _Barrier
        self.copies = []
        self.uncommitted = {}  # thread id -> its bulk stores not yet in a group
        self.groups = {}  # thread id -> its committed groups of bulk stores, oldest first
        self.visible = {}  # host address of a shared array -> (its bytes as the async proxy sees them, known mask)

    def notes(self):
        """Lines for a launch that ran out of time: each barrier that threads still waited on."""
        out = []  # without the model's lock: the runner holds its own while it asks (a snapshot will do)
        for b in list(self.barriers.values()):
            waiters = dict(b.waiters)
            if not waiters:
                continue
            parities = sorted(set(waiters.values()))
            who = f"{len(waiters)} threads wait" if len(waiters) > 1 else "1 thread waits"
            head = (f"mbarrier {b.name}: {who} on parity {', '.join(map(str, parities))}; it is in "
                    f"phase {b.phase} (parity {b.phase & 1}), {b.pending} of {b.count} arrivals pending, "
                    f"tx-count {b.tx} bytes")
            in_flight = any(c.barrier is b for c in list(self.copies))
            if b.pending == b.count and b.tx == 0 and not in_flight:
                out.append(head + ": no thread has arrived in this phase, so it never completes. "
                           "A wait on the wrong parity (the phase after the one meant), or a wait for "
                           "an arrive that only comes after the wait?")
            elif b.pending == 0 and b.tx > 0 and not in_flight:
                out.append(head + f": every arrival came, but {b.tx} expected bytes will never arrive "
                           "(no copy on this barrier is in flight): arrive_expect_tx announced more "
                           "bytes than the cp_async_bulk copies carry.")
            elif b.pending > 0:
                out.append(head + f": {b.pending} arrivals never came.")
            else:
                out.append(head + ".")
        return out


def _runner(what):
    from ..simulator.scheduler import current_thread

    thread = current_thread(what)
    return thread, thread.runner


def _state(runner) -> _BlockState:
    """The state of the block ``runner`` runs now, made at the block's first intrinsic call.

    A state belongs to one run of one block: ``runner.done``, the event that ``BlockRunner._run``
    makes each time a block starts, tells runs apart. A runner that ran another block before (whose
    shared arrays may sit at the same host addresses) therefore starts from fresh barriers, copies,
    groups and visible bytes, whatever the simulator does with its runners (numba-cuda 0.30 makes one
    per block). Blocks of an interleaved schedule (``kernel_lab.simulator.block_schedule``) run at
    the same time, each with its own state."""
    with _lock:
        state = runner.__dict__.get("_kernel_lab_async")
        if state is None or state.run is not runner.done:
            state = runner._kernel_lab_async = _BlockState(runner)
        return state


def _current_state(runner):
    """The state of the block ``runner`` runs now, or None if no intrinsic made one."""
    state = runner.__dict__.get("_kernel_lab_async")
    return state if state is not None and state.run is getattr(runner, "done", None) else None


def _install_block_hooks():
    """Two hooks on the simulator's block runner, for every block (they do nothing in a block that
    calls no intrinsic): a thread that exits with bulk stores no wait covered stops the launch
    (:func:`_unwaited_stores_message`), and a launch that ran out of time reports the barriers its
    threads waited on."""
    from ..simulator.scheduler import BlockRunner

    if getattr(BlockRunner, "_kernel_lab_async_hooks", False):
        return
    exited, describe = BlockRunner.thread_exited, BlockRunner._describe_unfinished

    def thread_exited(runner, thread):
        failure = None
        with _lock:
            state = _current_state(runner)
            if state is not None:
                mine = state.uncommitted.pop(thread.thread_id, [])
                mine += [store for group in state.groups.pop(thread.thread_id, []) for store in group]
                if mine and runner.error is None and not runner.aborted:
                    failure = MbarrierProtocolError(_unwaited_stores_message(thread, mine))
        # The runner's lock is taken outside ours, never inside: a time-limit or PollStall report holds
        # the runner's lock while it reads the barriers' notes under ours, so the other order deadlocks.
        if failure is not None:
            runner.thread_failed(thread, failure)
        exited(runner, thread)

    def describe_unfinished(runner):
        text = describe(runner)
        state = _current_state(runner)
        lines = text.splitlines()
        extra = [f"  - {note}" for note in (state.notes() if state is not None else [])]
        at = next((i for i, ln in enumerate(lines) if ln.startswith("Hint:")), len(lines))
        return "\n".join(lines[:at] + extra + lines[at:])

    BlockRunner.thread_exited = thread_exited
    BlockRunner._describe_unfinished = describe_unfinished
    BlockRunner._kernel_lab_async_hooks = True


_install_block_hooks()

_HERE = os.path.dirname(os.path.abspath(__file__))


def _site():
    """The kernel line that called the intrinsic (past this folder's models and the simulator)."""
    from ..simulator.frames import format_site, is_internal

    frame = sys._getframe(1)
    while frame is not None and (os.path.abspath(frame.f_code.co_filename).startswith(_HERE)
                                 or is_internal(frame.f_code.co_filename)):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return format_site((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))


def _fail(thread, message):
    raise MbarrierProtocolError(f"thread {tuple(thread.threadIdx)} of block {tuple(thread.blockIdx)}, at "
                                f"{_site()}: {message}")


def _ndarray(array):
    """The NumPy array behind what a kernel holds: a shared array (bare, or the race detector's
    SharedArray) or a device array (the simulator wraps it twice inside a kernel)."""
    inner = vars(array) if hasattr(array, "__dict__") else {}
    if "_item" in inner:  # FakeWithinKernelCUDAArray (its __getattr__ indexes the array)
        array = inner["_item"]
    slots = getattr(type(array), "__slots__", ())
    if "_data" in slots:  # SharedArray
        return array._data
    if isinstance(array, np.ndarray):
        return array
    ary = vars(array).get("_ary") if hasattr(array, "__dict__") else None  # FakeCUDAArray
    return np.asarray(ary if ary is not None else array)


def _host_range(data):
    start = data.__array_interface__["data"][0]
    return start, start + data.nbytes


def _shared_base(runner, data):
    """(name of the shared array that holds ``data``, its base ndarray), or (None, None)."""
    start, _ = _host_range(data)
    candidates = [_ndarray(a) for a in runner.shared.values()]
    if runner.dynshared is not None:
        candidates.append(runner.dynshared)
    for base in candidates:
        lo, hi = _host_range(base)
        if lo <= start < hi:
            name = runner.shared_names.get(id(base), ("dynamic shared memory", ""))[0]
            return name, base
    return None, None


def _flat_bytes(thread, data, index, nbytes, what):
    """The ``nbytes`` bytes of ``data`` from element ``index`` on, as a uint8 view."""
    if not data.flags.c_contiguous:
        _fail(thread, f"{what}: the simulator models bulk copies of C-contiguous arrays only")
    flat = data.reshape(-1)
    if isinstance(index, tuple):
        index = int(np.ravel_multi_index(tuple(int(i) for i in index), data.shape))
    start = int(index) * data.itemsize
    raw = flat.view(np.uint8)
    if start < 0 or start + nbytes > raw.size:
        _fail(thread, f"{what}: {nbytes} bytes from element {index} run past the end of the array "
                      f"({raw.size} bytes)")
    return raw[start:start + nbytes]


def _barrier(thread, runner, bars, index, what, must_exist=True):
    data = _ndarray(bars)
    if data.itemsize != 8:
        _fail(thread, f"{what}: an mbarrier is a 64-bit word: use a shared array of np.uint64 "
                      f"(got {data.dtype})")
    name, _ = _shared_base(runner, data)
    if name is None:
        _fail(thread, f"{what}: the barrier must be in shared memory (cuda.shared.array(n, np.uint64))")
    word = _flat_bytes(thread, data, index, 8, what)
    address = word.__array_interface__["data"][0]
    if address % 8:
        _fail(thread, f"{what}: the barrier word must be 8-byte aligned")
    state = _state(runner)
    barrier = state.barriers.get(address)
    if barrier is None and must_exist:
        _fail(thread, f"{what}: {name}[{index}] is used before mbarrier_init. One thread initialises it, "
                      "then a fence (fence_mbarrier_init) and cuda.syncthreads() make it visible to the "
                      "others before any of them arrives, waits or copies with it.")
    return state, address, word, f"{name}[{index}]", barrier


def _complete_if_done(barrier, word):
    if barrier.pending == 0 and barrier.tx == 0:
        barrier.phase += 1
        barrier.pending = barrier.count
        word.view(np.uint64)[0] = barrier.phase


def _advance(state):
    """One piece of every copy in flight in the block lands."""
    for copy in list(state.copies):
        b = copy.barrier
        if copy.held_phase == b.phase and b.pending == b.count and b.tx == 0:
            continue  # bytes beyond an early completion: they count in the next phase, once it starts
        amount = min(copy.piece, len(copy.dst) - copy.done)
        if b.pending == 0 and 0 < b.tx < amount:
            amount = b.tx  # the phase completes here; the rest of the copy lands in the next one
        copy.dst[copy.done:copy.done + amount] = copy.src[copy.done:copy.done + amount]
        _seen_by_async_proxy(state, copy.dst[copy.done:copy.done + amount])
        copy.done += amount
        b.tx -= amount
        phase = b.phase
        _complete_if_done(b, copy.word)
        if copy.done == len(copy.dst):
            state.copies.remove(copy)
        elif b.phase != phase:
            copy.held_phase = b.phase


# --- the intrinsics' models ---------------------------------------------------------------------

def mbarrier_init(bars, index, count):
    thread, runner = _runner("mbarrier_init")
    count = int(count)
    if not 1 <= count <= MAX_COUNT:
        _fail(thread, f"mbarrier_init: the arrival count must be 1 .. {MAX_COUNT}, got {count}")
    with _lock:
        state, address, word, name, old = _barrier(thread, runner, bars, index, "mbarrier_init", must_exist=False)
        if old is not None and any(c.barrier is old for c in state.copies):
            _fail(thread, f"mbarrier_init: {name} is initialised again while a bulk copy still completes on it")
        state.barriers[address] = _Barrier(name, count, thread.thread_id)
        word.view(np.uint64)[0] = 0


def mbarrier_arrive(bars, index):
    _arrive(bars, index, 0, "mbarrier_arrive")


def mbarrier_arrive_expect_tx(bars, index, nbytes):
    _arrive(bars, index, nbytes, "mbarrier_arrive_expect_tx")


def _arrive(bars, index, nbytes, what):
    thread, runner = _runner(what)
    nbytes = int(nbytes)
    if not 0 <= nbytes <= MAX_COUNT:
        _fail(thread, f"{what}: the tx-count must be 0 .. {MAX_COUNT} bytes, got {nbytes}")
    with _lock:
        _, _, word, name, b = _barrier(thread, runner, bars, index, what)
        if b.pending == 0:  # cannot happen after a completed phase: only with arrivals beyond the count
            _fail(thread, f"{what}: more arrivals on {name} than its count ({b.count}) in phase {b.phase}: the "
                          "barrier is used for the next round before its phase completed (does every thread "
                          "wait for the phase before the next round arrives?)")
        b.tx += nbytes
        b.pending -= 1
        _complete_if_done(b, word)


def mbarrier_try_wait_parity(bars, index, parity):
    thread, runner = _runner("mbarrier_try_wait_parity")
    parity = int(parity)
    if parity not in (0, 1):
        _fail(thread, f"mbarrier_try_wait_parity: the parity is 0 or 1, got {parity}")
    with _lock:
        state, address, _, name, b = _barrier(thread, runner, bars, index, "mbarrier_try_wait_parity")
        _advance(state)
        done = (b.phase & 1) != parity
        if done:
            b.waiters.pop(thread.thread_id, None)
        else:
            b.waiters[thread.thread_id] = parity
        seen = (b.phase, b.pending, b.tx)
    if not done:
        # A failed try_wait is a poll: when every thread of the block waits or polls a barrier that
        # no longer changes (no arrival to come, no copy landing), the scheduler stops the launch at
        # once (PollStall) instead of letting it spin to a time limit. Outside the model's lock: the
        # report takes the runner's lock, and its barrier lines take ours.
        report_poll((id(state), address, parity), seen, f"mbarrier {name} at a try_wait on parity {parity}",
                    reads=POLL_STALL_READS,
                    shown=f"the same state (phase {seen[0]}, {seen[1]} arrivals pending, tx-count {seen[2]} bytes)")
        time.sleep(POLL_PAUSE_S)
    return done


def _fence(what="fence_mbarrier_init"):
    thread, runner = _runner(what)
    with _lock:
        state = _state(runner)
        for b in state.barriers.values():
            if b.init_thread == thread.thread_id:
                b.fenced = True
    return thread, runner, state


def fence_mbarrier_init():
    _fence()


def fence_proxy_async_shared():
    thread, runner, state = _fence("fence_proxy_async_shared")
    with _lock:
        _check_store_sources(thread, state)
        bases = [_ndarray(a) for a in runner.shared.values()]
        if runner.dynshared is not None:
            bases.append(runner.dynshared)
        for base in bases:
            raw = base.reshape(-1).view(np.uint8)
            state.visible[_host_range(base)[0]] = (raw.copy(), np.ones(raw.size, bool))


def cp_async_bulk(dst, dst_index, src, src_index, nbytes, bars, bar_index):
    what = "cp_async_bulk"
    thread, runner = _runner(what)
    nbytes = int(nbytes)
    if nbytes <= 0 or nbytes % 16:
        _fail(thread, f"{what}: the size must be a positive multiple of 16 bytes, got {nbytes}")
    with _lock:
        state, _, word, name, b = _barrier(thread, runner, bars, bar_index, what)
        if not b.fenced:
            _fail(thread, f"{what}: the initialisation of {name} was not made visible to the copy engine "
                          "(the async proxy): the thread that calls mbarrier_init must call "
                          "fence_mbarrier_init() (or fence_proxy_async_shared()) after it, before the "
                          "cuda.syncthreads() that publishes the barrier.")
        d, s = _ndarray(dst), _ndarray(src)
        if _shared_base(runner, d)[0] is None:
            _fail(thread, f"{what}: the destination must be in shared memory")
        if _shared_base(runner, s)[0] is not None:
            _fail(thread, f"{what}: the source must be in global memory (this form copies global -> shared)")
        d_bytes = _flat_bytes(thread, d, dst_index, nbytes, f"{what} (destination)")
        s_bytes = _flat_bytes(thread, s, src_index, nbytes, f"{what} (source)")
        for which, part in (("destination", d_bytes), ("source", s_bytes)):
            if part.__array_interface__["data"][0] % 16:
                _fail(thread, f"{what}: the {which} address must be 16-byte aligned (element "
                              f"{dst_index if which == 'destination' else src_index} is not)")
        d_bytes[:] = IN_FLIGHT_BYTE
        copy = _Copy(d_bytes, s_bytes, b, _site())
        copy.word = word
        state.copies.append(copy)


def _seen_by_async_proxy(state, part):
    """Bytes the copy engine wrote into shared memory: it sees them without a fence."""
    _, base = _shared_base(state.runner, part)
    if base is None:
        return
    raw = base.reshape(-1).view(np.uint8)
    key = _host_range(base)[0]
    if key not in state.visible:
        state.visible[key] = (np.zeros(raw.size, np.uint8), np.zeros(raw.size, bool))
    seen, known = state.visible[key]
    at = _host_range(part)[0] - key
    seen[at:at + part.size] = part
    known[at:at + part.size] = True


class _Store:
    def __init__(self, dst, src, thread, site, source_name):
        self.dst, self.src, self.site, self.source_name = dst, src, site, source_name
        self.thread = tuple(thread.threadIdx)
        self.issued = src.copy()  # the source as it was when the store was issued
        self.committed = False

    def describe(self):
        return f"the bulk store of {self.source_name} ({self.src.size} bytes)"

    def overwritten(self):
        return not np.array_equal(self.src, self.issued)

    def land(self):
        self.dst[:] = self.src  # what the source holds now: a source written too early corrupts the output


def _pending_stores(state):
    for stores in state.uncommitted.values():
        yield from stores
    for groups in state.groups.values():
        for group in groups:
            yield from group


def _unwaited_stores_message(thread, stores):
    """What a thread that exits with bulk stores no wait covered is told."""
    lines = []
    for store in stores[:3]:
        state = ("committed, but no cp_async_bulk_wait_group_read waited for its group" if store.committed
                 else "never committed (cp_async_bulk_commit_group)")
        lines.append(f"{store.describe()} issued at {store.site}, {state}")
    more = f"; and {len(stores) - 3} more" if len(stores) > 3 else ""
    which = "a bulk store" if len(stores) == 1 else f"{len(stores)} bulk stores"
    return (f"thread {tuple(thread.threadIdx)} of block {tuple(thread.blockIdx)} exits with {which} whose shared "
            f"source the copy engine may not have read yet: {'; '.join(lines)}{more}. When the block exits, its "
            "shared memory is released (the next block on the SM may take it) while the copy engine may still "
            "be reading the tile, and no thread can wait for the store any more: the thread that issued it "
            "calls cp_async_bulk_commit_group() and then cp_async_bulk_wait_group_read(0) before it exits.")


def _loading_into(state, addresses):
    """(the first load in flight whose bytes not yet landed include one of ``addresses`` (host
    addresses of shared memory), how many of its bytes have not landed), or (None, 0)."""
    for copy in state.copies:
        pending = copy.pending_addresses()
        if pending.size and np.isin(addresses, pending).any():
            return copy, int(pending.size)
    return None, 0


def _check_not_loading(thread, state, addresses, source_name, what):
    """A store whose source a load is still filling: the load's barrier was not waited on."""
    copy, left = _loading_into(state, addresses)
    if copy is not None:
        _fail(thread, f"{what}: its source {source_name} is the destination of {copy.describe()} issued at "
                      f"{copy.site}, which has not landed yet ({left} of its bytes still in flight): the "
                      f"store would read them in flight. Wait on the load's barrier ({copy.barrier.name}, "
                      "mbarrier_wait_parity on the phase the load completes) before the store.")


def _overwritten_message(store):
    if store.committed:
        fix = ("its thread must call cp_async_bulk_wait_group_read(0) after the commit (and cuda.syncthreads() "
               "must follow) before any thread writes the tile again")
    else:
        fix = ("the store was never committed: without cp_async_bulk_commit_group() after it, no "
               "cp_async_bulk_wait_group_read waits for it")
    return (f"the shared source of a bulk store ({store.source_name}, {store.src.size} bytes, issued by thread "
            f"{store.thread} at {store.site}) was written again before the copy engine had read it: {fix}. "
            "On a GPU the store may copy the new bytes to global memory (corrupted output).")


def _check_store_sources(thread, state):
    for store in _pending_stores(state):
        if store.overwritten():
            _fail(thread, _overwritten_message(store))


def cp_async_bulk_store(dst, dst_index, src, src_index, nbytes):
    what = "cp_async_bulk_store"
    thread, runner = _runner(what)
    nbytes = int(nbytes)
    if nbytes <= 0 or nbytes % 16:
        _fail(thread, f"{what}: the size must be a positive multiple of 16 bytes, got {nbytes}")
    with _lock:
        state = _state(runner)
        _check_store_sources(thread, state)
        d, s = _ndarray(dst), _ndarray(src)
        source_name, base = _shared_base(runner, s)
        if source_name is None:
            _fail(thread, f"{what}: the source must be in shared memory (this form copies shared -> global)")
        if _shared_base(runner, d)[0] is not None:
            _fail(thread, f"{what}: the destination must be in global memory")
        d_bytes = _flat_bytes(thread, d, dst_index, nbytes, f"{what} (destination)")
        s_bytes = _flat_bytes(thread, s, src_index, nbytes, f"{what} (source)")
        for which, part, index in (("destination", d_bytes, dst_index), ("source", s_bytes, src_index)):
            if part.__array_interface__["data"][0] % 16:
                _fail(thread, f"{what}: the {which} address must be 16-byte aligned (element {index} is not)")
        key = _host_range(base)[0]
        at = _host_range(s_bytes)[0] - key
        _check_not_loading(thread, state, key + at + np.arange(nbytes), source_name, what)
        seen, known = state.visible.get(key, (None, None))
        if seen is None or not known[at:at + nbytes].all() or not np.array_equal(seen[at:at + nbytes], s_bytes):
            _fail(thread, f"{what}: the threads' writes to {source_name} (the generic proxy) were not made "
                          "visible to the copy engine (the async proxy) that reads it: every thread that "
                          "writes the tile calls fence_proxy_async_shared() after its writes, before the "
                          "cuda.syncthreads() that precedes the store (missing fence, or a write after it).")
        state.uncommitted.setdefault(thread.thread_id, []).append(
            _Store(d_bytes, s_bytes, thread, _site(), source_name))


def cp_async_bulk_commit_group():
    thread, runner = _runner("cp_async_bulk_commit_group")
    with _lock:
        state = _state(runner)
        stores = state.uncommitted.pop(thread.thread_id, [])
        for store in stores:
            store.committed = True
        state.groups.setdefault(thread.thread_id, []).append(stores)  # an empty group is a group too


def cp_async_bulk_wait_group_read(n):
    what = "cp_async_bulk_wait_group_read"
    thread, runner = _runner(what)
    n = int(n)
    if n < 0:
        _fail(thread, f"{what}: n is the number of groups that may stay pending, >= 0; got {n}")
    with _lock:
        groups = _state(runner).groups.get(thread.thread_id, [])
        while len(groups) > n:
            for store in groups.pop(0):
                if store.overwritten():
                    _fail(thread, _overwritten_message(store))
                store.land()


# --- reading a kernel's output ------------------------------------------------------------------

def in_flight_mask(array) -> np.ndarray:
    """True where an element's bytes are all ``IN_FLIGHT_BYTE``: data that had not landed when read."""
    data = np.ascontiguousarray(_ndarray(array))
    raw = data.view(np.uint8).reshape(data.size, data.itemsize) if data.size else np.zeros((0, 1), np.uint8)
    return (raw == IN_FLIGHT_BYTE).all(axis=1).reshape(data.shape)


def check_no_in_flight(array, name: str = "output") -> None:
    """Raise :class:`ReadBeforeWait` when ``array`` holds bulk-copy bytes that had not landed."""
    mask = in_flight_mask(array)
    if mask.any():
        first = np.argwhere(mask)[0]
        where = int(first[0]) if len(first) == 1 else tuple(int(i) for i in first)
        raise ReadBeforeWait(
            f"{name}: {int(mask.sum())} of {mask.size} elements hold the in-flight bytes of a bulk copy "
            f"(0x{IN_FLIGHT_BYTE:02X} each; the first at {where}): the kernel read the destination before "
            "its data landed. Read it only after mbarrier_try_wait_parity returned True for that phase: "
            "a missing wait, a wait on the parity of a phase already complete, or an expect-tx smaller "
            "than the copy (the phase completes before all of it lands).")


def functions() -> dict:
    return {"mbarrier_init": mbarrier_init, "mbarrier_arrive": mbarrier_arrive,
                "mbarrier_arrive_expect_tx": mbarrier_arrive_expect_tx,
                "mbarrier_try_wait_parity": mbarrier_try_wait_parity, "fence_mbarrier_init": fence_mbarrier_init,
                "fence_proxy_async_shared": fence_proxy_async_shared, "cp_async_bulk": cp_async_bulk,
                "cp_async_bulk_store": cp_async_bulk_store, "cp_async_bulk_commit_group": cp_async_bulk_commit_group,
                "cp_async_bulk_wait_group_read": cp_async_bulk_wait_group_read}


__all__ = [
    "IN_FLIGHT_BYTE",
    "MbarrierProtocolError",
    "ReadBeforeWait",
    "check_no_in_flight",
    "functions",
    "in_flight_mask",
]
