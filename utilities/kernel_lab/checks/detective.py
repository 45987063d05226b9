"""Checks for 06.5's detective exercises: two kernels with a planted bug, found with the tools.

The course/ notebook hands the learner two small kernels in the shape of module 06's (a tiled GEMM
that stages its tiles in shared memory, an epilogue that adds a bias and applies ReLU). Each gives
right-looking numbers on most runs and is wrong: the GEMM has a shared-memory race, the epilogue
reads outside an array. The learner runs the check, reads the tool's report, and fixes the kernel.

* :func:`check_tiled_gemm` (``kernel(a, b, c, m, n, k)``, 16 x 16 tiles and threads): on a CPU the
  simulator runs it with race detection and reports a race with both threads and both lines; on a
  GPU the check runs compute-sanitizer's racecheck over the learner's kernel (its source, written to
  a script) and quotes its summary. Then the product against float64 NumPy.
* :func:`check_bias_relu` (``kernel(x, bias, out, m, n)``, one bias per row): the simulator's
  out-of-bounds report, or memcheck's, then the values (which also catch a bias read by column
  where the matrix is taller than it is wide).

A report is quoted in the message as the tool gave it: reading it is the exercise.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
from numba import (
    cuda,  # kernel_lab (imported first, as the package's parent) chose GPU or simulator
)

from .. import progress
from ..check import CheckFailed, finishes_within
from ..environment import on_simulator
from ..validate import require_callable

TILE = 16  # the tiled GEMM's tile and block edge
ROWS = 8  # the bias kernel's block: 32 x 8 threads
TIME_LIMIT_S = 30  # the right kernels take a second or two in the simulator


def kernel_script(kernel, launch: str, constants: dict) -> str:
    """A Python program that defines ``kernel`` from its source (decorator included), the module
    constants it reads, and runs ``launch``: what compute-sanitizer needs, since it runs a whole
    process. ``constants`` maps names to values written as literals."""
    source = textwrap.dedent(inspect.getsource(kernel.py_func))
    lines = ["import numpy as np", "import kernel_lab as kl", "kl.setup(quiet=True)", "from numba import cuda"]
    lines += [f"{name} = {value!r}" for name, value in constants.items()]
    return "\n".join(lines) + "\n\n" + source + "\n" + textwrap.dedent(launch)


# The launches compute-sanitizer watches: small, ragged (the GEMM's last tiles hang over all three
# edges), and for the epilogue a matrix wider than tall, where a bias read by column leaves the array
GEMM_LAUNCH = """
a = np.random.default_rng(0).random((40, 40), dtype=np.float32)
b = np.random.default_rng(1).random((40, 36), dtype=np.float32)
c = cuda.device_array((40, 36), np.float32)
{kernel}[(3, 3), (TILE, TILE)](cuda.to_device(a), cuda.to_device(b), c, 40, 36, 40)
cuda.synchronize()
"""
BIAS_LAUNCH = """
x = np.random.default_rng(0).random((20, 40), dtype=np.float32)
bias = np.random.default_rng(1).random(20, dtype=np.float32)
out = cuda.device_array((20, 40), np.float32)
{kernel}[(2, 3), (32, ROWS)](cuda.to_device(x), cuda.to_device(bias), out, 20, 40)
cuda.synchronize()
"""

_SUMMARY = re.compile(r"=+ (?:ERROR|RACECHECK) SUMMARY: .*")


def _sanitize(name, kernel, tool, launch, constants):
    """compute-sanitizer ``tool`` over the kernel; a CheckFailed quoting its report if it finds any."""
    from ..tensor_cores import profiling

    if profiling.tool("compute-sanitizer") is None:
        print(f"compute-sanitizer is not on PATH (it comes with the CUDA toolkit): {tool} skipped for {name}")
        return
    r = _run_script(kernel, launch, constants, lambda script: profiling.sanitizer_command(script, tool))
    text = r.stdout + r.stderr
    summary = _SUMMARY.findall(text)
    counts = [int(n) for n in re.findall(r"SUMMARY: (\d+) (?:errors?|hazards?)", text)]
    # racecheck may count a hazard as a warning, which leaves the exit code 0: read the summary too
    if r.returncode == 0 and not any(counts):
        return
    report = [ln for ln in text.splitlines() if ln.startswith("=========") and ln.strip("= ")][:12]
    raise CheckFailed(f"{name}: the exercise is not done yet: compute-sanitizer's {tool} finds "
                      f"{summary[-1].strip('= ') if summary else 'errors'}:\n" + "\n".join(report))


def _run(name, launch_kernel):
    """Run a launch: on a GPU plainly (compute-sanitizer has had its turn), in the simulator with race
    detection, where a race or an out-of-bounds access becomes the check's message."""
    if not on_simulator():
        launch_kernel()
        cuda.synchronize()
        return
    from ..simulator import OutOfBoundsAccess, SharedMemoryRace, race_detection

    try:
        with race_detection(True), finishes_within(name, TIME_LIMIT_S):
            launch_kernel()
            cuda.synchronize()
    except (SharedMemoryRace, OutOfBoundsAccess) as exc:
        what = "a race" if isinstance(exc, SharedMemoryRace) else "an access outside an array"
        raise CheckFailed(f"{name}: the exercise is not done yet: the simulator finds {what}:\n{exc}") from None


def _run_by_rows(name, kernel, x, per_row, cols_per_thread=1):
    """``kernel(x, per_row, out, m, n)`` on blocks of 32 x ROWS threads over the m x n matrix (x along
    the columns, ``32 * cols_per_thread`` columns a block); ``out`` starts as NaN, so what was never
    written shows. Returns ``out`` on the host."""
    m, n = x.shape
    out = cuda.to_device(np.full((m, n), np.nan, np.float32))
    grid = (-(-n // (32 * cols_per_thread)), -(-m // ROWS))
    _run(name, lambda: kernel[grid, (32, ROWS)](cuda.to_device(x), cuda.to_device(per_row), out, m, n))
    return out.copy_to_host()


def check_tiled_gemm(kernel, *, name: str = "tiled GEMM") -> None:
    """``kernel(a, b, c, m, n, k)``: C = A @ B in float32 with 16 x 16 tiles of A and B staged in
    shared memory, one thread per output, blocks of 16 x 16 threads. Fails on a shared-memory race
    (the simulator's report, or racecheck's) and on wrong values."""
    require_callable(kernel, "kernel")
    rng = np.random.default_rng(5)
    sizes = [(40, 36, 40)] if on_simulator() else [(40, 36, 40), (1031, 517, 700)]
    if not on_simulator():
        _sanitize(name, kernel, "racecheck", GEMM_LAUNCH.format(kernel=kernel.py_func.__name__), {"TILE": TILE})
    for m, n, k in sizes:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = cuda.to_device(np.full((m, n), np.nan, np.float32))
        grid = (-(-n // TILE), -(-m // TILE))
        _run(name, lambda: kernel[grid, (TILE, TILE)](cuda.to_device(a), cuda.to_device(b), c, m, n, k))
        got = c.copy_to_host()
        want = a.astype(np.float64) @ b.astype(np.float64)
        bad = ~(np.abs(got - want) <= 1e-4 * np.sqrt(k) * (1 + np.abs(want)))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise CheckFailed(f"{name}, {m} x {n} x {k}: {int(bad.sum())} of {m * n} values wrong; the first at {idx}: "
                              f"got {got[idx]!r}, expected {want[idx]!r}")
    where = "the simulator, race detection on" if on_simulator() else "racecheck clean, and 1031 x 517 x 700"
    progress.passed(name)
    print(f"{name}: correct, no race ({where})")


def check_bias_relu(kernel, *, name: str = "bias + ReLU epilogue") -> None:
    """``kernel(x, bias, out, m, n)``: ``out = max(x + bias[row], 0)`` for an m x n float32 ``x``
    and one bias per row, blocks of 32 x 8 threads. Fails on an access outside an array (the
    simulator's report, or memcheck's) and on wrong values, on a wide and a tall matrix."""
    require_callable(kernel, "kernel")
    rng = np.random.default_rng(6)
    if not on_simulator():
        _sanitize(name, kernel, "memcheck", BIAS_LAUNCH.format(kernel=kernel.py_func.__name__), {"ROWS": ROWS})
    for m, n in ((20, 40), (45, 33)):  # wider than tall, then taller than wide
        x = rng.standard_normal((m, n)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        got = _run_by_rows(name, kernel, x, bias)
        want = np.maximum(x + bias[:, None], 0)
        if not np.allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=False):
            by_column = np.maximum(x + np.resize(bias, n)[None, :], 0)
            why = (": the bias was read by column; it holds one value per row" if np.allclose(got, by_column)
                   else "")
            raise CheckFailed(f"{name}, {m} x {n}: values wrong{why}")
    where = "the simulator's bounds checks" if on_simulator() else "memcheck clean"
    progress.passed(name)
    print(f"{name}: correct, no access outside an array ({where}; {20} x {40} and {45} x {33})")


def _run_script(kernel, launch: str, constants: dict, command, env=None) -> subprocess.CompletedProcess:
    """Write ``kernel_script(...)`` to a temporary file and run ``command(path)`` on it."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "detective.py"
        script.write_text(kernel_script(kernel, launch, constants))
        return subprocess.run(command(str(script)), capture_output=True, text=True, timeout=600, env=env)


def run_script_on_cpu(kernel, launch: str, constants: dict) -> subprocess.CompletedProcess:
    """The sanitizer's script run by the simulator instead (tests: the script itself must be sound)."""
    return _run_script(kernel, launch, constants, lambda script: [sys.executable, script],
                       env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})


def check_row_scale(kernel, *, cols_per_thread: int = 1, name: str | None = None) -> None:
    """``kernel(x, scale, out, m, n)``: ``out[r, c] = x[r, c] * scale[r]`` for an m x n float32 matrix,
    launched on blocks of 32 x 8 threads over a grid of ``(ceil(n / (32 * cols_per_thread)),
    ceil(m / 8))`` blocks (x along the columns; with ``cols_per_thread`` 4, a thread takes four
    columns 32 apart). Checked on ragged shapes, wide and tall, against NumPy (widths that leave a
    block 70, 44 and 33 columns: each of a thread's columns past the edge in some block); names
    unwritten elements and rows and columns swapped."""
    require_callable(kernel, "kernel")
    name = name or ("row_scale, coalesced" if cols_per_thread == 1 else
                    f"row_scale, {cols_per_thread} columns a thread")
    span = 32 * cols_per_thread
    rng = np.random.default_rng(7)
    for m, n in ((37, 70), (9, 300), (130, 33)):
        x = rng.standard_normal((m, n)).astype(np.float32)
        scale = rng.standard_normal(m).astype(np.float32)
        got = _run_by_rows(name, kernel, x, scale, cols_per_thread)
        if np.isnan(got).all():
            raise CheckFailed(f"{name}: the exercise is not done yet (nothing was written to out)")
        want = x * scale[:, None]
        if np.isnan(got).any():
            r, c = (int(i) for i in np.argwhere(np.isnan(got))[0])
            cols = ("blockIdx.x * 32 + threadIdx.x is a column" if cols_per_thread == 1 else
                    f"a block covers {span} columns: blockIdx.x * {span} + threadIdx.x + 32 * e for e up to "
                    f"{cols_per_thread - 1}")
            raise CheckFailed(f"{name}, {m} x {n}: {int(np.isnan(got).sum())} elements never written, the first "
                              f"at ({r}, {c}): the grid covers columns with x and rows with y ({cols})")
        if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            raise CheckFailed(f"{name}, {m} x {n}: values wrong (each row has its own scale: scale[row])")
    progress.passed(name)
    print(f"{name}: correct (37 x 70, 9 x 300, 130 x 33)")
