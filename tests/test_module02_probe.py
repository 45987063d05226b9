"""scripts/gpu_module02_probe.py runs in the simulator (--sim): the same checks and kernels as on a
GPU, at tiny sizes, without timings."""

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
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_module02_probe.py"), "--sim"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=1200)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    for line in ["absmax, grid-stride: correct", "single-pass scan: correct", "6 block schedules",
                 "SGEMM 8 double buffering: correct", "DGEMM: correct", "9 autotuned"]:
        assert line in out, f"missing {line!r} in:\n{out[-4000:]}"
    assert "simulator probe done" in out


def test_the_probe_refuses_sim_on_a_gpu_and_explains():
    if kl.on_simulator():
        pytest.skip("needs a GPU to refuse --sim")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_module02_probe.py"), "--sim"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "NUMBA_ENABLE_CUDASIM=1" in run.stderr
