"""``float_bits(x)`` and ``bits_float(u)``: a float32's 32 bits as a uint32 and back, in a kernel.

A status word that carries a flag and a float32 value in one 64-bit integer (module 02's
single-pass scan) needs the value's bits, not its value converted to an integer. Numba's CUDA
target has ``cuda.libdevice.float_as_int`` for this, which the simulator lacks; these two are one
LLVM ``bitcast`` on a GPU (no instruction at all in the SASS) and a NumPy view in the simulator.
"""

from __future__ import annotations

import numpy as np

from .environment import on_simulator

__all__ = ["float_bits", "bits_float"]


def _gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def float_bits(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(32))

        return types.uint32(types.float32), codegen

    @intrinsic
    def bits_float(typingctx, u):
        if not isinstance(u, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            word = context.cast(builder, args[0], sig.args[0], types.uint32)
            return builder.bitcast(word, ir.FloatType())

        return types.float32(u), codegen

    return float_bits, bits_float


def _simulated_float_bits(x):
    return np.array(x, np.float32).view(np.uint32)[()]


def _simulated_bits_float(u):
    return np.array(int(u) & 0xFFFFFFFF, np.uint32).view(np.float32)[()]


if on_simulator():
    float_bits, bits_float = _simulated_float_bits, _simulated_bits_float
else:
    float_bits, bits_float = _gpu()
