"""BENCHMARKS.md: every kernel the solution notebooks timed, from their stored outputs.

The page is generated, never edited: ``kernel-lab benchmarks`` (or ``python -m
kernel_lab.benchmarks_page``) writes it from the outputs stored in ``solutions/`` by the last GPU run,
and tests/test_benchmarks_page.py fails when the page and the notebooks differ.

What counts as a timed kernel: a line of a stored output that prints a time *and* a ratio, that is a
row of a comparison table (``kernel_lab.bench.compare`` and the tables modules 06 and 07 print).
The figures are found by :func:`kernel_lab.readings.figures`, the parser that holds the notebooks'
prose to the same outputs. Per kernel the page gives:

* the GPU the notebook ran on (its setup line, ``GPU: NVIDIA H200 (compute capability ...``);
* the time, and the fraction of the roofline the row prints (``80% copy``, ``12% sgemm``);
* the ratio to its *library peer*: the row of the same table that is a library's kernel (cuBLAS,
  cuBLASLt, CuPy, CUB, cuDNN) as peer time / kernel time, or, where the row itself names the peer
  (``0.62x DGEMM``), that ratio.

A kernel printed in several tables of one notebook appears once, as the last table shows it.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import readings

PAGE = "BENCHMARKS.md"
_GPU = re.compile(r"^GPU: (.+?) \(compute capability (\d+\.\d+)", re.M)
# A library's kernel: what a learner would call instead of writing one.
_LIBRARY = re.compile(r"\b(?:cuBLAS(?:Lt)?|CuPy|cupy|CUB|cuDNN|DGEMM)\b")
_ROOF_AFTER = re.compile(r"\s*(?:of this GPU's\s+)?(copy|sgemm|dgemm|cuBLAS SGEMM|cuBLAS DGEMM)", re.I)
_PEER_AFTER = re.compile(r"\s*(?:the speed of\s+)?([A-Za-z][\w.]*(?:'s)?)")


@dataclass
class Row:
    kernel: str
    time: str  # as printed
    seconds: float
    roofline: str  # "80% copy", or "" where the row prints none
    ratio: str = ""  # as printed: against the table's baseline
    peer_ratio: str = ""  # "0.62x DGEMM"
    library: bool = False


def _mid(figure) -> float:
    low, high = figure.ends[0]
    return (low + high) / 2


def _row(line: str) -> Row | None:
    found = readings.figures(line, lists=False)
    times = [f for f in found if f.unit == "s"]
    ratios = [f for f in found if f.unit == "x"]
    if not times or not ratios:
        return None
    t = times[0]
    name = re.sub(r"\s+", " ", line[: t.start]).strip().rstrip(":").strip()
    if not name:
        return None
    roof = ""
    for f in found:
        if f.unit == "%" and (m := _ROOF_AFTER.match(line[f.end:])) is not None:
            roof = f"{f.text.strip()} {m.group(1).replace('cuBLAS ', '').lower()}"
            break
    r = ratios[-1]
    row = Row(name, t.text.strip(), _mid(t), roof, r.text.strip(), library=bool(_LIBRARY.search(name)))
    after = _PEER_AFTER.match(line[r.end:])
    if after is not None and _LIBRARY.search(after.group(1)):
        row.peer_ratio = f"{r.text.strip()} {after.group(1)}"
    return row


def _tables(nb) -> list[list[Row]]:
    """Runs of consecutive table rows in each stored output."""
    tables = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            run = []
            for line in readings._output_text(output).splitlines():
                row = None if readings._PROGRESS_BAR.search(line) else _row(line)
                if row is None:
                    if run:
                        tables.append(run)
                    run = []
                else:
                    run.append(row)
            if run:
                tables.append(run)
    return tables


def _case(name: str) -> str:
    """The case a row's name ends with, after its last comma (``"W4A8, M = 16"``: ``"M = 16"``)."""
    return name.rpartition(",")[2].strip() if "," in name else ""


def _peer_of(row: Row, peers: list[Row]) -> Row:
    """The library row of the same case (a table that times several shapes names each row's shape
    after a comma: ours and the library's at M = 16 are compared), else the last library row
    (tables list the library last: kl.compare's baseline)."""
    same = [p for p in peers if _case(row.kernel) and _case(p.kernel) == _case(row.kernel)]
    return (same or peers)[-1]


def kernels(nb) -> list[Row]:
    """The timed kernels of one notebook, each with its ratio to its library peer where it has one."""
    rows: dict[str, Row] = {}
    for table in _tables(nb):
        peers = [r for r in table if r.library]
        for r in table:
            if r.library:
                r.peer_ratio = "(library)"
            elif not r.peer_ratio and peers:
                peer = _peer_of(r, peers)
                r.peer_ratio = f"{peer.seconds / r.seconds:.2f}x {peer.kernel}"
            rows.pop(r.kernel, None)
            rows[r.kernel] = r
    return list(rows.values())


def gpu_of(nb) -> str | None:
    """The GPU the stored outputs name (the setup cell prints it); failing that, the one the notebook's
    metadata records (``kernel_lab.outputs_from``, written by store_outputs), as for a notebook whose
    setup cell waits for its first GPU run while its other cells keep their outputs (02.3b)."""
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            m = _GPU.search(readings._output_text(output))
            if m:
                return f"{m.group(1)} (cc {m.group(2)})"
    m = _GPU.search(str(nb.metadata.get("kernel_lab", {}).get("outputs_from", "")))
    return f"{m.group(1)} (cc {m.group(2)})" if m else None


_BEST = re.compile(r"^your best kernel(?P<tail>.*)$", re.M)


def _split_best(tail: str) -> tuple[str, str]:
    """(kernel, what it reached) from the text after "your best kernel": the name is everything inside
    the first parentheses, which may nest ("fast gather (yours) (8, 128, 128, 512)")."""
    tail = tail.strip()
    if tail.startswith("("):
        depth = 0
        for i, ch in enumerate(tail):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                return tail[1:i], tail[i + 1:].lstrip(":").strip()
    return "", tail.lstrip(":").strip()


def best_lines(nb) -> list[tuple[str, str]]:
    """(kernel, what it reached) from the line each measured notebook ends with, ``kl.your_best``'s:
    ``your best kernel (fast): 94% of the copy roofline (goal 80%: met), 1.00x the package's best``."""
    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for m in _BEST.finditer(readings._output_text(output)):
                name, rest = _split_best(m.group("tail"))
                if "timing skipped" not in rest:
                    found.append((name, rest))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "–"


def render(root: Path) -> str:
    notebooks = readings._solution_notebooks(root)
    out = ["# Benchmarks", "",
           "Every kernel the solution notebooks time, as their stored outputs print it (the last GPU run of "
           "each notebook). **Generated** by `kernel-lab benchmarks` from `solutions/`: do not edit; a test "
           "fails when this page and the notebooks differ.", "",
           "*of roofline*: the fraction of this GPU's measured ceiling (copy: device-to-device copy bandwidth; "
           "sgemm/dgemm: cuBLAS's rate). *vs library peer*: the library kernel's time over this kernel's "
           "(above 1: faster than the library), from the same table.", ""]
    pending, sections, best = [], [], []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        rows = kernels(nb)
        rel = path.relative_to(root / "solutions").with_suffix("").as_posix()
        best += [(rel, name, rest) for name, rest in best_lines(nb)]
        if not rows:
            pending.append(rel)
            continue
        sections += [(rel, nb, rows)]
    if best:
        out += ["## The learner's best kernel, notebook by notebook", "",
                "The line each measured notebook ends with (`kl.your_best`): the fastest kernel the learner "
                "writes (the solution's), against the roofline and the notebook's goal, beside the package's "
                "best and the library, from the same run.", "",
                "| notebook | your best kernel | reached |", "| --- | --- | --- |"]
        out += [f"| `{rel}` | {_cell(name)} | {_cell(rest)} |" for rel, name, rest in best]
        out.append("")
    for rel, nb, rows in sections:
        out += [f"## `{rel}`", "", f"GPU: {gpu_of(nb) or 'not printed'}", "",
                "| kernel | time | of roofline | vs library peer |", "| --- | ---: | ---: | --- |"]
        out += [f"| {_cell(r.kernel)} | {_cell(r.time)} | {_cell(r.roofline)} | {_cell(r.peer_ratio)} |"
                for r in rows]
        out.append("")
    if pending:
        out += ["## Not on this page", "",
                "These notebooks print no comparison table in their stored outputs (no GPU outputs yet, or their "
                "measurements are sweeps and plots):", ""]
        out += [f"- `{rel}`" for rel in pending]
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kernel-lab benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository root (default: here)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} differs from what would be written")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    text, page = render(root), root / PAGE
    if args.check:
        if not page.is_file() or page.read_text() != text:
            print(f"{PAGE} is out of date with the stored outputs of solutions/: run kernel-lab benchmarks")
            return 1
        print(f"{PAGE} is up to date")
        return 0
    page.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
