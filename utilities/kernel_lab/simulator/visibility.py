"""Stores that other blocks see late: what a missing fence does on a GPU, made observable.

Memory in the simulator is sequentially consistent: a store is seen by every thread at once, so a
kernel that sets a flag before its data is published (no fence between) always works here. On a GPU
(and across two GPUs over NVLink even more so) the flag can arrive first. ``DelayedStores`` wraps a
NumPy array so that this happens here too:

* a store by a block goes into that block's *pending* stores; the block itself reads its own
  pending values back, every other block (and the host) still reads the old memory;
* a fence makes the block's pending stores visible, if its scope covers the array's:
  ``cuda.threadfence_system()`` publishes arrays of scope ``"system"`` (memory another GPU reads)
  and ``"gpu"``; ``cuda.threadfence()`` only those of scope ``"gpu"``; ``threadfence_block`` none;
* when the launch ends (a kernel boundary) every pending store becomes visible;
* ``scope=None`` makes stores visible at once (sequential consistency, the simulator's default):
  a check reruns a failing kernel that way to tell a missing fence from a reader that does not wait.

The adversary is the worst a GPU may do, not what it usually does: without a fence, data stays
invisible to other blocks until the kernel ends, however long the flag has been set.

Not modelled: a fence by one thread publishes every store its block made before the fence (on a GPU
only its own and those it observed, for instance through ``cuda.syncthreads()``); reads are never
reordered (a reader's acquire is implied). Only element indices (an int, or a tuple of ints) are
supported inside kernels; ``.base`` is the NumPy array, for the host.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

SCOPES = ("system", "gpu", None)
# Which scopes each fence publishes.
FENCE_SCOPES = {"threadfence_system": ("system", "gpu"), "threadfence": ("gpu",), "threadfence_block": ()}

_live: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()


def _runner():
    return getattr(threading.current_thread(), "runner", None)


class DelayedStores:
    """A global array whose stores other blocks see only after the storing block's fence (or when
    the launch ends). Pass it to a kernel in place of the NumPy array; read results from ``.base``."""

    def __init__(self, base: np.ndarray, scope: str | None = "system"):
        if scope not in SCOPES:
            raise ValueError(f"DelayedStores: scope must be one of {SCOPES}, got {scope!r}")
        self.base = np.asarray(base)
        self.scope = scope
        self.shape, self.dtype, self.size, self.ndim = self.base.shape, self.base.dtype, self.base.size, self.base.ndim
        self._pending: dict[object, dict[int, object]] = {}  # runner -> {flat index: value}, in store order
        with _lock:
            _live.add(self)

    def __len__(self):
        return len(self.base)

    def _flat(self, index) -> int:
        if isinstance(index, (int, np.integer)):
            index = (int(index),)
        if not (isinstance(index, tuple) and all(isinstance(i, (int, np.integer)) for i in index)):
            raise TypeError(f"DelayedStores supports element indices only (an int or a tuple of ints), got {index!r}")
        if len(index) != self.ndim:
            raise IndexError(f"{self.ndim}-d array indexed with {len(index)} indices")
        norm = []
        for i, n in zip(index, self.shape):
            i = int(i)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis of size {n}")
            norm.append(i % n)
        return int(np.ravel_multi_index(tuple(norm), self.shape))

    def __getitem__(self, index):
        flat = self._flat(index)
        runner = _runner()
        if runner is not None:
            with _lock:
                mine = self._pending.get(runner)
                if mine is not None and flat in mine:
                    return mine[flat]
        return self.base.reshape(-1)[flat]

    def __setitem__(self, index, value):
        flat = self._flat(index)
        runner = _runner()
        if runner is None or self.scope is None:
            self.base.reshape(-1)[flat] = value
            return
        with _lock:
            self._pending.setdefault(runner, {})[flat] = self.dtype.type(value)

    def publish(self, runner=None) -> None:
        """Make pending stores visible: ``runner``'s (a block), or every block's (``None``)."""
        with _lock:
            runners = list(self._pending) if runner is None else [runner]
            flat_base = self.base.reshape(-1)
            for r in runners:
                for flat, value in self._pending.pop(r, {}).items():
                    flat_base[flat] = value

    def pending_count(self) -> int:
        with _lock:
            return sum(len(p) for p in self._pending.values())

    def __repr__(self):
        return f"DelayedStores(scope={self.scope!r}, shape={self.shape}, dtype={self.dtype}, pending={self.pending_count()})"


def fenced(name: str) -> None:
    """Called by the simulator's ``cuda.<name>()`` (a fence): publish the calling block's pending
    stores to the arrays whose scope the fence covers."""
    runner = _runner()
    scopes = FENCE_SCOPES.get(name, ())
    if runner is None or not scopes:
        return
    with _lock:
        arrays = [a for a in _live if a.scope in scopes]
    for array in arrays:
        array.publish(runner)


def launch_ended() -> None:
    """A kernel boundary: every pending store of every array becomes visible."""
    with _lock:
        arrays = list(_live)
    for array in arrays:
        array.publish()
