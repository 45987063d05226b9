"""House rules every solution notebook keeps, checked without running it."""

from pathlib import Path

import nbformat
import pytest

from kernel_lab.store_outputs import numpy_only
from conftest import PENDING_GPU_OUTPUTS, pending_gpu_outputs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "solutions").rglob("*.ipynb"))


def test_there_are_solution_notebooks():
    assert NOTEBOOKS, "no notebooks under solutions/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_notebook_starts_with_setup_and_tags_timing_cells(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "import kernel_lab as kl" in code[0].source and "kl.setup(requires=" in code[0].source, \
        "the first code cell must import kernel_lab and call kl.setup(requires=[...])"
    assert "nbval-ignore-output" in code[0].metadata.get("tags", []), \
        "the setup cell prints the machine and versions: tag it nbval-ignore-output"
    if not numpy_only(nb) or "numba" in code[0].source:  # a NumPy-only notebook need not import Numba
        assert "from numba import cuda" in code[0].source, "the setup cell must import numba.cuda"
        assert code[0].source.index("kernel_lab") < code[0].source.index("from numba import cuda"), \
            "import kernel_lab before numba.cuda: it chooses GPU or simulator"
    for cell in code:
        tags = cell.metadata.get("tags", [])
        if "kl.benchmark(" in cell.source or "kl.rooflines(" in cell.source or "kl.sweep(" in cell.source:
            assert "nbval-ignore-output" in tags, f"timing cell without nbval-ignore-output:\n{cell.source[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_stored_outputs_come_from_a_gpu_run(path):
    """Stored outputs are nbval's reference: they must not come from the simulator.

    A notebook that declares ``kl.setup(..., numpy_only=True)`` runs no kernel; its outputs may come
    from a CPU run (``python -m kernel_lab.store_outputs <notebook>`` on any machine)."""
    if pending_gpu_outputs(path):
        pytest.skip(f"{path.name}: {PENDING_GPU_OUTPUTS}")
    nb = nbformat.read(path, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "CUDA simulator: no GPU found" not in text
    assert [c for c in nb.cells if c.cell_type == "code" and c.get("outputs")], "no stored outputs"
    source = nb.metadata.get("kernel_lab", {}).get("outputs_from", "")
    if numpy_only(nb):
        assert source.startswith(("GPU", "CPU: NumPy only")), \
            "run python -m kernel_lab.store_outputs on this notebook to store its outputs"
    else:
        assert source.startswith("GPU"), "run scripts/gpu_suite.sh on a GPU machine to store this notebook's outputs"
