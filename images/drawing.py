"""What every `make_images_*.py` script draws with: matplotlib set up for stable SVGs, the course's
palette, and boxes, arrows and a save that frames the drawing.

The scripts run as `python images/make_images_moduleNN.py`, so this module is importable beside them.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: small, searchable files
matplotlib.rcParams["svg.hashsalt"] = "kernel-lab"  # stable ids: rerunning changes nothing
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
BLUE, ORANGE, GREEN, RED, GREY, PURPLE, WHITE = "#8ecae6", "#ffb703", "#90be6d", "#f28482", "#d9d9d9", "#cdb4db", "white"


def box(ax, x, y, w, h, text="", color=GREY, fontsize=8, edge="black", lw=0.6, alpha=1.0, **kw):
    """A rectangle with its label centred in it."""
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=color, edgecolor=edge, lw=lw, alpha=alpha))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, **kw)


def rounded_box(ax, x, y, w, h, color, text="", *, fontsize=8, family=None, lw=0.7, ls="-"):
    """A box with rounded corners and its label centred in it (modules 08 and 09, drawn in data units
    without the equal aspect of `save`)."""
    ax.add_patch(patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                        facecolor=color, edgecolor="black", lw=lw, ls=ls))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, family=family)


def arrow(ax, x0, y0, x1, y1, color="black", lw=0.8, style="->", text="", fontsize=7.5, *, label_gap=0.25,
          label_color=None):
    """An arrow from (x0, y0) to (x1, y1), with an optional label ``label_gap`` above its middle (in the
    arrow's colour with ``label_color=True``, or the colour given)."""
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle=style, lw=lw, color=color))
    if text:
        extra = {} if label_color is None else {"color": color if label_color is True else label_color}
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + label_gap, text, ha="center", va="bottom", fontsize=fontsize, **extra)


def save_figure(fig, path):
    """Write a figure as it is framed (no date, so reruns change nothing)."""
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def save(fig, ax, path, xlim, ylim):
    """Frame the drawing (equal aspect, no axes) and write it without a date, so reruns change nothing."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {path.name}")
