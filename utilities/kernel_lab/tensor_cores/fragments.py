"""Which (row, column) of the output tile each accumulator register of a thread holds.

Why this module exists
----------------------
After ``MM.execute(smem_a, smem_b, c)`` every thread holds some of the block's ``tile_m x tile_n``
results in registers, in an order chosen by cuBLASDx: the *partition* of the tile among the
threads. cuBLASDx has two partitions, one for its *plain* shared-memory layouts
(``get_layout_smem_a/b``, ``get_layout_rmem_c``, ``get_accumulator``) and one for its *suggested*
(swizzled) layouts (``suggest_layout_smem_a/b``, ``suggest_accumulator``). They assign different
tile elements to a thread's i-th register.

nvmath-python 1.0 builds ``accumulator.map_fragment_index(i)`` and ``is_thread_active()`` for the
suggested partition only, whichever accumulator they are called on. A kernel that stages its
operands in the plain layouts (as ours do: our loaders write ``row * ld + col``, with bounds
checks, int4 unpacking and im2col gathers that cuBLASDx's copy cannot do) therefore computes every
value correctly and writes many of them to the wrong place. Symptom, seen on an H200: the first
few columns right, then ~85% of the output wrong, and in tf32 the right numbers one column over.

:func:`partition_functions` generates the two functions for the plain register fragment
(``get_layout_rmem_c``) with libmathdx, both in one code object (one NVRTC run instead of two),
and wraps them as Numba intrinsics:

- ``frag_coords(i) -> (row, col)``: the tile coordinate of register ``i`` of this thread;
- ``thread_active() -> bool``: whether this thread holds any part of the tile.

This uses nvmath-python's backend helpers (``nvmath.device.cublasdx_backend``), which are not a
public API: the module is written for nvmath-python 1.0 and checks that version.
"""

from __future__ import annotations

import functools

SUPPORTED_NVMATH = ("1.0.",)


def _check_version():
    import importlib.metadata

    v = importlib.metadata.version("nvmath-python")
    if not v.startswith(SUPPORTED_NVMATH):
        raise RuntimeError(f"kernel_lab.tensor_cores.fragments was written for nvmath-python {SUPPORTED_NVMATH}, "
                           f"found {v}: check whether map_fragment_index now follows the accumulator's partition")


def generate(MM, functions=("MAP_IDX2CRD_PARTITIONER", "IS_THREAD_ACTIVE"), tensor_type="rmem_c"):
    """Generate cuBLASDx device functions of one tensor of ``MM`` in one code object.

    Returns ``(ltoir bytes, {function name: symbol})``. ``tensor_type`` is a libmathdx tensor type
    in lower case (``"rmem_c"``: the plain register fragment; ``"suggested_rmem_c"``: the one nvmath
    uses).

    Compile time: libmathdx runs NVRTC to finalize a tensor description, once per call, whether the
    call finalizes one tensor or several. This function finalizes the fragment together with the
    two shared-memory tensors of the same kind, in one call; with the code-generation cache on, the
    kernel's own later requests for those tensors are then answered from the cache (one NVRTC run
    instead of three).
    """
    from nvmath.bindings import mathdx
    from nvmath.device.common_backend import get_lto
    from nvmath.device.common_cuda import get_default_code_type
    from nvmath.device.cublasdx import _blas_tensors_handle
    from nvmath.device.cublasdx_backend import generate_code, get_str_device_trait

    _check_version()
    handle = _blas_tensors_handle(MM)
    prefix = "SUGGESTED_" if tensor_type.startswith("suggested_") else ""
    kinds = [getattr(mathdx.CublasdxTensorType, prefix + "SMEM_A"), getattr(mathdx.CublasdxTensorType, prefix + "SMEM_B"),
             getattr(mathdx.CublasdxTensorType, tensor_type.upper())]
    tensors = [mathdx.cublasdx_create_tensor(handle, kind) for kind in kinds]
    mathdx.cublasdx_finalize_tensors(len(tensors), tensors)
    fragment = tensors[-1]
    fns = {}
    try:
        for name in functions:
            ftype = getattr(mathdx.CublasdxDeviceFunctionType, name)
            fns[name] = mathdx.cublasdx_create_device_function(handle, ftype, 1, [fragment])
        symbols = {name: get_str_device_trait(f, mathdx.CublasdxDeviceFunctionTrait.SYMBOL) for name, f in fns.items()}
        code = generate_code(handle, get_default_code_type().cc, tuple(fns.values()))
        lto = get_lto(code.descriptor)
    finally:
        for f in fns.values():
            mathdx.cublasdx_destroy_device_function(f)
        for t in tensors:
            mathdx.cublasdx_destroy_tensor(t)
    return lto, symbols


@functools.lru_cache(maxsize=None)
def partition_functions(MM, tensor_type: str = "rmem_c"):
    """``(frag_coords, thread_active)``: Numba intrinsics for the partition of ``tensor_type``.

    Call them inside a kernel: ``r, c = frag_coords(i)`` (int32 row and column within the tile of
    register ``i``), ``if thread_active(): ...``.
    """
    import llvmlite.ir as ir
    from numba import cuda, types
    from numba.core import cgutils, typing
    from numba.cuda.extending import intrinsic

    lto_bytes, symbols = generate(MM, tensor_type=tensor_type)
    lto = cuda.LTOIR(lto_bytes, name=f"kernel_lab_partition_{symbols['MAP_IDX2CRD_PARTITIONER']}")
    map_symbol = symbols["MAP_IDX2CRD_PARTITIONER"]
    active_symbol = symbols["IS_THREAD_ACTIVE"]
    pair = types.UniTuple(types.int32, 2)
    i32p = cgutils.int32_t.as_pointer()

    @intrinsic
    def frag_coords(typingctx, index):
        if not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            context.active_code_library.add_linking_file(lto)
            idx = context.cast(builder, args[0], signature.args[0], types.int32)
            idx_ptr = cgutils.alloca_once_value(builder, idx)
            row_ptr = cgutils.alloca_once(builder, cgutils.int32_t)
            col_ptr = cgutils.alloca_once(builder, cgutils.int32_t)
            fnty = ir.FunctionType(cgutils.voidptr_t, [i32p, i32p, i32p])
            fn = cgutils.get_or_insert_function(builder.module, fnty, map_symbol)
            builder.call(fn, [idx_ptr, row_ptr, col_ptr])
            return context.make_tuple(builder, pair, (builder.load(row_ptr), builder.load(col_ptr)))

        return typing.signature(pair, index), codegen

    @intrinsic
    def thread_active(typingctx):
        def codegen(context, builder, signature, args):
            context.active_code_library.add_linking_file(lto)
            flag = cgutils.alloca_once(builder, cgutils.int32_t)
            fnty = ir.FunctionType(cgutils.voidptr_t, [i32p])
            fn = cgutils.get_or_insert_function(builder.module, fnty, active_symbol)
            builder.call(fn, [flag])
            return builder.icmp_signed("!=", builder.load(flag), ir.Constant(cgutils.int32_t, 0))

        return typing.signature(types.boolean), codegen

    return frag_coords, thread_active
