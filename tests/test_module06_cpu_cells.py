"""Module 06's exercise cells run on a CPU, although its notebooks need a Hopper GPU.

A module 06 notebook is gated by ``kl.setup(requires=["gpu", "nvmath", ...])``, so nbval skips it
without a GPU. Its exercises are device functions that need no tensor core, each followed by its
check (``kernel_lab.checks.tensor_cores``), and those cells carry the tag ``cpu-check``: this test
runs them, in order, in the simulator, with the names the setup cell would have defined (``np``,
``kl``, ``cuda``). Each check prints ``correct``; a wrong solution or a broken check fails here.
The course/ versions of the same cells hold stubs, and must say the exercise is not done.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TAG = "cpu-check"
PRELUDE = textwrap.dedent("""
    import numpy as np
    import kernel_lab as kl
    env = kl.setup(quiet=True)
    from numba import cuda
""")


def tagged_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"]
            if c["cell_type"] == "code" and TAG in c.get("metadata", {}).get("tags", [])]


NOTEBOOKS = sorted((ROOT / "solutions" / "06-tensor-cores").glob("06.*.ipynb"))
WITH_CELLS = [p for p in NOTEBOOKS if tagged_cells(p)]


def run_cells(cells: list[str]) -> subprocess.CompletedProcess:
    """Run the cells one after another in one namespace; each prints ``cell i: ok`` or ``cell i: <error>``."""
    script = PRELUDE + textwrap.dedent(f"""
        cells = {cells!r}
        ns = dict(np=np, kl=kl, env=env, cuda=cuda)
        for i, src in enumerate(cells):
            try:
                exec(compile(src, f"<cell {{i}}>", "exec"), ns)
                print(f"cell {{i}}: ok", flush=True)
            except Exception as exc:
                print(f"cell {{i}}: {{type(exc).__name__}}: {{exc}}", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "utilities"), os.environ.get("PYTHONPATH", "")]),
               NUMBA_ENABLE_CUDASIM="1", KERNEL_LAB_QUIET="1")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)


def test_module06_has_cpu_exercises():
    assert {p.name[:4] for p in WITH_CELLS} >= {"06.2", "06.3", "06.4"}


@pytest.mark.parametrize("path", WITH_CELLS, ids=[p.name for p in WITH_CELLS])
def test_solution_exercise_cells_pass_on_cpu(path):
    cells = tagged_cells(path)
    r = run_cells(cells)
    assert r.returncode == 0, r.stderr[-4000:]
    for i in range(len(cells)):
        assert f"cell {i}: ok" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("correct") >= len(cells), r.stdout


@pytest.mark.parametrize("path", WITH_CELLS, ids=[p.name for p in WITH_CELLS])
def test_course_stubs_are_reported_not_done(path):
    """Every exercise cell of course/ (stubs in place) fails its check with 'not done yet'."""
    course = ROOT / "course" / path.parent.name / path.name
    cells = tagged_cells(course)
    assert len(cells) == len(tagged_cells(path)), "course/ is out of date: run python -m kernel_lab.exercises"
    r = run_cells(cells)
    assert r.returncode == 0, r.stderr[-4000:]
    for i in range(len(cells)):
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"cell {i}: "))
        assert "CheckFailed" in line and "not done" in line, r.stdout[-3000:]
