"""The names notebooks 05.1, 05.2, 05.5, 05.6 and 06.3 import from ``kernel_lab.quant.kernels``, kept
for those imports (``from kernel_lab.quant import kernels as qk``, ``from kernel_lab.quant.kernels
import round_clamp_fadd``). Nothing is defined here: each name is the object of its home, one file
per notebook's kernels, and the package itself imports from the homes.

- :mod:`.int8`: 05.1's INT8 and UINT8 quantizers, and the rounding by one float addition;
- :mod:`.int4`: 05.2's INT4 groups (the notebook imports that module itself);
- :mod:`.ternary`: 05.5's ternary quantizers, per-token INT8 and ternary GEMMs;
- :mod:`.int8_gemm`: 05.6's INT8 GEMMs on DP4A (exact and W8A8), and ``sass_count``;
- :mod:`.w4a8`: 05.6's W4A8 on DP4A; :mod:`.w4a8_mma`: W4A8 on the tensor cores and
  ``launch_w4a8_fast``, which picks between the two;
- :mod:`.integer`: the host helpers ``pad_cols`` and ``as_words``; :mod:`.warp`: the warp sums.

Code that is not a notebook imports the home, not this module.
"""

from __future__ import annotations

from .int8 import round_clamp_fadd, with_device_functions  # noqa: F401  (05.1)
from .warp import warp_max_f32, warp_sum_f32  # noqa: F401  (05.2, 05.6)
from .ternary import (abs_sum, activation_words, launch_int8_rows, launch_ternary_quantize_fast,  # noqa: F401
                      ternary_byte_words, ternary_code, weight_words)  # (05.5)
from .int8_gemm import (DP4A_TILES_GPU, DP4A_TILES_SIM, TILED_GPU, TILED_SIM,  # noqa: F401  (05.6)
                        dp4a_warptile_launcher, k_major_words, sass_count)
from .w4a8 import GROUP_WORDS, MT, launch_w4a8_gemm_words  # noqa: F401  (05.6)
from .w4a8_mma import launch_w4a8_fast  # noqa: F401  (06.3)
from .integer import as_words, pad_cols  # noqa: F401  (05.6, 06.3)
