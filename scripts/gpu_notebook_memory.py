"""Peak GPU memory of each solution notebook: how many learners can share one GPU (deploy/README.md).

Runs each notebook end to end in a fresh kernel (a copy: nothing is stored back), while a thread
samples the GPU's used memory through ``nvidia-smi`` every 0.2 s. The peak minus the memory used
before the kernel started is what one learner running that notebook costs the GPU: the CUDA
context, CuPy's and Numba's memory pools, cuBLAS workspaces and the notebook's arrays. Run it on an
otherwise idle GPU (nothing else may allocate memory meanwhile).

    PYTHONPATH=utilities python scripts/gpu_notebook_memory.py                       # every solution notebook
    PYTHONPATH=utilities python scripts/gpu_notebook_memory.py solutions/01-gpu-in-practice/*.ipynb
    PYTHONPATH=utilities python scripts/gpu_notebook_memory.py --json "$OUT/memory.json" ...
    PYTHONPATH=utilities python scripts/gpu_notebook_memory.py --nbval ...                # and compare

With ``--nbval`` each notebook runs through nbval instead (``pytest`` against its stored outputs),
so one GPU run both measures the memory and checks that the stored outputs still hold; the verdict
(nbval's summary line) goes into the table and the JSON. The JSON is rewritten after every
notebook, so a run stopped by a time limit keeps what it measured.

What is measured is the memory a notebook *needs*: Numba frees a device array lazily, keeping up to
10 freed arrays or a fifth of the GPU's memory pending (NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT /
_RATIO), so a notebook that makes a few 1 GiB arrays in turn holds 10-16 GiB of a large GPU though
it would run in much less (Numba frees what is pending when an allocation fails). The notebooks run
with NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT=0 (every free at once) unless ``--numba-defaults``. CuPy's
pool still caches the blocks it freed, as it does for a learner.

``--fit GIB`` tests instead whether a notebook runs in a GPU slice of that much memory: this script
takes all of the GPU's free memory but GIB for itself before each notebook starts (a MIG 1g.10gb
slice: ``--fit 9.5``, its usable memory) and reports whether the notebook ran to the end. A MIG slice
also has fewer SMs and less L2, which this does not imitate; memory is what decides whether it runs.

It prints one line per notebook as it goes and a markdown table at the end: the rows for
deploy/README.md's "GPU memory" column (peak per learner, learners per GPU of this size, whether a
10 GB MIG slice holds it). Every notebook runs in full, so all of them take about as long as
scripts/gpu_suite.sh: split the list over several calls where one call is limited in time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIG_SLICE_GIB = 10.0  # nvidia.com/mig-1g.10gb, the slice deploy/values.yaml offers
HEADROOM = 0.9  # learners per GPU leave a tenth of its memory free (fragmentation, a second kernel)


def used_mib(query=None) -> tuple[float, float]:
    """(used, total) MiB of GPU 0, from ``nvidia-smi`` (or from ``query``, its text, for tests)."""
    if query is None:
        query = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
                                "--id=0"], capture_output=True, text=True, check=True).stdout
    used, total = (float(x) for x in query.strip().splitlines()[0].split(","))
    return used, total


class Sampler(threading.Thread):
    """Samples used GPU memory until stopped; ``peak`` is the largest sample."""

    def __init__(self, interval: float = 0.2):
        super().__init__(daemon=True)
        self.interval, self.peak, self._stop_event = interval, 0.0, threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            self.peak = max(self.peak, used_mib()[0])
            self._stop_event.wait(self.interval)

    def stop(self) -> float:
        self._stop_event.set()
        self.join()
        self.peak = max(self.peak, used_mib()[0])
        return self.peak


@dataclass
class Result:
    notebook: str
    peak_mib: float  # above the memory used before the notebook's kernel started
    seconds: float
    error: str | None = None
    nbval: str | None = None  # with --nbval: pytest's summary line ("9 passed in 41.2s")


def run_nbval(path: Path, timeout: int) -> Result:
    """The notebook through nbval in a subprocess (pytest compares every cell with its stored
    output), sampling the GPU's memory meanwhile."""
    baseline = used_mib()[0]
    sampler = Sampler()
    sampler.start()
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-q", f"--nbval-cell-timeout={timeout}",
                           str(path)], cwd=ROOT, capture_output=True, text=True)
    peak = sampler.stop()
    lines = [line.strip("= ") for line in proc.stdout.strip().splitlines() if line.strip()]
    summary = lines[-1] if lines else f"exit {proc.returncode}"
    error = None if proc.returncode == 0 else (proc.stdout[-3000:] + proc.stderr[-1000:])
    return Result(path.relative_to(ROOT).as_posix(), max(0.0, peak - baseline), time.time() - start, error, summary)


def run_notebook(path: Path, timeout: int) -> Result:
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    baseline = used_mib()[0]
    sampler = Sampler()
    sampler.start()
    start, error = time.time(), None
    try:
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    except Exception as exc:  # noqa: BLE001  (a gated or failing notebook still has a peak up to that point)
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:200]
    peak = sampler.stop()
    return Result(path.relative_to(ROOT).as_posix(), max(0.0, peak - baseline), time.time() - start, error)


def take_all_but(gib: float):
    """Hold all of the GPU's free memory but ``gib`` GiB (returns the allocation: keep it alive)."""
    import cupy as cp

    free, _ = cp.cuda.runtime.memGetInfo()
    keep = int(gib * 1024**3)
    if free <= keep:
        raise SystemExit(f"only {free / 1024**3:.1f} GiB free: cannot leave {gib} GiB")
    return cp.cuda.runtime.malloc(free - keep)  # raw memory, outside CuPy's pool: nothing can reuse it


def learners_per_gpu(peak_mib: float, gpu_mib: float) -> int:
    return math.floor(HEADROOM * gpu_mib / peak_mib) if peak_mib > 0 else 0


def table(results: list[Result], gpu_mib: float) -> str:
    gib = gpu_mib / 1024
    rows = [f"| notebook | peak GPU memory per learner | learners per {gib:.0f} GiB GPU | fits a {MIG_SLICE_GIB:.0f} GB MIG slice |",
            "| --- | ---: | ---: | --- |"]
    for r in results:
        if r.error:
            why = r.nbval if r.nbval else r.error
            rows.append(f"| {r.notebook} | {r.peak_mib / 1024:.2f} GiB (stopped: {why}) | – | – |")
            continue
        fits = "yes" if r.peak_mib <= HEADROOM * MIG_SLICE_GIB * 1000 ** 3 / 1024 ** 2 else "no"
        rows.append(f"| {r.notebook} | {r.peak_mib / 1024:.2f} GiB | {learners_per_gpu(r.peak_mib, gpu_mib)} | {fits} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="solution notebooks (default: all of solutions/)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--nbval", action="store_true", help="run each notebook through nbval (compare outputs)")
    parser.add_argument("--fit", type=float, metavar="GIB",
                        help="leave only this much GPU memory free while each notebook runs (does it fit?)")
    parser.add_argument("--numba-defaults", action="store_true",
                        help="keep Numba's lazy frees (measures what a notebook holds, not what it needs)")
    args = parser.parse_args(argv)
    if not args.numba_defaults:  # the notebook's kernel (nbclient) or pytest inherits this environment
        os.environ["NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT"] = "0"
    hog = None
    if args.fit is not None:
        hog = take_all_but(args.fit)
    paths = [Path(p).resolve() for p in args.notebooks] or sorted((ROOT / "solutions").rglob("*.ipynb"))
    paths = [p for p in paths if ".ipynb_checkpoints" not in p.parts]
    _, total = used_mib()
    results = []
    for path in paths:
        r = (run_nbval if args.nbval else run_notebook)(path, args.timeout)
        results.append(r)
        verdict = f"; nbval: {r.nbval}" if r.nbval else ""
        print(f"{r.notebook}: peak {r.peak_mib:.0f} MiB in {r.seconds:.0f} s{verdict}" + (f"\n{r.error}" if r.error else ""),
              flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"gpu_mib": total, "numba_frees_at_once": not args.numba_defaults,
                                                   "results": [asdict(r) for r in results]},
                                                  indent=1))
    print(table(results, total))
    if hog is not None:
        import cupy as cp

        cp.cuda.runtime.free(hog)
    return 0


if __name__ == "__main__":
    sys.exit(main())
