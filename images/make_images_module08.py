"""Draw the diagrams of module 08, Hopper's asynchronous data movement.

Run: python images/make_images_module08.py. Same style as make_images.py: matplotlib, text kept as
text, stable ids, no dates, so rerunning leaves the files unchanged. Each function writes one SVG:

- hopper-stage-ring.svg   a ring of STAGES = 3 shared-memory tiles with their full and empty
                          barriers: which tile each stage holds in which round, the parity every
                          wait uses, and who arrives on which barrier (08.1)
- hopper-tma-box.svg      a matrix seen in boxes by a tensor map (the edge boxes reaching past it),
                          the map's fields, and the 128-byte swizzle of a box's 16-byte chunks in
                          shared memory, with a column of the box lit in both layouts (08.2)
- hopper-wgmma-tiles.svg  the 64 x N accumulator tile of a wgmma (which warp, lane and register hold
                          each element, from wgmma_layout.fragment_coordinates), a K-major fp16 tile
                          without swizzle in core matrices (TileLayout's byte offsets, LBO and SBO),
                          and the 128-byte swizzle of a 64-wide K-tile's rows (08.3)
- hopper-ws-gemm.svg      the warp-specialised persistent GEMM: a producer warpgroup whose one thread
                          issues the TMA loads into a ring of stages, two consumer warpgroups that
                          multiply their halves of a 128 x N tile and release each stage, and the
                          count q that runs on across a block's tiles, with each load's stage and
                          parities (08.4)

The rounds, stages and parities are computed with the same formulas as the notebook's ring kernel:
stage q % STAGES, parity (q // STAGES) & 1 for the consumers, the other one for the producer.
"""

from pathlib import Path

from drawing import arrow, save_figure as _save  # first: matplotlib set up for stable SVGs
from drawing import rounded_box as _box
import matplotlib.patches as patches  # noqa: E402 - after drawing's setup
import matplotlib.pyplot as plt  # noqa: E402 - after drawing's setup

HERE = Path(__file__).parent
STAGES = 3
TILES = 7  # tiles of one block: the ring wraps twice
STAGE_COLORS = ["#8ecae6", "#ffb703", "#90be6d"]
GREY, DARK = "#d9d9d9", "#333333"
MONO = "DejaVu Sans Mono"


def _arrow(ax, x0, y0, x1, y1, *, color="black", text=None, fontsize=7):
    arrow(ax, x0, y0, x1, y1, color=color, lw=0.9, text=text, fontsize=fontsize, label_gap=0.06, label_color=True)


def stage_ring(path):
    fig, ax = plt.subplots(figsize=(10.5, 5.2))
    ax.set_xlim(-0.2, 10.6)
    ax.set_ylim(-0.6, 5.4)
    ax.axis("off")
    # Global memory: the block's tiles q = 0 .. TILES - 1 (b, b + grid, ... of the array)
    ax.text(0, 5.1, "global memory: this block's tiles (q = 0, 1, 2, ...: tiles b, b + grid, b + 2 grid, ...)",
            fontsize=8.5, va="center")
    for q in range(TILES):
        _box(ax, 0.2 + 1.45 * q, 4.35, 1.25, 0.5, STAGE_COLORS[q % STAGES], f"tile q={q}", fontsize=7.5)
    # The ring of stages in shared memory, with their two barriers each
    for s in range(STAGES):
        x = 0.6 + 3.4 * s
        _box(ax, x, 2.85, 2.6, 0.75, STAGE_COLORS[s], f"stage {s}: tiles q = " +
             ", ".join(str(q) for q in range(s, TILES, STAGES)), fontsize=8)
        _box(ax, x, 2.2, 1.25, 0.45, "white", f"full[{s}]", fontsize=7.5, family=MONO)
        _box(ax, x + 1.35, 2.2, 1.25, 0.45, "white", f"empty[{s}]", fontsize=7.5, family=MONO)
        _arrow(ax, 0.2 + 1.45 * s + 0.62, 4.35, x + 1.3, 3.62, color=DARK)
    ax.text(0, 1.85, f"shared memory: a ring of STAGES = {STAGES} tiles, each with two barriers; tile q goes to "
            "stage q % STAGES", fontsize=8.5, va="center")
    ax.text(0.6, 1.5, "copy engine: the bytes of tile q count down full[q % STAGES]'s tx-count, which thread 0 "
            "announced (arrive_expect_tx): the phase completes when the last byte lands",
            fontsize=7.5, va="center")
    # The phases of stage 0's barriers, round by round
    ax.text(0, 1.05, "stage 0, its barriers' phases (parity = (q // STAGES) & 1):", fontsize=8.5, va="center")
    xs = [0.2, 3.7, 7.2]
    for k, q in enumerate(range(0, TILES, STAGES)):
        phase, parity = q // STAGES, (q // STAGES) & 1
        text = (f"tile q={q}: phase {phase} of both\n"
                f"consumers wait full[0], parity {parity}\n"
                f"producer waits empty[0], parity {parity ^ 1}" + ("\n(a fresh barrier: passes at once)" if q < STAGES
                                                                  else "\n(until tile q - 3 has been read)"))
        _box(ax, xs[k], -0.45, 3.35, 1.25, "#f1f1f1", text, fontsize=7.2, family=MONO)
    _save(fig, path)


def tma_box(path):
    """The swizzle is box_offsets' (kernel_lab.device.tensor_map): chunk c of row r lands at chunk c ^ (r % 8)."""
    fig, ax = plt.subplots(figsize=(13.0, 5.6))
    ax.set_xlim(-0.3, 13.0)
    ax.set_ylim(-0.6, 5.5)
    ax.axis("off")
    # Left: a 37 x 45 matrix in 32 x 32 boxes (a grid of 2 x 2 boxes, the right and bottom ones cut)
    ax.text(0, 5.25, "global memory: a 37 x 45 float32 matrix, boxes of 32 x 32", fontsize=8.5, va="center")
    scale = 3.6 / 64
    x0, y0 = 0.2, 4.6
    for by in range(2):
        for bx in range(2):
            ax.add_patch(patches.Rectangle((x0 + bx * 32 * scale, y0 - (by + 1) * 32 * scale), 32 * scale, 32 * scale,
                                           facecolor=STAGE_COLORS[(bx + by) % 3], edgecolor="black", lw=0.7,
                                           alpha=0.55))
            ax.text(x0 + (bx + 0.5) * 32 * scale, y0 - (by + 0.5) * 32 * scale, f"box x={32 * bx}, y={32 * by}",
                    ha="center", va="center", fontsize=7)
    ax.add_patch(patches.Rectangle((x0, y0 - 37 * scale), 45 * scale, 37 * scale, facecolor="none",
                                   edgecolor=DARK, lw=1.6))
    ax.text(x0 + 45 * scale + 0.08, y0 - 37 * scale - 0.08, "<- the matrix ends here: loads bring\n"
            "zeros past it, stores write nothing there", fontsize=6.5, va="top",
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="none", alpha=0.85))
    # The map's fields
    fields = ("TensorMap2D(d_a, box=(32, 32), swizzle=128)\n"
              "  address, rows x cols = 37 x 45, row pitch 192 B\n"
              "  box 32 x 32 float32 = 4096 bytes (expect-tx)\n"
              "  128 bytes on the host, copied to global memory;\n"
              "  each block acquires it before its first copy")
    ax.text(0.1, 0.45, fields, fontsize=7.5, family=MONO, va="center",
            bbox=dict(boxstyle="round", facecolor="#f1f1f1", edgecolor="black", lw=0.6))
    # Right: two 8 x 8 grids of 16-byte chunks (the first 8 rows of a box, 4 float32 a chunk)
    for k, (title, swizzled) in enumerate((("shared memory, no swizzle: row r, chunk c at chunk c", False),
                                           ("128-byte swizzle: row r, chunk c at chunk c ^ (r % 8)", True))):
        gx, gy, cell = 5.3 + 3.95 * k, 4.1, 0.42
        ax.text(gx - 0.3, 5.25, title, fontsize=7.5, va="center")
        for r in range(8):
            ax.text(gx - 0.12, gy - r * cell + cell / 2, f"r{r}", fontsize=6.5, ha="right", va="center", family=MONO)
            for c in range(8):
                at = (c ^ r) if swizzled else c
                lit = c == 0  # the chunk of elements [r, 0..3]: column 0 of the box
                ax.add_patch(patches.Rectangle((gx + at * cell, gy - r * cell), cell, cell,
                                               facecolor=STAGE_COLORS[1] if lit else "white", edgecolor="black",
                                               lw=0.5))
                ax.text(gx + (at + 0.5) * cell, gy - r * cell + cell / 2, str(c), fontsize=6.5, ha="center",
                        va="center", family=MONO)
        for c in range(8):
            ax.text(gx + (c + 0.5) * cell, gy + cell + 0.06, f"{4 * c}-\n{4 * c + 3}", fontsize=5.5,
                    ha="center", va="bottom", family=MONO)
        ax.text(gx - 0.12, gy + cell + 0.2, "banks", fontsize=6, ha="right", va="center")
    ax.text(5.0, 0.25, "Each cell is a 16-byte chunk (4 float32) of one 128-byte row of the box; its number is the "
            "chunk's place in the row.\nLit: column 0 of the box, which a transpose reads down (or writes down). "
            "Without a swizzle it stays in chunk 0:\nits 32 elements all in bank 0, a 32-way conflict. With the "
            "128-byte swizzle it visits all 8 chunks: 8 banks,\n4 of the 32 rows in each, a 4-way conflict. The "
            "copy engine writes the box in this order; read it through tma_tile_index.",
            fontsize=7.2, va="center")
    _save(fig, path)


def wgmma_tiles(path):
    """The fragment is wgmma_layout.fragment_coordinates'; the tiles' byte offsets are TileLayout's."""
    from kernel_lab.device.wgmma_layout import TileLayout, fragment_coordinates

    fig, ax = plt.subplots(figsize=(14.0, 6.4))
    ax.set_xlim(-0.3, 14.2)
    ax.set_ylim(-0.9, 6.1)
    ax.axis("off")
    warp_colors = ["#8ecae6", "#ffb703", "#90be6d", "#f4a3a8"]
    # Left: the 64 x N accumulator tile (N = 32 drawn; the pattern repeats every 8 columns)
    n, cell = 32, 0.085
    x0, y0 = 0.35, 5.55
    coords = fragment_coordinates(n)
    owner = {}
    for tid in range(128):
        for i in range(n // 2):
            r, c = (int(v) for v in coords[tid, i])
            owner[(r, c)] = (tid, i)
    ax.text(0, 5.85, "C (64 x N; N = 32 drawn): warp w of the warpgroup owns rows 16 w .. 16 w + 15", fontsize=8.5,
            va="center")
    for (r, c), (tid, i) in owner.items():
        ax.add_patch(patches.Rectangle((x0 + c * cell, y0 - (r + 1) * cell), cell, cell,
                                       facecolor=warp_colors[tid // 32], edgecolor="white", lw=0.25))
    for w in range(4):
        ax.text(x0 + n * cell + 0.08, y0 - (16 * w + 8) * cell, f"warp {w}\n(threads {32 * w}..{32 * w + 31})",
                fontsize=7, va="center")
    # the lanes of warp 0 in its first 8 columns, enlarged: lane and register
    ex, big = 4.55, 0.3
    for r in range(16):
        for c in range(8):
            tid, i = owner[(r, c)]
            ax.add_patch(patches.Rectangle((ex + c * big, y0 - 0.2 - (r + 1) * big), big, big,
                                           facecolor=warp_colors[0], edgecolor="black", lw=0.4))
            ax.text(ex + (c + 0.5) * big, y0 - 0.2 - (r + 0.5) * big, f"{tid}\nr{i}", fontsize=4.6,
                    ha="center", va="center", family=MONO, linespacing=0.9)
    ax.add_patch(patches.Rectangle((x0, y0 - 16 * cell), 8 * cell, 16 * cell, facecolor="none", edgecolor="black",
                                   lw=1.0))
    ax.annotate("", xy=(ex, y0 - 0.2), xytext=(x0 + 8 * cell, y0),
                arrowprops=dict(arrowstyle="->", lw=0.7, color=DARK))
    ax.text(ex - 0.3, y0 - 0.2 - 16 * big - 0.12,
            "warp 0's rows 0-15, columns 0-7, enlarged:\n"
            "thread (= lane) and register. Lane l: rows\n"
            "l // 4 and + 8; columns 2 (l % 4) and + 1.\n"
            "Registers 4 j .. 4 j + 3: the same, 8 j columns on.", fontsize=6.8, va="top")
    # Right, top: Exercise 1's K-major tile without swizzle: core matrices of 8 rows x 16 bytes
    lay = TileLayout(16, 16, 2, 0)
    off = lay.byte_offsets()
    gx, gy, cw, ch = 7.9, 5.55, 0.36, 0.135
    ax.text(gx - 0.1, 5.85, "A's tile, K-major fp16, no swizzle (rows 0-15 of 64): byte offset of each element",
            fontsize=8.5, va="center")
    cm_colors = {(0, 0): "#cdeac0", (0, 1): "#ffe5b4", (1, 0): "#d7e3fc", (1, 1): "#f6d1e1"}
    for r in range(16):
        for k in range(16):
            ax.add_patch(patches.Rectangle((gx + k * cw, gy - (r + 1) * ch), cw, ch,
                                           facecolor=cm_colors[(r // 8, k // 8)], edgecolor="white", lw=0.3))
            ax.text(gx + (k + 0.5) * cw, gy - (r + 0.5) * ch, str(int(off[r, k])), fontsize=4.6, ha="center",
                    va="center", family=MONO)
    for k in range(0, 16, 4):
        ax.text(gx + (k + 0.5) * cw, gy + 0.02, f"k={k}", fontsize=5.5, ha="center", va="bottom")
    ax.text(gx + 16 * cw + 0.1, gy - 4 * ch, "core matrix:\n8 rows x 16 bytes,\n128 contiguous bytes", fontsize=6.8,
            va="center")
    ax.text(gx + 16 * cw + 0.1, gy - 12 * ch, "LBO = 128: the next\n16 bytes of K\nSBO = 256: the next\n8 rows",
            fontsize=6.8, va="center")
    # Right, bottom: the 128-byte swizzle of Exercise 3's 64-wide K-tiles (8 rows of one 8-row group)
    sx, sy, sc = 7.9, 2.55, 0.36
    ax.text(sx - 0.1, 2.85, "Exercise 3's tiles: 128-byte swizzle, each row 64 halves (128 bytes), SBO = 1024",
            fontsize=8.5, va="center")
    for r in range(8):
        ax.text(sx - 0.08, sy - (r + 0.5) * sc * 0.7, f"row {r}", fontsize=6, ha="right", va="center")
        for j in range(8):
            at = j ^ r
            step = j // 2  # the K-step (16 halves, 32 bytes) this chunk belongs to
            ax.add_patch(patches.Rectangle((sx + at * sc * 1.4, sy - (r + 1) * sc * 0.7), sc * 1.4, sc * 0.7,
                                           facecolor=STAGE_COLORS[step % 3] if step < 3 else "#f4a3a8",
                                           edgecolor="black", lw=0.4))
            ax.text(sx + (at + 0.5) * sc * 1.4, sy - (r + 0.5) * sc * 0.7, f"k {8 * j}-{8 * j + 7}", fontsize=5.4,
                    ha="center", va="center", family=MONO)
    for at in range(8):
        ax.text(sx + (at + 0.5) * sc * 1.4, sy + 0.03, f"{16 * at}-{16 * at + 15}", fontsize=5.5,
                ha="center", va="bottom", family=MONO)
    ax.text(sx - 0.08, sy + 0.1, "bytes", fontsize=6, ha="right", va="center")
    ax.text(sx, sy - 8 * sc * 0.7 - 0.12,
            "16-byte chunk j of row r lands at chunk j ^ (r % 8). Colour: the K-step (16 halves) a chunk belongs to.\n"
            "K-step s's descriptor starts 32 s bytes into the tile; the tensor cores undo the XOR from the\n"
            "address bits, so the tile must start at a multiple of 1024 bytes.", fontsize=6.8, va="top")
    _save(fig, path)


def ws_gemm(path, stages=4, ktiles=5):
    """08.4: who does what in a block of the warp-specialised GEMM, and the load count q across tiles."""
    fig, ax = plt.subplots(figsize=(10.8, 6.4))
    ax.set_xlim(-0.2, 10.8)
    ax.set_ylim(-1.5, 6.0)
    ax.axis("off")
    ax.text(0, 5.75, "one block an SM, 384 threads: warpgroup 0 produces, warpgroups 1 and 2 consume; the block "
            "walks output tiles b, b + grid, ...", fontsize=8.5, va="center")
    _box(ax, 0.0, 3.9, 2.3, 1.45, "#f1f1f1", "warpgroup 0: producer\nsetmaxnreg_dec(40)\none thread issues,\n"
         "for each K-tile: wait empty,\nexpect-tx, 2 TMA loads", fontsize=7.3)
    colors = [STAGE_COLORS[s % len(STAGE_COLORS)] for s in range(stages)]
    colors[3 % stages] = "#cdb4db"
    for s in range(stages):
        x = 2.9 + 1.45 * s
        _box(ax, x, 4.55, 1.3, 0.8, colors[s], f"stage {s}\nA 128 x 64\nB N x 64", fontsize=7)
        _box(ax, x, 4.05, 0.62, 0.38, "white", f"full[{s}]", fontsize=6.3, family=MONO)
        _box(ax, x + 0.68, 4.05, 0.62, 0.38, "white", f"empty[{s}]", fontsize=6.3, family=MONO)
    _arrow(ax, 2.3, 4.95, 2.85, 4.95, color=DARK, text="TMA")
    for k, (y, rows) in enumerate(((2.5, "0 .. 63"), (1.2, "64 .. 127"))):
        _box(ax, 2.9, y, 3.4, 1.0, "#f1f1f1", f"warpgroup {k + 1}: consumer, half = {k}\nsetmaxnreg_inc(232); "
             f"rows {rows} of A's box\nwait full, 4 wgmmas, wait_group(1),\nrelease the stage before (8 warps arrive)",
             fontsize=7)
        _arrow(ax, 6.3, y + 0.5, 7.3, y + 0.5, color=DARK, text="store_fragment")
    _arrow(ax, 4.6, 4.0, 4.6, 3.55, color=DARK)
    _box(ax, 7.35, 1.2, 3.2, 2.3, "white", "C: the block's 128 x N tile\n(rows 0-63: warpgroup 1,\n"
         "rows 64-127: warpgroup 2)\nthen the next tile, while the\nproducer already loads it", fontsize=7.3)
    ax.text(0, 0.75, f"the count q runs on across the block's tiles (here {ktiles} K-tiles a tile, STAGES = "
            f"{stages}): stage q % STAGES, phase q // STAGES", fontsize=8.5, va="center")
    for q in range(3 * ktiles):
        tile, kt = divmod(q, ktiles)
        s, parity = q % stages, (q // stages) & 1
        x, y = 0.05 + 0.7 * q, -0.35
        _box(ax, x, y, 0.62, 0.8, colors[s], f"q={q}\nt{tile} k{kt}\ns{s} p{parity}", fontsize=6.1, family=MONO)
    ax.text(0, -0.95, "t: the block's tile, k: its K-tile, s: the stage, p: the parity a consumer waits on full[s] "
            "((q // STAGES) & 1);\nthe producer waits on empty[s] with the other parity, one phase behind (a "
            "fresh barrier passes it at once).", fontsize=7.5, va="center")
    _save(fig, path)


if __name__ == "__main__":
    stage_ring(HERE / "hopper-stage-ring.svg")
    print("wrote", HERE / "hopper-stage-ring.svg")
    tma_box(HERE / "hopper-tma-box.svg")
    print("wrote", HERE / "hopper-tma-box.svg")
    wgmma_tiles(HERE / "hopper-wgmma-tiles.svg")
    print("wrote", HERE / "hopper-wgmma-tiles.svg")
    ws_gemm(HERE / "hopper-ws-gemm.svg")
    print("wrote", HERE / "hopper-ws-gemm.svg")
