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
