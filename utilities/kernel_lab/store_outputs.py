"""Run solution notebooks on this GPU and store their outputs in place (nbval's reference).

Stored outputs are what the notebook tests compare against, so they must come from a real GPU,
never from the simulator: this command refuses to run without one. It records which GPU produced
them in each notebook's metadata (``kernel_lab.outputs_from``).

A notebook that fails is not written back; with ``KERNEL_LAB_FAILED_DIR`` set, what it ran (its
outputs up to the failing cell) is written there for diagnosis.

Usage::

    python -m kernel_lab.store_outputs                    # every notebook under solutions/
    python -m kernel_lab.store_outputs solutions/00-getting-started/00-getting-started.ipynb
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat

from .environment import choose_backend, gpu_info


def store(path: Path, timeout: int = 1800) -> float:
    """Execute one notebook in its own folder and write it back with outputs; return seconds taken."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.time()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    except Exception:
        # Keep what ran, for diagnosis, outside solutions/ (never as the stored reference).
        failed_dir = os.environ.get("KERNEL_LAB_FAILED_DIR")
        if failed_dir:
            nbformat.write(nb, Path(failed_dir) / f"{path.stem}.failed.ipynb")
        raise
    g = gpu_info()
    cc = ".".join(map(str, g.compute_capability))
    nb.metadata.setdefault("kernel_lab", {})["outputs_from"] = (
        f"GPU: {g.name} (compute capability {cc}), {time.strftime('%Y-%m-%d')}")
    nbformat.write(nb, path)
    return time.time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Execute solution notebooks on this GPU and store outputs.")
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: all under solutions/)")
    args = parser.parse_args(argv)
    if choose_backend() != "gpu":
        print("stored outputs must come from a GPU run, and no GPU was found (or NUMBA_ENABLE_CUDASIM=1)",
              file=sys.stderr)
        return 2
    paths = [Path(p) for p in args.notebooks] or sorted(Path("solutions").rglob("*.ipynb"))
    failed = 0
    for path in paths:
        if ".ipynb_checkpoints" in path.parts:
            continue
        try:
            seconds = store(path)
            print(f"stored {path} ({seconds:.0f} s)", flush=True)
        except Exception as exc:  # keep going: one broken notebook should not hide the others' results
            failed += 1
            print(f"FAILED {path}: {type(exc).__name__}: {str(exc)[-3000:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
