"""Bad input to the helpers gets one clear sentence; sizes and requirements behave."""

import numpy as np
import pytest

import kernel_lab as kl
from kernel_lab.environment import GPUInfo, NotebookGated, unmet_requirements
from kernel_lab.validate import KernelLabArgumentError, require_array, require_positive_int
from numba import cuda


def test_require_array_names_each_problem():
    a = np.ones((4, 5), dtype=np.float32)
    assert require_array(a, "a", dtype=np.float32, ndim=2, shape=(4, None), contiguous=True) is a
    with pytest.raises(KernelLabArgumentError, match="a has shape \\(4, 5\\), expected \\(3, any\\)"):
        require_array(a, "a", shape=(3, None))
    with pytest.raises(KernelLabArgumentError, match="a must have 1 dimension"):
        require_array(a, "a", ndim=1)
    with pytest.raises(KernelLabArgumentError, match="dtype float32, expected float64"):
        require_array(a, "a", dtype=np.float64)
    with pytest.raises(KernelLabArgumentError, match="not contiguous"):
        require_array(a.T, "a", contiguous=True)
    with pytest.raises(KernelLabArgumentError, match="not contiguous"):
        require_array(a[:, ::2], "a", contiguous=True)
    b = a.copy()
    b[1, 2] = np.nan
    with pytest.raises(KernelLabArgumentError, match="1 NaN or infinite value\\(s\\), the first at index \\(1, 2\\)"):
        require_array(b, "b", finite=True)
    with pytest.raises(KernelLabArgumentError, match="a Python list"):
        require_array([1, 2], "c")
    with pytest.raises(KernelLabArgumentError, match="expected an array"):
        require_array(3.0, "d")


def test_require_array_understands_device_arrays():
    d = cuda.to_device(np.ones((3, 4), dtype=np.float32))
    require_array(d, "d", dtype=np.float32, shape=(3, 4), contiguous=True)
    with pytest.raises(KernelLabArgumentError, match="dtype float32, expected int8"):
        require_array(d, "d", dtype=np.int8)


def test_require_positive_int():
    assert require_positive_int(3, "n") == 3
    with pytest.raises(KernelLabArgumentError, match="n must be > 0"):
        require_positive_int(0, "n")
    with pytest.raises(KernelLabArgumentError, match="whole number"):
        require_positive_int(2.5, "n")
    with pytest.raises(KernelLabArgumentError, match="whole number"):
        require_positive_int(True, "n")


def test_sizes_pick_by_backend_and_demand_the_same_names():
    s = kl.sizes(gpu=dict(n=10**8), sim=dict(n=100))
    assert s.n == (100 if kl.on_simulator() else 10**8)
    with pytest.raises(ValueError, match="same names.*only for the GPU: \\['m'\\]"):
        kl.sizes(gpu=dict(n=1, m=2), sim=dict(n=1))
    with pytest.raises(TypeError, match="two dicts"):
        kl.sizes(gpu=5, sim=3)


def test_blocks_for_rounds_up():
    assert [kl.blocks_for(n, 256) for n in (0, 1, 256, 257)] == [0, 1, 1, 2]
    with pytest.raises(KernelLabArgumentError):
        kl.blocks_for(10, 0)


def test_adversarial_sizes_have_stable_labels():
    cases = kl.adversarial_sizes(block=128)
    assert [label for label, _ in cases] == ["1", "block-1", "block+1", "3 blocks+7", "large"]
    assert [n for _, n in cases][:4] == [1, 127, 129, 391]
    shapes = kl.adversarial_shapes(tile=16)
    assert all(len(s) == 2 for _, s in shapes) and shapes[1][1] == (15, 17)


H100 = GPUInfo(count=1, name="H100", compute_capability=(9, 0), driver_cuda_version=(13, 0))
OLD = GPUInfo(count=1, name="T4", compute_capability=(7, 5), driver_cuda_version=(12, 4))


def test_requirements_on_a_gpu():
    assert unmet_requirements(["gpu", "cc>=9.0", "cuda>=13"], simulator=False, gpu=H100) == []
    problems = unmet_requirements(["cc>=9.0", "cuda>=13"], simulator=False, gpu=OLD)
    assert "compute capability 9.0 or newer; T4 is 7.5" in problems[0]
    assert "CUDA 13.0 or newer" in problems[1] and "supports CUDA 12.4" in problems[1]
    assert "update the GPU driver" in problems[1] and "cu12 notebooks" not in problems[1]  # there are none


def test_hopper_is_a_gpu_of_cc_9_or_the_simulator():
    """08's notebooks: Hopper's mbarriers and bulk copies, which the simulator models."""
    assert unmet_requirements(["hopper"], simulator=False, gpu=H100) == []
    assert unmet_requirements(["hopper"], simulator=True, gpu=GPUInfo()) == []
    (problem,) = unmet_requirements(["hopper"], simulator=False, gpu=OLD)
    assert "compute capability 9.0 or newer (Hopper" in problem and "T4 is 7.5" in problem
    assert "runs in the simulator" in problem


def test_requirements_in_the_simulator_name_only_what_is_missing(monkeypatch):
    import kernel_lab.environment as environment

    module06 = ["gpu", "nvmath", "cupy", "cc>=8.0", "cuda>=13"]
    monkeypatch.setattr(environment, "_import_ok", lambda module: True)  # nvmath and cupy installed
    assert unmet_requirements(module06, simulator=True, gpu=GPUInfo()) == [
        "this notebook needs a real GPU, compute capability 8.0+ and CUDA 13+, which the CUDA simulator cannot "
        "provide (no GPU was found, so kernels would run on the CPU)"]
    monkeypatch.setattr(environment, "_import_ok", lambda module: module != "nvmath")  # nvmath missing
    problems = unmet_requirements(module06, simulator=True, gpu=GPUInfo())
    assert len(problems) == 2 and "cupy" not in " ".join(problems)
    assert problems[1] == "on a GPU machine it also needs nvmath-python, not installed here (pip install -e '.[cu13]')"


def test_a_gpu_library_alone_still_asks_for_a_gpu_in_the_simulator(monkeypatch):
    import kernel_lab.environment as environment

    monkeypatch.setattr(environment, "_import_ok", lambda module: True)
    (problem,) = unmet_requirements(["cupy"], simulator=True, gpu=GPUInfo())
    assert problem.startswith("this notebook needs a real GPU, which the CUDA simulator cannot provide")


def test_missing_package_is_named_with_its_install_command(monkeypatch):
    import kernel_lab.environment as environment

    monkeypatch.setattr(environment, "_import_ok", lambda module: module != "nvmath")
    problems = unmet_requirements(["nvmath"], simulator=False, gpu=H100)
    assert problems == ["this notebook needs the package nvmath-python, which is not installed or does not "
                        "import here; install it with: pip install -e '.[cu13]'"]


def test_unknown_requirement_is_rejected():
    with pytest.raises(ValueError, match="unknown requirement 'cuda13'"):
        unmet_requirements(["cuda13"], simulator=False, gpu=H100)


def test_setup_gates_with_one_readable_sentence(capsys):
    if kl.on_simulator():
        with pytest.raises(NotebookGated, match="needs a real GPU, which the CUDA simulator cannot provide"):
            kl.setup(requires=["gpu"])
        out = capsys.readouterr().out
        assert out.startswith("CUDA simulator: no GPU found")
    else:
        with pytest.raises(NotebookGated, match="compute capability 99.0"):
            kl.setup(requires=["cc>=99.0"])
    err = NotebookGated("this notebook needs X.")
    assert err._render_traceback_() == ["Kernel Lab: this notebook needs X."]


def test_setup_returns_the_environment(capsys):
    env = kl.setup(requires=[])
    assert env.simulator == kl.on_simulator()
    assert "numba" in env.versions and "numpy" in env.versions


def test_small_sizes_can_be_asked_for_on_any_machine(monkeypatch):
    from kernel_lab.sizes import small_sizes_asked

    monkeypatch.setenv("KERNEL_LAB_SIZES", "small")
    assert small_sizes_asked() and kl.sizes(gpu=dict(n=1 << 26), sim=dict(n=3000)).n == 3000
    monkeypatch.setenv("KERNEL_LAB_SIZES", "full")
    assert not small_sizes_asked()
    monkeypatch.setenv("KERNEL_LAB_SIZES", "tiny")
    with pytest.raises(ValueError, match="KERNEL_LAB_SIZES is 'small' or 'full'"):
        kl.sizes(gpu=dict(n=1), sim=dict(n=2))
