"""Kernel Lab's helper package: every notebook imports it first.

    import kernel_lab as kl
    env = kl.setup(requires=["gpu", "cupy"])   # prints the machine, stops if it lacks something

Importing this package decides, before Numba is imported, whether kernels run on a GPU or in
Numba's CUDA simulator (no GPU found: simulator). The modules, one job each:

- environment: GPU detection, the simulator switch, ``setup()`` and its readable gate
- sizes: problem sizes that know whether they run on a GPU or the simulator
- validate: clear errors for bad arguments to any helper
- check: comparing a kernel's output with a float64 NumPy reference, and explaining failures
- bench: timing with CUDA events, rooflines measured on this GPU, comparison with a library;
  tuner: time candidate configurations once, keep the fastest on disk (02.3's SGEMM, 06.4)
- plots: bar charts and roofline charts of benchmark results
- exercises: writes course/ (exercise notebooks) from solutions/
- simulator: the simulator's missing pieces (warp operations, race detection, block schedules, ...)
- checks: ready-made checks for the exercises, one module per course module
- reductions_gemm: module 02's reference kernels (``scans``: reductions and scans; ``sgemm``: the SGEMM
  progression, DGEMM) and the progression beside cuBLAS (``python -m kernel_lab.reductions_gemm.bench``);
  the top-level ``scans``, ``sgemm``, ``bench_sgemm`` and ``bench_ozaki`` are old names of the moved
  modules, the same module objects, kept while notebooks still name them
- fusion: module 03's kernels (GEMM + bias + ReLU, 3x3 convolution variants, LayerNorm + GELU, the
  epilogue factory and row softmax), their references and sweeps
- vector_loads: 16-byte loads and stores from Numba kernels (``load4``, ``store4``, ...)
- readings: holds the figures quoted in notebooks' prose to their stored outputs
- tensor_cores: module 06's cuBLASDx GEMMs, the library peers (``peers``), compiling without a GPU
  (``offline``), warming the compile caches for an image (``python -m kernel_lab.tensor_cores.warm``)
- ozaki: module 07, FP64 GEMM from INT8 products (both Ozaki schemes in NumPy, and their GPU
  kernels); every method beside cuBLAS DGEMM (``python -m kernel_lab.ozaki.bench``)
- hopper_async: module 08, Hopper's asynchronous copies (``hopper_async.bulk_copies``: 08.1's bulk
  copies through mbarriers, one tile, many rounds, a ring of stages; ``hopper_async.wgmma_gemm``: 08.3's wgmma
  descriptors, one 64 x N step and a block's K loop)
- multigpu: module 09, beyond one GPU (``multigpu.probe``: GPUs, peer access, NVLink; ``multigpu.peer``: 09.1's
  peer-read kernels and the peer copy; ``multigpu.one_shot``: 09.2's one-shot all-reduce; ``multigpu.nccl``,
  ``multigpu.timing``: NCCL's all-reduce, bus bandwidth, timing a collective; ``multigpu.simulated``: the
  protocol for two simulated GPUs)
- progress: every passing check noted in a local file; cli: the ``kernel-lab`` command (progress,
  benchmarks, mistakes, exercises); colab: Colab badges and install; benchmarks_page, mistakes_page:
  BENCHMARKS.md and docs/mistakes.md, generated
- attention: module 04 (float64 references and the online softmax in NumPy with its classic
  mistakes, CUDA-core kernels, the cuBLASDx tensor-core forward)
- device: the bottom layer, device functions a kernel calls (DP4A and PRMT in ``device.dp4a``; the
  top-level vector_loads, bitcast, acquire, cache_hint_loads and mma_ptx belong to it too).
  tests/test_package_layers.py holds the layers: nothing imports upward, no two parts import each other
- quant: module 05, quantization formats in NumPy and the integer kernels, a file per notebook (``quant.int8``,
  ``quant.int4``, ``quant.ternary``, ``quant.int8_gemm``, ``quant.w4a8``, ``quant.w4a8_mma``)
- quant.fp8, quant.microscaling, quant.float_kernels: module 05's floating-point formats (FP8 E4M3/E5M2,
  E2M1, NVFP4, MXFP4/MXFP8) as bit-exact NumPy references and as kernels
"""

from .environment import choose_backend as _choose_backend

BACKEND = _choose_backend()  # must run before anything imports numba.cuda
if BACKEND == "gpu":  # cuda.ldcv/ldcg as loads the compiler may not move (see cache_hint_loads)
    from .cache_hint_loads import install as _install_ordered_loads

    _install_ordered_loads()
else:  # the simulator's extensions now, so that the package's own modules (``@cuda.jit(device=True,
    # forceinline=True)`` at import) compile under it even before a notebook calls setup()
    from .simulator import install as _install_simulator

    _install_simulator()

from .environment import NotebookGated, current, gpu_info, on_simulator, setup  # noqa: E402
from .sizes import adversarial_shapes, adversarial_sizes, blocks_for, sizes  # noqa: E402
from .check import CheckFailed, check_array, check_kernel, tolerance  # noqa: E402
from .bench import Measurement, benchmark, compare, rooflines, sweep, your_best  # noqa: E402
from .plots import plot_bars, plot_roofline  # noqa: E402
from .acquire import load_acquire, load_relaxed  # noqa: E402
from .bitcast import bits_float, float_bits  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BACKEND", "NotebookGated", "setup", "current", "gpu_info", "on_simulator",
    "sizes", "adversarial_sizes", "adversarial_shapes", "blocks_for",
    "CheckFailed", "check_array", "check_kernel", "tolerance",
    "Measurement", "benchmark", "compare", "rooflines", "sweep", "your_best",
    "plot_bars", "plot_roofline", "load_acquire", "load_relaxed", "float_bits", "bits_float",
]
