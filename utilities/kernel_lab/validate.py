"""Argument checks shared by every helper, so that a mistake gets one clear sentence.

A learner who passes the wrong thing to a helper should read what is wrong and how to fix it,
not a stack trace from deep inside NumPy or Numba. Every public helper validates its arguments
with these functions.
"""

from __future__ import annotations

import numbers

import numpy as np


class KernelLabArgumentError(ValueError):
    """A helper was called with something it cannot use. The message says what and how to fix it."""

    def _render_traceback_(self):  # IPython: show the sentence, not a stack trace
        return [f"{type(self).__name__}: {self}"]


def require_positive_int(value, name: str, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise KernelLabArgumentError(f"{name} must be a whole number, got {value!r} ({type(value).__name__})")
    if value < 0 or (value == 0 and not allow_zero):
        raise KernelLabArgumentError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return int(value)


def require_callable(value, name: str):
    if not callable(value):
        raise KernelLabArgumentError(f"{name} must be a function, got {type(value).__name__}")
    return value


def _describe_layout(arr) -> tuple[tuple, np.dtype, bool]:
    """(shape, dtype, C-contiguous) of a NumPy, Numba device or CuPy array."""
    iface = getattr(arr, "__cuda_array_interface__", None) or getattr(arr, "__array_interface__", None)
    if iface is None:
        raise KernelLabArgumentError(f"expected an array, got {type(arr).__name__}")
    shape = tuple(iface["shape"])
    dtype = np.dtype(iface["typestr"])
    strides = iface.get("strides")
    if strides is None:
        contiguous = True
    else:
        expected, step = [], dtype.itemsize
        for extent in reversed(shape):
            expected.append(step)
            step *= extent
        contiguous = all(s == e for s, e, n in zip(strides, reversed(expected), shape) if n > 1)
    return shape, dtype, contiguous


def require_array(arr, name: str, *, dtype=None, ndim: int | None = None, shape=None,
                  contiguous: bool = False, finite: bool = False):
    """Check an array argument; raise one readable sentence naming the problem.

    ``dtype`` may be a dtype or a tuple of allowed dtypes; ``shape`` may use None for "any extent".
    ``finite`` (host arrays only) rejects NaN and infinity.
    """
    if isinstance(arr, (list, tuple)):
        raise KernelLabArgumentError(f"{name} must be an array, got a Python {type(arr).__name__}; "
                                     "wrap it in np.asarray(...)")
    got_shape, got_dtype, is_contig = _describe_layout(arr)
    if ndim is not None and len(got_shape) != ndim:
        raise KernelLabArgumentError(f"{name} must have {ndim} dimension(s), got shape {got_shape}")
    if shape is not None:
        if len(shape) != len(got_shape) or any(w is not None and w != g for w, g in zip(shape, got_shape)):
            want = "(" + ", ".join("any" if w is None else str(w) for w in shape) + ")"
            raise KernelLabArgumentError(f"{name} has shape {got_shape}, expected {want}")
    if dtype is not None:
        allowed = tuple(np.dtype(d) for d in (dtype if isinstance(dtype, (tuple, list)) else (dtype,)))
        if got_dtype not in allowed:
            names = " or ".join(str(a) for a in allowed)
            raise KernelLabArgumentError(f"{name} has dtype {got_dtype}, expected {names}; "
                                         f"convert with .astype(np.{allowed[0]})")
    if contiguous and not is_contig:
        raise KernelLabArgumentError(f"{name} is not contiguous in memory (a transposed or strided view); "
                                     "kernels here index it as a dense row-major array: pass "
                                     "np.ascontiguousarray(...) of it")
    if finite and isinstance(arr, np.ndarray) and arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        first = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise KernelLabArgumentError(f"{name} holds {bad} NaN or infinite value(s), the first at index "
                                     f"{first}; inputs and references must be finite")
    return arr
