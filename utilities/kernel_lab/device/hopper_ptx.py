"""What every Hopper-only inline-PTX intrinsic needs: the target's compute capability, and the
addresses the instructions take (a 32-bit shared-window address, a 64-bit global one).

Numba compiles a kernel for one compute capability (the GPU's, or ``cc=`` of ``cuda.compile``); it
sits on Numba's configuration stack while the kernel is lowered, which is where
:func:`require_hopper` reads it. Below 9.0 an mbarrier's ``try_wait`` or a bulk copy would be
refused by the PTX assembler with a line about an unsupported instruction; this says which
intrinsic, which target, and what to do instead. GPU only: the simulator never imports this.
"""

from __future__ import annotations

from ..validate import KernelLabArgumentError

HOPPER = (9, 0)


def target_compute_capability():
    """The compute capability Numba is compiling for now, as ``(major, minor)``; None outside a compile."""
    from numba.cuda.core import targetconfig

    try:
        cc = targetconfig.ConfigStack().top().compute_capability
    except (IndexError, AttributeError):
        return None
    return None if cc is None else (int(cc[0]), int(cc[1]))


def require_hopper(name: str) -> None:
    cc = target_compute_capability()
    if cc is not None and cc < HOPPER:
        raise KernelLabArgumentError(
            f"{name} needs compute capability 9.0 or newer (Hopper: H100, H200; Blackwell), but this kernel is "
            f"compiled for {cc[0]}.{cc[1]}. On older GPUs use cp.async (kernel_lab.mma_ptx.cp_async16_at) with "
            "cuda.syncthreads() instead of bulk copies and mbarriers.")


def element_pointer(context, builder, array_type, array, index_type, index):
    """LLVM pointer to ``array[index]`` (no wraparound, no bounds check, as the instructions see it)."""
    from numba.cuda import cgutils
    from numba.cuda.api_util import normalize_indices

    index_type, indices = normalize_indices(context, builder, index_type, index, array_type, array_type.dtype)
    struct = context.make_array(array_type)(context, builder, value=array)
    return cgutils.get_item_pointer(context, builder, array_type, struct, indices, wraparound=False)


def shared_u32(builder, ptr):
    """Generic pointer -> the 32-bit address in the shared window (cvta.to.shared, then truncated)."""
    from llvmlite import ir

    shared = builder.addrspacecast(ptr, ir.IntType(8).as_pointer(3))
    return builder.trunc(builder.ptrtoint(shared, ir.IntType(64)), ir.IntType(32))


def global_u64(builder, ptr):
    """Generic pointer -> 64-bit global address (cvta.to.global)."""
    from llvmlite import ir

    return builder.ptrtoint(builder.addrspacecast(ptr, ir.IntType(8).as_pointer(1)), ir.IntType(64))


def require_array(array, what, *, itemsize=None):
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError

    if not isinstance(array, types.Array):
        raise NumbaTypeError(f"{what}: expected an array, got {array}")
    if itemsize is not None and array.dtype.bitwidth != 8 * itemsize:
        raise NumbaTypeError(f"{what}: expected an array of {8 * itemsize}-bit words (np.uint64), got {array}")
