"""Teach nvmath-python 1.0's device API two formats its tables leave out: bfloat16 and tf32.

libmathdx (the C library under ``nvmath.device``) generates cuBLASDx code for bf16 and tf32
tensor cores, but nvmath-python 1.0 only maps float16/32/64 and the integer dtypes to it. This
module adds the missing rows to nvmath's mapping tables, nothing else:

- ``bfloat16``: host dtype ``ml_dtypes.bfloat16`` (what NumPy, CuPy and Numba use), Numba type
  ``numba.cuda.types.bfloat16``, libmathdx precision ``BF16``;
- ``tf32``: a marker type :class:`tfloat32` that names the precision; values are stored as float32
  (a tf32 number is a float32 whose 13 low mantissa bits are ignored), libmathdx precision ``TF32``.

Without a call to :func:`register` these formats are unavailable, and ``Matmul`` raises its own
error. Registering is idempotent. If a future nvmath-python changes these tables, :func:`register`
raises a RuntimeError that says so, instead of producing wrong code.
"""

from __future__ import annotations

import numpy as np


class tfloat32(np.float32):  # noqa: N801 - a dtype-like name, as numpy spells them
    """Marker for the tf32 tensor-core format (stored as float32)."""


_DONE = False


def register() -> None:
    """Add bfloat16 and tf32 to nvmath-python's device-API type tables (once per process)."""
    global _DONE
    if _DONE:
        return
    import ml_dtypes
    from numba.cuda import types as cuda_types
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend, common_numba, cublasdx_backend

    bf16 = ml_dtypes.bfloat16
    needed = ["NP_TYPES_TO_MATHDX_PRECISION", "MATHDX_TYPES_TO_NP", "NP_TYPES_TO_MATHDX_TYPES"]
    if not all(hasattr(common_backend, n) for n in needed) or not hasattr(cublasdx_backend, "_ACCEPTED_PRECISION") \
            or not hasattr(common_numba, "NUMBA_FE_TYPES_TO_NUMBA_IR"):
        raise RuntimeError("kernel_lab.tensor_cores.precisions: this nvmath-python does not have the type tables "
                           "of version 1.0; bfloat16/tf32 cannot be registered (use float16 or int8)")
    common_backend.NP_TYPES_TO_MATHDX_PRECISION[bf16] = mathdx.CommondxPrecision.BF16
    common_backend.MATHDX_TYPES_TO_NP[mathdx.CommondxValueType.R_16BF] = bf16
    common_backend.NP_TYPES_TO_MATHDX_TYPES[bf16] = mathdx.CommondxValueType.R_16BF
    common_numba.NUMBA_FE_TYPES_TO_NUMBA_IR[bf16] = cuda_types.bfloat16
    common_numba.NP_TYPES_TO_NUMBA_FE_TYPES[bf16] = bf16

    common_backend.NP_TYPES_TO_MATHDX_PRECISION[tfloat32] = mathdx.CommondxPrecision.TF32
    # The value type of a TF32 operand comes back as R_32TF: it is stored as float32.
    common_backend.MATHDX_TYPES_TO_NP[mathdx.CommondxValueType.R_32TF] = np.float32

    for t in (bf16, tfloat32):
        if t not in cublasdx_backend._ACCEPTED_PRECISION:
            cublasdx_backend._ACCEPTED_PRECISION.append(t)
    _DONE = True


def host_dtype(name: str):
    """The NumPy dtype that holds operands of a precision in memory."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"float16": np.float16, "tf32": np.float32, "int8": np.int8, "int4": np.uint8}[name])


def matmul_precision(name: str):
    """The ``precision=`` triple for ``nvmath.device.Matmul``."""
    if name in ("bfloat16", "tf32"):
        register()
    if name == "bfloat16":
        import ml_dtypes

        return (ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32)
    return {"float16": (np.float16, np.float16, np.float32), "tf32": (tfloat32, tfloat32, np.float32),
            "int8": (np.int8, np.int8, np.int32), "int4": (np.int8, np.int8, np.int32)}[name]


def to_device(x):
    """Copy a host array to the GPU as a Numba device array, bfloat16 included.

    Numba's ``cuda.to_device`` copies through Python's buffer protocol, which does not know
    ml_dtypes' bfloat16 (``ValueError: cannot include dtype 'E' in a buffer``). The bits are the
    same as uint16's: copy those, then view the device array as bfloat16 again (no conversion).
    """
    from numba import cuda

    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        return cuda.to_device(x.view(np.uint16)).view(x.dtype)
    return cuda.to_device(x)


def to_host(d):
    """Copy a Numba device array back to a NumPy array, bfloat16 included (see :func:`to_device`)."""
    if d.dtype.name == "bfloat16":
        return d.view(np.uint16).copy_to_host().view(d.dtype)
    return d.copy_to_host()
