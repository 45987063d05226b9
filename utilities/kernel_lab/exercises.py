"""Write the exercise notebooks in ``course/`` from the solved ones in ``solutions/``.

The solution notebooks are the single source. In them, the learner's part of a code cell sits
between two marker lines::

    ### BEGIN SOLUTION
    ##> i = ...          # lines starting with '##> ' become the stub (uncommented)
    i = cuda.grid(1)
    ### END SOLUTION

In ``course/`` the block becomes its stub lines, or ``# YOUR CODE HERE`` and ``pass`` when there are
none. In markdown, ``<!-- BEGIN SOLUTION -->...<!-- END SOLUTION -->`` becomes a prompt for the
learner's answer. Cells tagged ``solution-only`` are left out. Outputs are cleared; hint cells
(collapsed ``<details>`` blocks) are kept.

A course notebook the learner has edited is never overwritten: each generated notebook records a
fingerprint of its cells, and a notebook whose cells no longer match it is skipped with a message
(``--force`` replaces it after saving a backup copy beside it).

Usage::

    python -m kernel_lab.exercises            # regenerate course/ from solutions/
    python -m kernel_lab.exercises --check    # exit 1 if course/ is out of date (used by the tests)
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import nbformat

BEGIN, END, STUB = "### BEGIN SOLUTION", "### END SOLUTION", "##> "
MD_SOLUTION = re.compile(r"<!-- BEGIN SOLUTION -->.*?<!-- END SOLUTION -->", re.S)
MD_PROMPT = "*Your answer here.*"
SOLUTION_ONLY_TAG = "solution-only"


class ExerciseMarkupError(ValueError):
    """A solution notebook's BEGIN/END SOLUTION markers do not pair up."""


def stub_code(source: str, where: str = "cell") -> str:
    """Replace every solution block of one code cell with its stub."""
    out, block, indent = [], None, ""
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if block is not None:
                raise ExerciseMarkupError(f"{where}, line {number}: {BEGIN} inside another solution block")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped == END:
            if block is None:
                raise ExerciseMarkupError(f"{where}, line {number}: {END} without a {BEGIN}")
            stubs = [ln.replace(STUB, "", 1) for ln in block if ln.strip().startswith(STUB.strip())]
            out.extend(stubs if stubs else [f"{indent}# YOUR CODE HERE", f"{indent}pass"])
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ExerciseMarkupError(f"{where}: {BEGIN} without a matching {END}")
    return "\n".join(out)


def has_solution_markup(nb) -> bool:
    for cell in nb.cells:
        if cell.cell_type == "code" and BEGIN in cell.source:
            return True
        if cell.cell_type == "markdown" and MD_SOLUTION.search(cell.source):
            return True
    return False


def fingerprint(nb) -> str:
    """A hash of the cells' kinds and sources: what a learner would change by editing."""
    content = [(c.cell_type, c.source) for c in nb.cells]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]


def make_exercise(solution_nb, source_name: str):
    """The exercise notebook for one solution notebook (a new object; the input is not changed)."""
    nb = copy.deepcopy(solution_nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = stub_code(cell.source, f"{source_name}, cell {index}")
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = MD_SOLUTION.sub(MD_PROMPT, cell.source)
        cell.pop("id", None)
        # Keep only the tags: execution timestamps and the like come from the GPU run.
        tags = cell.get("metadata", {}).get("tags")
        cell["metadata"] = {"tags": tags} if tags else {}
        cells.append(cell)
    nb.cells = cells
    for i, cell in enumerate(nb.cells):  # stable ids, so regeneration gives identical files
        cell["id"] = f"cell-{i}"
    # Notebook metadata: what JupyterLab needs to pick the kernel, and our own bookkeeping; not
    # what the GPU run recorded (Python version, which GPU produced the solution's outputs).
    nb.metadata = nbformat.from_dict({
        "kernelspec": solution_nb.metadata.get("kernelspec", {"display_name": "Python 3 (ipykernel)",
                                                               "language": "python", "name": "python3"}),
        "language_info": {"name": "python"},
        "kernel_lab": {"generated_from": source_name, "fingerprint": fingerprint(nb)},
    })
    return nb


def _root(path: str | None) -> Path:
    if path:
        return Path(path).resolve()
    cwd = Path.cwd()
    if (cwd / "solutions").is_dir():
        return cwd
    return Path(__file__).resolve().parents[2]


def plan(root: Path):
    """Yield (solution path, course path, generated notebook as text) for every solution notebook."""
    for sol in sorted((root / "solutions").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in sol.parts:
            continue
        rel = sol.relative_to(root / "solutions")
        nb = nbformat.read(sol, as_version=4)
        exercise = make_exercise(nb, f"solutions/{rel.as_posix()}")
        yield sol, root / "course" / rel, nbformat.writes(exercise) + "\n"


def learner_edited(path: Path) -> bool:
    """Has the learner changed a course notebook since it was generated?"""
    nb = nbformat.read(path, as_version=4)
    recorded = nb.metadata.get("kernel_lab", {}).get("fingerprint")
    return recorded is None or recorded != fingerprint(nb)


def out_of_date(root: Path) -> list[str]:
    """Course notebooks that differ from what the solutions generate (empty: all in sync)."""
    problems = []
    expected = set()
    for _sol, target, text in plan(root):
        expected.add(target)
        rel = target.relative_to(root).as_posix()
        if not target.exists():
            problems.append(f"{rel} is missing")
        elif target.read_text() != text:
            problems.append(f"{rel} differs from what its solution generates")
    for extra in sorted((root / "course").rglob("*.ipynb")):
        if extra not in expected and ".ipynb_checkpoints" not in extra.parts:
            problems.append(f"{extra.relative_to(root).as_posix()} has no solution notebook")
    return problems


def generate(root: Path, *, force: bool = False, log=print) -> int:
    """Write course/ from solutions/; return how many notebooks were kept because a learner edited them."""
    kept = 0
    for _sol, target, text in plan(root):
        rel = target.relative_to(root).as_posix()
        if target.exists():
            if target.read_text() == text:
                continue
            if learner_edited(target):
                if not force:
                    log(f"kept {rel}: you have edited it since it was generated. To replace it with the "
                        "new version, run again with --force (your copy is saved beside it first).")
                    kept += 1
                    continue
                backup = target.with_name(f"{target.stem}.mine-{time.strftime('%Y%m%d-%H%M%S')}.ipynb")
                backup.write_text(target.read_text())
                log(f"saved your edits of {rel} as {backup.name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        log(f"wrote {rel}")
    return kept


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write course/ (exercises) from solutions/.")
    parser.add_argument("--root", help="the repository root (default: here)")
    parser.add_argument("--check", action="store_true", help="only report whether course/ is up to date")
    parser.add_argument("--force", action="store_true",
                        help="also replace course notebooks you edited (a backup is saved first)")
    args = parser.parse_args(argv)
    root = _root(args.root)
    if not (root / "solutions").is_dir():
        print(f"no solutions/ folder under {root}", file=sys.stderr)
        return 2
    if args.check:
        problems = out_of_date(root)
        for p in problems:
            print(p)
        if problems:
            print("course/ is out of date: run  python -m kernel_lab.exercises")
        return 1 if problems else 0
    generate(root, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
