"""How much of each exercise's solution its hints give away.

A hint that holds the answer turns an exercise into copying: the learner reads the lines, pastes
them, and the check passes without the idea having been met. The course's rule is that hints go from
the idea, to where to look, to partial code; the first hint holds no line of the solution, and the
whole solution stays in ``solutions/``. This module measures it, per exercise and over the course.

An **exercise** is a code cell of a solution notebook with ``### BEGIN SOLUTION`` blocks; its
**hints** are the collapsed ``<details><summary>Hint ...</summary>`` blocks of the markdown cells
between the previous exercise and it (where a notebook states an exercise and then gives its hints).
A quiz (a cell whose solution is ``answer = "b"``) is an exercise without code to write or hints.
A **solution line** is a line inside a solution block, without its comment, that says something: the
stub lines (``##>``), blank lines, comments and bare keywords (``else:``, ``pass``, ``return``) do
not count, nor lines shorter than :data:`MIN_CHARS` characters (``i += 1`` is not an answer). A
solution line **leaks** when it appears in a hint's text, whitespace aside.

    python -m kernel_lab.hint_leaks            # every notebook: leaked lines per exercise, and overall
    python -m kernel_lab.hint_leaks --worst 10 # the ten exercises that give most away
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .exercises import BEGIN, STUB as _STUB, solution_block_lines  # the markers the generator reads

STUB = _STUB.strip()  # "##>": a stub line, whatever follows the marker
MIN_CHARS = 12  # shorter lines ("i += 1", "return s") give nothing away that a hint's words do not
_BARE = {"else:", "try:", "pass", "return", "break", "continue", "finally:"}
_QUIZ = re.compile(r"""^answer\s*=\s*(['"][^'"]*['"]|[-\d.]+)$""")
_HINT = re.compile(r"<details>\s*<summary>\s*(Hint[^<]*)</summary>(.*?)</details>", re.S | re.I)
_LINES_SAID = re.compile(r"\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a dozen|a few)"
                         r"(?:\s*(?:-|–|to|or)\s*\d+)?\s+(?:\w+\s+)?lines?\b", re.I)


@dataclass
class Hint:
    title: str
    text: str
    leaked: list[str] = field(default_factory=list)  # the solution lines this hint holds


@dataclass
class Exercise:
    notebook: str  # path relative to the repository
    cell: str  # the solution cell's id
    lines: list[str]  # its solution lines, normalised
    hints: list[Hint]
    statement: str  # the markdown between the previous exercise and this one, hints included

    @property
    def is_quiz(self) -> bool:
        """A quiz's answer (``answer = "b"``): a choice to make, not code to write; it needs no hint."""
        return bool(self.lines) and all(_QUIZ.match(line) for line in self.lines)

    @property
    def leaked(self) -> set[str]:
        return {line for h in self.hints for line in h.leaked}

    @property
    def share(self) -> float:
        return len(self.leaked) / len(self.lines) if self.lines else 0.0

    @property
    def says_how_many_lines(self) -> bool:
        return bool(_LINES_SAID.search(_HINT.sub("", self.statement)))


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _code_only(line: str) -> str:
    """A line without its trailing comment (a '#' inside a string is kept)."""
    out, quote = [], None
    for ch in line:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out).strip()


_ASSIGNED = re.compile(r"^[\w\[\], .()]+?\s*(?:[-+*/%&|^]|<<|>>|//)?=(?!=)\s*(.+)$")


def _telling_parts(line: str) -> list[str]:
    """The line, and what it computes (a ``return``'s or an assignment's right-hand side), squashed:
    a hint that writes ``(x + h) % m - h`` gives away ``r = (x + h) % m - h`` as surely as the line."""
    parts = [line]
    if line.startswith("return "):
        parts.append(line[len("return "):])
    m = _ASSIGNED.match(line)
    if m:
        parts.append(m.group(1))
    return [_squash(p) for p in parts if len(p) >= MIN_CHARS]


def solution_lines(source: str) -> list[str]:
    """The lines of a cell's solution blocks that count (see the module's docstring)."""
    lines = []
    for stripped in solution_block_lines(source):
        if not stripped.startswith(STUB):
            code = _code_only(stripped)
            if code and code not in _BARE and len(code) >= MIN_CHARS:
                lines.append(code)
    return lines


def exercises(path: Path, root: Path) -> list[Exercise]:
    nb = json.loads(path.read_text())
    found, markdown = [], []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            markdown.append(source)
            continue
        if BEGIN not in source:
            continue
        statement = "\n\n".join(markdown)
        markdown = []
        lines = solution_lines(source)
        hints = [Hint(title.strip(), body) for title, body in _HINT.findall(statement)]
        for hint in hints:
            text = _squash(hint.text)
            hint.leaked = [line for line in dict.fromkeys(lines) if any(part in text for part in _telling_parts(line))]
        found.append(Exercise(path.relative_to(root).as_posix(), cell.get("id", "?"), lines, hints, statement))
    return found


def course(root: Path) -> list[Exercise]:
    """Every exercise of the course but the quizzes, in notebook order."""
    return [e for path in sorted((root / "solutions").glob("*/*.ipynb")) for e in exercises(path, root) if not e.is_quiz]


def overall(all_exercises: list[Exercise]) -> float:
    """Leaked solution lines over all solution lines, over the course."""
    total = sum(len(set(e.lines)) for e in all_exercises)
    return sum(len(e.leaked) for e in all_exercises) / total if total else 0.0


def report(all_exercises: list[Exercise], worst: int | None = None) -> str:
    rows = sorted(all_exercises, key=lambda e: -e.share) if worst else all_exercises
    rows = rows[:worst] if worst else rows
    out = [f"{'notebook':<52} {'cell':<12} {'lines':>5} {'leaked':>6} {'share':>6}  first hint"]
    for e in rows:
        first = f"{len(e.hints[0].leaked)} lines" if e.hints else "NO HINT"
        out.append(f"{Path(e.notebook).stem:<52} {e.cell:<12} {len(set(e.lines)):>5} {len(e.leaked):>6} "
                   f"{100 * e.share:>5.0f}%  {first}")
    out.append(f"overall: {100 * overall(all_exercises):.1f}% of {sum(len(set(e.lines)) for e in all_exercises)} "
               f"solution lines appear in hints, over {len(all_exercises)} exercises")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernel_lab.hint_leaks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository root (default: here)")
    parser.add_argument("--worst", type=int, metavar="N", help="only the N exercises that give most away")
    parser.add_argument("notebooks", nargs="*", help="solution notebooks (default: all)")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    if not (root / "solutions").is_dir():
        print(f"no solutions/ under {root}: run this in a checkout of the repository", file=sys.stderr)
        return 2
    found = ([e for nb in args.notebooks for e in exercises(Path(nb).resolve(), root)] if args.notebooks
             else course(root))
    print(report(found, args.worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
