"""Draw the diagrams of module 03 (fusion).

Run: python images/make_images_module03.py. Each function writes one SVG next to this file.
"""

import matplotlib.pyplot as plt
import matplotlib.patches as patches
from drawing import BLUE, GREEN, GREY, HERE, ORANGE, PURPLE, RED, WHITE, arrow, box, save


def fusion_traffic(path=HERE / "fusion-traffic.svg"):
    """GEMM + bias + ReLU: three kernels move C through device memory five times, one kernel once."""
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.text(0, 7.3, "unfused: three kernels", fontsize=10, weight="bold")
    ax.text(0, 2.9, "fused: one kernel, the epilogue in registers", fontsize=10, weight="bold")
    # top row: kernels and the memory band
    box(ax, 0, 4.2, 20.5, 0.9, "device memory (HBM)", GREY, fontsize=8)
    kernels = [(0.5, "GEMM\nA @ B", BLUE), (7.5, "+ bias[col]", ORANGE), (14.0, "max(v, 0)", GREEN)]
    for x, label, color in kernels:
        box(ax, x, 5.7, 4.5, 1.1, label, color, fontsize=8)
    arrow(ax, 1.2, 5.1, 1.2, 5.7)
    ax.text(1.4, 5.35, "read A, B", fontsize=7)
    arrow(ax, 4.3, 5.7, 4.3, 5.1, color="#c0392b")
    ax.text(3.0, 5.35, "write C", fontsize=7, color="#c0392b")
    for x in (7.5, 14.0):
        arrow(ax, x + 0.6, 5.1, x + 0.6, 5.7, color="#c0392b")
        ax.text(x + 0.8, 5.35, "read C", fontsize=7, color="#c0392b")
        arrow(ax, x + 3.8, 5.7, x + 3.8, 5.1, color="#c0392b")
        ax.text(x + 2.5, 5.35, "write C", fontsize=7, color="#c0392b")
    ax.text(19.0, 6.2, "C: 5 passes\n(20 MN bytes)\n3 launches", fontsize=8, va="center")
    # bottom row
    box(ax, 0, 0.0, 20.5, 0.9, "device memory (HBM)", GREY, fontsize=8)
    box(ax, 0.5, 1.5, 11.0, 1.1, "", BLUE)
    ax.text(3.2, 2.05, "GEMM: K loop", fontsize=8, ha="center", va="center")
    box(ax, 6.5, 1.7, 4.7, 0.7, "epilogue: max(v + bias[col], 0)", ORANGE, fontsize=7)
    arrow(ax, 1.2, 0.9, 1.2, 1.5)
    ax.text(1.4, 1.15, "read A, B, bias", fontsize=7)
    arrow(ax, 10.6, 1.5, 10.6, 0.9, color="#c0392b")
    ax.text(8.9, 1.15, "write C once", fontsize=7, color="#c0392b")
    ax.text(13.0, 2.05, "C: 1 pass (4 MN bytes), 1 launch; saved: 16 MN bytes,\n"
            "what matters while 2MNK flops do not hide it (small K)", fontsize=8, va="center")
    save(fig, ax, path, (-0.3, 21.5), (-0.3, 7.8))


def conv_halo_tile(path=HERE / "conv-halo-tile.svg"):
    """A block's T x T output tile, the (T+2) x (T+2) input tile with its halo, the zero padding."""
    fig, ax = plt.subplots(figsize=(10, 4.6))
    T = 4
    # input image corner with padding
    ox, oy = 0.0, 0.0
    for r in range(T + 3):
        for q in range(T + 3):
            inside = r >= 1 and q >= 1
            color = "white" if inside else "#eeeeee"
            box(ax, ox + q, oy + (T + 2 - r), 1, 1, "" if inside else "0", color, fontsize=7)
    ax.add_patch(patches.Rectangle((ox, oy + 1), T + 2, T + 2, fill=False, lw=2.0, edgecolor="#e76f51"))
    ax.add_patch(patches.Rectangle((ox + 1, oy + 2), T, T, fill=False, lw=2.0, edgecolor="#264653"))
    ax.text(ox + (T + 3) / 2, T + 3.6, "input channel c, top-left corner of the image", ha="center", fontsize=9)
    ax.text(ox + (T + 3) / 2, -0.6, "grey: padding (x = 0 outside the image)", ha="center", fontsize=8)
    # legend
    lx = T + 4.5
    ax.add_patch(patches.Rectangle((lx, 5.2), 0.8, 0.5, fill=False, lw=2.0, edgecolor="#264653"))
    ax.text(lx + 1.1, 5.45, f"the block's {T} x {T} output pixels: thread (ty, tx) computes one", va="center",
            fontsize=8)
    ax.add_patch(patches.Rectangle((lx, 4.2), 0.8, 0.5, fill=False, lw=2.0, edgecolor="#e76f51"))
    ax.text(lx + 1.1, 4.45, f"the ({T}+2) x ({T}+2) input tile they read: one pixel of halo on each side",
            va="center", fontsize=8)
    ax.text(lx, 3.2, "tile[0, 0] holds input pixel (oy0 - 1, ox0 - 1):", fontsize=8)
    ax.text(lx, 2.6, "thread (ty, tx) reads tile[ty + i, tx + j], i, j in 0..2", fontsize=8, family="monospace")
    ax.text(lx, 1.8, "per input channel: stage the tile, barrier, 9 multiply-adds, barrier", fontsize=8)
    ax.text(lx, 1.2, f"{(T + 2) ** 2} loads serve {9 * T * T} reads; L1 may give the same reuse for free", fontsize=8)
    # one window highlighted
    box(ax, ox + 1, oy + (T + 2 - 3), 3, 3, "", BLUE, alpha=0.45)
    ax.text(ox + 2.5, oy + (T + 2 - 3) + 1.5, "window of\noutput (0, 0)", ha="center", va="center", fontsize=7)
    save(fig, ax, path, (-0.5, 24), (-1.0, T + 4.2))


def layernorm_warp_vs_block(path=HERE / "layernorm-warp-vs-block.svg"):
    """LayerNorm rows: one warp per row (lanes hold N/32 values each) or one block per row."""
    fig, ax = plt.subplots(figsize=(11, 3.8))
    ax.text(0, 6.6, "one warp per row (short rows)", fontsize=10, weight="bold")
    for r in range(3):
        y = 5.2 - r * 1.1
        for k in range(4):
            box(ax, 2 * k, y, 2, 0.8, "lanes 0-31" if k < 3 else "...", BLUE, fontsize=6)
        ax.text(8.3, y + 0.4, f"row {r}: warp {r}", fontsize=8, va="center")
    ax.text(0, 1.4, "lane l holds columns l, l + 32, ... in registers;\nWelford per lane, then 5 shuffle steps;"
            "\nno barrier; many rows per block", fontsize=8)
    ax.text(13, 6.6, "one block per row (long rows)", fontsize=10, weight="bold")
    box(ax, 13, 4.8, 11, 0.9, "", ORANGE)
    for wv in range(4):
        box(ax, 13 + wv * 2.75, 4.8, 2.75, 0.9, f"warp {wv}" if wv < 3 else "...", ORANGE, fontsize=7)
    arrow(ax, 18.5, 4.8, 18.5, 3.9)
    box(ax, 15.5, 3.1, 6, 0.8, "shared: each warp's (n, mean, M2)", PURPLE, fontsize=7)
    arrow(ax, 18.5, 3.1, 18.5, 2.4)
    box(ax, 16.0, 1.6, 5, 0.8, "warp 0 combines: mean, rstd", GREEN, fontsize=7)
    ax.text(13, 0.6, "row in registers across the block; two barriers per row", fontsize=8)
    save(fig, ax, path, (-0.3, 25), (0.3, 7.0))


def epilogue_factory(path=HERE / "epilogue-factory.svg"):
    """gemm_with(epilogue): one GEMM body, one compiled kernel per epilogue, cached."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    eps = ["bias + ReLU", "bias + sigmoid", "bias + GELU", "alpha AB + beta C + gamma bias"]
    for i, e in enumerate(eps):
        box(ax, 0, 4.5 - i * 1.2, 5.2, 0.9, f"f(v, row, col, aux):\n{e}", ORANGE, fontsize=7)
        arrow(ax, 5.2, 4.95 - i * 1.2, 7.5, 2.9)
    box(ax, 7.5, 2.2, 5.5, 1.4, "gemm_with(f)\nwarp-tiled GEMM body\n+ f inlined before the store", BLUE, fontsize=8)
    arrow(ax, 13.0, 2.9, 15.0, 2.9)
    box(ax, 15.0, 2.2, 4.5, 1.4, "compile once\n(seconds on a GPU)", RED, fontsize=8)
    arrow(ax, 19.5, 2.9, 21.0, 2.9)
    box(ax, 21.0, 2.2, 4.5, 1.4, "cache: f -> kernel\nnext call: no compile", GREEN, fontsize=8)
    ax.text(7.5, 0.7, "row softmax is not element-wise: its max and sum span the whole row,\n"
            "so it needs one block per row (or the online softmax of module 04)", fontsize=8)
    save(fig, ax, path, (-0.3, 26), (0.2, 5.8))


def conv_implicit_gemm(path=HERE / "conv-implicit-gemm.svg"):
    """03.2's implicit GEMM: Y_b = W' X_b, X_b = im2col(x[b]) gathered on the fly, one K-tile =
    one window offset (di, dj) and BK channels; the thread's column is one output pixel."""
    fig, ax = plt.subplots(figsize=(13, 5.2))
    # the image x[b]: channels stacked, a pixel p = (h, w) and its window offset (di, dj) = (-1, +1)
    cell, H, W = 0.42, 6, 7
    x0, y0 = 0.3, 0.9
    for c in range(3)[::-1]:
        dx, dy = 0.35 * c, 0.35 * c
        for h in range(H):
            for w in range(W):
                box(ax, x0 + dx + w * cell, y0 + dy + (H - 1 - h) * cell, cell, cell, "", WHITE if c else GREY,
                    lw=0.25)
    ph, pw, di, dj = 2, 3, -1, 1
    for h in range(ph - 1, ph + 2):
        for w in range(pw - 1, pw + 2):
            box(ax, x0 + w * cell, y0 + (H - 1 - h) * cell, cell, cell, "", ORANGE, lw=0.4, alpha=0.45)
    box(ax, x0 + pw * cell, y0 + (H - 1 - ph) * cell, cell, cell, "p", ORANGE, fontsize=7, lw=0.8)
    box(ax, x0 + (pw + dj) * cell, y0 + (H - 1 - (ph + di)) * cell, cell, cell, "", BLUE, lw=1.0)
    ax.text(x0 + W * cell / 2 + 0.3, y0 + H * cell + 1.0, "x[b]: C_in planes of H x W (NCHW)", ha="center", fontsize=8.5)
    ax.text(x0 + W * cell / 2, y0 - 0.35, "output pixel p = (h, w); window offset (di, dj) = (-1, +1)\n"
            "reads x[b, c, h + di, w + dj] in every channel c (0 outside the image)", ha="center", va="top",
            fontsize=7.5)
    # the GEMM: Y_b (C_out x HW) = W' (C_out x 9 C_pad) @ X_b (9 C_pad x HW)
    gx, gy = 5.6, 0.9
    box(ax, gx, gy, 2.2, 2.0, "W'\nC_out x 9 C_pad\n(reordered once:\nK = (i, j, c))", GREEN, fontsize=7.5)
    ax.text(gx + 2.45, gy + 1.0, "@", fontsize=14, va="center")
    bx = gx + 2.9
    box(ax, bx, gy - 0.4, 3.4, 2.8, "", WHITE)
    for k in range(9):
        box(ax, bx, gy - 0.4 + 2.8 - (k + 1) * 2.8 / 9, 3.4, 2.8 / 9, f"(i, j) = ({k // 3}, {k % 3})" if k in (0, 1, 2, 8) else "",
            BLUE if k == 2 else WHITE, fontsize=6, lw=0.3, alpha=0.55 if k == 2 else 1.0)
    box(ax, bx + 2.2, gy - 0.4, 0.22, 2.8, "", ORANGE, lw=0.5, alpha=0.6)
    ax.text(bx + 1.7, gy + 2.6, "X_b = im2col(x[b]): 9 C_pad x HW, never stored", ha="center", fontsize=7.5)
    ax.text(bx + 2.31, gy - 0.55, "column p", ha="center", va="top", fontsize=7)
    ax.text(bx + 1.7, gy - 1.0, "blue: the C_pad rows of window offset (i, j) = (di + 1, dj + 1) = (0, 2),\n"
            "loaded BK channels at a time (one K-tile); orange: output pixel p's column",
            ha="center", va="top", fontsize=7)
    ax.text(bx + 3.75, gy + 1.0, "=", fontsize=14, va="center")
    box(ax, bx + 4.3, gy, 2.6, 2.0, "Y_b = y[b]\nC_out x HW\n(row o: plane o)", GREY, fontsize=7.5)
    box(ax, bx + 4.3 + 1.7, gy, 0.22, 2.0, "", ORANGE, lw=0.5, alpha=0.6)
    arrow(ax, x0 + (pw + dj) * cell + cell, y0 + (H - 1 - (ph + di)) * cell + cell / 2, bx - 0.05,
          gy - 0.4 + 2.8 - 2.5 * 2.8 / 9, color="#1d6fa5", lw=1.0)
    ax.text(gx + 4.5, gy + 3.35, "module 02's tiled GEMM; only the B loader changes: it gathers its tile from x",
            ha="center", fontsize=8.5)
    save(fig, ax, path, (0, 16.2), (-1.0, 4.7))


if __name__ == "__main__":
    fusion_traffic()
    conv_halo_tile()
    conv_implicit_gemm()
    layernorm_warp_vs_block()
    epilogue_factory()
