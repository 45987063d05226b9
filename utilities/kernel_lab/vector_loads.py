"""16-byte loads and stores from Numba kernels: ``load4``, ``store4`` (float32, int32, uint32),
``load2``, ``store2`` (float64) and ``load8``, ``store8`` (float16: eight halves); ``load4``/``store4``
of float16 move 8 bytes (four halves).

A GPU moves up to 16 bytes per thread in one instruction (``LDG.E.128``, ``LDS.128``). Numba never
emits them by itself: it does not know that an element's address is a multiple of 16 bytes, so
four neighbouring ``a[i]``, ``a[i+1]``, ... stay four 4-byte loads (checked in the PTX of numba-cuda
0.30 with NVVM 13). Its vector types (``float32x4``) cannot be loaded from an array either. These
intrinsics tell the compiler: they load ``<4 x float>`` (or ``<2 x double>``) from the address of
``arr[i]`` with 16-byte alignment, which becomes one ``ld.v4.f32`` (``ld.v2.f64``) in PTX.

    from kernel_lab.vector_loads import load4, store4
    a0, a1, a2, a3 = load4(a_flat, i)        # i: a multiple of 4; 1D array or tuple index
    store4(tile, (row, col), a0, a1, a2, a3)  # shared or global memory
    h0, h1, h2, h3, h4, h5, h6, h7 = load8(x16, (row, col))  # float16: col a multiple of 8
    store8(y16, (row, col), v0, v1, v2, v3, v4, v5, v6, v7)  # converted to float16: one 16-byte store

The caller promises the alignment: the array's data start 16-byte aligned (device allocations
and shared arrays are: 256 and 16 bytes) and the index is a multiple of 4 (2 for float64, 8 for
``load8``/``store8``) along a contiguous last axis. A misaligned vector access on a GPU stops the
kernel with "misaligned address". In the simulator these are plain Python functions that check
exactly that promise and say which index broke it.
"""

from __future__ import annotations

from .environment import on_simulator

__all__ = ["load4", "store4", "load2", "store2", "load8", "store8"]


class MisalignedVectorAccess(IndexError):
    """A 16-byte load or store at an element that does not start a 16-byte group."""


def _check(arr, i, width, what):
    index = i if isinstance(i, tuple) else (i,)
    last = int(index[-1])
    if last % width:
        raise MisalignedVectorAccess(
            f"{what} at index {tuple(int(v) for v in index) if len(index) > 1 else last}: a 16-byte access "
            f"needs the last index to be a multiple of {width} (the element must start a 16-byte "
            f"group); on a GPU this stops the kernel with 'misaligned address'. Use the scalar path "
            f"where a row's length is not a multiple of {width}.")
    extent = tuple(arr.shape)[-1]
    if last + width > extent:
        raise MisalignedVectorAccess(
            f"{what} at index {last} reads {width} elements, past the end of an axis of length "
            f"{extent}: keep vector accesses inside the array (the edges need the scalar path).")
    return index[:-1], last


if on_simulator():

    def load4(arr, i):
        head, last = _check(arr, i, 4, "load4")
        return tuple(arr[head + (last + k,)] if head else arr[last + k] for k in range(4))

    def store4(arr, i, v0, v1, v2, v3):
        head, last = _check(arr, i, 4, "store4")
        for k, v in enumerate((v0, v1, v2, v3)):
            if head:
                arr[head + (last + k,)] = v
            else:
                arr[last + k] = v

    def _halves_only(arr, what):
        if str(arr.dtype) != "float16":
            raise TypeError(f"{what} works on float16 arrays (eight halves are 16 bytes), got {arr.dtype}: "
                            "for float32 use load4/store4")

    def load8(arr, i):
        _halves_only(arr, "load8")
        head, last = _check(arr, i, 8, "load8")
        return tuple(arr[head + (last + k,)] if head else arr[last + k] for k in range(8))

    def store8(arr, i, v0, v1, v2, v3, v4, v5, v6, v7):
        _halves_only(arr, "store8")
        head, last = _check(arr, i, 8, "store8")
        for k, v in enumerate((v0, v1, v2, v3, v4, v5, v6, v7)):
            if head:
                arr[head + (last + k,)] = v
            else:
                arr[last + k] = v

    def load2(arr, i):
        head, last = _check(arr, i, 2, "load2")
        return tuple(arr[head + (last + k,)] if head else arr[last + k] for k in range(2))

    def store2(arr, i, v0, v1):
        head, last = _check(arr, i, 2, "store2")
        for k, v in enumerate((v0, v1)):
            if head:
                arr[head + (last + k,)] = v
            else:
                arr[last + k] = v

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.api_util import normalize_indices
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    def _get_element_pointer(context, builder, index_type, indices, array_type, array):
        # The element's address, without the code that wraps negative indices around (a
        # vector access at a negative index is a bug anyway): fewer instructions per access.
        index_type, indices = normalize_indices(context, builder, index_type, indices, array_type, array_type.dtype)
        array_struct = context.make_array(array_type)(context, builder, value=array)
        return cgutils.get_item_pointer(context, builder, array_type, array_struct, indices, wraparound=False)

    def _vector_type(array, width, what):
        if not isinstance(array, types.Array):
            raise NumbaTypeError(f"{what}: the first argument must be an array, got {array}")
        allowed = {4: (types.float32, types.int32, types.uint32, types.float16), 2: (types.float64,),
                   8: (types.float16,)}[width]
        if array.dtype not in allowed:
            names = " or ".join(str(t) for t in allowed)
            raise NumbaTypeError(f"{what} works on {names} arrays, got {array.dtype}")
        return array.dtype

    def _make_load(width, what):
        @intrinsic
        def load(typingctx, array, index):
            dtype = _vector_type(array, width, what)
            sig = types.UniTuple(dtype, width)(array, index)

            def codegen(context, builder, signature, args):
                array_type, index_type = signature.args
                arr, idx = args
                ptr = _get_element_pointer(context, builder, index_type, idx, array_type, arr)
                elem = context.get_value_type(dtype)
                vec_ptr = builder.bitcast(ptr, ir.VectorType(elem, width).as_pointer())
                vec = builder.load(vec_ptr, align=width * dtype.bitwidth // 8)
                values = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k)) for k in range(width)]
                return context.make_tuple(builder, signature.return_type, values)

            return sig, codegen

        return load

    def _store_codegen(width, dtype):
        def codegen(context, builder, signature, args):
            array_type, index_type = signature.args[:2]
            arr, idx = args[:2]
            ptr = _get_element_pointer(context, builder, index_type, idx, array_type, arr)
            elem = context.get_value_type(dtype)
            vec = ir.Constant(ir.VectorType(elem, width), ir.Undefined)
            for k, (value, vtype) in enumerate(zip(args[2:], signature.args[2:])):
                vec = builder.insert_element(vec, context.cast(builder, value, vtype, dtype),
                                             ir.Constant(ir.IntType(32), k))
            vec_ptr = builder.bitcast(ptr, ir.VectorType(elem, width).as_pointer())
            builder.store(vec, vec_ptr, align=width * dtype.bitwidth // 8)
            return context.get_dummy_value()

        return codegen

    @intrinsic
    def store4(typingctx, array, index, v0, v1, v2, v3):
        dtype = _vector_type(array, 4, "store4")
        return types.void(array, index, v0, v1, v2, v3), _store_codegen(4, dtype)

    @intrinsic
    def store2(typingctx, array, index, v0, v1):
        dtype = _vector_type(array, 2, "store2")
        return types.void(array, index, v0, v1), _store_codegen(2, dtype)

    # Eight halves move as four 32-bit words: NVVM splits an access of eight 16-bit values into two of
    # 8 bytes (ld.global.v4.u16), while <4 x i32> stays one (ld.global.v4.u32: LDG.E.128); the words are
    # then taken apart as halves (Numba holds a float16 as its 16 bits) in registers.
    _I16, _I32, _WORDS = ir.IntType(16), ir.IntType(32), ir.VectorType(ir.IntType(32), 4)

    @intrinsic
    def load8(typingctx, array, index):
        _vector_type(array, 8, "load8")
        sig = types.UniTuple(types.float16, 8)(array, index)

        def codegen(context, builder, signature, args):
            ptr = _get_element_pointer(context, builder, signature.args[1], args[1], signature.args[0], args[0])
            words = builder.load(builder.bitcast(ptr, _WORDS.as_pointer()), align=16)
            halves = []
            for k in range(4):
                w = builder.extract_element(words, ir.Constant(_I32, k))
                halves += [builder.trunc(w, _I16), builder.trunc(builder.lshr(w, ir.Constant(_I32, 16)), _I16)]
            return context.make_tuple(builder, signature.return_type, halves)

        return sig, codegen

    @intrinsic
    def store8(typingctx, array, index, v0, v1, v2, v3, v4, v5, v6, v7):
        _vector_type(array, 8, "store8")

        def codegen(context, builder, signature, args):
            ptr = _get_element_pointer(context, builder, signature.args[1], args[1], signature.args[0], args[0])
            bits = [builder.zext(context.cast(builder, value, vtype, types.float16), _I32)
                    for value, vtype in zip(args[2:], signature.args[2:])]
            words = ir.Constant(_WORDS, ir.Undefined)
            for k in range(4):
                w = builder.or_(bits[2 * k], builder.shl(bits[2 * k + 1], ir.Constant(_I32, 16)))
                words = builder.insert_element(words, w, ir.Constant(_I32, k))
            builder.store(words, builder.bitcast(ptr, _WORDS.as_pointer()), align=16)
            return context.get_dummy_value()

        return types.void(array, index, v0, v1, v2, v3, v4, v5, v6, v7), codegen

    load4 = _make_load(4, "load4")
    load2 = _make_load(2, "load2")
