"""Hold the readings of the solution notebooks to the figures their stored outputs print.

A *reading* is a markdown cell that says what the notebook's measurements showed ("On an H200 the
padded transpose reached 57% of the copy roofline"). It is written from one GPU run, and outputs
are stored again after every change to a notebook; a reading nobody updates then contradicts the
output above it. So every reading carries the cell tag ``reading`` (in course/ the exercise
generator folds it away until the learner has measured), and this module checks it against the
text the notebook's code cells print:

* A figure with a unit of measurement (``57%``, ``0.24x``, ``4 times``, ``29.2 µs``, ``1.10 ms``,
  ``3.44 TB/s``, ``30.6 TFLOP/s``, ``34,241 launches/s``) must be printed by the stored outputs,
  equal at the precision it is written with: ``1.10 ms`` stands for a printed 1.099 ms, ``30
  TFLOP/s`` does not stand for 30.6. Units convert (``0.27 ms`` for ``269.4 us``), and ``N times``
  may be the inverse of a printed ratio (``4 times slower`` for ``0.24x``).
* A range (``92–93%``, ``from 1.6 to 6.0 TFLOP/s``) names two printed figures, unless "about"
  comes first: ``about 75–80%`` must contain at least one printed figure.
* In a list of three or more the unit of the last figure counts for all (``21, 38 and 62%``).
* Figures in `inline code` are code, not measurements. Numbers without a unit of measurement
  (32 threads, 8 blocks per SM, 128 bytes) are not checked: few of them are measurements, and
  checking them would push the prose to avoid them.

A reading may quote figures that are not this run's measurements (the prediction it answers, a
datasheet value, arithmetic on measured figures). It lists them, with why, in a comment that the
rendered notebook does not show; the text in parentheses is for the reader and is not parsed::

    <!-- unchecked: 85–95% (the prediction); 0.8 ns (1.7 ms / 2.1 million atomics) -->

A reading that compares with another notebook's measurements names that notebook (a path relative
to this one), and the figures it prints count too::

    <!-- also from: ../00-getting-started/00-getting-started.ipynb -->

Usage::

    python -m kernel_lab.readings             # check every solution notebook; exit 1 on a problem
    python -m kernel_lab.readings solutions/01-gpu-in-practice/03-transpose-shared-memory-banks.ipynb
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

READING_TAG = "reading"

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# (pattern right after the number, canonical unit, factor to the canonical unit). Longest first.
_UNITS = [
    (r"\s?(?:TFLOP/s|TOP/s|TOPS\b)", "FLOP/s", 1e12),
    (r"\s?GFLOP/s", "FLOP/s", 1e9),
    (r"\s?TB/s", "B/s", 1e12),
    (r"\s?GB/s", "B/s", 1e9),
    (r"\s?MB/s", "B/s", 1e6),
    (r"\s?launches(?:/s|\sper\ssecond)", "launches/s", 1.0),
    (r"\s?ns\b", "s", 1e-9),
    (r"\s?(?:µs|μs|us)\b", "s", 1e-6),
    (r"\s?ms\b", "s", 1e-3),
    (r"\ss\b", "s", 1.0),
    (r"%", "%", 1.0),
    (r"[x×](?!\w)", "x", 1.0),
    (r"\stimes\b", "x", 1.0),
]
_UNIT_ALTERNATIVES = "|".join(f"(?P<u{i}>{pattern})" for i, (pattern, _, _) in enumerate(_UNITS))
# A number not glued to a word (H200, sm_90, 2^24), an optional second number making a range, a unit.
_FIGURE = re.compile(
    rf"(?<![\w.^/])(?P<a>{_NUMBER})(?:\s?(?P<sep>–|—|-|\sto\s)\s?(?P<b>{_NUMBER}))?(?:{_UNIT_ALTERNATIVES})")
_BARE_NUMBER = re.compile(rf"(?<![\w.^/])(?:{_NUMBER})(?![\w.])")
# The members of a list whose last member carries the unit: "21, 38 and 62%" (three members at least,
# the last two joined by "and" or "or": neither "at stride 4, 22%" nor "at stride 16 and 11%" is a list).
_LIST_LAST = re.compile(rf"(?<![\w.^/])(?P<n>{_NUMBER}),?\s(?:and|or)\s$")
_LIST_MEMBER = re.compile(rf"(?<![\w.^/])(?P<n>{_NUMBER}),\s$")
_ABOUT = re.compile(r"(?:\babout|~)\s*$", re.I)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_COMMENT = re.compile(r"<!--(.*?)-->", re.S)
_UNCHECKED = re.compile(r"^\s*unchecked:(.*)$", re.S)
_ALSO_FROM = re.compile(r"^\s*also from:(.*)$", re.S)
_PROGRESS_BAR = re.compile(r"\d+%\|")  # tqdm's lines: their percentages are not measurements
# A markdown cell that reports a GPU run reads like this; the test suite makes sure it is tagged.
_LOOKS_LIKE_A_READING = re.compile(
    r"Reading the measurement|\*\*Reading\b|(?:^|[.!?:]\s+|\*\*\s*)On (?:an?|the) [A-Z]\d{3}\b", re.M)


@dataclass(frozen=True)
class Figure:
    """One number with a unit of measurement, as written in prose or printed in an output."""

    text: str
    unit: str  # canonical: "%", "x", "s", "B/s", "FLOP/s", "launches/s"
    ends: tuple  # one (low, high) interval per number written, in the canonical unit
    approximate: bool = False  # "about" comes first
    start: int = 0
    end: int = 0
    digits: int = 0  # significant digits of the number written (the most of its numbers)
    factor: float = 1.0  # from the unit as written to the canonical unit (1e-6 for µs)
    where: tuple = ()  # for printed figures: (cell index, output index)

    @property
    def is_range(self) -> bool:
        return len(self.ends) == 2


def _interval(number: str, factor: float) -> tuple:
    """The values a number written with this many decimals stands for, in the canonical unit."""
    value = float(number.replace(",", ""))
    decimals = len(number.split(".")[1]) if "." in number else 0
    half = 0.5 * 10.0 ** -decimals
    return ((value - half) * factor, (value + half) * factor)


def _significant_digits(number: str) -> int:
    return len(number.replace(",", "").replace(".", "").lstrip("0"))


def _unit_of(match) -> tuple:
    for i, (_, unit, factor) in enumerate(_UNITS):
        if match.group(f"u{i}") is not None:
            return unit, factor, match.group(f"u{i}")
    raise AssertionError("a figure without a unit")


def normalize(text: str) -> str:
    """A figure's text in one spelling, to compare a reading's figures with its unchecked list."""
    text = re.sub(r"\s+", " ", text.strip())
    text = re.sub(r"\s?(?:—|-|\sto\s)\s?", "–", text)
    return text.replace("μs", "µs").replace(" us", " µs").replace("×", "x").replace(",", "")


def figures(text: str, lists: bool = True) -> list[Figure]:
    """Every figure with a unit in ``text`` (prose with its inline code already blanked out).

    With ``lists``, the numbers of a list take the unit of its last member.
    """
    found = []
    for m in _FIGURE.finditer(text):
        unit, factor, _ = _unit_of(m)
        numbers = [m.group("a")] + ([m.group("b")] if m.group("b") else [])
        members, start = [], m.start()
        if lists and (last := _LIST_LAST.search(text[:start])) is not None:
            members, at = [last], last.start()
            while (previous := _LIST_MEMBER.search(text[:at])) is not None:
                members.insert(0, previous)
                at = previous.start()
            if len(members) > 1:  # "12, 21 and 38%"; but "at stride 16 and 11%" is no list
                start = at
            else:
                members = []
        approximate = _ABOUT.search(text[:start]) is not None
        for member in members:
            number = member.group("n")
            found.append(Figure(number + _unit_of(m)[2], unit, (_interval(number, factor),), approximate,
                                member.start(), member.start() + len(number), _significant_digits(number),
                                factor))
        found.append(Figure(m.group(0), unit, tuple(_interval(n, factor) for n in numbers), approximate,
                            m.start(), m.end(), max(_significant_digits(n) for n in numbers), factor))
    return found


def _blank(text: str, pattern: re.Pattern) -> str:
    """``text`` with every match of ``pattern`` replaced by spaces (positions stay the same)."""
    return pattern.sub(lambda m: " " * len(m.group(0)), text)


def _output_text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") in ("execute_result", "display_data"):
        plain = output.get("data", {}).get("text/plain", "")
        return "" if plain.startswith("<Figure") else plain
    return ""


@dataclass
class Printed:
    """The figures a notebook's stored outputs print: with a unit, and bare numbers (table columns)."""

    with_unit: list
    bare: list  # (interval of the raw number, text, where)

    def __add__(self, other: "Printed") -> "Printed":
        return Printed(self.with_unit + other.with_unit, self.bare + other.bare)


def printed_figures(nb) -> Printed:
    with_unit, bare = [], []
    for c, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o, output in enumerate(cell.get("outputs", [])):
            for line in _output_text(output).splitlines():
                if _PROGRESS_BAR.search(line):
                    continue
                line_figures = figures(line, lists=False)
                with_unit += [Figure(f.text, f.unit, f.ends, start=f.start, end=f.end, digits=f.digits,
                                     factor=f.factor, where=(c, o)) for f in line_figures]
                taken = _blank(line, _FIGURE)
                bare += [(_interval(b.group(0), 1.0), b.group(0), (c, o)) for b in _BARE_NUMBER.finditer(taken)
                         if _significant_digits(b.group(0)) >= 3]  # "0.402" in a table, not any "7"
    return Printed(with_unit, bare)


def _overlap(a: tuple, b: tuple) -> bool:
    """Do two rounding intervals share more than an end? (16% and 15% touch at 15.5 but differ.)"""
    return min(a[1], b[1]) - max(a[0], b[0]) > 1e-9 * max(abs(a[1]), abs(b[1]))


def _supporters_of_end(end: tuple, figure: Figure, printed: Printed) -> list[str]:
    """Printed figures (their text) equal to one number of a prose figure, at its written precision."""
    found = []
    for f in printed.with_unit:
        if f.unit != figure.unit:
            continue
        low, high = f.ends[0]
        if _overlap(end, (low, high)):
            found.append(f.text)
        elif figure.unit == "x" and low > 0 and _overlap(end, (1 / high, 1 / low)):  # "4 times slower": 0.24x
            found.append(f.text)
    if figure.digits >= 3:  # a bare number (3 digits or more) in a table whose header carries the unit
        raw = (end[0] / figure.factor, end[1] / figure.factor)
        found += [text for interval, text, _ in printed.bare if _overlap(raw, interval)]
    return found


def _inside(figure: Figure, printed: Printed) -> list[str]:
    """Printed figures inside the range of an "about A–B" figure."""
    span = (figure.ends[0][0], figure.ends[-1][1])
    return [f.text for f in printed.with_unit if f.unit == figure.unit and _overlap(span, f.ends[0])]


def supporters(figure: Figure, printed: Printed) -> list[str]:
    """The printed figures that back a prose figure (what a drift of the outputs would change)."""
    if figure.approximate and figure.is_range:
        return _inside(figure, printed)
    return [text for end in figure.ends for text in _supporters_of_end(end, figure, printed)]


def supported(figure: Figure, printed: Printed) -> bool:
    """Does the stored output print this figure (or, after "about", one inside its range)?"""
    if figure.approximate and figure.is_range:
        return bool(_inside(figure, printed))
    return all(_supporters_of_end(end, figure, printed) for end in figure.ends)


def nearest(figure: Figure, printed: Printed, count: int = 3) -> list[str]:
    """The printed figures of the same unit closest to this one: the candidates for the update."""
    middle = (figure.ends[0][0] + figure.ends[-1][1]) / 2
    same = {f.text: f for f in printed.with_unit if f.unit == figure.unit}
    if middle <= 0:
        return list(same)[:count]
    def distance(f):
        value = sum(f.ends[0]) / 2
        return abs(math.log(value / middle)) if value > 0 else math.inf
    return [f.text for f in sorted(same.values(), key=distance)[:count]]


def sentence_at(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` around a figure, on one line: what the next editor has to change."""
    left = max(text.rfind(". ", 0, start), text.rfind(".\n", 0, start), text.rfind("\n\n", 0, start))
    right = min((i for i in (text.find(". ", end), text.find(".\n", end), text.find("\n\n", end)) if i >= 0),
                default=len(text))
    return re.sub(r"\s+", " ", text[left + 1 if left >= 0 else 0: right + 1]).strip()


@dataclass(frozen=True)
class Problem:
    notebook: str
    cell: int
    opening: str  # the first words of the cell, to find it in JupyterLab
    sentence: str
    message: str

    def __str__(self) -> str:
        where = f"{self.notebook}, cell {self.cell} (\"{self.opening}\")"
        return f"{where}:\n    \"{self.sentence}\"\n    {self.message}"


def is_reading(cell) -> bool:
    return cell.cell_type == "markdown" and READING_TAG in cell.get("metadata", {}).get("tags", [])


def looks_like_a_reading(cell) -> bool:
    """A markdown cell that reports a GPU run ("On an H200 ...", "**Reading ...**")."""
    return cell.cell_type == "markdown" and _LOOKS_LIKE_A_READING.search(cell.source) is not None


def _directives(source: str, pattern: re.Pattern) -> list[str]:
    items = []
    for comment in _COMMENT.findall(source):
        m = pattern.match(comment)
        if m:
            text = re.sub(r"\([^)]*\)", "", m.group(1))  # the reasons in parentheses are for the reader
            items += [item.strip() for item in re.split(r"[;\n]", text) if item.strip()]
    return items


def checked_figures(source: str) -> tuple[list[Figure], set[str]]:
    """The figures of a reading that the outputs must back, and its stale unchecked entries."""
    unchecked = {normalize(u) for u in _directives(source, _UNCHECKED)}
    prose = _blank(_blank(source, _COMMENT), _INLINE_CODE)
    everything = figures(prose)
    quoted = {normalize(f.text) for f in everything}
    return [f for f in everything if normalize(f.text) not in unchecked], unchecked - quoted


def printed_for(path: Path, nb, cell) -> tuple[Printed, list[str]]:
    """What a reading may quote: its notebook's printed figures and those of the notebooks it names."""
    printed, missing = printed_figures(nb), []
    for other in _directives(cell.source, _ALSO_FROM):
        other_path = (Path(path).parent / other).resolve()
        if other_path.exists():
            printed = printed + printed_figures(nbformat.read(other_path, as_version=4))
        else:
            missing.append(other)
    return printed, missing


def check_notebook(path: Path, nb=None, *, name: str | None = None) -> list[Problem]:
    """Every figure of every reading of one notebook that its stored outputs do not print."""
    path = Path(path)
    nb = nb if nb is not None else nbformat.read(path, as_version=4)
    name = name or path.as_posix()
    problems = []
    for index, cell in enumerate(nb.cells):
        if not is_reading(cell):
            continue
        source = cell.source
        opening = re.sub(r"\s+", " ", _blank(source, _COMMENT)).strip()[:60]

        def problem(start, end, message):
            problems.append(Problem(name, index, opening, sentence_at(source, start, end), message))

        printed, missing = printed_for(path, nb, cell)
        for other in missing:
            problem(0, 0, f"'also from: {other}' names a notebook that does not exist")
        checked, stale = checked_figures(source)
        for figure in checked:
            if supported(figure, printed):
                continue
            candidates = nearest(figure, printed)
            if figure.approximate and figure.is_range:
                why = f"about {figure.text}: no printed figure lies in this range"
            else:
                why = f"{figure.text.strip()}: not printed by the stored outputs"
            hint = f" (printed {figure.unit} figures nearest to it: {', '.join(candidates)})" if candidates else ""
            problem(figure.start, figure.end,
                    f"{why}{hint}. Update the sentence to the outputs; if the figure is not a measurement of "
                    "this run (a prediction, a datasheet value, arithmetic), list it in the cell's "
                    "<!-- unchecked: ... --> comment.")
        for entry in sorted(stale):
            problem(0, 0, f"'{entry}' is listed as unchecked but the reading does not quote it: remove it from "
                          "the comment")
    return problems


def untagged_readings(nb) -> list[int]:
    """Indices of markdown cells that report a GPU run but lack the ``reading`` tag."""
    return [i for i, cell in enumerate(nb.cells) if looks_like_a_reading(cell) and not is_reading(cell)]


def _solution_notebooks(root: Path) -> list[Path]:
    return sorted(p for p in (root / "solutions").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Check that the readings of solution notebooks quote their outputs.")
    parser.add_argument("notebooks", nargs="*", help="notebooks to check (default: every one under solutions/)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.notebooks] or _solution_notebooks(Path.cwd())
    count = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for index in untagged_readings(nb):
            count += 1
            print(f"{path.as_posix()}, cell {index}: reports a GPU run but has no '{READING_TAG}' tag")
        for p in check_notebook(path, nb):
            count += 1
            print(p)
    print(f"{count} problem(s) in the readings of {len(paths)} notebook(s)" if count else
          f"the readings of {len(paths)} notebook(s) quote their outputs")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
