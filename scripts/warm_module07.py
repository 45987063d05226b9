"""Fill the cuBLASDx code-generation cache for module 07's notebooks, in parallel processes.

    python scripts/warm_module07.py [size ...]      (default: 8192 4096 2048)

Every pipeline kernel of module 07 (the course's and the learner's) uses the same cuBLASDx device
functions for a given padded shape; compiling the fused, partly fused and unfused kernels once per
shape, side by side, generates all of them in the time of the slowest job.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utilities"))


def main(argv):
    import kernel_lab  # noqa: F401  (GPU backend before numba.cuda)
    from kernel_lab.ozaki import gpu

    sizes = [int(x) for x in argv] or [8192, 4096, 2048]
    jobs = [(m, (n, n, n)) for n in sizes for m in ("fused", "partial", "unfused")]
    results = gpu.precompile(jobs)
    return 1 if any(err for _, _, err in results) else 0


if __name__ == "__main__":  # the pool's processes re-import this file: keep the work under the guard
    sys.exit(main(sys.argv[1:]))
