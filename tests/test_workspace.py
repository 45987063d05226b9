"""The learner's workspace as the README sets it up: JupyterLab serves every file a notebook shows or names."""

import re
import shlex
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
NOTEBOOKS = sorted(p for folder in ("course", "solutions") for p in (ROOT / folder).rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts and ".mine-" not in p.name)
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img\b[^>]*\bsrc=[\"']([^\"']+)[\"']")
SOLUTION_PATH = re.compile(r"solutions/[\w./-]+?\.ipynb")


def jupyterlab_command() -> list[str]:
    """The arguments after ``python -m jupyterlab`` in the README's first command."""
    section = README.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    for part in block.split("&&"):
        words = shlex.split(part)
        if words[:3] == ["python", "-m", "jupyterlab"]:
            return words[3:]
    raise AssertionError("the README's first command does not start JupyterLab with `python -m jupyterlab`")


def served_root_and_opened_file() -> tuple[Path, Path | None]:
    """What jupyter_server does with these arguments, run from the repository root (as the README says):
    ``--notebook-dir`` (or ``--ServerApp.root_dir``) is the root; else a folder argument is the root; else
    the root is the folder of a file argument, or the current folder."""
    args, root, opened = jupyterlab_command(), None, None
    for arg in args:
        m = re.match(r"--(?:notebook-dir|ServerApp\.root_dir|root-dir)=(.+)", arg)
        if m:
            root = (ROOT / m.group(1)).resolve()
        elif not arg.startswith("-"):
            target = (ROOT / arg).resolve()
            assert target.exists(), f"the README's JupyterLab command names {arg}, which does not exist"
            if target.is_dir():
                root = root or target
            else:
                opened = target
    if root is None:
        root = opened.parent if opened else ROOT
    return root, opened


def _markdown(path):
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


def test_jupyterlab_serves_the_repository_and_opens_the_first_notebook():
    root, opened = served_root_and_opened_file()
    assert (root / "course").is_dir() and (root / "solutions").is_dir() and (root / "images").is_dir(), \
        f"JupyterLab would serve {root}: the learner needs course/, solutions/ and images/ below it"
    assert opened == ROOT / "course" / "00-getting-started" / "00-getting-started.ipynb", \
        "the README's command should open the first exercise notebook, where the course starts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_image_resolves_to_a_file_that_jupyterlab_serves(path):
    root, _ = served_root_and_opened_file()
    for source in _markdown(path):
        for m in IMAGE.finditer(source):
            ref = m.group(1) or m.group(2)
            if re.match(r"[a-z]+:", ref):  # http:, data:
                continue
            target = (path.parent / ref).resolve()
            assert target.is_file(), f"{ref}: no such file next to {path.relative_to(ROOT)}"
            assert target.is_relative_to(root), \
                f"{ref} lies outside {root}, the folder JupyterLab serves: the learner would see no picture"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_solution_notebooks_that_hints_name_exist_where_the_learner_can_open_them(path):
    root, _ = served_root_and_opened_file()
    for source in _markdown(path):
        for name in SOLUTION_PATH.findall(source):
            target = ROOT / name
            assert target.is_file(), f"{path.relative_to(ROOT)} names {name}, which does not exist"
            assert target.resolve().is_relative_to(root), f"{name} lies outside {root}, the folder JupyterLab serves"


def test_the_module_map_is_one_table_that_lists_every_notebook():
    section = README.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = re.search(r"(^\|.*\|\n)+", section, re.M).group(0)  # the first table: its rows are contiguous
    for path in (ROOT / "solutions").rglob("*.ipynb"):
        name = f"{path.parent.name}/{path.stem}"
        assert f"`{name}`" in rows, f"{name} is missing from the README's module map (or the table breaks before it)"
    for module in ("00", "01", "02", "03", "04", "05", "06", "07", "08", "09"):  # the course's fixed module map
        assert re.search(rf"^\| `{module}-", rows, re.M), f"module {module} has no notebook in the module map"


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").rglob("*.ipynb")),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_notebook_ends_by_saying_what_comes_next(path):
    last = nbformat.read(path, as_version=4).cells[-1]
    assert last.cell_type == "markdown" and "Next" in last.source, \
        "the last cell should tell the learner where to go next"
