"""Draw the diagrams of module 09, beyond one GPU.

Run: python images/make_images_module09.py. Same style as make_images_module08.py: matplotlib, text
kept as text, stable ids, no dates, so rerunning leaves the files unchanged. Each function writes one SVG:

- multigpu-peer-read.svg  two GPUs of one process joined by NVLink: the peer copy (copy engines, no
                          thread) and the peer-read kernel (GPU 0's threads load GPU 1's memory
                          through a pointer that peer access made valid), each 16 bytes a load (09.1)
- multigpu-one-shot.svg   the one-shot all-reduce of two GPUs, block b of each: publish into its own
                          staging half (epoch & 1), fence at system scope, flag = epoch, poll the
                          peer's flag, read the peer's half and sum; the four classic mistakes
                          placed where they break the protocol (09.2)
"""

from pathlib import Path

from drawing import arrow, save_figure as _save  # first: matplotlib set up for stable SVGs
from drawing import rounded_box as _box
import matplotlib.pyplot as plt  # noqa: E402 - after drawing's setup

HERE = Path(__file__).parent
GPU_COLORS = ["#8ecae6", "#ffb703"]
LINK, DARK, GREY = "#6a4c93", "#333333", "#d9d9d9"
MONO = "DejaVu Sans Mono"


def _arrow(ax, x0, y0, x1, y1, *, color="black", text=None, fontsize=7, lw=0.9, style="->"):
    arrow(ax, x0, y0, x1, y1, color=color, lw=lw, style=style, text=text, fontsize=fontsize, label_gap=0.06,
          label_color=True)


def peer_read(path):
    fig, ax = plt.subplots(figsize=(10, 4.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.6)
    ax.axis("off")
    for g, x in enumerate((0.3, 6.2)):
        _box(ax, x, 0.3, 3.5, 3.7, GPU_COLORS[g], lw=1.0)
        ax.text(x + 1.75, 3.75, f"GPU {g}", ha="center", fontsize=10, weight="bold")
        _box(ax, x + 0.3, 0.55, 2.9, 0.7, "white")
        ax.text(x + 2.45, 0.9, "device memory\n(HBM)", ha="center", va="center", fontsize=7.5)
    # GPU 0: SMs running the kernel, dst in its memory; GPU 1: src in its memory
    _box(ax, 0.6, 2.55, 2.9, 0.8, "white", "SMs: peer_read's threads\n(grid-stride, 16 bytes a load)", fontsize=7.5)
    _box(ax, 0.75, 0.62, 1.1, 0.5, GREY, "dst", fontsize=8, family=MONO)
    _box(ax, 6.65, 0.62, 1.1, 0.5, GREY, "src", fontsize=8, family=MONO)
    _box(ax, 6.5, 2.55, 2.9, 0.8, "white", "copy engines\n(cudaMemcpyPeerAsync)", fontsize=7.5)
    # NVLink
    _box(ax, 4.05, 0.7, 1.9, 0.55, LINK, "", lw=0.8)
    ax.text(5.0, 0.97, "NVLink", ha="center", va="center", fontsize=9, color="white", weight="bold")
    ax.text(5.0, 0.4, "H200 pair: 18 links, a peer\ncopy of 1 GiB at ~395 GB/s", ha="center", va="center", fontsize=7)
    # The kernel's loads: from GPU 0's SMs over NVLink to src, and the values back into dst
    _arrow(ax, 3.5, 2.95, 7.2, 1.14, color=DARK, text="", lw=1.0)
    ax.text(5.0, 3.3, "1. load4(src, 4 * i):\nthe load crosses the link", fontsize=7.5, ha="center")
    _arrow(ax, 1.3, 2.55, 1.3, 1.14, color=DARK, lw=1.0)
    ax.text(1.4, 1.85, "2. store4(dst, 4 * i, ...)\n    local", fontsize=7.5)
    _arrow(ax, 7.95, 2.55, 7.95, 1.14, color=GREY, lw=1.0)
    ax.text(8.05, 1.85, "the peer copy:\nno thread involved", fontsize=7.5)
    ax.text(0.3, 4.35, "One process, two GPUs. Peer access lets GPU 0's threads dereference a pointer into GPU 1's "
            "memory; the roofline here is the peer copy.", fontsize=8)
    _save(fig, path)


def one_shot(path):
    fig, ax = plt.subplots(figsize=(12, 5.6))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 5.6)
    ax.axis("off")
    steps = [
        ("1. publish", "mine[half + i] = x[i]\nhalf = (epoch & 1) * n"),
        ("2. fence, flag", "syncthreads; thread 0:\nthreadfence_system()\natomic.exch(my_flags, b, epoch)"),
        ("3. wait", "thread 0: while\nload_acquire_system(\n peer_flags, b) < epoch\nthen syncthreads"),
        ("4. read, sum", "out[i] = x[i] +\n  peer[half + i]"),
    ]
    mistakes = ["", "no fence, or threadfence()\n(this GPU only): the flag\ncan arrive before the data",
                "no wait: the peer's\nhalf is read too early", "0/1 flags reset at once:\nthe peer may miss the 1\nand wait for ever"]
    for g, y in enumerate((3.25, 0.55)):
        ax.text(0.1, y + 1.55, f"GPU {g}, block b", fontsize=9.5, weight="bold")
        for k, (title, body) in enumerate(steps):
            x = 0.2 + 2.45 * k
            _box(ax, x, y, 2.3, 1.35, GPU_COLORS[g])
            ax.text(x + 1.15, y + 1.15, title, ha="center", fontsize=8.5, weight="bold")
            ax.text(x + 1.15, y + 0.55, body, ha="center", va="center", fontsize=6.3, family=MONO)
            if k < 3:
                _arrow(ax, x + 2.3, y + 0.67, x + 2.45, y + 0.67, color=DARK)
        _box(ax, 10.1, y + 0.15, 1.8, 1.05, "white",
             f"staging {g}: 2 halves\nflags {g}: one word\na block, = epoch", fontsize=7)
    # cross arrows: GPU 1's wait reads GPU 0's flag, GPU 1's sum reads GPU 0's staging, and back
    _arrow(ax, 3.5, 3.25, 5.6, 1.9, color=LINK, lw=1.0)  # GPU 0's flag, polled by GPU 1's wait
    _arrow(ax, 3.5, 1.9, 5.6, 3.25, color=LINK, lw=1.0)  # and the other way
    ax.text(4.55, 2.35, "flags over NVLink", ha="center", fontsize=7.5, color=LINK)
    _arrow(ax, 1.35, 3.25, 8.0, 1.9, color=LINK, lw=0.8, style="-|>")  # GPU 0's staging, read by GPU 1's sum
    ax.text(7.0, 2.75, "staging read\nover NVLink", ha="center", fontsize=7.5, color=LINK)
    for k, text in enumerate(mistakes):
        if text:
            ax.text(0.2 + 2.45 * k + 1.15, 5.2, text, ha="center", va="center", fontsize=6.5, color="#9b2226")
    ax.text(0.2 + 1.15, 5.2, "the classic mistakes:", ha="center", va="center", fontsize=7.5, color="#9b2226")
    _save(fig, path)


def main():
    peer_read(HERE / "multigpu-peer-read.svg")
    one_shot(HERE / "multigpu-one-shot.svg")


if __name__ == "__main__":
    main()
