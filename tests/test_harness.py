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
