"""Pictures of benchmark results: bar charts, and a roofline chart with this GPU's ceilings."""

from __future__ import annotations

from .bench import Measurement, SIMULATOR_NOTE, ridge_point
from .validate import KernelLabArgumentError


def _measured(measurements) -> list[Measurement] | None:
    ms = list(measurements)
    if not ms or not all(isinstance(m, Measurement) for m in ms):
        raise KernelLabArgumentError("plots take a list of Measurements returned by kl.benchmark")
    if any(m.ms is None for m in ms):
        print(f"no plot: {SIMULATOR_NOTE}")
        return None
    return ms


def plot_bars(measurements, *, metric: str = "fraction", title: str | None = None, ax=None):
    """Bar chart of measurements: ``metric`` is 'fraction' (of the roofline), 'ms', 'gbps' or 'tflops'."""
    import matplotlib.pyplot as plt

    if metric not in ("fraction", "ms", "gbps", "tflops"):
        raise KernelLabArgumentError(f"metric must be 'fraction', 'ms', 'gbps' or 'tflops', got {metric!r}")
    ms = _measured(measurements)
    if ms is None:
        return None
    values = [getattr(m, metric) or 0.0 for m in ms]
    if metric == "fraction":
        values = [100 * v for v in values]
    label = {"fraction": "% of this GPU's roofline", "ms": "time (ms)", "gbps": "GB/s", "tflops": "TFLOP/s"}[metric]
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 * len(ms) + 3, 3.5))
    bars = ax.bar([m.name for m in ms], values, color="tab:green")
    ax.bar_label(bars, fmt="%.0f" if metric == "fraction" else "%.3g")
    ax.set_ylabel(label)
    if metric == "fraction":
        ax.axhline(100, color="gray", linestyle="--", linewidth=1)
    ax.set_title(title or label)
    ax.tick_params(axis="x", rotation=20)
    plt.tight_layout()
    return ax


def plot_roofline(measurements, roof: dict, *, title: str | None = None, ax=None):
    """Roofline chart: attained FLOP/s against arithmetic intensity, with this GPU's ceilings.

    ``roof`` is what ``kl.rooflines()`` returned. Measurements need both ``bytes`` and ``flops``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    ms = _measured(measurements)
    if ms is None:
        return None
    if not roof or not roof.get("copy_gbps"):
        raise KernelLabArgumentError("plot_roofline needs the dict returned by kl.rooflines()")
    bw = roof["copy_gbps"] * 1e9
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.2))
    x = np.logspace(-2, 3, 200)
    ax.loglog(x, x * bw / 1e12, color="gray", linewidth=1, label=f"copy bandwidth {roof['copy_gbps']:,.0f} GB/s")
    for key, style in [("sgemm_tflops", "-"), ("dgemm_tflops", "--")]:
        p = roof.get(key)
        if p:
            ridge = ridge_point(roof, key.split("_")[0])
            ax.loglog(x, np.minimum(x * bw / 1e12, p), color="black", linestyle=style, linewidth=1.5,
                      label=f"{key.split('_')[0].upper()} peak {p:.0f} TFLOP/s (ridge {ridge:.0f} FLOP/B)")
    for m in ms:
        if m.flops and m.bytes:
            ax.loglog(m.flops / m.bytes, m.tflops, "o", label=m.name)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or "Roofline of this GPU")
    ax.legend(fontsize=8)
    plt.tight_layout()
    return ax
