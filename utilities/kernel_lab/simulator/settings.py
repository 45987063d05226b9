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

The settings are read when a kernel is launched, so changing them inside a kernel does nothing.
"""

import os


class Settings:
    """The simulator's switches (one shared instance: `settings`)."""

    def __init__(self):
        env = os.environ.get("KERNEL_LAB_RACE_DETECTION", "1").strip().lower()
        self.race_detection = env not in ("0", "false", "no", "off")
        self.hang_timeout_s = 120.0

    def __repr__(self):
        return (
            f"Settings(race_detection={self.race_detection}, "
            f"hang_timeout_s={self.hang_timeout_s})"
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
