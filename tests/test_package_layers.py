"""The package's layers: every import runs downward, and no two parts import each other.

``kernel_lab`` is read, not imported: every module's syntax tree gives its imports, those at the top
of the file and those inside functions alike (a lazy import is still a dependency: it only moves the
moment it bites), relative and absolute. Each module belongs to a *part*, the most specific name of
``LAYERS`` that contains it (a top-level module, a subpackage, or a single file of a subpackage
that sits lower than the rest of it), and each part to a layer. Two rules:

- an import from a part to a part of a higher layer fails, unless ``ALLOWED_UPWARD`` declares it
  with its reason (and a declaration that no import needs fails too);
- a circle between parts fails, and so does a circle between modules, each named by its edges
  (the simulator's own modules are left out of the second: issue 40 asks for no circle outside it).

Parts of one layer may import each other (the core modules; a module's old top-level name and its home).
Not modelled: importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first. That is Python's
doing, not a dependency a module chose, so it is not an edge here; a subpackage's ``__init__`` keeps
its own imports light (tests/test_package_copies.py and the notebooks import the files directly).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "utilities" / "kernel_lab"

# The layers, lowest first: (layer, parts). A part is a dotted name under kernel_lab; "kernel_lab"
# itself stands for the package's __init__ only (the notebooks' ``import kernel_lab as kl``).
LAYERS: list[tuple[str, list[str]]] = [
    # Numba's simulator completed: it imports nothing else of the package.
    ("simulator", ["simulator"]),
    # Which backend runs kernels (decided before Numba is imported), and argument errors.
    ("platform", ["environment", "validate"]),
    # What a kernel calls: intrinsics and their simulator models. kernel_lab.device is the home; the
    # others keep their first top-level names because notebooks import them there.
    ("device", ["device", "vector_loads", "bitcast", "acquire", "cache_hint_loads", "mma_ptx", "_mma_sim"]),
    # Building cuBLASDx kernels, shared by modules 04, 06 and 07: the device API with the caches on
    # (toolchain.device_api), code-generation and cubin caches, offline compilation, nvmath's type
    # tables, fragment partitioners, and the argument errors the toolchain raises.
    ("compile", ["tensor_cores.toolchain", "tensor_cores.codegen_cache", "tensor_cores.cubin_cache",
                 "tensor_cores.offline", "tensor_cores.precisions", "tensor_cores.fragments",
                 "tensor_cores.validate"]),
    # The API every notebook uses: sizes, checking, timing, plots, progress, the tuner; and the
    # package's __init__, which gathers them.
    ("core", ["kernel_lab", "progress", "sizes", "check", "bench", "plots", "tuner"]),
    # One layer per course module, in course order: a later module may build on an earlier one.
    # The top-level scans and sgemm are module 02's old names (the same module objects), kept while
    # notebooks of modules 02, 03 and 05 import them; their home is reductions_gemm.
    ("module 02", ["reductions_gemm", "scans", "sgemm"]),
    ("module 03", ["fusion"]),
    ("module 04", ["attention"]),
    ("module 05", ["quant"]),
    ("module 06", ["tensor_cores"]),
    ("module 07", ["ozaki"]),
    ("module 08", ["hopper_async"]),
    ("module 09", ["multigpu"]),
    # Ready-made checks of the learners' kernels: they compare with the package's kernels.
    ("checks", ["checks"]),
    # Commands and pages over everything: warming every module's compile caches, the course generator
    # and its reports, the command line. A module's own benchmark lives in its subpackage
    # (reductions_gemm.bench, ozaki.bench); bench_sgemm and bench_ozaki are their old names, kept for
    # the command lines that notebooks 02.3, 07.5 and 07.6 print.
    ("tools", ["bench_sgemm", "bench_ozaki", "tensor_cores.warm", "readings", "benchmarks_page",
               "mistakes_page", "exercises", "colab", "hint_leaks", "study_time", "store_outputs", "cli"]),
]

# (importing part, imported part) -> why this upward import stays. Keep it short: each entry is a
# debt with its way out.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

# Frozensets of parts or modules whose circle is declared, with the reason.
ALLOWED_CIRCLES: dict[frozenset[str], str] = {}


def _full(part: str) -> str:
    return "kernel_lab" if part == "kernel_lab" else "kernel_lab." + part


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package (a package is its __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(package: Path) -> dict[str, dict[str, int]]:
    """module -> {imported kernel_lab module: first line}, from every import statement in the file."""
    files = module_files(package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        found: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "kernel_lab":
                        _add(files, found, name, alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[:len(here) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] != "kernel_lab":
                    continue
                for alias in node.names:  # `from pkg import sub` names a module; `from mod import f` not
                    sub = f"{module}.{alias.name}"
                    _add(files, found, name, sub if sub in files else module, node.lineno)
        graph[name] = found
    return graph


def _add(files, found: dict[str, int], name: str, target: str, line: int) -> None:
    while target not in files and "." in target:  # kernel_lab.x.y.Name -> kernel_lab.x.y
        target = target.rsplit(".", 1)[0]
    if target in files and target != name:
        found.setdefault(target, line)


def part_of(module: str) -> str | None:
    best = None
    for _, parts in LAYERS:
        for p in parts:
            full = _full(p)
            inside = module == full or (p != "kernel_lab" and module.startswith(full + "."))
            if inside and (best is None or len(full) > len(best)):
                best = full
    return best


RANK = {_full(p): i for i, (_, parts) in enumerate(LAYERS) for p in parts}
LAYER_NAME = {_full(p): layer for layer, parts in LAYERS for p in parts}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each as a closed path."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(_path(graph, sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _path(graph, comp):
    """A closed walk through the component's first node that shows the circle (a -> b -> ... -> a)."""
    members, start = set(comp), comp[0]
    prev, queue = {start: None}, [start]
    while queue:  # shortest way back to start inside the component
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                walk = [v]
                while prev[walk[-1]] is not None:
                    walk.append(prev[walk[-1]])
                return [start] + walk[::-1][1:] + [start] if walk[-1] == start else walk[::-1] + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def layer_problems(package: Path = PACKAGE) -> list[str]:
    """Every unassigned module, upward import and circle, as sentences (empty: the layers hold)."""
    graph = imports(package)
    problems = [f"{m} belongs to no part of LAYERS: add it (or its subpackage) where its imports put it"
                for m in sorted(graph) if part_of(m) is None]
    used_upward, part_graph, lines = set(), defaultdict(set), {}
    for m, targets in sorted(graph.items()):
        a = part_of(m)
        for t, line in targets.items():
            b = part_of(t)
            if a is None or b is None or a == b:
                continue
            part_graph[a].add(b)
            lines.setdefault((a, b), f"{m} line {line} imports {t}")
            if RANK[b] > RANK[a]:
                key = (a, b)
                if key in ALLOWED_UPWARD:
                    used_upward.add(key)
                else:
                    problems.append(f"upward import: {m} line {line} imports {t} ({LAYER_NAME[a]} -> "
                                    f"{LAYER_NAME[b]}): take what it needs as an argument, or move the shared "
                                    "piece to a lower layer")
    for key in sorted(set(ALLOWED_UPWARD) - used_upward):
        problems.append(f"ALLOWED_UPWARD declares {key[0]} -> {key[1]}, which no import needs any more: remove it")
    used_circles = set()
    for circle in _circles(part_graph):
        key = frozenset(circle)
        if key in ALLOWED_CIRCLES:
            used_circles.add(key)
            continue
        steps = "; ".join(lines[(x, y)] for x, y in pairwise(circle))
        problems.append(f"import circle between parts: {' -> '.join(circle)} ({steps})")
    module_graph = {m: {t for t in ts if not t.startswith("kernel_lab.simulator")}
                    for m, ts in graph.items() if not m.startswith("kernel_lab.simulator")}
    for circle in _circles(module_graph):
        key = frozenset(circle)
        if key in ALLOWED_CIRCLES:
            used_circles.add(key)
            continue
        steps = "; ".join(f"{x} line {graph[x][y]} imports {y}" for x, y in pairwise(circle))
        problems.append(f"import circle between modules: {' -> '.join(circle)} ({steps})")
    for key in sorted(set(ALLOWED_CIRCLES) - used_circles, key=sorted):
        problems.append(f"ALLOWED_CIRCLES declares {sorted(key)}, which is no circle any more: remove it")
    return problems


def test_every_part_of_layers_exists():
    files = module_files(PACKAGE)
    missing = [p for _, parts in LAYERS for p in parts
               if not any(m == _full(p) or m.startswith(_full(p) + ".") for m in files)]
    assert not missing, f"LAYERS names parts the package does not have: {missing}"


def test_imports_run_downward_without_circles():
    problems = layer_problems()
    assert not problems, "the package's layers (tests/test_package_layers.py) do not hold:\n" + "\n".join(problems)


def test_old_names_are_the_same_modules():
    """A module that moved keeps its old name for the notebooks' imports, as the same module object
    (so a monkeypatch or a cache through either name reaches the one module)."""
    import importlib

    import kernel_lab  # noqa: F401  (GPU or simulator before numba.cuda)

    for old, new in [("kernel_lab.quant.dp4a", "kernel_lab.device.dp4a"),
                     ("kernel_lab.tensor_cores.tuner", "kernel_lab.tuner"),
                     ("kernel_lab.scans", "kernel_lab.reductions_gemm.scans"),
                     ("kernel_lab.sgemm", "kernel_lab.reductions_gemm.sgemm"),
                     ("kernel_lab.bench_sgemm", "kernel_lab.reductions_gemm.bench"),
                     ("kernel_lab.bench_ozaki", "kernel_lab.ozaki.bench")]:
        assert importlib.import_module(old) is importlib.import_module(new), (old, new)


def test_the_test_sees_a_circle_and_an_upward_import(tmp_path):
    """A package with a circle between two module subpackages, and a device module that imports a
    check, fails with both named."""
    pkg = tmp_path / "kernel_lab"
    for d in ("", "device", "checks", "ozaki", "tensor_cores"):
        (pkg / d).mkdir(parents=True, exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "device" / "dp4a.py").write_text("def f():\n    from ..checks import quantization\n")
    (pkg / "checks" / "quantization.py").write_text("")
    (pkg / "ozaki" / "gpu.py").write_text("from ..tensor_cores import gemm\n")
    (pkg / "tensor_cores" / "gemm.py").write_text("from kernel_lab.ozaki.gpu import x\n")
    text = "\n".join(layer_problems(pkg))
    assert "upward import: kernel_lab.device.dp4a line 2 imports kernel_lab.checks.quantization" in text
    assert "import circle between parts: kernel_lab.ozaki -> kernel_lab.tensor_cores -> kernel_lab.ozaki" in text
    assert "import circle between modules: kernel_lab.ozaki.gpu -> kernel_lab.tensor_cores.gemm" in text
