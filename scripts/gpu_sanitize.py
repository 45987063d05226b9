#!/usr/bin/env python3
"""Run solution notebooks under NVIDIA's compute-sanitizer and report each tool's errors (issue 38).

The simulator reports out-of-bounds accesses and shared-memory races in Python, but only at its own
small sizes and schedule; compute-sanitizer checks the compiled kernels on the GPU: ``memcheck``
(accesses outside an allocation, misaligned accesses), ``racecheck`` (shared-memory hazards between
threads), ``synccheck`` (barriers that not every thread reaches). Each notebook's code cells run in
one Python process under the tool, at the simulator's problem sizes (``KERNEL_LAB_SIZES=small``:
every access is instrumented, so full sizes would take minutes a notebook), with its checks, timings
and plots as they are (plots off-screen). One line a notebook and tool::

    memcheck   05.5-ternary               0 errors   (41 s)

A kernel that carries its mistake on purpose (01.3's race demonstration) is listed in ``PLANTED``:
the tool's report of it is expected and not counted.

Run on an H200 (2026-11-29) over the five notebooks rebuilt this session (01.3, 03.3, 05.2, 05.4,
05.5): memcheck, racecheck and synccheck found 0 errors in each; racecheck's one report was the
planted race. 05.2's timing cell reshapes by whole groups of 128 and refuses the simulator's width of
300 (2 cells raise at these sizes); its checks all ran.

A second H200 run (same day) took memcheck over 14 more notebooks (00, 01.1, 01.2, 01.4, 01.5, 02.1,
02.2, 03.1, 03.4, 04.1, 04.2, 04.3, 05.1, 05.3) and racecheck and synccheck over the five whose
kernels share memory most (02.1, 02.2, 03.1, 04.2, 04.3; 04.2's synccheck ran out of the call's
time): 0 errors in each. 04.3's one raising cell is its GPU-size configuration check. Not yet swept:
02.3, 02.4, 03.2, 04.4, 04.5, 05.6 and modules 06-07 (nvmath-python and MathDx must be carried).
The machine's NumPy must be below 2.5 (numba-cuda 0.30 calls ``np.row_stack`` at every launch):
carry ``.whl`` and install it first, or every cell fails and the tools report 0 errors of nothing.

Usage, on a GPU machine with compute-sanitizer on the PATH (its CUDA toolkit)::

    PYTHONPATH=utilities python3 scripts/gpu_sanitize.py [--tools memcheck,racecheck,synccheck] NB ...

Exit status 1 when any tool reports an error or a run does not finish; a cell that raises (GPU-only
code meeting the small sizes) is counted and the run goes on. The tool's own report is kept in
``$OUT`` (or /tmp) as ``sanitize-<tool>-<notebook>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("memcheck", "racecheck", "synccheck")
_SUMMARY = re.compile(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error)")
_RACE = re.compile(r"Error: Race reported between .*? at (?:\w+::)?(\w+)\[")
# Kernels that carry a mistake on purpose, to show it: the tool's report of them is the lesson.
PLANTED = {"reverse_without_barrier": "01.3's race, shown before the tiled transpose"}


def run_cells(path: Path) -> int:
    """Execute a notebook's code cells in this process, in order (the process the tool watches)."""
    import matplotlib

    matplotlib.use("Agg")
    nb = json.loads(path.read_text())
    os.chdir(path.parent)
    namespace = {"__name__": "__main__", "display": print}
    failed = 0
    for number, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        source = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())
        try:
            exec(compile(source, f"{path.name} cell {number} ({cell.get('id')})", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001 - report the cell and go on: most later cells still run
            # GPU-only code at the simulator's sizes can refuse a shape it never meets at full size
            # (a timing cell reshaping by whole groups): that is the small sizes, not a kernel error.
            print(f"CELL FAILED: {path.name} cell {number} ({cell.get('id')}): {type(exc).__name__}: {exc}")
            failed += 1
    print(f"CELLS FAILED: {failed}")
    return 0


def sanitize(tool: str, notebook: Path, out: Path) -> tuple[int | None, int, float, Path]:
    """(errors the tool reported, or None when the run did not finish; cells that raised; seconds; log)."""
    log = out / f"sanitize-{tool}-{notebook.stem}.log"
    env = {**os.environ, "KERNEL_LAB_SIZES": "small", "MPLBACKEND": "Agg",
           "PYTHONPATH": f"{ROOT / 'utilities'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # --report-api-errors no: cuda-bindings probes the driver's entry points with cuGetProcAddress,
    # and each probe the driver lacks is an API "error" (34 of them, the same in every notebook).
    command = ["compute-sanitizer", "--tool", tool, "--report-api-errors", "no", "--print-limit", "20",
               sys.executable, __file__, "--run", str(notebook)]
    t0 = time.perf_counter()
    with log.open("w") as handle:
        subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    text = log.read_text()
    found = _SUMMARY.search(text)  # the first summary line (a second one counts errors not printed)
    cells = re.search(r"CELLS FAILED: (\d+)", text)
    if found is None or cells is None:
        return None, 0, time.perf_counter() - t0, log
    planted = sum(1 for name in _RACE.findall(text) if name in PLANTED)
    return int(found.group(1) or found.group(2)) - planted, int(cells.group(1)), time.perf_counter() - t0, log


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="*", type=Path)
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: " + ", ".join(TOOLS))
    p.add_argument("--run", type=Path, help=argparse.SUPPRESS)  # the child: run one notebook's cells
    args = p.parse_args()
    if args.run:
        return run_cells(args.run.resolve())
    if shutil.which("compute-sanitizer") is None:
        print("scripts/gpu_sanitize.py: cannot run here: compute-sanitizer is not on the PATH "
              "(it comes with the CUDA toolkit, on a machine with a GPU)", file=sys.stderr)
        return 2
    tools = [t for t in args.tools.split(",") if t]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown or not args.notebooks:
        p.error(f"unknown tools {unknown}" if unknown else "name at least one notebook")
    out = Path(os.environ.get("OUT") or "/tmp")
    bad = 0
    for notebook in args.notebooks:
        for tool in tools:
            errors, cells, seconds, log = sanitize(tool, notebook.resolve(), out)
            verdict = "did not finish (see the log)" if errors is None else f"{errors} errors"
            if cells:
                verdict += f", {cells} cells raised at these sizes"
            print(f"{tool:<10} {notebook.stem:<40} {verdict:<45} ({seconds:.0f} s)", flush=True)
            bad += errors is None or errors > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
