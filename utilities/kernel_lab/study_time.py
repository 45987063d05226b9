"""How much each notebook asks of a learner, and how long it takes: the course's one measure of size.

README.md's module map (its *time* column) and docs/syllabi.md (the size of every notebook, and the
workshop and semester plans built from them) are written from this module, and
tests/test_study_time.py fails when either differs from what it computes now.

What is counted, per solution notebook (``solutions/NN-topic/*.ipynb``):

* **exercises**: the code cells with ``### BEGIN SOLUTION`` blocks, as :mod:`kernel_lab.hint_leaks`
  counts them (one cell, one exercise with its own hints and check, however many blocks it holds);
  a *quiz* (a cell whose solution is ``answer = "b"``, :attr:`kernel_lab.hint_leaks.Exercise.is_quiz`)
  is counted apart: a choice to make, not code to write;
* **learner lines**: the lines inside the solution blocks that are not blank, not comments and not
  the stub (``##>``): the code a learner writes (bare keywords such as ``else:`` count: they are typed);
* **prose**: the words of the markdown cells a learner reads, without the hints (collapsed, opened
  when stuck: their time is part of an exercise's) and without HTML comments; cells tagged
  ``solution-only`` (not in ``course/``) are left out.

The estimate is a simple model with a low and a high end (:data:`MODEL`): the low end for a learner
who has written CUDA before, reads fast and gets most checks right at the first or second try; the
high end for one new to GPU kernels. It is an estimate, not a measurement: docs/syllabi.md says how
it was chosen, and an instructor replaces it with the room's own times after a first run.

    kernel-lab study-time            # the table: exercises, lines, words and estimated hours per notebook
    kernel-lab study-time --write    # rewrite README.md's time column and docs/syllabi.md's generated tables
    kernel-lab study-time --check    # exit 1 if either differs from what the notebooks give now
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from . import hint_leaks
from .exercises import BEGIN, SOLUTION_ONLY_TAG, solution_block_lines

README = Path("README.md")
SYLLABI = Path("docs") / "syllabi.md"
COMMAND = "kernel-lab study-time --write"


# ---------------------------------------------------------------------------------------------- counting

@dataclass(frozen=True)
class Exercise:
    """One exercise cell: its label as the notebook's headings name it ("3", "8b"; "quiz"), its learner
    lines, and the words of prose since the previous exercise (its statement, and what leads to it)."""
    label: str
    lines: int
    words: int = 0
    quiz: bool = False


@dataclass(frozen=True)
class Notebook:
    path: str  # "02-reductions-and-gemm/02.3-sgemm-progression", as README's module map names it
    cells: tuple  # every Exercise, quizzes included, in order
    tail_words: int  # prose after the last exercise: the take-away, what comes next

    @property
    def words(self) -> int:
        return self.tail_words + sum(e.words for e in self.cells)

    @property
    def short(self) -> str:
        """The notebook's number as the course says it: "00", "01.3", "02.3"."""
        return short_name(self.path)

    @property
    def exercises(self) -> tuple:
        return tuple(e for e in self.cells if not e.quiz)

    @property
    def quizzes(self) -> int:
        return sum(e.quiz for e in self.cells)

    @property
    def lines(self) -> int:
        return sum(e.lines for e in self.exercises)


def short_name(path: str) -> str:
    folder, _, stem = path.rpartition("/")
    number = re.match(r"\d\d(?:\.\d+[a-z]?)?", stem).group(0)
    if "." in number or folder == stem:  # "02.3-...", "02.3b-..." or "00-getting-started/00-getting-started"
        return number
    return f"{folder[:2]}.{int(number)}"  # module 01 numbers its notebooks "03-...": 01.3


_HEADING = re.compile(r"^#{1,6}\s+(.*)$", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")
_EXERCISE = re.compile(r"\bExercises?\b(?:\s+(\d+[a-z]?)\b)?", re.I)


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def learner_lines(source: str) -> int:
    """Lines inside a cell's solution blocks that a learner types (not blank, not comments, not stubs)."""
    # "##> " stubs are comments too
    return sum(1 for line in solution_block_lines(source) if line and not line.startswith("#"))


def prose_words(markdown: str) -> int:
    """Words a learner reads in a markdown cell: hints and HTML comments left out."""
    text = _COMMENT.sub(" ", hint_leaks._HINT.sub(" ", markdown))
    return len(_WORD.findall(text))


def _label(statement: str, ordinal: int) -> str | None:
    """The exercise's label from its statement's headings ("## Exercise 3: ..." gives "3", "## Exercise:"
    its number in order, a heading naming two "2-3"), or None when they name no exercise."""
    headings = _HEADING.findall(_FENCE.sub("", hint_leaks._HINT.sub("", statement)))
    labels = [m.group(1) or str(ordinal) for h in headings for m in _EXERCISE.finditer(h)]
    if not labels:
        return None
    return labels[0] if len(labels) == 1 else f"{labels[0]}-{labels[-1]}"


def measure(path: Path, root: Path) -> Notebook:
    """Count one solution notebook (see the module's docstring)."""
    nb = json.loads(path.read_text())
    cells, statement, words, label = [], [], 0, "1"  # words: the prose since the previous exercise
    for cell in nb["cells"]:
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        source = _source(cell)
        if cell["cell_type"] == "markdown":
            statement.append(source)
            words += prose_words(source)
            continue
        if cell["cell_type"] != "code" or BEGIN not in source:
            continue
        quiz = hint_leaks.Exercise("", "", hint_leaks.solution_lines(source), [], "").is_quiz
        if quiz:
            cells.append(Exercise("quiz", 0, words, quiz=True))
        else:  # no heading of its own: a second cell of the exercise above ("Now put them in your kernel")
            label = _label("\n\n".join(statement), sum(not e.quiz for e in cells) + 1) or label
            cells.append(Exercise(label, learner_lines(source), words))
        statement, words = [], 0
    rel = path.relative_to(root / "solutions")
    return Notebook(f"{rel.parent.as_posix()}/{rel.stem}", tuple(cells), words)


def course(root: Path) -> list[Notebook]:
    """Every solution notebook of the course, in the module map's order."""
    return [measure(p, root) for p in sorted((root / "solutions").glob("*/*.ipynb"))]


# ---------------------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class Model:
    """Minutes for each thing a learner does, as (low, high): see the module's docstring."""
    words_per_minute: tuple = (150, 100)  # technical prose with formulas and tables, read once
    per_exercise: tuple = (10, 20)  # read the statement, run the check, read a failure, a hint, measure
    per_line: tuple = (1, 2)  # write, check and fix one line of kernel code (index arithmetic, barriers)
    per_quiz: tuple = (2, 5)
    per_shown_exercise: tuple = (3, 6)  # an exercise pre-solved by the instructor: paste it, read it, run it
    per_notebook: tuple = (10, 20)  # setup, running the measurements (and their compiles), the take-away


MODEL = Model()
Span = tuple  # (low, high) minutes


def _add(*spans) -> Span:
    return (sum(s[0] for s in spans), sum(s[1] for s in spans))


def _reading(words: int, model: Model) -> Span:
    return (words / model.words_per_minute[0], words / model.words_per_minute[1])


def base_minutes(nb: Notebook, model: Model = MODEL) -> Span:
    """What a notebook takes besides its exercises: its setup and measurements, its quizzes and the
    prose that leads to them, its closing prose."""
    quizzes = [e for e in nb.cells if e.quiz]
    return _add(model.per_notebook, _reading(nb.tail_words + sum(q.words for q in quizzes), model),
                *([model.per_quiz] * len(quizzes)))


def exercise_minutes(e: Exercise, written: bool = True, model: Model = MODEL) -> Span:
    """One exercise and the prose that leads to it, written by the learner or (``written=False``)
    pre-solved: pasted from ``solutions/`` and run."""
    work = (model.per_exercise[0] + e.lines * model.per_line[0], model.per_exercise[1] + e.lines * model.per_line[1])
    return _add(_reading(e.words, model), work if written else model.per_shown_exercise)


def minutes(nb: Notebook, written=None, shown=(), model: Model = MODEL) -> Span:
    """(low, high) minutes for a notebook: the exercises whose numbers (1, 2, ... in order) are in
    ``written`` written by the learner (all when None), those in ``shown`` pre-solved, the others left."""
    parts = [exercise_minutes(e, True, model) if written is None or i in written else exercise_minutes(e, False, model)
             for i, e in enumerate(nb.exercises, 1) if written is None or i in written or i in shown]
    return _add(base_minutes(nb, model), *parts)


def total(notebooks: list[Notebook]) -> Span:
    return _add(*(minutes(nb) for nb in notebooks))


def hours(span: Span, step: float = 0.5) -> str:
    """A range of minutes as hours, to the nearest ``step`` (at least one step): "1.5-3 h"."""
    def fmt(m):
        return f"{max(step, round(m / 60 / step) * step):g}"
    low, high = fmt(span[0]), fmt(span[1])
    return f"{low} h" if low == high else f"{low}-{high} h"


# ---------------------------------------------------------------------------------------------- plans

# What each notebook needs to run with its timings: a level (a room's GPUs must reach the highest of its
# notebooks'), in the words of docs/syllabi.md's "Which GPU runs what" table.
GPU_LEVELS = ("no GPU (NumPy)", "any CUDA GPU", "compute capability 8.0+ and a CUDA 13 driver", "Hopper (H100, H200)",
              "two GPUs with peer access (NVLink: two H100s or H200s)")
GPU_NEEDS = {"04.4": 2, "06.1": 2, "06.2": 2, "06.3": 2, "06.4": 2, "06.5": 2,
             "07.1": 0, "07.6": 0, "07.3": 3, "07.4": 3, "07.5": 3, "08.1": 3, "08.2": 3, "08.3": 3, "09.1": 4, "09.2": 4}  # the others: any CUDA GPU (1)
GPU_NOTES = {"09.1": "its checks run on one GPU or none", "09.2": "its check runs on one GPU or none",
             "02.4": "FP64 is slow on consumer GPUs", "04.5": "its tensor-core part needs cc 8.0+",
             "05.3": "numba-cuda's FP8 conversions need cc 8.9", "06.1": "its pipeline-API kernels need Hopper"}


def gpu_need(short: str) -> int:
    return GPU_NEEDS.get(short, 1)


@dataclass(frozen=True)
class Step:
    """A notebook in a day of a plan. ``write``: the exercises the room writes, by position in the
    notebook ("1-3": its first three exercise cells, whatever their headings call them; "" for none;
    None: all); ``show``: those the instructor pre-solves (learners
    paste them from ``solutions/``, read and run them: a later exercise builds on them). Exercises of
    the notebook that no step of the plan writes or shows are left for afterwards. A notebook's setup,
    quizzes and closing prose are counted at its first step."""
    notebook: str  # short name, "02.3"
    write: str | None = None
    show: str = ""


@dataclass(frozen=True)
class Day:
    title: str
    budget_hours: float  # the time the room works in notebooks (the introduction and breaks aside)
    steps: tuple


@dataclass(frozen=True)
class Plan:
    key: str  # the name of its block in docs/syllabi.md: <!-- study-time:plan KEY -->
    days: tuple
    after: tuple = ()  # notebooks outside the plan that learners take up next, on their own


# A day fits when the high end of its estimate is within its budget: the slowest learners finish what
# the room writes, and the fastest go on with the pre-solved exercises themselves. tests/test_study_time.py
# holds every plan to it; when a notebook grows, pre-solve more of it here and run kernel-lab study-time --write.
PLANS = (
    Plan("two-hours", (Day("", 2.0, (Step("00"),)),), after=("01.1", "01.2", "01.3")),
    Plan("one-day", (Day("", 6.0, (Step("00", "1"), Step("01.2", "1"), Step("01.3", "1"), Step("02.3", "1-3"))),),
         after=("01.1", "01.4", "02.1")),
    Plan("gemm-workshop", (
        Day("Day 1: the rhythm, memory, shared tiles, warps", 6.0,
            (Step("00"), Step("01.2", "1"), Step("01.3", "1-2"), Step("01.4", "1"))),
        Day("Day 2: the SGEMM progression, and a fused epilogue", 6.0,
            (Step("02.3", "3-5", show="1-2"), Step("03.1", "1-2", show="3"))),
    ), after=("01.1", "01.5", "02.1", "02.2", "02.3b", "02.4", "03.2", "03.3", "03.4")),
    Plan("attention-day", (Day("", 6.0, (Step("04.1"), Step("04.2"), Step("04.3", "1", show="2"))),),
         after=("04.4", "04.5")),
)

SEMESTER_HOURS_PER_WEEK = 9  # a three-hour lab and six hours on one's own


def _numbers(text: str | None, count: int) -> list[int]:
    if text is None:
        return list(range(1, count + 1))
    if not text:
        return []
    first, _, last = text.partition("-")
    numbers = list(range(int(first), int(last or first) + 1))
    if not numbers or numbers[-1] > count:
        raise ValueError(f"exercises {text!r}: the notebook has {count} exercises")
    return numbers


@dataclass(frozen=True)
class Row:
    nb: Notebook
    written: tuple  # exercise numbers the room writes at this step
    shown: tuple  # exercise numbers the instructor pre-solves at this step
    left: tuple  # at the notebook's last step: the numbers of the exercises left for afterwards
    first: bool  # the notebook's first step in the plan (its setup and closing prose counted here)

    @property
    def minutes(self) -> Span:
        parts = [exercise_minutes(self.nb.exercises[i - 1]) for i in self.written]
        parts += [exercise_minutes(self.nb.exercises[i - 1], written=False) for i in self.shown]
        return _add(base_minutes(self.nb) if self.first else (0, 0), *parts)


def plan_rows(plan: Plan, notebooks: dict) -> list[list[Row]]:
    """Each day's rows; raises ValueError when a step names a notebook or an exercise that is not there
    (a notebook renumbered its exercises: update PLANS), or an exercise twice."""
    steps = [(d, s) for d, day in enumerate(plan.days) for s in day.steps]
    done = {}
    for _, s in steps:
        if s.notebook not in notebooks:
            raise ValueError(f"plan {plan.key}: no notebook {s.notebook}")
        count = len(notebooks[s.notebook].exercises)
        numbers = _numbers(s.write, count) + _numbers(s.show, count)
        taken = set(done.get(s.notebook, ())) & set(numbers)
        if taken or len(set(numbers)) < len(numbers):
            raise ValueError(f"plan {plan.key}: {s.notebook}'s exercises {sorted(taken or numbers)} named twice")
        done.setdefault(s.notebook, []).extend(numbers)
    days = [[] for _ in plan.days]
    seen = set()
    for k, (d, s) in enumerate(steps):
        nb = notebooks[s.notebook]
        count = len(nb.exercises)
        last = all(t.notebook != s.notebook for _, t in steps[k + 1:])
        left = tuple(i for i in range(1, count + 1) if i not in done[s.notebook]) if last else ()
        days[d].append(Row(nb, tuple(_numbers(s.write, count)), tuple(_numbers(s.show, count)), left,
                           s.notebook not in seen))
        seen.add(s.notebook)
    return days


def semester(notebooks: list[Notebook], hours_per_week: float = SEMESTER_HOURS_PER_WEEK) -> list[list]:
    """The whole course in weeks, in order, each of at most ``hours_per_week`` at the high end of the
    estimate (unless one exercise alone takes more): a week takes exercises while they fit, a notebook's
    prose and setup going with its first exercise. Returns per week a list of (notebook, [numbers])."""
    budget, weeks, current, used = hours_per_week * 60, [], [], 0.0
    for nb in notebooks:
        items = [(i, exercise_minutes(e)) for i, e in enumerate(nb.exercises, 1)] or [(None, (0, 0))]
        items[0] = (items[0][0], _add(items[0][1], base_minutes(nb)))
        for number, span in items:
            if used + span[1] > budget and current:
                weeks.append(current)
                current, used = [], 0.0
            if current and current[-1][0] is nb:
                current[-1][1].append(number)
            else:
                current.append((nb, [number]))
            used += span[1]
    if current:
        weeks.append(current)
    return weeks


# ---------------------------------------------------------------------------------------------- rendering

def _ranges(labels) -> str:
    """["1", "2", "3", "5", "8b"] -> "1-3, 5, 8b" (in order, repeats once)."""
    out, run = [], []
    for label in list(dict.fromkeys(labels)) + [None]:
        if label is not None and label.isdigit() and run and int(label) == int(run[-1]) + 1:
            run.append(label)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [label] if label is not None and label.isdigit() else []
        if label is not None and not label.isdigit():
            out.append(label)
    return ", ".join(out)


def _exercises(nb: Notebook, numbers, word: str = "") -> str:
    """"exercises 1-3 (28 lines)": the exercises of ``numbers`` by their labels, and their learner lines."""
    chosen = [nb.exercises[i - 1] for i in numbers]
    lines, labels = sum(e.lines for e in chosen), _ranges(e.label for e in chosen)
    word = (word + ("" if labels.isdigit() else "s") + " ") if word else ""
    return f"{word}{labels} ({lines} line{'' if lines == 1 else 's'})"


def table(notebooks: list[Notebook]) -> str:
    """The size of every notebook and the course's total (markdown)."""
    out = ["| notebook | exercises | quizzes | learner lines | words of prose | estimate |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for nb in notebooks:
        out.append(f"| `{nb.path}` | {len(nb.exercises)} | {nb.quizzes} | {nb.lines} | {nb.words:,} | "
                   f"{hours(minutes(nb))} |")
    out.append(f"| **the course** ({len(notebooks)} notebooks) | {sum(len(nb.exercises) for nb in notebooks)} | "
               f"{sum(nb.quizzes for nb in notebooks)} | {sum(nb.lines for nb in notebooks):,} | "
               f"{sum(nb.words for nb in notebooks):,} | {hours(total(notebooks), step=5)} |")
    return "\n".join(out)


def summary_text(notebooks: list[Notebook]) -> str:
    return (f"Measured from its solution notebooks, Kernel Lab is {len(notebooks)} notebooks, {sum(len(nb.exercises) for nb in notebooks)} exercises and "
            f"{sum(nb.quizzes for nb in notebooks)} quizzes: {sum(nb.lines for nb in notebooks):,} lines of code for "
            f"the learner to write and {sum(nb.words for nb in notebooks):,} words of prose to read, "
            f"{hours(total(notebooks), step=5)} of study by the estimate below.")


def _minutes(span: Span) -> str:
    low, high = (5 * round(m / 5) for m in span)
    return f"{low}-{high} minutes"


def model_text(notebooks: list[Notebook], model: Model = MODEL) -> str:
    """The model in words, and what it gives for the course's shortest and longest exercises."""
    m = model
    exercises = [(nb, i, e) for nb in notebooks for i, e in enumerate(nb.exercises, 1)]
    short = min(exercises, key=lambda x: (x[2].lines, x[2].words))
    long = max(exercises, key=lambda x: (x[2].lines, x[2].words))

    def name(x):
        nb, _, e = x
        return f"{nb.short}'s exercise {e.label} ({e.lines} line{'' if e.lines == 1 else 's'}, {e.words} words)"
    anchors = (f" With these, the course's shortest exercise, {name(short)}, takes "
               f"{_minutes(exercise_minutes(short[2], model=m))} with its prose, and its longest, {name(long)}, "
               f"{_minutes(exercise_minutes(long[2], model=m))}.")
    return (f"A notebook's time, low to high: its prose read at {m.words_per_minute[0]} to "
            f"{m.words_per_minute[1]} words a minute; {m.per_exercise[0]} to {m.per_exercise[1]} minutes an "
            f"exercise (its statement, a check run, a failure read, a hint, the measurement) and {m.per_line[0]} "
            f"to {m.per_line[1]} minutes a learner line (writing, checking and fixing it); {m.per_quiz[0]} to "
            f"{m.per_quiz[1]} minutes a quiz; {m.per_notebook[0]} to {m.per_notebook[1]} minutes a notebook "
            f"(its setup, the measurement cells and their compiles). An exercise the instructor pre-solves "
            f"takes {m.per_shown_exercise[0]} to {m.per_shown_exercise[1]} minutes (pasted from `solutions/`, "
            f"read, run). Estimates are rounded to the nearest half hour." + anchors)


def _gpu_line(shorts) -> str:
    shorts = list(dict.fromkeys(shorts))
    notes = [f"{s}: {GPU_NOTES[s]}" for s in shorts if s in GPU_NOTES]
    return f"GPU: {GPU_LEVELS[max(gpu_need(s) for s in shorts)]}" + (f" ({'; '.join(notes)})" if notes else "")


def plan_text(plan: Plan, notebooks: dict) -> str:
    out = []
    for day, rows in zip(plan.days, plan_rows(plan, notebooks)):
        if day.title:
            out += [f"**{day.title}**", ""]
        out += ["| notebook | the room writes | the instructor pre-solves | left for afterwards | estimate |",
                "| --- | --- | --- | --- | --- |"]
        for row in rows:
            room = _exercises(row.nb, row.written, "exercise") if row.written else "none"
            if row.first and row.nb.quizzes:
                room += f", {row.nb.quizzes} quiz" + ("zes" if row.nb.quizzes > 1 else "")
            pre = _exercises(row.nb, row.shown) if row.shown else "none"
            left = _exercises(row.nb, row.left) if row.left else "none"
            out.append(f"| `{row.nb.path}` | {room} | {pre} | {left} | {hours(row.minutes)} |")
        estimate = (f"Estimate: {hours(_add(*(r.minutes for r in rows)))} of the {day.budget_hours:g} hours "
                    f"the room works in notebooks. {_gpu_line(r.nb.short for r in rows)}.")
        out += ["", estimate, ""]
    left = any(row.left for rows in plan_rows(plan, notebooks) for row in rows)
    after = (["the exercises left above"] if left else []) + list(plan.after)
    if after:
        out.append(f"Afterwards, on one's own: {', '.join(after[:-1])}{' and ' if len(after) > 1 else ''}{after[-1]}.")
    return "\n".join(out).strip()


def semester_text(notebooks: list[Notebook], hours_per_week: float = SEMESTER_HOURS_PER_WEEK) -> str:
    weeks = semester(notebooks, hours_per_week)
    out = ["| week | notebooks (exercises) | estimate | GPU |", "| --- | --- | --- | --- |"]
    for number, week in enumerate(weeks, 1):
        names, spans = [], []
        for nb, numbers in week:
            real = [i for i in numbers if i is not None]
            whole = len(real) == len(nb.exercises)
            names.append(nb.short if whole else f"{nb.short} ({_ranges(nb.exercises[i - 1].label for i in real)})")
            spans += [exercise_minutes(nb.exercises[i - 1]) for i in real]
            if (real[:1] or [1])[0] == 1:  # the week that starts the notebook (semester() counts it there)
                spans.append(base_minutes(nb))
        out.append(f"| {number} | {', '.join(names)} | {hours(_add(*spans))} | "
                   f"{GPU_LEVELS[max(gpu_need(nb.short) for nb, _ in week)]} |")
    out += ["", (f"{len(weeks)} weeks of at most {hours_per_week:g} hours at the high end of the estimate; "
                 f"the course in all: {hours(total(notebooks), step=5)}.")]
    return "\n".join(out)


def blocks(notebooks: list[Notebook]) -> dict[str, str]:
    """Every generated block of docs/syllabi.md, by name."""
    by_name = {nb.short: nb for nb in notebooks}
    out = {"summary": summary_text(notebooks), "model": model_text(notebooks), "notebooks": table(notebooks),
           "semester": semester_text(notebooks)}
    out.update({f"plan {p.key}": plan_text(p, by_name) for p in PLANS})
    return out


_BLOCK = re.compile(r"(?P<open><!-- study-time:(?P<name>[^>]*?) -->\n)(?P<body>.*?)(?P<close>^<!-- /study-time -->)",
                    re.S | re.M)


def rewrite_syllabi(text: str, notebooks: list[Notebook]) -> str:
    """docs/syllabi.md with every ``<!-- study-time:NAME -->`` block written afresh."""
    made = blocks(notebooks)
    names = [m.group("name") for m in _BLOCK.finditer(text)]
    unknown, missing = [n for n in names if n not in made], [n for n in made if n not in names]
    if unknown or missing:
        raise ValueError(f"{SYLLABI}: generated blocks unknown {unknown}, missing {missing}: each is a pair of lines "
                         "<!-- study-time:NAME --> and <!-- /study-time --> (a plan of PLANS: NAME is 'plan KEY')")
    return _BLOCK.sub(lambda m: m.group("open") + made[m.group("name")] + "\n" + m.group("close"), text)


TIME_HEADER = "[time](docs/syllabi.md#how-long-each-notebook-takes)"
_MAP_HEADER = re.compile(r"^\| notebook \|(?: [^|]* \|)? what you learn \|\n\| --- \|(?: --- \|)? --- \|$", re.M)
_MAP_ROW = re.compile(r"^(\| `(?P<path>\d\d-[^`]+/[^`]+)`[^|]*\| )(?:(?P<time>[^|]*?) \| )?(?P<rest>[^|]*\|)$", re.M)


def rewrite_readme(text: str, notebooks: list[Notebook]) -> str:
    """README.md with the module map's time column (added if it is missing) written afresh."""
    times = {nb.path: hours(minutes(nb)) for nb in notebooks}
    before, found, after = text.partition("## Module map")
    section, nxt, rest = after.partition("\n## ")
    if not found or not _MAP_HEADER.search(section):
        raise ValueError(f"{README}: no module map table (| notebook | what you learn |) under '## Module map'")
    section = _MAP_HEADER.sub(f"| notebook | {TIME_HEADER} | what you learn |\n| --- | --- | --- |", section, count=1)

    def row(m):
        if m.group("path") not in times:
            raise ValueError(f"{README}: the module map names {m.group('path')}, which solutions/ lacks")
        return f"{m.group(1)}{times[m.group('path')]} | {m.group('rest')}"
    return before + found + _MAP_ROW.sub(row, section) + nxt + rest


# ---------------------------------------------------------------------------------------------- command

def day_fits(day: Day, rows: list[Row]) -> bool:
    return _add(*(r.minutes for r in rows))[1] <= day.budget_hours * 60


def report(notebooks: list[Notebook]) -> str:
    width = max(len(nb.path) for nb in notebooks) + 1
    out = [f"{'notebook':<{width}} {'exercises':>9} {'quizzes':>7} {'lines':>6} {'words':>7}  estimate"]
    for nb in notebooks:
        out.append(f"{nb.path:<{width}} {len(nb.exercises):>9} {nb.quizzes:>7} {nb.lines:>6} {nb.words:>7}  "
                   f"{hours(minutes(nb))}")
    out.append(f"{'the course':<{width}} {sum(len(nb.exercises) for nb in notebooks):>9} "
               f"{sum(nb.quizzes for nb in notebooks):>7} {sum(nb.lines for nb in notebooks):>6} "
               f"{sum(nb.words for nb in notebooks):>7}  {hours(total(notebooks), step=5)}")
    by_name = {nb.short: nb for nb in notebooks}
    for plan in PLANS:
        for n, (day, rows) in enumerate(zip(plan.days, plan_rows(plan, by_name)), 1):
            verdict = "fits" if day_fits(day, rows) else "DOES NOT FIT: pre-solve more of it (PLANS in kernel_lab.study_time)"
            out.append(f"plan {plan.key}, day {n}: {hours(_add(*(r.minutes for r in rows)))} of "
                       f"{day.budget_hours:g} h: {verdict}")
    out.append(f"semester: {len(semester(notebooks))} weeks of at most {SEMESTER_HOURS_PER_WEEK} h")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kernel-lab study-time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository root (default: here)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help=f"rewrite {README}'s time column and {SYLLABI}'s tables")
    what.add_argument("--check", action="store_true", help=f"exit 1 if {README} or {SYLLABI} differ from the notebooks")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    if not (root / "solutions").is_dir():
        print(f"no solutions/ under {root}: run this in a checkout of the repository", file=sys.stderr)
        return 2
    notebooks = course(root)
    if not (args.write or args.check):
        print(report(notebooks))
        return 0
    stale = []
    for page, rewrite in ((README, rewrite_readme), (SYLLABI, rewrite_syllabi)):
        old = (root / page).read_text()
        new = rewrite(old, notebooks)
        if new != old:
            stale.append(str(page))
            if args.write:
                (root / page).write_text(new)
    if args.check:
        print(f"{', '.join(stale)} differ from the notebooks' sizes: run {COMMAND}" if stale
              else f"{README} and {SYLLABI} agree with the notebooks' sizes")
        return 1 if stale else 0
    print(f"rewrote {', '.join(stale)}" if stale else f"{README} and {SYLLABI} were up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
