"""scripts/gpu_module05_integer_probe.py runs in the simulator (--sim): the same checks and kernels as
on a GPU, at tiny sizes, without timings."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kernel_lab as kl

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not kl.on_simulator(), reason="the --sim path needs the simulator (this machine has a GPU)")
def test_the_probe_runs_in_the_simulator():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utilities"), "NUMBA_ENABLE_CUDASIM": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_module05_integer_probe.py"), "--sim"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    for line in ["int8 quantize, absmax on the GPU: bit-exact", "int4 dequantize: bit-exact", "w4a8 gemm: correct",
                 "int8 gemm, tiled: bit-exact", "W4A8, M=1:", "simulator probe done"]:
        assert line in out, f"missing {line!r} in:\n{out[-4000:]}"
