"""The exercise generator: stubs, cleared outputs, learner edits kept, and course/ in sync."""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from kernel_lab import exercises
from kernel_lab.exercises import ExerciseMarkupError, make_exercise, stub_code

ROOT = Path(__file__).resolve().parents[1]


def test_solution_block_becomes_default_stub_with_indentation():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n"
    assert stub_code(src) == "def f(x):\n    # YOUR CODE HERE\n    pass"


def test_stub_lines_are_uncommented_and_solution_dropped():
    src = "a = 1\n### BEGIN SOLUTION\n##> b = ...  # your formula\nb = a * 2\n### END SOLUTION\nprint(b)"
    assert stub_code(src) == "a = 1\nb = ...  # your formula\nprint(b)"


@pytest.mark.parametrize("src, problem", [
    ("### BEGIN SOLUTION\nx = 1\n", "without a matching"),
    ("x = 1\n### END SOLUTION\n", "without a"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another"),
])
def test_unpaired_markers_are_reported(src, problem):
    with pytest.raises(ExerciseMarkupError, match=problem):
        stub_code(src, "demo.ipynb, cell 3")


def _solution_notebook():
    code = new_code_cell("x = 1\n### BEGIN SOLUTION\ny = x + 1\n### END SOLUTION", execution_count=4)
    code.outputs = [new_output("stream", name="stdout", text="2\n")]
    secret = new_code_cell("print('the answer')")
    secret.metadata["tags"] = ["solution-only"]
    quiz = new_markdown_cell("Why? <!-- BEGIN SOLUTION -->Because.<!-- END SOLUTION -->")
    hint = new_markdown_cell("<details><summary>Hint</summary>Add one.</details>")
    return new_notebook(cells=[quiz, code, secret, hint])


def test_make_exercise_strips_solutions_outputs_and_solution_only_cells():
    sol = _solution_notebook()
    ex = make_exercise(sol, "solutions/demo.ipynb")
    assert [c.cell_type for c in ex.cells] == ["markdown", "code", "markdown"]
    assert ex.cells[0].source == "Why? *Your answer here.*"
    assert ex.cells[1].source == "x = 1\n# YOUR CODE HERE\npass"
    assert ex.cells[1].outputs == [] and ex.cells[1].execution_count is None
    assert "Hint" in ex.cells[2].source  # hints are kept
    assert ex.metadata["kernel_lab"]["generated_from"] == "solutions/demo.ipynb"
    assert sol.cells[1].outputs  # the solution itself is untouched


def _tree(tmp_path):
    (tmp_path / "solutions" / "00-x").mkdir(parents=True)
    nbformat.write(_solution_notebook(), tmp_path / "solutions" / "00-x" / "demo.ipynb")
    return tmp_path


def test_generate_writes_course_then_reports_in_sync(tmp_path):
    root = _tree(tmp_path)
    assert exercises.out_of_date(root) == ["course/00-x/demo.ipynb is missing"]
    exercises.generate(root, log=lambda m: None)
    assert exercises.out_of_date(root) == []
    assert exercises.main(["--root", str(root), "--check"]) == 0


def test_changed_solution_makes_course_out_of_date(tmp_path):
    root = _tree(tmp_path)
    exercises.generate(root, log=lambda m: None)
    sol_path = root / "solutions" / "00-x" / "demo.ipynb"
    nb = nbformat.read(sol_path, as_version=4)
    nb.cells[1].source += "\nprint(y)"
    nbformat.write(nb, sol_path)
    assert exercises.out_of_date(root) == ["course/00-x/demo.ipynb differs from what its solution generates"]
    assert exercises.main(["--root", str(root), "--check"]) == 1


def test_learner_edits_are_never_overwritten_without_force(tmp_path):
    root = _tree(tmp_path)
    exercises.generate(root, log=lambda m: None)
    course = root / "course" / "00-x" / "demo.ipynb"
    nb = nbformat.read(course, as_version=4)
    nb.cells[1].source = "x = 1\ny = x + 1  # my answer"
    nbformat.write(nb, course)
    sol_path = root / "solutions" / "00-x" / "demo.ipynb"
    sol = nbformat.read(sol_path, as_version=4)
    sol.cells[0].source += " (updated)"
    nbformat.write(sol, sol_path)

    messages = []
    assert exercises.generate(root, log=messages.append) == 1
    assert "kept course/00-x/demo.ipynb: you have edited it" in messages[0]
    assert "my answer" in course.read_text()

    exercises.generate(root, force=True, log=messages.append)
    backups = list(course.parent.glob("demo.mine-*.ipynb"))
    assert len(backups) == 1 and "my answer" in backups[0].read_text()
    assert "my answer" not in course.read_text()


def test_outputs_from_running_an_exercise_do_not_count_as_edits(tmp_path):
    root = _tree(tmp_path)
    exercises.generate(root, log=lambda m: None)
    course = root / "course" / "00-x" / "demo.ipynb"
    nb = nbformat.read(course, as_version=4)
    nb.cells[1].outputs = [new_output("stream", name="stdout", text="ran\n")]
    nbformat.write(nb, course)
    assert not exercises.learner_edited(course)


def test_the_repository_course_is_in_sync_with_solutions():
    problems = exercises.out_of_date(ROOT)
    assert problems == [], "\n".join(problems) + "\nrun: python -m kernel_lab.exercises"


def test_course_notebooks_carry_no_outputs():
    for path in (ROOT / "course").rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path
