"""scripts/README.md and scripts/probes/README.md index every script and every probe.

Each file of the folder gets one entry, a heading that names it: ``### `gpu_session.sh```. This
test fails when a ``.py`` or ``.sh`` file of the folder has no entry, when an entry names a file
that is not there, when a file has two entries, and when a README names, in backticks, a path that
does not exist. A path is resolved from the README's folder first, then from the repository root.
That last check catches a "Cited by" line left behind when a notebook or a package module moves.
File reads only: no import of kernel_lab, no GPU.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ["scripts", "scripts/probes"]
INDEXED = {".py", ".sh"}  # every such file must have an entry; other files (data) may have one
ENTRY = re.compile(r"^### `([^`]+)`\s*$", re.MULTILINE)
# a file named in backticks, alone: `scripts/gpu_suite.sh`, `two_phase.py`, `solutions/.../03.2-....ipynb`
NAMED_FILE = re.compile(r"`(\w[\w./-]*\.(?:py|sh|ipynb|md|txt))`")


def _readme(folder: str) -> str:
    path = ROOT / folder / "README.md"
    assert path.is_file(), f"{folder}/README.md is missing: it is the index of the files in {folder}/"
    return path.read_text(encoding="utf-8")


def _files(folder: str) -> set[str]:
    return {p.name for p in (ROOT / folder).iterdir() if p.is_file() and p.name != "README.md"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_script_has_an_entry(folder):
    entries = set(ENTRY.findall(_readme(folder)))
    missing = sorted(name for name in _files(folder) if Path(name).suffix in INDEXED and name not in entries)
    assert not missing, (f"{folder}/README.md has no entry for {', '.join(missing)}: add a '### `name`' section "
                         "saying what it is for, where it runs and its command line")


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_entry_names_a_file_that_is_there(folder):
    entries = ENTRY.findall(_readme(folder))
    gone = sorted(set(entries) - _files(folder))
    assert not gone, f"{folder}/README.md has entries for files that are not in {folder}/: {', '.join(gone)}"
    twice = sorted(name for name, n in Counter(entries).items() if n > 1)
    assert not twice, f"{folder}/README.md has more than one entry for {', '.join(twice)}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_file_the_index_names_exists(folder):
    named = set(NAMED_FILE.findall(_readme(folder)))
    gone = sorted(name for name in named if not (ROOT / folder / name).exists() and not (ROOT / name).exists())
    assert not gone, (f"{folder}/README.md names files that do not exist (from {folder}/ or the repository "
                      f"root): {', '.join(gone)}; update the entry that names them")


def test_the_patterns_find_what_they_should():
    """The checks above can fail: a heading and a path are recognised, a command line is not a path."""
    text = "### `a.py`\n\nsee `solutions/x/y.ipynb` and `two_phase.py`; run `python3 scripts/a.py --n 3`\n### `b.sh` \n"
    assert ENTRY.findall(text) == ["a.py", "b.sh"]
    assert NAMED_FILE.findall(text) == ["a.py", "solutions/x/y.ipynb", "two_phase.py", "b.sh"]
