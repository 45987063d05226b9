"""Shared memory for simulated kernels: one array per declaration and block, tracked for races.

``cuda.shared.array(shape, dtype)`` inside a kernel comes here. As on a GPU, each declaration (one
call site in the source) is one array per block, created when the first thread of the block
reaches it; a shape of 0 gives the block's dynamic shared memory, whose size in bytes is the
launch's 4th parameter (``kernel[blocks, threads, 0, nbytes]``). The arrays are uninitialised.

With race detection on, the kernel gets a `SharedArray` instead of the bare NumPy array: it
behaves like the array and reports each element access to the block's `RaceTracker` (races.py).
``cuda.atomic.*`` on a `SharedArray` is recorded as an atomic access, which never races with
another atomic.
"""

import re
import sys
import threading

import numpy as np

from .frames import short_filename, source_line, user_frame
from . import grid
from .races import ATOMIC, READ, WRITE


class SharedAllocation:
    """One shared array of one block (or the block's dynamic shared memory)."""

    def __init__(self, runner, seq, name, site, shape, dtype, dynamic=False):
        self.runner = runner
        self.tracker = runner.tracker
        self.seq = seq
        self.name = name
        self.site = site
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.dynamic = dynamic
        self.shadow = {}  # byte offset -> [last write, {thread: read}, {thread: atomic}]

    def describe(self):
        dims = ", ".join(str(s) for s in self.shape)
        kind = "dynamic shared memory" if self.dynamic else "shared array"
        return (
            f"{kind} `{self.name}` ({self.dtype.name}[{dims}], declared at "
            f"{short_filename(self.site[0])}:{self.site[1]})"
        )

    def element(self, offset):
        flat = offset // self.dtype.itemsize
        if len(self.shape) <= 1:
            return f"[{flat}]"
        return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, self.shape)) + "]"


class SharedArray:
    """A shared-memory array whose element accesses are reported to the race tracker.

    Indexing, assignment, ``.shape``, ``len()``, slicing into rows and use with ``cuda.atomic``
    work as with the NumPy array it wraps. Each element access costs a few microseconds.
    """

    __slots__ = ("_data", "_offs", "_alloc")

    def __init__(self, data, offsets, alloc):
        self._data = data
        self._offs = offsets
        self._alloc = alloc

    def __getitem__(self, index):
        value = self._data[index]
        offset = self._offs[index]
        if type(offset) is np.ndarray:  # a row or slice: a view, no element touched yet
            return SharedArray(value, offset, self._alloc)
        frame = sys._getframe(1)
        site = (frame.f_code, frame.f_lineno)
        self._alloc.tracker.access(threading.current_thread(), self._alloc, int(offset), READ, site)
        return value

    def __setitem__(self, index, value):
        self._data[index] = value
        offset = self._offs[index]
        frame = sys._getframe(1)
        site = (frame.f_code, frame.f_lineno)
        thread = threading.current_thread()
        tracker = self._alloc.tracker
        if type(offset) is np.ndarray:
            for off in offset.ravel().tolist():
                tracker.access(thread, self._alloc, off, WRITE, site)
        else:
            tracker.access(thread, self._alloc, int(offset), WRITE, site)

    def __len__(self):
        return len(self._data)

    def __iter__(self):
        for i in range(len(self._data)):
            yield self[i]

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        return self._data.size

    def __getattr__(self, name):
        return getattr(self._data, name)

    def __repr__(self):
        return f"SharedArray({self._alloc.name}: {self._data!r})"



# --- handing shared arrays to kernels ---------------------------------------------------------

_NAME = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")


def _declared_name(frame):
    line = source_line(frame.f_code.co_filename, frame.f_lineno)
    match = _NAME.match(line)
    if match and "shared.array" in line:
        return match.group(1)
    return None


def _as_dtype(dtype):
    try:
        from numba.cuda import types
        from numba.cuda.np import numpy_support

        if isinstance(dtype, types.Type):
            return numpy_support.as_dtype(dtype)
    except ImportError:  # pragma: no cover - only on unusual installs
        pass
    return np.dtype(dtype)


POISON_BYTE = 0x7B  # every byte of a static shared array, and of a device array, before a kernel writes it


def shared_array(runner, shape, dtype):
    """What ``cuda.shared.array(shape, dtype)`` returns to a thread of `runner`'s block.

    Each declaration (one call site in the source) is one array per block, as on a GPU; a shape
    of 0 means the block's dynamic shared memory (its size is the launch's 4th parameter).
    """
    caller = sys._getframe(2)
    frame = user_frame(caller) or caller
    key = (frame.f_code, frame.f_lasti)
    with runner.lock:
        found = runner.shared.get(key)
        if found is not None:
            return found
        dtype = _as_dtype(dtype)
        site = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        name = _declared_name(frame) or "<unnamed>"
        dynamic = (isinstance(shape, (int, np.integer)) and shape == 0) or (
            isinstance(shape, tuple) and len(shape) == 1 and shape[0] == 0)  # (0,) as numba-cuda takes it
        if dynamic:
            if runner.dynshared is None:
                # 1024-byte aligned on the host, as the models take alignment from host addresses
                # (tma's tile_start) and from the array's start (wgmma's descriptors): both agree
                buffer = np.zeros(runner.dynshared_size + 1024, dtype=np.byte)
                skip = -buffer.ctypes.data % 1024
                runner.dynshared = buffer[skip:skip + runner.dynshared_size]
            count = runner.dynshared_size // dtype.itemsize
            data = np.frombuffer(runner.dynshared.data, dtype=dtype, count=count)
        else:
            # Shared memory starts as whatever the last kernel left; a kernel that reads an element
            # before any thread wrote it is wrong. np.empty would hand it what this process's memory
            # held, which differs from machine to machine and run to run, and so would the check's
            # message. A fixed poison makes the mistake read the same value everywhere (0x7B bytes:
            # 1.3e36 as float32, 61280 as float16, 0x7B7B7B7B as int32: finite, and nothing a check
            # expects).
            count = int(np.prod(shape, dtype=np.int64))
            data = np.full(count * dtype.itemsize, POISON_BYTE, np.uint8).view(dtype).reshape(shape)
        runner.shared_names[id(data)] = (name, "dynamic shared memory" if dynamic else "shared")
        tracker = runner.tracker
        if tracker is None:
            result = data
        else:
            if dynamic:
                alloc = runner.dynshared_alloc
                if alloc is None:
                    alloc = runner.dynshared_alloc = SharedAllocation(
                        runner, len(tracker.allocs), name, site, data.shape, dtype, dynamic=True
                    )
                    tracker.allocs.append(alloc)
            else:
                alloc = SharedAllocation(runner, len(tracker.allocs), name, site, data.shape, dtype)
                tracker.allocs.append(alloc)
            offsets = np.arange(data.size, dtype=np.int64).reshape(data.shape) * dtype.itemsize
            result = SharedArray(data, offsets, alloc)
        runner.shared[key] = result
        return result


def wrap_atomic(name, original):
    """Make a ``cuda.atomic.*`` function record an atomic access when given a shared array."""

    def atomic(self, array, *args):
        if type(array) is not SharedArray:
            if grid.current_baton() is None:
                return original(self, array, *args)
            # Global memory under an interleaved block schedule: a scheduling point before the
            # atomic, and another right after it if it changed memory (a publication).
            grid.scheduling_point(f"cuda.atomic.{name}")
            index = args[0] if name != "compare_and_swap" else (0,) * array.ndim
            try:
                before = array[index].copy() if hasattr(array[index], "copy") else array[index]
            except Exception:  # noqa: BLE001 - an unusual index: the atomic reports it
                before = None
            result = original(self, array, *args)
            after = array[index] if before is not None else None
            if before is None or not _same_bits(before, after):
                grid.current_baton().progress(getattr(threading.current_thread(), "runner", None))
                grid.scheduling_point(f"just after cuda.atomic.{name} changed memory")
            return result
        index = (0,) * array.ndim if name == "compare_and_swap" else args[0]
        result = original(self, array._data, *args)
        offset = array._offs[index]
        frame = sys._getframe(1)
        site = (frame.f_code, frame.f_lineno)
        thread = threading.current_thread()
        array._alloc.tracker.access(thread, array._alloc, int(offset), ATOMIC, site)
        return result

    atomic.__name__ = name
    atomic.__doc__ = original.__doc__
    atomic._kernel_lab_original = original
    return atomic


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()
