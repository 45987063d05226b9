"""Colab (kernel_lab.colab): the install a course notebook's first cell runs there, fed the Colab it sees.

No Colab here: each test gives the logic what a Colab runtime presents (``google.colab`` among the
modules, ``COLAB_RELEASE_TAG`` in the environment, the text ``nvidia-smi`` prints).
"""

import re
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from kernel_lab import colab, exercises

ROOT = Path(__file__).resolve().parents[1]
SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver}              Driver Version: {driver}      CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+
"""
T4 = (SMI.format(driver="550.54.15", cuda="12.4"), "Tesla T4, 7.5\n")
A100_CUDA12 = (SMI.format(driver="550.54.15", cuda="12.4"), "NVIDIA A100-SXM4-40GB, 8.0\n")
H100_CUDA13 = (SMI.format(driver="580.65.06", cuda="13.0"), "NVIDIA H100 80GB HBM3, 9.0\n")


def test_colab_is_recognised_by_its_module_or_its_environment():
    assert colab.on_colab(modules={"google.colab": object()}, environ={})
    assert colab.on_colab(modules={}, environ={"COLAB_RELEASE_TAG": "release-colab_20251101-060117_RC00"})
    assert not colab.on_colab(modules={"sys": sys}, environ={"HOME": "/root"})


def test_a_t4_gets_cu12_and_one_sentence_naming_the_modules_it_cannot_run():
    p = colab.plan(*T4, module="01")
    assert p.extra == "cu12" and p.pip_args[-1] == colab.pip_source("cu12")
    (sentence,) = [m for m in p.messages if "compute capability 7.5" in m]
    assert "every module except 06 and 07, which need compute capability 8.0 or newer" in sentence
    assert sentence.count(". ") == 0 and sentence.endswith(".")  # one sentence


def test_an_ampere_gpu_on_a_cuda12_driver_is_told_what_needs_cuda13():
    p = colab.plan(*A100_CUDA12)
    assert p.extra == "cu12"
    assert any("modules 06 and 07 need a CUDA 13 driver" in m for m in p.messages)


def test_a_cuda13_driver_gets_cu13_and_no_warning():
    p = colab.plan(*H100_CUDA13, module="06")
    assert p.extra == "cu13" and p.pip_args[-1].startswith("kernel-lab[cu13] @ git+https://github.com/")
    assert len(p.messages) == 1


def test_a_cpu_runtime_installs_the_simulator_route():
    p = colab.plan(None, None)
    assert p.extra is None and p.pip_args[-1] == colab.pip_source()
    assert "simulator" in p.messages[0]


def test_the_install_cell_does_nothing_off_colab_and_installs_on_colab(monkeypatch):
    source = colab.install_cell("06")
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(args))
    exec(compile(source, "cell", "exec"), {})
    assert calls == []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    exec(compile(source, "cell", "exec"), {})
    assert calls[0][-1] == colab.pip_source() and "--no-deps" in calls[0]
    assert calls[1][1].endswith("kernel_lab/colab.py") and calls[1][-2:] == ["--module", "06"]


def test_the_script_runs_alone_and_reports_a_gpu_less_machine():
    """colab.py runs as a file (the package's dependencies are not installed yet when it runs)."""
    out = subprocess.run([sys.executable, str(Path(colab.__file__)), "--dry-run"], capture_output=True, text=True,
                         env={"PATH": "/nonexistent"}, check=True).stdout
    assert "No GPU in this Colab runtime" in out and "would run: pip install -q kernel-lab @ git+" in out


def test_generated_course_notebooks_carry_their_badge_and_install_cell():
    sol = ROOT / "solutions/01-gpu-in-practice/01-threads-blocks-grids.ipynb"
    ex = exercises.make_exercise(nbformat.read(sol, as_version=4), "solutions/01-gpu-in-practice/01-threads-blocks-grids.ipynb")
    assert ex.cells[0].metadata["tags"] == [colab.INSTALL_CELL_TAG] and '"--module", "01"' in ex.cells[0].source
    first_md = next(c for c in ex.cells if c.cell_type == "markdown")
    assert first_md.source.startswith(colab.badge("course/01-gpu-in-practice/01-threads-blocks-grids.ipynb"))


def missing_badges(root: Path, badge=colab.badge) -> list[str]:
    """Generated course notebooks whose first markdown cell lacks their own badge. A learner's own
    notebooks, backups and notebooks they edited are theirs: not checked (the generator reports them)."""
    missing = []
    for state in exercises.course_states(root):
        if state.kind not in ("in sync", "run"):
            continue
        nb = nbformat.read(root / state.path, as_version=4)
        first_md = next((c for c in nb.cells if c.cell_type == "markdown"), None)
        if first_md is None or badge(state.path) not in first_md.source:
            missing.append(state.path)
    return missing


def test_every_course_notebook_has_its_own_badge():
    assert missing_badges(ROOT) == []


def test_a_learners_own_notebook_needs_no_badge(tmp_path):
    sol = new_notebook(cells=[new_markdown_cell("# demo"), new_code_cell("print(1)")])
    (tmp_path / "solutions" / "00-x").mkdir(parents=True)
    nbformat.write(sol, tmp_path / "solutions" / "00-x" / "demo.ipynb")
    exercises.generate(tmp_path, log=lambda m: None)
    nbformat.write(new_notebook(cells=[new_code_cell("print('mine')")]), tmp_path / "course" / "00-x" / "mine.ipynb")
    assert missing_badges(tmp_path) == []
    # the check can fail: a generated notebook without the badge asked for is reported
    assert missing_badges(tmp_path, badge=lambda path: f"[another badge for {path}]") == ["course/00-x/demo.ipynb"]


def test_the_readme_module_map_has_a_badge_per_notebook():
    readme = (ROOT / "README.md").read_text()
    rows = [line for line in readme.splitlines() if re.match(r"\| `\d\d-[^`]+/[^`]+` ", line)]
    assert rows
    for row in rows:
        name = re.match(r"\| `([^`]+)`", row).group(1)
        assert (ROOT / "course" / f"{name}.ipynb").exists(), f"README names {name}, which course/ lacks"
        assert colab.badge(f"course/{name}.ipynb") in row, (
            f"README module map row of {name} lacks its Colab badge: add {colab.badge(f'course/{name}.ipynb')}")
