"""Switches for the simulator's checks.

``settings.race_detection``
    Track every access to shared memory and raise `SharedMemoryRace` for unordered conflicting
    accesses (default on; the environment variable ``KERNEL_LAB_RACE_DETECTION=0`` turns it off).
    Tracking makes shared-memory-heavy kernels slower under the simulator (see README.md for the
    measured cost); it has no effect on a GPU.
``settings.hang_timeout_s``
    Last-resort limit: if no thread of a block reaches a barrier, a warp function or its end for
    this many seconds while other threads wait, the simulator raises `DeadlockError` instead of
    hanging. Real deadlocks (every thread waiting) are found at once, without this timeout.

`race_detection` changes the first setting either for good or for a ``with`` block::

    ksim.race_detection(False)            # off from now on
    with ksim.race_detection(False):      # off inside the block only
        kernel[grid, block](...)

``settings.deadline``
    A time (``time.monotonic()``) by which the launches under way must have finished, or None (the
    default: no limit). `time_limit` sets it for a ``with`` block: a check wraps the learner's launch
    in it, so that a kernel that never finishes (a loop whose condition stays true, a wait for
    something that never comes) stops with `KernelDidNotFinish`, naming the lines its threads are
    at, instead of hanging the notebook. Threads that keep taking part in warp functions or barriers
    look busy to the deadlock detection above; only a limit in time can tell that they never end.

The settings are read when a kernel is launched, so changing them inside a kernel does nothing.
"""

import os
import time


class Settings:
    """The simulator's switches (one shared instance: `settings`)."""

    def __init__(self):
        env = os.environ.get("KERNEL_LAB_RACE_DETECTION", "1").strip().lower()
        self.race_detection = env not in ("0", "false", "no", "off")
        self.hang_timeout_s = 120.0
        self.deadline = None  # time.monotonic() by which launches must finish (None: no limit)
        self.time_limit_s = None  # the limit that set the deadline, for messages

    def __repr__(self):
        return (
            f"Settings(race_detection={self.race_detection}, "
            f"hang_timeout_s={self.hang_timeout_s}, time_limit_s={self.time_limit_s})"
        )


settings = Settings()


class race_detection:
    """Turn shared-memory race detection on or off.

    Called as a statement it changes the setting for good; used with ``with`` it changes it for
    the block and then restores the previous value.
    """

    def __init__(self, enabled=True):
        self._previous = settings.race_detection
        settings.race_detection = bool(enabled)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        settings.race_detection = self._previous
        return False

    def __repr__(self):
        return f"race_detection({settings.race_detection})"


class time_limit:
    """Launches inside this ``with`` block must finish within ``seconds`` (all of them together).

    A block still running at the deadline stops with `KernelDidNotFinish`. Meant for checks, which
    know how long the right kernel takes in the simulator; a notebook's own launches have no limit.
    Nested limits keep the earlier deadline.
    """

    def __init__(self, seconds):
        if not seconds > 0:
            raise ValueError(f"time_limit(seconds): seconds must be positive, got {seconds!r}")
        self.seconds = float(seconds)
        self._previous = None

    def __enter__(self):
        self._previous = (settings.deadline, settings.time_limit_s)
        deadline = time.monotonic() + self.seconds
        if settings.deadline is None or deadline < settings.deadline:
            settings.deadline, settings.time_limit_s = deadline, self.seconds
        return self

    def __exit__(self, *exc_info):
        settings.deadline, settings.time_limit_s = self._previous
        return False
