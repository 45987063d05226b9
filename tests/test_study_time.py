"""The course's size and study time (kernel_lab.study_time), and the pages written from them.

README.md's module map gives each notebook's estimated time, and docs/syllabi.md the size of every
notebook and the workshop and semester plans: both are generated, and these tests fail when they
differ from what the notebooks give now (``kernel-lab study-time --write`` rewrites them), or when a
day of a plan no longer fits its hours.
"""

from pathlib import Path

import nbformat
import pytest
from kernel_lab import cli, study_time
from kernel_lab.study_time import Day, Exercise, Notebook, Plan, Step
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def course():
    return study_time.course(ROOT)


def _write(tmp_path, cells, name="00-x/00-x.ipynb"):
    path = tmp_path / "solutions" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=cells), path)
    return path


FIRST = ("## The idea\n\nOne thread per element, five words here.\n\n## Exercise 1: the kernel\n\nWrite it (three lines)."
         "\n\n<details><summary>Hint 1</summary>\n\nthese hint words are not counted\n</details>\n"
         "<!-- reading pending the GPU run: nor are these -->")
KERNEL = ("@cuda.jit\ndef k(x, out):\n    ### BEGIN SOLUTION\n    ##> pass  # your code\n    i = cuda.grid(1)  # one each\n\n"
          "    # a comment line\n    if i < x.size:\n        out[i] = 2 * x[i]\n    ### END SOLUTION\n")
TWO_BLOCKS = ("a = 1\n### BEGIN SOLUTION\nb = a + 1\n### END SOLUTION\nc = 3\n### BEGIN SOLUTION\n##> d = ...\nd = b * c\n"
              "else_ = d\n### END SOLUTION\n")


def test_the_counts_of_a_small_notebook(tmp_path):
    solution_only = new_markdown_cell("Words only the solutions show, never the learner.")
    solution_only.metadata["tags"] = ["solution-only"]
    path = _write(tmp_path, [
        new_markdown_cell(FIRST), new_code_cell(KERNEL),
        new_markdown_cell("## Exercise 2: two blocks\n\nTwo parts (three lines)."), new_code_cell(TWO_BLOCKS),
        new_markdown_cell("Now the second cell of it."), new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"),
        solution_only,
        new_markdown_cell("## Quiz\n\nWhich is it?"), new_code_cell('### BEGIN SOLUTION\nanswer = "b"\n### END SOLUTION'),
        new_markdown_cell("## What you have seen\n\nThe end."),
    ])
    nb = study_time.measure(path, tmp_path)
    assert nb.path == "00-x/00-x" and nb.short == "00"
    # a cell is one exercise however many blocks it holds; a cell without a heading continues the one above
    assert [(e.label, e.lines, e.quiz) for e in nb.cells] == [("1", 3, False), ("2", 3, False), ("2", 1, False),
                                                              ("quiz", 0, True)]
    assert len(nb.exercises) == 3 and nb.quizzes == 1 and nb.lines == 7
    # prose: hints, HTML comments and solution-only cells left out; each exercise takes the prose before it
    assert [e.words for e in nb.cells] == [17, 8, 6, 4] and nb.tail_words == 6 and nb.words == 41
    assert study_time.learner_lines(KERNEL) == 3  # not the stub, the blank line or the comment


def test_short_names_follow_the_course():
    assert [study_time.short_name(p) for p in ("00-getting-started/00-getting-started", "01-gpu-in-practice/03-transpose",
                                               "02-reductions-and-gemm/02.3-sgemm",
                                               "02-reductions-and-gemm/02.3b-sgemm")] == ["00", "01.3", "02.3", "02.3b"]


def test_the_model_adds_up(tmp_path):
    model = study_time.Model(words_per_minute=(100, 50), per_exercise=(10, 20), per_line=(1, 2), per_quiz=(2, 4),
                             per_shown_exercise=(3, 6), per_notebook=(5, 10))
    nb = Notebook("00-x/00-x", (Exercise("1", 10, 100), Exercise("2", 20, 200), Exercise("quiz", 0, 100, quiz=True)), 100)
    assert study_time.base_minutes(nb, model) == (5 + 2 + 2, 10 + 4 + 4)  # setup, quiz with its prose, closing prose
    assert study_time.minutes(nb, model=model) == (9 + 1 + 20 + 2 + 30, 18 + 2 + 40 + 4 + 60)
    # exercise 2 pre-solved; then left for afterwards (neither it nor its prose counted)
    assert study_time.minutes(nb, written={1}, shown={2}, model=model) == (9 + 21 + 2 + 3, 18 + 42 + 4 + 6)
    assert study_time.minutes(nb, written={1}, model=model) == (9 + 21, 18 + 42)
    assert study_time.hours((50, 100)) == "1-1.5 h" and study_time.hours((10, 20)) == "0.5 h"
    assert study_time._ranges(["1", "2", "3", "5", "8", "8b", "9", "9"]) == "1-3, 5, 8, 8b, 9"


def test_a_plan_counts_a_notebook_once_and_leaves_the_rest(course):
    by_name = {nb.short: nb for nb in course}
    plan = Plan("t", (Day("one", 100, (Step("02.3", "1-2"),)), Day("two", 100, (Step("02.3", "4", show="3"),))))
    (first,), (second,) = study_time.plan_rows(plan, by_name)
    assert first.first and not second.first and first.left == ()
    assert second.written == (4,) and second.shown == (3,) and second.left == (5,)
    assert study_time._add(first.minutes, second.minutes) == pytest.approx(
        study_time.minutes(by_name["02.3"], written={1, 2, 4}, shown={3}))
    for bad, message in ((Step("02.3", "5-8"), "has 5 exercises"), (Step("09.9"), "no notebook")):
        with pytest.raises(ValueError, match=message):
            study_time.plan_rows(Plan("t", (Day("", 1, (bad,)),)), by_name)
    with pytest.raises(ValueError, match="named twice"):
        study_time.plan_rows(Plan("t", (Day("", 1, (Step("00", "1"), Step("00", "1-2"))),)), by_name)


def test_every_day_of_every_plan_fits_its_hours(course):
    by_name = {nb.short: nb for nb in course}
    for plan in study_time.PLANS:
        for day, rows in zip(plan.days, study_time.plan_rows(plan, by_name)):
            high = study_time._add(*(r.minutes for r in rows))[1]
            assert study_time.day_fits(day, rows), (
                f"plan {plan.key} {day.title!r}: {high / 60:.1f} h at the high end of the estimate, over its "
                f"{day.budget_hours} h: pre-solve or leave more of it (PLANS in kernel_lab.study_time), then run "
                f"{study_time.COMMAND}")
        for short in plan.after:
            assert short in by_name, f"plan {plan.key} names {short} for afterwards, which is no notebook"


def test_the_semester_takes_every_exercise_once_within_its_weeks(course):
    weeks = study_time.semester(course)
    taken = [(nb.short, i) for week in weeks for nb, numbers in week for i in numbers]
    assert taken == [(nb.short, i) for nb in course for i in range(1, len(nb.exercises) + 1)]
    budget = study_time.SEMESTER_HOURS_PER_WEEK * 60
    for week in weeks:
        spans = [study_time.exercise_minutes(nb.exercises[i - 1]) for nb, numbers in week for i in numbers]
        spans += [study_time.base_minutes(nb) for nb, numbers in week if numbers[0] == 1]
        assert study_time._add(*spans)[1] <= budget or len(spans) <= 2  # one exercise longer than a week stays whole


def test_readme_and_syllabi_agree_with_the_notebooks(course):
    for page, rewrite in ((study_time.README, study_time.rewrite_readme), (study_time.SYLLABI, study_time.rewrite_syllabi)):
        text = (ROOT / page).read_text()
        fresh = rewrite(text, course)
        stale = [line[:90] for line in fresh.splitlines() if line not in text.splitlines()]
        assert fresh == text, (f"{page} differs from the notebooks' sizes (first lines that change: {stale[:3]}): "
                               f"run {study_time.COMMAND}")


def test_the_readme_time_column_is_added_and_keeps_each_row(course):
    rows = "\n".join(f"| `{nb.path}` [badge] | what {nb.short} teaches |" for nb in course)
    text = f"# X\n\n## Module map\n\nIntro.\n\n| notebook | what you learn |\n| --- | --- |\n{rows}\n\n## Next\n\nmore | here\n"
    once = study_time.rewrite_readme(text, course)
    assert study_time.rewrite_readme(once, course) == once
    assert f"| notebook | {study_time.TIME_HEADER} | what you learn |\n| --- | --- | --- |" in once
    first = course[0]
    assert f"| `{first.path}` [badge] | {study_time.hours(study_time.minutes(first))} | what 00 teaches |" in once
    assert once.endswith("## Next\n\nmore | here\n")
    with pytest.raises(ValueError, match="which solutions/ lacks"):
        study_time.rewrite_readme(text.replace(first.path, "00-x/gone"), course)


def test_the_syllabi_blocks_must_all_be_there(course):
    text = (ROOT / study_time.SYLLABI).read_text()
    with pytest.raises(ValueError, match="missing \\['semester'\\]"):
        study_time.rewrite_syllabi(text.replace("<!-- study-time:semester -->", "<!-- semester -->"), course)


def test_the_command_prints_the_table_and_checks_the_pages(capsys, course):
    assert cli.main(["study-time", "--root", str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert "02-reductions-and-gemm/02.3-sgemm-progression" in out and "the course" in out
    fresh = all((ROOT / page).read_text() == rewrite((ROOT / page).read_text(), course) for page, rewrite in
                ((study_time.README, study_time.rewrite_readme), (study_time.SYLLABI, study_time.rewrite_syllabi)))
    assert cli.main(["study-time", "--root", str(ROOT), "--check"]) == (0 if fresh else 1)  # stale: the test above says so
    assert ("agree with" if fresh else study_time.COMMAND) in capsys.readouterr().out
    cli.main(["--help"])
    assert "kernel-lab study-time" in capsys.readouterr().out
