"""FP64 matrix multiplication emulated with INT8 products: the Ozaki scheme (module 07).

The idea in three lines: scale every row of A (column of B) by a power of two so that its largest
entry is below 1, cut each scaled number into ``s`` signed 8-bit digits ("slices"), multiply slices
with exact integer arithmetic (INT8 tensor cores, INT32 accumulation), and put the FP64 result back
together with the powers of two.

Modules, one job each:

- ``slicing``: the number format: row/column exponents, slices as signed base-256 digits, the
  bits each slice count holds, the largest K whose INT32 sums are exact.
- ``reference``: the whole scheme in NumPy (exact integer slice products, diagonal sums,
  reconstruction), the accurate float64 reference it is measured against (compensated dot
  products), and the error metrics.
- the classic mistakes of notebook 07.1's exercises, and the checks that name them, live in
  ``kernel_lab.checks.ozaki`` (with the other modules' checks).
- ``ozaki2``: the Ozaki-II scheme (moduli and the Chinese remainder theorem), in NumPy.
- ``nonfinite``: Inf and NaN inputs: read as zeros by the schemes, then the rows and columns that
  hold them recomputed by a plain float64 product, so every emulated GEMM returns DGEMM's +-Inf
  and NaN (NumPy and CuPy alike).
- ``auto``: how many slices (Ozaki-I) or moduli (Ozaki-II) the inputs need for the accuracy asked
  for, predicted from the exponent spread of A's rows and B's columns.
- ``gpu``, ``gpu_ozaki2``: the GPU kernels and launchers of both schemes (need a GPU for the INT8
  products; their plain-Numba kernels also run in the simulator).
- ``bench``: every method of both schemes beside cuBLAS DGEMM on this GPU
  (``python -m kernel_lab.ozaki.bench``).

Everything but ``gpu`` and ``gpu_ozaki2`` is NumPy and runs on any machine; the learner writes
module 07's GPU kernels in the notebooks, and those two modules hold the course's own versions.
"""

from .slicing import (BITS_PER_SLICE, MAX_SLICES, exponents, join_slices, max_exact_k, scaled_bits,  # noqa: F401
                      split)
from .reference import (accurate_matmul, diagonal_sums, emulated_matmul, errors, pair_products,  # noqa: F401
                        reconstruct)
