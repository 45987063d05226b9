"""Draw the diagrams of module 06 (tensor-core GEMMs with cuBLASDx).

Run: python images/make_images_module06.py. Each function writes one SVG next to this file:

* tc-block-tiles.svg: the grid's partition of C into block tiles, the strips of A and B one block
  walks along K, and how the tile's accumulators are spread over the threads' registers;
* tc-pipeline-stages.svg: the pipeline API: TMA copies into a ring of shared-memory stages,
  warpgroup MMAs consume them, the epilogue runs on the registers before the one store;
* tc-epilogue-place.svg: the epilogue's three passes (prepare, store, finish) and their barriers;
* tc-implicit-gemm.svg: one row and one column of the im2col matrix, gathered from a padded image;
* tc-swizzle.svg: A's 128 x 32 fp16 tile in shared memory, plain and as cuBLASDx suggests (each row's
  16-byte chunks permuted by an XOR with row bits), and the banks eight rows of one ldmatrix hit;
* tc-conv-chunks.svg: eight consecutive columns of an im2col row: scattered over the image in NCHW
  with (c, r, s) columns, one 16-byte chunk of one pixel in NHWC with (r, s, c) columns.
"""

import matplotlib.pyplot as plt
from drawing import BLUE, GREEN, GREY, HERE, ORANGE, PURPLE, RED, WHITE, arrow, box, save


def block_tiles(path=HERE / "tc-block-tiles.svg"):
    """C cut into tile_m x tile_n tiles, one per block; the block's strips of A and B; its threads' registers."""
    fig, ax = plt.subplots(figsize=(12, 5.6))
    # C (M x N) as a 4 x 5 grid of block tiles, the last row and column ragged
    cx, cy, t = 7.0, 0.5, 1.2
    widths, heights = [t, t, t, t, 0.6], [t, t, t, 0.5]
    y = cy + sum(heights)
    for bi, h in enumerate(heights):
        y -= h
        x = cx
        for bj, w in enumerate(widths):
            mine = (bi, bj) == (1, 2)
            box(ax, x, y, w, h, f"({bi},{bj})" if w > 1 else "", ORANGE if mine else GREY, fontsize=7)
            x += w
    ax.text(cx + sum(widths) / 2, cy + sum(heights) + 0.3, "C (M x N): one tile per block, grid (ceil(M/tile_m), ceil(N/tile_n), batch)",
            ha="center", fontsize=8.5)
    ax.text(cx + sum(widths) + 0.15, cy + 0.25, "ragged edge:\nzero-filled loads", fontsize=7, va="center")
    # A strip: rows of tile (1, *), all K, cut in tile_k slices
    ax_, ay = 0.5, cy + heights[3] + heights[2]
    for s in range(5):
        box(ax, ax_ + s * 1.0, ay, 1.0, t, f"k0={s}·tk" if s < 2 else "", BLUE if s == 1 else WHITE, fontsize=6.5)
    ax.text(ax_ + 2.5, ay + t + 0.2, "A: the block's tile_m rows, K in slices of tile_k", ha="center", fontsize=8)
    box(ax, ax_, cy + heights[3], 5.0, heights[2] * 0 + 0.01, "", WHITE, lw=0)
    # B strip above C: columns of tile (*, 2)
    bx = cx + 2 * t
    for s in range(4):
        box(ax, bx, cy + sum(heights) + 0.9 + s * 0.8, t, 0.8, f"k0={s}·tk" if s < 2 else "", BLUE if s == 1 else WHITE,
             fontsize=6.5)
    ax.text(bx + t + 0.2, cy + sum(heights) + 2.4, "B: the block's tile_n columns,\nK in slices of tile_k", fontsize=8,
            va="center")
    arrow(ax, ax_ + 5.05, ay + t / 2, cx + 2 * t - 0.05, ay + t / 2, color="#1d6fa5", lw=1.0)
    arrow(ax, bx + t / 2, cy + sum(heights) + 0.85, bx + t / 2, ay + t + 0.05, color="#1d6fa5", lw=1.0)
    ax.text(ax_ + 2.5, ay - 0.55, "per slice: copy to shared memory, barrier,\nMM.execute(sa, sb, acc) on the tensor cores, barrier",
            ha="center", fontsize=7.5, va="top")
    # inset: the block's tile and the threads' accumulators
    ix, iy, cell = 14.6, 0.6, 0.42
    colors = [BLUE, GREEN, PURPLE, RED]
    for r in range(8):
        for c in range(8):
            owner = (r // 2 % 2) * 2 + (c // 2 % 2)
            box(ax, ix + c * cell, iy + (7 - r) * cell, cell, cell, f"t{owner}", colors[owner], fontsize=5.5, lw=0.3)
    ax.text(ix + 4 * cell, iy + 8 * cell + 0.25, "the orange tile, in registers:\neach value lives in one thread",
            ha="center", fontsize=8)
    ax.text(ix + 4 * cell, iy - 0.3, "frag_coords(i) -> (row, col) of thread's value i\n(the partition is cuBLASDx's choice)",
            ha="center", fontsize=7, va="top")
    arrow(ax, cx + 2.5 * t + 0.4, ay + t / 2, ix - 0.1, iy + 4 * cell, color="#b26b00", lw=1.0)
    save(fig, ax, path, (0, 19), (-1.2, 9.5))


def pipeline_stages(path=HERE / "tc-pipeline-stages.svg"):
    """TMA -> ring of shared-memory stages -> warpgroup MMA -> registers -> epilogue -> global."""
    fig, ax = plt.subplots(figsize=(12, 4.0))
    box(ax, 0.2, 1.6, 2.2, 2.2, "global memory\nA, B", GREY, fontsize=8.5)
    arrow(ax, 2.5, 2.7, 4.0, 2.7, lw=1.2, text="TMA: one thread\ncopies a tile")
    # ring of stages
    ring_x, ring_y = 4.2, 1.0
    states = [("stage 0\nfull", BLUE), ("stage 1\nfull", BLUE), ("stage 2\nbeing filled", ORANGE), ("stage 3\nfree", WHITE)]
    for i, (label, color) in enumerate(states):
        box(ax, ring_x + i * 1.45, ring_y + 1.1, 1.35, 1.3, label, color, fontsize=7)
    ax.text(ring_x + 2.9, ring_y + 2.75, "shared memory: a ring of `depth` stages (A and B tiles of one K slice each)",
            ha="center", fontsize=8)
    arrow(ax, ring_x + 5.8, ring_y + 0.3, ring_x + 0.1, ring_y + 0.3, style="->", color="#777777")
    ax.text(ring_x + 2.9, ring_y - 0.05, "the consumer frees a stage, the producer refills it", ha="center", fontsize=7,
            va="top")
    arrow(ax, ring_x + 5.9, 2.7, 12.3, 2.7, lw=1.2, text="warpgroup MMAs\n(128 threads each)")
    box(ax, 12.4, 1.6, 2.0, 2.2, "registers:\naccumulators\n(tile_m x tile_n\nper block)", GREEN, fontsize=7.5)
    arrow(ax, 14.5, 2.7, 15.5, 2.7, lw=1.2)
    box(ax, 15.6, 1.6, 1.8, 2.2, "epilogue\n(yours:\nbias, GELU,\nquantize, ...)", PURPLE, fontsize=7.5)
    arrow(ax, 17.5, 2.7, 18.4, 2.7, lw=1.2)
    box(ax, 18.5, 1.6, 1.6, 2.2, "global\nmemory\nC", GREY, fontsize=8)
    ax.text(10.0, 4.5, "tile.execute(acc): the whole K loop inside the library; the copies of slice k+depth-1 overlap the MMAs of slice k",
            ha="center", fontsize=8)
    save(fig, ax, path, (0, 20.3), (0.2, 4.9))


def epilogue_place(path=HERE / "tc-epilogue-place.svg"):
    """The epilogue's three passes over the accumulators, with barriers, before the one store."""
    fig, ax = plt.subplots(figsize=(12, 3.6))
    box(ax, 0.2, 1.2, 2.6, 1.6, "K loop\nacc += A B\n(tensor cores)", BLUE, fontsize=8)
    arrow(ax, 2.9, 2.0, 3.7, 2.0)
    steps = [("1. prepare(lrow, value, stats, args)\nrow statistics into shared\n`stats` (e.g. the row max)", ORANGE),
             ("2. store(out, bz, row, col, ...)\nwrites f(value) to global memory\n(element-wise epilogues: only this)", GREEN),
             ("3. finish(stats, bz, row0, ...)\nonce per block: save the\nrow statistics (softmax)", PURPLE)]
    x = 3.8
    for i, (label, color) in enumerate(steps):
        box(ax, x, 1.0, 3.6, 2.0, label, color, fontsize=7.5)
        x += 3.6
        if i < 2:
            ax.plot([x + 0.25, x + 0.25], [0.7, 3.3], color=RED, lw=2)
            ax.text(x + 0.25, 0.45, "syncthreads", ha="center", fontsize=7, color="#b00000")
            x += 0.5
    arrow(ax, x + 0.1, 2.0, x + 0.9, 2.0)
    box(ax, x + 1.0, 1.2, 1.8, 1.6, "C in global\nmemory\n(written once)", GREY, fontsize=8)
    ax.text(8.5, 3.6, "the epilogue runs on the accumulators while they are still in registers: no second kernel reads C back",
            ha="center", fontsize=8.5)
    save(fig, ax, path, (0, x + 3.0), (0.2, 4.0))


def implicit_gemm(path=HERE / "tc-implicit-gemm.svg"):
    """A padded image, one filter window, and the im2col row and column it becomes."""
    fig, ax = plt.subplots(figsize=(12, 4.8))
    H, W, P, cell = 4, 5, 1, 0.55
    x0, y0 = 0.5, 0.6
    oh, ow = 0, 3  # the window of output pixel (0, 3) touches the padding
    for ih in range(-P, H + P):
        for iw in range(-P, W + P):
            inside = 0 <= ih < H and 0 <= iw < W
            covered = 0 <= ih - oh + P < 3 and 0 <= iw - ow + P < 3
            box(ax, x0 + (iw + P) * cell, y0 + (H + P - 1 - ih) * cell, cell, cell, "" if inside or covered else "0",
                 WHITE if inside else GREY, fontsize=6, lw=0.3)
    for r in range(3):
        for s in range(3):
            ih, iw = oh + r - P, ow + s - P
            box(ax, x0 + (iw + P) * cell, y0 + (H + P - 1 - ih) * cell, cell, cell, f"{r},{s}", ORANGE, fontsize=6,
                 lw=0.6, alpha=0.85)
    ax.text(x0 + (W + 2 * P) * cell / 2, y0 + (H + 2 * P) * cell + 0.3,
            f"image channel c, {H}x{W}, padding P = {P} (grey: zeros)", ha="center", fontsize=8)
    ax.text(x0 + (W + 2 * P) * cell / 2, y0 - 0.3, "the 3x3 window of output pixel (oh, ow) = (0, 3)", ha="center",
            fontsize=7.5, va="top")
    # the im2col matrix
    mx, my, mw, mh = 6.6, 0.6, 9.0, 3.4
    box(ax, mx, my, mw, mh, "", WHITE)
    row_y = my + mh - 0.9
    box(ax, mx, row_y, mw, 0.35, "", ORANGE, alpha=0.6)
    ax.text(mx + mw + 0.1, row_y + 0.17, "row gr = (n, oh, ow)\n= n·OH·OW + oh·OW + ow", ha="left", va="center", fontsize=7)
    col_x = mx + 4.0
    box(ax, col_x, my, 0.35, mh, "", BLUE, alpha=0.6)
    ax.text(col_x + 0.17, my + mh + 0.15, "column gc = (c, r, s)\n= c·R·S + r·S + s", ha="center", va="bottom", fontsize=7)
    ax.text(mx + mw / 2, my - 0.3, "A = im2col(x): (N·OH·OW) x (C·R·S), never stored in an implicit GEMM:\n"
            "element (gr, gc) = x[n, c, oh + r - P, ow + s - P], or 0 in the padding",
            ha="center", va="top", fontsize=7.5)
    arrow(ax, x0 + (W + 2 * P) * cell + 0.1, row_y + 0.17, mx - 0.1, row_y + 0.17, color="#b26b00", lw=1.0,
           text="")
    save(fig, ax, path, (0, 18.6), (-1.2, 5.2))


def swizzle(path=HERE / "tc-swizzle.svg"):
    """Rows 0-7 of A's tile (4 chunks of 16 bytes a row), plain and swizzled; the bank groups."""
    fig, ax = plt.subplots(figsize=(9, 4.4))
    colors = [BLUE, GREEN, ORANGE, PURPLE]
    for panel, (x0, title, pos) in enumerate([(0.0, "plain, row-major", lambda r, c: c),
                                              (10.5, "suggested: chunk c of row r goes to c ^ ((r >> 1) & 3)",
                                               lambda r, c: c ^ ((r >> 1) & 3))]):
        ax.text(x0, 8.7, title, fontsize=8, weight="bold")
        for r in range(8):
            y = 7.6 - r * 0.95
            ax.text(x0 - 0.2, y + 0.35, f"row {r}", fontsize=7, ha="right", va="center")
            for c in range(4):
                p = pos(r, c)
                bank0 = (16 * (r % 2) + 4 * p) % 32
                box(ax, x0 + 2 * p, y, 2, 0.75, f"chunk {c}\nbanks {bank0}-{bank0 + 3}", colors[c], fontsize=6)
        ax.text(x0, -0.35, "one ldmatrix reads chunk 0 of rows 0-7:" if panel == 0 else
                "one ldmatrix reads chunk 0 of rows 0-7:", fontsize=7.5)
        ax.text(x0, -0.95, "banks 0-3 and 16-19 only: 4 rows a bank, 4 passes" if panel == 0 else
                "banks 0-3, 16-19, 4-7, 20-23, 8-11, ...: one pass", fontsize=7.5, color=RED if panel == 0 else "black")
    ax.text(0, -1.9, "A row is 64 bytes (32 halves), so two rows fill the 32 four-byte banks; B's 256-byte rows get "
            "(c & 7) ^ (r & 7) within panels of 8 chunks.", fontsize=7.5)
    save(fig, ax, path, (-1.2, 19.0), (-2.3, 9.2))


def conv_chunks(path=HERE / "tc-conv-chunks.svg"):
    """Columns 0-7 of one im2col row: eight scattered 2-byte reads (NCHW, (c, r, s)) or one 16-byte
    chunk (NHWC, (r, s, c)); a tap in the padding gives a chunk of zeros."""
    fig, ax = plt.subplots(figsize=(12, 5.2))
    cell = 0.5
    # left: NCHW, columns (c, r, s): columns 0-7 are channel 0 at eight taps, eight pixels of one plane
    ax.text(0, 6.1, "NCHW, columns (c, r, s)", fontsize=8.5, weight="bold")
    for k in range(8):
        box(ax, k * cell, 5.1, cell, cell, f"{k}", ORANGE, fontsize=6.5)
    ax.text(8 * cell + 0.15, 5.35, "columns 0-7 of row (n, oh, ow):\nchannel 0 at taps (0,0) ... (2,1)", fontsize=7,
            va="center")
    x0, y0, H, W = 0.4, 0.9, 5, 6
    oh, ow = 1, 2
    taps = [(r, s) for r in range(3) for s in range(3)][:8]
    for ih in range(H):
        for iw in range(W):
            hit = (ih - oh + 1, iw - ow + 1) in taps
            box(ax, x0 + iw * cell, y0 + (H - 1 - ih) * cell, cell, cell, "", ORANGE if hit else WHITE, lw=0.3)
    ax.text(x0 + W * cell / 2, y0 - 0.3, "channel 0's plane of the image: the eight values are\neight pixels "
            "in three rows: eight 2-byte loads", ha="center", va="top", fontsize=7.5)
    arrow(ax, 1.8, 5.05, x0 + (ow + 0.5) * cell, y0 + (H - oh) * cell + 0.05, color="#b26b00")
    # right: NHWC, columns (r, s, c): columns 8j..8j+7 are eight channels of one pixel
    X = 8.0
    ax.text(X, 6.1, "NHWC, columns (r, s, c), C = 16", fontsize=8.5, weight="bold")
    for t, (label, color) in enumerate([("tap (0,0): in the padding", GREY), ("tap (0,1)", BLUE), ("tap (0,2)", GREEN)]):
        for half in range(2):
            bx = X + (2 * t + half) * 1.6
            box(ax, bx, 5.1, 1.6, cell, f"ch {8 * half}-{8 * half + 7}", color, fontsize=6.5)
        ax.text(X + 2 * t * 1.6 + 1.6, 4.85, label, ha="center", va="top", fontsize=6.5)
    ax.text(X + 9.8, 5.35, "...", fontsize=9, va="center")
    # the image's memory: pixel after pixel, C channels each
    my = 2.3
    for px in range(5):
        for half in range(2):
            color = BLUE if px == 1 else GREEN if px == 2 else WHITE
            box(ax, X + (2 * px + half) * 1.1, my, 1.1, cell, f"ch {8 * half}-{8 * half + 7}", color, fontsize=6, lw=0.4)
        ax.text(X + (2 * px + 1) * 1.1, my - 0.12, f"pixel (ih, {px})", ha="center", va="top", fontsize=6.5)
    ax.text(X, my + 0.75, "row ih of the image in memory: each pixel's C channels side by side", fontsize=7)
    arrow(ax, X + 2 * 1.6 + 0.8, 5.05, X + 2 * 1.1 + 0.55, my + cell + 0.05, color="#1d6fa5")
    ax.text(X + 4.4, 3.75, "one 16-byte cp.async", fontsize=7, color="#1d6fa5")
    ax.text(X + 0.8, 4.1, "0 source bytes:\nzeros", ha="center", fontsize=6.5, color=RED)
    ax.text(X, 0.9, "eight columns = eight channels of one pixel = 16 contiguous bytes (C a multiple of 8):\n"
            "chunk (r, c) of A's tile is x[n, oh + tr - P, ow + ts - P, ch : ch + 8], (tr, ts) = divmod(gc // C, S)",
            fontsize=7.5, va="top")
    save(fig, ax, path, (-0.3, 19.5), (-0.6, 6.5))


if __name__ == "__main__":
    conv_chunks()
    swizzle()
    block_tiles()
    pipeline_stages()
    epilogue_place()
    implicit_gemm()
