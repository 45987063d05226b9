"""Test harness shared by the unit tests and the notebook tests (nbval).

Importing kernel_lab first chooses the backend: without a GPU it switches Numba's CUDA simulator on
(the notebook kernels nbval starts inherit that choice through the environment). Each solution
notebook declares what it needs in its first code cell, ``kl.setup(requires=[...])``; a notebook
whose needs this machine cannot meet is skipped, with the same sentence the notebook itself would
print, so the pytest summary says why.

A solution notebook with no stored outputs at all (written, checked in the simulator, but not yet
run on a GPU by ``scripts/gpu_suite.sh``) has nothing for nbval to compare against: it is skipped
with the reason ``PENDING_GPU_OUTPUTS``. tests/test_pending_notebooks.py runs such notebooks in the
simulator instead, so CI still proves that every cell runs. One stored output anywhere is enough
for a notebook to be tested by nbval as usual: this rule cannot hide a notebook that has outputs.
"""

from __future__ import annotations

import ast
import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

# Checks that pass record the learner's progress (kernel_lab.progress). Tests and the notebooks nbval
# runs (their kernels inherit this environment) write to a throw-away folder, never to a real home.
os.environ["KERNEL_LAB_PROGRESS_DIR"] = tempfile.mkdtemp(prefix="kernel-lab-progress-")
atexit.register(shutil.rmtree, os.environ["KERNEL_LAB_PROGRESS_DIR"], True)

import kernel_lab  # noqa: F401  (must come before numba.cuda: it picks GPU or simulator)
from kernel_lab.environment import gpu_info, on_simulator, unmet_requirements

_SETUP_CALL = re.compile(r"setup\(\s*requires\s*=\s*(\[[^\]]*\]|\([^)]*\)|'[^']*'|\"[^\"]*\")")


def notebook_requirements(path: Path) -> list[str]:
    """The ``requires`` list of a notebook's ``kl.setup(...)`` call (empty if it has none)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        m = _SETUP_CALL.search(cell.source)
        if m:
            value = ast.literal_eval(m.group(1))
            return [value] if isinstance(value, str) else list(value)
    return []


SANITIZE = Path(__file__).resolve().parent / "tests" / "nbval_sanitize.cfg"


@pytest.fixture
def edit_kernel():
    """``edit_kernel(kernel, old, new)``: a package kernel with ``old`` (found exactly once in its source)
    replaced by ``new``, compiled with its own module's globals: the wrong kernels a check must name
    (tests/test_checks_hopper_*.py)."""
    import inspect
    import sys
    import textwrap

    from numba import cuda

    def edit(kernel, old: str, new: str):
        fn = kernel.py_func if hasattr(kernel, "py_func") else kernel.fn
        source = textwrap.dedent(inspect.getsource(fn))
        assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times"
        source = source.replace(old, new).replace("@cuda.jit\n", "", 1)
        namespace = dict(vars(sys.modules[fn.__module__]))
        exec(compile(source, f"<edited {old!r}>", "exec"), namespace)  # noqa: S102
        return cuda.jit(namespace[source.split("def ", 1)[1].split("(", 1)[0]])

    return edit


# --- the Hopper scripts' offline compile (tests/test_{async_copy,tma,wgmma}_intrinsics.py) ---------
_NVRTC_PROBE = """
from numba import cuda
def k(a):
    a[0] = 1
cuda.compile_ptx(k, "(int32[:],)", cc=(9, 0))
"""


def _nvrtc_python() -> str | None:
    """A Python with numba-cuda's real target and NVRTC: KERNEL_LAB_NVRTC_PYTHON, or the venv that
    scripts/README.md describes (/tmp/nvenv). The test command's own Python runs the simulator."""
    import subprocess

    for candidate in (os.environ.get("KERNEL_LAB_NVRTC_PYTHON"), "/tmp/nvenv/bin/python"):
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-c", _NVRTC_PROBE], capture_output=True, check=False,
                                   env=dict(os.environ, NUMBA_ENABLE_CUDASIM="0"), timeout=300)
            if probe.returncode == 0:
                return candidate
    return None


@pytest.fixture(scope="session")
def offline_script():
    """``offline_script("hopper_tma.py")`` runs ``scripts/hopper_tma.py --offline`` (compile for sm_90a,
    assemble with ptxas, check that sm_80 is refused: no GPU needed) and returns what it printed,
    having asserted that it succeeded. Skips the test without a Python with NVRTC or without ptxas."""
    import subprocess

    python = _nvrtc_python()
    if python is None:
        pytest.skip("no Python with numba-cuda's NVRTC here (set KERNEL_LAB_NVRTC_PYTHON); the script's "
                    "--offline does this check")
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas on PATH to assemble the PTX")
    root = Path(__file__).resolve().parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=f"{root / 'utilities'}:{os.environ.get('PYTHONPATH', '')}")

    def run(script: str) -> str:
        done = subprocess.run([python, str(root / "scripts" / script), "--offline"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    return run


def pytest_configure(config):
    # What nbval may ignore between a GPU's stored outputs and a simulator run (which cases a check
    # ran, a per-backend configuration): tests/nbval_sanitize.cfg says it, with why. Set here, with an
    # absolute path, so that every way of starting pytest uses it; a command line that names its own
    # file wins.
    if getattr(config.option, "nbval_sanitize_with", "unset") is None:
        config.option.nbval_sanitize_with = str(SANITIZE)


PENDING_GPU_OUTPUTS = "stored GPU outputs pending: run scripts/gpu_suite.sh on a GPU to store them"


def has_stored_outputs(path: Path) -> bool:
    """Does any code cell of the notebook carry an output (stored by a GPU run)?"""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")


def pending_gpu_outputs(path: Path) -> bool:
    """A solution notebook waiting for its first GPU run: no stored output in any cell."""
    return not has_stored_outputs(path)


def pytest_report_header(config):
    g = gpu_info()
    if on_simulator():
        return "kernel_lab: no GPU found, kernels run in the CUDA simulator (small sizes)"
    return f"kernel_lab: GPU {g.name}, compute capability {g.compute_capability}, full-size notebooks"


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown without it
def pytest_xdist_auto_num_workers(config):
    """How many workers ``-n auto`` (set in pyproject.toml) starts: one per CPU core, at most 8.

    On a GPU, one: the notebooks run at full size, and several at once would share the GPU's memory
    and time (and nbval's notebooks would wait on each other's kernels). KERNEL_LAB_TEST_WORKERS
    overrides both.
    """
    wanted = os.environ.get("KERNEL_LAB_TEST_WORKERS")
    if wanted:
        return max(1, int(wanted))
    if not on_simulator():
        return 1
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown without it
def pytest_xdist_make_scheduler(config, log):
    """Hand out the tests one by one, but a notebook's cells all to one worker.

    A notebook's cells share one Jupyter kernel and run in order, so they are one unit of work; every
    other test is a unit of its own, so that a long test file (the mutation test) spreads over all
    workers. (xdist's ``--dist loadgroup`` would do it with a mark, but it keys the groups on node ids,
    which pytest 9.2 no longer lets a plugin rewrite: the cells of a notebook were split.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class NotebooksWhole(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.endswith(".ipynb") else nodeid

    return NotebooksWhole(config, log)


def pytest_collection_modifyitems(config, items):
    reasons: dict[Path, list[str]] = {}
    for item in items:
        if type(item).__name__ != "IPyNbCell":
            continue
        path = Path(str(item.parent.path))
        if path not in reasons:
            reasons[path] = unmet_requirements(notebook_requirements(path), simulator=on_simulator(),
                                               gpu=gpu_info())
            if pending_gpu_outputs(path):
                reasons[path].append(PENDING_GPU_OUTPUTS)
        if reasons[path]:
            item.add_marker(pytest.mark.skip(reason=f"{path.name}: " + "; ".join(reasons[path])))
