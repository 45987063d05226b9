"""docs/mistakes.md: the common mistakes of each exercise, and what the checker says about each.

The page is generated from the checks' own tests, so it cannot drift from the checker. Its source is
the mutation test's catalogue (``MUTANTS`` in tests/test_mutation_checks.py): each mutant is one
classic mistake (a bound moved by one, a barrier dropped, a shuffle going the wrong way) applied to
a solution notebook's kernel, and the test runs the notebook's own cells with it, under a fixed seed,
and expects the notebook's check to stop it. ``kernel-lab mistakes`` runs every mutant the same way
(in the simulator, which takes minutes) and writes the page: per exercise, the mistake and the
message the learner sees. The mutation test compares each message with the page as it runs, and
fails when they differ (``kernel-lab mistakes`` then writes the new page).

A message is quoted by its *summary*: its first line (what is wrong) and its hints (why, and where to
look), without the rows of wrong elements in between; a message without hints keeps its first three
lines. The summary is what the test compares, numbers aside: a race's count of differing elements and
its first one vary from run to run (the simulator's threads interleave differently), its wording does not.

    kernel-lab mistakes           # (re)write docs/mistakes.md (in a checkout of the repository)
    kernel-lab mistakes --check   # exit 1 if the page lacks a mutant or quotes a message it no longer gives
    kernel-lab mistakes --only 05.5   # rerun one notebook's mutants, keep the others' quotes
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

PAGE = Path("docs") / "mistakes.md"
MUTATION_TESTS = Path("tests") / "test_mutation_checks.py"
_ENTRY = re.compile(r"^### (?P<id>.+?)\n\n```text\n(?P<message>.*?)\n```$", re.M | re.S)
_SEED = re.compile(r"^\(inputs drawn with seed=.*\)$")


def summary(error: BaseException) -> str:
    """The lines of a checker's message that the page quotes (see the module docstring)."""
    lines = [ln.rstrip() for ln in str(error).strip().splitlines() if not _SEED.match(ln.strip())]
    hints = [ln for ln in lines[1:] if ln.lstrip().startswith(("Hint:", "Hint ("))]  # "Hint (name): ..." too
    kept = [lines[0]] + hints if hints else lines[:3]
    kind = type(error).__name__
    return f"{kind}: " + "\n".join(kept) if lines else kind


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")  # signed: an example value may be 0 or -0


def matches(quoted: str | None, text: str) -> bool:
    """Does the page's quote say what the check said now (numbers aside)?"""
    return quoted is not None and _NUMBER.sub("#", quoted) == _NUMBER.sub("#", text)


def parse(text: str) -> dict[str, str]:
    """{mutant id: quoted summary} from the page."""
    return {m.group("id"): m.group("message") for m in _ENTRY.finditer(text)}


def names_a_cause(quoted: str) -> bool:
    """Does a quoted message name a likely cause? The checks and the simulator's reports say one in a
    hint line ("Hint: missing bounds check ...?"); a message without one only says what is wrong."""
    return any(ln.lstrip().startswith(("Hint:", "Hint (")) for ln in quoted.splitlines())


def cause_rate(text: str) -> tuple[int, int]:
    """(messages that name a likely cause, messages) on the page: issue 38 asks for 60% or more."""
    quotes = list(parse(text).values())
    return sum(names_a_cause(q) for q in quotes), len(quotes)


def render(entries: list[tuple[str, str, str, str]]) -> str:
    """The page, from (exercise, notebook, mutant id, summary) in catalogue order."""
    out = ["# Common mistakes and what the checker says", "",
           "Each entry is a classic mistake in one exercise's kernel and the message the exercise's check gives "
           "for it (its first line and its hints), as the mutation test (`tests/test_mutation_checks.py`) "
           "produces it in the simulator. On a GPU, an access out of bounds shows as elements written past the "
           "output and a missing barrier as wrong values now and then, rather than the simulator's report.", "",
           "**Generated** by `kernel-lab mistakes`; do not edit: the mutation test fails when a message and this "
           "page differ.", ""]
    current = None
    for exercise, notebook, mutant_id, text in entries:
        if exercise != current:
            out += [f"## {exercise}", "", f"Notebook: `{notebook}`", ""]
            current = exercise
        out += [f"### {mutant_id}", "", "```text", text, "```", ""]
    return "\n".join(out)


def load_mutation_tests(root: Path):
    """The mutation test module of a checkout (its MUTANTS, PROGRAMS and the way it runs them)."""
    path = Path(root) / MUTATION_TESTS
    spec = importlib.util.spec_from_file_location("kernel_lab_mutation_tests", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def collect(root: Path, log=print, only: str | None = None) -> list[tuple[str, str, str, str]]:
    """Run every mutant as the mutation test does; (exercise, notebook, id, summary) for each caught one.

    ``only``: run just the mutants whose notebook path contains this text (say ``05.5``) and keep the
    page's quotes for the others, so that a change to one notebook's checks rewrites its entries in
    a minute instead of the whole page's run.
    """
    tests = load_mutation_tests(root)
    import kernel_lab as kl
    from tqdm import tqdm

    kl.setup(requires=["warp"], quiet=True)
    entries = []
    kept = parse((Path(root) / PAGE).read_text()) if only and (Path(root) / PAGE).is_file() else {}
    mutants = tests.MUTANTS
    for m in tqdm(mutants, desc="mutants", unit="mutant", file=sys.stderr, disable=not sys.stderr.isatty()):
        notebook = tests.PROGRAMS[m.program][0].removeprefix("solutions/")
        if only and only not in notebook:
            if m.id in kept:
                entries.append((m.program, notebook, m.id, kept[m.id]))
            continue
        with tests.judging():
            error = tests.run_program(m.program, m)
        if error is None or not isinstance(error, tests._caught_types()):
            log(f"not on the page: {m.id} ({'survived' if error is None else type(error).__name__})")
            continue

        def again(m=m):
            with tests.judging():
                e = tests.run_program(m.program, m)
            return summary(e) if e is not None else "(passed)"

        entries.append((m.program, notebook, m.id, stable_summary(expected(root, m.id), summary(error), again)))
    return entries


def stable_summary(quoted: str | None, said: str, again, tries: int = 4) -> str:
    """What the page quotes for a mutant: the page's current quote while the check can still say it
    (a mutant caught through a race says one of several things from run to run; ``again()`` runs it
    once more, up to ``tries`` runs in all, as the mutation test does), else what it said now."""
    if quoted is None or matches(quoted, said):
        return quoted if quoted is not None else said
    for _ in range(tries - 1):
        if matches(quoted, again()):
            return quoted
    return said


def expected(root: Path, mutant_id: str) -> str | None:
    """The summary the page quotes for a mutant (None: the page has no entry for it)."""
    page = Path(root) / PAGE
    return parse(page.read_text()).get(mutant_id) if page.is_file() else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kernel-lab mistakes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository root (default: here)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} differs from what would be written")
    parser.add_argument("--only", metavar="TEXT",
                        help="rerun only the mutants of notebooks whose path contains TEXT (e.g. 05.5); keep the rest")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    if not (root / MUTATION_TESTS).is_file():
        print(f"no {MUTATION_TESTS} under {root}: run this in a checkout of the repository", file=sys.stderr)
        return 2
    text = render(collect(root, only=args.only))
    page = root / PAGE
    if args.check:
        if not page.is_file() or page.read_text() != text:
            print(f"{PAGE} differs from what the checks say now: run kernel-lab mistakes")
            return 1
        print(f"{PAGE} is up to date")
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    print(f"wrote {PAGE} ({text.count('### ')} mistakes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
