"""Kept for the notebooks that still import this name (02.1, which also reads ``kl.scans``; 05.1,
05.4 and 05.5): the code lives in ``kernel_lab/reductions_gemm/scans.py``
(:mod:`kernel_lab.reductions_gemm.scans`), module 02's subpackage. This name is the same module
object, not a copy. Delete this file once no notebook names it."""

import sys

from .reductions_gemm import scans as _scans

sys.modules[__name__] = _scans
