"""Does a tensor copy (TMA) stop exactly at the array's last column, or at the next 16-byte boundary?

Question: scripts/hopper_tma.py --gpu found, on an H200, that a box cut by the right edge of an array
whose rows are not a multiple of 16 bytes (37 x 45 float32, 5 x 3 float32, 70 x 130 float16, 33 x 70
int8) writes the row padding after the last column. Two readings fit: the store writes whole 16-byte
chunks (a hardware granularity), or the map describes the rows' pitch, not the columns (a bug in
kernel_lab.device.tensor_map). This probe gives each row more padding than the 16-byte round-up (one
more 16-byte chunk) and reports, per case, how far past the last column each row was written and with
what, and what a load puts in the box's columns past the edge (0 is the out-of-bounds fill; the
sentinel would mean it read the padding).

    python scripts/probes/tma_edge_granularity.py      # an H100/H200

Result (H200, 2026-11-29): the store wrote past the last column exactly to the end of its 16-byte
chunk, with the tile's zeros, whatever the padding (one chunk or four more): float32 5 x 3 one
column, 37 x 45 three, float16 70 x 130 six, int8 33 x 70 ten; 8 x 8 float32 (32-byte rows) none;
never the row below. Loads filled the columns and rows past the edge with zeros. So the copy
engine's stores work in whole 16-byte chunks; kernel_lab.device.tensor_map.chunk_end models it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hopper_tma as ht  # noqa: E402

SENTINEL = ht.SENTINEL


def padded(rows, cols, dtype, extra_chunks):
    per16 = 16 // np.dtype(dtype).itemsize
    ld = -(-cols // per16) * per16 + extra_chunks * per16
    return np.full((rows + 1, ld), SENTINEL, dtype)


def run(dtype, rows, cols, box, swizzle, extra_chunks):
    from kernel_lab.device.tensor_map import TensorMap2D

    a = ht.test_input(rows, cols, dtype)
    host_in = padded(rows, cols, dtype, extra_chunks)
    host_in[:rows, :cols] = a
    d_in, d_out = cuda.to_device(host_in), cuda.to_device(padded(rows, cols, dtype, extra_chunks))
    src, dst = TensorMap2D(d_in[:rows, :cols], box, swizzle), TensorMap2D(d_out[:rows, :cols], box, swizzle)
    in_bytes = -(-src.smem_bytes // 1024) * 1024
    grid = (-(-cols // box[1]), -(-rows // box[0]))
    ht.make_tile_kernel(dtype)[grid, 64, 0, 1024 + in_bytes + dst.smem_bytes](
        src, dst, box[0], box[1], src.swizzle, dst.swizzle, in_bytes)
    out = d_out.copy_to_host()
    inside_ok = np.array_equal(out[:rows, :cols], a)
    written = np.argwhere(out[:rows, cols:] != SENTINEL)
    past = int(written[:, 1].max()) + 1 if len(written) else 0
    values = sorted({float(v) for v in out[:rows, cols:][out[:rows, cols:] != SENTINEL]})[:4]
    last_row = bool((out[rows] != SENTINEL).any())
    print(f"{np.dtype(dtype).name:8s} {rows:3d} x {cols:3d} box {box} swizzle {swizzle:3d}, pitch "
          f"{host_in.shape[1]} elements: inside {'ok' if inside_ok else 'WRONG'}; written up to {past} "
          f"columns past the edge ({past * np.dtype(dtype).itemsize} bytes; values {values}); "
          f"row after the last written: {last_row}")


def load_fill(dtype, rows, cols, box, extra_chunks):
    """What a load leaves in the box's columns past the array's edge."""
    from kernel_lab.device.tensor_map import TensorMap2D

    a = ht.test_input(rows, cols, dtype, seed=1)
    host_in = padded(rows, cols, dtype, extra_chunks)
    host_in[:rows, :cols] = a
    d_in = cuda.to_device(host_in)
    tmap = TensorMap2D(d_in[:rows, :cols], box, 0)
    tile_elems = tmap.smem_bytes // np.dtype(dtype).itemsize
    out = cuda.to_device(np.zeros(tile_elems, dtype))
    ht.make_layout_probe(dtype)[1, 64, 0, 1024 + tmap.smem_bytes](tmap, out, tile_elems, tmap.box_bytes, SENTINEL)
    tile = out.copy_to_host().reshape(box)
    print(f"load {np.dtype(dtype).name} {rows} x {cols} box {box}: columns past the edge hold "
          f"{sorted({float(v) for v in tile[:rows, cols:].ravel()})[:4]}; rows past it hold "
          f"{sorted({float(v) for v in tile[rows:, :].ravel()})[:4]}")


def main():
    for extra in (0, 1, 4):
        run(np.float32, 5, 3, (16, 32), 0, extra)
        run(np.float32, 37, 45, (16, 32), 0, extra)
        run(np.float16, 70, 130, (64, 64), 128, extra)
        run(np.int8, 33, 70, (32, 64), 64, extra)
        run(np.float32, 8, 8, (8, 8), 32, extra)
    for extra in (0, 1):
        load_fill(np.float32, 5, 3, (8, 8), extra)
        load_fill(np.int8, 5, 7, (8, 16), extra)


if __name__ == "__main__":
    main()
