"""Hints lead to the answer without giving it away (kernel_lab.hint_leaks measures it).

Per notebook: every exercise has a hint, says roughly how many lines it needs, its first hint holds
no line of its solution, and no hint holds the whole of it. Over the course: at most a quarter of the
solution lines appear in hints. ``python -m kernel_lab.hint_leaks`` prints the table.
"""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from kernel_lab import hint_leaks

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))
MAX_OVERALL = 0.25


def _where(e: hint_leaks.Exercise) -> str:
    return f"{Path(e.notebook).name}, exercise cell {e.cell}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_has_hints_that_do_not_give_it_away(path):
    problems = []
    for e in hint_leaks.exercises(path, ROOT):
        if e.is_quiz or not e.lines:
            continue
        if not e.hints:
            problems.append(f"{_where(e)}: no hint (add one: the idea first)")
            continue
        if e.hints[0].leaked:
            problems.append(f"{_where(e)}: its first hint ({e.hints[0].title!r}) holds solution lines: "
                            f"{e.hints[0].leaked[:3]}")
        if len(set(e.lines)) >= 2 and e.share == 1.0:
            problems.append(f"{_where(e)}: its hints hold the whole solution ({len(set(e.lines))} lines); "
                            "keep the last step for the learner, or point to solutions/")
        if not e.says_how_many_lines:
            problems.append(f"{_where(e)}: the exercise does not say roughly how many lines it needs")
    assert not problems, "\n".join(problems)


def test_at_most_a_quarter_of_the_solution_lines_appear_in_hints():
    exercises = hint_leaks.course(ROOT)
    share = hint_leaks.overall(exercises)
    assert share <= MAX_OVERALL, (f"{100 * share:.1f}% of the solution lines appear in hints (at most "
                                  f"{100 * MAX_OVERALL:.0f}%); the worst:\n" + hint_leaks.report(exercises, worst=10))


def _notebook(tmp_path, statement, solution):
    nb = new_notebook(cells=[new_markdown_cell(statement), new_code_cell(solution)])
    (tmp_path / "solutions" / "00-x").mkdir(parents=True)
    path = tmp_path / "solutions" / "00-x" / "n.ipynb"
    nbformat.write(nb, path)
    return path


SOLUTION = ("@cuda.jit\ndef k(x, out):\n    ### BEGIN SOLUTION\n    ##> pass\n    i = cuda.grid(1)  # one thread each\n"
            "    if i < x.size:\n        out[i] = 2 * x[i]\n    ### END SOLUTION\n")


def test_the_measure_finds_a_leak_and_a_clean_hint(tmp_path):
    leaky = ("Write it (three lines).\n\n<details><summary>Hint 1: the index</summary>\n\n`i = cuda.grid(1)`, "
             "then `if i < x.size:`\n</details>\n<details><summary>Hint 2</summary>\n\n`out[i] = 2 * x[i]`\n</details>")
    (e,) = hint_leaks.exercises(_notebook(tmp_path, leaky, SOLUTION), tmp_path)
    assert e.lines == ["i = cuda.grid(1)", "if i < x.size:", "out[i] = 2 * x[i]"]
    assert e.hints[0].leaked == ["i = cuda.grid(1)", "if i < x.size:"] and e.share == 1.0
    assert e.says_how_many_lines


def test_a_hint_in_words_leaks_nothing(tmp_path):
    clean = ("Write it.\n\n<details><summary>Hint 1</summary>\n\nOne thread per element; threads past the end "
             "do nothing.\n</details>")
    (e,) = hint_leaks.exercises(_notebook(tmp_path, clean, SOLUTION), tmp_path)
    assert e.hints[0].leaked == [] and e.share == 0.0
    assert not e.says_how_many_lines  # "Write it." says nothing of its length
    assert hint_leaks.overall([e]) == 0.0
