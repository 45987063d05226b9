"""Notebook 05.2's INT4 kernels: groups of 128 values, a float32 scale each, two codes per byte.

The learner writes these in ``solutions/05-quantization/05.2-int4-groups.ipynb``, one change per
exercise; the package keeps them because ``scripts/gpu_module05_integer_probe.py``, the quantize
probe and the tests run them. Each function here is the **same code** as the notebook's function of
the same name (a test compares their syntax trees), so the names are the notebook's: ``GROUP``,
``WARPS``, ``group_codes``, ... The format (scale, rounding, packing order) is defined in
:mod:`kernel_lab.quant.integer`.

The path the notebook takes, and what each step removes from a lane's instructions:

* :func:`int4_quantize_groups`: a warp per group on a flat grid; the warp finds its row by
  ``warp // groups``, a 64-bit division done in software;
* a 2-D grid (the row is ``blockIdx.y``: no division); the notebook's ``int4_quantize_rows``, not
  kept here (nothing but the notebook runs it);
* :func:`int4_quantize_rows_x4`: rows that start on 16 bytes take one 16-byte load and one 2-byte
  store per lane;
* :func:`int4_quantize_rows_u64`: the same with unsigned indices: Numba tests every signed index
  for wrap-around (a negative index counts from the end), an unsigned one it cannot;
* :func:`int4_quantize_rows_x8`: a group on 16 lanes, eight values a lane: the per-group work is
  shared by twice the values, and a lane has two 16-byte loads in flight.

Dequantizers: :func:`int4_dequantize` (a thread per byte), a thread per quad (the notebook's
``int4_dequantize_x4``, not kept here) and :func:`int4_dequantize_tile4` (four quads a block apart
per thread, their loads before the first store).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32, int64, uint8, uint16, uint64

from ..validate import KernelLabArgumentError
from ..vector_loads import load4, store4
from .integer import AMAX_FLOOR, INT4_GROUP
from .int8 import MAX_GRID_Y, round_clamp_fadd
from .warp import warp_max_f32

GROUP = INT4_GROUP  # values per scale
WARPS = 8  # the 2-D grid's warps per block, each on one group of the block's row
TILE_THREADS = 256  # int4_dequantize_tile4's threads per block, on a GPU and in the simulator alike


# --- exercise 1: one warp per group, four values per lane ----------------------------------------

@cuda.jit(device=True)
def quad_codes(v0, v1, v2, v3, s):
    """Four values' codes, two per byte: values 0, 1 in ``lo`` (value 0 in the low nibble), values
    2, 3 in ``hi``. Each code is masked to its 4 bits: a negative code's sign bits would spill."""
    q0 = round_clamp_fadd(v0 / s, float32(-8.0), float32(7.0))
    q1 = round_clamp_fadd(v1 / s, float32(-8.0), float32(7.0))
    q2 = round_clamp_fadd(v2 / s, float32(-8.0), float32(7.0))
    q3 = round_clamp_fadd(v3 / s, float32(-8.0), float32(7.0))
    return (q0 & 0xF) | ((q1 & 0xF) << 4), (q2 & 0xF) | ((q3 & 0xF) << 4)


@cuda.jit(device=True)
def group_codes(v0, v1, v2, v3):
    """The group's scale (absmax / 7 by shuffles over the warp, 1 for an all-zero group) and the
    lane's four codes as two bytes (:func:`quad_codes`)."""
    m = warp_max_f32(max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3))))
    s = max(m, AMAX_FLOOR) / float32(7.0) if m > float32(0.0) else float32(1.0)
    lo, hi = quad_codes(v0, v1, v2, v3, s)
    return s, lo, hi


@cuda.jit(device=True)
def quantize_group(x, packed, scales, r, g, lane):
    """Lane ``lane``'s four values of group ``g`` of row ``r``: scalar loads (0 past the row), the
    codes, two byte stores (an odd row's last byte has the 0 loaded past the end as its partner)."""
    cols = x.shape[1]
    c0 = g * GROUP + 4 * lane
    v0 = x[r, c0] if c0 < cols else float32(0.0)
    v1 = x[r, c0 + 1] if c0 + 1 < cols else float32(0.0)
    v2 = x[r, c0 + 2] if c0 + 2 < cols else float32(0.0)
    v3 = x[r, c0 + 3] if c0 + 3 < cols else float32(0.0)
    s, lo, hi = group_codes(v0, v1, v2, v3)
    if lane == 0:
        scales[r, g] = s
    if c0 < cols:  # the odd tail: its partner is the 0 loaded past the end
        packed[r, c0 // 2] = uint8(lo)
    if c0 + 2 < cols:
        packed[r, c0 // 2 + 1] = uint8(hi)


@cuda.jit
def int4_quantize_groups(x, packed, scales):
    """A flat grid of warps, warp w on group w of the matrix's (rows x groups), row-major."""
    warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
    groups = (x.shape[1] + GROUP - 1) // GROUP
    if warp >= x.shape[0] * groups:  # whole warps leave together: the shuffles stay full
        return
    r = warp // groups
    quantize_group(x, packed, scales, r, warp - r * groups, cuda.threadIdx.x % 32)


# --- exercise 2: one thread per byte, sign extension ---------------------------------------------

@cuda.jit(device=True)
def nibble_value(h, k):
    """Nibble ``k`` of ``h`` as a 4-bit two's complement value (bit 3 weighs -8), float32."""
    v = (h >> (4 * k)) & 0xF
    return float32(int32(v - ((v & 0x8) << 1)))


@cuda.jit(device=True)
def dequantize_byte(packed, scales, out, r, j):
    """Byte ``j`` of row ``r``: values 2j (low nibble) and 2j + 1 (high, if the row has it)."""
    if j >= packed.shape[1]:
        return
    b = int32(packed[r, j])
    s = scales[r, (2 * j) // GROUP]  # 128 is even: both values of a byte share a group
    out[r, 2 * j] = nibble_value(b, 0) * s
    if 2 * j + 1 < out.shape[1]:  # an odd row ends in half a byte
        out[r, 2 * j + 1] = nibble_value(b, 1) * s


@cuda.jit
def int4_dequantize(packed, scales, out):
    r, j = cuda.grid(2)
    if r < out.shape[0]:
        dequantize_byte(packed, scales, out, r, j)


# --- exercises 4 and 5: 16-byte accesses on aligned rows, then unsigned indices -------------------

@cuda.jit
def int4_quantize_rows_x4(x, packed, packed16, scales):
    """Grid (ceil(groups / WARPS), rows), 32 * WARPS threads: warp w of block (bx, r) quantizes group
    bx * WARPS + w of row r. Rows that start on 16 bytes (``cols % 4 == 0``): one 16-byte load and
    one 2-byte store of four codes (``packed16``, the uint16 view) per lane; other widths the scalar
    path of :func:`quantize_group`."""
    lane = cuda.threadIdx.x % 32
    r = cuda.blockIdx.y
    g = cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32
    cols = x.shape[1]
    if g >= scales.shape[1]:  # whole warps leave together: the shuffles stay full
        return
    if cols % 4 != 0:  # rows that do not start on 16 bytes: exercise 3's scalar path
        quantize_group(x, packed, scales, r, g, lane)
        return
    c0 = g * GROUP + 4 * lane
    v0 = v1 = v2 = v3 = float32(0.0)
    if c0 < cols:  # cols % 4 == 0: the whole quad is in the row
        v0, v1, v2, v3 = load4(x, (r, c0))
    s, lo, hi = group_codes(v0, v1, v2, v3)
    if lane == 0:
        scales[r, g] = s
    if c0 < cols:
        packed16[r, c0 // 4] = uint16(lo | (hi << 8))  # two bytes, the first one low


@cuda.jit
def int4_quantize_rows_u64(x, packed, packed16, scales):
    """:func:`int4_quantize_rows_x4` with every index of the 16-byte path unsigned (a uint64 cannot
    be negative, so Numba emits no wrap-around test; every constant is a uint64 too, since Numba
    types ``uint64 + int64`` as float64, which cannot index). Launched with WARPS warps a block."""
    lane = uint64(cuda.threadIdx.x & 31)
    r = uint64(cuda.blockIdx.y)
    g = uint64(cuda.blockIdx.x) * uint64(WARPS) + uint64(cuda.threadIdx.x >> 5)
    cols = uint64(x.shape[1])
    if g >= uint64(scales.shape[1]):  # whole warps leave together: the shuffles stay full
        return
    if (cols & uint64(3)) != uint64(0):  # not 16-byte aligned: the scalar path, signed (speed is the aligned rows')
        quantize_group(x, packed, scales, int64(r), int64(g), int64(lane))
        return
    c0 = g * uint64(GROUP) + uint64(4) * lane
    v0 = v1 = v2 = v3 = float32(0.0)
    if c0 < cols:
        v0, v1, v2, v3 = load4(x, (r, c0))
    s, lo, hi = group_codes(v0, v1, v2, v3)
    if lane == uint64(0):
        scales[r, g] = s
    if c0 < cols:
        packed16[r, c0 >> uint64(2)] = uint16(lo | (hi << 8))


# --- exercise 6: a group on 16 lanes, eight values a lane ------------------------------------------

@cuda.jit(device=True)
def max16(v):
    """The maximum of ``v`` over the 16 lanes of each half warp, in all of them: xor offsets below 16
    never cross from one half to the other (a constant-step loop, as :func:`warp_max_f32`)."""
    off = 8
    while off > 0:
        v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, off))
        off //= 2
    return v


@cuda.jit
def int4_quantize_rows_x8(x, packed, packed16, scales):
    """:func:`int4_quantize_rows_u64` with a group on 16 lanes: each half warp quantizes one group, a
    lane its quads ``lane`` and ``lane + 16`` (eight values: two 16-byte loads, each instruction of
    the warp reading whole 128-byte lines), so the per-group work (indices, shuffles, the scale's
    division, the tests) is shared by twice the values, and two loads are in flight per lane.
    Grid (ceil(groups / (2 WARPS)), rows); rows that are not 16-byte aligned: :func:`quantize_group`,
    the warp's two groups one after the other."""
    lane = uint64(cuda.threadIdx.x & 15)  # the lane's place among its group's 16
    half = uint64((cuda.threadIdx.x >> 4) & 1)
    r = uint64(cuda.blockIdx.y)
    g0 = (uint64(cuda.blockIdx.x) * uint64(WARPS) + uint64(cuda.threadIdx.x >> 5)) * uint64(2)  # the warp's first group
    g = g0 + half
    cols = uint64(x.shape[1])
    groups = uint64(scales.shape[1])
    if g0 >= groups:  # whole warps leave together: the shuffles stay full
        return
    if (cols & uint64(3)) != uint64(0):  # not 16-byte aligned: the warp's two groups on the scalar path
        for k in range(2):
            if g0 + uint64(k) < groups:  # the same for the whole warp
                quantize_group(x, packed, scales, int64(r), int64(g0) + k, int64(cuda.threadIdx.x & 31))
        return
    c0 = g * uint64(GROUP) + uint64(4) * lane  # quad `lane` of the group
    c1 = c0 + uint64(64)  # and quad `lane + 16`, 64 values on
    v0 = v1 = v2 = v3 = v4 = v5 = v6 = v7 = float32(0.0)
    if c0 < cols:  # a group past the row's last (an odd count) loads zeros and stores nothing
        v0, v1, v2, v3 = load4(x, (r, c0))
    if c1 < cols:
        v4, v5, v6, v7 = load4(x, (r, c1))
    m = max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3)))
    m = max16(max(m, max(max(abs(v4), abs(v5)), max(abs(v6), abs(v7)))))
    s = max(m, AMAX_FLOOR) / float32(7.0) if m > float32(0.0) else float32(1.0)
    lo0, hi0 = quad_codes(v0, v1, v2, v3, s)
    lo1, hi1 = quad_codes(v4, v5, v6, v7, s)
    if lane == uint64(0) and g < groups:
        scales[r, g] = s
    if c0 < cols:
        packed16[r, c0 >> uint64(2)] = uint16(lo0 | (hi0 << 8))
    if c1 < cols:
        packed16[r, c1 >> uint64(2)] = uint16(lo1 | (hi1 << 8))


# --- exercises 7 and 8: a thread per quad, then a tile of four quads per thread -------------------

@cuda.jit(device=True)
def store_quad(out, r, c, h, s):
    """Values c .. c + 3 of row r from the four nibbles of ``h`` (nibble k: value c + k), times the
    scale ``s``, in one 16-byte store."""
    store4(out, (r, c), nibble_value(h, 0) * s, nibble_value(h, 1) * s, nibble_value(h, 2) * s,
           nibble_value(h, 3) * s)


@cuda.jit(device=True)
def dequantize_quad(packed, packed16, scales, out, r, j, vec):
    """Values 4j .. 4j + 3 of row r (one group: 128 is a multiple of 4). With ``vec`` (rows 16-byte
    aligned) one 2-byte load and one 16-byte store; otherwise exercise 2's two bytes."""
    c = 4 * j
    if c >= out.shape[1]:
        return
    if vec:
        store_quad(out, r, c, int32(packed16[r, j]), scales[r, c // GROUP])
    else:
        dequantize_byte(packed, scales, out, r, 2 * j)
        dequantize_byte(packed, scales, out, r, 2 * j + 1)


@cuda.jit
def int4_dequantize_tile4(packed, packed16, scales, out):
    """Grid (tiles along the row, rows): four quads per thread a block apart, their four uint16
    loads and scales before the first 16-byte store; other widths and the last partial tile of a row
    quad by quad."""
    r = cuda.blockIdx.y
    nb = cuda.blockDim.x
    j = cuda.blockIdx.x * (4 * nb) + cuda.threadIdx.x
    cols = out.shape[1]
    vec = cols % 4 == 0
    if vec and j + 3 * nb < cols // 4:  # four 2-byte loads in flight, then four 16-byte stores
        h0 = int32(packed16[r, j])
        h1 = int32(packed16[r, j + nb])
        h2 = int32(packed16[r, j + 2 * nb])
        h3 = int32(packed16[r, j + 3 * nb])
        s0 = scales[r, (4 * j) // GROUP]
        s1 = scales[r, (4 * (j + nb)) // GROUP]
        s2 = scales[r, (4 * (j + 2 * nb)) // GROUP]
        s3 = scales[r, (4 * (j + 3 * nb)) // GROUP]
        store_quad(out, r, 4 * j, h0, s0)
        store_quad(out, r, 4 * (j + nb), h1, s1)
        store_quad(out, r, 4 * (j + 2 * nb), h2, s2)
        store_quad(out, r, 4 * (j + 3 * nb), h3, s3)
    else:  # other widths, and the last, partial tile of a row
        for k in range(4):
            dequantize_quad(packed, packed16, scales, out, r, j + k * nb, vec)


# --- launchers: shapes checked, rows past CUDA's grid limit in slices ------------------------------

_dummy16 = {}


def packed16_of(packed, cols: int):
    """The uint16 view of packed INT4 rows (two bytes = four values) when ``cols % 4 == 0``; for
    other widths a (1, 1) dummy that the kernels never read (Numba compiles one kernel for both)."""
    if cols % 4 == 0:
        return packed.view(np.uint16)
    if "u16" not in _dummy16:
        _dummy16["u16"] = cuda.device_array((1, 1), np.uint16)
    return _dummy16["u16"]


def require_shape(arr, shape, dtype, name):
    if tuple(arr.shape) != tuple(shape) or np.dtype(arr.dtype) != np.dtype(dtype):
        raise KernelLabArgumentError(f"{name} must be {np.dtype(dtype).name} of shape {tuple(shape)}, "
                                     f"got {np.dtype(arr.dtype).name} of shape {tuple(arr.shape)}")


def _require_int4(x_or_out, packed, scales, what: str):
    """Readable errors for arrays that do not fit the format, before any kernel sees them."""
    if len(getattr(x_or_out, "shape", ())) != 2:
        raise KernelLabArgumentError(f"{what} must be a 2-D float32 array (rows, cols), got shape "
                                     f"{tuple(getattr(x_or_out, 'shape', ()))}")
    rows, cols = x_or_out.shape
    require_shape(x_or_out, (rows, cols), np.float32, what)
    require_shape(packed, (rows, -(-cols // 2)), np.uint8, "packed")
    require_shape(scales, (rows, -(-cols // GROUP)), np.float32, "scales")
    return rows, cols


def launch_int4_quantize(packed, scales, x):
    """Exercise 1's flat grid: blocks of 4 warps, a warp per group."""
    rows, cols = _require_int4(x, packed, scales, "x")
    warps = rows * -(-cols // GROUP)
    int4_quantize_groups[max(1, -(-warps // 4)), 128](x, packed, scales)


def launch_int4_dequantize(out, packed, scales):
    rows, cols = _require_int4(out, packed, scales, "out")
    int4_dequantize[(rows, max(1, -(-packed.shape[1] // 256))), (1, 256)](packed, scales, out)  # a row a block along x


QUANTIZERS = {"x4": (int4_quantize_rows_x4, 1), "u64": (int4_quantize_rows_u64, 1), "x8": (int4_quantize_rows_x8, 2)}


def launch_int4_quantize_rows(packed, scales, x, unsigned: bool = False, form: str | None = None):
    """The 2-D-grid quantizers with 16-byte accesses: ``form`` "x4" (:func:`int4_quantize_rows_x4`),
    "u64" (its unsigned indices, :func:`int4_quantize_rows_u64`; also ``unsigned=True``) or "x8" (a
    group on 16 lanes, :func:`int4_quantize_rows_x8`: the package's fastest)."""
    rows, cols = _require_int4(x, packed, scales, "x")
    form = form or ("u64" if unsigned else "x4")
    if form not in QUANTIZERS:
        raise KernelLabArgumentError(f"form must be one of {sorted(QUANTIZERS)}, got {form!r}")
    kernel, groups_per_warp = QUANTIZERS[form]
    p16 = packed16_of(packed, cols)
    wide = p16.shape[0] == rows
    blocks = -(-(-(-cols // GROUP)) // (WARPS * groups_per_warp))
    for r0 in range(0, rows, MAX_GRID_Y):
        r1 = min(r0 + MAX_GRID_Y, rows)
        kernel[(blocks, r1 - r0), 32 * WARPS](x[r0:r1], packed[r0:r1], p16[r0:r1] if wide else p16, scales[r0:r1])


def launch_int4_dequantize_tile4(out, packed, scales):
    rows, cols = _require_int4(out, packed, scales, "out")
    p16 = packed16_of(packed, cols)
    wide = p16.shape[0] == rows
    for r0 in range(0, rows, MAX_GRID_Y):
        r1 = min(r0 + MAX_GRID_Y, rows)
        grid = (max(1, -(-(-(-cols // 4)) // (4 * TILE_THREADS))), r1 - r0)
        int4_dequantize_tile4[grid, TILE_THREADS](packed[r0:r1], p16[r0:r1] if wide else p16, scales[r0:r1],
                                                  out[r0:r1])
