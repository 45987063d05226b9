"""Solution notebooks waiting for their first GPU run still run, in the simulator.

nbval skips a notebook without stored outputs (nothing to compare; conftest.PENDING_GPU_OUTPUTS).
This test executes each such notebook with nbclient, in a temporary copy (outputs from the
simulator are never written into solutions/), and fails on the first cell that raises. It runs
only without a GPU: on a GPU, scripts/gpu_suite.sh stores the outputs and nbval takes over.
"""

import shutil
import time
from pathlib import Path

import nbformat
import pytest

import kernel_lab as kl
from conftest import notebook_requirements, pending_gpu_outputs
from kernel_lab.environment import gpu_info, unmet_requirements

ROOT = Path(__file__).resolve().parents[1]
PENDING = [p for p in sorted((ROOT / "solutions").rglob("*.ipynb")) if pending_gpu_outputs(p)]


@pytest.mark.skipif(not kl.on_simulator(), reason="on a GPU, pending notebooks are run by scripts/gpu_suite.sh")
@pytest.mark.parametrize("path", PENDING, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_notebook_pending_gpu_outputs_runs_in_the_simulator(path, tmp_path):
    from nbclient import NotebookClient

    unmet = unmet_requirements(notebook_requirements(path), simulator=True, gpu=gpu_info())
    if unmet:
        pytest.skip(f"{path.name}: " + "; ".join(unmet))
    # Run a copy beside a copy of the images it links to, never the solution itself.
    before = path.read_bytes()
    work = tmp_path / path.parent.name
    work.mkdir()
    copy = work / path.name
    shutil.copy(path, copy)
    nb = nbformat.read(copy, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    seconds = time.perf_counter() - start
    print(f"{path.name}: every cell ran in the simulator in {seconds:.0f} s")
    assert path.read_bytes() == before, "the solution notebook itself must never receive simulator outputs"
