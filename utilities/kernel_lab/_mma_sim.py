"""``kernel_lab.mma_ptx`` in the CUDA simulator: the same warp-level instructions as Python.

Each function computes what the instruction computes for the calling lane. The warp-wide ones
(``mma``, ``ldmatrix``) get the other lanes' registers and addresses through ``cuda.shfl_sync`` (the
Kernel Lab simulator's warp rendezvous), so every lane of the warp must call them together, as on a
GPU. ``cp.async`` is a plain copy (its commit and wait are no-ops: the simulator has no copy in
flight). Addresses (``shared_address``, ``global_address`` and the ``*_at`` forms) are numbers from a
made-up address space in which each array gets its own range; the ``*_at`` functions map a number
back to the array and element. Slow (dozens of shuffles per ``mma``): for tests at tiny sizes.
"""

from __future__ import annotations

import math

import numpy as np

FULL = 0xFFFFFFFF
_SPAN = 1 << 24  # bytes between two arrays' made-up base addresses


class _AddressSpace:
    def __init__(self):
        self.bases = {}  # id(array) -> (base, array); the array is kept alive so its id stays its own
        self.next = _SPAN

    def address(self, array, index) -> int:
        key = id(array)
        if key not in self.bases:
            self.bases[key] = (self.next, array)
            self.next += _SPAN
        if isinstance(index, tuple):  # a C-contiguous array's element by its indices, as on a GPU
            index = np.ravel_multi_index(tuple(int(i) for i in index), tuple(array.shape))
        return self.bases[key][0] + int(index) * _itemsize(array)

    def resolve(self, address, what):
        address = int(address)
        for base, array in self.bases.values():
            if base <= address < base + _SPAN:
                offset = address - base
                size = _itemsize(array)
                if offset % size:
                    raise IndexError(f"{what}: address {address:#x} is not at an element of its array")
                return array, offset // size
        raise IndexError(f"{what}: address {address:#x} is not in any array that shared_address or "
                         "global_address gave an address of")


_space = _AddressSpace()


def _itemsize(array) -> int:
    return np.dtype(array.dtype).itemsize


def _lane() -> int:
    from .simulator.scheduler import current_thread

    return current_thread("mma / ldmatrix").lane


def _shfl(value, src_lane):
    from .simulator.warp import shfl_sync

    return shfl_sync(FULL, value, src_lane)


def _halves(word, kind):
    bits = np.array([int(word) & 0xFFFF, (int(word) >> 16) & 0xFFFF], np.uint16)
    if kind == "bf16":
        import ml_dtypes

        return bits.view(ml_dtypes.bfloat16).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def _word(lo, hi, kind) -> np.uint32:
    if kind == "bf16":
        import ml_dtypes

        pair = np.array([lo, hi], np.float32).astype(ml_dtypes.bfloat16)
    else:
        pair = np.array([lo, hi], np.float32).astype(np.float16)
    bits = pair.view(np.uint16).astype(np.uint32)
    return np.uint32(bits[0] | (bits[1] << 16))


def _make_mma(kind):
    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """D = A B + C for m16n8k16: this lane's four results (rows g, g + 8; columns 2t, 2t + 1)."""
        lane = _lane()
        g, t = lane // 4, lane % 4
        a = np.zeros((2, 16))
        b = np.zeros((16, 2))
        for q in range(4):  # lane 4g + q holds row g's and g + 8's keys 2q, 2q + 1 and 2q + 8, 2q + 9
            src = 4 * g + q
            w0, w1, w2, w3 = (_shfl(int(r), src) for r in (a0, a1, a2, a3))
            a[0, 2 * q:2 * q + 2], a[1, 2 * q:2 * q + 2] = _halves(w0, kind), _halves(w1, kind)
            a[0, 2 * q + 8:2 * q + 10], a[1, 2 * q + 8:2 * q + 10] = _halves(w2, kind), _halves(w3, kind)
            for col in range(2):  # column n = 2t + col lives in lanes 4n .. 4n + 3
                src = 4 * (2 * t + col) + q
                v0, v1 = _shfl(int(b0), src), _shfl(int(b1), src)
                b[2 * q:2 * q + 2, col], b[2 * q + 8:2 * q + 10, col] = _halves(v0, kind), _halves(v1, kind)
        d = a @ b + np.array([[c0, c1], [c2, c3]], np.float64)
        return tuple(np.float32(x) for x in d.ravel())

    return mma


def _bytes4(word):
    return np.array([int(word) & 0xFFFFFFFF], np.uint32).view(np.int8).astype(np.int64)


def mma_s8(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C for m16n8k32 on signed bytes, in exact int32 (wrapping as the instruction does)."""
    lane = _lane()
    g, t = lane // 4, lane % 4
    a = np.zeros((2, 32), np.int64)
    b = np.zeros((32, 2), np.int64)
    for q in range(4):  # lane 4g + q holds row g's and g + 8's keys 4q..4q+3 and 4q+16..4q+19
        src = 4 * g + q
        w0, w1, w2, w3 = (_shfl(int(r), src) for r in (a0, a1, a2, a3))
        a[0, 4 * q:4 * q + 4], a[1, 4 * q:4 * q + 4] = _bytes4(w0), _bytes4(w1)
        a[0, 4 * q + 16:4 * q + 20], a[1, 4 * q + 16:4 * q + 20] = _bytes4(w2), _bytes4(w3)
        for col in range(2):  # column n = 2t + col lives in lanes 4n .. 4n + 3
            src = 4 * (2 * t + col) + q
            v0, v1 = _shfl(int(b0), src), _shfl(int(b1), src)
            b[4 * q:4 * q + 4, col], b[4 * q + 16:4 * q + 20, col] = _bytes4(v0), _bytes4(v1)
    d = a @ b + np.array([[c0, c1], [c2, c3]], np.int64)
    return tuple(np.int32(np.int64(x) - ((np.int64(x) + 2**31) // 2**32) * 2**32) for x in d.ravel())


def _read_pair(array, index):
    lo, hi = int(array[index]), int(array[index + 1])
    return np.uint32((lo & 0xFFFF) | ((hi & 0xFFFF) << 16))


def _make_ldmatrix(trans, by_address):
    def load(lane_array, lane_index):
        lane = _lane()
        g, t = lane // 4, lane % 4
        regs = []
        for r in range(4):
            if trans:  # row 2t and 2t + 1 of tile r, column g
                rows = [_shfl(int(lane_index), 8 * r + 2 * t + k) for k in range(2)]
                vals = [int(lane_array[row + g]) & 0xFFFF for row in rows]
                regs.append(np.uint32(vals[0] | (vals[1] << 16)))
            else:  # row g of tile r, elements 2t and 2t + 1
                row = _shfl(int(lane_index), 8 * r + g)
                regs.append(_read_pair(lane_array, row + 2 * t))
        return tuple(regs)

    if by_address:
        def ldmatrix_at(address):
            array, index = _space.resolve(address, "ldmatrix")
            if _itemsize(array) != 2:
                raise TypeError("ldmatrix reads 16-bit elements: the address is in an array of another type")
            return load(array, index)

        return ldmatrix_at

    def ldmatrix(array, index):
        return load(array, index)

    return ldmatrix


def _at(array, flat):
    """The element at C-order position ``flat`` of an array of any rank."""
    return flat if array.ndim == 1 else np.unravel_index(flat, tuple(array.shape))


def _copy(dst, di, src, si, src_bytes, nbytes):
    """Copy ``nbytes`` bytes (or zeros, if ``src_bytes`` is 0) between arrays of any element types."""
    ds, ss = _itemsize(dst), _itemsize(src)
    if int(src_bytes):
        raw = np.array([src[_at(src, si + k)] for k in range(nbytes // ss)], dtype=np.dtype(src.dtype))
    else:
        raw = np.zeros(nbytes // ss, dtype=np.dtype(src.dtype))
    values = raw.view(np.dtype(dst.dtype))
    for k in range(nbytes // ds):
        dst[_at(dst, di + k)] = values[k]


def cp_async16_at(dst_address, src_address, src_bytes):
    dst, di = _space.resolve(dst_address, "cp_async16_at (destination)")
    src, si = _space.resolve(src_address, "cp_async16_at (source)")
    _copy(dst, di, src, si, src_bytes, nbytes=16)


def cp_async4_at(dst_address, src_address, src_bytes):
    dst, di = _space.resolve(dst_address, "cp_async4_at (destination)")
    src, si = _space.resolve(src_address, "cp_async4_at (source)")
    _copy(dst, di, src, si, src_bytes, nbytes=4)


def _nothing():
    return None


def exp2_approx(x):
    x = float(x)
    if x == -math.inf:
        return np.float32(0)
    return np.float32(2.0 ** x) if x < 128 else np.float32(math.inf)


def functions() -> dict:
    return dict(mma_f16=_make_mma("f16"), mma_bf16=_make_mma("bf16"), mma_s8=mma_s8,
                ldmatrix_x4=_make_ldmatrix(False, False), ldmatrix_x4_trans=_make_ldmatrix(True, False),
                ldmatrix_x4_at=_make_ldmatrix(False, True), ldmatrix_x4_trans_at=_make_ldmatrix(True, True),
                cp_async16_at=cp_async16_at, cp_async4_at=cp_async4_at, cp_async_commit=_nothing,
                cp_async_wait_all=_nothing, cp_async_wait_group=lambda pending: None,
                pack_f16x2=lambda lo, hi: _word(lo, hi, "f16"), pack_bf16x2=lambda lo, hi: _word(lo, hi, "bf16"),
                exp2_approx=exp2_approx, shared_address=_space.address, global_address=_space.address,
                window=lambda array, start, length: array[start:start + length])
