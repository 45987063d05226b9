"""Hopper's bulk copy from Numba kernels: ``cp_async_bulk``, global -> shared, completing on an mbarrier.

``cp_async_bulk(dst, di, src, si, nbytes, bars, bi)`` asks the copy engine (the TMA unit) for
``nbytes`` contiguous bytes from global ``src[si:]`` into shared ``dst[di:]``: one instruction from
one thread, however large the tile (``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes``).
No registers and no other threads take part. ``nbytes`` is a multiple of 16, both addresses are
16-byte aligned. As the bytes land, the copy takes them off the tx-count of barrier ``bars[bi]``
(``kernel_lab.device.mbarrier``), which completes its phase once the announced bytes
(``mbarrier_arrive_expect_tx``) and the arrivals are all in. The protocol of one tile::

    if tid == 0:                                   # once, before the loop
        mbarrier_init(bars, 0, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    ...
    if tid == 0:                                   # round r
        mbarrier_arrive_expect_tx(bars, 0, nbytes)
        cp_async_bulk(tile, 0, src, r * n, nbytes, bars, 0)
    mbarrier_wait_parity(bars, 0, r & 1)           # every thread that reads the tile

The destination is ``.shared::cluster``: an address of the block's own shared memory is one of the
cluster's, so the form serves one block as well. Compute capability 9.0 or newer. In the simulator
the copy lands in pieces as threads poll the barrier (``kernel_lab.device.async_copy_sim``).
"""

from __future__ import annotations

from ..environment import on_simulator

__all__ = ["cp_async_bulk"]

CP_ASYNC_BULK = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];"


def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from .hopper_ptx import (
        element_pointer,
        global_u64,
        require_array,
        require_hopper,
        shared_u32,
    )

    i32, i64 = ir.IntType(32), ir.IntType(64)

    @intrinsic
    def cp_async_bulk(typingctx, dst, dst_index, src, src_index, nbytes, bars, bar_index):
        require_array(dst, "cp_async_bulk (destination)")
        require_array(src, "cp_async_bulk (source)")
        require_array(bars, "cp_async_bulk (barrier)", itemsize=8)
        if not isinstance(nbytes, types.Integer):
            raise NumbaTypeError(f"cp_async_bulk: the size in bytes is an integer, got {nbytes}")
        sig = types.void(dst, dst_index, src, src_index, nbytes, bars, bar_index)

        def codegen(context, builder, signature, args):
            require_hopper("cp_async_bulk")
            t = signature.args
            d = shared_u32(builder, element_pointer(context, builder, t[0], args[0], t[1], args[1]))
            g = global_u64(builder, element_pointer(context, builder, t[2], args[2], t[3], args[3]))
            n = context.cast(builder, args[4], t[4], types.uint32)
            b = shared_u32(builder, element_pointer(context, builder, t[5], args[5], t[6], args[6]))
            builder.asm(ir.FunctionType(ir.VoidType(), [i32, i64, i32, i32]), CP_ASYNC_BULK, "r,l,r,r,~{memory}",
                        [d, g, n, b], side_effect=True)
            return context.get_dummy_value()

        return sig, codegen

    return cp_async_bulk


def _simulated():
    from .async_copy_sim import cp_async_bulk

    return cp_async_bulk


cp_async_bulk = _simulated() if on_simulator() else _gpu()
