"""Draw the course's diagrams (run: python images/make_images.py). Each function writes one SVG."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: small, searchable files
matplotlib.rcParams["svg.hashsalt"] = "kernel-lab"  # stable ids: rerunning changes nothing
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent


def grid_of_blocks(path=HERE / "grid-of-blocks.svg"):
    """One thread per element: blocks of 8 threads cover an array of 27 elements; the last block
    sticks out, so its extra threads must not write."""
    n, block = 27, 8
    blocks = (n + block - 1) // block
    fig, ax = plt.subplots(figsize=(11, 2.6))
    colors = ["#8ecae6", "#ffb703", "#90be6d", "#f28482"]
    for t in range(blocks * block):
        b, inside = t // block, t < n
        ax.add_patch(patches.Rectangle((t, 1.2), 0.9, 0.9, color=colors[b % 4], alpha=1 if inside else 0.25))
        ax.text(t + 0.45, 1.65, str(t % block), ha="center", va="center", fontsize=7)
        ax.annotate("", xy=(t + 0.45, 0.95), xytext=(t + 0.45, 1.2),
                    arrowprops=dict(arrowstyle="->", lw=0.6, color="black" if inside else "#bbbbbb"))
        if inside:
            ax.add_patch(patches.Rectangle((t, 0), 0.9, 0.9, fill=False, lw=0.8))
            ax.text(t + 0.45, 0.45, str(t), ha="center", va="center", fontsize=7)
        else:
            ax.text(t + 0.45, 0.45, "x", ha="center", va="center", fontsize=9, color="#c1121f")
    for b in range(blocks):
        ax.text(b * block + block / 2 - 0.05, 2.4, f"block {b}", ha="center", fontsize=9)
    ax.text(-0.6, 1.65, "threadIdx.x", ha="right", va="center", fontsize=8)
    ax.text(-0.6, 0.45, "out[i]", ha="right", va="center", fontsize=8)
    ax.text(n + 2.5, -0.45, "threads past the end: `if i < n` stops them", ha="center", fontsize=8,
            color="#c1121f")
    ax.set_xlim(-4, blocks * block + 0.5)
    ax.set_ylim(-0.8, 2.8)
    ax.axis("off")
    ax.set_title("i = blockIdx.x * blockDim.x + threadIdx.x   (cuda.grid(1))", fontsize=10)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})  # no date: reruns give the same file
    plt.close(fig)


if __name__ == "__main__":
    grid_of_blocks()
