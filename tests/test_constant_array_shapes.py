"""Shared and local array shapes are plain constants, everywhere kernels are written.

On a GPU, Numba types ``cuda.shared.array(shape=...)`` only when the shape is a compile-time
constant: a name bound to an int, or a tuple of them. An expression such as ``(2 * TM,)`` fails
with "No implementation of function shared.array found", but the CUDA simulator (where CI runs)
accepts it, so a checker harness written that way passed CI and failed on the GPU (06.2's softmax
check). This test holds the package and the solution notebooks to the rule the simulator
cannot.
"""

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARRAY_CALLS = {("shared", "array"), ("local", "array")}


def _shape_arg(call: ast.Call):
    for kw in call.keywords:
        if kw.arg == "shape":
            return kw.value
    return call.args[0] if call.args else None


def _constant_shape(node) -> bool:
    if isinstance(node, (ast.Name, ast.Constant, ast.Attribute)):
        return True
    if isinstance(node, ast.Tuple):
        return all(isinstance(e, (ast.Name, ast.Constant, ast.Attribute)) for e in node.elts)
    return False


def offending_calls(source: str):
    """``(line, text)`` of every shared/local array call whose shape is an expression."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # notebook cells with magics or exercise placeholders
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "array":
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and (owner.attr, "array") in ARRAY_CALLS:
                shape = _shape_arg(node)
                if shape is not None and not _constant_shape(shape):
                    out.append((node.lineno, ast.unparse(shape)))
    return out


def test_detector_flags_an_expression_and_accepts_constants():
    bad = "def k():\n    s = cuda.shared.array(shape=(2 * TM,), dtype=np.float32)\n"
    good = "def k():\n    s = cuda.shared.array(shape=(TM, TN), dtype=np.float32)\n    t = cuda.local.array(8, np.int32)\n"
    assert offending_calls(bad) == [(2, "(2 * TM,)")]
    assert offending_calls(good) == []


def _sources():
    for path in sorted((ROOT / "utilities" / "kernel_lab").rglob("*.py")):
        if "simulator" not in path.parts:
            yield path.relative_to(ROOT), path.read_text()
    for path in sorted((ROOT / "solutions").rglob("*.ipynb")):
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        for i, cell in enumerate(cells):
            yield f"{path.relative_to(ROOT)} (code cell {i})", "".join(cell["source"])


def test_every_shared_and_local_array_shape_is_a_constant():
    problems = [f"{where}, line {line}: shape={text}" for where, src in _sources()
                for line, text in offending_calls(src)]
    assert not problems, ("a shared/local array shape must be a name or a tuple of names (compute it "
                          "outside the kernel); the GPU refuses these:\n" + "\n".join(problems))
