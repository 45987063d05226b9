"""Kernel Lab's additions to Numba's CUDA simulator.

Without a GPU, Kernel Lab runs kernels in Numba's CUDA simulator, which executes every CUDA thread
as a Python thread. `install()` adds what the course needs on top of it:

* warp-level functions with the GPU's semantics: ``cuda.shfl_sync``, ``shfl_up_sync``,
  ``shfl_down_sync``, ``shfl_xor_sync``, ``all_sync``, ``any_sync``, ``eq_sync``,
  ``ballot_sync``, ``match_any_sync``, ``match_all_sync``, ``syncwarp``, ``activemask``,
  ``lanemask_lt`` (see `kernel_lab.simulator.warp`);
* barriers that never hang: a deadlock is reported as `DeadlockError` (`scheduler`); under
  `time_limit`, a launch that runs past its limit stops with `KernelDidNotFinish`;
* shared-memory race detection, `SharedMemoryRace` (`races`), switchable with
  `race_detection`;
* out-of-bounds accesses reported as `OutOfBoundsAccess` with the array, index, thread and line
  (`bounds`);
* ``cuda.jit`` accepting all of numba-cuda's keywords (`jit_options`), and CUDA events that
  measure wall-clock time (`events`);
* block schedules that run blocks in reverse or interleaved at atomics, fences and volatile reads,
  and report blocks that wait for each other forever, `GridStall` (`grid`);
* arrays whose stores other blocks see only after a fence, `DelayedStores` (`visibility`): a
  missing fence between data and flag made observable.

On a machine with a GPU the simulator is off, `install()` returns False and changes nothing;
the error classes can still be imported (for ``pytest.raises`` and ``except`` clauses).

Usage::

    import kernel_lab.simulator as ksim
    ksim.install()                      # after numba.cuda is imported with the simulator on
    with ksim.race_detection(False):    # e.g. to time a kernel without the tracking cost
        ...
"""

from .errors import (
    DeadlockError,
    KernelDidNotFinish,
    KernelLabSimulatorError,
    OutOfBoundsAccess,
    PollStall,
    SharedMemoryRace,
    UndefinedShuffleValue,
    WarpMaskError,
)
from .grid import GridStall, block_schedule
from .install import install, is_installed, simulator_active, supports_warp_operations
from .settings import race_detection, settings, time_limit
from .visibility import DelayedStores

__all__ = [
    "install",
    "is_installed",
    "simulator_active",
    "supports_warp_operations",
    "race_detection",
    "settings",
    "time_limit",
    "block_schedule",
    "GridStall",
    "DelayedStores",
    "KernelLabSimulatorError",
    "SharedMemoryRace",
    "OutOfBoundsAccess",
    "WarpMaskError",
    "UndefinedShuffleValue",
    "DeadlockError",
    "KernelDidNotFinish",
    "PollStall",
]
