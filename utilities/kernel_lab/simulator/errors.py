"""The errors the Kernel Lab simulator raises when a kernel does something a GPU would not forgive.

On a real GPU most of these mistakes do not raise anything: the kernel runs, and the result is
wrong, or wrong only sometimes, or the GPU hangs. Numba's CUDA simulator runs every CUDA thread as
a Python thread, so it can watch what the threads do and stop at the first sign of trouble with a
message that says what went wrong, where, and what usually fixes it.

Every error is a subclass of `KernelLabSimulatorError`, so ``except KernelLabSimulatorError``
catches all of them. `OutOfBoundsAccess` is also an `IndexError`, so code that expected the plain
simulator's `IndexError` keeps working.

This module only defines the classes; it imports neither Numba nor NumPy, so it is safe to import
on a machine with a GPU, where the simulator is not used.
"""


class KernelLabSimulatorError(Exception):
    """Base class: a kernel did something that is a bug on a GPU (found by the simulator)."""


class SharedMemoryRace(KernelLabSimulatorError):
    """Two threads of a block touched the same shared-memory element with nothing ordering them.

    At least one of the two accesses was a write, the threads are different, and no
    ``cuda.syncthreads()`` (or, for two threads of the same warp, no ``cuda.syncwarp()`` or warp
    collective that both took part in) came between the accesses. On a GPU the outcome depends on
    timing: the reader may see the old value or the new one. The message names the shared array,
    the element, both threads, what each did, and the line of each access.
    """


class OutOfBoundsAccess(KernelLabSimulatorError, IndexError):
    """A thread indexed an array outside its shape.

    On a GPU this reads garbage or writes over someone else's data (or, with luck, crashes with
    an illegal-address error much later). The usual cause is a grid with more threads than
    elements and no ``if i < n:`` guard.
    """


class WarpMaskError(KernelLabSimulatorError):
    """A warp-level function (``shfl_*_sync``, ``*_sync`` votes, ``syncwarp``) was called wrongly.

    For example the calling lane is not in its own mask, the lanes named in one mask called
    different warp functions, or the shuffle ``width`` is not a power of two.
    """


class UndefinedShuffleValue(KernelLabSimulatorError):
    """A thread used a value that a warp shuffle read from a lane that was not taking part.

    On a GPU a shuffle that reads from a lane outside the mask, from a lane that has exited or from
    a lane that does not exist (a partial last warp) returns an undefined value. The simulator hands
    back a placeholder instead and raises this error only when the placeholder is used: stored to
    memory, used as an index, compared, or branched on. Lanes whose undefined result is never used
    (common in masked reductions) are fine, as on a GPU.
    """


class DeadlockError(KernelLabSimulatorError):
    """The threads of a block wait for each other forever (on a GPU the kernel would hang).

    Typical causes: ``cuda.syncthreads()`` inside a branch that some threads do not take while
    others wait in a warp function, or a warp function whose mask names a lane that is waiting
    somewhere else. Also raised, as a last resort, when nothing in the block has made progress for
    ``settings.hang_timeout_s`` seconds (for example a thread spinning on a flag forever).
    """


class KernelDidNotFinish(KernelLabSimulatorError):
    """A launch was still running when the time limit it was given (`time_limit`) ran out.

    On a GPU the kernel would never finish: a loop whose condition stays true (a warp sum's
    ``while offset >= 0`` with ``offset //= 2``: 0 // 2 is 0), or a wait for a flag that nobody
    sets. Threads that keep meeting in warp functions look busy to the deadlock detection, so only
    a limit in time catches them. The message names the kernel lines the threads were at.
    """


class PollStall(KernelDidNotFinish):
    """A launch that can never finish, seen without waiting for a time limit: every thread of the
    block that has not returned either waits at a barrier or reads the same value at a flag poll
    (an acquire or volatile load, an mbarrier's try_wait) again and again, and nothing left running
    can change what they read. The blocks of an in-order launch run one after another in the
    simulator, so another block cannot change it either. A `KernelDidNotFinish`, so that a check's
    time limit and this report reach the learner the same way.
    """


__all__ = [
    "KernelLabSimulatorError",
    "KernelDidNotFinish",
    "PollStall",
    "SharedMemoryRace",
    "OutOfBoundsAccess",
    "WarpMaskError",
    "UndefinedShuffleValue",
    "DeadlockError",
]
