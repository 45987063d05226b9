"""Issue 34 §3: a kernel the package keeps beside a solution's is the same code as the solution's.

Where a later notebook or a benchmark needs a kernel a learner wrote, the package keeps a copy of it,
and the copy must not drift from what the notebook teaches (the benchmark would time another kernel
than the learner's, a fix in one would miss the other). This test finds every Numba kernel and
device function (``@cuda.jit`` in any form) in the solution notebooks whose name a ``@cuda.jit``
function of ``utilities/kernel_lab`` also has, and compares the two by syntax tree:

* docstrings and decorators aside (``inline="always"`` against ``forceinline=True`` changes no line a
  learner reads);
* a call through a module alias (``kl.float_bits``, ``ref.store_block``) counts as the bare name;
* the renames declared in ``RENAMES`` for that pair (a tile constant that a notebook calls ``XWM``
  where the package says ``WM``).

A pair that still differs must be declared in ``DIFFERENT_ON_PURPOSE``, with the reason; a declared
pair that no longer differs (or no longer exists) fails too, so that list only shrinks. A failure
names the notebook's cell and the package's line and shows the first lines that differ.
"""

from __future__ import annotations

import ast
import difflib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_ALIASES = {"kl", "ref"}  # kernel_lab and a package module imported as ref: kl.x is x

# (notebook file, function name): {name in the notebook: name or expression in the package}
RENAMES = {
    ("02.3-sgemm-progression.ipynb", "lane_map"): {"WM": "XWM", "WN": "XWN"},  # sgemm.py's WM is another kernel's
    ("04.2-online-softmax.ipynb", "warp_sum"): {"FULL": "0xFFFFFFFF"},  # the mask as 04.2 names it
}

# (notebook file, function name): why the package's function of that name is not the notebook's
DIFFERENT_ON_PURPOSE = {
    ("04-warp-primitives.ipynb", "warp_sum"):
        "01.4 teaches the tree with shfl_down, its sum in lane 0; the package's warp_sum (quant.warp) is "
        "04.2's butterfly, the sum in every lane, which the quantization kernels need",
    ("02.2-device-wide-scan.ipynb", "scan_single_pass"):
        "the package's scan takes the look-back function and its warp count as parameters, to time 02.2's "
        "two look-backs (one thread, one warp) with one kernel; the notebook's calls its own look-back",
    ("05-occupancy.ipynb", "fma_chains"):
        "01.5's occupancy experiment (chains in a local array, their number a parameter); the package's "
        "fma_chains is 02.4's FMA-rate probe, which matches 02.4's solution",
    ("02.3-sgemm-progression.ipynb", "one_tile"):
        "module 03.2's implicit-GEMM convolution has its own one_tile (it gathers B from the image); "
        "02.3's is sgemm.py's, compared by name there",
}


def _is_jit(decorator) -> bool:
    text = ast.unparse(decorator)
    return text.endswith("jit") or ".jit(" in text or text.startswith("jit(") or "cuda.jit" in text


def _jit_functions(tree):
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list)]


class _Normalise(ast.NodeTransformer):
    def __init__(self, renames):
        self.renames = {k: ast.parse(v, mode="eval").body for k, v in renames.items()}

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.decorator_list = []
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in MODULE_ALIASES:
            return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)
        return node

    def visit_Name(self, node):
        if node.id in self.renames:
            return ast.copy_location(self.renames[node.id], node)
        return node


def normalised(fn, renames=None) -> str:
    copy = ast.parse(ast.unparse(fn)).body[0]
    return ast.unparse(ast.fix_missing_locations(_Normalise(renames or {}).visit(copy)))


def solution_functions():
    """(notebook file, cell id, function node) for every jit function of the solution notebooks."""
    found = []
    for path in sorted((ROOT / "solutions").rglob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "\n".join(line for line in "".join(cell["source"]).splitlines()
                               if not line.lstrip().startswith(("%", "!")))
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            found += [(path.name, cell.get("id"), fn) for fn in _jit_functions(tree)]
    return found


def package_functions():
    """{name: [(file, line, node)]} for every jit function of the package."""
    found = {}
    for path in sorted((ROOT / "utilities" / "kernel_lab").rglob("*.py")):
        for fn in _jit_functions(ast.parse(path.read_text())):
            found.setdefault(fn.name, []).append((str(path.relative_to(ROOT)), fn.lineno, fn))
    return found


def pairs():
    """(notebook, cell, name, solution's normalised text, [(file, line, package's normalised text)])."""
    package = package_functions()
    out = []
    for notebook, cell, fn in solution_functions():
        if fn.name not in package:
            continue
        renames = RENAMES.get((notebook, fn.name), {})
        mine = normalised(fn, renames)
        out.append((notebook, cell, fn.name, mine, [(f, line, normalised(p)) for f, line, p in package[fn.name]]))
    return out


def test_there_are_package_copies_to_compare():
    found = pairs()
    assert len(found) >= 50, f"only {len(found)} solution kernels have a package namesake: is the search broken?"


def test_solution_kernels_and_their_package_copies_agree():
    problems = []
    for notebook, cell, name, mine, copies in pairs():
        if any(text == mine for _, _, text in copies):
            continue
        if (notebook, name) in DIFFERENT_ON_PURPOSE:
            continue
        file, line, text = copies[0]
        diff = "\n".join(list(difflib.unified_diff(text.splitlines(), mine.splitlines(), f"{file}:{line}",
                                                   f"{notebook} cell {cell}", lineterm="", n=1))[:16])
        problems.append(f"{notebook}, cell {cell}: {name} differs from its package copy at {file}:{line} "
                        f"(make them the same code, declare a rename in RENAMES, or say in DIFFERENT_ON_PURPOSE "
                        f"why they differ)\n{diff}")
    assert not problems, "\n\n".join(problems)


def test_every_declared_difference_is_still_one():
    found = {(notebook, name): (mine, copies) for notebook, _, name, mine, copies in pairs()}
    stale = []
    for key in DIFFERENT_ON_PURPOSE:
        if key not in found:
            stale.append(f"{key}: no such pair any more: remove it from DIFFERENT_ON_PURPOSE")
        elif any(text == found[key][0] for _, _, text in found[key][1]):
            stale.append(f"{key}: the two are the same code now: remove it from DIFFERENT_ON_PURPOSE")
    for key in RENAMES:
        if key not in found:
            stale.append(f"{key}: no such pair any more: remove it from RENAMES")
    assert not stale, "\n".join(stale)


def test_the_comparison_sees_a_changed_line():
    """A test that cannot fail is a defect: one changed operator makes a pair differ."""
    notebook, cell, name, mine, copies = next(p for p in pairs() if any(t == p[3] for _, _, t in p[4]))
    changed = mine.replace("+", "-", 1) if "+" in mine else mine + "\n    pass"
    assert not any(text == changed for _, _, text in copies), (notebook, cell, name)
