"""Kept for the command line that notebook 02.3's introduction prints (``python -m kernel_lab.bench_sgemm``):
the code lives in :mod:`kernel_lab.reductions_gemm.bench` (``python -m kernel_lab.reductions_gemm.bench``).
Imported, this name is that module object, not a copy. Delete this file once no notebook names it."""

import sys

from .reductions_gemm import bench as _bench

if __name__ == "__main__":
    sys.exit(_bench.main())
else:
    sys.modules[__name__] = _bench
