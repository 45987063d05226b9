"""scripts/gpu_module05_float_probe.py runs in the simulator (--sim): the formats table without the
checks (the checks themselves are tested in test_checks_quant_float.py), and refuses --sim on a GPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kernel_lab as kl

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_module05_float_probe.py"


@pytest.mark.skipif(not kl.on_simulator(), reason="the --sim path needs the simulator (this machine has a GPU)")
def test_the_probe_runs_in_the_simulator():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utilities"), "NUMBA_ENABLE_CUDASIM": "1"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--sim", "--skip-checks"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    for name in ["INT8 (per tensor)", "INT4 g128", "ternary", "FP8 E4M3", "FP8 E5M2", "NVFP4", "MXFP4", "MXFP8"]:
        assert name in out, f"missing {name!r} in:\n{out[-4000:]}"
    assert "simulator probe done" in out


def test_the_probe_refuses_sim_on_a_gpu_and_explains():
    if kl.on_simulator():
        pytest.skip("on this machine --sim is the right path")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utilities")}
    run = subprocess.run([sys.executable, str(SCRIPT), "--sim"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 2 and "NUMBA_ENABLE_CUDASIM=1" in run.stderr
