"""Readings quote the stored outputs (kernel_lab.readings): the rules, a drifted copy, and the repository."""

import copy
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from kernel_lab import readings

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "solutions").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
PRINTED = """\
padded: 221.1 us, 2.43 TB/s, 57% of this GPU's copy bandwidth (4,280 GB/s)
naive: 1.099 ms, 499.23 GB/s, 12% of this GPU's copy bandwidth (4,280 GB/s)
tiled: 263.5 us, 21% copy   38% copy
kernel              time     speed vs padded
naive           1.099 ms     0.24x
configuration            ms  vs best
128x128x64, depth 2   0.402    1.00x
sweep:  50%|█████     | 3/6 [00:00<00:00, 25.06it/s]
"""


def _notebook(prose, printed=PRINTED, tags=("reading",)):
    code = new_code_cell("measure()")
    code.outputs = [new_output("stream", name="stdout", text=printed)]
    reading = new_markdown_cell(prose)
    if tags:
        reading.metadata["tags"] = list(tags)
    return new_notebook(cells=[code, reading])


def _problems(tmp_path, prose, **kwargs):
    path = tmp_path / "demo.ipynb"
    nbformat.write(_notebook(prose, **kwargs), path)
    return readings.check_notebook(path)


@pytest.mark.parametrize("prose", [
    "The padded transpose reached 57% of the copy roofline.",
    "It took 1.10 ms against 264 µs.",  # written with fewer digits: the rounding must agree
    "It took 0.26 ms.",  # another unit
    "At 2.4 TB/s, or 2,430 GB/s.",
    "About 55–60% of the roofline.",  # "about" and a range containing a printed figure
    "It rose from 12% to 57%.",
    "From 21 to 38% as the grid grows.",  # a range without "about": both ends printed
    "The naive one is 4 times slower (0.24x).",  # "N times" as the inverse of a printed ratio
    "The bars read 12, 21 and 38% of the bandwidth.",  # the list takes the unit of its last member
    "The winner ran in 0.402 ms.",  # a bare number in a table whose header says ms
    "A `tile[32][33]` holds `33%` more: code is not a measurement.",
    "Not the predicted 85–95%. <!-- unchecked: 85–95% (the prediction) -->",
])
def test_figures_the_outputs_print_are_accepted(tmp_path, prose):
    assert _problems(tmp_path, prose) == []


@pytest.mark.parametrize("prose, figure", [
    ("The padded transpose reached 56% of the copy roofline.", "56%"),
    ("About 13% at 32 threads.", "13%"),  # "about" without a range is no licence: 13% is not 12%
    ("It reached about 30 TFLOP/s.", "30 TFLOP/s"),
    ("It took 269 µs.", "269 µs"),
    ("It took 1.1 ms and 1.10 ms, not 1.2 ms.", "1.2 ms"),
    ("Both reached 55–57%.", "55–57%"),  # without "about", a range names two printed figures
    ("About 60–70% of the roofline.", "60–70%"),
    ("The bars read 12, 22 and 38% of the bandwidth.", "22%"),
    ("The naive one is 5 times slower.", "5 times"),
    ("The sweep stopped at 50%.", "50%"),  # tqdm's progress bars are not measurements
    ("The winner ran in 0.41 ms.", "0.41 ms"),  # two digits: a bare number does not count
])
def test_figures_the_outputs_do_not_print_are_reported(tmp_path, prose, figure):
    problems = _problems(tmp_path, prose)
    assert len(problems) == 1, problems
    assert f"{figure}: not printed" in problems[0].message or f"about {figure}" in problems[0].message


def test_a_problem_names_the_cell_the_sentence_and_the_nearest_printed_figures(tmp_path):
    prose = "**Reading.** Tiling helps.\nThe padded transpose reached 56% of the copy roofline. The rest waits."
    (problem,) = _problems(tmp_path, prose)
    text = str(problem)
    assert "demo.ipynb, cell 1 (\"**Reading.** Tiling helps." in text
    assert "\"The padded transpose reached 56% of the copy roofline.\"" in text
    assert "nearest to it: 57%" in text and "<!-- unchecked: ... -->" in text


def test_prediction_cells_and_other_prose_are_not_checked(tmp_path):
    assert _problems(tmp_path, "**Prediction.** 85–95% of the roofline, about 8 times faster.", tags=()) == []


def test_an_unchecked_entry_the_reading_does_not_quote_is_reported(tmp_path):
    (problem,) = _problems(tmp_path, "57% of the roofline. <!-- unchecked: 85–95% (an old prediction) -->")
    assert "'85–95%' is listed as unchecked but the reading does not quote it" in problem.message


@pytest.mark.parametrize("prose", [
    "Not the predicted 85–95%. <!-- unchecked: 85–95% (the prediction) -->",
    "Short of the goal, 80%. <!-- unchecked: 80% (the course's goal) -->",
    "About 750 µs by our count. <!-- unchecked: 750 µs (our estimate from the instruction count) -->",
    "The model says 50%. <!-- unchecked: 50% (the sector model at stride 2) -->",
    # arithmetic on printed figures, agreeing at the precision written
    "The naive one took 5.0 times as long. <!-- unchecked: 5.0 times (1.099 ms / 221.1 us) -->",
    "Tiling cost 42.4 µs. <!-- unchecked: 42.4 µs (263.5 us − 221.1 us) -->",
    "Tiling cost 42.4 µs. <!-- unchecked: 42.4 µs (263.5 us - 221.1 us) -->",
    "Tiled is 19% slower. <!-- unchecked: 19% (263.5 / 221.1 us) -->",  # a ratio's difference from 1, one unit for both
    "Padded reaches 84% of tiled's time. <!-- unchecked: 84% (221.1 us / 263.5 us) -->",
    "0.52 ns a launch. <!-- unchecked: 0.52 ns (1.099 ms / 2.1 million launches) -->",  # a count is no measurement
    "From 1.2 to 5.0 times. <!-- unchecked: 1.2 to 5.0 times (263.5 us / 221.1 us to 1.099 ms / 221.1 us) -->",
])
def test_exemptions_for_figures_that_are_not_measured_or_are_printed_arithmetic_hold(tmp_path, prose):
    assert _problems(tmp_path, prose) == []


@pytest.mark.parametrize("prose, why", [
    ("The probe reached 0.9x. <!-- unchecked: 0.9x (the probe's run) -->", "no prediction, goal"),
    ("60% busy. <!-- unchecked: 60% (Nsight Compute, tensor pipe) -->", "no prediction, goal"),
    ("0.8x of it. <!-- unchecked: 0.8x (the estimate on an H200) -->", "no prediction, goal"),  # 01.2's old 0.8x
    ("29.2 µs there. <!-- unchecked: 29.2 µs (the H200 run of this notebook) -->", "no prediction, goal"),
    ("It took 12 ms. <!-- unchecked: 12 ms -->", "no reason given"),
    ("5.5 times as long. <!-- unchecked: 5.5 times (1.099 ms / 200.0 us) -->", "200.0 us in its arithmetic: not printed"),
    ("6.0 times as long. <!-- unchecked: 6.0 times (1.099 ms / 221.1 us) -->", "its arithmetic gives 4.97"),
    ("It saved 6.6 ms. <!-- unchecked: 6.6 ms (30.0 - 23.4, the probe's) -->", "30.0, 23.4 in its arithmetic"),
])
def test_exemptions_for_figures_measured_elsewhere_are_reported(tmp_path, prose, why):
    (problem,) = _problems(tmp_path, prose)
    assert "is exempted as" in problem.message and why in problem.message, problem.message
    assert "KNOWN_DEBTS" in problem.message


def test_an_exemption_outside_a_reading_is_held_too(tmp_path):
    (problem,) = _problems(tmp_path, "Two runs: 30.0 ms. <!-- unchecked: 30.0 ms (a probe's run) -->", tags=())
    assert "30.0 ms is exempted as 'a probe's run'" in problem.message
    assert _problems(tmp_path, "The goal: 30 ms. <!-- unchecked: 30 ms (the goal) -->", tags=()) == []


def test_known_debts_pass_and_only_shrink(tmp_path, monkeypatch):
    prose = "The probe reached 0.9x. <!-- unchecked: 0.9x (the probe's run) -->"
    monkeypatch.setattr(readings, "KNOWN_DEBTS", (("demo.ipynb", ("0.9x", "0.7x"), "a probe"),))
    (stale,) = _problems(tmp_path, prose)  # 0.9x is a debt; 0.7x is one no exemption uses any more
    assert "0.7x is a known debt of issue 35 §3 that no exemption of this notebook uses" in stale.message
    monkeypatch.setattr(readings, "KNOWN_DEBTS", (("demo.ipynb", ("0.9x",), "a probe"),))
    assert _problems(tmp_path, prose) == []
    (new,) = _problems(tmp_path, prose + " And 0.8x. <!-- unchecked: 0.8x (the same probe) -->")
    assert "0.8x is exempted as 'the same probe'" in new.message  # a new debt fails


def test_the_known_debts_are_few_and_name_existing_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert len(readings.KNOWN_DEBTS) <= 13, "KNOWN_DEBTS only shrinks: print the figure in a cell instead"
    for notebook, figures, why in readings.KNOWN_DEBTS:
        assert notebook in names and figures and why, (notebook, figures, why)


def test_the_exemptions_of_the_solutions_give_admitted_reasons():
    verdicts = []
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                printed, _ = readings.printed_for(path, nb, cell)
                verdicts += [readings.exemption_verdict(e, printed, path.name)[0] for e in readings.exemptions(cell.source)]
    assert "refused" not in verdicts
    assert verdicts.count("debt") == sum(len(figures) for _, figures, _ in readings.KNOWN_DEBTS)


def test_also_from_reads_the_other_notebooks_outputs(tmp_path):
    nbformat.write(_notebook("", printed="copy: 81% of this GPU's copy bandwidth\n", tags=()), tmp_path / "other.ipynb")
    assert _problems(tmp_path, "81% in the other notebook, 57% here. <!-- also from: other.ipynb -->") == []
    assert len(_problems(tmp_path, "81% in the other notebook, 57% here.")) == 1
    (missing,) = _problems(tmp_path, "57% here. <!-- also from: gone.ipynb -->")
    assert "'also from: gone.ipynb' names a notebook that does not exist" in missing.message


def test_cells_that_report_a_gpu_run_look_like_readings():
    assert readings.looks_like_a_reading(new_markdown_cell("**Reading the measurement.** On an H200 it ..."))
    assert readings.looks_like_a_reading(new_markdown_cell("Fine. On the H100 this notebook was run on, ..."))
    assert not readings.looks_like_a_reading(new_markdown_cell("An SM holds 64 warps on an H100."))


def _drift(nb, factor=1000, offset=7):
    """A copy of ``nb`` whose outputs print every number x as ``factor * x + offset`` (same decimals)."""
    drifted = copy.deepcopy(nb)

    def scale(m):
        number = m.group(0).replace(",", "")
        decimals = len(number.split(".")[1]) if "." in number else 0
        return f"{float(number) * factor + offset:.{decimals}f}"

    for cell in drifted.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = re.sub(r"\d[\d,]*(?:\.\d+)?", scale, output["text"])
            if "text/plain" in output.get("data", {}):
                output["data"]["text/plain"] = re.sub(r"\d[\d,]*(?:\.\d+)?", scale, output["data"]["text/plain"])
    return drifted


WITH_READINGS = [p for p in NOTEBOOKS if any(readings.is_reading(c) for c in nbformat.read(p, as_version=4).cells)]


@pytest.mark.parametrize("path", WITH_READINGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_checked_figure_fails_when_the_outputs_drift(path):
    """The test below can fail: with outputs stored again and different, every checked figure is reported."""
    nb = nbformat.read(path, as_version=4)
    if not any(cell.get("outputs") for cell in nb.cells):  # pending its GPU run: no reading may quote a figure yet
        pytest.skip(f"{path.name}: stored GPU outputs pending, so its readings wait for the run's figures")
    no_outputs = new_notebook()
    expected = 0
    own = readings.printed_figures(nb)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        others, _ = readings.printed_for(path, no_outputs, cell)  # notebooks named by "also from"
        if readings.is_reading(cell):
            expected += sum(not readings.supported(f, others) for f in readings.checked_figures(cell.source)[0])
        printed, _ = readings.printed_for(path, nb, cell, own)
        for exemption in readings.exemptions(cell.source):  # arithmetic on this notebook's figures drifts too
            expected += (readings.exemption_verdict(exemption, printed, path.name)[0] == "arithmetic"
                         and readings.exemption_verdict(exemption, others, path.name)[0] == "refused")
    assert expected, f"{path.name}: its readings quote no figure the outputs could back"
    problems = readings.check_notebook(path, _drift(nb))
    assert len(problems) == expected, "\n".join(map(str, problems))


def test_a_single_drifted_launch_time_names_the_sentence_to_update():
    path = ROOT / "solutions" / "01-gpu-in-practice" / "01-threads-blocks-grids.ipynb"
    nb = nbformat.read(path, as_version=4)
    drifted = copy.deepcopy(nb)
    changed = 0
    for cell in drifted.cells:
        for output in cell.get("outputs", []):
            if "57.8 us per launch" in output.get("text", ""):
                output["text"] = output["text"].replace("57.8 us per launch", "41.7 us per launch")
                changed += 1
    assert changed == 1
    assert readings.check_notebook(path, nb) == []
    problems = readings.check_notebook(path, drifted)
    assert problems and all("57.8 µs" in p.sentence for p in problems), "\n".join(map(str, problems))
    assert "41.7 us" in problems[0].message


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_readings_quote_the_stored_outputs(path):
    problems = readings.check_notebook(path, name=path.relative_to(ROOT).as_posix())
    assert not problems, ("these readings contradict the stored outputs (python -m kernel_lab.readings lists "
                          "them):\n" + "\n".join(map(str, problems)))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cells_that_report_a_gpu_run_are_tagged_reading(path):
    nb = nbformat.read(path, as_version=4)
    untagged = readings.untagged_readings(nb)
    assert not untagged, (f"cells {untagged} report a GPU run but have no 'reading' tag: tag them, so that the "
                          "test above holds them to the outputs and course/ folds them away")
