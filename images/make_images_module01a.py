"""Draw the diagrams of module 01, notebooks 01-03 (run: python images/make_images_module01a.py).

Same style as make_images.py: matplotlib, text kept as text, stable ids, one SVG per function.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: small, searchable files
matplotlib.rcParams["svg.hashsalt"] = "kernel-lab"  # stable ids: rerunning changes nothing
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
COLORS = ["#8ecae6", "#ffb703", "#90be6d", "#f28482", "#cdb4db", "#f4a261"]
RED = "#c1121f"


def _save(fig, path):
    # no creation date in the SVG, so that rerunning the script leaves the files unchanged
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def _cell(ax, x, y, color, text="", w=0.92, h=0.92, alpha=1.0, fontsize=7, lw=0.0, edge="black"):
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=color, alpha=alpha, lw=lw, edgecolor=edge))
    if text != "":
        ax.text(x + w / 2, y + h / 2, str(text), ha="center", va="center", fontsize=fontsize)


def grid_2d(path=HERE / "grid-2d-rows-cols.svg"):
    """A 2D grid of 8 x 4 blocks covering an 11 x 19 matrix: x runs along the columns, y down the
    rows; the blocks on the right and bottom edges stick out and their extra threads must not write."""
    rows, cols, bx, by = 11, 19, 8, 4
    gx, gy = -(-cols // bx), -(-rows // by)
    fig, ax = plt.subplots(figsize=(10, 5.6))
    for r in range(gy * by):
        for c in range(gx * bx):
            b = (r // by) * gx + c // bx
            inside = r < rows and c < cols
            _cell(ax, c, -r, COLORS[b % len(COLORS)], alpha=1 if inside else 0.22)
            if not inside:
                ax.text(c + 0.46, -r + 0.46, "x", ha="center", va="center", fontsize=8, color=RED)
    for j in range(gy):
        for i in range(gx):
            ax.add_patch(patches.Rectangle((i * bx - 0.04, -(j + 1) * by + 0.96), bx, by, fill=False, lw=1.6))
            ax.text(i * bx + bx / 2, -j * by + 1.25 if j == 0 else -j * by + 0.75,
                    f"block ({i}, {j})" if j == 0 else "", ha="center", fontsize=8)
    # one thread, spelled out
    r, c = 6, 10
    ax.add_patch(patches.Rectangle((c, -r), 0.92, 0.92, fill=False, lw=2.2, edgecolor=RED))
    ax.annotate("blockIdx = (1, 1), threadIdx = (2, 2)\ncol = 1*8 + 2 = 10,  row = 1*4 + 2 = 6\n"
                "col, row = cuda.grid(2);  out[row, col]", xy=(c + 0.9, -r + 0.5), xytext=(gx * bx + 1.0, -5.0),
                fontsize=9, arrowprops=dict(arrowstyle="->", color=RED), color=RED, va="center")
    # one warp: 8 consecutive threadIdx.x of one row (a real warp is 32 threads)
    ax.add_patch(patches.Rectangle((0, -9), 8 * 0.98, 0.92, fill=False, lw=2.2, edgecolor="#023047"))
    ax.annotate("consecutive threadIdx.x = neighbouring columns:\none row segment, adjacent in memory",
                xy=(8, -8.5), xytext=(gx * bx + 1.0, -8.6), fontsize=9, color="#023047", va="center",
                arrowprops=dict(arrowstyle="->", color="#023047"))
    ax.annotate("", xy=(gx * bx + 0.2, 1.6), xytext=(0, 1.6), arrowprops=dict(arrowstyle="->", lw=1.4))
    ax.text(gx * bx / 2, 2.0, "x: columns (threadIdx.x, blockIdx.x)  — the first number of the launch",
            ha="center", fontsize=9)
    ax.annotate("", xy=(-0.8, -gy * by + 0.9), xytext=(-0.8, 0.95), arrowprops=dict(arrowstyle="->", lw=1.4))
    ax.text(-1.3, -gy * by / 2 + 1, "y: rows (threadIdx.y, blockIdx.y)", rotation=90, ha="center",
            va="center", fontsize=9)
    ax.text(0, -gy * by - 0.4, f"matrix of {rows} rows x {cols} columns; blocks of {bx} x {by} threads "
            f"(x, y); grid of {gx} x {gy} blocks = kernel[({gx}, {gy}), ({bx}, {by})]\n"
            "faded cells: threads past the edge, stopped by  if row < rows and col < cols",
            fontsize=9, va="top")
    ax.set_xlim(-2, gx * bx + 14)
    ax.set_ylim(-gy * by - 1.6, 2.6)
    ax.set_aspect("equal")
    ax.axis("off")
    _save(fig, path)


def grid_stride(path=HERE / "grid-stride-loop.svg"):
    """A grid of 2 blocks x 4 threads sweeps an array of 29 elements: each thread starts at its
    global index and steps by the size of the whole grid (8)."""
    n, blocks, threads = 29, 2, 4
    total = blocks * threads
    fig, ax = plt.subplots(figsize=(11, 2.8))
    for i in range(n):
        t = i % total
        _cell(ax, i, 0, COLORS[t % len(COLORS)] if t < 6 else ["#adb5bd", "#e9c46a"][t - 6], str(i))
    for t in range(total):
        color = COLORS[t % len(COLORS)] if t < 6 else ["#adb5bd", "#e9c46a"][t - 6]
        _cell(ax, t * 3.5 + 0.5, 2.0, color, f"b{t // threads} t{t % threads}", w=2.6, h=0.8, fontsize=8)
    for i in range(0, n):
        t = i % total
        if t == 1:
            ax.annotate("", xy=(i + 0.46, 0.95), xytext=(t * 3.5 + 1.8, 2.0),
                        arrowprops=dict(arrowstyle="->", lw=0.9, color="black"))
    ax.text(-0.4, 2.4, "threads", ha="right", va="center", fontsize=9)
    ax.text(-0.4, 0.45, "elements", ha="right", va="center", fontsize=9)
    ax.text(n / 2, -0.55, "thread (block 0, thread 1) does elements 1, 9, 17, 25:  "
            "for i in range(cuda.grid(1), n, cuda.gridsize(1))   (gridsize = 2 blocks x 4 threads = 8)",
            ha="center", fontsize=9)
    ax.set_xlim(-3, n + 0.5)
    ax.set_ylim(-1.0, 3.1)
    ax.axis("off")
    _save(fig, path)


def memory_hierarchy(path=HERE / "memory-hierarchy.svg"):
    """Where data lives on a GPU: per thread, per block (SM), per GPU; fast and small at the top."""
    fig, ax = plt.subplots(figsize=(10, 5.4))

    def box(x, y, w, h, color, title, body, fs=9):
        ax.add_patch(patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                            facecolor=color, edgecolor="black", lw=0.8))
        ax.text(x + w / 2, y + h - 0.18, title, ha="center", va="top", fontsize=fs, weight="bold")
        if body:
            ax.text(x + w / 2, y + h - 0.55, body, ha="center", va="top", fontsize=fs - 1.5)

    for k, x0 in enumerate([0.0, 5.3]):
        ax.add_patch(patches.Rectangle((x0 - 0.15, 2.35), 4.9, 3.35, fill=False, lw=1.2, ls="--"))
        ax.text(x0 + 2.3, 5.5, f"SM {k}" if k == 0 else "SM 1 ... (one of tens to ~150)", ha="center",
                fontsize=9, weight="bold")
        box(x0, 3.9, 2.15, 1.35, "#caf0f8", "registers", "per thread, ~1 cycle\n64K x 4 B per SM\n"
            "spills and indexed\ncuda.local.array: local memory")
        box(x0 + 2.45, 3.9, 2.15, 1.35, "#bde0fe", "shared memory", "per block, ~30 cycles\n"
            "cuda.shared.array\n32 banks x 4 bytes")
        box(x0, 2.5, 4.6, 1.2, "#a2d2ff", "L1 cache + constant cache",
            "L1: same SRAM as shared memory, ~256 KB per SM;\nconstant: cuda.const.array_like, "
            "broadcast to a warp")
    box(0.0, 1.05, 9.9, 1.05, "#ffd6a5", "L2 cache: one for the whole GPU",
        "tens of MB (kl.gpu_info().l2_bytes); ~2-3x the bandwidth of DRAM; all SMs meet here")
    box(0.0, -0.45, 9.9, 1.2, "#ffadad", "device memory (HBM): global memory, local memory",
        "tens of GB; the copy roofline (~3-5 TB/s on a data-centre GPU); ~500+ cycles away;\n"
        "moved in 32-byte sectors: a warp's loads are served by as few sectors as cover them")
    ax.annotate("", xy=(10.4, 5.2), xytext=(10.4, -0.3), arrowprops=dict(arrowstyle="<->", lw=1.2))
    ax.text(10.55, 2.45, "faster, smaller, more private  (up)\nslower, larger, shared by all  (down)",
            fontsize=8.5, va="center", rotation=90, ha="left")
    ax.set_xlim(-0.3, 11.3)
    ax.set_ylim(-0.6, 5.9)
    ax.axis("off")
    _save(fig, path)


def coalescing(path=HERE / "coalescing-sectors.svg"):
    """One warp (32 threads) loading 32 floats, against memory cut into 32-byte sectors (8 floats):
    the sectors the load needs, and the fraction of their bytes the threads asked for."""
    threads, per_sector, n_mem = 32, 8, 264
    cases = [("stride 1: 4 sectors, every byte used", 1, 0),
             ("offset 1: 5 sectors (one extra), 80% of the bytes used", 1, 1),
             ("stride 2: 8 sectors, half of each used", 2, 0),
             ("stride 8 (or more): one sector per thread, 32 sectors, 1/8 of the bytes used", 8, 0)]
    fig, ax = plt.subplots(figsize=(12, 6.4))
    for k, (title, stride, offset) in enumerate(cases):
        y0 = -k * 3.0
        ax.text(0, y0 + 1.1, title, fontsize=10, weight="bold")
        addrs = [offset + t * stride for t in range(threads)]
        touched = {a // per_sector for a in addrs}
        for s_ in range(n_mem // per_sector):
            ax.add_patch(patches.Rectangle((s_ * per_sector, y0 - 1.3), per_sector, 0.7,
                                           facecolor="#ffd6a5" if s_ in touched else "white",
                                           edgecolor="black", lw=0.6))
        for a in addrs:
            ax.add_patch(patches.Rectangle((a + 0.1, y0 - 1.25), 0.8, 0.6, facecolor="#e63946", lw=0))
        for t, a in enumerate(addrs):
            x_t = t * 8 + 4
            ax.add_patch(patches.Rectangle((x_t - 2.5, y0 + 0.1), 5, 0.5, facecolor="#8ecae6", lw=0))
            ax.plot([x_t, a + 0.5], [y0 + 0.1, y0 - 0.6], color="#777777", lw=0.4)
        n_sec = len(touched)
        ax.text(n_mem + 4, y0 - 0.9, f"{n_sec} sectors\n{threads / (n_sec * per_sector):.1%} of the bytes used",
                fontsize=9, va="center")
    ax.text(0, -10.9, "top row of each case: the 32 threads of a warp (blue); below: memory in 32-byte sectors "
            "of 8 floats (boxes);\nred: the float each thread asked for; orange: sectors that must be moved "
            "to serve the warp", fontsize=9, va="top")
    ax.set_xlim(-2, n_mem + 40)
    ax.set_ylim(-11.8, 1.8)
    ax.axis("off")
    _save(fig, path)


def transpose_access(path=HERE / "transpose-naive-vs-tiled.svg"):
    """Naive transpose: reads along rows (coalesced) but writes down columns (one sector per
    element). Tiled: a block reads a tile row by row into shared memory, then writes the
    transposed tile row by row; the column walk happens in shared memory."""
    n = 8
    fig, axes = plt.subplots(2, 1, figsize=(9, 9.5))
    for ax, tiled in zip(axes, [False, True]):
        # input at left, output at right (and shared tile in the middle for the tiled version)
        xs = {"in": 0, "tile": n + 1.5, "out": 2 * n + 3} if tiled else {"in": 0, "out": n + 3}
        for name, x0 in xs.items():
            for r in range(n):
                for c in range(n):
                    if name == "in":
                        color = "#8ecae6" if r == 2 else "#f1f1f1"
                    elif name == "out":
                        color = "#ffb703" if (c == 2 if not tiled else r == 2) else "#f1f1f1"
                    else:
                        color = "#cdb4db" if c == 2 else "#f1f1f1"
                    _cell(ax, x0 + c, -r, color, w=0.9, h=0.9)
            label = {"in": "a (rows x cols)", "out": "out = a.T", "tile": "shared tile"}[name]
            ax.text(x0 + n / 2, 1.2, label, ha="center", fontsize=10, weight="bold")
        if not tiled:
            ax.annotate("", xy=(xs["out"] + 2.45, -0.2), xytext=(n - 0.2, -1.6),
                        arrowprops=dict(arrowstyle="->", lw=1.2, connectionstyle="arc3,rad=-0.2"))
            ax.text(n / 2, -n - 0.3, "read row 2: one warp,\n32 neighbours = 4 sectors",
                    ha="center", va="top", fontsize=9)
            ax.text(xs["out"] + n / 2, -n - 0.3, "write column 2: one warp,\n32 rows = 32 sectors",
                    ha="center", va="top", fontsize=9, color=RED)
            ax.set_title("naive: coalesced reads, strided writes", fontsize=11)
        else:
            ax.annotate("", xy=(xs["tile"] - 0.1, -1.6), xytext=(n - 0.2, -1.6),
                        arrowprops=dict(arrowstyle="->", lw=1.2))
            ax.annotate("", xy=(xs["out"] - 0.1, -1.6), xytext=(xs["tile"] + n - 0.2, -1.6),
                        arrowprops=dict(arrowstyle="->", lw=1.2))
            ax.text(n / 2, -n - 0.3, "1. read rows of a\n(coalesced)", ha="center", va="top", fontsize=9)
            ax.text(xs["tile"] + n / 2, -n - 0.3, "2. cuda.syncthreads()\n3. read a column of the tile\n"
                    "(in shared memory: fast,\nbut mind the banks)", ha="center", va="top", fontsize=9)
            ax.text(xs["out"] + n / 2, -n - 0.3, "4. write it as a row of out\n(coalesced)", ha="center",
                    va="top", fontsize=9)
            ax.set_title("tiled: the column walk moves into shared memory", fontsize=11)
        ax.set_xlim(-0.5, max(xs.values()) + n + 0.5)
        ax.set_ylim(-n - 3.2, 2.0)
        ax.set_aspect("equal")
        ax.axis("off")
    _save(fig, path)


def shared_banks(path=HERE / "shared-memory-banks.svg"):
    """A 32 x 32 float32 tile in shared memory, each element coloured by its bank
    ((row * row_length + col) mod 32). A warp reading one column of the tile: without padding all 32
    elements sit in one bank (32-way conflict, 32 turns); with one float of padding per row (33
    columns) they sit in 32 different banks (one turn); an XOR swizzle does the same without padding."""
    import numpy as np

    n = 32
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.9))
    layouts = [("tile[32][32]: column 0 = bank 0 only\n32-way conflict: 32 turns", 32, False),
               ("tile[32][33] (one float of padding)\ncolumn 0 spans all 32 banks: 1 turn", 33, False),
               ("tile[32][32], swizzled: element (r, c)\nstored at column c XOR r: 1 turn", 32, True)]
    for ax, (title, width, swizzle) in zip(axes, layouts):
        rows, cols = np.mgrid[0:n, 0:width]
        banks = ((rows * width + cols) % 32).astype(float)
        banks[:, n:] = np.nan  # the padding column: drawn white
        # one raster image per panel (small files), cell borders drawn as lines on top
        ax.imshow(banks, cmap="hsv", vmin=0, vmax=32, alpha=0.55, interpolation="nearest",
                  extent=(0, width, -n + 1, 1))
        for k in range(width + 1):
            ax.plot([k, k], [-n + 1, 1], color="white", lw=0.6)
        for k in range(n + 1):
            ax.plot([0, width], [1 - k, 1 - k], color="white", lw=0.6)
        if width > n:
            ax.add_patch(patches.Rectangle((n, -n + 1), 1, n, fill=False, lw=0.6, edgecolor="#999999"))
        # the warp's column read: logical column 0, element (r, 0)
        for r in range(n):
            c = (0 ^ r) if swizzle else 0
            ax.add_patch(patches.Rectangle((c, -r), 1, 1, fill=False, lw=1.4, edgecolor="black"))
        hit = {(r * width + ((0 ^ r) if swizzle else 0)) % 32 for r in range(n)}
        ax.set_title(title, fontsize=10.5)
        ax.text(n / 2, -n - 0.6, f"banks hit by the warp: {len(hit)}", ha="center", va="top", fontsize=10)
        ax.set_xlim(-0.5, 33.5)
        ax.set_ylim(-n - 2.5, 1.5)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.suptitle("Shared memory is 32 banks, each 4 bytes wide; colour = bank of each float; black "
                 "frames: the 32 floats one warp reads", fontsize=11)
    _save(fig, path)


if __name__ == "__main__":
    grid_2d()
    grid_stride()
    memory_hierarchy()
    coalescing()
    transpose_access()
    shared_banks()
