"""Patching Numba's CUDA simulator with this package's pieces (`install`).

Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) runs kernels on the CPU. It lacks warp functions,
rejects many ``cuda.jit`` keywords, has events that do not time, and reports a bad index as a bare
IndexError. `install()` fixes that by patching the simulator's classes in place:

=============================================  ==================================================
simulator piece                                replaced by
=============================================  ==================================================
``kernel.BlockManager`` (runs a block)         `scheduler.BlockRunner`
``FakeCUDAModule`` (``cuda`` inside a kernel)  + warp functions (`warp`), fixed bit functions
``FakeCUDAShared.array``                       per-block arrays, tracked (`shared_memory`)
``FakeCUDALocal.array``                        poisoned like shared memory, not ``np.empty``
``FakeCUDAAtomic.*``                           record atomics on shared arrays (`shared_memory`)
``cuda.jit``                                   `jit_options.make_jit`
``cuda.event``, ``cuda.event_elapsed_time``    `events`
``math.ldexp``                                 accepts NumPy integers (`math_functions`)
``cuda.fma``                                   one rounding, exactly (`math_functions`)
=============================================  ==================================================

On a GPU (simulator off) `install()` does nothing and returns False.
"""

import sys
import threading

import numpy as np

_installed = False

_ATOMIC_NAMES = (
    "add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
    "compare_and_swap", "cas",
)  # fmt: skip


def simulator_active():
    """True when Numba's CUDA simulator is switched on (``NUMBA_ENABLE_CUDASIM=1``)."""
    numba = sys.modules.get("numba")
    if numba is None:
        try:
            import numba
        except ImportError:
            return False
    return bool(getattr(numba.config, "ENABLE_CUDASIM", False))


def is_installed():
    """True once `install()` has patched the simulator."""
    return _installed


def supports_warp_operations():
    """True when kernels can use warp functions (shuffles, votes, syncwarp) here.

    Always on a GPU; under the simulator once `install()` has patched it in.
    """
    return _installed or not simulator_active()


def install():
    """Patch Numba's CUDA simulator; idempotent. Returns True if the simulator is patched.

    A no-op returning False when the simulator is not active (a real GPU is used), or when
    ``numba.cuda`` was imported before the simulator was switched on (then ``numba.cuda`` is the
    GPU version and there is nothing to patch).
    """
    global _installed
    if _installed:
        return True
    if not simulator_active():
        return False
    from numba import cuda  # noqa: F401 - importing builds the simulator's cuda module

    if "numba.cuda.simulator_init" not in sys.modules:
        return False
    _patch()
    _installed = True
    return True


def _patch():
    import numba.cuda as cuda
    import numba.cuda.simulator as sim
    from numba.cuda.core import config
    from numba.cuda.core.sigutils import is_signature
    from numba.cuda.simulator import api as sim_api
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    from . import bits, events, grid, math_functions, shared_memory, warp
    from .jit_options import make_jit
    from .scheduler import BlockRunner

    math_functions.patch()

    # Blocks run under our scheduler (barriers, warp rendezvous, deadlock detection, errors).
    sim_kernel.BlockManager = BlockRunner

    # `cuda.<name>` inside a kernel resolves on FakeCUDAModule.
    module = kernelapi.FakeCUDAModule
    for name, function in {**warp.FUNCTIONS, **bits.FUNCTIONS, **math_functions.FUNCTIONS}.items():
        setattr(module, name, staticmethod(function))
    if not hasattr(module, "warpsize"):
        module.warpsize = property(lambda self: 32)
    if not hasattr(module, "laneid"):
        module.laneid = property(lambda self: threading.current_thread().thread_id % 32)
    # ... and `from numba.cuda import shfl_down_sync` should work as on a GPU.
    for name, function in warp.FUNCTIONS.items():
        if not hasattr(cuda, name):
            setattr(cuda, name, function)

    # Device memory starts as whatever was there before, on a GPU as here; but np.ndarray (which the
    # simulator's device_array is) hands over this process's leftovers, different from machine to
    # machine, and a check's message about an element nobody wrote would change with them (the
    # mistakes page quoted 4.58e-41 on one machine). Poisoned bytes read the same everywhere.
    from numba.cuda.simulator.cudadrv import devicearray as sim_devicearray

    original_device_array = sim_devicearray.device_array

    def device_array(*args, **kwargs):
        array = original_device_array(*args, **kwargs)
        raw = array._ary
        if raw.size and raw.dtype.itemsize:
            raw.fill(np.frombuffer(bytes([shared_memory.POISON_BYTE]) * raw.dtype.itemsize, raw.dtype)[0])
        return array

    device_array.__doc__ = original_device_array.__doc__
    sim_devicearray.device_array = device_array  # device_array_like calls it from this module
    for namespace in (cuda, sim):
        namespace.device_array = device_array

    # Shared memory: per-block arrays, tracked for races when race detection is on.
    original_array = kernelapi.FakeCUDAShared.array

    def shared_array(self, shape, dtype, alignment=None):
        runner = getattr(threading.current_thread(), "runner", None)
        if runner is None:
            return original_array(self, shape, dtype, alignment)
        if alignment is not None and (not isinstance(alignment, (int, np.integer)) or alignment <= 0
                                      or alignment & (alignment - 1)):
            raise ValueError(f"cuda.shared.array(..., alignment={alignment!r}): the alignment must be a power of two")
        # An alignment (a power of two) changes where the GPU places the array, not what it holds:
        # NumPy's buffers here are aligned for any element type, and the simulator has no addresses.
        return shared_memory.shared_array(runner, shape, dtype)

    shared_array.__doc__ = original_array.__doc__
    kernelapi.FakeCUDAShared.array = shared_array

    # Local arrays start as whatever the thread's registers or stack held: the simulator's np.empty
    # hands a register that was never loaded what this process's memory held last, often another
    # thread's values, so a kernel that reads one passes or fails by chance. The shared-memory poison
    # makes that mistake read the same wrong value every time, and the check name it.
    original_local = kernelapi.FakeCUDALocal.array

    def local_array(self, shape, dtype, alignment=None):
        if alignment is not None:
            return original_local(self, shape, dtype, alignment)
        dtype = _as_numpy_dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return np.full(count * dtype.itemsize, shared_memory.POISON_BYTE, np.uint8).view(dtype).reshape(shape)

    local_array.__doc__ = original_local.__doc__
    kernelapi.FakeCUDALocal.array = local_array
    for name in _ATOMIC_NAMES:
        original = getattr(kernelapi.FakeCUDAAtomic, name, None)
        if original is not None:
            setattr(kernelapi.FakeCUDAAtomic, name, shared_memory.wrap_atomic(name, original))

    # Fences and volatile/cache-hinted reads: scheduling points under an interleaved block
    # schedule (grid.py); the loads themselves are plain reads (memory is sequentially consistent).
    for fence in ("threadfence", "threadfence_block", "threadfence_system"):
        original_fence = getattr(module, fence, None)
        setattr(module, fence, grid.fence(fence, original_fence))
    for hint in ("ldca", "ldcg", "ldcs", "ldlu", "ldcv"):
        setattr(module, hint, staticmethod(grid.cache_hinted_load(hint)))
        if not hasattr(cuda, hint):
            setattr(cuda, hint, grid.cache_hinted_load(hint))

    # cuda.jit with numba-cuda's keywords; events that time.
    jit = make_jit(sim_kernel.FakeCUDAKernel, is_signature, config)
    for namespace in (cuda, sim, sim_api):
        namespace.jit = jit
        namespace.event = events.SimulatorEvent
        namespace.Event = events.SimulatorEvent
        namespace.event_elapsed_time = events.event_elapsed_time


def _as_numpy_dtype(dtype):
    """A Numba type (``float32``) or anything NumPy takes, as a NumPy dtype."""
    from numba import types
    from numba.np import numpy_support

    return numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else np.dtype(dtype)
