"""Hopper's mbarriers from Numba kernels: init, arrive, arrive with expected bytes, wait on a phase's
parity, and the two fences around them. Compute capability 9.0 or newer.

An mbarrier is a 64-bit word in shared memory that counts two things for the current *phase*:
arrivals still pending (``mbarrier_init(bars, i, count)`` sets how many a phase needs) and bytes
still expected from asynchronous copies (the tx-count). ``mbarrier_arrive_expect_tx(bars, i, n)``
adds ``n`` bytes to the tx-count and arrives; a bulk copy that names the barrier
(``kernel_lab.device.bulk_copy.cp_async_bulk``) takes off each byte it delivers. When no arrival is
pending and the tx-count is 0 the phase completes and the next begins. Phases alternate in parity
(0, 1, 0, ...): ``mbarrier_try_wait_parity(bars, i, p)`` is True once the phase of parity ``p`` has
completed (on a fresh barrier, in phase 0, parity 1 counts as complete), so a loop over rounds
``r`` waits on ``r & 1``. ``mbarrier_wait_parity`` is the loop around it.

Fences: the copy engine is another *proxy* than the threads' loads and stores, and the barrier's
initialisation must be made visible to it before a copy completes on it: the thread that
initialises calls ``fence_mbarrier_init()`` (``fence.mbarrier_init.release.cluster``) or
``fence_proxy_async_shared()`` (``fence.proxy.async.shared::cta``) after ``mbarrier_init``, then
``cuda.syncthreads()`` publishes the barrier to the block. ``fence_proxy_async_shared()`` is also the
fence between the threads' own shared-memory writes and a copy engine that reads them.

One line of PTX each (``MBARRIER_*`` below); ``bars`` is a shared ``np.uint64`` array and ``i`` the
barrier's index in it. In the simulator the same names run the model of
``kernel_lab.device.async_copy_sim``, which keeps the barrier's counts and names protocol mistakes.
"""

from __future__ import annotations

from ..environment import on_simulator

__all__ = [
    "fence_mbarrier_init",
    "fence_proxy_async_shared",
    "mbarrier_arrive",
    "mbarrier_arrive_expect_tx",
    "mbarrier_init",
    "mbarrier_try_wait_parity",
    "mbarrier_wait_parity",
]

MBARRIER_INIT = "mbarrier.init.shared::cta.b64 [$0], $1;"
MBARRIER_ARRIVE = "mbarrier.arrive.shared::cta.b64 $0, [$1];"  # $0: the phase token, unused here
MBARRIER_ARRIVE_EXPECT_TX = "mbarrier.arrive.expect_tx.shared::cta.b64 $0, [$1], $2;"
# the predicate the instruction sets becomes a 0/1 register (inline PTX returns registers, not predicates)
MBARRIER_TRY_WAIT_PARITY = ("{ .reg .pred %p; mbarrier.try_wait.parity.shared::cta.b64 %p, [$1], $2; "
                            "selp.u32 $0, 1, 0, %p; }")
FENCE_MBARRIER_INIT = "fence.mbarrier_init.release.cluster;"
FENCE_PROXY_ASYNC_SHARED = "fence.proxy.async.shared::cta;"


def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from .hopper_ptx import require_hopper
    from .ptx_args import element_pointer, require_array, shared_u32

    i32, i64 = ir.IntType(32), ir.IntType(64)

    def barrier_address(context, builder, signature, args):
        ptr = element_pointer(context, builder, signature.args[0], args[0], signature.args[1], args[1])
        return shared_u32(builder, ptr)

    def as_u32(context, builder, value, value_type):
        return context.cast(builder, value, value_type, types.uint32)

    def require_integer(value, what):
        if not isinstance(value, types.Integer):
            raise NumbaTypeError(f"{what}: expected an integer, got {value}")

    @intrinsic
    def mbarrier_init(typingctx, bars, index, count):
        """``mbarrier.init``: barrier ``bars[index]`` needs ``count`` arrivals per phase; phase 0 begins."""
        require_array(bars, "mbarrier_init", itemsize=8)
        require_integer(count, "mbarrier_init (count)")

        def codegen(context, builder, signature, args):
            require_hopper("mbarrier_init")
            address = barrier_address(context, builder, signature, args)
            n = as_u32(context, builder, args[2], signature.args[2])
            builder.asm(ir.FunctionType(ir.VoidType(), [i32, i32]), MBARRIER_INIT, "r,r,~{memory}",
                        [address, n], side_effect=True)
            return context.get_dummy_value()

        return types.void(bars, index, count), codegen

    @intrinsic
    def mbarrier_arrive(typingctx, bars, index):
        """``mbarrier.arrive``: one arrival on ``bars[index]``'s current phase (release semantics)."""
        require_array(bars, "mbarrier_arrive", itemsize=8)

        def codegen(context, builder, signature, args):
            require_hopper("mbarrier_arrive")
            address = barrier_address(context, builder, signature, args)
            builder.asm(ir.FunctionType(i64, [i32]), MBARRIER_ARRIVE, "=l,r,~{memory}", [address], side_effect=True)
            return context.get_dummy_value()

        return types.void(bars, index), codegen

    @intrinsic
    def mbarrier_arrive_expect_tx(typingctx, bars, index, nbytes):
        """``mbarrier.arrive.expect_tx``: add ``nbytes`` to the phase's tx-count, then arrive."""
        require_array(bars, "mbarrier_arrive_expect_tx", itemsize=8)
        require_integer(nbytes, "mbarrier_arrive_expect_tx (bytes)")

        def codegen(context, builder, signature, args):
            require_hopper("mbarrier_arrive_expect_tx")
            address = barrier_address(context, builder, signature, args)
            n = as_u32(context, builder, args[2], signature.args[2])
            builder.asm(ir.FunctionType(i64, [i32, i32]), MBARRIER_ARRIVE_EXPECT_TX, "=l,r,r,~{memory}",
                        [address, n], side_effect=True)
            return context.get_dummy_value()

        return types.void(bars, index, nbytes), codegen

    @intrinsic
    def mbarrier_try_wait_parity(typingctx, bars, index, parity):
        """``mbarrier.try_wait.parity``: True once the phase of this parity has completed (acquire)."""
        require_array(bars, "mbarrier_try_wait_parity", itemsize=8)
        require_integer(parity, "mbarrier_try_wait_parity (parity)")

        def codegen(context, builder, signature, args):
            require_hopper("mbarrier_try_wait_parity")
            address = barrier_address(context, builder, signature, args)
            p = as_u32(context, builder, args[2], signature.args[2])
            flag = builder.asm(ir.FunctionType(i32, [i32, i32]), MBARRIER_TRY_WAIT_PARITY, "=r,r,r,~{memory}",
                               [address, p], side_effect=True)
            return builder.icmp_unsigned("!=", flag, ir.Constant(i32, 0))

        return types.boolean(bars, index, parity), codegen

    def make_fence(asm, name):
        @intrinsic
        def fence(typingctx):
            def codegen(context, builder, signature, args):
                require_hopper(name)
                builder.asm(ir.FunctionType(ir.VoidType(), []), asm, "~{memory}", [], side_effect=True)
                return context.get_dummy_value()

            return types.void(), codegen

        return fence

    return {"mbarrier_init": mbarrier_init, "mbarrier_arrive": mbarrier_arrive,
                "mbarrier_arrive_expect_tx": mbarrier_arrive_expect_tx,
                "mbarrier_try_wait_parity": mbarrier_try_wait_parity,
                "fence_mbarrier_init": make_fence(FENCE_MBARRIER_INIT, "fence_mbarrier_init"),
                "fence_proxy_async_shared": make_fence(FENCE_PROXY_ASYNC_SHARED, "fence_proxy_async_shared")}


def _simulated():
    from . import async_copy_sim

    return async_copy_sim.functions()


_impl = _simulated() if on_simulator() else _gpu()
mbarrier_init = _impl["mbarrier_init"]
mbarrier_arrive = _impl["mbarrier_arrive"]
mbarrier_arrive_expect_tx = _impl["mbarrier_arrive_expect_tx"]
mbarrier_try_wait_parity = _impl["mbarrier_try_wait_parity"]
fence_mbarrier_init = _impl["fence_mbarrier_init"]
fence_proxy_async_shared = _impl["fence_proxy_async_shared"]


def _wait_loop():
    from numba import cuda

    @cuda.jit(device=True)
    def mbarrier_wait_parity(bars, index, parity):
        """Spin until the phase of ``parity`` of ``bars[index]`` has completed."""
        while not mbarrier_try_wait_parity(bars, index, parity):
            pass

    return mbarrier_wait_parity


mbarrier_wait_parity = _wait_loop()
