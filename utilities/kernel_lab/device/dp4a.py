"""DP4A and PRMT from Numba kernels: ``dp4a(a, b, c)`` and ``byte_perm(x, y, selector)``.

numba-cuda has no intrinsic for the DP4A instruction (four int8 x int8 products summed into an
int32 in one instruction, ``IDP.4A`` in the SASS) nor for PRMT (pick any four bytes out of two
words). PTX has both (``dp4a.s32.s32``, ``prmt.b32``), so on a GPU each is a Numba *intrinsic*
whose code generation writes one line of inline PTX into the kernel's LLVM IR: no call, no link
step, the bare instruction wherever the kernel uses it.

(Linking a CUDA C function with ``__dp4a`` through ``cuda.declare_device(..., link=[CUSource])``
also works, but without link-time optimisation (``lto=True`` and nvJitLink) the kernel *calls* it:
ptxas saves registers around every call, and a GEMM that spends its time in DP4A spills hundreds of
bytes per thread. The inline form needs neither.)

In the simulator, which runs kernels as Python, the same names are Python functions computing the
same bits, so kernels that call them run unchanged in both places. Arguments may be any integer
type (they are converted to 32-bit words); the result is int32.
"""

from __future__ import annotations

import numpy as np

from ..environment import on_simulator

DP4A_PTX = "dp4a.s32.s32 $0, $1, $2, $3;"  # signed x signed, four byte products plus c
PRMT_PTX = "prmt.b32 $0, $1, $2, $3;"  # byte i of the result = byte (s >> 4i) & 7 of {y, x}

# PRMT selectors that gather bytes 0, 2, 4, 6 (and 1, 3, 5, 7) of two words into one: the even and
# odd elements of eight int8 values, to meet the even and odd nibbles of a packed INT4 word.
EVEN_BYTES = 0x6420
ODD_BYTES = 0x7531


def _signed_byte(word: int, i: int) -> int:
    v = (word >> (8 * i)) & 0xFF
    return (v ^ 0x80) - 0x80


def _to_int32(v: int) -> np.int32:
    v &= 0xFFFFFFFF
    return np.int32(v - (1 << 32) if v >= 1 << 31 else v)


def dp4a_py(a, b, c):
    """``c + sum_i a.byte[i] * b.byte[i]`` with the bytes read as int8, wrapped to int32 (as the GPU)."""
    a, b = int(a) & 0xFFFFFFFF, int(b) & 0xFFFFFFFF
    return _to_int32(int(c) + sum(_signed_byte(a, i) * _signed_byte(b, i) for i in range(4)))


def byte_perm_py(x, y, s):
    """PRMT without sign replication: byte i of the result is byte ``(s >> 4i) & 7`` of the 8 bytes
    ``y:x`` (x holds bytes 0-3, y bytes 4-7)."""
    pool = (int(x) & 0xFFFFFFFF) | ((int(y) & 0xFFFFFFFF) << 32)
    out = 0
    for i in range(4):
        sel = (int(s) >> (4 * i)) & 7
        out |= ((pool >> (8 * sel)) & 0xFF) << (8 * i)
    return _to_int32(out)


def _inline_ptx(asm: str, name: str):
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    @intrinsic
    def op(typingctx, a, b, c):
        for arg in (a, b, c):
            if not isinstance(arg, types.Integer):
                raise NumbaTypeError(f"{name} takes 32-bit words as integers, got {arg}")
        sig = types.int32(a, b, c)

        def codegen(context, builder, signature, args):
            words = [context.cast(builder, v, t, types.int32) for v, t in zip(args, signature.args)]
            i32 = ir.IntType(32)
            return builder.asm(ir.FunctionType(i32, [i32, i32, i32]), asm, "=r,r,r,r", words, side_effect=False)

        return sig, codegen

    return op


def _declare():
    from numba import cuda

    if on_simulator():
        return cuda.jit(device=True)(dp4a_py), cuda.jit(device=True)(byte_perm_py)
    return _inline_ptx(DP4A_PTX, "dp4a"), _inline_ptx(PRMT_PTX, "byte_perm")


dp4a, byte_perm = _declare()
