"""Learner progress (kernel_lab.progress): passing checks record themselves locally, and are tabled."""

import json
import os

import numpy as np

import kernel_lab as kl
from kernel_lab import cli, progress

NB = "/home/jovyan/course/01-gpu-in-practice/02-memory-hierarchy.ipynb"


def test_the_test_suite_never_writes_to_a_real_home():
    where = os.environ.get(progress.DIR_ENV, "")
    assert where and not where.startswith(os.path.expanduser("~")), where


def test_a_passing_check_records_itself_and_a_failing_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.DIR_ENV, str(tmp_path))
    monkeypatch.setenv("JPY_SESSION_NAME", NB)
    kl.check_array("scale columns", np.ones(3, np.float32), np.ones(3))
    kl.check_array("scale columns", np.ones(3, np.float32), np.ones(3))
    try:
        kl.check_array("wrong one", np.zeros(3, np.float32), np.ones(3))
    except kl.CheckFailed:
        pass
    data = json.loads((tmp_path / "progress.json").read_text())
    (entry,) = data["passed"]
    assert (entry["module"], entry["notebook"], entry["check"], entry["times"]) == \
        ("01", "02-memory-hierarchy.ipynb", "scale columns", 2)


def test_the_switch_turns_recording_off(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(progress.SWITCH_ENV, "off")
    kl.check_array("x", np.ones(3, np.float32), np.ones(3))
    assert not (tmp_path / "progress.json").exists()


def test_a_probe_inside_paused_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.DIR_ENV, str(tmp_path))
    with progress.paused():
        progress.passed("probe")
    assert not (tmp_path / "progress.json").exists()


def test_an_unwritable_place_never_breaks_a_check(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(progress.DIR_ENV, str(blocker / "sub"))
    kl.check_array("x", np.ones(3, np.float32), np.ones(3))  # no exception


def test_modules_come_from_the_notebook_path():
    assert progress.module_of(NB) == "01"
    assert progress.module_of("solutions/02-reductions-and-gemm/02.3-sgemm-progression.ipynb") == "02"
    assert progress.module_of("solutions/02-reductions-and-gemm/02.3b-sgemm-warp-tiling.ipynb") == "02"
    assert progress.module_of("07.2-slicing-on-the-gpu.ipynb") == "07"
    assert progress.module_of("Untitled.ipynb") == progress.UNKNOWN_MODULE
    assert progress.module_of(None) == progress.UNKNOWN_MODULE


def test_a_notebook_run_outside_jupyterlab_is_filed_under_its_folders_module(tmp_path, monkeypatch):
    # nbclient and nbval name no notebook, but start the kernel in the notebook's folder
    folder = tmp_path / "course" / "05-quantization"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    env = {progress.DIR_ENV: str(tmp_path / "p")}
    progress.passed("int8 quantize", environ=env)
    (entry,) = progress.load(progress.progress_file(env))["passed"]
    assert entry["module"] == "05" and entry["notebook"] is None
    assert progress.module_of_folder(tmp_path) == progress.UNKNOWN_MODULE


def _learner(folder, checks):
    env = {progress.DIR_ENV: str(folder)}
    for notebook, check in checks:
        progress.passed(check, notebook=notebook, environ=env)


def test_one_learner_table_and_several_learners_aggregated(tmp_path, capsys):
    _learner(tmp_path / "ada", [(NB, "strided copy"), (NB, "scale columns"),
                                ("course/00-getting-started/00-getting-started.ipynb", "saxpy")])
    _learner(tmp_path / "bob", [("course/00-getting-started/00-getting-started.ipynb", "saxpy")])
    mine = progress.report(environ={progress.DIR_ENV: str(tmp_path / "ada")})
    rows = [line.split(None, 2) for line in mine.splitlines()[2:]]
    assert rows == [["00", "1", "saxpy"], ["01", "2", "scale columns, strided copy"]]
    assert cli.main(["progress", str(tmp_path / "ada"), str(tmp_path / "bob")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["learner", "00", "01", "total"]
    assert lines[1].split() == ["ada", "1", "2", "3"] and lines[2].split() == ["bob", "1", "0", "1"]


def test_no_file_yet_says_so(tmp_path):
    assert "no progress recorded yet" in progress.report(environ={progress.DIR_ENV: str(tmp_path)})


def test_both_console_scripts_are_declared():
    from pathlib import Path

    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    scripts = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kernel-lab"] == "kernel_lab.cli:main"
    assert scripts["kernel-lab-exercises"] == "kernel_lab.exercises:main"  # kept for existing instructions


def test_every_check_module_records_the_checks_it_passes():
    """Each success line a check prints (``print(f"{name}: ...")``) sits next to its
    ``progress.passed(name)``: a checks module added later cannot forget the learner's progress."""
    import re
    from pathlib import Path

    checks = Path(progress.__file__).parent / "checks"
    missing = []
    for path in sorted(checks.glob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            beside = lines[i - 1] + lines[i + 1] if i + 1 < len(lines) else lines[i - 1]
            if re.match(r"\s*print\(f\"\{name\}", line) and "progress.passed(" not in beside:
                missing.append(f"{path.name}:{i + 1}")
    assert not missing, f"success messages without progress.passed(name) beside them: {missing}"
