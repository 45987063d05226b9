"""The cuBLASDx toolchain that modules 04, 06 and 07 share: the device API with the compile caches on,
device views of GPU arrays, launch types, and the opt-in to more than 48 KB of shared memory.

It sits below the module subpackages (tests/test_package_layers.py: the "compile" layer, with
``codegen_cache``, ``cubin_cache``, ``offline``, ``precisions``, ``fragments`` and ``validate``), so the
attention forward of module 04 and the Ozaki kernels of module 07 build on it without importing
module 06's GEMMs, and module 06 (whose ``gemm`` re-exports these names) without importing them.
"""

from __future__ import annotations

from .validate import GemmArgumentError


def device_api():
    """nvmath-python's device API as ``(nvmath.device, nvmath.device.common)``, with the code-generation
    and cubin caches switched on first: every cuBLASDx kernel of the package (modules 04, 06, 07) gets the
    API here, so that no kernel is generated before the caches are on."""
    from . import codegen_cache, cubin_cache

    codegen_cache.enable()
    cubin_cache.enable()
    import nvmath.device as nd
    from nvmath.device import common as ndc

    return nd, ndc


def as_device(x):
    """A Numba device-array view of a CuPy, PyTorch or Numba GPU array (no copy)."""
    from numba import cuda

    if hasattr(x, "copy_to_host") and hasattr(x, "__cuda_array_interface__"):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return cuda.as_cuda_array(x)
    raise GemmArgumentError(f"expected an array on the GPU (CuPy, PyTorch or Numba), got "
                            f"{type(x).__name__}; copy it with cupy.asarray(...) or cuda.to_device(...)")


def launch_types(dispatcher, args) -> tuple:
    """The Numba types a launch of ``dispatcher`` gives ``args``.

    Uses the CUDA target's own ``typeof`` (through the dispatcher), which knows the types that
    nvmath-python registers there (``DevicePipeline``); ``numba.typeof`` does not.
    """
    return tuple(dispatcher.typeof_pyval(a) for a in args)


def set_max_dynamic_shared_memory(dispatcher, args, nbytes: int):
    """Allow a kernel more than 48 KB of dynamic shared memory (compiles it for ``args`` first)."""
    from cuda.bindings import driver as drv

    compiled = dispatcher.compile(launch_types(dispatcher, args))
    cufunc = compiled.library.get_cufunc()
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = cufunc.handle
    errors = []
    try:  # numba-cuda >= 0.2x loads kernels as CUkernel (library API)
        err, = drv.cuKernelSetAttribute(attr, int(nbytes), handle, cufunc.device.id)
        if err == drv.CUresult.CUDA_SUCCESS:
            return
        errors.append(f"cuKernelSetAttribute: {err}")
    except Exception as exc:  # noqa: BLE001 - try the function API next
        errors.append(f"cuKernelSetAttribute: {exc}")
    try:
        err, = drv.cuFuncSetAttribute(getattr(handle, "value", handle), attr, int(nbytes))
        if err == drv.CUresult.CUDA_SUCCESS:
            return
        errors.append(f"cuFuncSetAttribute: {err}")
    except Exception as exc:  # noqa: BLE001
        errors.append(f"cuFuncSetAttribute: {exc}")
    raise RuntimeError(f"could not allow {nbytes} bytes of dynamic shared memory: " + "; ".join(errors))
