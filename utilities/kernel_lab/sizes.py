"""Problem sizes that know where they run.

A GPU needs large problems (hundreds of MB) to show its speed; the CUDA simulator runs each
thread in Python and needs tiny ones. Notebooks ask for both at once and get the right one, so the
same notebook runs unchanged in both places.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from .environment import on_simulator
from .validate import require_positive_int


def sizes(*, gpu: dict, sim: dict) -> SimpleNamespace:
    """Pick the GPU or the simulator sizes: ``n = kl.sizes(gpu=dict(n=2**26), sim=dict(n=3000)).n``.

    Both dicts must have the same keys, so a notebook never uses a size that exists in one place only.
    """
    if not isinstance(gpu, dict) or not isinstance(sim, dict):
        raise TypeError("sizes(gpu=..., sim=...) takes two dicts, e.g. sizes(gpu=dict(n=2**26), sim=dict(n=3000))")
    if set(gpu) != set(sim):
        raise ValueError(f"sizes(): the GPU and simulator sizes must have the same names; "
                         f"only for the GPU: {sorted(set(gpu) - set(sim))}, only for the simulator: "
                         f"{sorted(set(sim) - set(gpu))}")
    return SimpleNamespace(**(sim if small_sizes_asked() or on_simulator() else gpu))


SMALL_SIZES_ENV = "KERNEL_LAB_SIZES"


def small_sizes_asked() -> bool:
    """``KERNEL_LAB_SIZES=small``: the simulator's sizes on a GPU too, for runs that only check, such as
    a notebook under compute-sanitizer (scripts/gpu_sanitize.py), where every access is instrumented."""
    value = os.environ.get(SMALL_SIZES_ENV, "").strip().lower()
    if value not in ("", "small", "full"):
        raise ValueError(f"{SMALL_SIZES_ENV} is 'small' or 'full' (or unset), not {value!r}")
    return value == "small"


def blocks_for(n: int, threads_per_block: int) -> int:
    """How many blocks cover ``n`` items: the ceiling of n / threads_per_block."""
    n = require_positive_int(n, "n", allow_zero=True)
    threads_per_block = require_positive_int(threads_per_block, "threads_per_block")
    return (n + threads_per_block - 1) // threads_per_block


def adversarial_sizes(block: int, large: int | None = None) -> list[tuple[str, int]]:
    """Sizes that catch indexing mistakes, each with a label that is the same on GPU and simulator.

    1 element; one short of a block; one past a block (a second, almost empty block); several blocks
    and a partial one; and a large size (GPU: millions, simulator: a few thousand) that needs many
    blocks, catching kernels that only work for one block.
    """
    block = require_positive_int(block, "block")
    if large is None:
        large = 3_000 if on_simulator() else 1 << 24
    large = require_positive_int(large, "large")
    cases = [("1", 1), ("block-1", max(block - 1, 1)), ("block+1", block + 1),
             ("3 blocks+7", 3 * block + 7), ("large", max(large, 4 * block + 1))]
    return cases


def adversarial_shapes(tile: int, large: int | None = None) -> list[tuple[str, tuple[int, int]]]:
    """2D shapes that catch tiling mistakes: 1x1, not multiples of the tile, non-square, and large."""
    tile = require_positive_int(tile, "tile")
    if large is None:
        large = 70 if on_simulator() else 4099
    return [("1x1", (1, 1)), ("tile-1 x tile+1", (tile - 1 if tile > 1 else 1, tile + 1)),
            ("non-square", (2 * tile + 3, 3 * tile + 5)), ("large", (large, large + 33))]
