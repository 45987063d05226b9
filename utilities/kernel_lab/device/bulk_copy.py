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

The store direction, shared -> global, completes through *bulk async-groups* instead of a barrier:
``cp_async_bulk_store(dst, di, src, si, nbytes)`` (``cp.async.bulk.global.shared::cta.bulk_group``)
starts the copy, ``cp_async_bulk_commit_group()`` closes a group of the issuing thread's stores so far,
and ``cp_async_bulk_wait_group_read(n)`` (``n`` a constant) waits until at most the ``n`` newest
groups still read their shared source. Only then may the tile be written again; the global bytes
may still be on their way, and are visible to the next kernel. The copy engine reads the tile as
the async proxy, so the threads that wrote it call ``fence_proxy_async_shared()`` after their
writes, before the ``cuda.syncthreads()`` after which one thread stores::

    tile[i] = ...                                  # every thread, its part
    fence_proxy_async_shared()
    cuda.syncthreads()
    if tid == 0:
        cp_async_bulk_store(dst, r * n, tile, 0, nbytes)
        cp_async_bulk_commit_group()
        cp_async_bulk_wait_group_read(0)           # the tile may be overwritten after this
    cuda.syncthreads()
"""

from __future__ import annotations

from ..environment import on_simulator
from .mbarrier import fence_proxy_async_shared  # the fence a store needs, at hand here

__all__ = [
    "cp_async_bulk",
    "cp_async_bulk_commit_group",
    "cp_async_bulk_store",
    "cp_async_bulk_wait_group_read",
    "fence_proxy_async_shared",
]

CP_ASYNC_BULK = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];"
CP_ASYNC_BULK_STORE = "cp.async.bulk.global.shared::cta.bulk_group [$0], [$1], $2;"
CP_ASYNC_BULK_COMMIT_GROUP = "cp.async.bulk.commit_group;"
CP_ASYNC_BULK_WAIT_GROUP_READ = "cp.async.bulk.wait_group.read {n};"  # n: an immediate, not a register


def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from .hopper_ptx import require_hopper
    from .ptx_args import element_pointer, global_u64, require_array, shared_u32

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

    @intrinsic
    def cp_async_bulk_store(typingctx, dst, dst_index, src, src_index, nbytes):
        require_array(dst, "cp_async_bulk_store (destination)")
        require_array(src, "cp_async_bulk_store (source)")
        if not isinstance(nbytes, types.Integer):
            raise NumbaTypeError(f"cp_async_bulk_store: the size in bytes is an integer, got {nbytes}")
        sig = types.void(dst, dst_index, src, src_index, nbytes)

        def codegen(context, builder, signature, args):
            require_hopper("cp_async_bulk_store")
            t = signature.args
            g = global_u64(builder, element_pointer(context, builder, t[0], args[0], t[1], args[1]))
            s = shared_u32(builder, element_pointer(context, builder, t[2], args[2], t[3], args[3]))
            n = context.cast(builder, args[4], t[4], types.uint32)
            builder.asm(ir.FunctionType(ir.VoidType(), [i64, i32, i32]), CP_ASYNC_BULK_STORE, "l,r,r,~{memory}",
                        [g, s, n], side_effect=True)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def cp_async_bulk_commit_group(typingctx):
        def codegen(context, builder, signature, args):
            require_hopper("cp_async_bulk_commit_group")
            builder.asm(ir.FunctionType(ir.VoidType(), []), CP_ASYNC_BULK_COMMIT_GROUP, "~{memory}", [],
                        side_effect=True)
            return context.get_dummy_value()

        return types.void(), codegen

    @intrinsic
    def cp_async_bulk_wait_group_read(typingctx, n):
        if isinstance(n, types.Integer) and not isinstance(n, types.IntegerLiteral):
            return None  # Numba then types the call again with the constant's literal type, if it is one
        if not isinstance(n, types.IntegerLiteral) or n.literal_value < 0:
            raise NumbaTypeError("cp_async_bulk_wait_group_read(n): n is a constant integer >= 0 (the PTX "
                                 f"instruction takes it as an immediate), got {n}")
        asm = CP_ASYNC_BULK_WAIT_GROUP_READ.format(n=n.literal_value)

        def codegen(context, builder, signature, args):
            require_hopper("cp_async_bulk_wait_group_read")
            builder.asm(ir.FunctionType(ir.VoidType(), []), asm, "~{memory}", [], side_effect=True)
            return context.get_dummy_value()

        return types.void(n), codegen

    return {"cp_async_bulk": cp_async_bulk, "cp_async_bulk_store": cp_async_bulk_store,
            "cp_async_bulk_commit_group": cp_async_bulk_commit_group,
            "cp_async_bulk_wait_group_read": cp_async_bulk_wait_group_read}


def _simulated():
    from . import async_copy_sim

    return async_copy_sim.functions()


_impl = _simulated() if on_simulator() else _gpu()
cp_async_bulk = _impl["cp_async_bulk"]
cp_async_bulk_store = _impl["cp_async_bulk_store"]
cp_async_bulk_commit_group = _impl["cp_async_bulk_commit_group"]
cp_async_bulk_wait_group_read = _impl["cp_async_bulk_wait_group_read"]
