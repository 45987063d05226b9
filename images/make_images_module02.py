"""Draw the diagrams of module 02 (device-wide reductions and scans, matrix multiplication).

Run: python images/make_images_module02.py. Each function writes one SVG next to this file.
"""

import matplotlib.pyplot as plt
from drawing import BLUE, GREEN, GREY, HERE, ORANGE, PURPLE, RED, arrow, box, save


def reduction_strategies(path=HERE / "reduction-strategies.svg"):
    """Three ways to reduce a whole array: atomics per block, two passes, a persistent grid."""
    fig, ax = plt.subplots(figsize=(12, 4.2))
    panels = [(0, "1. one pass, one atomic per block"), (14, "2. two passes"), (28, "3. grid-stride, persistent")]
    for x0, title in panels:
        ax.text(x0 + 5.5, 7.4, title, ha="center", fontsize=10, weight="bold")
    # 1: one block per 256 elements, each adds atomically into out[0]
    for j in range(10):
        box(ax, j * 1.1, 5.4, 1.0, 0.8, "", BLUE)
        ax.text(j * 1.1 + 0.5, 5.8, f"b{j}", ha="center", va="center", fontsize=7)
        arrow(ax, j * 1.1 + 0.5, 5.35, 5.2, 2.65, color="#555555", lw=0.5)
    box(ax, 4.7, 1.8, 1.6, 0.8, "out[0]", ORANGE)
    ax.text(5.5, 0.7, "n / 256 blocks, n / 256 atomics\non one address: the L2 serialises them", ha="center",
            fontsize=8)
    # 2: partials array then one block
    for j in range(10):
        box(ax, 14 + j * 1.1, 5.4, 1.0, 0.8, f"b{j}", BLUE, fontsize=7)
        arrow(ax, 14 + j * 1.1 + 0.5, 5.35, 14 + j * 1.1 + 0.5, 4.45, color="#555555", lw=0.5)
        box(ax, 14 + j * 1.1, 3.6, 1.0, 0.8, "", GREEN)
    ax.text(14 + 11.2, 4.0, "partials", va="center", fontsize=8)
    box(ax, 17.5, 1.8, 4.0, 0.8, "kernel 2: one block", PURPLE)
    arrow(ax, 19.5, 3.55, 19.5, 2.65)
    ax.text(19.5, 0.7, "no atomics; a second launch\nand a small extra read", ha="center", fontsize=8)
    # 3: persistent: few blocks loop over the array
    for j in range(12):
        owner = j % 4
        box(ax, 28 + j * 0.92, 5.4, 0.86, 0.8, f"b{owner}", [BLUE, GREEN, PURPLE, RED][owner], fontsize=7)
    for j in range(4):
        box(ax, 29 + j * 2.2, 3.4, 1.8, 0.8, f"block {j}", [BLUE, GREEN, PURPLE, RED][j], fontsize=7)
        arrow(ax, 29.9 + j * 2.2, 3.35, 33.3, 2.65, color="#555555", lw=0.5)
    ax.text(33.5, 4.6, "each block strides over the whole array", ha="center", fontsize=7)
    box(ax, 32.5, 1.8, 1.6, 0.8, "out[0]", ORANGE)
    ax.text(33.5, 0.7, "one block per SM slot: few atomics,\nlong loops with many loads in flight", ha="center",
            fontsize=8)
    save(fig, ax, path, (-0.5, 40.5), (0, 8))


def scan_lookback(path=HERE / "scan-decoupled-lookback.svg"):
    """Three-kernel scan (top) and single-pass scan with decoupled look-back (bottom)."""
    fig, ax = plt.subplots(figsize=(12, 6.4))
    ax.text(0, 11.6, "Three kernels: reduce the tiles, scan the totals, scan each tile again from its offset",
            fontsize=10, weight="bold")
    for j in range(8):
        box(ax, j * 1.6, 9.6, 1.5, 0.9, f"tile {j}", BLUE, fontsize=8)
        arrow(ax, j * 1.6 + 0.75, 9.55, j * 1.6 + 0.75, 8.85, lw=0.6)
        box(ax, j * 1.6, 8.0, 1.5, 0.8, "total", GREEN, fontsize=7)
    box(ax, 13.6, 8.0, 3.4, 0.8, "kernel 2: scan totals", PURPLE, fontsize=8)
    box(ax, 13.6, 9.6, 3.4, 0.9, "kernel 3: tile + offset", ORANGE, fontsize=8)
    ax.text(18.0, 9.2, "x is read twice:\n12 bytes per element\ninstead of 8", fontsize=8, va="center")
    ax.text(0, 6.5, "Single pass: tile b publishes its total, then looks back until it finds an inclusive prefix",
            fontsize=10, weight="bold")
    states = [("P", GREEN, "prefix"), ("P", GREEN, "prefix"), ("A", ORANGE, "total"), ("A", ORANGE, "total"),
              ("X", GREY, "not yet"), ("A", ORANGE, "total"), ("b", BLUE, "")]
    for j, (flag, color, what) in enumerate(states):
        label = f"tile {j}" if flag != "b" else "tile 6\n(this block)"
        box(ax, j * 2.0, 4.0, 1.8, 1.2, label, color, fontsize=8)
        if flag != "b":
            ax.text(j * 2.0 + 0.9, 3.55, f"flag {flag}: {what}", ha="center", fontsize=7)
    for j, label in [(5, "1. add its total"), (4, "2. wait: nothing\npublished yet"), (3, "3. add"), (2, "4. add"),
                     (1, "5. add its prefix: stop")]:
        arrow(ax, (j + 1) * 2.0 + 0.3, 5.4, j * 2.0 + 1.2, 5.4, color="#b5651d", lw=1.0)
        ax.text(j * 2.0 + 1.5, 5.8 if j % 2 else 6.0, label, ha="center", fontsize=7, color="#b5651d")
    ax.text(0, 1.8, "Publish: write the value, cuda.threadfence(), then set the flag (atomic).   "
                    "Look back: poll the flag with an acquire load (kl.load_acquire), then read the value.\n"
                    "Tiles are numbered by a ticket (an atomic counter), in the order blocks start: a block never "
                    "waits for a tile whose block has not started.", fontsize=8, va="top")
    save(fig, ax, path, (-0.3, 24), (0, 12.2))


def sgemm_tiling(path=HERE / "sgemm-tiling.svg"):
    """A block's tile of C, the strips of A and B it needs, a warp's tile and a thread's registers."""
    fig, ax = plt.subplots(figsize=(11, 6.2))
    # B on top, A on the left, C at the bottom right
    box(ax, 6, 9, 10, 4, "", "#f0f0f0")
    ax.text(11, 13.3, "B (K x N)", ha="center", fontsize=9)
    box(ax, 9, 9, 2.5, 4, "", BLUE, alpha=0.6)
    box(ax, 9, 11.2, 2.5, 0.6, "BK x BN", ORANGE, fontsize=7)
    box(ax, 0, 0, 5, 8, "", "#f0f0f0")
    ax.text(2.5, 8.3, "A (M x K)", ha="center", fontsize=9)
    box(ax, 0, 3, 5, 2.5, "", BLUE, alpha=0.6)
    box(ax, 1.7, 3, 0.6, 2.5, "", ORANGE)
    ax.text(2.0, 2.6, "BM x BK", ha="center", fontsize=7)
    box(ax, 6, 0, 10, 8, "", "#f0f0f0")
    ax.text(11, -0.6, "C (M x N)", ha="center", fontsize=9)
    box(ax, 9, 3, 2.5, 2.5, "", BLUE, alpha=0.6)
    ax.text(10.25, 5.7, "block tile BM x BN", ha="center", fontsize=7)
    arrow(ax, 5.1, 4.25, 8.9, 4.25, color="#555555")
    arrow(ax, 10.25, 8.9, 10.25, 5.6, color="#555555")
    ax.text(11.8, 6.6, "step along K: load the orange strips\ninto shared memory, barrier, multiply-add,\n"
                       "barrier, next strip", fontsize=7)
    # zoom on the block tile: warps and a thread's register block
    x0, y0, s = 17.5, 1.0, 7.0
    box(ax, x0, y0, s, s, "", BLUE, alpha=0.35)
    ax.text(x0 + s / 2, y0 + s + 0.9, "the block tile, zoomed: 8 warps, 2 x 4", ha="center", fontsize=8)
    for r in range(2):
        for q in range(4):
            box(ax, x0 + q * s / 4, y0 + (1 - r) * s / 2, s / 4, s / 2, "", PURPLE if (r, q) == (0, 1) else "none",
                 alpha=0.5, lw=0.8)
    wx, wy, ww, wh = x0 + s / 4, y0 + s / 2, s / 4, s / 2
    ax.text(wx + ww / 2, wy + wh + 0.15, "one warp's tile (WM x WN)", ha="center", fontsize=7)
    for r in range(8):
        for q in range(4):
            color = ORANGE if (r, q) == (2, 1) else "none"
            box(ax, wx + q * ww / 8, wy + wh - (r + 1) * wh / 16, ww / 8, wh / 16, "", color, lw=0.3)
            box(ax, wx + ww / 2 + q * ww / 8, wy + wh - (r + 1) * wh / 16, ww / 8, wh / 16, "", color, lw=0.3)
            box(ax, wx + q * ww / 8, wy + wh / 2 - (r + 1) * wh / 16, ww / 8, wh / 16, "", color, lw=0.3)
            box(ax, wx + ww / 2 + q * ww / 8, wy + wh / 2 - (r + 1) * wh / 16, ww / 8, wh / 16, "", color, lw=0.3)
    ax.text(x0 + s + 0.2, wy + wh * 0.7, "orange: the 4 x 4 results of ONE lane,\nin 2 x 2 places of its warp's tile:\n"
                                         "its 8 x 8 accumulators live in registers.\nNeighbouring lanes read neighbouring\n"
                                         "16-byte words of shared memory:\nno bank conflicts", fontsize=7, va="top")
    save(fig, ax, path, (-0.5, 32), (-1.2, 14))


if __name__ == "__main__":
    reduction_strategies()
    scan_lookback()
    sgemm_tiling()
