"""Shared-memory race detection.

Shared memory is where the threads of a block talk to each other, and the commonest bug in that
conversation is reading an element before its writer has written it, or overwriting an element
another thread still has to read. On a GPU such a kernel usually gives the right answer on small
inputs and the wrong one on the day it matters. Under the simulator, every shared array handed to
a kernel is a `SharedArray` (shared_memory.py): it behaves like the NumPy array it wraps, and tells
the block's `RaceTracker` about every element read and written, by which thread, at which line.

What counts as a race. Between two block barriers (``cuda.syncthreads()`` and its variants) the
tracker remembers, per element, the last write and the reads since it. Two accesses to the same
element conflict when they come from different threads and at least one is a write (an atomic
update counts as a write, except that atomics never conflict with each other). A conflict is a
race unless the two threads are in the same warp and a warp-level synchronisation that both took
part in (``cuda.syncwarp()``, or any ``*_sync`` warp function) lies between the two accesses. This
"lies between" is tracked with one vector clock per thread over the 32 lanes of its warp, so it is
exact, whatever order Python happened to run the threads in. Reads by many threads are fine, and
a thread may always read what it wrote.

When races are found, the kernel keeps running until the next barrier (or its end); then the
first race in a fixed order (array, element, thread ids) is raised as one `SharedMemoryRace`, so
the message does not depend on how Python scheduled the threads. Its hint names the barrier that
fits: `cuda.syncwarp()` when every race of the phase is between lanes of one warp (such code often
runs in a branch taken by one warp, where `cuda.syncthreads()` would hang), `cuda.syncthreads()`
otherwise. If the kernel fails in another
way first, the race is reported instead, because it is the likelier cause.

The shared arrays themselves (`SharedArray`, one per declaration and block) are made in
shared_memory.py.
"""

import threading

from .errors import SharedMemoryRace
from .frames import format_dim3, format_site

READ, WRITE, ATOMIC = 0, 1, 2
_VERB = {READ: "reads", WRITE: "writes", ATOMIC: "updates (cuda.atomic)"}


class RaceTracker:
    """The shadow state of one block's shared memory for the current barrier phase."""

    def __init__(self, runner):
        self.runner = runner
        self.lock = threading.Lock()
        self.allocs = []
        self.best = None  # (sort key, allocation, offset, access a, access b)
        self.elements = set()
        self.across_warps = False  # has any race of this phase been between two warps?
        for thread in runner.threads:
            clock = [0] * 32
            clock[thread.lane] = 1
            thread.vc = clock
            thread.phase_sites = {}

    # --- recording --------------------------------------------------------------------------
    def access(self, thread, alloc, offset, kind, site):
        """Record one access; note a race if it conflicts with an unordered earlier access."""
        vc = getattr(thread, "vc", None)
        if vc is None:  # not a simulated CUDA thread (e.g. inspected from the host): ignore
            return
        if self.runner.aborted:
            from .scheduler import Abort

            raise Abort()
        tid = thread.thread_id
        warp = tid >> 5
        record = (tid, vc[tid & 31], site, kind)
        with self.lock:
            order = thread.phase_sites  # first use of each line in this phase, for the hint
            if site not in order:
                order[site] = len(order)
            cell = alloc.shadow.get(offset)
            if cell is None:
                if kind == WRITE:
                    alloc.shadow[offset] = [record, None, None]
                elif kind == READ:
                    alloc.shadow[offset] = [None, {tid: record}, None]
                else:
                    alloc.shadow[offset] = [None, None, {tid: record}]
                return
            writer, readers, atomics = cell
            # An earlier access `p` is ordered before this one if it is ours, or if it was made
            # by a lane of our warp before a warp synchronisation we both took part in.
            if writer is not None and writer[0] != tid and not (
                writer[0] >> 5 == warp and vc[writer[0] & 31] >= writer[1]
            ):
                self._race(alloc, offset, writer, record)
            if kind != READ and readers:
                for p in readers.values():
                    if p[0] != tid and not (p[0] >> 5 == warp and vc[p[0] & 31] >= p[1]):
                        self._race(alloc, offset, p, record)
            if kind != ATOMIC and atomics:
                for p in atomics.values():
                    if p[0] != tid and not (p[0] >> 5 == warp and vc[p[0] & 31] >= p[1]):
                        self._race(alloc, offset, p, record)
            if kind == READ:
                if readers is None:
                    cell[1] = {tid: record}
                else:
                    readers[tid] = record
            elif kind == WRITE:
                cell[0] = record
                cell[1] = None
                cell[2] = None
            else:
                if atomics is None:
                    cell[2] = {tid: record}
                else:
                    atomics[tid] = record

    def _race(self, alloc, offset, a, b):
        if b[0] < a[0]:
            a, b = b, a
        self.elements.add((alloc.seq, offset))
        if a[0] >> 5 != b[0] >> 5:
            self.across_warps = True
        key = (alloc.seq, offset, a[0], b[0])
        if self.best is None or key < self.best[0]:
            self.best = (key, alloc, offset, a, b)

    def warp_sync(self, threads):
        """Lanes that completed a warp function together: later accesses are ordered after."""
        with self.lock:
            clocks = [t.vc for t in threads if t.vc is not None]
            if not clocks:
                return
            joined = list(map(max, *clocks)) if len(clocks) > 1 else list(clocks[0])
            for thread in threads:
                clock = list(joined)
                clock[thread.lane] += 1
                thread.vc = clock

    # --- phases and reports -------------------------------------------------------------------
    def end_phase(self):
        """At a block barrier: report this phase's first race (or None), then forget the phase."""
        with self.lock:
            error = self._error(None) if self.best is not None else None
            for alloc in self.allocs:
                alloc.shadow.clear()
            for thread in self.runner.threads:
                thread.phase_sites.clear()
            self.best = None
            self.elements = set()
            self.across_warps = False
            return error

    def report(self, after=None):
        """The first race of the current phase as an exception (or None); `after` = later error."""
        with self.lock:
            return self._error(after) if self.best is not None else None

    def _error(self, after):
        _, alloc, offset, a, b = self.best
        runner = self.runner
        ta, tb = runner.threads[a[0]], runner.threads[b[0]]
        site_a, site_b = _site(a[2]), _site(b[2])
        lines = [
            f"two threads of block {format_dim3(runner.blockIdx)} access element "
            f"{alloc.element(offset)} of {alloc.describe()} with nothing ordering the two "
            "accesses, and at least one of them writes:",
            f"  - thread {format_dim3(ta.threadIdx)} (warp {ta.warp_id}, lane {ta.lane}) "
            f"{_VERB[a[3]]} it at {format_site(site_a)}",
            f"  - thread {format_dim3(tb.threadIdx)} (warp {tb.warp_id}, lane {tb.lane}) "
            f"{_VERB[b[3]]} it at {format_site(site_b)}",
        ]
        same_warp = ta.warp_id == tb.warp_id
        if same_warp:
            lines.append(
                "Both threads are in the same warp, but no cuda.syncwarp() (or warp function "
                "that both took part in) comes between the two accesses; the lanes of a warp do "
                "not run in lockstep on Volta and newer GPUs."
            )
        else:
            lines.append(
                f"The threads are in different warps ({ta.warp_id} and {tb.warp_id}), so only "
                "cuda.syncthreads() orders their accesses, and none comes between them."
            )
        # Within one warp (and no race of this phase between warps) the barrier is cuda.syncwarp():
        # such races are typically in code that one warp runs alone (`if t < 32:`), where
        # cuda.syncthreads() would wait for warps that never arrive.
        one_warp = same_warp and not self.across_warps
        lines.append(_hint(a, b, site_a, site_b, len(runner.warps) > 1, _write_first(ta, tb, a, b), one_warp))
        if one_warp and len(runner.warps) > 1:
            lines.append(
                "(Use cuda.syncwarp() here, not cuda.syncthreads(): the racing threads share a warp, and "
                "cuda.syncthreads() waits for every thread of the block: inside a branch that only "
                "some warps take, such as `if t < 32:`, it is undefined, and hangs or leaves the race.)"
            )
        if len(self.elements) > 1:
            lines.append(
                f"(Races were found on {len(self.elements)} elements of shared memory before the "
                "next barrier; this is the first in index order.)"
            )
        if after is not None:
            first = str(after).splitlines()[0] if str(after) else ""
            lines.append(
                f"(The kernel then also failed with {type(after).__name__}: {first} -- "
                "possibly a consequence of this race.)"
            )
        return SharedMemoryRace("\n".join(lines))


def _write_first(ta, tb, a, b):
    """For a write/read pair: did the threads run the write's line before the read's line?

    Looks at the order in which the writer (else the reader) first used the two lines in this
    phase. True: write, then read (a barrier is missing between them). False: read, then write,
    as in the next pass of a loop (a barrier is missing after the read). None: unknown.
    """
    if {a[3], b[3]} != {READ, WRITE}:
        return None
    write, read = (a, b) if a[3] == WRITE else (b, a)
    writer = ta if write is a else tb
    reader = tb if write is a else ta
    for thread in (writer, reader):
        order = thread.phase_sites
        if write[2] in order and read[2] in order:
            return order[write[2]] < order[read[2]]
    return None


def _site(site):
    code, lineno = site
    return (code.co_filename, lineno, code.co_name)


def _hint(a, b, site_a, site_b, several_warps, write_first, one_warp=False):
    kinds = {a[3], b[3]}
    # Races inside one warp: syncwarp. With one warp per block either barrier does; with several
    # warps racing, the block barrier is the fix.
    if one_warp and several_warps:
        barrier = "cuda.syncwarp()"
    else:
        barrier = "cuda.syncthreads()" if several_warps else "cuda.syncwarp() or cuda.syncthreads()"
    if kinds == {WRITE}:
        return (
            "Hint: two threads write the same element before a barrier; which value survives "
            "depends on timing. Check the index (should each thread write its own element?), "
            "or combine the values with cuda.atomic.add or a reduction."
        )
    if ATOMIC in kinds:
        return (
            f"Hint: atomic updates of an element and plain reads or writes of it need a {barrier} "
            "between them (for example: initialise, barrier, atomics, barrier, read the result)."
        )
    write, read = (a, b) if a[3] == WRITE else (b, a)
    w_site, r_site = (site_a, site_b) if write is a else (site_b, site_a)
    if write_first is None and w_site[0] == r_site[0] and w_site[2] == r_site[2]:
        if w_site[1] != r_site[1]:
            write_first = w_site[1] < r_site[1]
    if w_site[:2] == r_site[:2]:
        return (
            "Hint: one line both reads an element written by another thread and writes: read "
            f"into a local variable first, then {barrier}, then write; in a loop, another {barrier} "
            "after the write, so that the next round reads finished values."
        )
    if write_first is not None:
        if write_first:
            return (
                f"Hint: add {barrier} after the write (line {w_site[1]}) and before the read "
                f"(line {r_site[1]}), so that every thread has written its element before any "
                "thread reads another thread's element."
            )
        return (
            f"Hint: here the read (line {r_site[1]}) runs before the write (line {w_site[1]}), "
            "as in the next pass of a loop: one thread overwrites the element while another is "
            f"still reading the old value. Add {barrier} after the last read and before the next "
            "write, typically at the end of the loop body."
        )
    return f"Hint: add {barrier} between the write and the read."
