"""The host side of :mod:`kernel_lab.device.wgmma`: the shared-memory matrix descriptor's encoding,
the swizzle, the canonical K-major tile layouts (:class:`TileLayout`: where each element of a tile
lands for each swizzle mode, the LBO/SBO to pass, the start of each K-step) and the accumulator
fragment's layout. Plain NumPy: the simulator's model, the tests and a notebook's drawings use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SWIZZLE_CODES = {0: 0, 128: 1, 64: 2, 32: 3}  # bytes of the swizzle -> the descriptor's bits 62-63
SWIZZLE_BYTES = {code: nbytes for nbytes, code in SWIZZLE_CODES.items()}
K_BYTES = 32  # one wgmma's K extent in bytes: k16 of fp16/bf16, k32 of int8
VALID_N = {"f16": tuple(range(8, 257, 8)), "bf16": tuple(range(8, 257, 8)),
           "s8": (8, 16, 24, 32) + tuple(range(48, 257, 16))}


def encode_desc(address: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
    """The 64-bit descriptor of a K-major tile at shared ``address`` (bytes; swizzle in bytes)."""
    if swizzle not in SWIZZLE_CODES:
        raise ValueError(f"swizzle is 0, 32, 64 or 128 bytes, got {swizzle}")

    def enc(x):
        return (int(x) & 0x3FFFF) >> 4

    return (enc(address) | enc(lbo) << 16 | enc(sbo) << 32 | (int(base_offset) & 7) << 49
            | SWIZZLE_CODES[swizzle] << 62)


def decode_desc(desc: int) -> dict:
    """The fields of a descriptor: start address, lbo and sbo in bytes, base offset, swizzle in bytes."""
    desc = int(desc) & (2**64 - 1)
    return {"address": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4,
            "sbo": ((desc >> 32) & 0x3FFF) << 4, "base_offset": (desc >> 49) & 7,
            "swizzle": SWIZZLE_BYTES[(desc >> 62) & 3]}


def swizzle_address(address, swizzle: int):
    """Where the byte at (unswizzled) shared ``address`` lives with a ``swizzle``-byte swizzle: the
    16-byte chunk bits 4.. XORed with the row bits 7.. (1, 2 or 3 bits). Works on arrays too."""
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    mask = (1 << bits) - 1
    return address ^ (((address >> 7) & mask) << 4)


@dataclass(frozen=True)
class TileLayout:
    """A K-major ``rows x cols`` tile (cols = K) of ``itemsize``-byte elements in shared memory, in
    one of the canonical layouts a wgmma descriptor describes. The tile starts at a 1024-byte
    boundary; offsets are relative to its start.

    * ``swizzle=0``: core matrices (8 rows x 16 bytes, 128 contiguous bytes) with the K chunks of one
      row group side by side: LBO = 128, SBO = 128 * (cols * itemsize / 16).
    * ``swizzle=W``: the tile is cut along K into blocks W bytes wide; each block holds its rows W
      bytes apart (SBO = 8 W) and the blocks follow each other (rows * W bytes each); then the swizzle.
    """

    rows: int
    cols: int
    itemsize: int
    swizzle: int = 0

    def __post_init__(self):
        if self.swizzle not in SWIZZLE_CODES:
            raise ValueError(f"swizzle is 0, 32, 64 or 128 bytes, got {self.swizzle}")
        row_bytes = self.cols * self.itemsize
        if self.rows % 8 or row_bytes % K_BYTES or (self.swizzle and row_bytes % self.swizzle):
            raise ValueError(f"a {self.rows} x {self.cols} tile of {self.itemsize}-byte elements does not "
                             f"fill whole {self.swizzle or 16}-byte rows of 8-row groups")

    @property
    def row_bytes(self) -> int:
        return self.cols * self.itemsize

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def lbo(self) -> int:
        return 128 if self.swizzle == 0 else 16  # swizzled K-major: not used ("assumed 1", i.e. 16 bytes)

    @property
    def sbo(self) -> int:
        return 128 * (self.row_bytes // 16) if self.swizzle == 0 else 8 * self.swizzle

    def byte_offsets(self) -> np.ndarray:
        """``rows x cols`` array: the byte offset of each element (r, c) from the tile's start."""
        r = np.arange(self.rows)[:, None]
        cb = (np.arange(self.cols) * self.itemsize)[None, :]
        if self.swizzle == 0:
            return (r // 8) * self.sbo + (cb // 16) * self.lbo + (r % 8) * 16 + cb % 16
        w = self.swizzle
        plain = (cb // w) * (self.rows * w) + r * w + cb % w
        return swizzle_address(plain, w)

    def element_offsets(self) -> np.ndarray:
        """``rows x cols`` array: the element index of each (r, c) in an array that starts with the tile."""
        return self.byte_offsets() // self.itemsize

    def k_step_offset(self, step: int) -> int:
        """Bytes from the tile's start to the descriptor's start address for K-step ``step`` (32 bytes
        of K each: k16 of fp16, k32 of int8)."""
        kb = step * K_BYTES
        if not 0 <= kb < self.row_bytes:
            raise ValueError(f"K-step {step} is outside the tile's {self.row_bytes // K_BYTES} steps")
        if self.swizzle == 0:
            return (kb // 16) * self.lbo
        return (kb // self.swizzle) * (self.rows * self.swizzle) + kb % self.swizzle

    def place(self, tile: np.ndarray) -> np.ndarray:
        """A flat array of ``nbytes / itemsize`` elements holding ``tile`` in this layout."""
        tile = np.asarray(tile)
        if tile.shape != (self.rows, self.cols) or tile.dtype.itemsize != self.itemsize:
            raise ValueError(f"expected a {self.rows} x {self.cols} tile of {self.itemsize}-byte elements, "
                             f"got {tile.shape} {tile.dtype}")
        flat = np.zeros(self.nbytes // self.itemsize, tile.dtype)
        flat[self.element_offsets()] = tile
        return flat


def fragment_coordinates(n: int) -> np.ndarray:
    """``(128, n // 2, 2)`` array: for thread ``t`` of a warpgroup and its accumulator register ``i``,
    the (row, column) of D that it holds (the layout of the PTX manual's figure for wgmma's D)."""
    tid = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    warp, lane = tid // 32, tid % 32
    g, t = lane // 4, lane % 4
    j, q = i // 4, i % 4
    rows = 16 * warp + g + 8 * (q // 2)
    cols = 8 * j + 2 * t + q % 2
    return np.stack(np.broadcast_arrays(rows, cols), axis=-1)


