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
goal, an estimate, arithmetic on measured figures). It lists them, each with why in parentheses, in
a comment that the rendered notebook does not show::

    <!-- unchecked: 85–95% (the prediction); 0.85 ns (1.78 ms / 2.1 million atomics) -->

An exemption holds only for a figure that is no measurement, or that this notebook's outputs hold
by arithmetic (:func:`exemption_problems`); never for a figure measured elsewhere (a probe script,
an Nsight Compute run, another GPU's run), which the learner cannot reproduce from the notebook:

* its reason names a prediction, a goal, an estimate or a model (``(the prediction)``, ``(the
  course's goal)``, ``(our estimate from the cycle count)``, ``(the sector model: 32 against 4)``)
  and no probe, profiler or other run; or
* its reason is arithmetic on figures the outputs print, and the result agrees with the figure at
  the precision it is written with: ``5.7 times (1.670 ms / 292.6 us)``, ``3.8 µs (57.8 µs − 54.0
  µs)``, ``8% (39.63 / 36.77 TFLOP/s)`` (a ratio may be quoted as a percentage, or as the percentage
  it differs from 1), ``0.85 ns (1.78 ms / 2.1 million atomics)`` (a count such as "2.1 million
  atomics" has no unit of measurement, so it is not looked up; figures with a unit are). A range
  may give one expression per end: ``2.3 to 2.8 times (952.8 µs / 409.9 µs to 3.377 ms / 1.202 ms)``.

The figures that still break the rule are :data:`KNOWN_DEBTS`, issue 35 §3's list, which only
shrinks: a new exemption with another reason fails, and so does a debt no exemption uses any more.

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


def printed_for(path: Path, nb, cell, own: Printed | None = None) -> tuple[Printed, list[str]]:
    """What a reading may quote: its notebook's printed figures (``own``, if already read) and those
    of the notebooks it names."""
    printed, missing = own if own is not None else printed_figures(nb), []
    for other in _directives(cell.source, _ALSO_FROM):
        other_path = (Path(path).parent / other).resolve()
        if other_path.exists():
            printed = printed + printed_figures(nbformat.read(other_path, as_version=4))
        else:
            missing.append(other)
    return printed, missing


# --- exemptions: what an <!-- unchecked: ... --> entry may stand for --------------------------------

# Known debts of issue 35 §3: figures measured by a probe script or an Nsight Compute run that no
# notebook prints. Moving them into cells (an `ncu` cell that runs where the tool exists, the probe's
# measurement as a code cell) needs a GPU; until then these exemptions pass. Pay a debt by printing
# the figure in a cell of the notebook and deleting it here: a debt that no exemption uses any more
# is reported, so this list only shrinks, and any other exemption for a measured figure fails.
# (notebook file, figures as the exemption writes them, where they were measured)
KNOWN_DEBTS = (
    ("04.4-tensor-cores.ipynb", ("0.29x", "0.50x"),
     "scripts/probes/flash_attention.py: the register kernel's first version and its best run"),
    ("04.5-backward.ipynb", ("0.36x", "0.40x", "0.22x"),
     "scripts/probes/flash_backward.py: the causal runs at d = 128 and 64, and 64 keys a block"),
    ("05.6-quantized-gemms.ipynb", ("33.0 us", "52.5 us", "49.8 us", "64.5 us"),
     "scripts/probes/w4a8_variants.py on an H200: the M = 64 kernel and three variants of it"),
    ("05.6-quantized-gemms.ipynb", ("25%", "21%"),
     "Nsight Compute on an H200: issue slots and DRAM busy at M = 64"),
    ("06.1-tensor-core-gemm.ipynb", ("13 TFLOP/s",),
     "a variant with cuBLASDx's own copy, tried once and not kept in the notebook"),
    ("06.1-tensor-core-gemm.ipynb", ("60%", "49%", "37%", "39%"),
     "Nsight Compute on an H200 (scripts/probes/pipeline_ncu.py): tensor pipe busy, barrier waits"),
    ("06.1-tensor-core-gemm.ipynb", ("0.83x",),
     "scripts/probes/pipeline_configs.py on an H200: persistent blocks at 4096^3 and 8192^3"),
    ("06.3-beyond-one-gemm.ipynb", ("61%", "44%", "15-21%"),
     "Nsight Compute on an H200: 05.6's W4A8 kernel, warps waiting on loads and DRAM busy"),
    ("06.3-beyond-one-gemm.ipynb", ("75%", "53.8 us"),
     "scripts/probes/w4a8_variants.py on an H200: a CuPy copy, and 128-row blocks"),
    ("06.4-autotuning.ipynb", ("1%", "0.83x"), "scripts/probes/pipeline_configs.py on an H200: bands and 8192^3"),
    ("07.5-fully-fused.ipynb", ("30.0 ms", "23.4 ms", "6.6 ms"),
     "scripts/probes/ozaki_epilogue_variants.py: exercise 1's kernel with and without its epilogues"),
)

# A reason that says the figure is no measurement; and what says it was measured somewhere else.
_NOT_A_MEASUREMENT = re.compile(r"\b(?:predict\w*|goals?|estimat\w*|model\w*)\b", re.I)
_MEASURED_ELSEWHERE = re.compile(
    r"probe|nsight|\bncu\b|scripts/|another run|earlier run|stored run|tried|\b[A-Z]\d{3}\b", re.I)
# An operand of the arithmetic in a reason: a number, a count's multiplier, a unit (not "x": that is
# the multiplication sign here). A number followed by a word that is no unit ("2.1 million atomics",
# "12 rows") is a count.
_OPERAND_UNITS = [(pattern, unit, factor) for pattern, unit, factor in _UNITS if unit != "x"]
_OPERAND = re.compile(
    rf"(?<![\w.^/])(?P<n>{_NUMBER})(?P<mult>\s(?:thousand|million|billion)\b)?"
    rf"(?P<unit>{'|'.join(f'(?:{pattern})' for pattern, _, _ in _OPERAND_UNITS)})?(?![\w.])")
_OPERATOR = re.compile(r"\s*(?P<op>/|−|\+|×)\s*|\s+(?P<spaced>-|x)\s+")
_MULTIPLIERS = {"thousand": 1e3, "million": 1e6, "billion": 1e9}


@dataclass(frozen=True)
class Exemption:
    """One figure of an ``<!-- unchecked: ... -->`` entry, with the reason the entry gives."""

    figure: Figure
    text: str  # the figure as the entry writes it, normalized
    reason: str


def _split_top_level(text: str) -> list[str]:
    """``text`` split at ";" and line breaks that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth <= 0 and ch in ";\n":
            parts.append("".join(current))
            current, depth = [], 0
        else:
            current.append(ch)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def exemptions(source: str) -> list[Exemption]:
    """Every figure that a cell's ``unchecked`` comments exempt, each with its entry's reason."""
    found = []
    for comment in _COMMENT.findall(source):
        m = _UNCHECKED.match(comment)
        if not m:
            continue
        for entry in _split_top_level(m.group(1)):
            reason = " ".join(re.findall(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)", entry))
            written = re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", entry).strip()
            entry_figures = figures(written) or [Figure(written, "", ((0.0, 0.0),))]
            found += [Exemption(f, normalize(f.text), reason.strip()) for f in entry_figures]
    return found


def _operand(m, reason: str) -> dict:
    """An operand's value interval, unit and kind ("unit", "count" or "number": a bare number)."""
    number, mult, written_unit = m.group("n"), m.group("mult"), m.group("unit")
    if written_unit:
        for pattern, unit, factor in _OPERAND_UNITS:
            if re.fullmatch(pattern, written_unit):
                return dict(text=m.group(0), number=number, unit=unit, factor=factor,
                            interval=_interval(number, factor), kind="unit")
    scale = _MULTIPLIERS[mult.strip()] if mult else 1.0
    low, high = _interval(number, 1.0)
    counted = mult is not None or re.match(r"\s+[^\W\d_]", reason[m.end():]) is not None
    if counted and re.match(r"\s+x\s", reason[m.end():]):  # "32 x 4": the multiplication sign
        counted = mult is not None
    return dict(text=m.group(0), number=number, unit=None, factor=1.0, interval=(low * scale, high * scale),
                kind="count" if counted else "number")


def _expressions(reason: str) -> list[tuple]:
    """The binary expressions of a reason: (left operand, operator, right operand)."""
    operands = list(_OPERAND.finditer(reason))
    found = []
    for left, right in zip(operands, operands[1:]):
        op = _OPERATOR.fullmatch(reason[left.end():right.start()])
        if op is None:
            continue
        sign = {"/": "/", "−": "-", "-": "-", "+": "+", "×": "*", "x": "*"}[op.group("op") or op.group("spaced")]
        found.append((_operand(left, reason), sign, _operand(right, reason)))
    return found


def _printed_operand(operand: dict, printed: Printed) -> bool:
    """Is an operand of a reason's arithmetic printed by the outputs (a count needs not be)?"""
    if operand["kind"] == "count":
        return True
    if operand["kind"] == "unit":
        figure = Figure(operand["text"], operand["unit"], (operand["interval"],),
                        digits=_significant_digits(operand["number"]), factor=operand["factor"])
        return supported(figure, printed)
    raw = _interval(operand["number"], 1.0)  # a bare number: printed with any unit, or in a table
    return (any(_overlap(raw, (f.ends[0][0] / f.factor, f.ends[0][1] / f.factor)) for f in printed.with_unit)
            or any(_overlap(raw, interval) for interval, _, _ in printed.bare))


def _evaluate(left: dict, sign: str, right: dict, figure: Figure) -> list[tuple]:
    """The intervals (in the figure's canonical unit) the expression stands for, or [] if its units do
    not give the figure's."""
    a, b = dict(left), dict(right)
    if a["kind"] == "number" and b["kind"] == "unit":  # "39.63 / 36.77 TFLOP/s": one unit for both
        a.update(unit=b["unit"], kind="unit", interval=(a["interval"][0] * b["factor"], a["interval"][1] * b["factor"]))
    if b["kind"] == "number" and a["kind"] == "unit":
        b.update(unit=a["unit"], kind="unit", interval=(b["interval"][0] * a["factor"], b["interval"][1] * a["factor"]))
    (alo, ahi), (blo, bhi) = a["interval"], b["interval"]
    if sign in "+-":
        if a["unit"] != b["unit"] or (a["unit"] is not None and a["unit"] != figure.unit):
            return []
        if a["unit"] is None:  # "30.0 - 23.4": the figure's unit for both
            alo, ahi, blo, bhi = (v * figure.factor for v in (alo, ahi, blo, bhi))
        return [(alo - bhi, ahi - blo)] if sign == "-" else [(alo + blo, ahi + bhi)]
    if sign == "*":
        units = [u for u in (a["unit"], b["unit"]) if u is not None]
        if len(units) > 1 or (units and units[0] != figure.unit) or min(alo, blo) < 0:
            return []
        return [(alo * blo, ahi * bhi)]
    if blo <= 0 or alo < 0:
        return []
    low, high = alo / bhi, ahi / blo
    if a["unit"] == b["unit"] or {a["kind"], b["kind"]} <= {"number", "count"}:  # a ratio
        if figure.unit == "x":
            return [(low, high)]
        if figure.unit == "%":
            return [(100 * low, 100 * high), (100 * (low - 1), 100 * (high - 1)), (100 * (1 - high), 100 * (1 - low))]
        return []
    if a["kind"] == "unit" and b["kind"] != "unit" and a["unit"] == figure.unit:  # "1.78 ms / 2.1 million"
        return [(low, high)]
    return []


def _arithmetic_holds(exemption: Exemption, printed: Printed) -> tuple[bool, str]:
    """Does the reason's arithmetic, on printed figures, give the exempted figure (each end of a
    range from one expression)? With why not, for the message."""
    figure = exemption.figure
    if not figure.unit:
        return False, ""
    why = ""
    ends_met = []
    for end in figure.ends:
        met = False
        for left, sign, right in _expressions(exemption.reason):
            intervals = _evaluate(left, sign, right, figure)
            if not any(_overlap(end, interval) for interval in intervals):
                if intervals and not why:
                    value = (intervals[0][0] + intervals[0][1]) / 2 / figure.factor
                    why = f"its arithmetic gives {value:.4g}, not {figure.text.strip()}"
                continue
            missing = [o["text"] for o in (left, right) if not _printed_operand(o, printed)]
            if missing:
                why = why or f"{', '.join(missing)} in its arithmetic: not printed by the stored outputs"
                continue
            met = True
            break
        ends_met.append(met)
    return all(ends_met), why


def _debts_of(name: str) -> dict:
    return {normalize(figure): why for notebook, figures_, why in KNOWN_DEBTS if notebook == name for figure in figures_}


def exemption_verdict(exemption: Exemption, printed: Printed, notebook: str = "") -> tuple[str, str]:
    """How an exemption holds: "not measured", "arithmetic", "debt", or "refused" with why."""
    reason = exemption.reason
    if _NOT_A_MEASUREMENT.search(reason) and not _MEASURED_ELSEWHERE.search(reason):
        return "not measured", ""
    holds, why = _arithmetic_holds(exemption, printed)
    if holds:
        return "arithmetic", ""
    if exemption.text in _debts_of(notebook):
        return "debt", ""
    return "refused", why


def exemption_problems(source: str, printed: Printed, notebook: str = "") -> tuple[list[tuple], set[str]]:
    """The exemptions of a cell that hold for no admitted reason, as (exemption, message); and the
    debts of ``notebook`` (KNOWN_DEBTS) that the cell uses."""
    problems, debts = [], set()
    for exemption in exemptions(source):
        verdict, why = exemption_verdict(exemption, printed, notebook)
        if verdict == "debt":
            debts.add(exemption.text)
        if verdict != "refused":
            continue
        because = f" ({why})" if why else ""
        problems.append((exemption, (
            f"{exemption.figure.text.strip()} is exempted as '{exemption.reason or 'no reason given'}': no prediction, "
            f"goal, estimate or model, nor arithmetic on figures the outputs print{because}. Quote a figure the "
            "outputs print, write the figure as arithmetic on printed ones (e.g. '5.7 times (1.670 ms / 292.6 us)'), "
            "or print it in a code cell; a figure that only a probe or a profile measured is a debt of issue 35 §3 "
            "(kernel_lab.readings.KNOWN_DEBTS)")))
    return problems, debts


def check_notebook(path: Path, nb=None, *, name: str | None = None) -> list[Problem]:
    """Every figure of every reading of one notebook that its stored outputs do not print; every
    exemption (in any markdown cell) that holds for no admitted reason; and every debt of this
    notebook in KNOWN_DEBTS that no exemption uses any more."""
    path = Path(path)
    nb = nb if nb is not None else nbformat.read(path, as_version=4)
    name = name or path.as_posix()
    problems, debts_used = [], set()
    own = printed_figures(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or not (is_reading(cell) or "unchecked:" in cell.source):
            continue
        source = cell.source
        opening = re.sub(r"\s+", " ", _blank(source, _COMMENT)).strip()[:60]

        def problem(start, end, message):
            problems.append(Problem(name, index, opening, sentence_at(source, start, end), message))

        printed, missing = printed_for(path, nb, cell, own)
        if is_reading(cell):
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
                        f"{why}{hint}. Update the sentence to the outputs; if the figure is not a measurement "
                        "(a prediction, a goal, an estimate) or is arithmetic on printed figures, list it with "
                        "why in the cell's <!-- unchecked: ... --> comment.")
            for entry in sorted(stale):
                problem(0, 0, f"'{entry}' is listed as unchecked but the reading does not quote it: remove it from "
                              "the comment")
        refused, used = exemption_problems(source, printed, path.name)
        debts_used |= used
        prose = _blank(_blank(source, _COMMENT), _INLINE_CODE)
        for exemption, message in refused:
            at = next((f for f in figures(prose) if normalize(f.text) == exemption.text), None)
            problem(at.start if at else 0, at.end if at else 0, message)
    for text, why in sorted(_debts_of(path.name).items()):
        if text not in debts_used:
            problems.append(Problem(name, -1, "KNOWN_DEBTS", f"{text} ({why})",
                                    f"{text} is a known debt of issue 35 §3 that no exemption of this notebook uses "
                                    "any more: remove it from kernel_lab.readings.KNOWN_DEBTS"))
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
