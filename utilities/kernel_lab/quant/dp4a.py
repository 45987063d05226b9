"""Kept for the notebooks' imports (05.5, 05.6: ``kernel_lab.quant.dp4a``): the code lives in
:mod:`kernel_lab.device.dp4a`, the package's bottom layer, where module 02's SGEMM can import it
without reaching up into module 05. This name is the same module object, not a copy."""

import sys

from ..device import dp4a as _dp4a

sys.modules[__name__] = _dp4a
