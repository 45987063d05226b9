"""Hopper's warpgroup tensor-core instructions from Numba kernels: ``wgmma.mma_async`` with both
operands in shared memory, its fence, commit and wait, the shared-memory matrix descriptor, and
``setmaxnreg``. Compute capability 9.0 (and a compile for ``sm_90a``: the ``a`` features); a compile
for an older target is refused with a message.

A *warpgroup* is four consecutive warps (threads ``128 w .. 128 w + 127`` of the block). Its 128 threads
issue each of these instructions together (``.sync.aligned``), as one: ``wgmma.mma_async`` computes
``D = A B + D`` (or ``A B`` when ``scale_d`` is 0) for a 64 x N tile, with A (64 x K) and B (K x N)
read by the tensor cores straight from shared memory. K is 16 for fp16/bf16 and 32 for int8: 32
bytes of each row either way. The instruction is asynchronous: it returns at once and the
accumulator registers hold D only after a wait.

The protocol of one K-loop, every thread of the warpgroup::

    acc = wgmma_acc_f32(64)                      # a tuple of 32 float32 zeros (N / 2 per thread)
    for k in range(K // 16):
        ...                                      # the tiles of step k are in shared memory
        wgmma_fence()                            # registers written before are seen by the wgmma
        acc = wgmma_mma_async_f16(desc_a + step_a, desc_b + step_b, acc, 1)
        wgmma_commit_group()                     # the wgmmas issued so far form a group
        wgmma_wait_group(0)                      # ... which has completed: acc holds D
    acc = wgmma_fence_operand(acc)               # keeps the compiler from reading acc earlier

``wgmma_fence()`` (``wgmma.fence.sync.aligned``) is required before the first ``mma_async`` and
whenever other instructions wrote the accumulator (or the shared tiles, with
``fence_proxy_async_shared``: the tensor cores read shared memory as the async proxy) since the last
one. ``wgmma_wait_group(n)`` (``n`` a constant) waits until at most ``n`` committed groups are pending:
``wait_group(1)`` keeps one group in flight while the next tiles load. Reading an accumulator, or
writing a tile that a pending wgmma reads, before the wait that covers it is undefined.

**The accumulator fragment** (PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16", the
figure for D): warp ``w = (tid % 128) // 32`` of the warpgroup owns rows ``16 w .. 16 w + 15``; with
``g = lane // 4`` and ``t = lane % 4``, registers ``4 j .. 4 j + 3`` of a thread (``j = 0 .. N/8 - 1``)
hold ``D[16 w + g, 8 j + 2 t]``, ``D[16 w + g, 8 j + 2 t + 1]``, ``D[16 w + g + 8, 8 j + 2 t]``,
``D[16 w + g + 8, 8 j + 2 t + 1]``: ``mma.sync``'s 16 x 8 layout repeated along N. ``fragment_coordinates(n)``
gives every (row, column) on the host. The int8 form's int32 D has the same layout.

**The matrix descriptor** (PTX ISA, "Matrix Descriptor Format") is a 64-bit word: bits 0-13 the
start address, 16-29 the leading-dimension byte offset (LBO), 32-45 the stride-dimension byte
offset (SBO), each stored as ``(x & 0x3FFFF) >> 4``; bits 49-51 the base offset; bits 62-63 the
swizzle mode (0 none, 1 128-byte, 2 64-byte, 3 32-byte). ``wgmma_desc(tile, index, lbo, sbo,
swizzle)`` builds it in the kernel from the shared-memory address of ``tile[index]`` (``swizzle`` in
bytes: 0, 32, 64, 128; base offset 0). Both operands here are *K-major*: each row of A (of M) and
each column of B (of N) has its K values contiguous in 16-byte chunks (B is stored as B transposed,
N x K, as ``mma.sync``'s "col" B). Rows come in groups of 8 (a *core matrix*: 8 rows x 16 bytes):

* no swizzle: the 8 rows of a core matrix are 16 bytes apart; the next 8 rows are SBO bytes on,
  the next 16-byte chunk of K is LBO bytes on;
* swizzle of W = 32, 64 or 128 bytes: the 8 rows are W bytes apart (a row holds W bytes of K, two
  or more 32-byte K-steps), the next 8 rows are SBO bytes on (LBO is not used), and the 16-byte
  chunks of each row are permuted: address bits 4.. (the chunk) are XORed with bits 7.. (the row
  within the 8), 1 bit for 32-byte, 2 for 64-byte and 3 for 128-byte swizzle (CuTe's
  ``Swizzle<1|2|3, 4, 3>``). The pattern repeats every 8 W bytes and is taken from the address
  itself, so the tile starts at a multiple of 8 W bytes (base offset 0; the model refuses others)
  and a K-step inside a row moves the start address by 32 bytes.

:class:`TileLayout` lays out a rows x cols tile in one of these ways on the host (where each
element lands, the LBO/SBO to pass, the start of each K-step); the model and the tests use it, and
so can a kernel that fills the tile. The shared tile must begin at a 1024-byte boundary on a GPU:
``cuda.shared.array(n, dtype, alignment=1024)`` (the model places every shared array at one).

**From Numba.** Each instruction is one line of inline PTX. The accumulators cross the inline-asm
boundary as one LLVM struct of N/2 ``f32`` (or ``i32``) outputs, each tied to the matching input
(constraints ``=f`` ... and ``0``, ``1``, ...: LLVM's spelling of ``+f``), and come back to the kernel
as a ``UniTuple`` of N/2 values, so N is the accumulator tuple's length times 2: one function serves
every N. ``scale_d`` becomes a predicate inside the asm (``setp.ne.b32``). Compiled offline for sm_90a
with numba-cuda 0.30 and ptxas 13.0 (scripts/hopper_wgmma.py --offline, where the results are
recorded): fp16 at N = 64, 128 and 256, bf16 at 64 and 128, int8 at 64, 128 and 256 assemble,
without spills (N = 256: 128 outputs tied to 128 inputs, 259 operands in one asm). Not yet run on a GPU.

``setmaxnreg_inc(n)`` / ``setmaxnreg_dec(n)`` (``setmaxnreg.{inc,dec}.sync.aligned.u32 n``, ``n`` a
constant multiple of 8 in 24 .. 256) let a warpgroup of a warp-specialised kernel give registers
back (a producer) or take them (a consumer). ptxas honours them only when it knows the registers
at the kernel's entry: compile with ``cuda.jit(launch_bounds=(threads, 1))`` (``.maxntid``). Without,
ptxas 13.0 says "(C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine
register count at entry"; with ``launch_bounds=(384, 1)`` it gives each thread 168 registers at
entry, and a producer at 40 plus two consumers at 232 fit (40 + 2 x 232 = 3 x 168).

Keep the wgmma calls out of branches on the thread index (``if tid < 128:`` around them): ptxas
then says "(C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized due to
program dependence on compiler-inserted WG.AR in divergent path" (seen on the tile kernel of
scripts/hopper_wgmma.py before its branch was removed). A warp-specialised kernel branches on the
warpgroup index, which is uniform in each warpgroup.

In the simulator the same names run :mod:`kernel_lab.device.wgmma_sim`, which reads the tiles
through the descriptor, hands each thread its fragment once a wait covers the group, and names
protocol mistakes.
"""

from __future__ import annotations

from ..environment import on_simulator
from .wgmma_layout import (
    SWIZZLE_CODES,
    VALID_N,
    TileLayout,
    decode_desc,
    encode_desc,
    fragment_coordinates,
    swizzle_address,
)

__all__ = [
    "SWIZZLE_CODES",
    "TileLayout",
    "decode_desc",
    "encode_desc",
    "fragment_coordinates",
    "setmaxnreg_dec",
    "setmaxnreg_inc",
    "swizzle_address",
    "wgmma_acc_f32",
    "wgmma_acc_s32",
    "wgmma_commit_group",
    "wgmma_desc",
    "wgmma_fence",
    "wgmma_fence_operand",
    "wgmma_mma_async_bf16",
    "wgmma_mma_async_f16",
    "wgmma_mma_async_s8",
    "wgmma_wait_group",
]

WGMMA_FENCE = "wgmma.fence.sync.aligned;"
WGMMA_COMMIT_GROUP = "wgmma.commit_group.sync.aligned;"
WGMMA_WAIT_GROUP = "wgmma.wait_group.sync.aligned {n};"  # n: an immediate
SETMAXNREG = "setmaxnreg.{how}.sync.aligned.u32 {n};"  # n: an immediate


def _mma_asm(kind: str, n: int) -> str:
    """The PTX of one ``wgmma.mma_async`` of shape m64nNk16 (k32 for int8): outputs ``$0 .. $(n/2 - 1)``,
    then the descriptors and ``scale_d``, then the tied inputs."""
    regs = n // 2
    d = ",".join(f"${i}" for i in range(regs))
    a, b, s = regs, regs + 1, regs + 2
    if kind == "s8":
        op = f"wgmma.mma_async.sync.aligned.m64n{n}k32.s32.s8.s8 {{{d}}}, ${a}, ${b}, p;"
    else:
        op = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{d}}}, ${a}, ${b}, p, 1, 1, 0, 0;"
    return f"{{ .reg .pred p; setp.ne.b32 p, ${s}, 0; {op} }}"


# --- the GPU: one line of PTX each -----------------------------------------------------------------

def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from . import hopper_ptx
    from .ptx_args import element_pointer, require_array, shared_u32

    def require_hopper(name):
        hopper_ptx.require_hopper(name, hopper_ptx.INSTEAD_OF_WGMMA, gpus="Hopper: H100, H200")

    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    void = ir.FunctionType(ir.VoidType(), [])

    def literal(value, what, check):
        """The value of a constant argument (None: let Numba type the call again with its literal type)."""
        if isinstance(value, types.Integer) and not isinstance(value, types.IntegerLiteral):
            return None
        if not isinstance(value, types.IntegerLiteral) or not check(value.literal_value):
            raise NumbaTypeError(f"{what}, got {value}")
        return value.literal_value

    def make_plain(asm, name):
        @intrinsic
        def op(typingctx):
            def codegen(context, builder, signature, args):
                require_hopper(name)
                builder.asm(void, asm, "~{memory}", [], side_effect=True)
                return context.get_dummy_value()

            return types.void(), codegen

        return op

    @intrinsic
    def wgmma_wait_group(typingctx, n):
        """``wgmma.wait_group n``: at most ``n`` (a constant) committed groups of this warpgroup pending."""
        value = literal(n, "wgmma_wait_group(n): n is a constant integer >= 0", lambda v: v >= 0)
        if value is None:
            return None
        asm = WGMMA_WAIT_GROUP.format(n=value)

        def codegen(context, builder, signature, args):
            require_hopper("wgmma_wait_group")
            builder.asm(void, asm, "~{memory}", [], side_effect=True)
            return context.get_dummy_value()

        return types.void(n), codegen

    def make_setmaxnreg(how):
        name = f"setmaxnreg_{how}"

        @intrinsic
        def setmaxnreg(typingctx, n):
            value = literal(n, f"{name}(n): n is a constant multiple of 8 in 24 .. 256",
                            lambda v: 24 <= v <= 256 and v % 8 == 0)
            if value is None:
                return None
            asm = SETMAXNREG.format(how=how, n=value)

            def codegen(context, builder, signature, args):
                require_hopper(name)
                builder.asm(void, asm, "~{memory}", [], side_effect=True)
                return context.get_dummy_value()

            return types.void(n), codegen

        return setmaxnreg

    @intrinsic
    def wgmma_desc(typingctx, array, index, lbo, sbo, swizzle):
        """The 64-bit descriptor of the K-major tile that starts at shared ``array[index]``."""
        require_array(array, "wgmma_desc")
        for x, what in ((lbo, "lbo"), (sbo, "sbo")):
            if not isinstance(x, types.Integer):
                raise NumbaTypeError(f"wgmma_desc ({what}): a byte offset, an integer; got {x}")
        code = literal(swizzle, "wgmma_desc(swizzle): a constant, 0, 32, 64 or 128 (bytes)",
                       lambda v: v in SWIZZLE_CODES)
        if code is None:
            return None
        code = SWIZZLE_CODES[code]

        def codegen(context, builder, signature, args):
            require_hopper("wgmma_desc")
            t = signature.args
            address = builder.zext(shared_u32(builder, element_pointer(context, builder, t[0], args[0], t[1],
                                                                       args[1])), i64)

            def enc(value):
                return builder.lshr(builder.and_(value, ir.Constant(i64, 0x3FFFF)), ir.Constant(i64, 4))

            lbo_ = enc(context.cast(builder, args[2], t[2], types.uint64))
            sbo_ = enc(context.cast(builder, args[3], t[3], types.uint64))
            desc = builder.or_(enc(address), builder.shl(lbo_, ir.Constant(i64, 16)))
            desc = builder.or_(desc, builder.shl(sbo_, ir.Constant(i64, 32)))
            return builder.or_(desc, ir.Constant(i64, code << 62))

        return types.uint64(array, index, lbo, sbo, swizzle), codegen

    def make_mma(kind):
        name = f"wgmma_mma_async_{kind}"
        acc_type = types.int32 if kind == "s8" else types.float32
        reg, constraint = (i32, "r") if kind == "s8" else (f32, "f")

        @intrinsic
        def mma(typingctx, desc_a, desc_b, acc, scale_d):
            if not (isinstance(acc, types.UniTuple) and acc.dtype == acc_type):
                raise NumbaTypeError(f"{name}: the accumulator is a tuple of {acc_type} (N / 2 of them, from "
                                     f"wgmma_acc_{'s32' if kind == 's8' else 'f32'}(N) or an earlier call), "
                                     f"got {acc}")
            n = 2 * acc.count
            if n not in VALID_N[kind]:
                raise NumbaTypeError(f"{name}: N = {n} (2 x the accumulator's length) is not a shape of "
                                     f"wgmma.mma_async for {kind}: {VALID_N[kind]}")
            for x in (desc_a, desc_b, scale_d):
                if not isinstance(x, (types.Integer, types.Boolean)):
                    raise NumbaTypeError(f"{name}: the descriptors are 64-bit integers (wgmma_desc) and "
                                         f"scale_d an integer, got {x}")
            asm = _mma_asm(kind, n)
            regs = n // 2
            cons = ",".join([f"={constraint}"] * regs + ["l", "l", "r"] + [str(i) for i in range(regs)])
            fn = ir.FunctionType(ir.LiteralStructType([reg] * regs), [i64, i64, i32] + [reg] * regs)

            def codegen(context, builder, signature, args):
                require_hopper(name)
                t = signature.args
                da = context.cast(builder, args[0], t[0], types.uint64)
                db = context.cast(builder, args[1], t[1], types.uint64)
                s = context.cast(builder, args[3], t[3], types.uint32)
                accs = [builder.extract_value(args[2], k) for k in range(regs)]
                res = builder.asm(fn, asm, cons + ",~{memory}", [da, db, s] + accs, side_effect=True)
                return context.make_tuple(builder, signature.return_type,
                                          [builder.extract_value(res, k) for k in range(regs)])

            return acc(desc_a, desc_b, acc, scale_d), codegen

        return mma

    @intrinsic
    def wgmma_fence_operand(typingctx, acc):
        """The accumulators through an empty asm (CUTLASS's warpgroup_fence_operand): their later uses
        cannot move above it, so none is scheduled before the wait that precedes it."""
        if not (isinstance(acc, types.UniTuple) and acc.dtype in (types.float32, types.int32)):
            raise NumbaTypeError(f"wgmma_fence_operand: a tuple of float32 or int32 accumulators, got {acc}")
        regs = acc.count
        reg, c = (f32, "f") if acc.dtype == types.float32 else (i32, "r")
        fn = ir.FunctionType(ir.LiteralStructType([reg] * regs), [reg] * regs)
        cons = ",".join([f"={c}"] * regs + [str(i) for i in range(regs)]) + ",~{memory}"

        def codegen(context, builder, signature, args):
            res = builder.asm(fn, "", cons, [builder.extract_value(args[0], k) for k in range(regs)],
                              side_effect=True)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(res, k) for k in range(regs)])

        return acc(acc), codegen

    def make_zeros(dtype, kinds):
        @intrinsic
        def zeros(typingctx, n):
            value = literal(n, f"the accumulator's N is a constant, one of {VALID_N[kinds]}",
                            lambda v: v in VALID_N["f16"] or v in VALID_N["s8"])
            if value is None:
                return None
            ret = types.UniTuple(dtype, value // 2)

            def codegen(context, builder, signature, args):
                zero = context.get_constant(dtype, 0)
                return context.make_tuple(builder, ret, [zero] * (value // 2))

            return ret(n), codegen

        return zeros

    return {"wgmma_fence": make_plain(WGMMA_FENCE, "wgmma_fence"),
            "wgmma_commit_group": make_plain(WGMMA_COMMIT_GROUP, "wgmma_commit_group"),
            "wgmma_wait_group": wgmma_wait_group, "wgmma_desc": wgmma_desc,
            "wgmma_mma_async_f16": make_mma("f16"), "wgmma_mma_async_bf16": make_mma("bf16"),
            "wgmma_mma_async_s8": make_mma("s8"), "wgmma_fence_operand": wgmma_fence_operand,
            "wgmma_acc_f32": make_zeros(types.float32, "f16"), "wgmma_acc_s32": make_zeros(types.int32, "s8"),
            "setmaxnreg_inc": make_setmaxnreg("inc"), "setmaxnreg_dec": make_setmaxnreg("dec")}


def _simulated():
    from . import wgmma_sim

    return wgmma_sim.functions()


_impl = _simulated() if on_simulator() else _gpu()
wgmma_fence = _impl["wgmma_fence"]
wgmma_commit_group = _impl["wgmma_commit_group"]
wgmma_wait_group = _impl["wgmma_wait_group"]
wgmma_desc = _impl["wgmma_desc"]
wgmma_mma_async_f16 = _impl["wgmma_mma_async_f16"]
wgmma_mma_async_bf16 = _impl["wgmma_mma_async_bf16"]
wgmma_mma_async_s8 = _impl["wgmma_mma_async_s8"]
wgmma_fence_operand = _impl["wgmma_fence_operand"]
wgmma_acc_f32 = _impl["wgmma_acc_f32"]
wgmma_acc_s32 = _impl["wgmma_acc_s32"]
setmaxnreg_inc = _impl["setmaxnreg_inc"]
setmaxnreg_dec = _impl["setmaxnreg_dec"]
