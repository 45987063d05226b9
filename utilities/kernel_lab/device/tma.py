"""Hopper's tensor copies (TMA) from Numba kernels: a 2-D box between global and shared memory, described
by a host tensor map (:class:`kernel_lab.device.tensor_map.TensorMap2D`). Compute capability 9.0 or newer.

``cp_async_bulk_tensor_2d_load(dst, di, tmap, x, y, bars, bi)`` asks the copy engine for the box whose
first element is at column ``x``, row ``y`` of the map's array, into shared ``dst[di:]``, completing
on barrier ``bars[bi]`` like ``cp_async_bulk`` (``cp.async.bulk.tensor.2d.shared::cluster.global.tile.
mbarrier::complete_tx::bytes``). The copy always delivers the whole box, ``tmap.box_bytes`` bytes
(zeros for the elements outside the array), and that is what ``mbarrier_arrive_expect_tx`` announces.
``cp_async_bulk_tensor_2d_store(tmap, x, y, src, si)`` writes the box from shared ``src[si:]`` back
(``cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group``); only the elements inside the array
are written, in whole 16-byte chunks (a row's last chunk is written whole, its padding included:
:func:`kernel_lab.device.tensor_map.chunk_end`). It joins the issuing thread's bulk async-group, so ``cp_async_bulk_commit_group()`` and
``cp_async_bulk_wait_group_read(0)`` of :mod:`kernel_lab.device.bulk_copy` finish it, and the threads
that wrote the tile call ``fence_proxy_async_shared()`` before the ``cuda.syncthreads()`` that
precedes the store, as for ``cp_async_bulk_store``.

The map lives in global memory (see :mod:`kernel_lab.device.tensor_map` for why), written by the host
before the launch, and the copy engine reads it through the tensormap proxy: each block calls
``fence_proxy_tensormap_acquire(tmap)`` (``fence.proxy.tensormap::generic.acquire.sys``) once, before
its first copy with the map, in the thread that issues the copies (or before a ``cuda.syncthreads()``
that orders it before the others). The tile in shared memory starts 128-byte aligned; where it starts
is the kernel's business: ``tile_start(smem, 1024)`` is the first element of ``smem`` at a 1024-byte
boundary (the repeat of every swizzle pattern), so a tile there can be read with
``tma_tile_index(row, col, box_cols, itemsize, swizzle)``, the element index of box element
``[row, col]`` in the swizzled (or plain) layout. One tile, one round::

    smem = cuda.shared.array(0, np.float32)        # dynamic: 1024 bytes of slack + tmap.smem_bytes
    bars = cuda.shared.array(1, np.uint64)
    t0 = tile_start(smem, 1024)
    if tid == 0:
        fence_proxy_tensormap_acquire(tmap)
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        mbarrier_arrive_expect_tx(bars, 0, box_rows * box_cols * 4)
        cp_async_bulk_tensor_2d_load(smem, t0, tmap, x, y, bars, 0)
    mbarrier_wait_parity(bars, 0, 0)
    v = smem[t0 + tma_tile_index(r, c, box_cols, 4, swizzle)]

In the simulator the same names run the model of :mod:`kernel_lab.device.tma_sim`.
"""

from __future__ import annotations

from ..environment import on_simulator

__all__ = [
    "cp_async_bulk_tensor_2d_load",
    "cp_async_bulk_tensor_2d_store",
    "fence_proxy_tensormap_acquire",
    "shared_address",
    "tile_start",
    "tma_tile_index",
]

CP_ASYNC_BULK_TENSOR_2D_LOAD = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                                "[$0], [$1, {$2, $3}], [$4];")
CP_ASYNC_BULK_TENSOR_2D_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];"
# the generic address of the 128-byte map; .sys: the host wrote it (CUDA C++ Programming Guide, TMA section)
FENCE_PROXY_TENSORMAP_ACQUIRE = "fence.proxy.tensormap::generic.acquire.sys [$0], 128;"


def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from .hopper_ptx import INSTEAD_OF_TMA, require_hopper
    from .ptx_args import element_pointer, require_array, shared_u32

    i32, i64 = ir.IntType(32), ir.IntType(64)

    def require_integer(value, what):
        if not isinstance(value, types.Integer):
            raise NumbaTypeError(f"{what}: expected an integer, got {value}")

    def map_address(context, builder, map_type, tmap):
        """Generic 64-bit address of the map's first word (the instruction takes a generic address)."""
        zero = context.get_constant(types.intp, 0)
        ptr = element_pointer(context, builder, map_type, tmap, types.intp, zero)
        return builder.ptrtoint(ptr, i64)

    def coord(context, builder, value, value_type):
        return context.cast(builder, value, value_type, types.int32)

    @intrinsic
    def cp_async_bulk_tensor_2d_load(typingctx, dst, dst_index, tmap, x, y, bars, bar_index):
        require_array(dst, "cp_async_bulk_tensor_2d_load (destination)")
        require_array(tmap, "cp_async_bulk_tensor_2d_load (tensor map: pass the TensorMap2D)", itemsize=8)
        require_array(bars, "cp_async_bulk_tensor_2d_load (barrier)", itemsize=8)
        require_integer(x, "cp_async_bulk_tensor_2d_load (x)")
        require_integer(y, "cp_async_bulk_tensor_2d_load (y)")
        sig = types.void(dst, dst_index, tmap, x, y, bars, bar_index)

        def codegen(context, builder, signature, args):
            require_hopper("cp_async_bulk_tensor_2d_load", INSTEAD_OF_TMA)
            t = signature.args
            d = shared_u32(builder, element_pointer(context, builder, t[0], args[0], t[1], args[1]))
            m = map_address(context, builder, t[2], args[2])
            cx, cy = coord(context, builder, args[3], t[3]), coord(context, builder, args[4], t[4])
            b = shared_u32(builder, element_pointer(context, builder, t[5], args[5], t[6], args[6]))
            builder.asm(ir.FunctionType(ir.VoidType(), [i32, i64, i32, i32, i32]), CP_ASYNC_BULK_TENSOR_2D_LOAD,
                        "r,l,r,r,r,~{memory}", [d, m, cx, cy, b], side_effect=True)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def cp_async_bulk_tensor_2d_store(typingctx, tmap, x, y, src, src_index):
        require_array(tmap, "cp_async_bulk_tensor_2d_store (tensor map: pass the TensorMap2D)", itemsize=8)
        require_array(src, "cp_async_bulk_tensor_2d_store (source)")
        require_integer(x, "cp_async_bulk_tensor_2d_store (x)")
        require_integer(y, "cp_async_bulk_tensor_2d_store (y)")
        sig = types.void(tmap, x, y, src, src_index)

        def codegen(context, builder, signature, args):
            require_hopper("cp_async_bulk_tensor_2d_store", INSTEAD_OF_TMA)
            t = signature.args
            m = map_address(context, builder, t[0], args[0])
            cx, cy = coord(context, builder, args[1], t[1]), coord(context, builder, args[2], t[2])
            s = shared_u32(builder, element_pointer(context, builder, t[3], args[3], t[4], args[4]))
            builder.asm(ir.FunctionType(ir.VoidType(), [i64, i32, i32, i32]), CP_ASYNC_BULK_TENSOR_2D_STORE,
                        "l,r,r,r,~{memory}", [m, cx, cy, s], side_effect=True)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def fence_proxy_tensormap_acquire(typingctx, tmap):
        require_array(tmap, "fence_proxy_tensormap_acquire (tensor map: pass the TensorMap2D)", itemsize=8)

        def codegen(context, builder, signature, args):
            require_hopper("fence_proxy_tensormap_acquire", INSTEAD_OF_TMA)
            m = map_address(context, builder, signature.args[0], args[0])
            builder.asm(ir.FunctionType(ir.VoidType(), [i64]), FENCE_PROXY_TENSORMAP_ACQUIRE, "l,~{memory}", [m],
                        side_effect=True)
            return context.get_dummy_value()

        return types.void(tmap), codegen

    @intrinsic
    def shared_address(typingctx, array, index):
        """The 32-bit shared-memory address of ``array[index]``, as an int64."""
        require_array(array, "shared_address")

        def codegen(context, builder, signature, args):
            t = signature.args
            ptr = element_pointer(context, builder, t[0], args[0], t[1], args[1])
            return builder.zext(shared_u32(builder, ptr), i64)

        return types.int64(array, index), codegen

    return {"cp_async_bulk_tensor_2d_load": cp_async_bulk_tensor_2d_load,
            "cp_async_bulk_tensor_2d_store": cp_async_bulk_tensor_2d_store,
            "fence_proxy_tensormap_acquire": fence_proxy_tensormap_acquire, "shared_address": shared_address}


def _simulated():
    from . import tma_sim

    return tma_sim.functions()


_impl = _simulated() if on_simulator() else _gpu()
cp_async_bulk_tensor_2d_load = _impl["cp_async_bulk_tensor_2d_load"]
cp_async_bulk_tensor_2d_store = _impl["cp_async_bulk_tensor_2d_store"]
fence_proxy_tensormap_acquire = _impl["fence_proxy_tensormap_acquire"]
shared_address = _impl["shared_address"]


def _device_functions():
    from numba import cuda

    @cuda.jit(device=True)
    def tma_tile_index(row, col, box_cols, itemsize, swizzle):
        """Element index, from the tile's start, of box element ``[row, col]`` in shared memory, for a
        tile aligned to 1024 bytes (``tile_start``); ``swizzle`` in bytes (0, 32, 64, 128)."""
        if swizzle == 0:
            return row * box_cols + col
        offset = row * swizzle + col * itemsize  # each row takes the swizzle span
        offset ^= ((offset >> 7) & (swizzle // 16 - 1)) << 4  # 16-byte chunk ^= 128-byte line
        return offset // itemsize

    @cuda.jit(device=True)
    def tile_start(array, alignment):
        """Index of the first element of ``array`` (shared) whose address is a multiple of ``alignment``."""
        address = shared_address(array, 0)
        return ((alignment - address % alignment) % alignment) // array.itemsize

    return tma_tile_index, tile_start


tma_tile_index, tile_start = _device_functions()
