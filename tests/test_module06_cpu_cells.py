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

from kernel_lab import exercises

ROOT = Path(__file__).resolve().parents[1]
TAG = "cpu-check"
PRELUDE = textwrap.dedent("""
    import linecache
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
                name = f"<cell {{i}}>"
                linecache.cache[name] = (len(src), None, src.splitlines(True), name)  # as IPython does: inspect finds the source
                exec(compile(src, name, "exec"), ns)
                print(f"cell {{i}}: ok", flush=True)
            except Exception as exc:
                print(f"cell {{i}}: {{type(exc).__name__}}: {{exc}}", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "utilities"), os.environ.get("PYTHONPATH", "")]),
               NUMBA_ENABLE_CUDASIM="1", KERNEL_LAB_QUIET="1")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)


def test_module06_has_cpu_exercises():
    assert {p.name[:4] for p in WITH_CELLS} >= {"06.1", "06.2", "06.3", "06.4"}


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
    if exercises.learner_edited(course):  # a learner's answers are theirs: solved stubs are no defect
        pytest.skip(f"{course.relative_to(ROOT)}: you have edited it; your edits are kept (its stubs are not checked)")
    cells = tagged_cells(course)
    assert len(cells) == len(tagged_cells(path)), "course/ is out of date: run python -m kernel_lab.exercises"
    r = run_cells(cells)
    assert r.returncode == 0, r.stderr[-4000:]
    for i in range(len(cells)):
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"cell {i}: "))
        assert "CheckFailed" in line and "not done" in line, r.stdout[-3000:]


# Mutants of the solutions' own exercise code: one small wrong edit each, which the notebook's check
# must reject (CheckFailed, or an error the simulator raises inside the harness).
MUTANTS = {
    "06.1": [("16 if inside else 0)\n        for j in range(2):  # B", "16)\n        for j in range(2):  # B"),  # no zero fill
             ("return 4 * r + (c ^ ((r >> 1) & 3))", "return 4 * r + (c ^ (r & 3))"),
             ("stage + A_BYTES + 16 * b_pos(r, c)", "stage + 16 * b_pos(r, c)"),
             ("gr, gc = row0 + r, k0 + 8 * c", "gr, gc = row0 + r, k0 + c"),
             ("return 128 * (r >> 3) + 64 * (c >> 3) + 8 * (r & 7) + ((c & 7) ^ (r & 7))",
              "return 16 * r + ((c & 7) ^ (r & 7)) + 8 * (c >> 3)"),
             # the pipeline kernel (Exercise 4) and its persistent walk (Exercise 5)
             ("if row0 + TM <= m and col0 + TN <= n and n % 4 == 0:", "if row0 + TM <= m and col0 + TN <= n:"),
             ("if row0 + TM <= m and col0 + TN <= n and n % 4 == 0:", "if True:"),
             ("if row0 + r < m and col0 + c < n:\n                    out[row0 + r, col0 + c] = frag[i]",
              "if True:\n                    out[row0 + r, col0 + c] = frag[i]"),
             ("MM.get_layout_gmem_c(n)", "MM.get_layout_gmem_c(TN)"),
             ("tile = device_pipeline.get_tile(smem, cuda.blockIdx.x, cuda.blockIdx.y)",
              "tile = device_pipeline.get_tile(smem, cuda.blockIdx.y, cuda.blockIdx.x)"),
             ("            acc.clear()\n", "\n"),
             ("nxt = t + cuda.gridDim.x", "nxt = t + 1"),
             ("if nxt < total:  # the next tile", "if True:  # the next tile"),
             ("            t, bm, bn = nxt, nbm, nbn\n", "            bm, bn = nbm, nbn\n")],  # a walk that never ends
    "06.2": [("x = value + bias", "x = value"),
             ("return HALF * x * (ONE +", "return x * (ONE +"),
             ("return HALF * x * (ONE +", "return 0.5 * x * (ONE +"),  # float64 from a Python float
             ("math.floor(mul_rn(float(acc), float(scale)) + 0.5)", "math.floor(float(acc) * float(scale) + 0.5)"),
             ("math.floor(mul_rn(float(acc), float(scale)) + 0.5)", "round(mul_rn(float(acc), float(scale)))"),
             ("return int(min(max(q, -128.0), 127.0))", "return int(q)"),
             ("e = math.exp(args[0] * value - stats[lrow])", "e = math.exp(args[0] * value)"),
             ("if tid < tile_m and row0 + tid < m:", "if tid < tile_m - 1 and row0 + tid < m:"),
             ("total += row_sum[bz, r, t] * math.exp(row_max[bz, r, t] - big)", "total += row_sum[bz, r, t]"),
             # the fused store of the pipeline kernel (Exercise 5) and its chunked loads (Exercise 6)
             ("                frag[i] = act(frag[i], bias[row0 + r])\n", "\n"),
             ("frag[i] = act(frag[i], bias[row0 + r])", "frag[i] = act(frag[i], bias[col0 + c])"),
             ("loaded[j] = bias[row0 + r]", "loaded[j] = bias[row0 + j]"),
             ("frag[base + j] = act(frag[base + j], loaded[j])", "frag[j] = act(frag[j], loaded[j])")],
    "06.3": [("return x[bz if x.shape[0] > 1 else 0, row, col]", "return x[bz, row, col]"),
             ("if row < rows and col < cols:", "if row < rows + 1 and col < cols:"),
             ("ih, iw = oh + r - P, ow + s - P", "ih, iw = oh + r, ow + s"),
             ("if 0 <= ih < H and 0 <= iw < W:", "if 0 < ih < H and 0 <= iw < W:"),
             ("return nib - 16 if nib >= 8 else nib", "return nib"),
             ("nib = (byte >> 4) & 15 if n & 1 else byte & 15", "nib = byte & 15 if n & 1 else (byte >> 4) & 15"),
             ("ih, iw = oh + tr - P, ow + ts - P", "ih, iw = oh + tr, ow + ts"),
             ("tap, ch = gc // C, gc % C", "ch, tap = gc // C, gc % C"),
             ("inside = gr < m and gc < k and 0 <= ih < H and 0 <= iw < W", "inside = gr < m and gc < k"),
             ("cp_async16_at(stage + 16 * a_pos(r, c), global_address(x, (img, ih, iw, ch)",
              "cp_async16_at(stage + 16 * a_pos(c, r), global_address(x, (img, ih, iw, ch)"),
             # the conv layer's store (Exercise 2c)
             ("v = ctile[r * TN + c + e] + bias[col0 + c + e]", "v = ctile[r * TN + c + e] + bias[row0 + r]"),
             ("v = ctile[r * TN + c + e] + bias[col0 + c + e]", "v = ctile[(c + e) * TM + r] + bias[col0 + c + e]"),
             ("np.float16(max(v, np.float32(0)))", "np.float16(v)"),
             ("if row0 + r < m and col0 + c < n:\n            for e in range(4):",
              "if col0 + c < n:\n            for e in range(4):"),
             ("idx = tid + j * THREADS", "idx = tid")],
    "06.5": [("out[r, c] = x[r, c] * scale[r]", "out[r, c] = x[r, c] * scale[c]"),  # the scale by column
             ("r = cuda.blockIdx.y * ROWS + cuda.threadIdx.y\n    if r < m and c < n:",
              "r = cuda.blockIdx.y * 32 + cuda.threadIdx.y\n    if r < m and c < n:"),
             ("        cuda.syncthreads()\n        ### END SOLUTION", "        ### END SOLUTION"),  # the race back
             # four columns a thread (Exercise 5)
             ("            if c + 32 * e < n:\n                v[e] = x[r, c + 32 * e]",
              "            if c + e < n:\n                v[e] = x[r, c + e]"),
             ("c = cuda.blockIdx.x * 128 + cuda.threadIdx.x", "c = cuda.blockIdx.x * 32 + cuda.threadIdx.x"),
             ("                out[r, c + 32 * e] = v[e] * s", "                out[r, c + 32 * e] = v[e]")],
    "06.4": [("except Exception as exc:  # a failing candidate", "except ZeroDivisionError as exc:  # a failing candidate"),
             ("return min(ok, key=lambda t: t.ms), trials", "return max(ok, key=lambda t: t.ms), trials"),
             ("entry = entries.get(key)", "entry = next(iter(entries.values()), None)")],
}


@pytest.mark.parametrize("prefix", sorted(MUTANTS))
def test_every_mutant_of_a_solution_is_rejected(prefix):
    path = next(p for p in WITH_CELLS if p.name.startswith(prefix))
    cells = tagged_cells(path)
    runs = []
    for old, new in MUTANTS[prefix]:
        where = [i for i, c in enumerate(cells) if old in c]
        assert len(where) == 1, f"{path.name}: the mutant's text {old!r} is no longer found once: update MUTANTS"
        i = where[0]
        runs.append(cells[:i] + [cells[i].replace(old, new)])
    script = PRELUDE + textwrap.dedent(f"""
        runs = {runs!r}
        for j, cells in enumerate(runs):
            ns = dict(np=np, kl=kl, env=env, cuda=cuda)
            for i, src in enumerate(cells):
                try:
                    name = f"<mutant {{j}} cell {{i}}>"
                    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
                    exec(compile(src, name, "exec"), ns)
                    if i == len(cells) - 1:
                        print(f"mutant {{j}}: SURVIVED", flush=True)
                except Exception as exc:
                    if i == len(cells) - 1:
                        print(f"mutant {{j}}: caught {{type(exc).__name__}}", flush=True)
                    else:
                        print(f"mutant {{j}}: an unmutated cell failed: {{exc}}", flush=True)
                        break
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "utilities"), os.environ.get("PYTHONPATH", "")]),
               NUMBA_ENABLE_CUDASIM="1", KERNEL_LAB_QUIET="1")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("mutant ")]
    survivors = [MUTANTS[prefix][int(ln.split()[1][:-1])] for ln in lines if "caught CheckFailed" not in ln]
    assert len(lines) == len(runs) and not survivors, f"not rejected by the check: {survivors}\n{r.stdout[-2000:]}"
