"""A solution kernel and its copy in the package are the same code (one source of truth).

The package keeps a copy of a learner's kernel only where something else needs it (a later notebook,
a probe, a benchmark), and then the copy must be what the solution notebook teaches: a copy that
drifted from the notebook measures, in the benchmarks, a kernel the learner never wrote. So every
``@cuda.jit`` function defined in a solution notebook is compared, by syntax tree, with the package
function of the same name (docstrings and comments aside). Where the two differ, the test names the
notebook's cell and line and the package's file and line where they part.

Two things may be declared below, each with its reason:

- ``RENAMES``: names that differ by design between the two copies (a constant the package prefixes
  because several kernels share its module, ``kl.float_bits`` in a notebook for ``float_bits`` in the
  package), or a name of the notebook's that stands for a literal of the package's (a factory's
  parameter that the package's copy fixes: ``lookback_threads`` for ``32``). Both copies are compared
  after the renames; a declared rename that the comparison does not need fails.
- ``NOT_COPIES``: a package function that shares a notebook function's name but is another kernel
  (a generic name such as ``store`` or ``warp_sum``). Prefer renaming one of them; a declaration is
  for names that are the natural word in both places.

A declaration that is no longer needed fails too, so the lists cannot hide a later drift.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "utilities" / "kernel_lab"

# (notebook file name, function name) -> {name in the notebook: name in the package}. A dotted name
# ("kl.float_bits") stands for an attribute access in the notebook; a value that is not a name ("32")
# is a literal that the notebook's name, only ever read there, stands for.
RENAMES: dict[tuple[str, str], dict[str, str]] = {
    # 02.2 imports the bit casts as kl.*; the package's reductions_gemm.scans imports them by name.
    ("02.2-device-wide-scan.ipynb", "pack_status"): {"kl.float_bits": "float_bits"},
    ("02.2-device-wide-scan.ipynb", "unpack_status"): {"kl.bits_float": "bits_float"},
    # 02.2 builds the scan for two look-backs (make_single_pass(look_back, lookback_threads)); the
    # package keeps the one the notebook ends with, the warp look-back: make_single_pass(look_back_warp, 32).
    ("02.2-device-wide-scan.ipynb", "scan_single_pass"): {"look_back": "look_back_warp", "lookback_threads": "32"},
    # 02.3b calls the package's helpers through its module (ref = kernel_lab.reductions_gemm.sgemm); the
    # package calls them by name. The warp-tiled parts are one factory for every GemmTiles, whose constants
    # the package prefixes with X (XWM, XBK: sgemm.py's module-level BK and TM are kernels 5 and 6's).
    ("02.3b-sgemm-warp-tiling.ipynb", "sgemm_vectorized"): {"ref.load_tiles_vec": "load_tiles_vec",
                                                            "ref.store_block": "store_block"},
    ("02.3b-sgemm-warp-tiling.ipynb", "lane_map"): {"WM": "XWM", "WN": "XWN"},
    ("02.3b-sgemm-warp-tiling.ipynb", "one_tile"): {"BKX": "XBK"},
    # 04.2 names the full-warp mask (FULL = 0xFFFFFFFF); the package's warp_sum (05.5's) writes it out.
    ("04.2-online-softmax.ipynb", "warp_sum"): {"FULL": "0xFFFFFFFF"},
}

# (notebook file name, function name) -> why the package's function of that name is another kernel.
NOT_COPIES: dict[tuple[str, str], str] = {
    ("05-occupancy.ipynb", "fma_chains"): (
        "01.5's latency experiment: `chains` dependent-FMA chains per element of x, built per chain count and "
        "register cap by make_fma_chains; the package's fma_chains is 02.4's FMA-rate probe (eight chains, "
        "float32 or float64, no input), which reductions_gemm.bench times and 02.4's copy test holds. Chains of FMAs are "
        "what both kernels are, and 01.5 prints the name in its reports and readings"),
    ("04-warp-primitives.ipynb", "warp_sum"): (
        "01.4's first shuffle reduction: shfl_down_sync, the sum valid in lane 0 only (its check probes how "
        "often each lane is counted); the package's warp_sum is the butterfly of 04.2 and 05.5 "
        "(shfl_xor_sync, the sum in every lane), which the ternary GEMMs call. \"The warp's sum\" is the "
        "natural name in all three notebooks, and 01.4's checks, mutants and prose use it"),
}


def _is_kernel(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def _kernels(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_kernel(n)]


def _cell_source(cell) -> str:
    """A code cell as Python: IPython's magics and shell lines become blank lines (line numbers stay)."""
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())


def solution_kernels() -> list[tuple[str, str, str, ast.FunctionDef]]:
    """(notebook path, cell id, cell source, function) for every kernel a solution notebook defines."""
    found = []
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = _cell_source(cell)
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue  # a cell that is not Python is not ours to compare; test_exercises covers cells
            found += [(path.relative_to(ROOT).as_posix(), cell.get("id", "?"), source, fn) for fn in _kernels(tree)]
    return found


def package_kernels() -> dict[str, list[tuple[str, str, ast.FunctionDef]]]:
    """name -> [(file, source, function)] for every kernel of the package."""
    found: dict = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        for fn in _kernels(ast.parse(source)):
            found.setdefault(fn.name, []).append((path.relative_to(ROOT).as_posix(), source, fn))
    return found


class _Rename(ast.NodeTransformer):
    def __init__(self, renames: dict[str, str]):
        self.renames = renames

    def visit_Name(self, node):
        if node.id not in self.renames:
            return node
        new = self.renames[node.id]
        if new.isidentifier():
            return ast.copy_location(ast.Name(id=new, ctx=node.ctx), node)
        literal = ast.parse(new, mode="eval").body
        if not isinstance(literal, ast.Constant) or not isinstance(node.ctx, ast.Load):
            raise ValueError(f"{node.id} -> {new}: a name stands for a literal only where it is read")
        return ast.copy_location(literal, node)

    def visit_Attribute(self, node):
        dotted = ast.unparse(node)
        if dotted in self.renames:
            return ast.copy_location(ast.parse(self.renames[dotted], mode="eval").body, node)
        return self.generic_visit(node)

    def visit_arg(self, node):
        if node.arg in self.renames:
            node.arg = self.renames[node.arg]
        return node


def _normalised(fn: ast.FunctionDef, renames: dict[str, str] | None = None) -> ast.FunctionDef:
    """A copy of ``fn`` without docstrings, with ``renames`` applied (line numbers kept)."""
    tree = ast.parse(ast.unparse(fn))  # a fresh copy; line numbers re-taken below from the original
    copy = tree.body[0]
    for new, old in zip(ast.walk(copy), ast.walk(fn)):
        if hasattr(old, "lineno"):
            new.lineno = old.lineno
    for node in ast.walk(copy):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return _Rename(renames or {}).visit(copy)


def first_difference(a: ast.AST, b: ast.AST):
    """The innermost pair of nodes (with line numbers) where two trees first differ, or None."""
    if type(a) is not type(b):
        return a, b
    if isinstance(a, list):
        raise TypeError
    for field in a._fields:
        x, y = getattr(a, field, None), getattr(b, field, None)
        if isinstance(x, list) or isinstance(y, list):
            x, y = x or [], y or []
            for u, v in zip(x, y):
                found = first_difference(u, v) if isinstance(u, ast.AST) else (None if u == v else (a, b))
                if found:
                    return _with_lines(found, a, b)
            if len(x) != len(y):
                extra_a = x[len(y)] if len(x) > len(y) else a
                extra_b = y[len(x)] if len(y) > len(x) else b
                return _with_lines((extra_a, extra_b), a, b)
        elif isinstance(x, ast.AST) or isinstance(y, ast.AST):
            if not (isinstance(x, ast.AST) and isinstance(y, ast.AST)):
                return a, b
            found = first_difference(x, y)
            if found:
                return _with_lines(found, a, b)
        elif field not in ("ctx",) and x != y:
            return a, b
    return None


def _with_lines(pair, a, b):
    u, v = pair
    return (u if hasattr(u, "lineno") else a, v if hasattr(v, "lineno") else b)


def _line(source: str, number: int | None) -> str:
    lines = source.splitlines()
    return lines[number - 1].strip() if number and 0 < number <= len(lines) else "?"


def comparisons():
    package = package_kernels()
    for notebook, cell, source, fn in solution_kernels():
        if fn.name in package:
            yield notebook, cell, source, fn, package[fn.name]


def _id(item) -> str:
    notebook, cell, _, fn, _ = item
    return f"{Path(notebook).stem}:{cell}:{fn.name}"


CASES = list(comparisons())


def verdict(notebook: str, cell: str, source: str, fn: ast.FunctionDef, copies, renames=None) -> str | None:
    """None when the package holds the same code; else a message naming where the copies part.
    ``renames``: those declared for this function in RENAMES unless given."""
    key = (Path(notebook).name, fn.name)
    ours = _normalised(fn, RENAMES.get(key) if renames is None else renames)
    differences = []
    for file, package_source, theirs in copies:
        pair = first_difference(ours, _normalised(theirs))
        if pair is None:
            return None
        differences.append((file, package_source, theirs, pair))
    lines = [f"{fn.name} in {notebook} (cell {cell}) differs from the package's function of the same name:"]
    for file, package_source, theirs, (u, v) in differences:
        nb_line = getattr(u, "lineno", fn.lineno)
        pk_line = getattr(v, "lineno", theirs.lineno)
        lines += [f"  notebook, cell {cell} line {nb_line}: {_line(source, nb_line)}",
                  f"  package, {file}:{pk_line}: {_line(package_source, pk_line)}"]
    lines.append("Make them the same code (the notebook is what the learner writes), rename the package's function "
                 "if it is another kernel, or declare a rename or a different kernel in tests/test_package_copies.py "
                 "with the reason.")
    return "\n".join(lines)


@pytest.mark.parametrize("item", CASES, ids=_id)
def test_a_solution_kernel_and_its_package_copy_are_the_same_code(item):
    notebook, cell, source, fn, copies = item
    key = (Path(notebook).name, fn.name)
    message = verdict(notebook, cell, source, fn, copies)
    if key in NOT_COPIES:
        assert message is not None, (f"{fn.name} of {notebook} is declared another kernel than the package's "
                                     "(NOT_COPIES) but is now the same code: remove the declaration")
        return
    assert message is None, message


def test_declarations_name_pairs_that_exist():
    pairs = {(Path(nb).name, fn.name) for nb, _, _, fn, _ in CASES}
    stale = sorted(set(RENAMES) - pairs) + sorted(set(NOT_COPIES) - pairs)
    assert not stale, f"declared in tests/test_package_copies.py but no such notebook kernel with a package namesake: {stale}"
    both = sorted(set(RENAMES) & set(NOT_COPIES))
    assert not both, f"declared both a rename and another kernel: {both}"


def test_each_declared_rename_is_needed():
    """A rename that the copies compare equal without is stale (it could hide a later drift)."""
    stale = []
    for notebook, cell, source, fn, copies in CASES:
        renames = RENAMES.get((Path(notebook).name, fn.name), {})
        for name in renames:
            fewer = {k: v for k, v in renames.items() if k != name}
            if verdict(notebook, cell, source, fn, copies, fewer) is None:
                stale.append(f"{Path(notebook).name} {fn.name}: {name}")
    assert not stale, f"declared renames that the comparison does not need: {stale}"


def test_the_comparison_can_fail():
    """A copy that differs in one index is reported at that line, in both sources; a docstring is no difference."""
    nb = "@cuda.jit\ndef k(a, out):\n    i = cuda.grid(1)\n    out[i] = a[i]\n"
    pkg = '@cuda.jit\ndef k(a, out):\n    """Copy."""\n    i = cuda.grid(1)\n    out[i] = a[i + 1]\n'
    same = '@cuda.jit\ndef k(a, out):\n    """Copy."""\n    i = cuda.grid(1)  # one thread per element\n    out[i] = a[i]\n'
    fn = ast.parse(nb).body[0]
    assert verdict("solutions/x/n.ipynb", "c1", nb, fn, [("p.py", same, ast.parse(same).body[0])]) is None
    message = verdict("solutions/x/n.ipynb", "c1", nb, fn, [("p.py", pkg, ast.parse(pkg).body[0])])
    assert "cell c1 line 4: out[i] = a[i]" in message and "p.py:5: out[i] = a[i + 1]" in message
