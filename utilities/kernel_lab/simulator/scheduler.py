"""Runs one thread block of a simulated kernel, with barriers that cannot hang.

Numba's simulator runs each CUDA thread of a block as a Python thread. This module replaces its
`BlockManager` (which polls the threads in a busy loop) with `BlockRunner`, which keeps, under one
lock, the state of every thread: running, blocked (and on what), or exited. Three kinds of things
make threads wait:

* the block barrier, ``cuda.syncthreads()`` and its ``_count``/``_and``/``_or`` variants: it opens
  when every thread of the block that has not returned has arrived (as on Volta and newer GPUs,
  where threads that returned no longer take part in barriers);
* a warp rendezvous, for ``shfl_*_sync``, the ``*_sync`` votes, ``match_*_sync`` and
  ``syncwarp``: it completes when every lane named in the mask that exists and has not returned
  has arrived with the same warp function and the same mask;
* a convergence point, for ``activemask()``: it completes when every other lane of the warp has
  returned or is waiting somewhere else; its result is the set of lanes that arrived, which is
  what a GPU reports for a warp that runs converged.

Because every wait is registered, the runner knows at once when all threads that have not returned
are waiting and nothing can complete: that is a deadlock, reported as `DeadlockError` with who
waits where, instead of hanging the notebook. A timeout (``settings.hang_timeout_s`` without any
progress) is kept only for what cannot be seen, such as a thread spinning in an endless loop. A
loop that never ends but keeps meeting in warp functions looks like progress: under a time limit
(``settings.deadline``, set by `settings.time_limit`), a block still running at the deadline stops
with `KernelDidNotFinish`, naming the lines its threads are at.

A spin on a flag is seen without a time limit where it is certain to be endless: reads that may
poll (acquire and volatile loads, an mbarrier's try_wait) report what they read (`poll`). When every
thread that has not returned either waits or has read one unchanged value `POLL_STALL_READS` times
in a row, and blocks run one at a time (no interleaved schedule, so no other block runs meanwhile),
nothing can change what they read: `PollStall` (a `KernelDidNotFinish`) names the pollers.

When a thread fails, the runner records the first error, wakes every waiting thread so that it
unwinds, and re-raises the error in the launching (main) thread.
"""

import sys
import threading
import time
import types

import numpy as np

from .bounds import translate_failure
from .errors import (
    DeadlockError,
    KernelDidNotFinish,
    KernelLabSimulatorError,
    PollStall,
    SharedMemoryRace,
    WarpMaskError,
)
from .frames import (
    caller_site,
    format_dim3,
    format_lanes,
    format_site,
    is_internal,
    source_line,
    user_frame,
)
from .settings import settings

RUNNING, BLOCKED, EXITED = "running", "blocked", "exited"
FULL_MASK = 0xFFFFFFFF

# A poll that can never end (`BlockRunner.poll`): this many reads in a row of one unchanged value by
# every thread that is not waiting. Large, because a thread may poll while it also changes memory
# the others read (a loop that counts and gives up): at Python's pace this is a second or two.
# A poller's last read must be recent (POLL_STALL_FRESH_S) for it to count as spinning still.
POLL_STALL_READS = 20000
POLL_STALL_MIN_S = 0.5  # and for at least this long
NEVER_FINISHES = "the kernel can never finish: "  # PollStall's first words (check.finishes_within reads them)
POLL_STALL_FRESH_S = 1.0


class Abort(BaseException):
    """Unwinds a simulated thread after another thread of its block failed (never shown)."""


class RaiseInThread:
    """A warp result that is an error, to be raised by the lane that receives it."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


class _Wait:
    """Something threads wait on. Subclasses say what it is in `describe()`."""

    def __init__(self, lock, site):
        self.cond = threading.Condition(lock)
        self.done = False
        self.waiters = []
        self.result = None
        self.site = site

    def source(self):
        """The kernel line this wait was called from, indented for a message (or '')."""
        text = source_line(self.site[0], self.site[1])
        return f"\n          {text}" if text else ""


class Barrier(_Wait):
    def __init__(self, lock, site, kind):
        super().__init__(lock, site)
        self.kind = kind
        self.values = []

    def describe(self):
        return f"cuda.{self.kind}() at {format_site(self.site, with_source=False)}"


class Rendezvous(_Wait):
    def __init__(self, lock, site, op, mask, compute):
        super().__init__(lock, site)
        self.op = op
        self.mask = mask
        self.compute = compute
        self.payloads = {}
        self.arrived = 0
        self.results = None

    def describe(self):
        site = format_site(self.site, with_source=False)
        return f"cuda.{self.op}(mask={self.mask:#010x}) at {site}"


class Convergence(_Wait):
    def __init__(self, lock, site, key):
        super().__init__(lock, site)
        self.key = key
        self.lanes = 0

    def describe(self):
        return f"cuda.activemask() at {format_site(self.site, with_source=False)}"


class Warp:
    """The lanes of one warp: which exist, which have not returned, what they wait on."""

    def __init__(self, index, nlanes):
        self.index = index
        self.nlanes = nlanes
        self.exists = (1 << nlanes) - 1
        self.live = self.exists
        self.threads = [None] * 32
        self.pending = {}  # mask -> Rendezvous not yet complete
        self.converging = {}  # call site -> Convergence not yet complete


def _bits(mask):
    lane = 0
    while mask:
        if mask & 1:
            yield lane
        mask >>= 1
        lane += 1


class SimThread(threading.Thread):
    """One CUDA thread. Keeps the attributes Numba's simulator expects of its own thread class."""

    def __init__(self, runner, linear_id, thread_idx):
        super().__init__(daemon=True, name=f"CUDA thread {tuple(thread_idx)}")
        self.runner = runner
        self.threadIdx = thread_idx
        self.blockIdx = runner.blockIdx
        self.thread_id = linear_id
        self.warp_id, self.lane = divmod(linear_id, 32)
        self.state = RUNNING
        self.waiting = None
        self.vc = None  # vector clock of the race detector (None when detection is off)
        self.exception = None
        self.poll_state = None  # see BlockRunner.poll: [key, value, reads in a row, last, label, first, ...]

    def run(self):
        runner = self.runner
        try:
            if runner.debug:
                np.seterr(divide="raise")
            runner.fn(*runner.args)
        except Abort:
            pass
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the learner
            runner.thread_failed(self, exc)
        finally:
            runner.thread_exited(self)

    # The simulator's kernel API (cuda.syncthreads(), this_grid().sync()) calls these.
    def syncthreads(self):
        self.runner.block_barrier(self, "syncthreads", None)

    def syncthreads_count(self, value):
        return self.runner.block_barrier(self, "syncthreads_count", bool(value))

    def syncthreads_and(self, value):
        return self.runner.block_barrier(self, "syncthreads_and", bool(value))

    def syncthreads_or(self, value):
        return self.runner.block_barrier(self, "syncthreads_or", bool(value))

    def __str__(self):
        return f"Thread <<<{format_dim3(self.blockIdx)}, {format_dim3(self.threadIdx)}>>>"


def report_poll(key, value, label, reads=None, shown=None):
    """Called by a read that may poll a flag (see `BlockRunner.poll`); outside a kernel, nothing."""
    thread = threading.current_thread()
    if isinstance(thread, SimThread):
        thread.runner.poll(thread, key, value, label, reads, shown)


def current_thread(what):
    """The simulated CUDA thread running now; a clear error when called outside a kernel."""
    thread = threading.current_thread()
    if not isinstance(thread, SimThread):
        raise RuntimeError(
            f"cuda.{what}() can only be called inside a kernel (a function decorated with "
            "@cuda.jit and launched as kernel[blocks, threads](...))."
        )
    return thread


class BlockRunner:
    """Drop-in replacement for the simulator's BlockManager: runs one block, reports failures."""

    def __init__(self, f, grid_dim, block_dim, debug):
        self.fn = f
        self.grid_dim = tuple(grid_dim)
        self.block_dim = tuple(block_dim)
        self.debug = debug

    # --- running the block ------------------------------------------------------------------
    def run(self, grid_point, *args):
        """Called by the simulator once per block, in index order.

        With the default schedule the block runs at once. With another (`grid.block_schedule`)
        the blocks are collected, and the call for the grid's last block runs them all.
        """
        from numba.cuda.simulator import kernel as sim_kernel

        from . import grid

        if grid.schedule.order == "in order":
            last = tuple(int(g) for g in grid_point) == tuple(d - 1 for d in self.grid_dim)
            try:
                return self._run(grid_point, args)
            finally:
                if last:
                    from . import visibility

                    visibility.launch_ended()  # a kernel boundary: delayed stores become visible
        context = sim_kernel._get_kernel_context()
        pending = context.__dict__.setdefault("_kernel_lab_pending_blocks", [])
        pending.append((self, grid_point, args))
        if tuple(int(g) for g in grid_point) != tuple(d - 1 for d in self.grid_dim):
            return None
        blocks = list(pending)
        pending.clear()
        __tracebackhide__ = True  # noqa: F841
        grid.run_grid(blocks, lambda runner, point, a, on_start=None: runner._run(point, a, on_start))
        return None

    def _run(self, grid_point, args, on_start=None):
        from numba.cuda.simulator import kernel as sim_kernel
        from numba.cuda.simulator.kernelapi import Dim3

        from .races import RaceTracker

        context = sim_kernel._get_kernel_context()
        self.args = args
        self.blockIdx = Dim3(*grid_point)
        bx, by, bz = self.block_dim
        n = bx * by * bz
        self.nthreads = n
        self.lock = threading.Lock()
        self.alive = n
        self.blocked = 0
        self.aborted = False
        self.error = None
        self.error_thread = None
        self.barrier = None
        self.waits = set()
        self.done = threading.Event()
        self.last_progress = time.monotonic()
        self.dynshared_size = context._shared._dynshared_size if context is not None else 0
        self.shared = {}  # shared arrays of this block, by declaration site
        self.shared_names = {}  # id(ndarray) -> (declared name, kind), for error messages
        self.dynshared = None
        self.dynshared_alloc = None
        self.warps = [Warp(w, min(32, n - 32 * w)) for w in range((n + 31) // 32)]
        self.threads = []
        for z in range(bz):
            for y in range(by):
                for x in range(bx):
                    thread = SimThread(self, len(self.threads), Dim3(x, y, z))
                    self.threads.append(thread)
                    self.warps[thread.warp_id].threads[thread.lane] = thread
        self.tracker = RaceTracker(self) if settings.race_detection else None
        if on_start is not None:
            on_start(self)
        for thread in self.threads:
            thread.start()
        self._wait_for_threads()
        if self.error is not None:
            __tracebackhide__ = True  # noqa: F841 - IPython and pytest hide this frame
            error, self.error = self.error, None
            raise error.with_traceback(_learner_frames(error.__traceback__))

    def _wait_for_threads(self):
        aborted_at = None
        interrupted = False
        try:
            while not self.done.wait(0.2):
                now = time.monotonic()
                if self.aborted:
                    aborted_at = aborted_at or now
                    if now - aborted_at > 1.0 and not interrupted:
                        # Threads that never reach a barrier (a spin loop) are stopped from
                        # outside, so that they do not keep burning CPU after the launch failed.
                        self._interrupt_running_threads()
                        interrupted = True
                    if now - aborted_at > 5.0:
                        return  # threads stuck outside the simulator's reach; give up on them
                elif settings.deadline is not None and now > settings.deadline:
                    with self.lock:
                        self._fail_locked(KernelDidNotFinish(self._describe_unfinished()))
                elif self.blocked and now - self.last_progress > settings.hang_timeout_s:
                    with self.lock:
                        self._fail_locked(DeadlockError(self._describe(hang=True)))
        except KeyboardInterrupt:
            with self.lock:
                self.error = None
                self._abort_locked()
            raise

    def _interrupt_running_threads(self):
        import ctypes

        for thread in self.threads:
            if thread.is_alive() and thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(thread.ident), ctypes.py_object(Abort)
                )

    # --- failures -----------------------------------------------------------------------------
    def thread_failed(self, thread, exc):
        error = translate_failure(exc, thread)
        with self.lock:
            self._fail_locked(error, thread.thread_id)

    def _fail_locked(self, error, thread_id=None):
        """Record the error to report (the first one, see below) and stop the block.

        Threads that were running when the first error happened keep running until their next
        barrier, so several of them often fail the same way (every thread past the end of an
        array). Of errors of the same kind, the one of the lowest thread id is reported, so that
        the message does not depend on which Python thread happened to run first.
        """
        if self.error is None:
            if self.tracker is not None and not isinstance(error, SharedMemoryRace):
                # A race earlier in this phase is the likelier root cause of what went wrong.
                race = self.tracker.report(after=error)
                if race is not None:
                    error, thread_id = race, None
            self.error, self.error_thread = error, thread_id
        elif (
            thread_id is not None
            and self.error_thread is not None
            and thread_id < self.error_thread
            and type(error) is type(self.error)
        ):
            self.error, self.error_thread = error, thread_id
        self._abort_locked()

    def _abort_locked(self):
        self.aborted = True
        for wait in list(self.waits):
            wait.cond.notify_all()

    def thread_exited(self, thread):
        with self.lock:
            thread.state = EXITED
            self.alive -= 1
            warp = self.warps[thread.warp_id]
            warp.live &= ~(1 << thread.lane)
            self.last_progress = time.monotonic()
            if self.alive == 0:
                if self.tracker is not None and self.error is None:
                    self.error = self.tracker.report()
                self.done.set()
                return
            if self.aborted:
                return
            barrier = self.barrier
            if barrier is not None and len(barrier.waiters) == self.alive:
                self._release_barrier(barrier)
            for rendezvous in list(warp.pending.values()):
                if rendezvous.mask & warp.live & ~rendezvous.arrived == 0:
                    self._complete_rendezvous(warp, rendezvous)
            self._converge(warp)
            self._check_deadlock()

    # --- waiting ----------------------------------------------------------------------------
    def _block(self, thread, wait):
        thread.state = BLOCKED
        thread.waiting = wait
        wait.waiters.append(thread)
        self.blocked += 1
        self.last_progress = time.monotonic()

    def _unblock(self, wait):
        wait.done = True
        for thread in wait.waiters:
            thread.state = RUNNING
            thread.waiting = None
        self.blocked -= len(wait.waiters)
        self.waits.discard(wait)
        wait.cond.notify_all()

    def _wait(self, wait):
        while not wait.done:
            if self.aborted:
                raise Abort()
            wait.cond.wait(1.0)

    # --- polls that can never end -----------------------------------------------------------
    def poll(self, thread, key, value, label, reads=None, shown=None):
        """A read that may be a spin on a flag: ``key`` says what was read (hashable), ``value`` what
        it held, ``label`` what it reads ("element 3 of an array with load_acquire"). ``reads``: how
        many unchanged reads in a row make a spin (POLL_STALL_READS unless the caller knows better:
        an mbarrier's try_wait sleeps between polls, so fewer are as telling); ``shown``: the value
        as the report words it (its repr otherwise)."""
        from . import grid

        if grid.current_baton() is not None:
            return  # an interleaved schedule: other blocks run too, and GridStall watches them
        now = time.monotonic()
        with self.lock:
            state = thread.poll_state
            try:
                same = state is not None and state[0] == key and bool(state[1] == value)
            except (TypeError, ValueError):
                same = False
            if not same:
                thread.poll_state = [key, value, 1, now, label, now, reads or POLL_STALL_READS, shown]
                return
            state[2] += 1
            state[3] = now
            if not self._spinning(state, now) or self.aborted:
                return
            pollers = []
            for other in self.threads:
                if other.state == EXITED or other.state == BLOCKED:
                    continue
                if other.poll_state is None or not self._spinning(other.poll_state, now):
                    return  # a thread that runs on may still change what the pollers read
                pollers.append(other)
            # One sentence whose shape does not depend on which threads happened to be polling when
            # the stall was seen (its numbers may): the lines below it say who waits where.
            first = pollers[0]
            _, seen, _, _, what, _, _, words = first.poll_state
            if words is None:
                words = repr(seen.item() if isinstance(seen, np.generic) else seen)  # 2, not np.int32(2)
            self.unfinished_headline = (
                f"{NEVER_FINISHES}in block {format_dim3(self.blockIdx)}, every thread that has not returned "
                "waits at a barrier or keeps reading a value that no longer changes, and none of them can "
                f"change it (thread {format_dim3(first.threadIdx)} read {words} from {what}, again and "
                "again). Blocks run one after another here, so no other block can change it either; on a "
                "GPU the wait would never end, or end only if another block happened to be running.")
            try:
                error = PollStall(self._describe_unfinished())
            finally:
                self.unfinished_headline = None
            self._fail_locked(error, thread.thread_id)
        raise Abort()

    @staticmethod
    def _spinning(state, now):
        """Has this poll state read one value long enough, and lately, to count as a spin?"""
        _, _, count, last, _, first, reads, _ = state
        return count >= reads and now - first >= POLL_STALL_MIN_S and now - last <= POLL_STALL_FRESH_S

    def _check_deadlock(self):
        if not self.aborted and self.alive and self.blocked == self.alive:
            self._fail_locked(DeadlockError(self._describe(hang=False)))

    # --- the block barrier --------------------------------------------------------------------
    def block_barrier(self, thread, kind, value):
        site = caller_site()
        with self.lock:
            if self.aborted:
                raise Abort()
            barrier = self.barrier
            if barrier is None:
                barrier = self.barrier = Barrier(self.lock, site, kind)
                self.waits.add(barrier)
            barrier.values.append(value)
            self._block(thread, barrier)
            thread.wait_site = site
            if len(barrier.waiters) == self.alive:
                self._release_barrier(barrier)
            else:
                self._converge(self.warps[thread.warp_id])
                self._check_deadlock()
            self._wait(barrier)
            return barrier.result

    def _release_barrier(self, barrier):
        self.barrier = None
        if self.tracker is not None:
            race = self.tracker.end_phase()
            if race is not None:
                self._fail_locked(race)
                return
        values = [v for v in barrier.values if v is not None]
        if barrier.kind == "syncthreads_count":
            barrier.result = sum(values)
        elif barrier.kind == "syncthreads_and":
            barrier.result = int(all(values))
        elif barrier.kind == "syncthreads_or":
            barrier.result = int(any(values))
        self._unblock(barrier)

    # --- warp rendezvous ----------------------------------------------------------------------
    def warp_collective(self, thread, op, mask, payload, compute):
        """Wait until every live lane named in `mask` calls `op` with `mask`; return our result.

        `compute(rendezvous, warp, runner)` turns the payloads of the lanes that took part
        (``rendezvous.payloads``, a dict lane -> payload; ``rendezvous.arrived``, their mask) into
        a dict lane -> result.
        """
        site = caller_site()
        mask = int(mask) & FULL_MASK
        warp = self.warps[thread.warp_id]
        if not (mask >> thread.lane) & 1:
            raise WarpMaskError(
                f"lane {thread.lane} of warp {warp.index} ({_who(thread)}) calls cuda.{op} with "
                f"mask {mask:#010x}, which does not include lane {thread.lane} itself.\n"
                f"  at {format_site(site)}\n"
                "Hint: every lane that calls a *_sync warp function must have its own bit set in "
                "the mask (on a GPU the result is undefined otherwise). A mask for all lanes is "
                "0xffffffff; for the lanes that take a branch, compute "
                "cuda.ballot_sync(0xffffffff, condition) before the branch."
            )
        with self.lock:
            if self.aborted:
                raise Abort()
            rendezvous = warp.pending.get(mask)
            if rendezvous is None:
                rendezvous = Rendezvous(self.lock, site, op, mask, compute)
                warp.pending[mask] = rendezvous
                self.waits.add(rendezvous)
            elif rendezvous.op != op:
                first = rendezvous.waiters[0]
                raise WarpMaskError(
                    f"the lanes of warp {warp.index} named in mask {mask:#010x} call different "
                    f"warp functions:\n"
                    f"  lane {first.lane} waits in cuda.{rendezvous.op} at "
                    f"{format_site(rendezvous.site)}\n"
                    f"  lane {thread.lane} calls cuda.{op} at {format_site(site)}\n"
                    "Hint: every lane named in a mask must call the same warp function with the "
                    "same mask (on a GPU anything else is undefined). Is a warp function inside "
                    "an `if` that only some of those lanes take?"
                )
            rendezvous.payloads[thread.lane] = payload
            rendezvous.arrived |= 1 << thread.lane
            self._block(thread, rendezvous)
            thread.wait_site = site
            if mask & warp.live & ~rendezvous.arrived == 0:
                self._complete_rendezvous(warp, rendezvous)
            else:
                self._converge(warp)
                self._check_deadlock()
            self._wait(rendezvous)
            result = rendezvous.results[thread.lane]
        if type(result) is RaiseInThread:
            raise result.error
        return result

    def _complete_rendezvous(self, warp, rendezvous):
        del warp.pending[rendezvous.mask]
        try:
            rendezvous.results = rendezvous.compute(rendezvous, warp, self)
        except KernelLabSimulatorError as error:
            rendezvous.results = {lane: RaiseInThread(error) for lane in rendezvous.payloads}
        if self.tracker is not None:
            self.tracker.warp_sync(rendezvous.waiters)
        self._unblock(rendezvous)

    # --- convergence (activemask) ---------------------------------------------------------------
    def converge(self, thread):
        """Wait until the rest of the warp has returned or waits elsewhere; return who is here."""
        frame = user_frame(sys._getframe(1))
        site = (
            (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
            if frame is not None
            else ("<unknown>", 0, "?")
        )
        key = (frame.f_code, frame.f_lasti) if frame is not None else None
        warp = self.warps[thread.warp_id]
        with self.lock:
            if self.aborted:
                raise Abort()
            point = warp.converging.get(key)
            if point is None:
                point = warp.converging[key] = Convergence(self.lock, site, key)
                self.waits.add(point)
            point.lanes |= 1 << thread.lane
            self._block(thread, point)
            thread.wait_site = site
            self._converge(warp)
            self._check_deadlock()
            self._wait(point)
            return point.result

    def _converge(self, warp):
        if not warp.converging:
            return
        ready = []
        for point in warp.converging.values():
            others = warp.live & ~point.lanes
            if all(warp.threads[lane].state == BLOCKED for lane in _bits(others)):
                ready.append(point)
        for point in ready:
            del warp.converging[point.key]
            point.result = np.uint32(point.lanes)
            self._unblock(point)

    # --- messages -----------------------------------------------------------------------------
    def _describe(self, hang):
        block = format_dim3(self.blockIdx)
        if hang:
            lines = [
                f"no thread of block {block} has reached a barrier, a warp function or the end "
                f"of the kernel for {settings.hang_timeout_s:g} s, while others wait for them; "
                "on a GPU this kernel would hang."
            ]
        else:
            lines = [
                f"the threads of block {block} wait for each other forever; on a GPU this "
                "kernel would hang."
            ]
        running = [t for t in self.threads if t.state == RUNNING]
        if running:
            verb = "is" if len(running) == 1 else "are"
            lines.append(f"  - {_thread_list(running)} {verb} still running (an endless loop?)")
        if self.barrier is not None:
            waiting = self.barrier.waiters
            verb = "waits" if len(waiting) == 1 else "wait"
            lines.append(
                f"  - {_thread_list(waiting)} {verb} in {self.barrier.describe()}, which needs "
                f"all {self.alive} threads that have not returned{self.barrier.source()}"
            )
        for warp in self.warps:
            for wait in list(warp.pending.values()) + list(warp.converging.values()):
                lanes = sum(1 << t.lane for t in wait.waiters)
                text = (
                    f"  - warp {warp.index}: lanes {format_lanes(lanes)} wait in {wait.describe()}"
                    + wait.source()
                )
                if isinstance(wait, Rendezvous):
                    missing = wait.mask & warp.live & ~wait.arrived
                    elsewhere = {}
                    for lane in _bits(missing):
                        other = warp.threads[lane]
                        where = (
                            f"wait in {other.waiting.describe()}"
                            if other.state == BLOCKED and other.waiting is not None
                            else "are still running"
                        )
                        elsewhere[where] = elsewhere.get(where, 0) | (1 << lane)
                    for where, group in elsewhere.items():
                        if group & (group - 1):
                            needs = f"lanes {format_lanes(group)}, which {where}"
                        else:  # one lane: singular verbs
                            where = where.replace("wait in", "waits in").replace("are ", "is ")
                            needs = f"lane {format_lanes(group)}, which {where}"
                        text += f"\n      it also needs {needs}"
                lines.append(text)
        returned = self.nthreads - self.alive
        if returned:
            lines.append(f"  - {returned} threads of the block have already returned")
        lines.append(
            "Hint: every thread of the block that has not returned must reach the same "
            "cuda.syncthreads(), and every lane named in a warp function's mask must call that "
            "function with the same mask. Look for a barrier or a warp function inside an `if` "
            "that not all threads take."
        )
        return "\n".join(lines)

    def _describe_unfinished(self):
        """Where the threads of a block are when its launch ran out of time (a few lines at most)."""
        frames = sys._current_frames()
        sites = {}
        for thread in self.threads:
            if thread.state == EXITED:
                continue
            if thread.state == BLOCKED:
                site = getattr(thread, "wait_site", None)
            else:
                frame = user_frame(frames.get(thread.ident))
                site = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name) if frame else None
            if site is not None:
                sites.setdefault(site, []).append(thread)
        headline = getattr(self, "unfinished_headline", None) or (
            f"the kernel did not finish: block {format_dim3(self.blockIdx)} was still running after "
            f"{settings.time_limit_s:g} s, the time limit of this launch; on a GPU it would never finish.")
        lines = [headline]
        busiest = sorted(sites.items(), key=lambda item: -len(item[1]))
        for site, threads in busiest[:3]:
            verb = "is" if len(threads) == 1 else "are"
            lines.append(f"  - {_thread_list(threads)} {verb} at {format_site(site)}")
        if len(busiest) > 3:
            lines.append(f"  - and threads at {len(busiest) - 3} other lines")
        lines.append(
            "Hint: a loop that does not end, or a wait whose condition never comes true? Look at the "
            "lines above: a `while` whose condition stays true (`while offset >= 0` with "
            "`offset //= 2` never ends: 0 // 2 is 0), or a loop variable that never moves."
        )
        return "\n".join(lines)


def _learner_frames(tb):
    """The part of a simulated thread's traceback that lies in the learner's code.

    The frames of the simulator, of NumPy and of this package say nothing to a learner; the
    kernel's own lines (and its device functions') are what the message points at.
    """
    entries = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            entries.append(tb)
        tb = tb.tb_next
    if not entries:
        return None
    result = None
    for entry in reversed(entries):
        result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return result


def _who(thread):
    return f"thread {format_dim3(thread.threadIdx)} of block {format_dim3(thread.blockIdx)}"


def _thread_list(threads, limit=6):
    ids = [format_dim3(t.threadIdx) for t in threads[:limit]]
    more = f" and {len(threads) - limit} more" if len(threads) > limit else ""
    if len(threads) == 1:
        return f"thread {ids[0]}"
    return f"{len(threads)} threads ({', '.join(ids)}{more})"
