"""DP4A and PRMT from Numba kernels: ``dp4a(a, b, c)`` and ``byte_perm(x, y, selector)``.

numba-cuda has no intrinsic for the DP4A instruction (four int8 x int8 products summed into an
int32 in one instruction, ``IDP.4A`` in the SASS) nor for PRMT (pick any four bytes out of two
words). CUDA C has both (``__dp4a``, ``__byte_perm``), so on a GPU each is a one-line CUDA C device
function, compiled by NVRTC and linked into the kernel (``cuda.declare_device(..., link=CUSource)``);
after link-time inlining the call is the bare instruction. In the simulator, which runs kernels as
Python, the same names are Python functions computing the same bits, so kernels that call them run
unchanged in both places.

Both take and return int32 (a word holding four bytes); pass words as ``int32(word)``.
"""

from __future__ import annotations

import numpy as np

from ..environment import on_simulator

_DP4A_SOURCE = r"""
extern "C" __device__ int kl_dp4a(int a, int b, int c) {
    return __dp4a(a, b, c);  /* signed x signed, four byte products plus c */
}
"""

_BYTE_PERM_SOURCE = r"""
extern "C" __device__ int kl_byte_perm(int x, int y, int s) {
    return (int)__byte_perm((unsigned)x, (unsigned)y, (unsigned)s);
}
"""


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


def _declare():
    from numba import cuda

    if on_simulator():
        return cuda.jit(device=True)(dp4a_py), cuda.jit(device=True)(byte_perm_py)
    sig = "int32(int32, int32, int32)"
    dp4a = cuda.declare_device("kl_dp4a", sig, link=[cuda.CUSource(_DP4A_SOURCE, name="kl_dp4a.cu")], abi="c")
    perm = cuda.declare_device("kl_byte_perm", sig, link=[cuda.CUSource(_BYTE_PERM_SOURCE, name="kl_byte_perm.cu")],
                               abi="c")
    return dp4a, perm


dp4a, byte_perm = _declare()

# PRMT selectors that gather bytes 0, 2, 4, 6 (and 1, 3, 5, 7) of two words into one: the even and
# odd elements of eight int8 values, to meet the even and odd nibbles of a packed INT4 word.
EVEN_BYTES = 0x6420
ODD_BYTES = 0x7531
