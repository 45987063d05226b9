"""Kept for the notebooks' imports (02.3, 06.4: ``kernel_lab.tensor_cores.tuner``): the code lives in
:mod:`kernel_lab.tuner`, beside the timing helpers, because module 02's SGEMM tunes with it too and may
not import module 06. This name is the same module object, not a copy."""

import sys

from .. import tuner as _tuner

sys.modules[__name__] = _tuner
