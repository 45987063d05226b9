"""Draw the diagrams of module 01, notebooks 04 (warp primitives) and 05 (occupancy).

Run: python images/make_images_module01b.py. Each function writes one SVG next to this file.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: small, searchable files
matplotlib.rcParams["svg.hashsalt"] = "kernel-lab"  # stable ids: rerunning changes nothing
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
BLUE, ORANGE, GREEN, RED, GREY = "#8ecae6", "#ffb703", "#90be6d", "#f28482", "#d9d9d9"


def _cell(ax, x, y, text, color, *, w=0.86, h=0.7, fontsize=7, alpha=1.0, edge="black"):
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=color, edgecolor=edge, lw=0.6, alpha=alpha))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, x0, y0, x1, y1, color="black", lw=0.7):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", lw=lw, color=color))


def warp_shuffle_reduction(path=HERE / "warp-shuffle-reduction.svg"):
    """shfl_down_sync tree on 16 lanes: after offsets 8, 4, 2, 1 lane 0 holds the sum."""
    lanes = 16
    values = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]
    fig, ax = plt.subplots(figsize=(11, 4.6))
    rows = [values]
    offset, v = lanes // 2, list(values)
    while offset:
        v = [v[j] + (v[j + offset] if j + offset < lanes else v[j]) for j in range(lanes)]
        rows.append(v)
        offset //= 2
    offsets = [8, 4, 2, 1]
    for r, row in enumerate(rows):
        y = 4 - r
        useful = lanes >> r  # lanes whose value still matters after r steps
        for j, value in enumerate(row):
            color = BLUE if r == 0 else (GREEN if j < useful else GREY)
            if r == len(rows) - 1 and j == 0:
                color = ORANGE
            _cell(ax, j, y, str(value), color)
        if r:
            off = offsets[r - 1]
            for j in range(lanes >> r):
                _arrow(ax, j + off + 0.43, y + 1, j + 0.5, y + 0.72, color="#444444")
            ax.text(-0.4, y + 0.35, f"v += shfl_down(v, {off})", ha="right", va="center", fontsize=8)
    for j in range(lanes):
        ax.text(j + 0.43, 5.0, str(j), ha="center", fontsize=7, color="#555555")
    ax.text(-0.4, 5.0, "lane", ha="right", fontsize=8, color="#555555")
    ax.text(-0.4, 4.35, "each lane's value", ha="right", va="center", fontsize=8)
    ax.text(lanes + 0.3, 0.35, f"lane 0: the sum ({sum(values)})", va="center", fontsize=8, color="#b5651d")
    ax.text(lanes + 0.3, 2.2, "grey: values nobody\nreads any more", va="center", fontsize=8, color="#777777")
    ax.set_xlim(-6.5, lanes + 4.5)
    ax.set_ylim(-0.3, 5.4)
    ax.axis("off")
    ax.set_title("A warp sum with shuffles, drawn for 16 lanes: registers only, no shared memory, no barrier "
                 "(32 lanes: one more step, offset 16)", fontsize=10)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def warp_ballot_compaction(path=HERE / "warp-ballot-compaction.svg"):
    """Ballot, popc and lanemask_lt give each kept lane its slot; one atomic per warp."""
    lanes = 16
    values = [-2, 7, 3, -1, -5, 4, -3, 8, 1, -6, -4, 2, 6, -7, 5, -8]
    keep = [v > 0 for v in values]
    fig, ax = plt.subplots(figsize=(11.5, 5.2))
    me = 11
    for j, value in enumerate(values):
        _cell(ax, j, 5, str(value), GREEN if keep[j] else GREY)
        _cell(ax, j, 4, "1" if keep[j] else "0", BLUE if keep[j] else "white")
        _cell(ax, j, 3, "1" if j < me else "0", ORANGE if j < me else "white")
        both = keep[j] and j < me
        _cell(ax, j, 2, "1" if both else "0", ORANGE if both else "white")
        ax.text(j + 0.43, 5.85, str(j), ha="center", fontsize=7, color="#555555")
    ax.add_patch(patches.Rectangle((me - 0.05, 4.95), 0.96, 0.8, fill=False, lw=1.8, edgecolor="#c1121f"))
    labels = [(5.35, "x[i] (keep if > 0)"), (4.35, "ballot_sync(mask, x[i] > 0)"),
              (3.35, f"lanemask_lt() of lane {me}"), (2.35, "ballot & lanemask_lt")]
    for y, text in labels:
        ax.text(-0.4, y, text, ha="right", va="center", fontsize=8)
    ax.text(-0.4, 5.85, "lane", ha="right", fontsize=8, color="#555555")
    rank = sum(1 for j in range(me) if keep[j])
    total = sum(keep)
    ax.text(lanes + 0.3, 4.35, f"popc(ballot) = {total} kept:\nlane 0 reserves {total} slots\nwith ONE atomic: "
            "base = 40", va="center", fontsize=8)
    ax.text(lanes + 0.3, 2.35, f"rank of lane {me} =\npopc(...) = {rank}", va="center", fontsize=8,
            color="#c1121f")
    out_y, base = 0.4, 40
    for k in range(total):
        kept_lanes = [j for j in range(lanes) if keep[j]]
        _cell(ax, 3 + k, out_y, str(values[kept_lanes[k]]), GREEN, edge="#c1121f" if k == rank else "black")
        ax.text(3 + k + 0.43, out_y - 0.35, str(base + k), ha="center", fontsize=7, color="#555555")
    ax.text(2.6, out_y + 0.35, "out[base + rank]", ha="right", va="center", fontsize=8)
    _arrow(ax, me + 0.43, 4.95, 3 + rank + 0.43, out_y + 0.75, color="#c1121f", lw=1.0)
    ax.set_xlim(-7.5, lanes + 5)
    ax.set_ylim(-0.2, 6.2)
    ax.axis("off")
    ax.set_title("Warp-aggregated compaction, drawn for 16 lanes: kept values stay in lane order inside the "
                 "warp's range", fontsize=10)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def warp_scan(path=HERE / "warp-scan-shfl-up.svg"):
    """Inclusive scan with shfl_up_sync (Hillis-Steele) on 8 lanes: offsets 1, 2, 4."""
    lanes = 8
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    v = list(values)
    rows = [list(v)]
    for off in (1, 2, 4):
        v = [v[j] + (v[j - off] if j >= off else 0) for j in range(lanes)]
        rows.append(list(v))
    for r, row in enumerate(rows):
        y = 3 - r
        for j, value in enumerate(row):
            color = BLUE if r == 0 else (ORANGE if r == 3 else GREEN)
            _cell(ax, j, y, str(value), color)
        if r:
            off = 1 << (r - 1)
            for j in range(off, lanes):
                _arrow(ax, j - off + 0.43, y + 1, j + 0.43, y + 0.72, color="#444444")
            ax.text(-0.4, y + 0.35, f"up = shfl_up(v, {off})\nif lane >= {off}: v += up", ha="right",
                    va="center", fontsize=8)
    for j in range(lanes):
        ax.text(j + 0.43, 3.95, str(j), ha="center", fontsize=7, color="#555555")
    ax.text(-0.4, 3.95, "lane", ha="right", fontsize=8, color="#555555")
    ax.text(lanes + 0.2, 0.35, "inclusive prefix sums", va="center", fontsize=8, color="#b5651d")
    ax.set_xlim(-5, lanes + 3.2)
    ax.set_ylim(-0.3, 4.3)
    ax.axis("off")
    ax.set_title("Warp prefix sum with shuffles, drawn for 8 lanes (32 lanes: offsets 1, 2, 4, 8, 16)",
                 fontsize=10)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def occupancy_limits(path=HERE / "occupancy-limits.svg"):
    """An H100 SM's four budgets filled by blocks of an example kernel: registers run out first."""
    threads, regs, smem = 256, 64, 16 * 1024
    warps = threads // 32
    budgets = [  # (resource, capacity, per block, unit label)
        ("warp slots", 64, warps, "64 warps (2048 threads)"),
        ("block slots", 32, 1, "32 blocks"),
        ("registers", 65536, regs * threads, "65536 registers"),
        ("shared memory", 228 * 1024, smem + 1024, "228 KiB"),
    ]
    fig, ax = plt.subplots(figsize=(10, 3.6))
    colors = [BLUE, GREEN, ORANGE, "#cdb4db"]
    for row, (label, capacity, per_block, unit) in enumerate(budgets):
        y = 3 - row
        fit = capacity // per_block
        for b in range(min(fit, 64)):
            x0 = b * per_block / capacity
            w = per_block / capacity
            resident = b < 4
            ax.add_patch(patches.Rectangle((x0, y), w, 0.6, facecolor=colors[b % 4] if resident else "white",
                                           edgecolor="black", lw=0.4, hatch=None if resident else "//"))
        ax.add_patch(patches.Rectangle((0, y), 1, 0.6, fill=False, lw=1.2))
        ax.text(-0.02, y + 0.3, label, ha="right", va="center", fontsize=9)
        note = f"{unit}: room for {fit} blocks" + ("  <- runs out first" if label == "registers" else "")
        ax.text(1.02, y + 0.3, note, va="center", fontsize=8, color="#c1121f" if label == "registers" else "black")
    ax.set_xlim(-0.25, 1.55)
    ax.set_ylim(-0.2, 3.9)
    ax.axis("off")
    ax.set_title(f"One H100 SM, blocks of {threads} threads x {regs} registers, {smem // 1024} KiB shared memory: "
                 "4 blocks fit (coloured) = 32 of 64 warps = 50% occupancy", fontsize=10)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


def latency_hiding(path=HERE / "latency-hiding.svg"):
    """One warp scheduler issuing from 2 warps vs 8 warps when every instruction waits for a load."""
    latency, cycles = 8, 32
    fig, axes = plt.subplots(2, 1, figsize=(10, 4.2), sharex=True, gridspec_kw=dict(height_ratios=[2.6, 8]))
    for ax, n_warps, title in [(axes[0], 2, "2 warps: the scheduler idles while both wait for memory"),
                               (axes[1], 8, "8 warps: while some wait, another one is ready to issue")]:
        ready = [0] * n_warps
        issued = {}
        for t in range(cycles):
            for w in sorted(range(n_warps), key=lambda w: ready[w]):
                if ready[w] <= t:
                    issued[t] = w
                    ready[w] = t + latency  # the warp issues a load, and its next instruction needs the data
                    break
        for w in range(n_warps):
            ax.add_patch(patches.Rectangle((0, w), cycles, 0.8, facecolor="#f4f4f4", edgecolor="none"))
        for t, w in issued.items():
            ax.add_patch(patches.Rectangle((t, w), 1, 0.8, facecolor=ORANGE, edgecolor="black", lw=0.4))
            ax.plot([t + 1, min(t + latency, cycles)], [w + 0.4, w + 0.4], color="#999999", lw=0.8,
                    linestyle=":")
        busy = len(issued) / cycles
        ax.set_ylim(-0.2, n_warps)
        ax.set_yticks([w + 0.4 for w in range(n_warps)], [f"warp {w}" for w in range(n_warps)], fontsize=7)
        ax.set_title(f"{title} (issue slots used: {100 * busy:.0f}%)", fontsize=9)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
    axes[1].set_xlim(0, cycles)
    axes[1].set_xlabel(f"cycles (orange: the warp issues; dotted: it waits {latency} cycles for its data)",
                       fontsize=8)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)


if __name__ == "__main__":
    warp_shuffle_reduction()
    warp_ballot_compaction()
    warp_scan()
    occupancy_limits()
    latency_hiding()
