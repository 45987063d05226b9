#!/usr/bin/env python3
"""Compile notebook 06.4's tuning candidates side by side (fills the code-generation cache).

Keep SPACE and SHAPE in step with the notebook's cells. Run by scripts/gpu_module06_suite.sh; a
file rather than an inline script because the worker processes are spawned and re-import it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "utilities"))

SHAPE = (4096, 4096, 4096)


def main():
    import kernel_lab  # noqa: F401  (before numba: chooses GPU or simulator)
    from kernel_lab.tensor_cores import configs, gemm

    space = configs.Space(tile_m=(128,), tile_n=(128, 256), threads=(128, 256), depth=(2, 4))
    cands = configs.enumerate_pipeline_configs("float16", kernel_lab.gpu_info().compute_capability, space,
                                               tile_k=(64,))
    results = gemm.precompile(cands, shape=SHAPE)
    return 1 if any(err for _, _, err in results) else 0


if __name__ == "__main__":
    sys.exit(main())
