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
(collapsed ``<details>`` blocks) are kept. A *reading* (a markdown cell tagged ``reading``: what the
course's GPU run measured, see :mod:`kernel_lab.readings`) is folded into a collapsed ``<details>``
block, so that the learner sees it only after running the measurement and writing down a prediction.

A course notebook the learner has edited is never overwritten: each generated notebook records a
fingerprint of its cells, and a notebook whose cells no longer match it is skipped with a message
(``--force`` replaces it after saving a backup copy beside it, ``NAME.mine-DATE.ipynb``).

The learner's course/ is expected to differ from what the solutions generate: notebooks they ran
(outputs), edited (their answers), backups and notebooks of their own. :func:`course_states` tells
these apart from what is a problem for the course itself (a solution changed and course/ not
regenerated, a course notebook missing or left behind by a removed solution). The tests fail only
on problems and list the rest as skipped with the reason; in strict mode (CI, which checks a clean
clone: ``KERNEL_LAB_STRICT_COURSE=1`` or ``--strict``) anything but the generated file fails.

Usage::

    python -m kernel_lab.exercises                   # regenerate course/ from solutions/
    python -m kernel_lab.exercises --check           # report course/; exit 1 if a solution was not regenerated
    python -m kernel_lab.exercises --check --strict  # exit 1 unless course/ is exactly what solutions/ generates
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import colab, progress

BEGIN, END, STUB = "### BEGIN SOLUTION", "### END SOLUTION", "##> "
MD_SOLUTION = re.compile(r"<!-- BEGIN SOLUTION -->.*?<!-- END SOLUTION -->", re.S)
MD_PROMPT = "*Your answer here.*"
SOLUTION_ONLY_TAG = "solution-only"


def solution_block_lines(source: str):
    """The stripped lines of a code cell's solution blocks, between the markers (the markers left out).
    Every measure of what a learner writes (hint_leaks, study_time) walks the blocks through this."""
    inside = False
    for raw in source.splitlines():
        line = raw.strip()
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif inside:
            yield line
READING_TAG = "reading"  # the same tag kernel_lab.readings checks
READING_SUMMARY = "<b>Reading the measurement</b> of the course's GPU run: open it once you have run the cells above"
_READING_LEAD = re.compile(r"^\*\*Reading[^*]*\*\*\s*")
_CHECKER_NOTES = re.compile(r"\s*<!--\s*(?:unchecked|also from):.*?-->", re.S)  # for kernel_lab.readings only
BACKUP_MARK = ".mine-"  # backups that --force saves: NAME.mine-DATE.ipynb


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


def fold_reading(source: str) -> str:
    """A reading as the learner first sees it: a collapsed block, opened after measuring."""
    body = _READING_LEAD.sub("", _CHECKER_NOTES.sub("", source).strip(), count=1)  # the summary says it
    return f"<details><summary>{READING_SUMMARY}</summary>\n\n{body}\n</details>"


def fingerprint(nb) -> str:
    """A hash of the cells' kinds and sources: what a learner would change by editing."""
    content = [(c.cell_type, c.source) for c in nb.cells]
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]


def add_colab(cells: list, source_name: str) -> list:
    """A course notebook's "Open in Colab" badge (atop its first markdown cell) and Colab install cell (first).

    Only for a notebook of a module (``solutions/NN-topic/...``); the badge points to its course/ copy,
    the one a learner opens (kernel_lab.colab holds the repository's address).
    """
    module = progress.module_of(source_name)
    if module == progress.UNKNOWN_MODULE or not source_name.startswith("solutions/"):
        return cells
    course_path = "course/" + source_name[len("solutions/"):]
    for cell in cells:
        if cell.cell_type == "markdown":
            cell.source = colab.badge(course_path) + "\n\n" + cell.source
            break
    install = nbformat.v4.new_code_cell(colab.install_cell(module))
    install.metadata = {"tags": [colab.INSTALL_CELL_TAG]}
    return [install] + cells


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
            if READING_TAG in cell.get("metadata", {}).get("tags", []):
                cell.source = fold_reading(cell.source)
        cell.pop("id", None)
        # Keep only the tags: execution timestamps and the like come from the GPU run.
        tags = cell.get("metadata", {}).get("tags")
        cell["metadata"] = {"tags": tags} if tags else {}
        cells.append(cell)
    nb.cells = add_colab(cells, source_name)
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


# What a course notebook can be, and which of these are problems of the course (not the learner's doing).
PROBLEMS = ("out of date", "missing", "orphan")


@dataclass(frozen=True)
class CourseState:
    """One notebook of course/: ``kind`` is one of "in sync", "run" (outputs from the learner's runs),
    "edited", "backup", "yours" (a notebook of the learner's own), or a problem: "out of date" (its
    solution changed and course/ was not regenerated), "missing", "orphan" (its solution is gone)."""

    path: str  # relative to the repository root: course/...
    kind: str
    message: str
    problem: bool


def course_states(root: Path, *, strict: bool = False) -> list[CourseState]:
    """The state of every notebook course/ holds or should hold."""
    states = []

    def add(target, kind, message):
        problem = kind in PROBLEMS or (strict and kind != "in sync")
        states.append(CourseState(target.relative_to(root).as_posix(), kind, message, problem))

    expected = set()
    for sol, target, text in plan(root):
        expected.add(target)
        rel, sol_rel = target.relative_to(root).as_posix(), sol.relative_to(root).as_posix()
        if not target.exists():
            add(target, "missing", f"{rel} is missing: run python -m kernel_lab.exercises")
            continue
        if target.read_text() == text:
            add(target, "in sync", f"{rel} is what {sol_rel} generates")
            continue
        generated = nbformat.reads(text, as_version=4)
        if fingerprint(nbformat.read(target, as_version=4)) == fingerprint(generated):
            add(target, "run", f"{rel} carries outputs or metadata that the generator did not write: course "
                               "notebooks are committed as generated (run python -m kernel_lab.exercises --force)"
                if strict else f"{rel}: in step with its solution, with the outputs of your runs")
        elif learner_edited(target):
            if strict:
                add(target, "edited", f"{rel} was edited by hand, but course/ is generated: make the change in "
                                      f"{sol_rel} and run python -m kernel_lab.exercises --force")
                continue
            recorded = nbformat.read(target, as_version=4).metadata.get("kernel_lab", {}).get("fingerprint")
            moved_on = recorded != fingerprint(generated)
            add(target, "edited", f"{rel}: you have edited it; your edits are kept." + (
                f" Its solution has changed since it was generated: python -m kernel_lab.exercises --force "
                "writes the new version and saves yours beside it first." if moved_on else ""))
        else:
            add(target, "out of date", f"{rel} differs from what {sol_rel} generates: run "
                                       "python -m kernel_lab.exercises")
    for extra in sorted((root / "course").rglob("*.ipynb")):
        if extra in expected or ".ipynb_checkpoints" in extra.parts:
            continue
        rel = extra.relative_to(root).as_posix()
        source = nbformat.read(extra, as_version=4).metadata.get("kernel_lab", {}).get("generated_from")
        if BACKUP_MARK in extra.name:
            add(extra, "backup", f"{rel}: your copy, saved by --force; not tested")
        elif source:
            add(extra, "orphan", f"{rel} was generated from {source}, which no longer exists: delete it, or "
                                 "restore the solution")
        else:
            add(extra, "yours", f"{rel}: a notebook of your own; not tested")
    return states


def out_of_date(root: Path, *, strict: bool = False) -> list[str]:
    """The problems of course/ (empty: it is what the solutions generate, give or take the learner's work)."""
    return [s.message for s in course_states(root, strict=strict) if s.problem]


def generate(root: Path, *, force: bool = False, log=print) -> int:
    """Write course/ from solutions/; return how many notebooks were kept because a learner edited them."""
    kept = 0
    for _sol, target, text in plan(root):
        rel = target.relative_to(root).as_posix()
        if target.exists():
            if target.read_text() == text:
                continue
            if fingerprint(nbformat.read(target, as_version=4)) == fingerprint(nbformat.reads(text, as_version=4)):
                if not force:
                    continue  # only the outputs of the learner's runs differ: nothing to update
            elif learner_edited(target):
                if not force:
                    log(f"kept {rel}: you have edited it since it was generated. To replace it with the "
                        "new version, run again with --force (your copy is saved beside it first).")
                    kept += 1
                    continue
                backup = target.with_name(f"{target.stem}{BACKUP_MARK}{time.strftime('%Y%m%d-%H%M%S')}.ipynb")
                backup.write_text(target.read_text())
                log(f"saved your edits of {rel} as {backup.name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        log(f"wrote {rel}")
    return kept


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write course/ (exercises) from solutions/.")
    parser.add_argument("--root", help="the repository root (default: here)")
    parser.add_argument("--check", action="store_true",
                        help="only report on course/: exit 1 if a solution changed and course/ was not regenerated "
                             "(your edits, runs and own notebooks are listed, not failed)")
    parser.add_argument("--strict", action="store_true",
                        help="with --check: exit 1 unless course/ is exactly what solutions/ generates (CI)")
    parser.add_argument("--force", action="store_true",
                        help="also replace course notebooks you edited (a backup is saved first) or ran (outputs "
                             "cleared)")
    args = parser.parse_args(argv)
    root = _root(args.root)
    if not (root / "solutions").is_dir():
        print(f"no solutions/ folder under {root}", file=sys.stderr)
        return 2
    if args.check:
        states = [s for s in course_states(root, strict=args.strict) if s.kind != "in sync"]
        for s in states:
            print(("problem: " if s.problem else "") + s.message)
        if not states:
            print("course/ is in step with solutions/: every exercise notebook is what the generator writes")
        return 1 if any(s.problem for s in states) else 0
    generate(root, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
