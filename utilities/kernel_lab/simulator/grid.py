"""Blocks that run at the same time, in an adversarial order: the schedules a look-back must survive.

Numba's simulator runs the blocks of a grid one after the other, in index order. A kernel in which
blocks wait for each other (a single-pass scan whose blocks look back at their predecessors'
published partials) then never meets the situations a GPU produces: a predecessor that has not
started, one that has published its own total but not yet its inclusive prefix, or a block that
reads a partial in the instant between its flag and its value being written.

``block_schedule(order, seed=..., resident=...)`` changes that for the launches that follow (or,
used with ``with``, inside the block only):

``"in order"``
    Numba's behaviour: one block after the other, index order (the default).
``"reverse"``
    One block after the other, last index first: a kernel that assumes block ``b - 1`` started
    before block ``b`` waits forever, and is reported (:class:`GridStall`) as soon as it polls
    through a scheduling point (below).
``"interleaved"``
    Up to ``resident`` blocks run at once (all of them by default), started in a shuffled order
    (``seed``), and they take turns at every *scheduling point*: a global-memory atomic, a
    ``cuda.threadfence()``, a volatile read (``cuda.ldcv``), and the moment just after an atomic
    that changed memory (a *publication*). At each point the running block hands over to another
    block waiting at one (or not yet started), chosen at random (``seed``). So right after a block
    publishes a flag, another block may read it before the publisher's next instruction; and a
    block that reads a value, then a flag, may find the flag set in between. Only the block that
    holds the turn runs between two scheduling points, and a block starts only when it is given
    the turn, so a schedule is a function of its seed alone, not of how fast the machine's threads
    happen to run: a check that exposes a mistake with one seed exposes it on every machine.
    Now and then (seeded) a block that has just published is *slow*: it gets no turn while another
    block can run, for a few points per running block, so a successor waiting for it polls several
    times in a row and reads "nothing published" each time, as on a GPU while the predecessor still
    scans its tile. ``slow_blocks=False`` turns that off.

Blocks whose threads spin on a flag that nobody will ever set keep passing scheduling points
without anything changing in memory; after ``stall_limit`` such points in a row the launch stops
with :class:`GridStall`, naming the blocks and the kernel line they spin on. A block that spins
with plain loads (no scheduling point) cannot be seen; ``settings.hang_timeout_s`` then applies.

Memory stays sequentially consistent (Python threads): a missing ``cuda.threadfence()`` is not
detectable here; the course's checks look for it in the kernel's source instead, except for arrays
wrapped in `visibility.DelayedStores`, whose stores other blocks see only after a fence.
"""

from __future__ import annotations

import random
import sys
import threading
import time

from . import visibility
from .errors import KernelLabSimulatorError
from .frames import format_site, user_frame

ORDERS = ("in order", "reverse", "interleaved")

# Slow blocks of the interleaved schedule (GridBaton.held): how often a publication holds its block
# back, and for how long (scheduling points passed by the other blocks, per running block; at most a
# quarter of the stall limit, so that blocks waiting for a slow one are never taken for a hang).
HOLD_CHANCE = 0.25
HOLD_POINTS_PER_BLOCK = 6
HOLD_SEED_OFFSET = 0x51_0B  # the slow-block generator's seed is the schedule's seed plus this


# When may a waiting block take the turn from the block that holds it? Only when the holder runs on
# without ever reaching a scheduling point (a spin on plain loads) or waits on something only another
# block can give. A wall-clock timeout cannot tell that from a holder that is merely slow because the
# machine is busy (a loaded CI runner): the schedule then depended on load, and a look-back check
# flaked. So CPU time is what counts: while one block holds the turn every other block waits (no
# CPU), so the process's CPU time is the holder's, and it must burn TAKEOVER_CPU_S seconds of it
# without a scheduling point. A holder that uses no CPU at all (it waits) is taken over after
# TAKEOVER_WALL_S seconds. (Reading each of the holder's threads' own clocks would be more precise,
# but a thread may end between the check and the read, and asking for a finished thread's clock
# crashed the process.)
TAKEOVER_CPU_S = 2.0
TAKEOVER_WALL_S = 60.0


class _Watch:
    """How long the current holder has held the turn, in CPU time and on the wall clock."""

    def __init__(self, holder):
        self.holder, self.cpu, self.wall = holder, time.process_time(), time.monotonic()

    def stuck(self, holder) -> bool:
        """Has ``holder`` (still the holder) run or waited long enough to be taken over?"""
        if holder is not self.holder:
            return False
        return (time.process_time() - self.cpu > TAKEOVER_CPU_S
                or time.monotonic() - self.wall > TAKEOVER_WALL_S)


class GridStall(KernelLabSimulatorError):
    """Blocks wait for each other forever (on a GPU the kernel would hang)."""


class _Schedule:
    def __init__(self):
        self.order = "in order"
        self.seed = 0
        self.resident = None
        self.slow_blocks = True
        self.late = frozenset()
        self.stall_limit = 20000


schedule = _Schedule()


class block_schedule:
    """Choose how the simulator runs the blocks of a grid (see the module's docstring).

    ``ksim.block_schedule("interleaved", seed=3)`` for good, or ``with ksim.block_schedule(...):``
    for the launches inside the block. ``resident`` limits how many blocks run at once
    (interleaved only; ``None``: all of them). ``slow_blocks=False`` (interleaved only) never holds
    a block back after it publishes: module 02's check reruns a failing schedule that way to tell
    a look-back that does not wait from one that reads in the wrong order. ``late`` (interleaved
    only): linear block numbers that start only once every other block has finished or waits at a
    flag poll (a volatile or acquire read), as the kernel of a GPU that the host launched later
    (module 09's two simulated GPUs): a reader that does not wait then reads what was never written.
    """

    def __init__(self, order="in order", *, seed=0, resident=None, slow_blocks=True, late=()):
        if order not in ORDERS:
            raise ValueError(f"block_schedule: order must be one of {', '.join(map(repr, ORDERS))}, got {order!r}")
        if resident is not None and (not isinstance(resident, int) or resident < 1):
            raise ValueError(f"block_schedule: resident must be a whole number >= 1 or None, got {resident!r}")
        self._previous = (schedule.order, schedule.seed, schedule.resident, schedule.slow_blocks, schedule.late)
        schedule.order, schedule.seed, schedule.resident = order, int(seed), resident
        schedule.slow_blocks = bool(slow_blocks)
        schedule.late = frozenset(int(b) for b in late)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        schedule.order, schedule.seed, schedule.resident, schedule.slow_blocks, schedule.late = self._previous
        return False

    def __repr__(self):
        slow = "" if schedule.slow_blocks else ", slow_blocks=False"
        late = f", late={sorted(schedule.late)}" if schedule.late else ""
        return f"block_schedule({schedule.order!r}, seed={schedule.seed}, resident={schedule.resident}{slow}{late})"


def block_order(grid_points, order, seed):
    """The order in which blocks start (a list of grid points)."""
    points = list(grid_points)
    if order == "reverse":
        return points[::-1]
    if order == "interleaved":
        random.Random(seed).shuffle(points)
    return points


class GridBaton:
    """Which block may pass its next scheduling point (interleaved schedules only)."""

    def __init__(self, seed, stall_limit, queue=(), resident=None, slow_blocks=True, late=frozenset()):
        self.cond = threading.Condition()
        self.queue = list(queue)  # runners not admitted yet, in start order
        self.resident = resident or max(1, len(self.queue))
        self.admitted = []  # runners admitted, in order (their driver threads are started from it)
        self.rng = random.Random(seed)
        self.holder = None  # the block (runner) that may pass scheduling points now
        self.waiting = {}  # runner -> number of its threads waiting at a scheduling point
        self.live = []  # runners that have started and not finished
        self.stall_limit = stall_limit
        self.quiet_points = 0  # scheduling points passed since memory last changed
        self.stall = None
        self.spin_sites = {}
        self.deferred = {}  # runner -> points other blocks pass before it may run again
        # Slow blocks. On a GPU a block that has taken its ticket still loads and scans its whole
        # tile before it publishes, time in which a successor polls its flag many times. Here that
        # stretch has no scheduling point, and `deferred` (which holds a poller back) let the
        # predecessor publish before every poll's read: no look-back ever read "nothing published",
        # so one that polls once instead of waiting passed. Now and then (seeded) a block that has
        # just published (its ticket, say) is therefore held back: no turn while another block can
        # run, until the others have passed HOLD_POINTS_PER_BLOCK points per running block. A
        # successor waiting for it then polls several times in a row and reads "nothing" each time.
        # A generator of its own, so that `rng`'s draws stay as they were for the same candidates.
        self.hold_rng = random.Random(seed + HOLD_SEED_OFFSET) if slow_blocks else None
        self.held = {}  # runner -> points other blocks pass before it may be given a turn again
        # Late blocks (block numbers): not started while a block that is not late runs on without
        # waiting at a flag poll (`polling`: its last scheduling point was a deferred read).
        self.late = frozenset(late)
        self.polling = set()
        self.begun = set()  # runners that have had their first turn

    # --- blocks come and go -----------------------------------------------------------------
    def _admit(self):
        """Let blocks in while fewer than ``resident`` run (under the lock, so that the set of
        blocks a turn can go to never depends on thread timing)."""
        while self.queue and len(self.live) < self.resident:
            runner = self.queue.pop(0)
            self.live.append(runner)
            self.admitted.append(runner)
            if self.holder is None and runner.block_number not in self.late:
                self.holder = runner
        if self.holder is None and self.live and not self.late.isdisjoint(r.block_number for r in self.live) \
                and all(r.block_number in self.late for r in self.live):
            self.holder = self.live[0]  # only late blocks are left to run

    def started(self, runner):
        """A block's threads are about to start: wait for its turn."""
        with self.cond:
            watch = _Watch(self.holder)
            while self.holder is not runner and self.holder is not None:
                if self.stall is not None:
                    raise self.stall
                if not self.cond.wait(0.5):
                    if watch.stuck(self.holder):
                        self.holder = runner  # the holder spins without scheduling points: take over
                    elif watch.holder is not self.holder:
                        watch = _Watch(self.holder)
            self.holder = runner
            self.begun.add(runner)
            self.cond.notify_all()

    def finished(self, runner):
        with self.cond:
            if runner in self.live:
                self.live.remove(runner)
            self.waiting.pop(runner, None)
            self.deferred.pop(runner, None)
            self.held.pop(runner, None)
            self.polling.discard(runner)
            self.quiet_points = 0
            self._admit()
            if self.holder is runner:
                self._hand_over(runner)
            self.cond.notify_all()

    def progress(self, runner=None):
        """Memory changed (an atomic wrote): blocks that spin may now see something new.

        The block that wrote (published) is then held back until the other blocks have passed a
        few scheduling points: whatever it writes next, they may look before it does. Sometimes
        (seeded, ``HOLD_CHANCE``) it is also a slow block: see ``held``.
        """
        with self.cond:
            self.quiet_points = 0
            if runner is not None and len(self.live) > 1:
                self.deferred[runner] = 2 * len(self.live)
                if self.hold_rng is not None and self.hold_rng.random() < HOLD_CHANCE:
                    self.held[runner] = min(HOLD_POINTS_PER_BLOCK * len(self.live), self.stall_limit // 4)

    # --- scheduling points ------------------------------------------------------------------
    def point(self, runner, what, defer=False):
        """Called by a thread of ``runner`` at a scheduling point: hand over, wait for our turn.

        ``defer`` (a volatile read of a flag) holds the block back the longest: the other blocks
        run ahead, so what it read before this point is as old as it can be.
        """
        with self.cond:
            if self.stall is not None:
                raise self.stall
            self.quiet_points += 1
            for counts in (self.deferred, self.held):
                for other in list(counts):
                    if other is not runner:
                        counts[other] -= 1
                        if counts[other] <= 0:
                            del counts[other]
            frame = user_frame(sys._getframe(2))
            if frame is not None:
                self.spin_sites[runner] = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, what)
            if self.quiet_points > self.stall_limit:
                self.stall = GridStall(self._describe_stall())
                self.cond.notify_all()
                raise self.stall
            if defer and len(self.live) > 1:
                self.deferred[runner] = 2 * len(self.live)
            if defer:
                self.polling.add(runner)
            else:
                self.polling.discard(runner)
            self.waiting[runner] = self.waiting.get(runner, 0) + 1
            try:
                if self.holder is runner or self.holder is None:
                    self._hand_over(runner)
                self.cond.notify_all()
                watch = _Watch(self.holder)
                while self.holder is not runner and self.holder is not None:
                    if self.stall is not None:
                        raise self.stall
                    if runner.aborted:
                        return
                    if not self.cond.wait(0.5):
                        if watch.stuck(self.holder):
                            # The holder burnt TAKEOVER_CPU_S of CPU without a scheduling point (it
                            # spins on plain loads), or waits on something only we can give: take it.
                            self.holder = runner
                        elif watch.holder is not self.holder:
                            watch = _Watch(self.holder)
                self.holder = runner
            finally:
                self.waiting[runner] -= 1
                if not self.waiting[runner]:
                    del self.waiting[runner]

    def _hand_over(self, runner):
        """Give the baton to another running block, chosen at random (seeded), preferring blocks
        that have not just published; keep it if there is no other. A held (slow) block is no
        candidate while the runner or another block can go on: a poller then keeps the baton and
        polls again, as it would on a GPU while its predecessor is still busy.

        Every other running block waits, at a scheduling point or for its start (only the holder
        runs), so the candidates are all of them, in a fixed order: the seed alone decides."""
        others = sorted((r for r in self.live if r is not runner),
                        key=lambda r: r.block_number)  # a deterministic list for the seeded choice
        if self.late and not all(r in self.polling for r in self.live if r.block_number not in self.late):
            others = [r for r in others if r.block_number not in self.late or r in self.begun]
        unheld = [r for r in others if r not in self.held]
        if unheld or runner in self.live:
            others = unheld  # held blocks wait (the runner keeps the baton if no other can go on)
        # else the runner has finished and every block left is held: one of them runs anyway
        fresh = [r for r in others if r not in self.deferred]
        if fresh:
            self.holder = self.rng.choice(fresh)
        elif others and (runner in self.deferred or runner not in self.live):
            self.holder = self.rng.choice(others)
        elif runner in self.live:
            self.holder = runner
        else:
            self.holder = self.live[0] if self.live else None

    def _describe_stall(self):
        lines = [f"the blocks of this grid wait for each other forever: {self.stall_limit} scheduling points "
                 "passed without any block writing to memory or finishing; on a GPU this kernel would hang."]
        for runner in sorted(self.live, key=lambda r: r.block_number):
            site = self.spin_sites.get(runner)
            where = f" at {format_site(site[:3])} ({site[3]})" if site else ""
            lines.append(f"  - block {runner.blockIdx.x} (started {runner.start_rank + 1}.){where}")
        lines.append(
            "Hint: a block that waits for another block's result must be sure that block has started. "
            "Blocks start in no guaranteed order, and only as many as fit on the GPU run at once: "
            "a block that waits for `blockIdx.x - 1` can wait for a block that cannot start until it "
            "finishes. Number the blocks in the order they start instead (a ticket: "
            "`cuda.atomic.add(counter, 0, 1)` by one thread, shared with the block), and make every "
            "wait end once the predecessor has published.")
        return "\n".join(lines)


# The baton of the launch running now (one simulated launch at a time, as in Numba's simulator).
_current = {"baton": None}


def current_baton():
    return _current["baton"]


def scheduling_point(what, defer=False):
    """Called from the patched atomics, fences and volatile reads of a simulated kernel."""
    baton = _current["baton"]
    if baton is None:
        return
    runner = getattr(threading.current_thread(), "runner", None)
    if runner is None:
        return
    baton.point(runner, what, defer)


def run_grid(blocks, run_one):
    """Run the deferred blocks of one launch with the current schedule.

    ``blocks`` is a list of (runner, grid_point, args); ``run_one(runner, grid_point, args)`` runs
    one block to its end (raising its error). Returns after every block has finished, re-raising
    the first error in start order.
    """
    order = schedule.order
    starts = block_order(range(len(blocks)), order, schedule.seed)
    for rank, index in enumerate(starts):
        blocks[index][0].start_rank = rank
        blocks[index][0].block_number = index
    resident = 1 if order == "reverse" else (schedule.resident or len(blocks))
    baton = GridBaton(schedule.seed, schedule.stall_limit, [blocks[i][0] for i in starts], resident,
                      slow_blocks=schedule.slow_blocks, late=schedule.late if order == "interleaved" else ())
    _current["baton"] = baton
    index_of = {id(blocks[i][0]): i for i in starts}
    errors = {}
    drivers = []

    def drive(index):
        runner, grid_point, args = blocks[index]
        try:
            run_one(runner, grid_point, args, on_start=baton.started)
        except BaseException as exc:  # noqa: BLE001 - reported below, in start order
            errors[index] = exc
            with baton.cond:
                if baton.stall is None and not isinstance(exc, GridStall):
                    baton.stall = exc  # stop the other blocks too
                baton.cond.notify_all()
        finally:
            baton.finished(runner)

    try:
        with baton.cond:
            baton._admit()
        launched = 0
        while True:
            with baton.cond:
                while launched == len(baton.admitted) and baton.queue and baton.stall is None:
                    baton.cond.wait(0.5)
                fresh = baton.admitted[launched:]
                done = not baton.queue or baton.stall is not None
            for runner in fresh:
                driver = threading.Thread(target=drive, args=(index_of[id(runner)],), daemon=True)
                drivers.append(driver)
                driver.start()
            launched += len(fresh)
            if done and launched == len(baton.admitted):
                break
        for driver in drivers:
            driver.join()
    finally:
        _current["baton"] = None
        visibility.launch_ended()  # a kernel boundary: delayed stores become visible
    if errors:
        stalls = [e for e in errors.values() if isinstance(e, GridStall)]
        first = next((errors[i] for i in starts if i in errors and not isinstance(errors[i], GridStall)), None)
        raise (first if first is not None else stalls[0])


def fence(name, original):
    """``cuda.threadfence()`` and friends: a scheduling point. What the fence orders is already
    ordered here (memory is sequentially consistent), except the stores of `visibility.DelayedStores`
    arrays, which the fence publishes first when its scope covers theirs."""

    def threadfence(self):
        visibility.fenced(name)
        scheduling_point(f"cuda.{name}()")
        if original is not None:
            return original(self)
        return None

    threadfence.__name__ = name
    return threadfence


def cache_hinted_load(name):
    """``cuda.ldcg(array, i)`` etc.: a plain read; ``ldcv`` (volatile, for polling a flag) is also
    a scheduling point."""

    def load(array, i):
        if name != "ldcv":
            return array[i]
        scheduling_point("cuda.ldcv (a volatile read)", defer=True)
        value = array[i]
        from .scheduler import report_poll  # here: the scheduler imports this module

        index = tuple(int(j) for j in i) if isinstance(i, tuple) else int(i)
        report_poll((id(array), index), value, f"element {index} of an array with cuda.ldcv")
        return value

    load.__name__ = name
    return load
