"""BENCHMARKS.md is generated from the stored outputs of solutions/ (kernel_lab.benchmarks_page)."""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from kernel_lab import benchmarks_page

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = """\
GPU: NVIDIA H200 (compute capability 9.0, 132 SMs, 140 GiB, 60 MiB L2); driver supports CUDA 13.0
kernel                 time     throughput  of roofline  speed vs cuBLAS axpy (CuPy)
saxpy (ours)          467.7 us      3.44 TB/s     80% copy  1.05x
cuBLAS axpy (CuPy)    491.5 us      3.28 TB/s     77% copy  1.00x
sweep:  50%|█████     | 3/6 [00:00<00:00, 25.06it/s]
fully fused    8192x8192x8192     30.84 ms    35.7 TFLOP/s   0.62x DGEMM  error 1.8e-15
"""


def _notebook(text=OUTPUT):
    cell = new_code_cell("run()")
    cell.outputs = [new_output("stream", name="stdout", text=text)]
    return new_notebook(cells=[cell])


def test_rows_carry_time_roofline_and_ratio_to_the_library_peer():
    rows = {r.kernel: r for r in benchmarks_page.kernels(_notebook())}
    assert benchmarks_page.gpu_of(_notebook()) == "NVIDIA H200 (cc 9.0)"
    ours = rows["saxpy (ours)"]
    assert (ours.time, ours.roofline, ours.peer_ratio) == ("467.7 us", "80% copy", "1.05x cuBLAS axpy (CuPy)")
    assert rows["cuBLAS axpy (CuPy)"].peer_ratio == "(library)"
    assert rows["fully fused 8192x8192x8192"].peer_ratio == "0.62x DGEMM"
    assert len(rows) == 3  # the progress bar and the header are no kernels


def test_a_table_of_several_shapes_pairs_each_row_with_the_library_at_its_shape():
    text = """\
kernel                   time     throughput  of roofline  speed vs ours, M = 1
ours, M = 1           13.0 us      2.75 TB/s     64% copy  1.00x
cuBLASLt int8, M = 1  22.5 us      2.98 TB/s     70% copy  0.58x
ours, M = 64          53.8 us    662.77 GB/s     16% copy  0.24x
cuBLASLt int8, M = 64 32.9 us      2.04 TB/s     48% copy  0.39x
"""
    rows = {r.kernel: r for r in benchmarks_page.kernels(_notebook(text))}
    assert rows["ours, M = 1"].peer_ratio == "1.73x cuBLASLt int8, M = 1"
    assert rows["ours, M = 64"].peer_ratio == "0.61x cuBLASLt int8, M = 64"


def test_the_page_follows_the_stored_outputs(tmp_path):
    (tmp_path / "solutions" / "00-x").mkdir(parents=True)
    nbformat.write(_notebook(), tmp_path / "solutions" / "00-x" / "demo.ipynb")
    assert benchmarks_page.main(["--root", str(tmp_path)]) == 0
    assert benchmarks_page.main(["--root", str(tmp_path), "--check"]) == 0
    nbformat.write(_notebook(OUTPUT.replace("467.7 us", "401.2 us")), tmp_path / "solutions" / "00-x" / "demo.ipynb")
    assert benchmarks_page.main(["--root", str(tmp_path), "--check"]) == 1


def test_benchmarks_md_is_what_the_solutions_generate():
    page = ROOT / benchmarks_page.PAGE
    assert page.is_file() and page.read_text() == benchmarks_page.render(ROOT), (
        "BENCHMARKS.md differs from the stored outputs of solutions/: run kernel-lab benchmarks "
        "(python -m kernel_lab.benchmarks_page) and commit it")


def test_the_kernel_lab_command_dispatches_its_subcommands(capsys):
    from kernel_lab import cli

    assert cli.main(["benchmarks", "--root", str(ROOT), "--check"]) == 0
    assert "BENCHMARKS.md is up to date" in capsys.readouterr().out
    assert cli.main(["--help"]) == 0 and "kernel-lab progress" in capsys.readouterr().out
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["colab-install", "--help"])
    assert capsys.readouterr().out.startswith("usage: kernel-lab colab-install")
    with pytest.raises(SystemExit):
        cli.main(["warm", "--help"])
    assert capsys.readouterr().out.startswith("usage: kernel-lab warm")  # not python -m kernel_lab...


def test_the_learners_best_line_heads_the_page(tmp_path):
    best = ("your best kernel (fast): 94% of the copy roofline (goal 80%: met), 2.87x cupy.copyto(out, a.T)\n")
    nb = new_notebook(cells=[new_code_cell("x", outputs=[new_output("stream", name="stdout", text=OUTPUT)]),
                             new_code_cell("kl.your_best(...)", outputs=[new_output("stream", name="stdout", text=best)]),
                             new_code_cell("kl.your_best(...)", outputs=[new_output(
                                 "stream", name="stdout", text="your best kernel: timing skipped: simulator\n")])])
    assert benchmarks_page.best_lines(nb) == [("fast", "94% of the copy roofline (goal 80%: met), "
                                                        "2.87x cupy.copyto(out, a.T)")]
    (tmp_path / "solutions" / "00-x").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "solutions" / "00-x" / "demo.ipynb")
    page = benchmarks_page.render(tmp_path)
    assert "| `00-x/demo` | fast | 94% of the copy roofline (goal 80%: met), 2.87x cupy.copyto(out, a.T) |" in page
    assert page.index("The learner's best kernel") < page.index("## `00-x/demo`")


def test_the_gpu_comes_from_the_outputs_else_from_the_metadata():
    assert benchmarks_page.gpu_of(_notebook()) == "NVIDIA H200 (cc 9.0)"
    nb = _notebook(OUTPUT.split("\n", 1)[1])  # no GPU line printed (a setup cell still to run on a GPU)
    assert benchmarks_page.gpu_of(nb) is None
    nb.metadata["kernel_lab"] = {"outputs_from": "GPU: NVIDIA H100 80GB HBM3 (compute capability 9.0), 2026-11-26"}
    assert benchmarks_page.gpu_of(nb) == "NVIDIA H100 80GB HBM3 (cc 9.0)"
