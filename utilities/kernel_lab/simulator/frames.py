"""Where in the learner's code are we? Finding the kernel line behind an event, and printing it.

Every message of the simulator points at a line of the learner's kernel ("stencil.py:21"), not at
a line of Numba's simulator or of this package. The helpers below walk up the Python call stack
past frames that belong to NumPy, to Numba's simulator, to the threading module or to this
package, and describe the first frame that is left.
"""

import linecache
import os
import sys
import threading

_internal_prefixes = None


def _prefixes():
    global _internal_prefixes
    if _internal_prefixes is None or "numba.cuda.simulator" not in _internal_prefixes[-1]:
        here = os.path.dirname(os.path.abspath(__file__))
        # This package's modules, except benchmark.py, whose kernels are "user code".
        paths = [
            os.path.join(here, name)
            for name in os.listdir(here)
            if name.endswith(".py") and name != "benchmark.py"
        ]
        # kernel_lab.device: the intrinsics' models and the device functions around them (an mbarrier's
        # wait loop), so that a thread stuck in one is reported at the kernel line that called it.
        paths.append(os.path.join(os.path.dirname(here), "device") + os.sep)
        for name in ("numpy", "numba.cuda.simulator"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__file__", None):
                paths.append(os.path.dirname(os.path.abspath(module.__file__)))
        for module in (threading, linecache):
            paths.append(os.path.abspath(module.__file__))
        import contextlib
        import functools

        paths += [os.path.abspath(contextlib.__file__), os.path.abspath(functools.__file__)]
        # The last entry records whether Numba's simulator was known: if not, look again later.
        known = "numba.cuda.simulator" if "numba.cuda.simulator" in sys.modules else ""
        _internal_prefixes = (tuple(paths), known)
        _internal_cache.clear()
    return _internal_prefixes[0]


_internal_cache = {}


def is_internal(filename):
    """True for files of NumPy, Numba's simulator, the threading machinery and this package.

    (The kernels in this package's benchmark.py count as the learner's code.)
    """
    prefixes = _prefixes()
    result = _internal_cache.get(filename)
    if result is None:
        result = os.path.abspath(filename).startswith(prefixes)
        _internal_cache[filename] = result
    return result


def user_frame(frame):
    """The innermost frame at or above `frame` that belongs to the learner's code (or None)."""
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def caller_site(depth=1):
    """(filename, line, function) of the learner's code that called us; `depth` skips our frames."""
    frame = user_frame(sys._getframe(depth + 1))
    if frame is None:
        return ("<unknown>", 0, "?")
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def short_filename(filename):
    """A path relative to the working directory when it lies below it, else the path itself."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def source_line(filename, lineno):
    """The stripped source text of a line, or '' when it cannot be read."""
    return linecache.getline(filename, lineno).strip() if lineno else ""


def format_site(site, with_source=True):
    """'file.py:12 (in kernel):  a[i] = b[i]' for a (filename, line, function) triple."""
    filename, lineno, func = site
    text = f"{short_filename(filename)}:{lineno}"
    if func and func != "?":
        text += f" (in {func})"
    if with_source:
        src = source_line(filename, lineno)
        if src:
            text += f":  {src}"
    return text


def format_lanes(mask):
    """'0-15, 20' for the set bits of a 32-bit lane mask (or 'none')."""
    lanes = [lane for lane in range(32) if (mask >> lane) & 1]
    if not lanes:
        return "none"
    parts, start, prev = [], lanes[0], lanes[0]
    for lane in lanes[1:] + [None]:
        if lane is not None and lane == prev + 1:
            prev = lane
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if lane is not None:
            start = prev = lane
    return ", ".join(parts)


def format_dim3(d):
    """'(x, y, z)' for a Dim3 or a tuple."""
    return "(" + ", ".join(str(int(v)) for v in tuple(d)) + ")"


def format_thread(thread):
    """'thread (5, 0, 0) of block (1, 0, 0)' for a simulated CUDA thread."""
    return f"thread {format_dim3(thread.threadIdx)} of block {format_dim3(thread.blockIdx)}"
