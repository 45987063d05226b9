"""Warp-level tensor-core instructions from Numba kernels, as inline PTX: ``mma.sync``, ``ldmatrix``,
``cp.async``, and the conversions around them.

numba-cuda has no intrinsics for the instructions a FlashAttention-2-style kernel is made of: the
warp-wide matrix multiply-accumulate ``mma.sync.m16n8k16`` (HMMA in the SASS), ``ldmatrix`` (four
8 x 8 tiles of 16-bit values from shared memory into the fragment layout ``mma`` wants, optionally
transposed), and ``cp.async`` (a 16-byte copy from global to shared memory that does not pass through
registers, so a tile can be in flight while the warp computes). Each is one line of PTX, so each is
a Numba *intrinsic* that writes that line into the kernel's LLVM IR (as ``device.dp4a`` does for DP4A).

The fragment layout of ``mma.m16n8k16`` (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
``g = lane // 4`` and ``t = lane % 4``; every register holds two 16-bit values (low half first):

* A (16 x 16, row-major): ``a0 = A[g, 2t:2t+2]``, ``a1 = A[g+8, 2t:2t+2]``, ``a2 = A[g, 2t+8:2t+10]``,
  ``a3 = A[g+8, 2t+8:2t+10]``;
* B (16 x 8, "col": stored n-major): ``b0 = B[2t:2t+2, g]``, ``b1 = B[2t+8:2t+10, g]``;
* C and D (16 x 8, float32): ``c0, c1 = C[g, 2t], C[g, 2t+1]``, ``c2, c3 = C[g+8, 2t], C[g+8, 2t+1]``.

``mma_s8`` is ``mma.sync.m16n8k32`` on signed bytes (IMMA in the SASS), four to a register, with int32
sums: ``a0 = A[g, 4t:4t+4]``, ``a1 = A[g+8, 4t:4t+4]``, ``a2 = A[g, 4t+16:4t+20]``, ``a3 = A[g+8,
4t+16:4t+20]``, ``b0 = B[4t:4t+4, g]``, ``b1 = B[4t+16:4t+20, g]``; C and D as above, in int32.

``ldmatrix.x4``: lane ``i`` gives the address of row ``i % 8`` of tile ``i // 8`` (16 contiguous bytes);
register ``r`` of every lane receives tile ``r``, row ``g``, elements ``2t, 2t+1`` (with ``.trans``:
row ``2t`` and ``2t+1`` of column ``g``, i.e. the tile transposed).

``ldmatrix_x4(array, index)`` takes a shared array and an element index and converts the element's
address to the 32-bit shared-window address the instruction wants; the ``*_at`` forms take such an
address directly (``shared_address(array, index)``, plus offsets), and ``cp_async16_at`` /
``cp_async4_at`` a shared address and a 64-bit global one (``global_address``), aligned to the copy's
size. Kernels that keep their addresses as a base plus constants (``attention.flash``) use those.
``window(array, start, length)`` is a slice without Python's clamping, for views that move through a
buffer in a main loop (``tensor_cores.async_gemm``'s stages). In
the simulator these names are Python functions built on the (Kernel Lab-patched) warp shuffles,
computing the same values (``kernel_lab._mma_sim``), so a kernel written with them runs in both
places.
"""

from __future__ import annotations

from .environment import on_simulator

__all__ = ["mma_f16", "mma_bf16", "mma_s8", "ldmatrix_x4", "ldmatrix_x4_trans", "ldmatrix_x4_at",
           "ldmatrix_x4_trans_at", "cp_async16_at", "cp_async4_at", "cp_async_commit", "cp_async_wait_all",
           "cp_async_wait_group", "pack_f16x2", "pack_bf16x2", "exp2_approx", "shared_address", "global_address",
           "window"]

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{$0,$1,$2,$3}}, {{$4,$5,$6,$7}}, {{$8,$9}}, " \
      "{{$10,$11,$12,$13}};"
# int8 (IMMA): A 16 x 32 and B 32 x 8 of signed bytes, four to a register, exact int32 sums
MMA_S8 = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};"
LDMATRIX = "ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{$0,$1,$2,$3}}, [$4];"
CP_ASYNC = "cp.async.cg.shared.global [$0], [$1], 16, $2;"  # $2 source bytes: 0 zero-fills the 16 bytes
CP_ASYNC4 = "cp.async.ca.shared.global [$0], [$1], 4, $2;"  # 4 bytes (the .cg form takes 16 only)


def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from .device.ptx_args import element_pointer, require_array, shared_u32

    i32, f32 = ir.IntType(32), ir.FloatType()

    def words(context, builder, values, value_types):
        return [context.cast(builder, v, t, types.uint32) for v, t in zip(values, value_types)]

    def make_mma(kind):
        asm = MMA.format(t=kind)

        @intrinsic
        def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            for x in (a0, a1, a2, a3, b0, b1):
                if not isinstance(x, types.Integer):
                    raise NumbaTypeError(f"mma_{kind}: A and B registers are 32-bit words (two {kind} values), got {x}")
            sig = types.UniTuple(types.float32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

            def codegen(context, builder, signature, args):
                regs = words(context, builder, args[:6], signature.args[:6])
                accs = [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], signature.args[6:])]
                out = ir.LiteralStructType([f32] * 4)
                fn = ir.FunctionType(out, [i32] * 6 + [f32] * 4)
                res = builder.asm(fn, asm, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", regs + accs, side_effect=False)
                return context.make_tuple(builder, signature.return_type,
                                          [builder.extract_value(res, k) for k in range(4)])

            return sig, codegen

        return mma

    @intrinsic
    def mma_s8(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        for x in (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            if not isinstance(x, types.Integer):
                raise NumbaTypeError(f"mma_s8: registers are 32-bit words (four int8, or an int32 sum), got {x}")
        sig = types.UniTuple(types.int32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

        def codegen(context, builder, signature, args):
            regs = words(context, builder, args, signature.args)
            fn = ir.FunctionType(ir.LiteralStructType([i32] * 4), [i32] * 10)
            res = builder.asm(fn, MMA_S8, "=r,=r,=r,=r,r,r,r,r,r,r,0,1,2,3", regs, side_effect=False)
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, k) for k in range(4)])

        return sig, codegen

    def make_ldmatrix(trans, by_address):
        asm = LDMATRIX.format(trans=".trans" if trans else "")
        fn = ir.FunctionType(ir.LiteralStructType([i32] * 4), [i32])

        def emit(context, builder, signature, address):
            # side effect: it reads memory that cp.async and other threads write (ordered by the
            # barriers around it), so it must not be hoisted or merged across them
            res = builder.asm(fn, asm, "=r,=r,=r,=r,r,~{memory}", [address], side_effect=True)
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, k) for k in range(4)])

        if by_address:
            @intrinsic
            def ldmatrix_at(typingctx, address):
                if not isinstance(address, types.Integer):
                    raise NumbaTypeError(f"ldmatrix at an address: a 32-bit shared-window address, got {address}")

                def codegen(context, builder, signature, args):
                    return emit(context, builder, signature,
                                context.cast(builder, args[0], signature.args[0], types.uint32))

                return types.UniTuple(types.uint32, 4)(address), codegen

            return ldmatrix_at

        @intrinsic
        def ldmatrix(typingctx, array, index):
            require_array(array, "ldmatrix")
            sig = types.UniTuple(types.uint32, 4)(array, index)

            def codegen(context, builder, signature, args):
                ptr = element_pointer(context, builder, signature.args[0], args[0], signature.args[1], args[1])
                return emit(context, builder, signature, shared_u32(builder, ptr))

            return sig, codegen

        return ldmatrix

    cp_fn = ir.FunctionType(ir.VoidType(), [i32, ir.IntType(8).as_pointer(1), i32])

    def make_cp_async_at(asm):
        @intrinsic
        def cp_async_at(typingctx, dst_address, src_address, src_bytes):
            """``cp.async`` by addresses: a 32-bit shared-window address and a 64-bit global one."""
            sig = types.void(dst_address, src_address, src_bytes)

            def codegen(context, builder, signature, args):
                d = context.cast(builder, args[0], signature.args[0], types.uint32)
                g = context.cast(builder, args[1], signature.args[1], types.uint64)
                g = builder.inttoptr(g, ir.IntType(8).as_pointer(1))
                n = context.cast(builder, args[2], signature.args[2], types.uint32)
                builder.asm(cp_fn, asm, "r,l,r,~{memory}", [d, g, n], side_effect=True)
                return context.get_dummy_value()

            return sig, codegen

        return cp_async_at

    @intrinsic
    def global_address(typingctx, array, index):
        """The 64-bit global address of ``array[index]``, for address arithmetic (``cp_async16_at``)."""
        require_array(array, "global_address")

        def codegen(context, builder, signature, args):
            ptr = element_pointer(context, builder, signature.args[0], args[0], signature.args[1], args[1])
            return builder.ptrtoint(ptr, ir.IntType(64))

        return types.uint64(array, index), codegen

    def make_barrier_op(asm):
        @intrinsic
        def op(typingctx):
            def codegen(context, builder, signature, args):
                builder.asm(ir.FunctionType(ir.VoidType(), []), asm, "~{memory}", [], side_effect=True)
                return context.get_dummy_value()

            return types.void(), codegen

        return op

    @intrinsic
    def cp_async_wait_group(typingctx, pending):
        """Wait until at most ``pending`` (a constant) of this thread's committed copy groups are in flight."""
        if not isinstance(pending, types.IntegerLiteral):
            return None  # Numba then types the call again with the constant's literal type
        asm = f"cp.async.wait_group {int(pending.literal_value)};"

        def codegen(context, builder, signature, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), asm, "~{memory}", [], side_effect=True)
            return context.get_dummy_value()

        return types.void(pending), codegen

    def make_pack(kind):
        asm = f"cvt.rn.{kind}x2.f32 $0, $1, $2;"  # $1 goes to the upper half, $2 to the lower

        @intrinsic
        def pack(typingctx, lo, hi):
            sig = types.uint32(lo, hi)

            def codegen(context, builder, signature, args):
                lo_, hi_ = (context.cast(builder, v, t, types.float32) for v, t in zip(args, signature.args))
                return builder.asm(ir.FunctionType(i32, [f32, f32]), asm, "=r,f,f", [hi_, lo_], side_effect=False)

            return sig, codegen

        return pack

    @intrinsic
    def exp2_approx(typingctx, x):
        sig = types.float32(x)

        def codegen(context, builder, signature, args):
            v = context.cast(builder, args[0], signature.args[0], types.float32)
            return builder.asm(ir.FunctionType(f32, [f32]), "ex2.approx.ftz.f32 $0, $1;", "=f,f", [v],
                               side_effect=False)

        return sig, codegen

    @intrinsic
    def shared_address(typingctx, array, index):
        """The 32-bit shared-window address of ``array[index]`` (for tests and for reading the PTX)."""
        require_array(array, "shared_address")

        def codegen(context, builder, signature, args):
            ptr = element_pointer(context, builder, signature.args[0], args[0], signature.args[1], args[1])
            return shared_u32(builder, ptr)

        return types.uint32(array, index), codegen

    @intrinsic
    def window(typingctx, array, start, length):
        """``array[start:start + length]`` of a 1-D contiguous array, without the bounds clamping of a
        Python slice: a kernel that rotates through stages of a dynamic shared array by a runtime
        offset would otherwise pay a dozen compares and selects a slice (its length is a runtime
        value), inside its main loop."""
        require_array(array, "window")
        if array.ndim != 1 or array.layout not in "CA" or not isinstance(start, types.Integer) \
                or not isinstance(length, types.Integer):
            raise NumbaTypeError(f"window: expected a 1-D contiguous array and two integers, got {array}, "
                                 f"{start}, {length}")
        sig = array.copy(layout="C")(array, start, length)

        def codegen(context, builder, signature, args):
            src = context.make_array(signature.args[0])(context, builder, value=args[0])
            view = context.make_array(signature.return_type)(context, builder)
            first = context.cast(builder, args[1], signature.args[1], types.intp)
            count = context.cast(builder, args[2], signature.args[2], types.intp)
            itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(array.dtype)))
            context.populate_array(view, data=builder.gep(src.data, [first]), shape=[count], strides=[itemsize],
                                   itemsize=itemsize, meminfo=None)
            return view._getvalue()

        return sig, codegen

    return dict(mma_f16=make_mma("f16"), mma_bf16=make_mma("bf16"), mma_s8=mma_s8,
                ldmatrix_x4=make_ldmatrix(False, False), ldmatrix_x4_trans=make_ldmatrix(True, False),
                ldmatrix_x4_at=make_ldmatrix(False, True), ldmatrix_x4_trans_at=make_ldmatrix(True, True),
                cp_async16_at=make_cp_async_at(CP_ASYNC), cp_async4_at=make_cp_async_at(CP_ASYNC4),
                global_address=global_address, cp_async_commit=make_barrier_op("cp.async.commit_group;"),
                cp_async_wait_all=make_barrier_op("cp.async.wait_group 0;"), cp_async_wait_group=cp_async_wait_group,
                pack_f16x2=make_pack("f16"), pack_bf16x2=make_pack("bf16"), exp2_approx=exp2_approx,
                shared_address=shared_address, window=window)


def _simulated():
    from . import _mma_sim

    return _mma_sim.functions()


_impl = _simulated() if on_simulator() else _gpu()
mma_f16 = _impl["mma_f16"]
mma_bf16 = _impl["mma_bf16"]
mma_s8 = _impl["mma_s8"]
ldmatrix_x4 = _impl["ldmatrix_x4"]
ldmatrix_x4_trans = _impl["ldmatrix_x4_trans"]
ldmatrix_x4_at = _impl["ldmatrix_x4_at"]
ldmatrix_x4_trans_at = _impl["ldmatrix_x4_trans_at"]
cp_async16_at = _impl["cp_async16_at"]
cp_async4_at = _impl["cp_async4_at"]
cp_async_commit = _impl["cp_async_commit"]
cp_async_wait_all = _impl["cp_async_wait_all"]
cp_async_wait_group = _impl["cp_async_wait_group"]
pack_f16x2 = _impl["pack_f16x2"]
pack_bf16x2 = _impl["pack_bf16x2"]
exp2_approx = _impl["exp2_approx"]
shared_address = _impl["shared_address"]
global_address = _impl["global_address"]
window = _impl["window"]
