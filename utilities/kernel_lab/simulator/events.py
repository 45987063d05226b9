"""CUDA events that measure time under the simulator, so timing code needs no branch.

On a GPU, ``cuda.event()`` marks a point in a stream and ``start.elapsed_time(end)`` gives the
GPU time between two marks in milliseconds. The plain simulator's events return -1. Here an
event's ``record()`` notes the host's wall clock (``time.perf_counter``); since the simulator runs
every kernel to completion before the launch returns, the time between two records is the time
the simulated work took. It says nothing about GPU speed: the simulator is thousands of times
slower than a GPU, and its numbers are only good for comparing simulator runs.
"""

import time


class SimulatorEvent:
    """A CUDA event of the simulator: ``record()`` notes the wall-clock time."""

    def __init__(self, timing=True):
        self.timing = bool(timing)
        self._time = None

    def record(self, stream=0):
        """Mark the current point (the simulator has no queued work, so: now)."""
        self._time = time.perf_counter()

    def synchronize(self):
        """Wait for the event (nothing to wait for: simulated work is already done)."""

    def wait(self, stream=0):
        """Make `stream` wait for the event (nothing to wait for under the simulator)."""

    def query(self):
        """True: all recorded work is complete."""
        return True

    def elapsed_time(self, evtend):
        """Milliseconds from this event to `evtend`."""
        return event_elapsed_time(self, evtend)

    def __repr__(self):
        return f"<SimulatorEvent timing={self.timing} recorded={self._time is not None}>"


def event(timing=True):
    """Create an event, like ``cuda.event(timing=True)`` on a GPU."""
    return SimulatorEvent(timing=timing)


def event_elapsed_time(evtstart, evtend):
    """Milliseconds between two recorded events, like ``cuda.event_elapsed_time`` on a GPU."""
    for name, evt in (("start", evtstart), ("end", evtend)):
        if not getattr(evt, "timing", False):
            raise ValueError(
                f"the {name} event was created with timing=False, so it records no time "
                "(on a GPU this is CUDA_ERROR_INVALID_HANDLE). Create it with "
                "cuda.event(timing=True)."
            )
        if getattr(evt, "_time", None) is None:
            raise ValueError(
                f"the {name} event was never recorded: call .record() on it before asking for "
                "the elapsed time (on a GPU this is CUDA_ERROR_INVALID_HANDLE)."
            )
    return (evtend._time - evtstart._time) * 1000.0
