"""How an inline-PTX intrinsic turns its array arguments into what the instructions take: a pointer
to ``array[index]``, the 32-bit address of a shared-memory element, the 64-bit address of a global
one, and the typing-time check that an argument is an array. Used by 06.1's ``mma_ptx`` (``mma.sync``,
``ldmatrix``, ``cp.async``) and by the Hopper intrinsics (``mbarrier``, ``bulk_copy``). GPU only: the
simulator never imports this.
"""

from __future__ import annotations


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
