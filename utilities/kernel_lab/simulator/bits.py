"""Bit functions (popc, ffs, clz, brev) that also work on negative and NumPy integers.

Warp code feeds ballots and lane masks to these: ``cuda.popc(ballot & cuda.lanemask_lt())`` is a
thread's rank among the lanes whose predicate is true, ``cuda.ffs(ballot) - 1`` the first such
lane. numba-cuda's ballot_sync returns an int32, which is negative when lane 31 votes true. The
plain simulator formats values with ``"{:032b}"``, which goes wrong for negative numbers; here a
value is taken as the two's-complement bit pattern of its type: a NumPy integer's own width, and
32 bits for a Python int that fits (64 bits otherwise).
"""

import numpy as np


def _pattern(value):
    if isinstance(value, np.integer):
        width = value.dtype.itemsize * 8
    else:
        value = int(value)
        width = 32 if -(1 << 31) <= value < (1 << 32) else 64
    return int(value) & ((1 << width) - 1), width


def popc(value):
    """Number of set bits."""
    bits, _ = _pattern(value)
    return bin(bits).count("1")


def ffs(value):
    """Position (1-based) of the least significant set bit; 0 when no bit is set."""
    bits, _ = _pattern(value)
    return (bits & -bits).bit_length()


def clz(value):
    """Number of leading zero bits in the value's width."""
    bits, width = _pattern(value)
    return width - bits.bit_length()


def brev(value):
    """The bits in reverse order, within the value's width."""
    bits, width = _pattern(value)
    return int(format(bits, f"0{width}b")[::-1], 2)


FUNCTIONS = {"popc": popc, "ffs": ffs, "clz": clz, "brev": brev}
