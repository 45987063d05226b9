"""Draw the diagrams of module 07, FP64 GEMM emulated with INT8 products (the Ozaki scheme).

Run: python images/make_images_module07.py. Same style as make_images.py: matplotlib, text kept
as text, stable ids, no dates, so rerunning leaves the files unchanged. Each function writes one SVG:

- ozaki-slicing.svg       a float64 row scaled by its exponent and cut into signed 8-bit digits (07.1)
- ozaki-slice-pairs.svg   the slice pairs (t, u) grouped by diagonals d = t + u, with their weights (07.1)
- ozaki-three-ways.svg    unfused, partly fused and fully fused multiplication as dataflows (07.3-07.5)
- ozaki-fused-loop.svg    the fused kernel's loop nest and the order of its pairs (07.5)

The numbers in the first diagram are computed with kernel_lab.ozaki.slicing, the course's reference.
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: small, searchable files
matplotlib.rcParams["svg.hashsalt"] = "kernel-lab"  # stable ids: rerunning changes nothing
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "utilities"))
from kernel_lab.ozaki import slicing  # noqa: E402

SLICE_COLORS = ["#ffb703", "#8ecae6", "#90be6d", "#cdb4db", "#f4a261", "#a8dadc", "#f28482"]
GREY, RED, DARK = "#d9d9d9", "#c1121f", "#333333"
MONO = "DejaVu Sans Mono"


def _save(fig, path):
    # no creation date in the SVG, so that rerunning the script leaves the files unchanged
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def _cell(ax, x, y, text, color, *, w=1.0, h=0.6, fontsize=8, edge="black", lw=0.6, family=None, weight=None):
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=color, edgecolor=edge, lw=lw))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, family=family,
            weight=weight)


def _box(ax, x, y, w, h, color, text="", *, fontsize=8.5, ha="center", family=None, lw=0.8, ls="-",
         pad=0.12):
    ax.add_patch(patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                        facecolor=color, edgecolor="black", lw=lw, ls=ls))
    if text:
        tx = x + w / 2 if ha == "center" else x + pad
        ax.text(tx, y + h / 2, text, ha=ha, va="center", fontsize=fontsize, family=family)


def _arrow(ax, x0, y0, x1, y1, *, color="black", lw=1.0, text=None, fontsize=7.5):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", lw=lw, color=color))
    if text:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.08, text, ha="center", va="bottom", fontsize=fontsize,
                color=color)


# ---------------------------------------------------------------------------------------------
# 1. Slicing a row

def slicing_row(path=HERE / "ozaki-slicing.svg"):
    """One row of A, its exponent, the scaled integers X, and their signed base-256 digits (s = 3)."""
    s = 3
    p = slicing.scaled_bits(s)
    row = np.array([[2.3, -0.77, 0.0013, -3.99]])
    digits, e = slicing.split(row, s)
    e = int(e[0])
    big = np.rint(np.ldexp(row[0], p - e)).astype(np.int64)
    n = row.shape[1]
    fig, ax = plt.subplots(figsize=(13, 6.6))
    cw, x0 = 1.7, 0.0
    label = dict(ha="right", va="center", fontsize=9)

    # the row, scaled
    ys = [5.6, 4.5, 3.4]
    for j in range(n):
        _cell(ax, x0 + j * cw, ys[0], f"{row[0, j]:g}", "#eeeeee", w=cw - 0.1)
        _cell(ax, x0 + j * cw, ys[1], f"{np.ldexp(row[0, j], -e):.6g}", "#eeeeee", w=cw - 0.1)
        _cell(ax, x0 + j * cw, ys[2], f"{big[j]:,}", "#ffffff", w=cw - 0.1, family=MONO)
    ax.text(-0.2, ys[0] + 0.3, "a row of A (float64)  x", **label)
    ax.text(-0.2, ys[1] + 0.3, "x · 2^-e   (all in (-1, 1))", **label)
    ax.text(-0.2, ys[2] + 0.3, f"X = rint(x · 2^(P-e))\nP = 8s - 2 = {p}", **label)
    right = x0 + n * cw
    _arrow(ax, right + 0.15, ys[0] + 0.3, right + 0.15, ys[1] + 0.35)
    ax.text(right + 0.3, ys[0] - 0.2, f"one exponent per row: e = frexp(max |x|)[1] = {e}\n"
            f"(max |x| = {np.abs(row).max():g} < 2^{e})", fontsize=8.5, va="center")
    _arrow(ax, right + 0.15, ys[1] + 0.25, right + 0.15, ys[2] + 0.35)
    ax.text(right + 0.3, ys[1] - 0.2, f"fixed point: {p} bits below the row's exponent;\n"
            f"|X| <= 2^{p} = 64 · 256^{s - 1}", fontsize=8.5, va="center")

    # the digits: one int8 matrix (here a row) per slice
    y_top = 1.9
    for t in range(s):
        y = y_top - t * 0.75
        for j in range(n):
            _cell(ax, x0 + j * cw, y, str(int(digits[t, 0, j])), SLICE_COLORS[t], w=cw - 0.1, family=MONO,
                  fontsize=9)
        weight = f"256^{s - 1 - t}" if s - 1 - t > 1 else ("256" if s - 1 - t == 1 else "1")
        what = "top digit, in [-64, 64]" if t == 0 else "digit in [-128, 127]"
        ax.text(-0.2, y + 0.3, f"slice {t}: {what}  (x {weight})", **label)
    ax.text(x0, y_top + 0.85, f"{s} int8 slices, most significant first: X = d0 · 256^2 + d1 · 256 + d2",
            ha="left", fontsize=9, weight="bold")

    # the bits of X: P bits of number, two bits of room
    bx, by = right + 0.3, 3.25
    bits = 8 * s
    bwid = 0.19
    for b in range(bits):
        t = b // 8
        color = "#f5f5f5" if b < 2 else SLICE_COLORS[t]
        ax.add_patch(patches.Rectangle((bx + b * bwid, by), bwid, 0.3, facecolor=color, edgecolor="#666666",
                                       lw=0.4, hatch="///" if b < 2 else None))
    for t in range(s):
        ax.text(bx + (t * 8 + 4) * bwid, by - 0.15, f"slice {t}", ha="center", va="top", fontsize=7.5)
    ax.text(bx, by + 0.45, "2 bits of room: the sign, and the carries the signed digits push up", fontsize=7.5,
            color=RED)

    # the worked example: digits from the bottom, with a carry
    j = 0
    for jj in range(n):  # the first positive entry whose low byte is 128 or more: it makes a carry
        if big[jj] > 0 and (int(big[jj]) & 255) >= 128:
            j = jj
            break
    v = int(big[j])
    lines = [f"from the bottom, for X = {v:,}:"]
    for t in range(s - 1, 0, -1):
        low = v & 255
        d = ((v + 128) & 255) - 128
        carry = f"   (low byte {low} >= 128: digit {low} - 256, carry 1)" if low >= 128 else ""
        lines.append(f"  d{t} = ((X + 128) & 255) - 128 = {d:>4}{carry}")
        v = (v - d) >> 8
        lines.append(f"  X  = (X - d{t}) >> 8 = {v:,}")
    lines.append(f"  d0 = what is left = {v}   (|d0| <= 64: 2^{p} / 256^{s - 1})")
    ax.text(bx, 1.55, "\n".join(lines), fontsize=8, family=MONO, va="top")

    ax.set_xlim(-5.2, right + 6.3)
    ax.set_ylim(-0.1, 6.6)
    ax.axis("off")
    ax.set_title(f"Slicing a row into s = {s} signed 8-bit digits (the course uses 7: P = 54 bits)", fontsize=11)
    _save(fig, path)


# ---------------------------------------------------------------------------------------------
# 2. The triangle of slice pairs

def slice_pairs(path=HERE / "ozaki-slice-pairs.svg", s=7):
    """The s x s products A_t @ B_u; those with t + u < s kept, grouped by diagonal; the rest dropped."""
    fig, ax = plt.subplots(figsize=(12.5, 6.6))
    size = 0.8
    for t in range(s):
        for u in range(s):
            d = t + u
            x, y = u * size, (s - 1 - t) * size
            if d < s:
                _cell(ax, x, y, f"A{t}·B{u}", SLICE_COLORS[d % len(SLICE_COLORS)], w=size - 0.04, h=size - 0.04,
                      fontsize=7)
            else:
                _cell(ax, x, y, f"A{t}·B{u}", "#f3f3f3", w=size - 0.04, h=size - 0.04, fontsize=6.5, edge="#bbbbbb")
    # staircase between kept and dropped
    xs, ys = [], []
    for t in range(s):
        u_end = (s - t) * size - 0.02
        y_top, y_bot = (s - t) * size - 0.02, (s - 1 - t) * size - 0.02
        xs += [u_end, u_end]
        ys += [y_top, y_bot]
    ax.plot(xs, ys, color=RED, lw=1.6)
    for u in range(s):
        ax.text(u * size + size / 2, s * size + 0.1, f"u = {u}", ha="center", fontsize=8)
    for t in range(s):
        ax.text(-0.1, (s - 1 - t) * size + size / 2, f"t = {t}", ha="right", va="center", fontsize=8)
    ax.text(s * size / 2, s * size + 0.45, "slice u of B (0: most significant)", ha="center", fontsize=9)
    ax.text(-0.75, s * size / 2, "slice t of A", ha="center", va="center", rotation=90, fontsize=9)
    ax.text(s * size / 2, -0.15, "kept: t + u < s (coloured by diagonal); grey: dropped", ha="center", va="top",
            fontsize=8.5, color="#555555")

    # the legend of diagonals and weights
    lx = s * size + 0.9
    ax.text(lx, s * size + 0.35, "diagonal d = t + u: its products add up in one INT32 sum,\n"
            "worth 2^(ea + eb - 12 - 8d)", fontsize=9, va="bottom", weight="bold")
    for d in range(s):
        y = s * size - 0.55 - d * 0.62
        _cell(ax, lx, y, "", SLICE_COLORS[d % len(SLICE_COLORS)], w=0.35, h=0.4)
        ax.text(lx + 0.5, y + 0.2, f"d = {d}: {d + 1} product{'s' if d else ''},  weight 2^(ea + eb - {12 + 8 * d})",
                va="center", fontsize=8.5, family=MONO)
    y = s * size - 0.55 - s * 0.62
    _cell(ax, lx, y, "", "#f3f3f3", w=0.35, h=0.4, edge="#bbbbbb")
    kept, dropped = s * (s + 1) // 2, s * (s - 1) // 2
    ax.text(lx + 0.5, y + 0.2, f"d >= {s}: {dropped} products dropped, weight <= 2^(ea + eb - {12 + 8 * s}):\n"
            "together a few units of float64's last place (2^-53) of the largest products", va="center",
            fontsize=8.5, family=MONO, color="#777777")
    ax.text(lx, y - 0.75, f"{kept} INT8 products instead of {s * s}; the GPU adds the diagonals least\n"
            f"significant first (d = {s - 1}, {s - 2}, ..., 0), so small parts add up before they meet large ones.",
            fontsize=9, va="top")
    ax.set_xlim(-1.1, lx + 7.2)
    ax.set_ylim(y - 1.6, s * size + 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"s = {s} slices: which of the slice products A_t @ B_u the scheme computes", fontsize=11)
    _save(fig, path)


# ---------------------------------------------------------------------------------------------
# 3. Three ways to multiply the slices on the GPU

def three_ways(path=HERE / "ozaki-three-ways.svg", s=7):
    """Unfused, partly fused, fully fused: kernels, and what goes through global memory between them."""
    pairs = s * (s + 1) // 2
    fig, ax = plt.subplots(figsize=(13.5, 6.4))
    mem, kern, out = "#ffd6a5", "#bde0fe", "#caffbf"
    lanes = [
        ("unfused (07.3)", [
            ("kernel", f"INT8 GEMM per pair (t, u)\n{pairs} products, each its own\nINT32 accumulator"),
            ("memory", f"{pairs} INT32 matrices\n(M x N each)\n{pairs} · 4 · MN bytes\nwritten, then read"),
            ("kernel", "reconstruction kernel\nweight each product,\nsum by diagonal, least\n"
                       "significant first; alpha, beta"),
        ], f"intermediate traffic: {pairs} · 8 · MN bytes"),
        ("partly fused (07.4)", [
            ("kernel", f"INT8 GEMM per diagonal d\nits pairs stream through\none INT32 accumulator\n"
                       f"({s} sums)"),
            ("memory", f"{s} INT32 matrices\n(one per diagonal)\n{s} · 4 · MN bytes\nwritten, then read"),
            ("kernel", "reconstruction kernel\nweight each diagonal,\nleast significant first;\nalpha, beta"),
        ], f"intermediate traffic: {s} · 8 · MN bytes"),
        ("fully fused (07.5)", [
            ("kernel", "one kernel, one block per tile of C: for each diagonal, least significant first,\n"
                       "sum its pairs in the INT32 accumulator (registers), then convert it to FP64,\n"
                       "scale by 2^(ea_i + eb_j - 12 - 8d) and add it into the FP64 C tile\n"
                       "(alpha on every diagonal; beta with the first one only)"),
        ], f"no intermediate matrices: the block updates its own C tile {s} times (mostly L2 hits)"),
    ]
    y0 = 4.6
    for k, (title, stages, note) in enumerate(lanes):
        y = y0 - k * 2.05
        ax.text(-0.2, y + 0.75, title, ha="right", va="center", fontsize=10, weight="bold")
        _box(ax, 0.0, y + 0.15, 1.9, 1.2, mem, "A, B slices\nint8, in global\nmemory\n(+ exponents)", fontsize=8)
        x = 1.9
        if len(stages) == 1:
            _arrow(ax, x, y + 0.75, x + 0.45, y + 0.75)
            _box(ax, x + 0.45, y + 0.15, 9.4, 1.2, kern, stages[0][1], fontsize=8.3)
            x = x + 0.45 + 9.4
        else:
            for kind, text in stages:
                _arrow(ax, x, y + 0.75, x + 0.45, y + 0.75)
                w = 2.9 if kind == "kernel" else 2.55
                _box(ax, x + 0.45, y + 0.15, w, 1.2, kern if kind == "kernel" else mem, text, fontsize=8,
                     ls="-" if kind == "kernel" else "--")
                x += 0.45 + w
        _arrow(ax, x, y + 0.75, x + 0.45, y + 0.75)
        _box(ax, x + 0.45, y + 0.15, 1.3, 1.2, out, "C\nFP64", fontsize=9)
        ax.text(0.0, y - 0.05, note, fontsize=8.3, va="top", color=DARK, style="italic")
    # legend
    ly = y0 - 3 * 2.05 + 0.95
    for i, (color, text, ls) in enumerate([(kern, "a kernel launch", "-"), (mem, "global memory", "--"),
                                           (out, "the result", "-")]):
        _box(ax, 0.6 + i * 3.3, ly, 0.5, 0.35, color, ls=ls)
        ax.text(1.2 + i * 3.3, ly + 0.17, text, va="center", fontsize=8.5)
    ax.set_xlim(-2.6, 13.9)
    ax.set_ylim(ly - 0.3, y0 + 1.7)
    ax.axis("off")
    ax.set_title(f"Three ways to multiply the slices on the GPU (s = {s}: {pairs} INT8 products of M x K by K x N)",
                 fontsize=11)
    _save(fig, path)


# ---------------------------------------------------------------------------------------------
# 4. The fused kernel's loop nest

def fused_loop(path=HERE / "ozaki-fused-loop.svg", s_order=4):
    """Nested boxes for the fused kernel, and the order in which one block visits pairs and epilogues."""
    fig, ax = plt.subplots(figsize=(13, 8.2))
    lv = ["#f1faee", "#e3f2fd", "#fff3cd", "#fde2e4"]
    _box(ax, 0.0, 1.6, 12.0, 6.3, lv[0], lw=1.0)
    ax.text(0.2, 7.6, "one block per 128 x 128 tile of C   (grid: ceil(M/128) x ceil(N/128))", fontsize=10,
            weight="bold", va="center")
    ax.text(0.3, 7.1, "load this tile's row exponents ea[i] and column exponents eb[j] into shared memory;\n"
            "get the pipeline's tile for the first pair: A slice 0, B slice s-1", fontsize=8.8, va="center",
            family=MONO)
    _box(ax, 0.3, 1.8, 11.4, 4.8, lv[1], lw=1.0)
    ax.text(0.5, 6.3, "for d = s-1 down to 0:        least significant diagonal first", fontsize=9.5,
            weight="bold", va="center", family=MONO)
    ax.text(0.8, 5.85, "accumulator.clear()          INT32, in registers", fontsize=8.8, va="center", family=MONO)
    _box(ax, 0.7, 4.0, 10.7, 1.5, lv[2], lw=1.0)
    ax.text(0.9, 5.2, "for term = 0 .. d:            the pair (t, u) = (term, d - term)", fontsize=9.2,
            weight="bold", va="center", family=MONO)
    ax.text(1.2, 4.62, "tile_pipeline.execute(acc)   stream A_t (tile rows) and B_u (tile columns) along K\n"
            "                             through shared memory: TMA loads, INT8 tensor-core MMAs\n"
            "reset_tile(next pair)        (term+1, d-term-1), or (0, d-1) once the diagonal is done",
            fontsize=8.4, va="center", family=MONO)
    _box(ax, 0.7, 2.0, 10.7, 1.8, lv[3], lw=1.0)
    ax.text(0.9, 3.5, "epilogue of diagonal d (every thread, its own elements (i, j) of the tile):", fontsize=9.2,
            weight="bold", va="center", family=MONO)
    ax.text(1.2, 2.75, "c = C[i, j]                                       (not read when beta = 0 and d = s-1)\n"
            "v = ldexp(float64(acc[i, j]), ea[i] + eb[j] - 12 - 8d)   exact: acc < 2^31\n"
            "C[i, j] = alpha * v + beta_d * c     beta_d = beta if d = s-1 else 1: beta applied once",
            fontsize=8.4, va="center", family=MONO)

    # the order for a small s
    s = s_order
    x, y, w = 0.0, 0.55, 0.62
    ax.text(0.0, 1.25, f"the order one block follows, for s = {s}:", fontsize=9, va="center")
    for d in range(s - 1, -1, -1):
        for term in range(d + 1):
            _cell(ax, x, y, f"{term},{d - term}", SLICE_COLORS[d], w=w - 0.05, h=0.45, fontsize=7.5)
            x += w
        _cell(ax, x, y, f"ep {d}", lv[3], w=w + 0.05, h=0.45, fontsize=7.5, edge=RED)
        x += w + 0.2
    ax.text(0.0, y - 0.3, "t,u: one pass over K for that pair of slices;  ep d: the epilogue of diagonal d, "
            "which adds it into C in FP64", fontsize=8.3, va="center", color=DARK)
    ax.set_xlim(-0.2, 12.3)
    ax.set_ylim(0.0, 8.1)
    ax.axis("off")
    ax.set_title("The fully fused kernel: loops, and where INT32 becomes FP64", fontsize=11)
    _save(fig, path)


if __name__ == "__main__":
    slicing_row()
    slice_pairs()
    three_ways()
    fused_loop()
