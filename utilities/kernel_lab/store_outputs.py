"""Run solution notebooks and store their outputs in place (nbval's reference).

Stored outputs are what the notebook tests compare against, so they must come from a real GPU,
never from the simulator: this command refuses to run a notebook that launches kernels without
one. It records what produced the outputs in each notebook's metadata (``kernel_lab.outputs_from``).

One allowance: a notebook whose setup call declares ``kl.setup(..., numpy_only=True)`` runs no
kernel at all (NumPy on the CPU; 07.1 is one), so its outputs are the same on any machine and may
be stored without a GPU. Its metadata then says ``CPU: NumPy only ...``.

A notebook that fails is not written back; with ``KERNEL_LAB_FAILED_DIR`` set, what it ran (its
outputs up to the failing cell) is written there for diagnosis.

Usage::

    python -m kernel_lab.store_outputs                    # every notebook under solutions/ (needs a GPU)
    python -m kernel_lab.store_outputs solutions/00-getting-started/00-getting-started.ipynb
    python -m kernel_lab.store_outputs solutions/07-fp64-emulation/07.1-the-idea-in-numpy.ipynb  # any machine
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from pathlib import Path

import nbformat

from .environment import choose_backend, gpu_info

_NUMPY_ONLY = re.compile(r"setup\([^)]*numpy_only\s*=\s*True")


def numpy_only(nb_or_path) -> bool:
    """Does this notebook's first code cell declare ``kl.setup(..., numpy_only=True)``?"""
    nb = nbformat.read(nb_or_path, as_version=4) if isinstance(nb_or_path, (str, Path)) else nb_or_path
    code = [c for c in nb.cells if c.cell_type == "code"]
    return bool(code) and bool(_NUMPY_ONLY.search(code[0].source))


def provenance(nb) -> str:
    """What ``outputs_from`` records: the GPU, or for a NumPy-only notebook, the CPU."""
    day = time.strftime("%Y-%m-%d")
    if numpy_only(nb):
        return f"CPU: NumPy only, no GPU used ({platform.machine()}, {platform.system()}), {day}"
    g = gpu_info()
    cc = ".".join(map(str, g.compute_capability))
    return f"GPU: {g.name} (compute capability {cc}), {day}"


def store(path: Path, timeout: int = 1800) -> float:
    """Execute one notebook in its own folder and write it back with outputs; return seconds taken."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.time()
    began = {}

    def cell_start(cell, cell_index, **_):
        began[cell_index] = time.time()

    def cell_executed(cell, cell_index, **_):
        # One line per code cell, as it finishes: a run stopped at a deadline then says which cell
        # held it and where the time went before it.
        if cell.cell_type == "code":
            t = time.time()
            print(f"  cell {cell_index:3d}: {t - began.get(cell_index, t):7.1f} s  (at {t - start:6.0f} s)", flush=True)

    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", on_cell_start=cell_start,
                       on_cell_executed=cell_executed,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    except BaseException:  # KeyboardInterrupt too: a deadline's SIGINT still leaves the partial run
        # Keep what ran, for diagnosis, outside solutions/ (never as the stored reference).
        failed_dir = os.environ.get("KERNEL_LAB_FAILED_DIR")
        if failed_dir:
            nbformat.write(nb, Path(failed_dir) / f"{path.stem}.failed.ipynb")
        raise
    nb.metadata.setdefault("kernel_lab", {})["outputs_from"] = provenance(nb)
    nbformat.write(nb, path)
    return time.time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Execute solution notebooks on this GPU and store outputs.")
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: all under solutions/)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.notebooks] or sorted(Path("solutions").rglob("*.ipynb"))
    paths = [p for p in paths if ".ipynb_checkpoints" not in p.parts]
    if choose_backend() != "gpu":
        need_gpu = [p for p in paths if not numpy_only(p)] if args.notebooks else ["(all notebooks)"]
        if need_gpu:
            print("stored outputs must come from a GPU run, and no GPU was found (or NUMBA_ENABLE_CUDASIM=1); "
                  "only notebooks that declare kl.setup(..., numpy_only=True) may be stored without one. "
                  f"These need a GPU: {', '.join(map(str, need_gpu))}", file=sys.stderr)
            return 2
    failed = 0
    for path in paths:
        try:
            seconds = store(path)
            print(f"stored {path} ({seconds:.0f} s)", flush=True)
        except Exception as exc:  # keep going: one broken notebook should not hide the others' results
            failed += 1
            print(f"FAILED {path}: {type(exc).__name__}: {str(exc)[-3000:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
