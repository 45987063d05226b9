"""A host tensor map for Hopper's tensor copies (TMA): :class:`TensorMap2D` describes a 2-D row-major
array in global memory and the *box* (a tile of ``rows x cols`` elements) that one
``cp.async.bulk.tensor`` instruction moves between it and shared memory
(:mod:`kernel_lab.device.tma`).

On a GPU the description is encoded by the CUDA driver (``cuTensorMapEncodeTiled`` through
cuda-python's ``cuda.bindings.driver``) into the 128-byte ``CUtensorMap``, which the object copies
into a device array of its own. A kernel receives the map by passing the ``TensorMap2D`` itself as
an argument: it exposes ``__cuda_array_interface__``, so Numba sees a ``uint64[16]`` device array and
the intrinsics hand its global address to the instruction.

Why global memory, and the fence it needs. The PTX ISA (section 5.5.8, "Tensor-map") allows the
128-byte object in three state spaces: ``.param`` (a kernel parameter), ``.const`` or ``.global``.
CUDA C++ passes it as a ``const __grid_constant__ CUtensorMap`` parameter; Numba cannot declare such
a parameter (it passes an array as its pointer, shape and strides), so the map lives in global
memory. The CUDA C++ Programming Guide ("Using TMA to transfer multi-dimensional arrays") says that a
tensor map in global memory written by the host (``cudaMemcpy``) must be acquired by each block
before any of its threads uses it, with ``fence.proxy.tensormap::generic.acquire`` at ``.sys``
scope (``cuda::ptx::fence_proxy_tensormap_generic(sem_acquire, scope_sys, map, 128)``): the copy
engine reads the map through the *tensormap proxy*, which does not see the host's write otherwise.
That fence is :func:`kernel_lab.device.tma.fence_proxy_tensormap_acquire`. The driver asks for a
64-byte aligned map; a device array of its own starts at a ``cudaMalloc`` address (256-byte aligned).

In the simulator no driver is involved: the object keeps its description and a reference to the
array's memory, and the model (:mod:`kernel_lab.device.tma_sim`) reads both.

The checks below are the driver's rules for a tiled, non-interleaved 2-D map
(``cuTensorMapEncodeTiled``), made into sentences before the driver returns an error code:
each box dimension is 1 .. 256 elements; a box row (``cols x element size``) is a multiple of
16 bytes and, with a swizzle mode, at most the swizzle span (32, 64 or 128 bytes); the array's
start is 16-byte aligned and its rows are a multiple of 16 bytes apart; its elements are contiguous
along a row. (The Programming Guide's swizzle table also lists 128-byte global alignment for the
swizzle modes; the driver's documentation asks for 16, and so does this check.) Elements
of the box outside the array are read as zeros. A store writes whole 16-byte chunks: where the
array's last column ends inside a chunk (a row that is not a multiple of 16 bytes), the rest of that
chunk, which is the row's padding, is written too, with what the tile holds there; nothing past that
chunk, and no row below the array. Measured on an H200 (scripts/probes/tma_edge_granularity.py:
37 x 45 float32 rows written 3 columns past the edge, 70 x 130 float16 6, 33 x 70 int8 10, however
wide the padding); :func:`chunk_end` gives the column where the writes stop, and the model writes
the same.

Shared-memory layout of a box (:func:`box_offsets`, used by the model and by
:func:`kernel_lab.device.tma.tma_tile_index`): without swizzle the rows follow each other
(``cols x element size`` bytes apart). With a swizzle span ``S`` each row takes ``S`` bytes (the
Guide: "if the swizzle width exceeds the inner dimension, ensure that the allocated shared memory
can accommodate the full swizzle width") and the 16-byte chunk index inside each 128-byte line is
XORed with the line's index modulo ``S / 16`` (PTX ISA 5.5.7, "Swizzling Modes": the pattern
repeats every 256, 512 or 1024 bytes and is taken from the shared-memory address itself, so a tile
whose start is not aligned to the repeat starts inside the pattern).
"""

from __future__ import annotations

import numpy as np

from ..environment import on_simulator
from ..validate import KernelLabArgumentError

__all__ = ["MAX_BOX", "SWIZZLES", "TensorMap2D", "box_offsets", "chunk_end", "smem_bytes"]

MAX_BOX = 256  # elements per box dimension (cuTensorMapEncodeTiled)
SWIZZLES = (0, 32, 64, 128)  # bytes; 0: no swizzle
REPEAT = {32: 256, 64: 512, 128: 1024}  # bytes after which a swizzle pattern repeats
_NAMES = {"none": 0, "32b": 32, "64b": 64, "128b": 128}

# numpy dtype -> CUtensorMapDataType member name. The tile mode copies bytes, so the signed 8- and
# 16-bit integers use the unsigned types of their size (the driver has no INT8 or INT16).
_DATA_TYPES = {
    np.dtype(np.uint8): "UINT8", np.dtype(np.int8): "UINT8",
    np.dtype(np.uint16): "UINT16", np.dtype(np.int16): "UINT16",
    np.dtype(np.uint32): "UINT32", np.dtype(np.int32): "INT32",
    np.dtype(np.uint64): "UINT64", np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FLOAT16", np.dtype(np.float32): "FLOAT32", np.dtype(np.float64): "FLOAT64",
}


def chunk_end(cols: int, itemsize: int) -> int:
    """The column at which a tensor store's writes stop in a row of ``cols`` elements: ``cols``
    rounded up to a whole 16-byte chunk (the copy engine writes whole chunks)."""
    per_chunk = max(16 // itemsize, 1)
    return -(-cols // per_chunk) * per_chunk


def swizzle_bytes(swizzle) -> int:
    """0, 32, 64 or 128 from an int of those or a name ('none', '32B', '64B', '128B')."""
    value = _NAMES.get(swizzle.lower()) if isinstance(swizzle, str) else swizzle
    if value is None and swizzle is None:
        value = 0
    if isinstance(value, bool) or value not in SWIZZLES:
        raise KernelLabArgumentError(
            f"TensorMap2D: swizzle is one of 0 (none), 32, 64 or 128 (bytes; or 'none', '32B', '64B', "
            f"'128B'), got {swizzle!r}")
    return int(value)


def smem_bytes(box, itemsize: int, swizzle: int = 0) -> int:
    """Bytes of shared memory a box occupies: ``rows x cols x itemsize`` without swizzle, ``rows x span``
    with one (each row padded to the swizzle span)."""
    rows, cols = box
    return rows * (swizzle if swizzle else cols * itemsize)


def box_offsets(box, itemsize: int, swizzle: int = 0, base_address: int = 0) -> np.ndarray:
    """Byte offset, from the tile's start, of each element ``[row, col]`` of a box in shared memory.

    ``base_address`` is the tile's shared-memory address (the swizzle pattern is taken from absolute
    addresses; for a tile aligned to the pattern's repeat, 0 gives the same result)."""
    rows, cols = box
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    if not swizzle:
        return r * (cols * itemsize) + c * itemsize
    offset = r * swizzle + c * itemsize
    line = (base_address + offset) >> 7  # exact: the tile start is 128-byte aligned
    return offset ^ ((line & (swizzle // 16 - 1)) << 4)


def _device_layout(array):
    """(pointer, shape, strides in bytes, dtype, host ndarray or None) of a device array."""
    if on_simulator():
        ary = vars(array).get("_ary") if hasattr(array, "__dict__") else None
        if ary is None or isinstance(array, np.ndarray):
            raise KernelLabArgumentError(
                "TensorMap2D: the array must be a device array (cuda.to_device(a) or cuda.device_array): the "
                f"tensor map holds its address in global memory; got {type(array).__name__}")
        return ary.__array_interface__["data"][0], ary.shape, ary.strides, ary.dtype, ary
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is None:
        raise KernelLabArgumentError(
            "TensorMap2D: the array must be a device array (cuda.to_device(a) or cuda.device_array): the "
            f"tensor map holds its address in global memory; got {type(array).__name__}")
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
    return int(cai["data"][0]), shape, tuple(strides), dtype, None


class TensorMap2D:
    """A 2-D row-major device array, seen by tensor copies in boxes of ``box = (rows, cols)`` elements.

    ``swizzle``: 0/'none', 32/'32B', 64/'64B' or 128/'128B' (bytes): the order of 16-byte chunks the
    box takes in shared memory (see the module's docstring). Coordinates of a copy are ``x`` (the
    column of the box's first element) and ``y`` (its row), in elements.

    Attributes: ``dtype``, ``shape`` (rows, cols of the array), ``box``, ``swizzle`` (bytes),
    ``row_pitch`` (bytes between rows), ``box_bytes`` (what a copy delivers: the bytes an
    ``mbarrier_arrive_expect_tx`` announces), ``smem_bytes`` (the shared memory a box occupies).
    On a GPU also ``encoded`` (the 128 bytes as ``uint64[16]``) and ``device`` (the device array
    holding them); pass the object itself to a kernel.
    """

    def __init__(self, array, box, swizzle=0):
        address, shape, strides, dtype, host = _device_layout(array)
        self.swizzle = swizzle_bytes(swizzle)
        if len(shape) != 2:
            raise KernelLabArgumentError(f"TensorMap2D: the array must be 2-D (rows, cols), got shape {shape}")
        if dtype not in _DATA_TYPES:
            raise KernelLabArgumentError(
                f"TensorMap2D: element type {dtype} has no tensor-map type; use one of "
                f"{', '.join(sorted({str(t) for t in _DATA_TYPES}))}")
        self.dtype, self.shape = dtype, (int(shape[0]), int(shape[1]))
        itemsize = dtype.itemsize
        try:
            rows, cols = (int(b) for b in box)
        except (TypeError, ValueError):
            raise KernelLabArgumentError(f"TensorMap2D: box is (rows, cols), got {box!r}") from None
        self.box = (rows, cols)
        for name, n in (("rows", rows), ("cols", cols)):
            if not 1 <= n <= MAX_BOX:
                raise KernelLabArgumentError(
                    f"TensorMap2D: box {name} = {n}: each box dimension is 1 .. {MAX_BOX} elements "
                    "(cuTensorMapEncodeTiled's limit)")
        inner = cols * itemsize
        if inner % 16:
            raise KernelLabArgumentError(
                f"TensorMap2D: a box row is {cols} x {itemsize} = {inner} bytes; it must be a multiple of "
                f"16 bytes ({dtype}: a multiple of {16 // itemsize} columns)")
        if self.swizzle and inner > self.swizzle:
            raise KernelLabArgumentError(
                f"TensorMap2D: swizzle {self.swizzle}B takes box rows of at most {self.swizzle} bytes, but this "
                f"box's rows are {inner} bytes ({cols} {dtype} columns): use at most "
                f"{self.swizzle // itemsize} columns, or a wider swizzle")
        if strides[1] != itemsize:
            raise KernelLabArgumentError(
                f"TensorMap2D: the elements of a row must be contiguous (column stride {itemsize} bytes), got "
                f"{strides[1]} bytes: a tensor map describes row-major arrays (a transposed view is not one)")
        pitch = int(strides[0])
        if pitch % 16 or pitch <= 0:
            raise KernelLabArgumentError(
                f"TensorMap2D: the array's rows are {pitch} bytes apart (its row pitch); a tensor map needs a "
                f"positive multiple of 16 bytes: allocate rows of a multiple of {16 // itemsize} {dtype} and "
                "describe the part you use (d_a[:, :cols])")
        if self.shape[0] > 1 and pitch < self.shape[1] * itemsize:
            raise KernelLabArgumentError(f"TensorMap2D: rows {pitch} bytes apart overlap ({self.shape[1]} columns)")
        if address % 16:
            raise KernelLabArgumentError(
                f"TensorMap2D: the array's first element must be 16-byte aligned in global memory; this one is "
                f"{address % 16} bytes past a boundary (a view that starts inside a row?)")
        self.row_pitch = pitch
        self.box_bytes = rows * cols * itemsize
        self.smem_bytes = smem_bytes(self.box, itemsize, self.swizzle)
        self.address = address
        self.encoded = self.device = None
        self._host = host  # the simulator: the memory the model reads and writes
        self._array = array  # keeps the memory alive as long as the map
        if host is None:
            self.encoded = self._encode()
            from numba import cuda

            self.device = cuda.to_device(self.encoded)
            if self.device.device_ctypes_pointer.value % 64:
                raise KernelLabArgumentError("TensorMap2D: the device copy of the map is not 64-byte aligned")

    def _encode(self) -> np.ndarray:
        from cuda.bindings import driver as drv

        dtype = getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DATA_TYPES[self.dtype])
        swizzle = getattr(drv.CUtensorMapSwizzle,
                          "CU_TENSOR_MAP_SWIZZLE_" + ("NONE" if not self.swizzle else f"{self.swizzle}B"))
        rows, cols = self.shape
        u64 = lambda xs: [drv.cuuint64_t(int(v)) for v in xs]
        u32 = lambda xs: [drv.cuuint32_t(int(v)) for v in xs]
        err, tmap = drv.cuTensorMapEncodeTiled(
            dtype, 2, self.address, u64([cols, rows]), u64([self.row_pitch]), u32([self.box[1], self.box[0]]),
            u32([1, 1]), drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise KernelLabArgumentError(f"TensorMap2D: cuTensorMapEncodeTiled refused {self!r}: {err.name}")
        return np.array([int(v) for v in tmap.opaque], dtype=np.uint64)

    @property
    def __cuda_array_interface__(self):
        if self.device is None:
            raise AttributeError("__cuda_array_interface__: a simulated tensor map has no device copy")
        return self.device.__cuda_array_interface__

    def offsets(self, base_address: int = 0) -> np.ndarray:
        """Byte offsets of the box's elements in a shared tile that starts at ``base_address``."""
        return box_offsets(self.box, self.dtype.itemsize, self.swizzle, base_address)

    def read_box(self, x: int, y: int) -> np.ndarray:
        """The simulator: the box at column ``x``, row ``y``, zeros where it lies outside the array."""
        rows, cols = self.box
        out = np.zeros(self.box, self.dtype)
        r0, r1 = max(y, 0), min(y + rows, self.shape[0])
        c0, c1 = max(x, 0), min(x + cols, self.shape[1])
        if r0 < r1 and c0 < c1:
            out[r0 - y:r1 - y, c0 - x:c1 - x] = self._host[r0:r1, c0:c1]
        return out

    def write_box(self, x: int, y: int, values: np.ndarray) -> None:
        """The simulator: the part of a box inside the array is written, and, as on a GPU, the rest
        of the 16-byte chunk that holds a row's last column (the row's padding: see the module's
        docstring); the rest is dropped."""
        rows, cols = self.box
        r0, r1 = max(y, 0), min(y + rows, self.shape[0])
        c0 = max(x, 0)
        c1 = min(x + cols, chunk_end(self.shape[1], self.dtype.itemsize)) if x < self.shape[1] else c0
        if r0 < r1 and c0 < c1:
            # the rows' padding lies inside the pitch (a multiple of 16 bytes, checked at construction)
            wide = np.lib.stride_tricks.as_strided(self._host, (self.shape[0], max(c1, self.shape[1])),
                                                   self._host.strides, writeable=True)
            wide[r0:r1, c0:c1] = values[r0 - y:r1 - y, c0 - x:c1 - x]

    def __repr__(self):
        sw = f"{self.swizzle}B" if self.swizzle else "none"
        return (f"TensorMap2D({self.shape[0]} x {self.shape[1]} {self.dtype}, box {self.box[0]} x {self.box[1]}, "
                f"swizzle {sw})")
