"""The benchmark harness: arithmetic of the report, argument errors, cache, and simulator behaviour."""

import json

import matplotlib
import numpy as np
import pytest

import kernel_lab as kl
import kernel_lab.bench as bench
from kernel_lab.validate import KernelLabArgumentError

matplotlib.use("Agg")

ROOF = {"copy_gbps": 3000.0, "sgemm_tflops": 50.0, "dgemm_tflops": 60.0}


def test_measurement_reports_fraction_of_copy_bandwidth():
    m = kl.Measurement("k", ms=1.0, times_ms=[0.9, 1.0, 1.2], bytes=2.7e9, roofline="copy", roofline_value=3000.0)
    assert m.gbps == pytest.approx(2700.0)
    assert m.fraction == pytest.approx(0.9)
    assert m.spread == pytest.approx(0.3)
    assert str(m) == "k: 1.000 ms, 2.70 TB/s, 90% of this GPU's copy bandwidth (3,000 GB/s)"


def test_measurement_reports_fraction_of_gemm_peak():
    m = kl.Measurement("gemm", ms=2.0, flops=50e12 * 2e-3 / 2, roofline="sgemm", roofline_value=50.0)
    assert m.tflops == pytest.approx(25.0) and m.fraction == pytest.approx(0.5)
    assert "50% of this GPU's cuBLAS SGEMM" in str(m)


def test_compare_prints_ratio_to_baseline(capsys):
    ours = kl.Measurement("ours", ms=2.0, bytes=4e9, roofline="copy", roofline_value=3000.0)
    lib = kl.Measurement("library", ms=1.0, bytes=4e9, roofline="copy", roofline_value=3000.0)
    table = kl.compare([ours, lib], baseline="library")
    rows = table.splitlines()
    assert rows[1].endswith("0.50x") and rows[2].endswith("1.00x")
    with pytest.raises(KernelLabArgumentError, match="baseline 'cublas' is not among"):
        kl.compare([ours, lib], baseline="cublas")
    with pytest.raises(KernelLabArgumentError, match="list of Measurements"):
        kl.compare([1.0, 2.0])


def test_benchmark_rejects_bad_arguments():
    with pytest.raises(KernelLabArgumentError, match="fn must be a function"):
        kl.benchmark("x", 42)
    with pytest.raises(KernelLabArgumentError, match="bytes must be a positive number"):
        kl.benchmark("x", lambda: None, bytes=-5)
    with pytest.raises(KernelLabArgumentError, match="also pass flops"):
        kl.benchmark("x", lambda: None, peak="sgemm")
    with pytest.raises(KernelLabArgumentError, match="peak must be"):
        kl.benchmark("x", lambda: None, flops=1.0, peak="hgemm")


@pytest.mark.skipif(not kl.on_simulator(), reason="simulator behaviour")
def test_benchmark_under_the_simulator_skips_timing(capsys):
    m = kl.benchmark("k", lambda: None, bytes=100)
    assert m.ms is None and m.fraction is None
    assert "timing skipped" in capsys.readouterr().out
    assert kl.rooflines(quiet=True) == {"copy_gbps": None, "sgemm_tflops": None, "dgemm_tflops": None}
    assert kl.plot_bars([m]) is None


@pytest.mark.skipif(kl.on_simulator(), reason="needs a GPU to time")
def test_benchmark_on_gpu_rejects_zero_inputs():
    from numba import cuda

    zeros = cuda.to_device(np.zeros(1000, dtype=np.float32))
    with pytest.raises(KernelLabArgumentError, match="all zeros"):
        kl.benchmark("zeros", lambda: None, bytes=4000, inputs=(zeros,))


@pytest.mark.skipif(kl.on_simulator(), reason="needs a GPU to time")
def test_benchmark_on_gpu_times_a_copy_near_the_roofline():
    from numba import cuda

    src = cuda.to_device((np.arange(1 << 27, dtype=np.float32) + 1).view(np.complex128))
    dst = cuda.device_array_like(src)
    copy = bench._copy_kernel()
    m = kl.benchmark("copy", lambda: copy[kl.blocks_for(src.size, 256), 256](src, dst), bytes=2 * src.nbytes,
                     inputs=(src,))
    assert 0.8 < m.fraction < 1.2, m


def test_rooflines_are_cached_on_disk_per_gpu(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(bench, "on_simulator", lambda: False)
    monkeypatch.setattr(bench, "_gpu_key", lambda: "Fake GPU | GPU-1 | driver CUDA (13, 0)")
    monkeypatch.setattr(bench, "_ROOFLINES", {})
    monkeypatch.setattr(bench, "_measure_copy_gbps", lambda: calls.append("copy") or 3000.0)
    monkeypatch.setattr(bench, "_measure_gemm_tflops", lambda dtype: calls.append(str(np.dtype(dtype))) or 50.0)
    first = kl.rooflines(quiet=True)
    assert first == {"copy_gbps": 3000.0, "sgemm_tflops": 50.0, "dgemm_tflops": 50.0}
    assert calls == ["copy", "float32", "float64"]
    stored = json.loads((tmp_path / "rooflines.json").read_text())
    assert stored["Fake GPU | GPU-1 | driver CUDA (13, 0)"]["copy_gbps"] == 3000.0
    monkeypatch.setattr(bench, "_ROOFLINES", {})  # a new session reads the disk cache
    assert kl.rooflines(quiet=True) == first and len(calls) == 3
    kl.rooflines(quiet=True, refresh=True)
    assert len(calls) == 6


def test_plots_draw_measurements():
    ms = [kl.Measurement("a", 1.0, bytes=2e9, flops=1e9, roofline="copy", roofline_value=3000.0),
          kl.Measurement("b", 2.0, bytes=2e9, flops=1e12, roofline="copy", roofline_value=3000.0)]
    ax = kl.plot_bars(ms, metric="fraction")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    ax = kl.plot_roofline(ms, ROOF)
    assert len(ax.get_lines()) == 5  # bandwidth, two peaks, two kernels
    with pytest.raises(KernelLabArgumentError, match="metric must be"):
        kl.plot_bars(ms, metric="speed")
    with pytest.raises(KernelLabArgumentError, match="needs the dict returned by kl.rooflines"):
        kl.plot_roofline(ms, {})


def test_sweep_maps_in_order():
    assert kl.sweep(lambda v: v * v, [1, 2, 3]) == [1, 4, 9]


@pytest.mark.skipif(kl.on_simulator(), reason="needs a GPU to time")
def test_timing_excludes_the_hosts_launch_overhead():
    """An empty kernel takes a few microseconds on the GPU; Python needs tens to launch it."""
    from numba import cuda

    @cuda.jit
    def empty():
        pass

    times = bench.time_ms(lambda: empty[1, 32](), warmup=3, repeat=20, flush_l2=False)
    assert sorted(times)[len(times) // 2] < 0.015, times


def test_your_best_names_the_fastest_and_its_ratios(capsys):
    slow = kl.Measurement("padded", 0.25, bytes=2e9 * 0.25, roofline="copy", roofline_value=3000.0)
    fast = kl.Measurement("fast", 0.19, bytes=2e9 * 0.19 * 0.94 * 3000 / 2000, roofline="copy", roofline_value=3000.0)
    pkg = kl.Measurement("package x16", 0.18)
    lib = kl.Measurement("cupy.copyto", 0.54)
    line = kl.your_best([slow, fast], package=pkg, library=lib, goal=0.8)
    assert line == "your best kernel (fast): 94% of the copy roofline (goal 80%: met), 0.95x the package's best (package x16), 2.84x cupy.copyto"
    assert capsys.readouterr().out.strip() == line
    assert "NOT met" in kl.your_best([slow], goal=0.8)


def test_your_best_under_the_simulator_and_bad_arguments():
    assert "timing skipped" in kl.your_best([kl.Measurement("k", None)])
    with pytest.raises(KernelLabArgumentError):
        kl.your_best([0.2])
    with pytest.raises(KernelLabArgumentError):
        kl.your_best([kl.Measurement("k", 0.1)], goal=80)


@pytest.mark.skipif(not kl.on_simulator(), reason="the gate speaks where the GPU is missing")
def test_a_gpu_command_without_a_gpu_says_so_in_one_line(capsys):
    from kernel_lab.ozaki import bench as bench_ozaki

    with pytest.raises(SystemExit) as stop:
        bench_ozaki.main([])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m kernel_lab.ozaki.bench: cannot run here: it needs a real GPU") and "\n" not in err


@pytest.mark.skipif(not kl.on_simulator(), reason="the gate speaks where the GPU is missing")
def test_module06_ratios_without_a_gpu_says_so_in_one_line():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "scripts" / "module06_ratios.py")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("scripts/module06_ratios.py: cannot run here: it needs a real GPU")
    assert len(done.stderr.strip().splitlines()) == 1
