"""Draw the diagrams of module 04 (attention).

Run: python images/make_images_module04.py. Each function writes one SVG next to this file.
The traffic plot is computed from ``kernel_lab.attention.reference``'s model (no GPU needed).
"""

import sys

import matplotlib.pyplot as plt
from drawing import BLUE, GREEN, GREY, HERE, ORANGE, PURPLE, RED, arrow, box, save
sys.path.insert(0, str(HERE.parent / "utilities"))


def naive_attention(path=HERE / "attention-naive.svg"):
    """The three kernels of naive attention and what each moves through memory."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    box(ax, 0, 3, 1, 3, "Q\nN x d", BLUE)
    box(ax, 1.5, 3, 1, 3, "K\nN x d", BLUE)
    arrow(ax, 2.7, 4.5, 3.8, 4.5)
    ax.text(3.25, 4.9, "kernel 1\nS = QK^T", ha="center", fontsize=8)
    box(ax, 4, 2, 4, 4, "S\nN x N\n(written to memory)", RED)
    arrow(ax, 8.2, 4.5, 9.3, 4.5)
    ax.text(8.75, 4.9, "kernel 2\nsoftmax", ha="center", fontsize=8)
    box(ax, 9.5, 2, 4, 4, "P\nN x N\n(read and written)", RED)
    box(ax, 14.2, 3, 1, 3, "V\nN x d", BLUE)
    arrow(ax, 15.4, 4.5, 16.5, 4.5)
    ax.text(15.95, 4.9, "kernel 3\nO = PV", ha="center", fontsize=8)
    box(ax, 16.7, 3, 1, 3, "O\nN x d", GREEN)
    ax.text(9, 0.9, "per head: Q, K, V, O move 4Nd numbers; S and P move 4N^2 (written, read, written, read).\n"
            "At N = 4096 that is 64 MiB of S per head in float32: N^2 grows past the L2 and then past memory.",
            ha="center", fontsize=8)
    save(fig, ax, path, (-0.5, 18.2), (0, 7))


def online_softmax(path=HERE / "attention-online-softmax.svg"):
    """A row visited in blocks: (m, l) carried from block to block, rescaled when the max grows."""
    fig, ax = plt.subplots(figsize=(11, 3.4))
    vals = [[1.0, 0.5, 2.0], [3.5, 0.2, 1.0], [0.1, 2.9, 3.0]]
    m, ell = float("-inf"), 0.0
    import math

    for b, block in enumerate(vals):
        x0 = b * 6
        for j, x in enumerate(block):
            box(ax, x0 + j * 1.3, 4, 1.2, 1, f"{x:g}", BLUE)
        new_m = max(m, max(block))
        alpha = math.exp(m - new_m) if m != float("-inf") else 0.0
        ell = ell * alpha + sum(math.exp(x - new_m) for x in block)
        color = ORANGE if new_m > m else GREY
        box(ax, x0, 1.6, 3.8, 1.6, f"m = {new_m:g}\nl = {ell:.3f}", color)
        rescale = f"alpha = exp({m:g} - {new_m:g})" if b and new_m > m else ("alpha = 1" if b else "start: m = -inf, l = 0")
        ax.text(x0 + 1.9, 0.9, rescale, ha="center", fontsize=8)
        arrow(ax, x0 + 1.9, 3.95, x0 + 1.9, 3.25)
        if b:
            arrow(ax, x0 - 2.15, 2.4, x0 - 0.05, 2.4)
        m = new_m
    ax.text(8.5, 5.6, "one pass over the row: the running max m and the normaliser l = sum exp(x - m); "
            "when m grows, what l holds is rescaled by exp(m_old - m_new)", ha="center", fontsize=8)
    save(fig, ax, path, (-0.5, 18), (0.4, 6.1))


def fused_tiles(path=HERE / "attention-fused-tiles.svg"):
    """One block of the fused kernel: a Q block resident, K/V blocks streamed; the causal skip."""
    fig, ax = plt.subplots(figsize=(11, 4.4))
    box(ax, 0, 3.5, 1.2, 2, "Q block\n(registers)", BLUE, fontsize=7)
    for j in range(5):
        box(ax, 2 + j * 1.3, 6.2, 1.1, 0.9, f"K,V {j}", PURPLE if j == 2 else GREY, fontsize=7)
    arrow(ax, 2 + 2 * 1.3 + 0.55, 6.15, 3.3, 5.1)
    box(ax, 2.2, 3.5, 2.4, 1.5, "K, V block\nin shared memory", PURPLE, fontsize=7)
    box(ax, 5.2, 3.5, 2.6, 1.5, "s = q.k, mask\nm, l, alpha\nacc = alpha acc + p v", ORANGE, fontsize=7)
    arrow(ax, 4.65, 4.25, 5.15, 4.25)
    box(ax, 5.2, 1.2, 2.6, 1.3, "end: O = acc / l\nlse = m + log l", GREEN, fontsize=7)
    arrow(ax, 6.5, 3.45, 6.5, 2.55)
    ax.text(3.9, 0.4, "S never leaves the block: memory sees Q, K, V, O and the lse", ha="center", fontsize=8)
    # causal: grid of query blocks x key blocks
    n = 6
    x0 = 10
    for qb in range(n):
        for kb in range(n):
            color = GREEN if kb < qb else (ORANGE if kb == qb else "white")
            box(ax, x0 + kb * 0.8, 6.0 - (qb + 1) * 0.8, 0.8, 0.8, "", color, lw=0.4)
    ax.text(x0 + 2.4, 6.4, "key blocks ->", ha="center", fontsize=8)
    ax.text(x0 - 0.3, 3.6, "query\nblocks", ha="right", va="center", fontsize=8)
    ax.text(x0 + 2.4, 0.4, "causal: green computed, orange computed with the mask,\nwhite never visited "
            "(the loop stops at the block's last query)", ha="center", fontsize=8)
    save(fig, ax, path, (-0.3, 16), (0, 7.3))


def _cell_grid(ax, x0, top, rows, cols, w, h, lw, fills):
    """A rows x cols grid of cells (w x h) hanging from (x0, top): white, then the coloured blocks
    ``(row0, row1, col0, col1, color)`` in order, then the grid lines over them."""
    box(ax, x0, top - rows * h, cols * w, rows * h, "", "white", lw=lw)
    for r0, r1, c0, c1, color in fills:
        box(ax, x0 + c0 * w, top - r1 * h, (c1 - c0) * w, (r1 - r0) * h, "", color, lw=0)
    for r in range(rows + 1):
        ax.plot([x0, x0 + cols * w], [top - r * h] * 2, color="black", lw=lw)
    for c in range(cols + 1):
        ax.plot([x0 + c * w] * 2, [top - rows * h, top], color="black", lw=lw)


def tiled_lanes(path=HERE / "attention-tiled-lanes.svg"):
    """The register-tiled kernel: what one lane of a warp owns in S and in O, and the row group's shuffles."""
    fig, ax = plt.subplots(figsize=(11, 4.6))
    cell = 0.22  # one score / one output element
    rows, keys, cols, groups, lanes_per = 16, 32, 64, 4, 8
    rg, cg = 1, 2  # the lane drawn in colour
    top = 6.2
    # S tile of one warp: 16 query rows x 32 keys
    x0 = 0.6
    # drawn as bands and grid lines, not one rectangle per cell (the SVG stays small)
    _cell_grid(ax, x0, top, rows, keys, cell, cell, 0.2,
               [(4 * rg, 4 * rg + 4, 0, keys, BLUE)] + [(4 * rg, 4 * rg + 4, j, j + 1, ORANGE)
                                                        for j in range(cg, keys, lanes_per)])
    ax.text(x0 + keys * cell / 2, top + 0.25, "S of one key tile: the warp's 16 rows x 32 keys", ha="center",
            fontsize=8)
    for g in range(groups):
        ax.text(x0 - 0.1, top - (4 * g + 2) * cell, f"rg {g}", ha="right", va="center", fontsize=6.5)
    ax.text(x0 + keys * cell / 2, top - rows * cell - 0.3,
            "lane (rg, cg) = (1, 2): rows 4..7, keys cg, cg + 8, cg + 16, cg + 24 (orange);\n"
            "the 8 lanes of row group 1 share those rows (blue)", ha="center", va="top", fontsize=7)
    # the row max: shuffles across the row group
    xs = x0 + keys * cell + 0.9
    for c in range(lanes_per):
        box(ax, xs, top - 0.6 - c * 0.36, 0.9, 0.3, f"cg {c}", ORANGE if c == cg else BLUE, fontsize=6.5)
    xa = xs + 1.05
    ax.text(xa - 0.12, top - 0.45 - 7 * 0.36 - 0.15, "xor", ha="right", va="top", fontsize=6.5)
    for d in (1, 2, 4):  # shfl_xor with d: lane c exchanges with lane c ^ d (one arrow per pair)
        for c in range(lanes_per):
            if c < c ^ d:
                x = xa + (c % d) * 0.13
                ax.annotate("", xy=(x, top - 0.45 - (c ^ d) * 0.36), xytext=(x, top - 0.45 - c * 0.36),
                            arrowprops=dict(arrowstyle="<->", lw=0.5, shrinkA=0, shrinkB=0, mutation_scale=5))
        ax.text(xa + (d - 1) * 0.065, top - 0.45 - 7 * 0.36 - 0.15, f"{d}", ha="center", va="top", fontsize=6.5)
        xa += d * 0.13 + 0.2
    ax.text(xs + 0.9, top + 0.25, "a row's max and l:\nshfl_xor over the row group", ha="center", fontsize=8)
    # O tile of one warp: 16 rows x 64 columns (head_dim)
    xo = xs + 3.4
    _cell_grid(ax, xo, top, rows, cols, cell * 0.5, cell, 0.15,
               [(4 * rg, 4 * rg + 4, 0, cols, BLUE)] + [(4 * rg, 4 * rg + 4, c, c + 4, GREEN)
                                                        for c in range(4 * cg, cols, 4 * lanes_per)])
    ax.text(xo + cols * cell * 0.25, top + 0.25, "O: the warp's 16 rows x head_dim 64", ha="center", fontsize=8)
    ax.text(xo + cols * cell * 0.25, top - rows * cell - 0.3,
            "the same lane: rows 4..7, columns 4cg..4cg+3 and 32+4cg..32+4cg+3 (green);\n"
            "O += P V reads P of all 32 keys (shared memory, after syncwarp)", ha="center", va="top", fontsize=7)
    ax.text((x0 + xo + cols * cell * 0.5) / 2, 1.2,
            "per 4 steps of head_dim a lane loads 4 rows of Q and 4 keys (8 x 16 bytes) and does 4 x 4 x 4 = 64 "
            "multiply-adds:\n8 per shared-memory load, where one thread per query row does at most 4",
            ha="center", va="center", fontsize=8)
    save(fig, ax, path, (-0.4, xo + cols * cell * 0.5 + 0.2), (0.8, top + 0.7))


def tensor_core_flow(path=HERE / "attention-tensor-core-flow.svg"):
    """One key block in the tensor-core kernel: MM1, row update, rescale, MM2."""
    fig, ax = plt.subplots(figsize=(11, 2.8))
    steps = [("MM1.execute\nS = Q K^T\n(fp16 in, fp32)", BLUE), ("S fragment ->\nshared S tile\n(frag_coords)", GREY),
             ("row update:\nmask, m, l, alpha\nP as fp16", ORANGE), ("O fragment\n*= alpha[row]", PURPLE),
             ("MM2.execute\nO += P V", BLUE)]
    for i, (text, color) in enumerate(steps):
        box(ax, i * 3.2, 1, 2.6, 1.8, text, color, fontsize=8)
        if i:
            arrow(ax, i * 3.2 - 0.55, 1.9, i * 3.2 - 0.05, 1.9)
    ax.text(7.7, 0.3, "per key block; barriers between the steps; Q, K, V, P tiles live in shared memory",
            ha="center", fontsize=8)
    save(fig, ax, path, (-0.3, 15.8), (0, 3.2))


def mma_fragments(path=HERE / "attention-mma-fragments.svg"):
    """The register kernel: what lane (g, t) holds of S after mma.m16n8k16, the quad's shuffles, and
    the same registers becoming the A operand of O += P V."""
    fig, ax = plt.subplots(figsize=(11, 4.2))
    cell, rows, keys = 0.22, 16, 32
    g, t = 2, 1  # the lane drawn in colour: lane 4g + t = 9
    top, x0 = 5.6, 0.6
    fills = [(g, g + 1, 0, keys, BLUE), (g + 8, g + 9, 0, keys, BLUE)]
    fills += [(r, r + 1, 8 * nt + 2 * t, 8 * nt + 2 * t + 2, ORANGE) for nt in range(keys // 8) for r in (g, g + 8)]
    _cell_grid(ax, x0, top, rows, keys, cell, cell, 0.2, fills)
    for nt in range(keys // 8 + 1):  # the n-tiles of 8 keys, one mma each
        ax.plot([x0 + 8 * nt * cell] * 2, [top - rows * cell, top], color="black", lw=1.0)
    ax.text(x0 + keys * cell / 2, top + 0.25, "S in registers: a warp's 16 rows x 32 keys (4 n-tiles)",
            ha="center", fontsize=8)
    for r in (g, g + 8):
        ax.text(x0 - 0.1, top - (r + 0.5) * cell, f"row {r}", ha="right", va="center", fontsize=6.5)
    ax.text(x0 + keys * cell / 2, top - rows * cell - 0.3,
            f"lane {4 * g + t} (g = {g}, t = {t}): rows g and g + 8, keys 2t, 2t + 1 of every n-tile (orange):\n"
            "s[4nt + 0..1] and s[4nt + 2..3]; lanes 4g .. 4g + 3 (the quad) share the two rows (blue)",
            ha="center", va="top", fontsize=7)
    xs = x0 + keys * cell + 1.4  # the quad's butterfly: xor 1 then xor 2
    for c in range(4):
        box(ax, xs, top - 0.6 - c * 0.42, 1.0, 0.34, f"lane {4 * g + c}", ORANGE if c == t else BLUE, fontsize=6.5)
    xa = xs + 1.15
    for d in (1, 2):
        for c in range(4):
            if c < c ^ d:
                x = xa + (c % d) * 0.14
                ax.annotate("", xy=(x, top - 0.43 - (c ^ d) * 0.42), xytext=(x, top - 0.43 - c * 0.42),
                            arrowprops=dict(arrowstyle="<->", lw=0.5, shrinkA=0, shrinkB=0, mutation_scale=5))
        ax.text(xa + (d - 1) * 0.07, top - 0.43 - 3 * 0.42 - 0.2, f"xor {d}", ha="center", va="top", fontsize=6.5)
        xa += d * 0.14 + 0.35
    ax.text(xs + 0.9, top + 0.25, "a row's max: each lane's,\nthen 2 shuffles", ha="center", fontsize=8)
    xp, bw = xs + 3.6, 5.0
    box(ax, xp, top - 1.0, bw, 0.8, "p = exp2(s * scale * log2 e - m)\n(still the C fragment, float32)", ORANGE,
        fontsize=7)
    arrow(ax, xp + bw / 2, top - 1.05, xp + bw / 2, top - 1.65)
    box(ax, xp, top - 2.5, bw, 0.8, "pack(s[4nt], s[4nt + 1]) -> one fp16x2 register:\nthe A fragment of O += P V",
        GREEN, fontsize=7)
    arrow(ax, xp + bw / 2, top - 2.55, xp + bw / 2, top - 3.15)
    box(ax, xp, top - 4.0, bw, 0.8, "mma.m16n8k16: P (registers) x V (ldmatrix.trans\nfrom shared memory), into O",
        PURPLE, fontsize=7)
    ax.text(xp + bw / 2, top + 0.25, "no shared memory between the two products", ha="center", fontsize=8)
    save(fig, ax, path, (-0.5, xp + bw + 0.2), (top - rows * cell - 1.0, top + 0.7))


def backward_ownership(path=HERE / "attention-backward.svg"):
    """Who owns which gradient row: no atomics."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    box(ax, 0, 1, 4, 4, "", GREY)
    for j in range(4):
        box(ax, j * 1.0, 1, 1.0, 4, "", PURPLE if j == 1 else GREY, alpha=0.7)
    ax.text(2, 5.4, "kernel dK, dV: one thread per key j\nloops over the queries that see j", ha="center", fontsize=8)
    ax.text(1.5, 0.5, "column j of P", ha="center", fontsize=8)
    box(ax, 6, 1, 4, 4, "", GREY)
    for i in range(4):
        box(ax, 6, 1 + i * 1.0, 4, 1.0, "", ORANGE if i == 2 else GREY, alpha=0.7)
    ax.text(8, 5.4, "kernel dQ: one thread per query i\nloops over the keys i sees", ha="center", fontsize=8)
    ax.text(10.3, 3.5, "row i of P", va="center", fontsize=8)
    ax.text(15.5, 3.0, "both recompute P = exp(S - lse)\nfrom the forward's lse;\n"
            "dS = P (dP - D), D = rowsum(dO O)\ndV = P^T dO, dK = scale dS^T Q,\ndQ = scale dS K",
            ha="center", va="center", fontsize=8)
    save(fig, ax, path, (-0.3, 18.5), (0, 6.3))


def traffic_plot(path=HERE / "attention-traffic.svg"):
    """Predicted bytes moved by the naive and fused forward vs sequence length (the model of 04.1)."""
    from kernel_lab.attention import reference

    seqs = [256 * 2**i for i in range(8)]
    b, h, d = 1, 16, 64
    naive = [reference.naive_traffic_bytes(b, h, n, d) / 2**30 for n in seqs]
    fused = [reference.fused_traffic_bytes(b, h, n, d, 64) / 2**30 for n in seqs]
    s_bytes = [b * h * n * n * 4 / 2**30 for n in seqs]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.loglog(seqs, naive, "o-", color="#d62828", label="naive: S and P through memory")
    ax.loglog(seqs, fused, "s-", color="#2a9d8f", label="fused: Q, K, V, O once")
    ax.loglog(seqs, s_bytes, ":", color="grey", label="size of S (16 heads, float32)")
    ax.axhline(80, color="black", lw=0.6)
    ax.text(seqs[0], 95, "80 GiB: an H100's memory", fontsize=8)
    ax.axhline(50 / 1024, color="black", lw=0.6, ls="--")
    ax.text(seqs[0], 0.032, "50 MiB: its L2", fontsize=8)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("GiB moved (predicted)")
    ax.set_title("attention forward, batch 1, 16 heads, head_dim 64, float32", fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {path.name}")


if __name__ == "__main__":
    naive_attention()
    online_softmax()
    fused_tiles()
    tiled_lanes()
    tensor_core_flow()
    mma_fragments()
    backward_ownership()
    traffic_plot()
