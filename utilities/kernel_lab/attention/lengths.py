"""``kv_lens``, the keys each batch entry attends to, checked and placed on the device for a launch.

Every attention launcher of the package reads ``kv_lens[b]`` as the number of valid keys of batch
entry ``b`` and loops over that many rows of K and V. A length past the number of keys would make a
kernel read past the end of K and V (on a GPU, silently: an out-of-bounds read), a negative one
would mask every key. So every launcher passes its ``kv_lens`` through :func:`kv_lens_on_device`,
which refuses, with a message naming the entry, any length outside ``0 <= kv_lens[b] <= seq_k``.

A device array is checked by copying its ``batch`` lengths to the host. The benchmarks launch many
times with the same lengths array, so an array is checked once per (address, batch, seq_k) and not
on every launch: the copy would add a synchronisation to each timed call. An array whose contents
are changed in place after its first launch is not checked again.
"""

from __future__ import annotations

import numpy as np

from ..validate import KernelLabArgumentError

_CHECKED: set = set()  # (device address, batch, seq_k) of device arrays already checked
_FULL: dict = {}  # (batch, seq_k) -> a device array of full lengths, made once


def check_kv_lens(lens, batch: int, seq_k: int) -> np.ndarray:
    """``lens`` (host values) as int32 ``[batch]``, or a KernelLabArgumentError naming what is wrong."""
    a = np.asarray(lens)
    if a.shape != (batch,):
        raise KernelLabArgumentError(f"kv_lens must hold one length per batch entry ({batch}), got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise KernelLabArgumentError(f"kv_lens must hold integers (int32), got {a.dtype}")
    bad = np.flatnonzero((a < 0) | (a > seq_k))
    if bad.size:
        b = int(bad[0])
        raise KernelLabArgumentError(
            f"kv_lens[{b}] = {int(a[b])}: each length must lie in 0 .. {seq_k} (the number of keys, k.shape[2]); "
            f"a longer one would read past the end of K and V")
    return a.astype(np.int32)


def kv_lens_on_device(kv_lens, batch: int, seq_k: int):
    """The int32 device array of lengths a kernel reads: full lengths for ``None``, host values
    checked then copied, a device array checked (once per address) and passed as it is."""
    from numba import cuda  # after kernel_lab: it chose GPU or simulator

    if kv_lens is None:
        key = (batch, seq_k)
        if key not in _FULL:
            _FULL[key] = cuda.to_device(np.full(batch, seq_k, np.int32))
        return _FULL[key]
    if not hasattr(kv_lens, "copy_to_host"):
        return cuda.to_device(check_kv_lens(kv_lens, batch, seq_k))
    if np.dtype(kv_lens.dtype) != np.int32:
        raise KernelLabArgumentError(f"kv_lens on the device must be int32 (the kernels read 32-bit lengths), "
                                     f"got {kv_lens.dtype}")
    key = (_address(kv_lens), batch, seq_k)
    if key not in _CHECKED:
        check_kv_lens(kv_lens.copy_to_host(), batch, seq_k)
        _CHECKED.add(key)
    return kv_lens


def _address(arr) -> int:
    iface = getattr(arr, "__cuda_array_interface__", None)
    return int(iface["data"][0]) if iface else id(arr)
