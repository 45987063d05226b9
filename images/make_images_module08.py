"""Draw the diagrams of module 08, Hopper's asynchronous data movement.

Run: python images/make_images_module08.py. Same style as make_images.py: matplotlib, text kept as
text, stable ids, no dates, so rerunning leaves the files unchanged. Each function writes one SVG:

- hopper-stage-ring.svg   a ring of STAGES = 3 shared-memory tiles with their full and empty
                          barriers: which tile each stage holds in which round, the parity every
                          wait uses, and who arrives on which barrier (08.1)

The rounds, stages and parities are computed with the same formulas as the notebook's ring kernel:
stage q % STAGES, parity (q // STAGES) & 1 for the consumers, the other one for the producer.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: small, searchable files
matplotlib.rcParams["svg.hashsalt"] = "kernel-lab"  # stable ids: rerunning changes nothing
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
STAGES = 3
TILES = 7  # tiles of one block: the ring wraps twice
STAGE_COLORS = ["#8ecae6", "#ffb703", "#90be6d"]
GREY, DARK = "#d9d9d9", "#333333"
MONO = "DejaVu Sans Mono"


def _save(fig, path):
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def _box(ax, x, y, w, h, color, text="", *, fontsize=8, family=None, lw=0.7, ls="-"):
    ax.add_patch(patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                        facecolor=color, edgecolor="black", lw=lw, ls=ls))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, family=family)


def _arrow(ax, x0, y0, x1, y1, *, color="black", text=None, fontsize=7):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", lw=0.9, color=color))
    if text:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.06, text, ha="center", va="bottom", fontsize=fontsize, color=color)


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


if __name__ == "__main__":
    stage_ring(HERE / "hopper-stage-ring.svg")
    print("wrote", HERE / "hopper-stage-ring.svg")
