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


def _sass(lines):
    return "\n".join(f"        /*{16 * i:04x}*/                   {text} ;" for i, text in enumerate(lines))


def test_main_loop_mix_counts_the_inner_loop_once_per_trip():
    from kernel_lab.reductions_gemm.bench import main_loop_mix

    # prologue; outer loop [1, 9] holding an inner loop [2, 5] (3 FFMA + 1 LDS + branch) run twice
    # per tile; then a longer edge-path loop that must not be taken for the main loop
    lines = ["MOV R1, R2", "LDG.E.128 R4, desc[UR4][R2.64]", "LDS.128 R8, [R3]", "FFMA R10, R8, R9, R10",
             "FFMA R11, R8, R9, R11", "@P0 BRA 0x20", "STS [R3], R4", "BAR.SYNC.DEFER_BLOCKING 0x0",
             "IADD3 R3, R3, 0x40, RZ", "@P1 BRA 0x10",
             "FFMA R12, R8, R9, R12", "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ",
             "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ",
             "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ", "IMAD R1, R1, R2, RZ", "@P2 BRA 0xa0", "EXIT"]
    text = main_loop_mix(_sass(lines), fma_per_tile=4)
    # per tile: outer 9 instructions + one more inner trip of 4 = 13, with 4 FFMA
    assert text.startswith("main loop, per tile of K: 4 FFMA/DFMA among 13 instructions (31%)"), text
    assert "inner loops (1 tile per trip): 4 instructions, 50% FFMA/DFMA, 2x" in text
    assert "LDG 1" in text and "BAR 1" in text and "IMAD" not in text
    assert main_loop_mix(_sass(["MOV R1, R2", "EXIT"])).endswith("no loop around them")


def test_main_loop_mix_reads_nvdisasm_labels():
    """Numba's inspect_sass (nvdisasm) names branch targets by label, not address."""
    from kernel_lab.reductions_gemm.bench import main_loop_mix

    text = "\n".join([
        "        /*0000*/                   MOV R1, R2 ;",
        ".L_x_0:",
        "        /*0010*/                   LDS.128 R8, [R3] ;",
        "        /*0020*/                   FFMA R10, R8, R9, R10 ;",
        "        /*0030*/               @P0 BRA `(.L_x_0) ;",
        "        /*0040*/                   EXIT ;"])
    assert main_loop_mix(text).startswith("main loop, per trip: 1 FFMA/DFMA among 3 instructions (33%)")
