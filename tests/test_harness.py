"""The notebook harness: requirements are read from the setup cell; outputs are stored only from a GPU."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

import kernel_lab as kl
from conftest import notebook_requirements
from kernel_lab import store_outputs


@pytest.mark.parametrize("source, expected", [
    ('import kernel_lab as kl\nenv = kl.setup(requires=["gpu", "cupy"])', ["gpu", "cupy"]),
    ("env = kl.setup(requires=('warp',))", ["warp"]),
    ("env = kl.setup(requires='nvmath')", ["nvmath"]),
    ("env = kl.setup(requires=[])", []),
    ("print('no setup here')", []),
])
def test_requirements_are_read_from_the_setup_call(tmp_path, source, expected):
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), path)
    assert notebook_requirements(path) == expected


@pytest.mark.skipif(not kl.on_simulator(), reason="checks the refusal without a GPU")
def test_outputs_are_never_stored_from_the_simulator(capsys):
    assert store_outputs.main([]) == 2
    assert "must come from a GPU run" in capsys.readouterr().err


# ---- notebooks that run no kernel (NumPy only) ------------------------------------------------------

def _numpy_only_notebook(path, flag="numpy_only=True"):
    setup = new_code_cell(f"import kernel_lab as kl\nenv = kl.setup(requires=[], {flag})")
    nbformat.write(new_notebook(cells=[setup, new_code_cell("print(6 * 7)")]), path)
    return path


def test_numpy_only_is_read_from_the_setup_call(tmp_path):
    assert store_outputs.numpy_only(_numpy_only_notebook(tmp_path / "a.ipynb"))
    assert not store_outputs.numpy_only(_numpy_only_notebook(tmp_path / "b.ipynb", flag="quiet=True"))


def test_numpy_only_setup_says_no_gpu_is_needed(capsys):
    env = kl.setup(requires=["matplotlib"], numpy_only=True)
    out = capsys.readouterr().out
    assert env.numpy_only and out.startswith("No GPU needed: this notebook runs NumPy on the CPU")
    assert "simulator" not in out
    with pytest.raises(ValueError, match="needs no GPU, but it requires gpu"):
        kl.setup(requires=["gpu"], numpy_only=True)


@pytest.mark.skipif(not kl.on_simulator(), reason="checks what is stored without a GPU")
def test_without_a_gpu_only_numpy_only_notebooks_are_stored(tmp_path, capsys):
    kernels = _numpy_only_notebook(tmp_path / "kernels.ipynb", flag="quiet=True")
    assert store_outputs.main([str(kernels)]) == 2
    assert "These need a GPU: " + str(kernels) in capsys.readouterr().err
    numpy_nb = _numpy_only_notebook(tmp_path / "numpy.ipynb")
    assert store_outputs.main([str(numpy_nb)]) == 0
    nb = nbformat.read(numpy_nb, as_version=4)
    assert nb.metadata["kernel_lab"]["outputs_from"].startswith("CPU: NumPy only, no GPU used")
    assert nb.cells[1].outputs[0]["text"] == "42\n"


def _notebook(tmp_path, outputs_in=()):
    from nbformat.v4 import new_output

    cells = [new_code_cell("import kernel_lab as kl\nenv = kl.setup(requires=[])"), new_code_cell("print(1)"),
             new_code_cell("x = 2")]
    for i in outputs_in:
        cells[i].outputs = [new_output("stream", name="stdout", text="1\n")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    return path


def test_a_notebook_without_any_output_is_pending_and_any_output_makes_it_tested(tmp_path):
    from conftest import pending_gpu_outputs

    assert pending_gpu_outputs(_notebook(tmp_path))
    for cell in range(3):  # one stored output in any cell is enough to be tested by nbval
        assert not pending_gpu_outputs(_notebook(tmp_path, outputs_in=[cell]))


def test_the_pending_rule_hides_no_solution_notebook_that_has_outputs():
    from pathlib import Path

    from conftest import has_stored_outputs, pending_gpu_outputs

    root = Path(__file__).resolve().parents[1] / "solutions"
    for path in sorted(root.rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
            assert has_stored_outputs(path) and not pending_gpu_outputs(path), path


def test_pending_notebooks_are_skipped_with_the_reason():
    """The collection hook adds the pending reason to exactly the notebooks without outputs."""
    from pathlib import Path

    import conftest

    class Item:
        def __init__(self, path):
            self.parent = type("P", (), {"path": path})()
            self.markers = []

        def add_marker(self, marker):
            self.markers.append(marker)

    Item.__name__ = "IPyNbCell"
    root = Path(__file__).resolve().parents[1] / "solutions"
    items = [Item(p) for p in sorted(root.rglob("*.ipynb"))]
    conftest.pytest_collection_modifyitems(None, items)
    for item in items:
        reasons = " ".join(m.kwargs.get("reason", "") for m in item.markers)
        assert (conftest.PENDING_GPU_OUTPUTS in reasons) == conftest.pending_gpu_outputs(item.parent.path), \
            item.parent.path


def test_setup_says_when_a_package_is_outside_the_tested_releases():
    from kernel_lab.environment import untested_versions

    assert untested_versions({"numba-cuda": "0.30.4", "numpy": "2.4.6", "nvmath-python": "1.0.0"}) == []
    notes = untested_versions({"numba-cuda": "0.31.0", "numpy": "2.5.0", "nvmath-python": "1.0.2rc1"})
    assert notes == [
        "note: numba-cuda 0.31.0 is outside the releases this course is tested with (0.30.x); "
        "if something breaks, see docs/dependencies.md",
        "note: numpy 2.5.0 is outside the releases this course is tested with (2.0 or newer, before 2.5); "
        "if something breaks, see docs/dependencies.md"]
    # NumPy 2.5 with numba-cuda 0.30: not just untested, known to break every GPU launch
    assert untested_versions({"numba-cuda": "0.30.4", "numpy": "2.5.2"}) == [
        "note: numpy 2.5.2 is outside the releases this course is tested with (2.0 or newer, before 2.5); "
        "numba-cuda 0.30.4 looks up np.row_stack, which NumPy 2.5 removed, so every GPU kernel fails to compile "
        "(the simulator is not affected): pip install 'numpy<2.5'"]
