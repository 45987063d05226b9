"""Mutation test of the checks of modules 00 to 05, 07 and 08: every mutant of a solution kernel is caught.

A check that passes a wrong kernel teaches the wrong thing. Each mutant below is one small, wrong
edit (a text substitution) of a kernel or launcher in a solution notebook: a bound moved by one, a
bounds check dropped, an index or a stride changed, a barrier removed, a shuffle offset or direction
changed, a result stored in a narrower format. The test takes the notebook's own cells (the kernel's
cell with the edit applied, the cells it needs, and the cell that checks it), runs them in the
simulator, and expects the notebook's check to fail: :class:`kernel_lab.CheckFailed`, or one of the
simulator's errors (an out-of-bounds access, a shared-memory race, a misused warp function).

Every mutant here changes what the kernel computes for some input the check may draw; edits that
change only the speed (padding, a smaller block) are not mutants of a check. Run this file as a
script for the score and the survivors::

    PYTHONPATH=$PWD/utilities python tests/test_mutation_checks.py

When a notebook's kernel is rewritten, its mutants here must follow (the test says which text is
no longer found).
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import kernel_lab as kl
from kernel_lab import mistakes_page

ROOT = Path(__file__).resolve().parents[1]
NB00 = "solutions/00-getting-started/00-getting-started.ipynb"
NB011 = "solutions/01-gpu-in-practice/01-threads-blocks-grids.ipynb"
NB012 = "solutions/01-gpu-in-practice/02-memory-hierarchy.ipynb"
NB013 = "solutions/01-gpu-in-practice/03-transpose-shared-memory-banks.ipynb"
NB014 = "solutions/01-gpu-in-practice/04-warp-primitives.ipynb"
NB015 = "solutions/01-gpu-in-practice/05-occupancy.ipynb"
NB021 = "solutions/02-reductions-and-gemm/02.1-device-wide-reductions.ipynb"
NB022 = "solutions/02-reductions-and-gemm/02.2-device-wide-scan.ipynb"
NB023 = "solutions/02-reductions-and-gemm/02.3-sgemm-progression.ipynb"
NB023B = "solutions/02-reductions-and-gemm/02.3b-sgemm-warp-tiling.ipynb"
NB024 = "solutions/02-reductions-and-gemm/02.4-dgemm.ipynb"
NB031 = "solutions/03-fusion/03.1-gemm-bias-relu.ipynb"
NB032 = "solutions/03-fusion/03.2-conv3x3-bias-relu.ipynb"
NB033 = "solutions/03-fusion/03.3-layernorm-gelu.ipynb"
NB034 = "solutions/03-fusion/03.4-epilogues-as-functions.ipynb"
NB041 = "solutions/04-attention/04.1-naive-attention.ipynb"
NB042 = "solutions/04-attention/04.2-online-softmax.ipynb"
NB043 = "solutions/04-attention/04.3-fused-attention.ipynb"
NB045 = "solutions/04-attention/04.5-backward.ipynb"
NB051 = "solutions/05-quantization/05.1-affine-quantization.ipynb"
NB052 = "solutions/05-quantization/05.2-int4-groups.ipynb"
NB053 = "solutions/05-quantization/05.3-fp8-e4m3-e5m2.ipynb"
NB054 = "solutions/05-quantization/05.4-nvfp4-and-mx.ipynb"
NB055 = "solutions/05-quantization/05.5-ternary.ipynb"
NB056 = "solutions/05-quantization/05.6-quantized-gemms.ipynb"
NB071 = "solutions/07-fp64-emulation/07.1-the-idea-in-numpy.ipynb"
NB072 = "solutions/07-fp64-emulation/07.2-slicing-on-the-gpu.ipynb"
NB076 = "solutions/07-fp64-emulation/07.6-beyond.ipynb"
NB081 = "solutions/08-hopper-async/08.1-bulk-copies-and-mbarriers.ipynb"
NB082 = "solutions/08-hopper-async/08.2-tensor-copies-tma.ipynb"
NB083 = "solutions/08-hopper-async/08.3-wgmma.ipynb"
NB084 = "solutions/08-hopper-async/08.4-warp-specialised-gemm.ipynb"
NB091 = "solutions/09-multi-gpu/09.1-two-gpus-one-process.ipynb"
NB092 = "solutions/09-multi-gpu/09.2-all-reduce-as-kernels.ipynb"

# A program is the list of a notebook's cells that define one kernel and check it, in notebook
# order. "id:defs" runs only the cell's definitions (functions, constants, imports); "id" runs the
# whole cell, including its checks; "=statement" runs one statement, where a cell checks several
# kernels and only one of its checks is wanted (the others would only cost time).
PROGRAMS = {
    "saxpy": (NB00, ["cell-2:defs", "cell-7", "cell-9"]),
    "saxpy x4": (NB00, ["cell-2:defs", "cell-7:defs", "cell-9:defs", "cell-17"]),
    "matrix add": (NB011, ["setup:defs", "matrix-add", "matrix-add-check"]),
    "grid-stride saxpy": (NB011, ["setup:defs", "grid-stride", "grid-stride-check"]),
    "strided copy": (NB012, ["setup:defs", "strided-copy", "strided-copy-check"]),
    "scale columns": (NB012, ["setup:defs", "scale-columns", "scale-columns-check"]),
    "column sums": (NB011, ["setup:defs", "column-sums", "column-sums-check"]),
    "copy": (NB012, ["setup:defs", "l2-sweep:defs", "vector-loads", "vector-copy", "vector-copy-check"]),
    "copy_vec4": (NB012, ["setup:defs", "l2-sweep:defs", "vector-loads", "vector-copy", "vector-copy-check:defs",
                          "=checks.check_copy(lambda out, src: copy_as('16-byte vectors', src, out), block=THREADS, "
                          "per_thread=4)"]),
    "copy_tiled": (NB013, ["setup:defs", "design-code:defs", "measure-setup"]),
    "tiled transpose": (NB013, ["setup:defs", "design-code:defs", "tiled", "tiled-check"]),
    "swizzled transpose": (NB013, ["setup:defs", "design-code:defs", "swizzled", "swizzled-check"]),
    "flat transpose": (NB013, ["setup:defs", "design-code:defs", "flat-setup:defs", "flat", "flat-check"]),
    "interior transpose": (NB013, ["setup:defs", "design-code:defs", "flat-setup:defs", "interior", "interior-check"]),
    "fast transpose": (NB013, ["setup:defs", "design-code:defs", "flat-setup:defs", "fast-code", "fast-check"]),
    "warp sum": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-11", "warp-12"]),
    "row sums": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-11:defs", "warp-20:defs",
                         "=check_row_sums(row_launchers['rows, one warp per row'], row=ROW, block=THREADS)"]),
    "compaction": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-27:defs", "warp-29",
                           "warp-30"]),
    "compaction, given": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-27"]),
    "warp scan": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-34", "warp-35"]),
    "block scan": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-34:defs", "warp-37:defs",
                           "=check_warp_prefix_sum(launch_block_scan_warp, segment=THREADS)"]),
    "block scan, shared memory": (NB014, ["warp-01:defs", "warp-03:defs", "warp-07:defs", "warp-37:defs",
                                          "=check_warp_prefix_sum(launch_block_scan_shared, segment=THREADS)"]),
    "occupancy calculator": (NB015, ["occupancy-01:defs", "occupancy-07", "occupancy-08"]),
    "saxpy_1, saxpy_4": (NB015, ["occupancy-01:defs", "occupancy-14"]),
    "absmax, one pass": (NB021, ["b78e0e05:defs", "9c38aa4b"]),
    "absmax, grid-stride": (NB021, ["b78e0e05:defs", "9c38aa4b:defs", "f46f35b0"]),
    "argmax key": (NB021, ["b78e0e05:defs", "a1685920"]),
    "Kahan sum": (NB021, ["b78e0e05:defs", "2e0c1a72"]),
    "scan of the tile sums": (NB022, ["0180e442:defs", "44e3c9b4"]),
    "look-back, one thread": (NB022, ["0180e442:defs", "dab66a9f:defs", "f458467b"]),
    "status word": (NB022, ["0180e442:defs", "c4733ad7"]),
    "SGEMM, shared-memory tiles": (NB023, ["f262a922:defs", "96a129fb"]),
    "SGEMM, 2D register blocking": (NB023, ["f262a922:defs", "831d1027"]),
    "SGEMM, two tiles per trip": (NB023B, ["sgemm-part2-setup:defs", "bf9a7e0d:defs", "0dec6b1c:defs",
                                           "19dfffaf:defs", "75d81445"]),
    "FMA chains": (NB024, ["f84855e3:defs", "e66ad60c:defs", "=checks.check_fma_chains(make_fma_chains)"]),
    "DGEMM step": (NB024, ["f84855e3:defs", "ex2-code"]),
    "DGEMM tile budget": (NB024, ["f84855e3:defs", "ex2-code:defs", "ex3-code"]),
    "bias, then ReLU": (NB031, ["c01:defs", "c03"]),
    "fused bias + ReLU": (NB031, ["c01:defs", "c03:defs", "c05"]),
    "direct conv": (NB032, ["c01:defs", "c03"]),
    "implicit GEMM gather": (NB032, ["c01:defs", "c16"]),
    "const bias": (NB032, ["c01:defs", "ex3-code"]),
    "smem weights": (NB032, ["c01:defs", "ex4-code"]),
    "halo tile": (NB032, ["c01:defs", "ex4-code:defs", "c08"]),
    "register blocking": (NB032, ["c01:defs", "ex6-code"]),
    "fast gather": (NB032, ["c01:defs", "c16:defs", "ex8-code"]),
    "Welford combine": (NB033, ["c01:defs", "c03:defs", "c05"]),
    "LayerNorm + GELU": (NB033, ["c01:defs", "c03:defs", "c05"]),
    "LayerNorm + GELU, x4": (NB033, ["c01:defs", "ex3-code"]),
    "gelu_fast": (NB033, ["c01:defs", "ex3-code:defs", "ex4-code"]),
    "team_sum": (NB033, ["c01:defs", "ex3-code:defs", "ex4-code:defs", "ex5-code"]),
    "LayerNorm + GELU, team": (NB033, ["c01:defs", "ex3-code:defs", "ex4-code:defs", "ex5-code:defs", "ex6-code"]),
    "LayerNorm + GELU, x8": (NB033, ["c01:defs", "ex3-code:defs", "ex4-code:defs", "ex5-code:defs", "ex6-code:defs",
                                     "ex7-code"]),
    "epilogue factories": (NB034, ["c01:defs", "c03"]),
    "GEMM + row softmax": (NB034, ["c01:defs", "c11"]),
    "attention softmax": (NB041, ["72df107a:defs", "ba0afa27"]),
    "online softmax": (NB042, ["d980c602:defs", "2cb3a5e8:defs", "43124d29:defs", "630ae996"]),
    "fused attention": (NB043, ["2eba24c1:defs", "c8a88f30"]),
    "tiled attention": (NB043, ["2eba24c1:defs", "tiled-core"]),
    "attention backward, dQ": (NB045, ["315858b7:defs", "b08de7e2"]),
    "int8 quantize": (NB051, ["cell-1:defs", "cell-5"]),
    "int8 dequantize": (NB051, ["cell-1:defs", "cell-9"]),
    "affine rows": (NB051, ["cell-1:defs", "cell-11"]),
    # exercise 4's cell checks the quantizer, byte_value (on the CPU) and the dequantizer in turn:
    # each program runs the check of its own function (byte_value's before the dequantizer's, as
    # the notebook does)
    "int8 quantize x4": (NB051, ["cell-1:defs", "eb8f9fa2", "f3880527:defs",
                                 "=checks.check_int8_quantize(launch_quantize_x4, name='int8 quantize x4')"]),
    "int8 dequantize x4": (NB051, ["cell-1:defs", "eb8f9fa2", "f3880527:defs", "=checks.check_byte_value(byte_value)",
                                   "=checks.check_int8_dequantize(launch_dequantize_x4, name='int8 dequantize x4')"]),
    "int8 quantize x4, FADD rounding": (NB051, ["cell-1:defs", "eb8f9fa2", "f3880527:defs", "0de13394"]),
    "int4 quantize": (NB052, ["cell-1:defs", "cell-4"]),
    "int4 dequantize": (NB052, ["cell-1:defs", "cell-6"]),
    "int4 quantize rows": (NB052, ["cell-1:defs", "cell-4:defs", "96ee13fc"]),
    "int4 quantize rows x4": (NB052, ["cell-1:defs", "cell-4:defs", "96ee13fc:defs", "q4-x4-code"]),
    "int4 quantize rows u64": (NB052, ["cell-1:defs", "cell-4:defs", "96ee13fc:defs", "q4-x4-code:defs", "q4-u64-code"]),
    "int4 quantize rows x8": (NB052, ["cell-1:defs", "cell-4:defs", "96ee13fc:defs", "q4-x8-code"]),
    "int4 dequantize x4": (NB052, ["cell-1:defs", "cell-6:defs", "ffdc8498"]),
    "int4 dequantize tile4": (NB052, ["cell-1:defs", "cell-6:defs", "ffdc8498:defs", "dq4-tile-code"]),
    "FP8 decode": (NB053, ["4a89cb7f:defs", "543c31e0:defs", "17afa519"]),
    "FP8 decode, table": (NB053, ["4a89cb7f:defs", "17afa519:defs", "e735293c:defs", "fp8-lut-code"]),
    "FP8 encode": (NB053, ["4a89cb7f:defs", "543c31e0:defs", "17afa519:defs", "a4d80208:defs", "5195844f"]),
    "NVFP4 quantize": (NB054, ["ce2cb37e:defs", "128a5cc5"]),
    "MX scale": (NB054, ["ce2cb37e:defs", "128a5cc5:defs", "aa9ee102"]),
    "codes from the bits": (NB054, ["ce2cb37e:defs", "codes-from-bits"]),
    "NVFP4 quantize, codes from the bits": (NB054, ["ce2cb37e:defs", "codes-from-bits:defs", "bits-kernel"]),
    "NVFP4 quantize, a block per thread": (NB054, ["ce2cb37e:defs", "codes-from-bits:defs", "blocks"]),
    "NVFP4 quantize, one reciprocal": (NB054, ["ce2cb37e:defs", "codes-from-bits:defs", "blocks:defs", "reciprocal"]),
    "NVFP4 quantize, lean": (NB054, ["ce2cb37e:defs", "codes-from-bits:defs", "blocks:defs", "reciprocal:defs", "lean"]),
    "ternary quantize": (NB055, ["cell-1:defs", "cell-3"]),
    "ternary gemm": (NB055, ["cell-1:defs", "cell-7"]),
    "ternary gemm, warp + DP4A": (NB055, ["cell-1:defs", "4795d399"]),
    "ternary gemm, four rows per pass": (NB055, ["cell-1:defs", "4795d399:defs",
                                                 "=lut = cuda.to_device(qk.ternary_byte_words())", "892d16f2"]),
    "abs sum x4": (NB055, ["cell-1:defs", "cell-3:defs", "tq-x4-code"]),
    "ternary quantize x16": (NB055, ["cell-1:defs", "cell-3:defs", "tq-x4-code:defs",
                                     "=abs_total = cuda.device_array(1, np.float64)", "tq-x16-code"]),
    "int8 GEMM on DP4A": (NB056, ["cell-1:defs", "cell-4"]),
    "W4A8 GEMM": (NB056, ["cell-1:defs", "cell-10"]),
    "int8 GEMM, tiled": (NB056, ["cell-1:defs", "tiled-code"]),
    "int8 GEMM, warp-tiled step": (NB056, ["cell-1:defs", "warp-code"]),
    "W8A8 epilogue": (NB056, ["cell-1:defs", "warp-code:defs", "w8a8-code"]),
    "Ozaki split_rows": (NB071, ["26009a85:defs", "48318c96", "f256450b"]),
    "Ozaki reconstruct": (NB071, ["26009a85:defs", "9de813dd", "1c2d0be2"]),
    "Ozaki row exponents": (NB072, ["3fcbc5bc:defs", "a9edb7e6"]),
    "Ozaki slice_rows": (NB072, ["3fcbc5bc:defs", "8bc65df9"]),
    "symmetric residues": (NB076, ["82846d38:defs", "233cf6be"]),
    "CRT": (NB076, ["82846d38:defs", "21d88ceb"]),
    # kernels 6 and 7 (02.3b): each cell checks at the simulator's tiles, then (in the simulator) once
    # more at the GPU's, where a thread's 8 x 8 results take two 16-byte loads a row and 8 warps two rows
    "SGEMM, vectorised loads": (NB023B, ["sgemm-part2-setup:defs", "c2dc4d80"]),
    "SGEMM, warp tiling": (NB023B, ["sgemm-part2-setup:defs", "bf9a7e0d:defs", "0dec6b1c"]),
    # 08.1: the mbarrier protocol, run against the simulator's model of the barriers and the copy engine;
    # the mutants that hang are stopped by the checks' time limit (checks.hopper_async.SMALL_S)
    "tile copy": (NB081, ["setup:defs", "tile-copy", "tile-copy-check"]),
    "rounds copy": (NB081, ["setup:defs", "rounds-copy", "rounds-copy-check"]),
    "ring copy": (NB081, ["setup:defs", "ring-copy", "ring-copy-check"]),
    # 08.2: tensor copies, run against the simulator's model of the copy engine (swizzled layout, zeros
    # past the edges, stores at their group's wait); hangs are stopped by checks.hopper_tma.SMALL_S
    "TMA copy": (NB082, ["setup:defs", "tma-copy", "tma-copy-check"]),
    "TMA transpose": (NB082, ["setup:defs", "tma-transpose", "tma-transpose-check"]),
    "TMA transpose ring": (NB082, ["setup:defs", "tma-ring", "tma-ring-check"]),
    # 08.3: wgmma, run against the simulator's model (the tiles read through the descriptors, accumulators
    # in flight until a wait covers them); each check runs the GPU's N = 128 once
    "descriptors": (NB083, ["setup:defs", "descriptors", "descriptors-check"]),
    "wgmma step": (NB083, ["setup:defs", "descriptors:defs", "wgmma-step", "wgmma-step-check"]),
    "wgmma GEMM": (NB083, ["setup:defs", "descriptors:defs", "wgmma-step:defs", "wgmma-gemm", "wgmma-gemm-check"]),
    "wgmma GEMM, prefetch": (NB083, ["setup:defs", "descriptors:defs", "wgmma-step:defs", "wgmma-prefetch",
                                     "wgmma-prefetch-check"]),
    # 08.4: the warp-specialised GEMM's stage protocol, run against the simulator's models of the barriers,
    # the copy engine and wgmma; a mutant that hangs is stopped by the scheduler's poll-stall report (every
    # thread waits on a barrier no one can complete) or by checks.hopper_ws_gemm.SMALL_S
    "producer": (NB084, ["setup:defs", "producer", "producer-check"]),
    "consumer": (NB084, ["setup:defs", "producer:defs", "consumer", "consumer-check"]),
    # 09.1: the peer-read kernels, both "GPUs" as two buffers of one device (a grid of 2 x 32 threads)
    "peer read, one float": (NB091, ["setup:defs", "peer-read-scalar", "peer-read-scalar-check"]),
    "peer read": (NB091, ["setup:defs", "peer-read", "peer-read-check"]),
    # 09.2: the one-shot all-reduce's protocol for two simulated GPUs (stores seen late until a system
    # fence, six block schedules); a mutant that waits for ever is stopped by the simulator's stall limit
    "one-shot all-reduce": (NB092, ["setup:defs", "one-shot-block", "one-shot-check"]),
}


class MutantDoesNotApply(LookupError):
    """The mutant's text is not in the notebook (once): the mutant must follow the notebook."""


@dataclass(frozen=True)
class Mutant:
    program: str
    cell: str  # the cell id the edit applies to
    old: str  # text that occurs exactly once in the cell
    new: str
    what: str  # the class of mistake, for the report

    @property
    def id(self) -> str:
        return f"{self.program}: {self.what}"


M = Mutant
MUTANTS = [
    # ---- 00: SAXPY, one element per thread
    M("saxpy", "cell-7", "if i < out.size:", "if i <= out.size:", "bound <= n"),
    M("saxpy", "cell-7", "if i < out.size:", "if True:", "no bounds check"),
    M("saxpy", "cell-7", "if i < out.size:", "if i < out.size - 1:", "bound n - 1"),
    M("saxpy", "cell-7", "i = cuda.grid(1)", "i = cuda.threadIdx.x", "index without the block offset"),
    M("saxpy", "cell-7", "    out[i] = a * x[i] + y[i]\n", "    out[i] = a * x[i] + y[i - 1]\n", "neighbour's y"),
    M("saxpy", "cell-7", "    out[i] = a * x[i] + y[i]\n", "    out[i] = np.float16(a * x[i] + y[i])\n",
      "float16 store"),
    M("saxpy", "cell-7", "saxpy[kl.blocks_for(out.size, THREADS), THREADS]", "saxpy[out.size // THREADS, THREADS]",
      "grid rounded down"),
    # ---- 00: SAXPY, four elements per thread
    M("saxpy x4", "cell-17", "if i + 3 * s < n:", "if i + 3 * s <= n:", "fast-path bound <="),
    M("saxpy x4", "cell-17", "if i + 3 * s < n:", "if i + 2 * s < n:", "fast-path bound one element short"),
    M("saxpy x4", "cell-17", "s = cuda.gridsize(1)", "s = cuda.blockDim.x", "stride of a block"),
    M("saxpy x4", "cell-17", "out[i + s] = a * x1 + y1", "out[i + s] = a * x1 + y0", "wrong register"),
    M("saxpy x4", "cell-17", "out[i + 3 * s] = a * x3 + y3", "out[i + 3 * s + 1] = a * x3 + y3", "store at +1"),
    M("saxpy x4", "cell-17", "out[i + 2 * s] = a * x2 + y2", "out[i + 2 * s] = np.float16(a * x2 + y2)",
      "float16 store"),
    M("saxpy x4", "cell-17", "if k < n:", "if k < n - 1:", "tail bound n - 1"),
    M("saxpy x4", "cell-17", "kl.blocks_for(out.size, 4 * THREADS)", "out.size // (4 * THREADS)", "grid rounded down"),
    M("saxpy x4", "cell-17", "kl.blocks_for(out.size, 4 * THREADS)", "kl.blocks_for(out.size, 8 * THREADS)",
      "grid for 8 per thread"),
    # ---- 01.1: matrix add with a 2D grid
    M("matrix add", "matrix-add", "col, row = cuda.grid(2)", "row, col = cuda.grid(2)", "x taken as the row"),
    M("matrix add", "matrix-add", "if row < out.shape[0] and col < out.shape[1]:",
      "if row <= out.shape[0] and col < out.shape[1]:", "row bound <="),
    M("matrix add", "matrix-add", "if row < out.shape[0] and col < out.shape[1]:",
      "if row < out.shape[0] and col <= out.shape[1]:", "column bound <="),
    M("matrix add", "matrix-add", "if row < out.shape[0] and col < out.shape[1]:", "if col < out.shape[1]:",
      "no row bound"),
    M("matrix add", "matrix-add", "if row < out.shape[0] and col < out.shape[1]:", "if row < out.shape[0]:",
      "no column bound"),
    M("matrix add", "matrix-add", "= a[row, col] + b[row, col]\n", "= a[row, col] + a[row, col]\n", "wrong operand"),
    M("matrix add", "matrix-add", "grid = (kl.blocks_for(cols, BLOCK[0]), kl.blocks_for(rows, BLOCK[1]))",
      "grid = (kl.blocks_for(rows, BLOCK[0]), kl.blocks_for(cols, BLOCK[1]))", "grid in (rows, cols) order"),
    M("matrix add", "matrix-add", "grid = (kl.blocks_for(cols, BLOCK[0]), kl.blocks_for(rows, BLOCK[1]))",
      "grid = (kl.blocks_for(cols, BLOCK[1]), kl.blocks_for(rows, BLOCK[0]))", "grid with the other block side"),
    M("matrix add", "matrix-add", "matrix_add[grid, BLOCK](a, b, out)",
      "matrix_add[grid, (BLOCK[1], BLOCK[0])](a, b, out)", "block sides swapped"),
    # ---- 01.1: grid-stride SAXPY
    M("grid-stride saxpy", "grid-stride", "step = cuda.gridsize(1)", "step = 2 * cuda.gridsize(1)", "step doubled"),
    M("grid-stride saxpy", "grid-stride", "start = cuda.grid(1)", "start = cuda.threadIdx.x", "start without offset"),
    M("grid-stride saxpy", "grid-stride", "range(start, out.size, step)", "range(start, out.size - 1, step)",
      "stops one short"),
    M("grid-stride saxpy", "grid-stride", "range(start, out.size, step)", "range(start + step, out.size, step)",
      "skips the first step"),
    M("grid-stride saxpy", "grid-stride", "out[i] = a * x[i] + y[i]", "out[i] = a * x[i] + y[start]",
      "wrong index"),
    # ---- 01.1: column sums, a thread walking down each column
    M("column sums", "column-sums", "col = cuda.grid(1)  # consecutive", "col = cuda.threadIdx.x  # consecutive",
      "column without the block offset"),
    M("column sums", "column-sums", "if col < a.shape[1]:", "if col < a.shape[1] - 1:", "bound n - 1"),
    M("column sums", "column-sums", "if col < a.shape[1]:", "if col <= a.shape[1]:", "bound <="),
    M("column sums", "column-sums", "for row in range(a.shape[0]):", "for row in range(a.shape[0] - 1):",
      "last row left out"),
    M("column sums", "column-sums", "for row in range(a.shape[0]):", "for row in range(1, a.shape[0]):",
      "first row left out"),
    M("column sums", "column-sums", "acc += a[row, col]", "acc = a[row, col]", "= for +="),
    M("column sums", "column-sums", "out[col] = acc", "out[col] = np.float16(acc)", "float16 store"),
    M("column sums", "column-sums", "kl.blocks_for(a.shape[1], COLUMN_THREADS)", "a.shape[1] // COLUMN_THREADS",
      "grid rounded down"),
    M("column sums", "column-sums", "kl.blocks_for(a.shape[1], COLUMN_THREADS)",
      "kl.blocks_for(a.shape[0], COLUMN_THREADS)",
      "grid over the rows"),
    # ---- 01.2: strided copy
    M("strided copy", "strided-copy", "if i < out.size:", "if i <= out.size:", "bound <="),
    M("strided copy", "strided-copy", "if i < out.size:", "if i < out.size - 1:", "bound n - 1"),
    M("strided copy", "strided-copy", "= x[offset + i * stride]\n", "= x[i * stride]\n", "offset ignored"),
    M("strided copy", "strided-copy", "= x[offset + i * stride]\n", "= x[offset + i]\n", "stride ignored"),
    M("strided copy", "strided-copy", "i = cuda.grid(1)", "i = cuda.threadIdx.x", "index without block offset"),
    # ---- 01.2: column scaling, coalesced
    M("scale columns", "scale-columns", "row = i // out.shape[1]", "row = i // out.shape[0]", "row from shape[0]"),
    M("scale columns", "scale-columns", "col = i % out.shape[1]", "col = i % out.shape[0]", "col from shape[0]"),
    M("scale columns", "scale-columns", "if i < out.size:", "if i < out.size - 1:", "bound n - 1"),
    M("scale columns", "scale-columns", "if i < out.size:", "if i <= out.size:", "bound <="),
    M("scale columns", "scale-columns", "= x[row, col] * w[col]\n", "= x[row, col] * w[col - 1]\n",
      "neighbour's weight"),
    # ---- 01.2: copies, 4 and 16 bytes per load
    M("copy", "l2-sweep", "    if i < src.size:\n        dst[i] = src[i]",
      "    if i <= src.size:\n        dst[i] = src[i]",
      "bound <="),
    M("copy", "l2-sweep", "    if i < src.size:\n        dst[i] = src[i]", "    if True:\n        dst[i] = src[i]",
      "no bounds check"),
    M("copy", "l2-sweep", "    if i < src.size:\n        dst[i] = src[i]",
      "    if i < src.size - 1:\n        dst[i] = src[i]", "bound n - 1"),
    M("copy", "vector-copy", "copy[kl.blocks_for(s.size, THREADS), THREADS](s, d)",
      "copy[s.size // THREADS, THREADS](s, d)", "grid rounded down"),
    M("copy_vec4", "vector-copy", "i = 4 * cuda.grid(1)", "i = 4 * cuda.threadIdx.x",
      "vec4: index without block offset"),
    M("copy_vec4", "vector-copy", "copy_vec4[kl.blocks_for(src.size, 4 * THREADS), THREADS]",
      "copy_vec4[src.size // (4 * THREADS), THREADS]", "vec4: grid rounded down"),
    M("copy_vec4", "vector-copy", "copy_vec4[kl.blocks_for(src.size, 4 * THREADS), THREADS]",
      "copy_vec4[kl.blocks_for(src.size // 4, THREADS), THREADS]", "vec4: grid without the partial group"),
    M("copy_vec4", "vector-copy", "store4(dst, i, v0, v1, v2, v3)", "store4(dst, i, v0, v1, v3, v2)",
      "vec4: two values swapped"),
    M("copy_vec4", "vector-copy", "if i + 3 < src.size:", "if i + 3 <= src.size:", "vec4: whole-group bound <="),
    M("copy_vec4", "vector-copy", "if i + 3 < src.size:", "if i < src.size:", "vec4: partial group loaded whole"),
    M("copy_vec4", "vector-copy", "for k in range(i, src.size):", "for k in range(i, src.size - 1):",
      "vec4: partial group one short"),
    M("copy_vec4", "vector-copy", "for k in range(i, src.size):", "for k in range(i + 1, src.size):",
      "vec4: partial group skips its first"),
    # ---- 01.3: the copy through the transpose's threads
    M("copy_tiled", "design-code", "if row + j < a.shape[0] and col < a.shape[1]:\n            out[row + j, col]",
      "if True:\n            out[row + j, col]", "no bounds check"),
    M("copy_tiled", "design-code", "if row + j < a.shape[0] and col < a.shape[1]:\n            out[row + j, col]",
      "if row + j <= a.shape[0] and col < a.shape[1]:\n            out[row + j, col]", "row bound <="),
    M("copy_tiled", "design-code", "if row + j < a.shape[0] and col < a.shape[1]:\n            out[row + j, col]",
      "if row + j < a.shape[0] - 1 and col < a.shape[1]:\n            out[row + j, col]", "row bound n - 1"),
    M("copy_tiled", "design-code", "grid = (kl.blocks_for(a.shape[1], TILE), kl.blocks_for(a.shape[0], TILE))",
      "grid = (a.shape[1] // TILE, a.shape[0] // TILE)", "grid rounded down"),
    M("copy_tiled", "design-code",
      "    for j in range(0, TILE, ROWS):\n        if row + j < a.shape[0] and col < a.shape[1]:\n"
      "            out[row + j,",
      "    for j in range(0, TILE - ROWS, ROWS):\n        if row + j < a.shape[0] and col < a.shape[1]:\n"
      "            out[row + j,", "one pass of rows short"),
    # ---- 01.3: the tiled transpose
    M("tiled transpose", "tiled", "    cuda.syncthreads()  # 2.", "    pass  # 2.", "no barrier"),
    M("tiled transpose", "tiled", "out[row + j, col] = tile[tx, ty + j]", "out[row + j, col] = tile[ty + j, tx]",
      "tile not transposed"),
    M("tiled transpose", "tiled", "col, row = by * TILE + tx, bx * TILE + ty",
      "col, row = bx * TILE + tx, by * TILE + ty",
      "block indices not swapped"),
    M("tiled transpose", "tiled", "if row + j < out.shape[0] and col < out.shape[1]:",
      "if row + j <= out.shape[0] and col < out.shape[1]:", "write bound <="),
    M("tiled transpose", "tiled", "if row + j < a.shape[0] and col < a.shape[1]:", "if row + j < a.shape[0]:",
      "no column bound on the read"),
    M("tiled transpose", "tiled", "for j in range(0, TILE, ROWS):  # 1.", "for j in range(0, TILE - ROWS, ROWS):  # 1.",
      "a quarter of the tile not loaded"),
    M("tiled transpose", "tiled", "col, row = by * TILE + tx, bx * TILE + ty",
      "col, row = by * TILE + ty, bx * TILE + tx",
      "thread indices swapped"),
    # ---- 01.3: the swizzled transpose (the same map on the write and on the read)
    M("swizzled transpose", "swizzled", "out[row + j, col] = tile[tx, (ty + j) ^ tx]",
      "out[row + j, col] = tile[tx, ty + j]", "read back without the swizzle"),
    M("swizzled transpose", "swizzled", "tile[ty + j, tx ^ (ty + j)] = a[row + j, col]",
      "tile[ty + j, tx ^ ty] = a[row + j, col]", "swizzled by ty, not by the tile's row"),
    M("swizzled transpose", "swizzled", "out[row + j, col] = tile[tx, (ty + j) ^ tx]",
      "out[row + j, col] = tile[tx ^ (ty + j), ty + j]", "row swizzled on the read"),
    # ---- 01.3: the flat transpose (flat views, int32 indices; the int32 casts change no result at
    # these sizes, so leaving them out is not a mutant of the check)
    M("flat transpose", "flat", "out_flat[(row + j) * n_rows + col]", "out_flat[(row + j) * n_cols + col]",
      "write with the input's row stride"),
    M("flat transpose", "flat", "a_flat[(row + j) * n_cols + col]", "a_flat[(row + j) * n_rows + col]",
      "read with the output's row stride"),
    M("flat transpose", "flat", "if row + j < n_cols and col < n_rows:", "if row + j < n_rows and col < n_cols:",
      "output bounds of the input"),
    M("flat transpose", "flat", "a_flat[(row + j) * n_cols + col]", "a_flat[row * n_cols + col + j]",
      "j added to the column, not the row"),
    M("flat transpose", "flat", "col, row = by * TILE_32 + tx, bx * TILE_32 + ty",
      "col, row = bx * TILE_32 + tx, by * TILE_32 + ty", "block indices not swapped"),
    # ---- 01.3: interior tiles without bounds tests
    M("interior transpose", "interior", "interior = (bx + 1) * TILE_32 <= n_cols", "interior = bx * TILE_32 <= n_cols",
      "interior test one tile off"),
    M("interior transpose", "interior", "interior = (bx + 1) * TILE_32 <= n_cols and (by + 1) * TILE_32 <= n_rows",
      "interior = (bx + 1) * TILE_32 <= n_cols", "interior test without the rows"),
    M("interior transpose", "interior", "interior = (bx + 1) * TILE_32 <= n_cols and (by + 1) * TILE_32 <= n_rows",
      "interior = (bx + 1) * TILE_32 <= n_rows and (by + 1) * TILE_32 <= n_cols", "interior test with the sides swapped"),
    M("interior transpose", "interior", "out_flat[first + j * n_rows] = tile[tx, ty + j]",
      "out_flat[first + j * n_cols] = tile[tx, ty + j]", "interior write with the input's row stride"),
    M("interior transpose", "interior", "first = row * n_rows + col", "first = row * n_cols + col",
      "interior write's first index with the input's row length"),
    M("interior transpose", "interior", "tile[ty + j, tx] = a_flat[first + j * n_cols]",
      "tile[ty + j, tx] = a_flat[first + j]", "interior read steps by an element, not a row"),
    # ---- 01.3: the fast transpose, 32 x 4 threads per tile (loops that step by the 8 rows of before)
    M("fast transpose", "fast-code", "for j in range(0, TILE, ROWS_FAST):\n            out_flat[first",
      "for j in range(0, TILE, ROWS):\n            out_flat[first", "interior write loop steps by ROWS"),
    M("fast transpose", "fast-code", "for j in range(0, TILE, ROWS_FAST):\n            tile[ty + j, tx] = a_flat[first",
      "for j in range(0, TILE, ROWS):\n            tile[ty + j, tx] = a_flat[first", "interior read loop steps by ROWS"),
    M("fast transpose", "fast-code", "for j in range(0, TILE, ROWS_FAST):\n            if row + j < n_cols",
      "for j in range(0, TILE, ROWS):\n            if row + j < n_cols", "edge write loop steps by ROWS"),
    M("fast transpose", "fast-code", "    cuda.syncthreads()\n", "\n", "no barrier"),
    # ---- 01.4: warp sum
    M("warp sum", "warp-11", "offset = WARP // 2\n    while offset > 0:  # offsets 16",
      "offset = WARP // 4\n    while offset > 0:  # offsets 16", "starts at offset 8"),
    M("warp sum", "warp-11", "while offset > 0:  # offsets 16, 8, 4, 2, 1\n        v +=",
      "while offset > 1:  # offsets 16, 8, 4, 2, 1\n        v +=", "stops before offset 1"),
    M("warp sum", "warp-11", "v += cuda.shfl_down_sync(FULL_MASK, v, offset)",
      "v += cuda.shfl_up_sync(FULL_MASK, v, offset)", "shfl_up for shfl_down"),
    M("warp sum", "warp-11", "v += cuda.shfl_down_sync(FULL_MASK, v, offset)",
      "v = cuda.shfl_down_sync(FULL_MASK, v, offset)", "= for +="),
    M("warp sum", "warp-11", "offset //= 2\n    return v\n    ### END", "offset //= 4\n    return v\n    ### END",
      "offsets 16, 4, 1"),
    M("warp sum", "warp-11", "if lane == 0:\n        totals[warp] = v", "if lane == 1:\n        totals[warp] = v",
      "lane 1 stores the warp's total"),
    M("warp sum", "warp-11", "cuda.syncthreads()  # the only barrier", "pass  # the only barrier", "no barrier"),
    M("warp sum", "warp-11", "totals[lane] if lane < WARPS_PER_BLOCK", "totals[lane] if lane <= WARPS_PER_BLOCK",
      "reads one total too many"),
    # ---- 01.4: row sums, one warp per row
    M("row sums", "warp-20", "row = cuda.grid(1) // WARP", "row = cuda.threadIdx.x // WARP",
      "row without the block offset"),
    M("row sums", "warp-20", "j += WARP\n        acc = warp_sum(acc)", "j += 2 * WARP\n        acc = warp_sum(acc)",
      "every other element"),
    M("row sums", "warp-20", "if lane == 0:\n            out[row] = acc", "if lane == 1:\n            out[row] = acc",
      "lane 1 stores"),
    M("row sums", "warp-20", "if row < x.shape[0]:  # the same", "if row <= x.shape[0]:  # the same", "bound <="),
    # ---- 01.4: compaction with a ballot
    M("compaction", "warp-29", "out[base + rank] = x[i]", "out[base + rank] = np.float16(x[i])", "float16 store"),
    M("compaction", "warp-29", "keep = i < x.size and x[i] > 0  # every", "keep = i < x.size and x[i] >= 0  # every",
      ">= 0 keeps zeros"),
    M("compaction", "warp-29", "cuda.popc(kept & cuda.lanemask_lt())", "cuda.popc(kept & ~cuda.lanemask_lt())",
      "rank counts the lanes above"),
    M("compaction", "warp-29", "base = cuda.atomic.add(count, 0, n_kept)", "base = cuda.atomic.add(count, 0, 1)",
      "counter + 1 per warp"),
    M("compaction", "warp-29", "base = cuda.shfl_sync(FULL_MASK, base, 0)", "base = cuda.shfl_sync(FULL_MASK, base, 1)",
      "broadcast from lane 1"),
    M("compaction", "warp-29", "out[base + rank] = x[i]", "out[base + rank + 1] = x[i]", "slot + 1"),
    M("compaction, given", "warp-27", "if i < x.size and x[i] > 0:", "if i < x.size and x[i] >= 0:",
      "atomic per element: >= 0"),
    M("compaction, given", "warp-27", "keep = i < x.size and x[i] > 0\n", "keep = i < x.size and x[i] >= 0\n",
      "shared counter: >= 0"),
    M("compaction, given", "warp-27", "out[cuda.atomic.add(count, 0, 1)] = x[i]",
      "out[cuda.atomic.add(count, 0, 1)] = np.float16(x[i])", "atomic per element: float16 store"),
    # ---- 01.4: warp and block scans
    M("warp scan", "warp-34", "if lane >= offset:", "if lane > offset:", "guard > for >="),
    M("warp scan", "warp-34", "while offset < WARP:\n        up", "while offset < WARP // 2:\n        up",
      "last step missing"),
    M("warp scan", "warp-34", "up = cuda.shfl_up_sync(FULL_MASK, v, offset)",
      "up = cuda.shfl_down_sync(FULL_MASK, v, offset)",
      "shfl_down for shfl_up"),
    M("warp scan", "warp-34", "offset *= 2\n    return v", "offset *= 4\n    return v", "offsets 1, 4, 16"),
    M("warp scan", "warp-34", "if lane >= offset:  # lanes below offset got their own value back\n            v += up",
      "v += up", "no lane guard"),
    M("warp scan", "warp-34", "v = x[i] if i < x.size else", "v = x[i] if i < x.size - 1 else", "last element dropped"),
    M("block scan", "warp-37", "if lane == WARP - 1:\n        warp_totals[warp] = v",
      "if lane == 0:\n        warp_totals[warp] = v", "lane 0 stores the warp's total"),
    M("block scan", "warp-37", "v += warp_totals[warp - 1]", "v += warp_totals[warp]", "adds its own warp's total"),
    M("block scan, shared memory", "warp-37", "cuda.syncthreads()  # every read of this round before any write",
      "pass  # every read of this round before any write", "no barrier between read and write"),
    M("block scan, shared memory", "warp-37", "add = buf[t - offset] if t >= offset else",
      "add = buf[t - offset] if t > offset else", "guard > for >="),
    M("block scan", "warp-37", "    cuda.syncthreads()\n    if warp > 0:", "    if warp > 0:", "no second barrier"),
    # ---- 01.5: occupancy calculator and the SAXPY variants
    M("occupancy calculator", "occupancy-07", "warps_per_block = -(-threads_per_block // limits.warp_size)",
      "warps_per_block = threads_per_block // limits.warp_size", "warps rounded down"),
    M("occupancy calculator", "occupancy-07",
      "regs_per_warp = round_up(regs_per_thread * limits.warp_size, limits.reg_alloc_unit)",
      "regs_per_warp = regs_per_thread * limits.warp_size", "registers not rounded"),
    M("occupancy calculator", "occupancy-07", "round_up(smem_per_block + limits.smem_reserved_per_block,",
      "round_up(smem_per_block,", "no reserved shared memory"),
    M("occupancy calculator", "occupancy-07", "warps_per_quarter * limits.sub_partitions // warps_per_block",
      "warps_per_quarter // warps_per_block", "one quarter of the register file"),
    M("saxpy_1, saxpy_4", "occupancy-14", "out[i + stride] = a * x1 + y1", "out[i + 1] = a * x1 + y1",
      "store at i + 1"),
    M("saxpy_1, saxpy_4", "occupancy-14", "out[i + 2 * stride] = a * x2 + y2",
      "out[i + 2 * stride] = np.float16(a * x2 + y2)", "float16 store"),
    M("saxpy_1, saxpy_4", "occupancy-14", "i += 4 * stride", "i += 5 * stride", "wrong stride"),
    M("saxpy_1, saxpy_4", "occupancy-14", "while i + 3 * stride < n:", "while i + 3 * stride <= n:", "bound <="),
    M("saxpy_1, saxpy_4", "occupancy-14", "        out[i] = a * x[i] + y[i]\n        i += stride",
      "        out[i] = a * x[i] + y[i]\n        i += 2 * stride", "tail stride doubled"),
    M("saxpy_1, saxpy_4", "occupancy-14", "while i < x.size:  # one element", "while i < x.size - 1:  # one element",
      "saxpy_1: bound n - 1"),
    # ---- 02.1: device-wide absmax, argmax and a compensated sum
    M("absmax, one pass", "9c38aa4b", "if i < bits.size:", "if i <= bits.size:", "bound <="),
    M("absmax, one pass", "9c38aa4b", "v = bits[i] & uint32(ABS_MASK)", "v = bits[i]", "sign bit kept"),
    M("absmax, one pass", "9c38aa4b", "m = block_max_u32(v)", "m = v", "no block reduction"),
        M("absmax, grid-stride", "f46f35b0", "while i + 3 * stride < n:", "while i + 3 * stride <= n:",
      "fast-path bound <="),
    M("absmax, grid-stride", "f46f35b0", "block_max_u32(max(max(m0, m1), max(m2, m3)))", "block_max_u32(max(m0, m1))",
      "two of the four maxima dropped"),
    M("absmax, grid-stride", "f46f35b0", "        m0 = max(m0, bits[i] & uint32(ABS_MASK))\n        i += stride",
      "        m0 = max(m0, bits[i] & uint32(ABS_MASK))\n        i += 2 * stride", "tail stride doubled"),
    M("argmax key", "a1685920", "ordered = ~b", "ordered = b", "negative values not flipped"),
    M("argmax key", "a1685920", "ordered = b | uint32(0x80000000)", "ordered = b", "positives not above negatives"),
    M("argmax key", "a1685920", "uint32(0xFFFFFFFF) - uint32(i)", "uint32(i)", "ties to the highest index"),
    M("Kahan sum", "2e0c1a72", "c = (t - s) - y", "c = y - (t - s)", "compensation with the wrong sign"),
    M("Kahan sum", "2e0c1a72", "y = x[i] - c", "y = x[i]", "compensation never applied"),
    # ---- 02.2: device-wide scans
    M("scan of the tile sums", "44e3c9b4", "tile_offsets[i] = carry + before", "tile_offsets[i] = before",
      "running total not added"),
    M("scan of the tile sums", "44e3c9b4", "carry += total", "carry = total", "running total replaced"),
    M("scan of the tile sums", "44e3c9b4", "scan_add_offsets[tiles, THREADS](x, out, offsets)",
      "scan_add_offsets[tiles, THREADS](x, out, sums)", "tile sums added instead of their scan"),
    M("look-back, one thread", "f458467b", "return exclusive + prefixes[j]", "return prefixes[j]",
      "prefix without the aggregates walked"),
    M("look-back, one thread", "f458467b", "exclusive += aggregates[j]", "exclusive += prefixes[j]",
      "prefix read where only the aggregate is published"),
    M("look-back, one thread", "f458467b", "        j -= 1\n    return exclusive", "        j -= 2\n    return exclusive",
      "every other predecessor skipped"),
    M("look-back, one thread", "f458467b", "while f == FLAG_NONE:  # tile j has published nothing yet",
      "if f == FLAG_NONE:  # tile j has published nothing yet", "flag polled once, not waited for"),
    M("look-back, one thread", "f458467b", "while f == FLAG_NONE:  # tile j has published nothing yet",
      "while f != FLAG_NONE:  # tile j has published nothing yet", "waits on the wrong condition"),
    M("status word", "c4733ad7", "| uint64(kl.float_bits(value))", "| uint64(value)", "value converted, not reinterpreted"),
    M("status word", "c4733ad7", "| uint64(kl.float_bits(value))", "| uint64(int32(kl.float_bits(value)))",
      "sign bit spills into the flag"),
    M("status word", "c4733ad7", "return (uint64(flag) << uint64(32)) | uint64(kl.float_bits(value))",
      "return (uint64(kl.float_bits(value)) << uint64(32)) | uint64(flag)", "halves swapped"),
    M("status word", "c4733ad7", "kl.bits_float(uint32(word & uint64(0xFFFFFFFF)))",
      "float32(word & uint64(0xFFFFFFFF))", "value converted back, not reinterpreted"),
    # ---- 02.3 and 02.3b: SGEMM
    M("SGEMM, shared-memory tiles", "96a129fb",
      "        cuda.syncthreads()  # the tiles are complete before anyone uses them\n", "",
      "tiles used before the barrier"),
    M("SGEMM, shared-memory tiles", "96a129fb",
      "        cuda.syncthreads()  # everyone is done with the tiles before the next load overwrites them\n", "",
      "no barrier before the next load"),
    M("SGEMM, shared-memory tiles", "96a129fb", "if row < m and k0 + tx < kk", "if row < m and k0 + tx <= kk",
      "tile edge off by one"),
    M("SGEMM, 2D register blocking", "831d1027", "a_reg[i] = a_tile[ty * TM + i, k]",
      "a_reg[i] = a_tile[tx * TM + i, k]", "register block of the wrong thread"),
    M("SGEMM, 2D register blocking", "831d1027", "q = col0 + tx * TN + j", "q = col0 + ty * TN + j",
      "results stored at the wrong columns"),
    M("SGEMM, two tiles per trip", "75d81445", "            if k0 + BKX < kk:  # an odd number of tiles: the last trip has one\n"
      "                one_tile(", "            if True:\n                one_tile(", "second half of the last trip unguarded"),
    M("SGEMM, two tiles per trip", "75d81445", "fast,\n                         k0 + BKX, 1)",
      "fast,\n                         k0 + BKX, 0)", "both halves read stage 0"),
    M("SGEMM, two tiles per trip", "75d81445", "stash(a_t, b_t, 1 - s, ra, rb, t)", "stash(a_t, b_t, s, ra, rb, t)",
      "next tile stashed into the stage being read"),
    # ---- 02.4: the FMA-rate kernel
    M("FMA chains", "e66ad60c", "            a7 = a7 * m + c\n", "", "one chain never updated"),
    M("FMA chains", "e66ad60c", "for _ in range(iterations):", "for _ in range(iterations - 1):", "loop one trip short"),
    M("FMA chains", "e66ad60c", "out[cuda.grid(1)] = a0 + a1", "out[cuda.threadIdx.x] = a0 + a1",
      "result stored at the thread's index in its block"),
    M("FMA chains", "e66ad60c", "a4, a5, a6, a7 = x + T(4), x + T(5), x + T(6), x + T(7)",
      "a4, a5, a6, a7 = x + T(4), x + T(5), x + T(6), x + T(6)", "two chains start alike"),
    # ---- 03.1: bias and ReLU, separate and as the GEMM's epilogue
    M("bias, then ReLU", "c03", "c[i] += bias[i % n]", "c[i] += bias[i // n]", "bias indexed by the row"),
    M("bias, then ReLU", "c03", "    if i < c.size:\n        c[i] += bias[i % n]", "    if i <= c.size:\n        c[i] += bias[i % n]",
      "bias bound <="),
    M("bias, then ReLU", "c03", "c[i] = max(c[i], float32(0))", "c[i] = min(c[i], float32(0))", "min instead of max"),
    # ---- 02.4: the float64 step of k, and the tile budget
    M("DGEMM step", "ex2-code", "a_reg[wi * TM + i], a_reg[wi * TM + i + 1] = load2",
      "a_reg[wi * TM + i + 1], a_reg[wi * TM + i] = load2", "the two doubles of A's 16-byte load swapped"),
    M("DGEMM step", "ex2-code", "tr * TM + i", "tr * 2 + i", "lane offset in 16-byte pairs, not doubles"),
    M("DGEMM step", "ex2-code", "wj * 4 * TN", "wj * TN", "warp step of B without its 4 lanes (GPU tiles only)"),
    M("DGEMM step", "ex2-code", "acc[i, j] += a_reg[i] * b_reg[j]", "acc[i, j] += float32(a_reg[i] * b_reg[j])",
      "products rounded to float32"),
    M("DGEMM tile budget", "ex3-code", "registers = words * (rm * rn + rm + rn)", "registers = rm * rn + rm + rn",
      "a double counted as one register"),
    M("DGEMM tile budget", "ex3-code", "stages = 2 if cfg.double_buffer else 1", "stages = 1",
      "one stage where there are two"),
    M("DGEMM tile budget", "ex3-code", "registers = words * (rm * rn + rm + rn)", "registers = words * rm * rn",
      "operands not counted"),
    M("fused bias + ReLU", "c05", "return max(v + bias[col], float32(0))", "return max(v, float32(0)) + bias[col]",
      "ReLU before the bias"),
    M("fused bias + ReLU", "c05", "return max(v + bias[col], float32(0))", "return max(v + bias[row], float32(0))",
      "bias indexed by the row"),
    # ---- 03.2: direct 3x3 convolution
    M("implicit GEMM gather", "c16", "hh, ww = ph[u] + di, pw[u] + dj", "hh, ww = ph[u] + di, pw[u] - dj",
      "window's column offset with the wrong sign"),
    M("implicit GEMM gather", "c16", "hh, ww = ph[u] + di, pw[u] + dj", "hh, ww = ph[u] + dj, pw[u] + di",
      "window offsets swapped (transposed window)"),
    M("implicit GEMM gather", "c16", "inside = 0 <= hh < h and 0 <= ww < wd", "inside = 0 <= hh < h",
      "padding test without its column half"),
    M("implicit GEMM gather", "c16", "if inside and c < cin else", "if inside else", "padded channels c >= C_in loaded"),
    M("implicit GEMM gather", "c16", "x[xb + c * hw + hh * wd + ww]", "x[xb + c * wd + hh * wd + ww]",
      "channel stride W instead of H * W"),
    M("implicit GEMM gather", "c16", "c = c0 + r0 + v * RP", "c = c0 + r0 + v", "rows of a thread taken consecutive, not RP apart"),
    M("direct conv", "c03", "iy = oy + i - 1", "iy = oy + i", "window not centred"),
    M("direct conv", "c03", "if 0 <= iy < h and 0 <= ix < wd:", "if 0 <= iy < h and 0 <= ix <= wd:", "right edge bound <="),
    M("direct conv", "c03", "acc += x[b, c, iy, ix] * w[o, c, i, j]", "acc += x[b, c, iy, ix] * w[o, c, j, i]",
      "window transposed"),
    M("direct conv", "c03", "b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]",
      "o, b = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]", "batch and channel swapped"),
    # ---- 03.2: constant-memory bias, shared-memory weights, the halo tile, register blocking, the fast gather
    M("const bias", "ex3-code", "max(acc + cbias[o], float32(0))", "max(acc + cbias[b], float32(0))",
      "bias of the batch, not the channel"),
    M("const bias", "ex3-code", "max(acc + cbias[o], float32(0))", "acc + cbias[o]", "ReLU left out"),
    M("smem weights", "ex4-code", "w_s[e] = w[o, e // 9, (e % 9) // 3, e % 3]",
      "w_s[e] = w[o, e // 9, e % 3, (e % 9) // 3]", "weights staged with the window transposed"),
    M("smem weights", "ex4-code", "acc += x[b, c, iy, ix] * w_s[c * 9 + i * 3 + j]",
      "acc += x[b, c, iy, ix] * w_s[c * 3 + i * 3 + j]", "channel stride 3 instead of 9"),
    M("smem weights", "ex4-code",
      "    cuda.syncthreads()  # every thread, inside the image or not, stages its share and reaches the barrier\n",
      "", "no barrier after the staging"),
    M("halo tile", "c08", "iy, ix = oy0 + r - 1, ox0 + q - 1", "iy, ix = oy0 + r, ox0 + q", "tile without its halo offset"),
    M("halo tile", "c08", "r, q = e // (TILE + 2), e % (TILE + 2)", "r, q = e // TILE, e % TILE",
      "tile rows TILE long instead of TILE + 2"),
    M("halo tile", "c08", "tile[r, q] = x[b, c, iy, ix] if 0 <= iy < h and 0 <= ix < wd else float32(0)",
      "tile[r, q] = x[b, c, min(max(iy, 0), h - 1), min(max(ix, 0), wd - 1)]", "edge pixels repeated, not zeros"),
    M("register blocking", "ex6-code", "wv = w_s[(oc * cin + c) * 9 + i * 3 + j]",
      "wv = w_s[(c * COB + oc) * 9 + i * 3 + j]", "group's weights read with channels swapped"),
    M("register blocking", "ex6-code", "wv = w_s[(oc * cin + c) * 9 + i * 3 + j]",
      "wv = w_s[(oc * COB + c) * 9 + i * 3 + j]", "output channels COB apart in w_s, not C_in"),
    M("register blocking", "ex6-code", "max(acc[oc, p] + bias[o], float32(0))",
      "max(acc[oc, p] + bias[g * COB], float32(0))", "one bias for the whole group"),
    M("register blocking", "ex6-code", "                        if ox0 + p < wd:\n",
      "                        if True:\n", "edge pixels of a group stored past the right edge"),
    M("register blocking", "ex6-code", "for p in range(PX):\n                        if ox0 + p < wd:",
      "for p in range(PX):\n                        if ox0 + PX <= wd:", "partial group at the right edge skipped"),
    M("register blocking", "ex6-code", "                if o < cout:\n", "                if True:\n",
      "last group's channels past C_out stored"),
    M("register blocking", "ex6-code",
      "xin[i, q] = x[b, c, iy, ix] if 0 <= iy < h and 0 <= ix < wd else float32(0)",
      "xin[i, q] = x[b, c, min(max(iy, 0), h - 1), min(max(ix, 0), wd - 1)]", "inputs outside the image clamped"),
    M("register blocking", "ex6-code", "acc[oc, p] += xin[i, p + j] * wv", "acc[oc, p] += xin[i, p] * wv",
      "every window column reads the pixel's own column"),
    M("fast gather", "ex8-code", "if rows >= NR * RP:", "if rows >= NR:",
      "test-free branch when rows >= NR, not NR * RP"),
    M("fast gather", "ex8-code", "if rows >= NR * RP:", "if rows > 0:", "test-free branch for any real row"),
    M("fast gather", "ex8-code", "                rows = 0  # the padding", "                pass  # the padding",
      "padding pixels loaded"),
    M("fast gather", "ex8-code", "idx += np.uint64(RP * hw)  # the next row", "idx += np.uint64(hw)  # the next row",
      "rows of a thread one channel apart, not RP"),
    # ---- 03.3: LayerNorm + GELU, one warp per row
    M("Welford combine", "c03", "return n, mean_a + d * frac, m2_a + m2_b + d * d * n_a * frac",
      "return n, mean_a + d * frac, m2_a + m2_b", "no correction term"),
    M("Welford combine", "c03", "frac = n_b / n", "frac = n_a / n", "weights swapped"),
    M("Welford combine", "c03", "if n == 0:", "if False:", "no guard for two empty halves"),
    M("LayerNorm + GELU", "c05", "math.sqrt(m2 / float32(ncols) + eps)", "math.sqrt(m2 / float32(ncols - 1) + eps)",
      "sample variance (n - 1)"),
    M("LayerNorm + GELU", "c05", "math.sqrt(m2 / float32(ncols) + eps)", "math.sqrt(m2 / float32(ncols))",
      "eps left out"),
    M("LayerNorm + GELU", "c05", "ln.gelu((v[k] - mean) * rstd * g[k] + b[k])",
      "ln.gelu((v[k] - mean) * rstd) * g[k] + b[k]", "GELU before the scale and shift"),
    M("LayerNorm + GELU", "c05", "            if lane + 32 * k < ncols:\n                n += float32(1)",
      "            if True:\n                n += float32(1)", "the clamped copies past the row counted"),
    M("LayerNorm + GELU", "c05", "                d = v[k] - mean\n", "                d = v[k]\n",
      "M2 about zero, not about the lane's mean"),
    # ---- 03.3: four values per access (exercise 3), GELU by tanh.approx (4), a team's sum (5), the team (6)
    M("LayerNorm + GELU, x4", "ex3-code", "q = min(t + T * uint64(j), ng - ONE)", "q = t + T * uint64(j)",
      "loads not clamped: groups past the row's end"),
    M("LayerNorm + GELU, x4", "ex3-code", "x0, x1, x2, x3 = load4(x, (row, W * q))",
      "x0, x1, x2, x3 = load4(x, (row, q))", "the group's index taken as its column"),
    M("LayerNorm + GELU, x4", "ex3-code", "v[4 * j], v[4 * j + 1] = float32(x0), float32(x1)",
      "v[4 * j], v[4 * j + 1] = float32(x1), float32(x0)", "two values of a group swapped"),
    M("LayerNorm + GELU, x4", "ex3-code", "width = 4 if n % 4 == 0 else 1", "width = 4",
      "groups of four on rows not a multiple of 4"),
    M("LayerNorm + GELU, x4", "ex3-code", "shift = -mean * rstd", "shift = mean * rstd", "shift of the wrong sign"),
    M("LayerNorm + GELU, x4", "ex3-code", "            if q < ng and live:\n", "            if live:\n",
      "stores past the row's last group"),
    M("LayerNorm + GELU, x4", "ex3-code", "g0, g1, g2, g3 = load4(gamma, W * q)", "g0, g1, g2, g3 = load4(gamma, q)",
      "gamma read at the group's index"),
    M("gelu_fast", "ex4-code", "float32(GELU_C * 0.044715) * v * v", "float32(0.044715) * v * v",
      "cubic term outside sqrt(2/pi)"),
    M("gelu_fast", "ex4-code", "(float32(GELU_C) + float32(GELU_C * 0.044715) * v * v)", "float32(GELU_C)",
      "cubic term missing"),
    M("gelu_fast", "ex4-code", "h = float32(0.5) * v", "h = v", "the 1/2 left out"),
    M("gelu_fast", "ex4-code", "v * v)) + h", "v * v))", "the + h left out"),
    M("team_sum", "ex5-code", "            cuda.syncthreads()\n", "", "the warps' sums read before the barrier"),
    M("team_sum", "ex5-code", "part[k, t >> uint64(5)] = s", "part[0, t >> uint64(5)] = s", "both sums in one row of part"),
    M("team_sum", "ex5-code", "if TEAM > 32:  # the warps' sums meet in shared memory", "if False:",
      "the warps' sums never meet"),
    M("team_sum", "ex5-code", " if o < TEAM)", ")", "butterfly offsets past the team"),
    M("team_sum", "ex5-code", "            s = float32(0)\n            for w in range(WARPS):",
      "            for w in range(WARPS):", "the warps' sums added to the warp's own"),
    M("LayerNorm + GELU, team", "ex6-code", "max(8, 1 << (want - 1).bit_length())", "max(8, want)",
      "team not a power of two"),
    M("LayerNorm + GELU, team", "ex6-code", "max(8, 1 << (want - 1).bit_length())", "1 << (want - 1).bit_length()",
      "teams below 8 threads"),
    M("LayerNorm + GELU, team", "ex6-code", "want = max(1, -(-n // values))", "want = max(1, n // values)",
      "threads a row rounded down"),
    M("LayerNorm + GELU, team", "ex6-code", "min(row, nrows - uint64(1))", "row",
      "a team past the last row not clamped to it"),
    M("LayerNorm + GELU, team", "ex6-code", "+ (tid >> SHIFT)", "+ (tid >> uint64(5))",
      "a team's row taken as its warp's"),
    # ---- 03.3: long float16 rows, eight halves an access and 32 values a thread (exercise 7)
    M("LayerNorm + GELU, x8", "ex7-code", "if n % values or team % 32 or", "if team % 32 or",
      "a row that is not a multiple of the values a thread taken"),
    M("LayerNorm + GELU, x8", "ex7-code", "if n % values or team % 32 or", "if n % values or",
      "a team that is not whole warps taken"),
    M("LayerNorm + GELU, x8", "ex7-code", "team = n // values", "team = n // 8", "threads of eight values, not 32"),
    M("LayerNorm + GELU, x8", "ex7-code", "load8(x, (row, EIGHT * (t + T * uint64(j))))",
      "load8(x, (row, t + T * uint64(j)))", "the group's index taken as its column"),
    M("LayerNorm + GELU, x8", "ex7-code", "load8(x, (row, EIGHT * (t + T * uint64(j))))",
      "load8(x, (row, EIGHT * t + T * uint64(j)))", "a thread's groups TEAM columns apart, not 8 TEAM"),
    M("LayerNorm + GELU, x8", "ex7-code", "v[k], v[k + 1], v[k + 2], v[k + 3] = float32(h0), float32(h1)",
      "v[k], v[k + 1], v[k + 2], v[k + 3] = float32(h1), float32(h0)", "two halves of a group swapped"),
    M("LayerNorm + GELU, x8", "ex7-code", "g4, g5, g6, g7 = load4(gamma, col + FOUR)",
      "g4, g5, g6, g7 = load4(gamma, col)", "gamma's second four read at the first"),
    M("LayerNorm + GELU, x8", "ex7-code", "make_x8_kernel(team, values // 8, make_team_sum(team))",
      "make_x8_kernel(team, values // 8, make_team_sum(32))", "the sums over one warp, not the team"),
    # ---- 03.4: epilogues handed to the GEMM factory, and the row softmax after a GEMM
    M("epilogue factories", "c03", "math.exp(-(v + aux[0][col]))", "math.exp(-(v + aux[0][row]))",
      "sigmoid: bias indexed by the row"),
    M("epilogue factories", "c03", "return gelu(v + aux[0][col])", "return gelu(v) + aux[0][col]",
      "GELU before the bias"),
    M("epilogue factories", "c03", "return alpha * v + beta * c_in[row, col] + gamma * bias[col]",
      "return beta * v + alpha * c_in[row, col] + gamma * bias[col]", "alpha and beta swapped"),
    M("epilogue factories", "c03", "return alpha * v + beta * c_in[row, col] + gamma * bias[col]",
      "return alpha * v + beta * c_in[col, row] + gamma * bias[col]", "C read at (col, row)"),
    M("epilogue factories", "c03", "return alpha * v + beta * c_in[row, col] + gamma * bias[col]",
      "return alpha * v + beta * c_in[row, col] + bias[col]", "bias not scaled by gamma"),
    M("GEMM + row softmax", "c11", "v[j] = math.exp(v[j] - m)", "v[j] = math.exp(v[j])", "softmax without the row max"),
    M("GEMM + row softmax", "c11", "    m = ep.block_max_f32(m, scratch)\n", "",
      "each thread's own max, not the row's"),
    M("GEMM + row softmax", "c11", "    s = ep.block_sum_f32(s, scratch)\n", "",
      "each thread's own sum, not the row's"),
    # ---- 04.1 and 04.2: the softmax of attention, in two passes and online
    M("attention softmax", "ba0afa27", "valid = min(kv_lens[b], i + 1) if causal", "valid = min(kv_lens[b], i) if causal",
      "causal mask without the diagonal"),
    M("attention softmax", "ba0afa27", "valid = min(kv_lens[b], i + 1) if causal else kv_lens[b]", "valid = kv_lens[b]",
      "causal mask ignored"),
    M("attention softmax", "ba0afa27", "total += math.exp(s[z, i, j] - m)", "total += math.exp(s[z, i, j])",
      "sum without the max subtracted"),
    M("attention softmax", "ba0afa27", "lse[z, i] = m + math.log(total)", "lse[z, i] = math.log(total)",
      "log-sum-exp without the max"),
    M("online softmax", "630ae996", "ell = ell * math.exp(m - xj) + float32(1)", "ell = ell + float32(1)",
      "running sum not rescaled"),
    M("online softmax", "630ae996", "ell = ell * math.exp(m - m_new) + l2 * math.exp(m2 - m_new)", "ell = ell + l2",
      "lanes merged without rescaling"),
    M("online softmax", "630ae996", "off = 16", "off = 8", "merge misses half the warp"),
    M("online softmax", "630ae996", "elif xj > NEG_INF:", "else:", "masked elements counted"),
    # ---- 04.3: fused attention forward, the online softmax over key blocks
    M("fused attention", "c8a88f30", "ell *= alpha", "ell *= math.exp(m - block_max)",
      "normaliser rescaled with the block's max"),
    M("fused attention", "c8a88f30", "acc[c] *= alpha", "acc[c] *= float32(1)", "accumulator not rescaled"),
    M("fused attention", "c8a88f30",
      "                    s = float32(NEG_INF)\n"
      "                    if j < kv_len and (not causal or j <= i):  # the mask, before the max\n"
      "                        s = float32(0)\n"
      "                        for c in range(D):\n"
      "                            s += qr[c] * ks[jj, c]\n"
      "                    sc[jj] = s\n"
      "                    block_max = max(block_max, s)\n",
      "                    s = float32(0)\n"
      "                    for c in range(D):\n"
      "                        s += qr[c] * ks[jj, c]\n"
      "                    block_max = max(block_max, s)\n"
      "                    if not (j < kv_len and (not causal or j <= i)):\n"
      "                        s = float32(NEG_INF)\n"
      "                    sc[jj] = s\n",
      "mask applied after the max"),
    M("fused attention", "c8a88f30", "lse[b, h, i] = m + math.log(ell)", "lse[b, h, i] = math.log(ell)",
      "log-sum-exp without the max"),
    M("fused attention", "c8a88f30", "(not causal or j <= i)", "(not causal or j < i)",
      "causal mask without the diagonal"),
    # ---- 04.3: the core of the register-tiled forward (lanes of a row group share a row)
    M("tiled attention", "tiled-core", "                mx = max(mx, cuda.shfl_xor_sync(FULL, mx, 1 << bit))",
      "                mx = max(mx, mx)", "row max of each lane's own keys"),
    M("tiled attention", "tiled-core", "mx = max(mx, cuda.shfl_xor_sync(FULL, mx, 1 << bit))",
      "mx = max(mx, cuda.shfl_xor_sync(FULL, mx, CG << bit))", "row max over the lanes of other rows"),
    M("tiled attention", "tiled-core", "            ell += cuda.shfl_xor_sync(FULL, ell, 1 << bit)",
      "            ell += float32(0)", "partial normalisers not summed"),
    M("tiled attention", "tiled-core", "oacc[i, c] *= alpha", "oacc[i, c] *= float32(1)", "accumulator not rescaled"),
    M("tiled attention", "tiled-core", "            alpha = ex2(mrow[i] - m_use)  # the OLD max\n            mrow[i] = m_new\n",
      "            mrow[i] = m_new\n            alpha = ex2(mrow[i] - m_use)\n", "alpha from the new max"),
    M("tiled attention", "tiled-core", "        cuda.syncwarp(FULL)  # the other lanes of the row group read this lane's P\n",
      "", "P shared without syncwarp"),
    M("tiled attention", "tiled-core", "load4(sm, K_AT + (cg + CG * jj) * KP + c)",
      "load4(sm, K_AT + (cg + CG * jj) * D + c)", "K rows read without their padding"),
    M("tiled attention", "tiled-core", "sm[pw + i * PP + cg + CG * jj] = p", "sm[pw + i * PP + CG * cg + jj] = p",
      "P stored at the keys of another layout"),
    # ---- 04.5: the dQ kernel of the backward pass
    M("attention backward, dQ", "b08de7e2", "ds = p * (dp - di)", "ds = p * dp", "D term missing"),
    M("attention backward, dQ", "b08de7e2", "p = math.exp(s * scale - li)", "p = math.exp(s * scale)",
      "P recomputed without the saved lse"),
    M("attention backward, dQ", "b08de7e2", "(not causal or j <= i)", "(not causal or j < i)",
      "causal mask without the diagonal"),
    M("attention backward, dQ", "b08de7e2", "dqr[c] += ds * ks[jj, c]", "dqr[c] += ds * vs[jj, c]",
      "dS times V, not K"),
    # ---- 05.1: int8 absmax and affine uint8 quantization
    M("int8 quantize", "cell-5", "v = round(x[i] / s)", "v = int(x[i] / s)", "truncated instead of rounded"),
    M("int8 quantize", "cell-5", "s = a / float32(127.0) if a > float32(0.0) else float32(1.0)",
      "s = a / float32(127.0)", "an all-zero input divides by zero"),
    M("int8 quantize", "cell-5", "s = a / float32(127.0) if", "s = a / float32(128.0) if", "scale amax / 128"),
    M("int8 quantize", "cell-5", "q[i] = int8(min(max(v, -127), 127))", "q[i] = int8(v)", "no saturation"),
    M("int8 dequantize", "cell-9", "out[i] = float32(q[i]) * s\n", "out[i] = float32(q[i]) / s\n",
      "divided by the scale"),
    M("int8 dequantize", "cell-9", "while i < q.size:", "while i <= q.size:", "bound <="),
    M("affine rows", "cell-11", "z = min(max(round(-lo[r] / s), 0), 255)", "z = round(-lo[r] / s)",
      "zero point not clamped"),
    M("affine rows", "cell-11", "q[r, c] = uint8(min(max(round(x[r, c] / s) + z, 0), 255))",
      "q[r, c] = uint8(round(x[r, c] / s) + z)", "no saturation"),
    M("affine rows", "cell-11", "s = width / float32(255.0)", "s = width / float32(256.0)", "scale width / 256"),
    M("affine rows", "cell-11", "if c == 0:", "if c == 1:", "parameters stored by column 1"),
    # ---- 05.1 exercises 4 and 5: four codes per 32-bit word, a tile of four words per thread
    M("int8 quantize x4", "eb8f9fa2", "return min(max(round(v / s), -127), 127)",
      "return min(max(int(v / s), -127), 127)", "code truncated instead of rounded"),
    M("int8 quantize x4", "eb8f9fa2", "return min(max(round(v / s), -127), 127)",
      "return min(max(round(v / s), -128), 127)", "code clamped to -128"),
    M("int8 quantize x4", "eb8f9fa2",
      "return int32((c0 & 0xFF) | ((c1 & 0xFF) << 8) | ((c2 & 0xFF) << 16) | (c3 << 24))",
      "return int32((c3 & 0xFF) | ((c2 & 0xFF) << 8) | ((c1 & 0xFF) << 16) | (c0 << 24))", "pack4: byte order reversed"),
    M("int8 quantize x4", "eb8f9fa2", "((c1 & 0xFF) << 8)", "(c1 << 8)", "pack4: a code not masked to its byte"),
    M("int8 quantize x4", "eb8f9fa2",
      "    t = 4 * nw + cuda.grid(1)  # the n % 4 values after the last whole word\n    if t < x.size:\n"
      "        q[t] = int8(code(x[t], s))\n", "", "n % 4 tail not handled"),
    M("int8 quantize x4", "eb8f9fa2", "    else:  # the last, partial tile", "    elif False:  # the last, partial tile",
      "partial tile skipped"),
    M("int8 quantize x4", "eb8f9fa2", "a0, a1, a2, a3 = load4(x, 4 * w)", "a0, a1, a2, a3 = load4(x, w)",
      "misaligned 16-byte load"),
    M("int8 dequantize x4", "eb8f9fa2",
      "    b = (p >> (8 * k)) & 0xFF\n    return float32(int32(b - ((b & 0x80) << 1)))",
      "    return float32((p << (24 - 8 * k)) >> 24)", "byte_value: the int64 shift pair"),
    M("int8 dequantize x4", "eb8f9fa2", "return float32(int32(b - ((b & 0x80) << 1)))", "return float32(b)",
      "byte_value: no sign extension"),
    M("int8 dequantize x4", "eb8f9fa2", "b = (p >> (8 * k)) & 0xFF", "b = (p >> (24 - 8 * k)) & 0xFF",
      "byte_value: byte order reversed"),
    M("int8 dequantize x4", "eb8f9fa2",
      "    t = 4 * nw + cuda.grid(1)\n    if t < q.size:\n        out[t] = float32(q[t]) * s\n", "",
      "n % 4 tail not handled"),
    M("int8 dequantize x4", "eb8f9fa2", "    else:\n        for k in range(4):\n            if w + k * nb < nw:\n"
      "                p = q32", "    elif False:\n        for k in range(4):\n            if w + k * nb < nw:\n"
      "                p = q32", "partial tile skipped"),
    M("int8 dequantize x4", "eb8f9fa2", "store4(out, 4 * w, byte_value(p0, 0)", "store4(out, w, byte_value(p0, 0)",
      "misaligned 16-byte store"),
    M("int8 quantize x4, FADD rounding", "0de13394", "float32(12582912.0)  # the addition rounds, ties to even\n"
      "    return int32(float_bits(t)) - int32(0x4B400000)", "float32(8388608.0)  # the addition rounds, ties to even\n"
      "    return int32(float_bits(t)) - int32(0x4B000000)", "magic number 2^23, not 1.5 * 2^23"),
    M("int8 quantize x4, FADD rounding", "0de13394",
      "t = min(max(v / s, float32(-127.0)), float32(127.0)) + float32(12582912.0)", "t = v / s + float32(12582912.0)",
      "no clamp before the addition"),
    M("int8 quantize x4, FADD rounding", "0de13394", "t = min(max(v / s,", "t = min(max(v * (float32(1.0) / s),",
      "multiplied by 1 / s"),
    # ---- 05.2: int4 with a scale per group of 128 (exercises 1 and 2)
    M("int4 quantize", "cell-4", "s = max(m, AMAX_FLOOR) / float32(7.0)", "s = max(m, AMAX_FLOOR) / float32(8.0)",
      "scale amax / 8"),
    M("int4 quantize", "cell-4", "s = max(m, AMAX_FLOOR) / float32(7.0)", "s = m / float32(7.0)",
      "absmax not floored: a group of subnormals gets scale 0"),
    M("int4 quantize", "cell-4", "(q0 & 0xF) | ((q1 & 0xF) << 4), (q2 & 0xF) | ((q3 & 0xF) << 4)",
      "(q1 & 0xF) | ((q0 & 0xF) << 4), (q3 & 0xF) | ((q2 & 0xF) << 4)", "nibbles swapped"),
    M("int4 quantize", "cell-4", "(q0 & 0xF) | ((q1 & 0xF) << 4)", "q0 | (q1 << 4)", "codes not masked to 4 bits"),
    M("int4 quantize", "cell-4", "if c0 + 2 < cols:", "if c0 + 3 < cols:", "odd tail's last byte dropped"),
    M("int4 quantize", "cell-4", "if c0 + 2 < cols:", "if c0 + 1 < cols:", "second byte written past a row of 2 mod 4"),
    M("int4 quantize", "cell-4", "m = warp_max_f32(max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3))))",
      "m = warp_max_f32(max(abs(v0), abs(v1)))", "two of four values left out of the max"),
    M("int4 dequantize", "cell-6", "return float32(int32(v - ((v & 0x8) << 1)))", "return float32(int32(v))",
      "no sign extension"),
    M("int4 dequantize", "cell-6", "v = (h >> (4 * k)) & 0xF", "v = (h >> (4 * (k ^ 1))) & 0xF", "nibbles swapped"),
    M("int4 dequantize", "cell-6", "s = scales[r, (2 * j) // GROUP]", "s = scales[r, j // GROUP]",
      "group of the byte index"),
    M("int4 dequantize", "cell-6", "if 2 * j + 1 < out.shape[1]:", "if True:", "odd tail written past the end"),
    M("int4 dequantize", "cell-6", "    if j >= packed.shape[1]:\n        return\n", "",
      "byte past the row's end read"),
    # ---- 05.2 exercises 3 to 5: the quantizer on a 2-D grid, 16-byte accesses, unsigned indices
    M("int4 quantize rows", "96ee13fc", "g = cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32",
      "g = cuda.blockIdx.x + cuda.threadIdx.x // 32", "group index without the block's stride of WARPS groups"),
    M("int4 quantize rows", "96ee13fc", "cuda.blockIdx.y, g, cuda.threadIdx.x % 32)", "cuda.blockIdx.x, g, cuda.threadIdx.x % 32)",
      "row taken from the wrong grid axis"),
    M("int4 quantize rows", "96ee13fc", "    if g >= scales.shape[1]:  # whole warps", "    if False:  # whole warps",
      "warps past the row's last group not sent home"),
    M("int4 quantize rows", "96ee13fc", "g = cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32",
      "g = cuda.blockIdx.x * WARPS + cuda.threadIdx.x % 32", "lane taken for the warp's number"),
    M("int4 quantize rows x4", "q4-x4-code", "    if cols % 4 != 0:  # rows", "    if False:  # rows",
      "16-byte path without the alignment test"),
    M("int4 quantize rows x4", "q4-x4-code", "    if cols % 4 != 0:  # rows", "    if cols % 2 != 0:  # rows",
      "rows of 2 mod 4 taken as 16-byte aligned"),
    M("int4 quantize rows x4", "q4-x4-code", "    if c0 < cols:  # cols % 4 == 0: the whole quad",
      "    if True:  # cols % 4 == 0: the whole quad", "16-byte load past the end of the row"),
    M("int4 quantize rows x4", "q4-x4-code", "uint16(lo | (hi << 8))", "uint16(hi | (lo << 8))",
      "bytes of the 2-byte store swapped"),
    M("int4 quantize rows x4", "q4-x4-code", "packed16[r, c0 // 4]", "packed16[r, c0 // 2]",
      "2-byte store at the byte index"),
    M("int4 quantize rows u64", "q4-u64-code", "lane = uint64(cuda.threadIdx.x & 31)", "lane = uint64(cuda.threadIdx.x >> 5)",
      "lane and warp swapped"),
    M("int4 quantize rows u64", "q4-u64-code", "uint64(cuda.blockIdx.x) * uint64(WARPS) + ", "uint64(cuda.blockIdx.x) + ",
      "group index without the block's stride of WARPS groups"),
    M("int4 quantize rows u64", "q4-u64-code", "(cols & uint64(3)) != uint64(0)", "(cols & uint64(1)) != uint64(0)",
      "rows of 2 mod 4 taken as 16-byte aligned"),
    M("int4 quantize rows u64", "q4-u64-code", "packed16[r, c0 >> uint64(2)]", "packed16[r, c0 >> uint64(1)]",
      "2-byte store at the byte index"),
    M("int4 quantize rows x8", "q4-x8-code", "m = max16(max(m,", "m = warp_max_f32(max(m,",
      "absmax over the whole warp: two groups"),
    M("int4 quantize rows x8", "q4-x8-code", "    off = 8\n", "    off = 16\n", "max16: a shuffle across the half warps"),
    M("int4 quantize rows x8", "q4-x8-code", "c1 = c0 + uint64(64)", "c1 = c0 + uint64(4)", "second quad next to the first"),
    M("int4 quantize rows x8", "q4-x8-code", "    if c1 < cols:\n        v4", "    if True:\n        v4",
      "second 16-byte load past the end of the row"),
    M("int4 quantize rows x8", "q4-x8-code", "if lane == uint64(0) and g < groups:", "if lane == uint64(0):",
      "scale of a group past the row's last stored"),
    M("int4 quantize rows x8", "q4-x8-code", ") * uint64(2)  # the warp's first group", ")  # the warp's first group",
      "the warp's first group without the factor 2"),
    M("int4 quantize rows x8", "q4-x8-code", "            if g0 + uint64(k) < groups:", "            if True:",
      "scalar path: the warp's second group past the row's last"),
    # ---- 05.2 exercises 7 and 8: a thread per quad, a tile of four quads per thread (256 threads)
    M("int4 dequantize x4", "ffdc8498", "scales[r, c // GROUP]", "scales[r, (c - 1) // GROUP]",
      "dequantize_quad: scale index off by one"),
    M("int4 dequantize x4", "ffdc8498", "store_quad(out, r, c, int32(", "store_quad(out, r, j, int32(",
      "dequantize_quad: misaligned 16-byte store"),
    M("int4 dequantize x4", "ffdc8498", "nibble_value(h, 0) * s, nibble_value(h, 1) * s", "nibble_value(h, 1) * s, nibble_value(h, 0) * s",
      "store_quad: nibbles 0 and 1 swapped"),
    M("int4 dequantize x4", "ffdc8498", "dequantize_byte(packed, scales, out, r, 2 * j + 1)",
      "dequantize_byte(packed, scales, out, r, 2 * j)", "dequantize_quad: the quad's second byte left out"),
    M("int4 dequantize x4", "ffdc8498", "int32(packed16[r, j])", "int32(packed16[r, c])",
      "dequantize_quad: uint16 read at the value index"),
    M("int4 dequantize x4", "ffdc8498", "out.shape[1] % 4 == 0)", "out.shape[1] % 2 == 0)",
      "rows of 2 mod 4 taken as 16-byte aligned"),
    M("int4 dequantize tile4", "dq4-tile-code", "    else:  # other widths, and the last, partial tile of a row",
      "    elif not vec:  # other widths, and the last, partial tile of a row", "partial tile skipped"),
    M("int4 dequantize tile4", "dq4-tile-code", "        for k in range(4):\n", "        for k in range(1):\n",
      "partial tile: only each thread's first quad"),
    M("int4 dequantize tile4", "dq4-tile-code", "        for k in range(4):\n", "        for k in range(3):\n",
      "partial tile: a thread's fourth quad left out"),
    M("int4 dequantize tile4", "dq4-tile-code", "s1 = scales[r, (4 * (j + nb)) // GROUP]", "s1 = scales[r, (4 * j) // GROUP]",
      "second quad with the first one's scale"),
    M("int4 dequantize tile4", "dq4-tile-code", "store_quad(out, r, 4 * j, h0, s0)", "store_quad(out, r, j, h0, s0)",
      "misaligned 16-byte store"),
    M("int4 dequantize tile4", "dq4-tile-code", "h2 = int32(packed16[r, j + 2 * nb])", "h2 = int32(packed16[r, j + nb])",
      "third quad loads the second one's codes"),
    # ---- 05.3: FP8 codes, bit by bit
    M("FP8 decode, table", "fp8-lut-code", "if c < 256:", "if c < 255:", "table's last code never decoded"),
    M("FP8 decode, table", "fp8-lut-code", "lut[(q >> 8) & 0xFF], lut[(q >> 16) & 0xFF]",
      "lut[(q >> 16) & 0xFF], lut[(q >> 8) & 0xFF]", "two codes of a word swapped"),
    M("FP8 decode, table", "fp8-lut-code", "if cuda.blockIdx.x == 0 and t < tail:", "if False:", "the n % 4 tail dropped"),
    M("FP8 decode, table", "fp8-lut-code", "        lut[i] = table[i]\n    cuda.syncthreads()\n",
      "        lut[i] = table[i]\n", "no barrier after filling the shared table"),
    M("FP8 decode", "17afa519", "e = 1\n        while m < (1 << M):", "e = 0\n        while m < (1 << M):",
      "subnormal exponent off by one"),
    M("FP8 decode", "17afa519", "if SPECIALS == 1 and e == top and m == (1 << M) - 1:", "if SPECIALS == 1 and e == top:",
      "E4M3's top exponent all NaN"),
    M("FP8 decode", "17afa519", "(0x7F800000 if m == 0 else 0x7FC00000)", "0x7FC00000", "E5M2 infinity decoded as NaN"),
    M("FP8 decode", "17afa519", "sign = ((c >> 7) & 1) << 31", "sign = 0", "sign dropped"),
    M("FP8 encode", "5195844f", "if rem > half or (rem == half and (q & 1) == 1):", "if rem >= half:",
      "ties rounded away from zero"),
    M("FP8 encode", "5195844f", "eff = max(e, 1 - BIAS)", "eff = e", "no subnormals"),
    M("FP8 encode", "5195844f", "if shift >= 25:", "if shift >= 24:", "flushed to zero one binade early"),
    M("FP8 encode", "5195844f", "code = OVERFLOW_CODE", "code = MAX_CODE", "always saturating"),
    # ---- 05.4: NVFP4 and MX block scales
    M("NVFP4 quantize", "128a5cc5", "denom = decode_value(s, *E4M3_DEC) * ts", "denom = m / float32(6)",
      "elements divided by the scale before its E4M3 rounding"),
    M("NVFP4 quantize", "128a5cc5", "ts = amax[0] / float32(2688)", "ts = float32(1)", "no tensor scale"),
    M("NVFP4 quantize", "128a5cc5", "for offset in (1, 2, 4):", "for offset in (1, 2):",
      "block amax over 8 elements, not 16"),
    M("NVFP4 quantize", "128a5cc5", "    if ts == 0:\n        ts = float32(1)\n", "",
      "all-zero tensor: tensor scale 0, not 1"),
    M("MX scale", "aa9ee102", "int64(ex) - 1 - EMAX + 127", "int64(ex) - EMAX + 127",
      "frexp's exponent taken as floor(log2): scale one binade up"),
    M("MX scale", "aa9ee102", "int64(ex) - 1 - EMAX + 127", "int64(ex) - 1 + 127", "element format's emax left out"),
    M("MX scale", "aa9ee102", "    if amax == 0:\n        return 0\n", "", "all-zero block not given code 0"),
    M("MX scale", "aa9ee102", "return min(max(int64(ex) - 1 - EMAX + 127, 0), 254)",
      "return min(int64(ex) - 1 - EMAX + 127, 254)", "scale code not clamped at 0"),
    M("codes from the bits", "codes-from-bits", "22, int32(252), int32(7))", "22, int32(254), int32(7))",
      "E2M1 rebias without the format's bias"),
    M("codes from the bits", "codes-from-bits", "20, int32(960), int32(0x7E))", "20, int32(952), int32(0x7E))",
      "E4M3 rebias one binade off"),
    M("codes from the bits", "codes-from-bits", "    r = int32(r + int32((b >> drop) & 1))", "    r = int32(r)",
      "ties rounded down: the last kept bit not added"),
    M("codes from the bits", "codes-from-bits", "a + float32(4194304.0)", "a + float32(8388608.0)",
      "E2M1's adder 2^23, whose ulp is 1, not 0.5"),
    M("codes from the bits", "codes-from-bits", "if a < float32(1):", "if a < float32(0.5):",
      "E2M1's adder only below 0.5"),
    M("codes from the bits", "codes-from-bits", "22, int32(252), int32(7))", "22, int32(252), int32(15))",
      "E2M1 code not clamped at 6"),
    M("codes from the bits", "codes-from-bits", "return int32(c ^ int32(", "return int32(c | int32(",
      "NaN's sign ORed in, not XORed"),
    M("codes from the bits", "codes-from-bits", "int32(int32(float_bits(q) >> 28) & int32(8))", "int32(0)",
      "E2M1 sign dropped"),
    M("codes from the bits", "codes-from-bits", "        c = int32(0x7F)\n", "        c = int32(0x7E)\n",
      "E4M3 NaN saturated to 448"),
    M("NVFP4 quantize, codes from the bits", "bits-kernel", "denom = e4m3_magnitude_value(s) * ts",
      "denom = e4m3_magnitude_value(s)", "tensor scale left out of denom"),
    M("NVFP4 quantize, codes from the bits", "bits-kernel", "q0 = e2m1_code(v0 / denom)",
      "q0 = e2m1_code(abs(v0) / denom)", "sign of the even elements dropped"),
    M("NVFP4 quantize, a block per thread", "blocks", "= load4(x, 16 * b + 4 * k)", "= load4(x, 4 * b + 4 * k)",
      "a thread's 16 values straddling two scale blocks"),
    M("NVFP4 quantize, a block per thread", "blocks", "    if 16 * b >= n:\n", "    if 16 * b + 16 > n:\n",
      "last partial block left out"),
    M("NVFP4 quantize, a block per thread", "blocks", "if 16 * b + 2 * j < n:", "if 16 * b + 2 * j + 1 < n:",
      "a partial block's last odd byte left out"),
    M("NVFP4 quantize, a block per thread", "blocks", "v[i] = x[16 * b + i] if 16 * b + i < n else",
      "v[i] = x[16 * b + i] if 16 * b + i < n - 1 else", "a partial block's last element read as 0"),
    M("NVFP4 quantize, a block per thread", "blocks", "<< uint32(4 * i)", "<< uint32(4 * (i ^ 1))",
      "the two codes of each byte swapped in the words"),
    M("NVFP4 quantize, a block per thread", "blocks", "b = cuda.grid(1)  # this thread's block",
      "b = cuda.threadIdx.x  # this thread's block", "block index without the thread block's offset"),
    M("NVFP4 quantize, a block per thread", "blocks", "c[i] = int32(int32(float_bits(v[i]) >> 28) & int32(8))",
      "c[i] = int32(0)", "zeros of a zero-scale block lose their sign"),
    M("NVFP4 quantize, one reciprocal", "reciprocal", "    return q if keep else q0\n", "    return q0\n",
      "quotient from the reciprocal, uncorrected"),
    M("NVFP4 quantize, one reciprocal", "reciprocal", "keep = (q0 != float32(0)) & (abs(q)", "keep = (abs(q)",
      "correction applied to zeros: -0 becomes +0"),
    M("NVFP4 quantize, one reciprocal", "reciprocal", "if float32(2.0 ** -125) <= denom <= float32(2.0 ** 125):",
      "if denom > 0:", "reciprocal of a denom outside the normal range"),
    M("NVFP4 quantize, one reciprocal", "reciprocal",
      "if float32(2.0 ** -125) <= ts <= float32(2.0 ** 125) and m >= float32(2.0 ** -100):", "if True:",
      "scale's reciprocals outside the normal range"),
    # exercise 6: the lean path (a quotient without divide's guard, its code from |q| + M's bits)
    M("NVFP4 quantize, lean", "lean", "bits_float(e) * float32(4194304.0))", "bits_float(e) * float32(8388608.0))",
      "M = 2^(e + 23): rounded to twice E2M1's step"),
    M("NVFP4 quantize, lean", "lean", "* uint32(0x7FFFFE) + uint32(298))", "* uint32(0x7FFFFE) + uint32(296))",
      "the code's constant off by 2: every code a binade up"),
    M("NVFP4 quantize, lean", "lean", "tb = float_bits(abs(q) + bits_float(e)",
      "tb = float_bits(bits_float(float_bits(abs(q)) + uint32(1)) + bits_float(e)",
      "ties rounded up (|q| nudged an ulp first), not to even"),
    M("NVFP4 quantize, lean", "lean", "e = max(float_bits(q) & uint32(0x7F800000), uint32(0x3F800000))",
      "e = float_bits(q) & uint32(0x7F800000)", "M from |q|'s own exponent below 1, not from max(|q|, 1)"),
    M("NVFP4 quantize, lean", "lean", "    return w | sgn\n", "    return w\n", "sign dropped on the lean path"),
    M("NVFP4 quantize, lean", "lean", "    if whole and float32(2.0 ** -125) <= ts", "    if float32(2.0 ** -125) <= ts",
      "the partial block sent down the lean path"),
    M("NVFP4 quantize, lean", "lean", "hot = m * r <= float32(6.5)", "hot = m * r <= float32(8)",
      "a block whose quotients saturate (7 to 8) sent down the lean path"),
    M("NVFP4 quantize, lean", "lean", "hot = m * r <= float32(6.5)", "hot = True",
      "every block with normal scales lean, saturating or not"),
    # ---- 05.5: ternary weights, four 2-bit codes a byte
    M("ternary quantize", "cell-3", "byte |= (t & 3) << (2 * i)", "byte |= (t & 3) << (2 * (3 - i))",
      "first code in the highest bits"),
    M("ternary quantize", "cell-3", "t = min(max(round(w[r, c] / s), -1), 1)", "t = min(max(int(w[r, c] / s), -1), 1)",
      "truncated instead of rounded"),
    M("ternary quantize", "cell-3", "s = mean if mean > float32(0.0) else float32(1.0)", "s = mean",
      "all-zero weights divide by zero"),
    M("ternary gemm", "cell-7", "elif code == 3:\n                    acc -= int32(a[m, k])",
      "elif code == 3:\n                    acc += 3 * int32(a[m, k])", "code 11 added as +3"),
    M("ternary gemm", "cell-7", "if k < a.shape[1]:", "if k < a.shape[1] - a.shape[1] % 4:", "the K % 4 tail skipped"),
    # exercise 3: the warp sum's loop that never ends (its lanes keep meeting in the shuffle: only the
    # check's time limit stops it), the warp sum left out, lanes that stop after their first byte
    M("ternary gemm, warp + DP4A", "4795d399", "while off > 0:", "while off >= 0:", "warp sum that never ends"),
    M("ternary gemm, warp + DP4A", "4795d399", "    off = 16\n    while off > 0:", "    off = 0\n    while off > 0:",
      "lanes' partial sums never added"),
    M("ternary gemm, warp + DP4A", "4795d399", "for j in range(lane, w_packed.shape[1], 32):",
      "for j in range(lane, min(w_packed.shape[1], 32), 32):", "one byte a lane"),
    # exercise 4: K = 1100 gives every lane a second word (issue 38: K long enough for it)
    M("ternary gemm, four rows per pass", "892d16f2", "for w in range(lane, w_words.shape[1], 32):",
      "for w in range(lane, min(w_words.shape[1], 32), 32):", "one word a lane"),
    M("ternary gemm, four rows per pass", "892d16f2", "acc1 = dp4a(a_words[r1, j], wt, acc1)",
      "acc1 = dp4a(a_words[m0, j], wt, acc1)", "row m0's activations for row m0 + 1"),
    # exercise 5: the sum with 16-byte loads, four a trip a block apart, a grid-stride loop
    M("abs sum x4", "tq-x4-code", "stride = uint64(cuda.gridDim.x) * uint64(4) * nb", "stride = uint64(cuda.gridDim.x) * nb",
      "step of a quarter grid"),
    M("abs sum x4", "tq-x4-code", "while j < nq:", "if j < nq:", "one trip only"),
    M("abs sum x4", "tq-x4-code", "        for k in range(4):", "        for k in range(3):", "three quads a trip"),
    M("abs sum x4", "tq-x4-code", "            if jk < nq:", "            if j + uint64(3) * nb < nq:",
      "partial trip tested as a whole"),
    M("abs sum x4", "tq-x4-code", "load4(x, uint64(4) * jk)", "load4(x, jk)", "load at the quad's index"),
    M("abs sum x4", "tq-x4-code", "(float64(abs(a0)) + float64(abs(a1))) + (float64(abs(a2)) + float64(abs(a3)))",
      "(float64(a0) + float64(a1)) + (float64(a2) + float64(a3))", "sign kept"),
    M("abs sum x4", "tq-x4-code", "(float64(abs(a0)) + float64(abs(a1))) + (float64(abs(a2)) + float64(abs(a3)))",
      "float64((abs(a0) + abs(a1)) + (abs(a2) + abs(a3)))", "quads added in float32"),
    # exercise 6: sixteen weights a thread, one word of codes
    M("ternary quantize x16", "tq-x16-code", "load4(w, uint64(16) * g + uint64(4 * k))", "load4(w, uint64(4) * g + uint64(4 * k))",
      "weights from 4g, not 16g"),
    M("ternary quantize x16", "tq-x16-code", "<< uint32(2 * t)", "<< uint32(2 * (15 - t))", "codes in reverse order"),
    M("ternary quantize x16", "tq-x16-code", "    for k in range(4):", "    for k in range(3):", "three loads of four"),
    # ---- 05.6: GEMMs on quantized data, DP4A and W4A8
    M("int8 GEMM on DP4A", "cell-4", "for w in range(a32.shape[1]):", "for w in range(a32.shape[1] - 1):",
      "last word of K skipped"),
    M("int8 GEMM on DP4A", "cell-4", "acc = dp4a(a32[m, w], b32[n, w], acc)  # four",
      "acc = dp4a(a32[m, w], b32[n, w], 0)  # four", "accumulator restarted every word"),
    M("int8 GEMM on DP4A", "cell-4", "if m < c.shape[0] and n < c.shape[1]:",
      "if m <= c.shape[0] and n < c.shape[1]:", "row bound <="),
    M("int8 GEMM on DP4A", "cell-4", "n, m = cuda.grid(2)", "m, n = cuda.grid(2)", "x taken as the row"),
    M("W4A8 GEMM", "cell-10",
      "    even |= (even & uint32(0x08080808)) * uint32(30)  # sign-extend each byte's nibble\n"
      "    odd |= (odd & uint32(0x08080808)) * uint32(30)\n", "", "no sign extension"),
    M("W4A8 GEMM", "cell-10", "s = w_scales[n, w // GROUP_WORDS]  # the 4 words", "s = w_scales[n, w // 128]  # the 4 words",
      "group of a value index, not of a word"),
    M("W4A8 GEMM", "cell-10",
      "byte_perm(x0, x1, EVEN_BYTES), int32(even), 0)\n    return dp4a(byte_perm(x0, x1, ODD_BYTES)",
      "byte_perm(x0, x1, ODD_BYTES), int32(even), 0)\n    return dp4a(byte_perm(x0, x1, EVEN_BYTES)",
      "activation bytes paired with the wrong nibbles"),
    M("W4A8 GEMM", "cell-10", "x4, x5, x6, x7 = load4(a32, (m, 2 * w + 4))", "x4, x5, x6, x7 = load4(a32, (m, 2 * w))",
      "second activation vector read from the first's address"),
    M("W4A8 GEMM", "cell-10", "for w in range(4 * lane, words, 128):  # 4 words", "for w in range(4 * lane, words, 32):  # 4 words",
      "16-byte loop stepping a word per lane"),
    M("W4A8 GEMM", "cell-10", "x0, x1, x2, x3 = load4(a32, (m, 2 * w))\n                        x4, x5, x6, x7 = load4(a32, (m, 2 * w + 4))",
      "x0, x1, x2, x3 = load4(a32, (m, w))\n                        x4, x5, x6, x7 = load4(a32, (m, w + 4))",
      "activation words at the weight word's index"),
    M("W4A8 GEMM", "cell-10", "acc[i] += float32(d) * s\n", "acc[i] += float32(d)\n", "16-byte loop without the group scale"),
    # exercise 2: 2-D register blocking with DP4A
    M("int8 GEMM, tiled", "tiled-code", "for k0 in range(0, kw_total, BKW):", "for k0 in range(0, kw_total - BKW + 1, BKW):",
      "last partial tile of K skipped"),
    M("int8 GEMM, tiled", "tiled-code",
      "                a_s[kw, r] = a32[row0 + r, k0 + kw] if row0 + r < m_total and k0 + kw < kw_total else 0\n"
      "            for e in range(t, BKW * BN, THREADS_T):\n"
      "                r, kw = e // BKW, e % BKW\n"
      "                b_s[kw, r] = b32[col0 + r, k0 + kw] if col0 + r < n_total and k0 + kw < kw_total else 0\n",
      "                if row0 + r < m_total and k0 + kw < kw_total:\n"
      "                    a_s[kw, r] = a32[row0 + r, k0 + kw]\n"
      "            for e in range(t, BKW * BN, THREADS_T):\n"
      "                r, kw = e // BKW, e % BKW\n"
      "                if col0 + r < n_total and k0 + kw < kw_total:\n"
      "                    b_s[kw, r] = b32[col0 + r, k0 + kw]\n",
      "words past K not zeroed (stale tile)"),
    M("int8 GEMM, tiled", "tiled-code", "b_s[kw, r] = b32[col0 + r, k0 + kw] if", "b_s[kw, r] = b32[k0 + kw, col0 + r] if",
      "B's words read transposed"),
    M("int8 GEMM, tiled", "tiled-code", "acc = cuda.local.array((TM, TN), int32)", "acc = cuda.local.array((TM, TN), float32)",
      "float32 accumulator"),
    M("int8 GEMM, tiled", "tiled-code", "acc[i, j] = dp4a(a_r[i], b_r[j], acc[i, j])", "acc[i, j] = dp4a(a_r[j], b_r[i], acc[i, j])",
      "register indices exchanged"),
    M("int8 GEMM, tiled", "tiled-code", "            cuda.syncthreads()\n        for i in range(TM):", "        for i in range(TM):",
      "no barrier after a stage"),
    M("int8 GEMM, tiled", "tiled-code", "b_r[j] = b_s[kw, tx + TX * j]", "b_r[j] = b_s[kw, tx * TN + j]",
      "thread's columns consecutive, not strided"),
    # exercise 3: the DP4A step of module 02's warp-tiled kernel
    M("int8 GEMM, warp-tiled step", "warp-code", "acc[i, j] = dp4a(a_reg[i], b_reg[j], acc[i, j])",
      "acc[i, j] = dp4a(a_reg[j], b_reg[i], acc[i, j])", "a_reg and b_reg indices exchanged"),
    M("int8 GEMM, warp-tiled step", "warp-code", "acc[i, j] = dp4a(a_reg[i], b_reg[j], acc[i, j])",
      "acc[i, j] = dp4a(a_reg[i], b_reg[j], 0)", "accumulator restarted every step"),
    M("int8 GEMM, warp-tiled step", "warp-code", "        load_k(a_t, b_t, s, k, a_reg, b_reg, wr, wc, tr, tc)\n", "",
      "no load_k"),
    M("int8 GEMM, warp-tiled step", "warp-code", "load_k(a_t, b_t, s, k, a_reg", "load_k(a_t, b_t, s, 0, a_reg",
      "row 0 of the stage every step"),
    # exercise 4: the W8A8 epilogue
    M("W8A8 epilogue", "w8a8-code", "return float32(v) * a_scale[row] * b_scale[col]", "return float32(v)",
      "no dequantization"),
    M("W8A8 epilogue", "w8a8-code", "return float32(v) * a_scale[row] * b_scale[col]",
      "return float32(v) * a_scale[col] * b_scale[row]", "scales' indices exchanged"),
    M("W8A8 epilogue", "w8a8-code", "return float32(v) * a_scale[row] * b_scale[col]",
      "return float32(v) * a_scale[row] * a_scale[row]", "activation scale twice"),
    # ---- 07.1: the Ozaki scheme in NumPy, slicing by rows and the reconstruction
    M("Ozaki split_rows", "48318c96", "big = np.rint(np.ldexp(", "big = np.trunc(np.ldexp(",
      "truncated instead of rounded"),
    M("Ozaki split_rows", "48318c96", "np.ldexp(x, (p - e)[:, None])", "np.ldexp(x, (p - e[::-1])[:, None])",
      "exponent of another row"),
    M("Ozaki split_rows", "48318c96", "p = 8 * slices - 2\n    e = np.frexp", "p = 8 * slices - 1\n    e = np.frexp",
      "no bit left for the carry"),
    M("Ozaki split_rows", "48318c96", "big = (big - low) >> 8", "big = (big - low) >> 7",
      "slices overlap by one bit"),
    M("Ozaki reconstruct", "9de813dd", "for d in range(s - 1, -1, -1):", "for d in range(s):",
      "most significant diagonal first"),
    M("Ozaki reconstruct", "9de813dd", "for d in range(s - 1, -1, -1):", "for d in range(s - 2, -1, -1):",
      "least significant diagonal dropped"),
    M("Ozaki reconstruct", "9de813dd", "shift - 12 - 8 * d)", "shift - 12 - 8 * (s - 1 - d))",
      "diagonals weighted in reverse order of significance"),
    M("Ozaki reconstruct", "9de813dd", "out = x if beta == 0 else x + beta * c", "out = x + beta * c",
      "C read when beta is 0"),
    # ---- 07.2: the row exponents and the slicer as kernels
    M("Ozaki row exponents", "a9edb7e6", "e[row] = math.frexp(best[0])[1] if", "e[row] = math.frexp(best[0])[1] - 1 if",
      "exponent as floor(log2), not frexp's"),
    M("Ozaki row exponents", "a9edb7e6", "            odd[tid] = max(odd[tid], odd[tid + half])\n", "",
      "Inf/NaN flags not reduced"),
    M("Ozaki row exponents", "a9edb7e6", "for j in range(tid, a.shape[1], THREADS):",
      "for j in range(tid, a.shape[1] - 1, THREADS):", "last column left out"),
    M("Ozaki slice_rows", "8bc65df9", "big = round(math.ldexp(x, P - e[row]))", "big = int(math.ldexp(x, P - e[row]))",
      "truncated instead of rounded"),
    M("Ozaki slice_rows", "8bc65df9", "if row < digits.shape[1] and col < digits.shape[2]:",
      "if row < a.shape[0] and col < a.shape[1]:", "padding of the tiles not zeroed"),
    M("Ozaki slice_rows", "8bc65df9", "        if row < a.shape[0] and col < a.shape[1]:\n            x = a[row, col]",
      "        if row < a.shape[0] and col <= a.shape[1]:\n            x = a[row, col]", "read bound <="),
    M("Ozaki slice_rows", "8bc65df9", "big = round(math.ldexp(x, P - e[row]))", "big = round(math.ldexp(x, P - e[0]))",
      "the first row's exponent for every row"),
    M("Ozaki slice_rows", "8bc65df9", "big = (big - d) >> 8", "big = (big - d) >> 7", "slices overlap by one bit"),
    # ---- 07.6: Ozaki scheme II, symmetric residues and the Chinese remainder theorem
    M("symmetric residues", "233cf6be", "h = m // 2", "h = (m - 1) // 2", "range shifted up by one for even m"),
    M("symmetric residues", "233cf6be", "return (x + h) % m - h", "return x % m", "remainders not centred"),
    M("symmetric residues", "233cf6be", "return (x + h) % m - h", "return np.fmod(x + h, m) - h",
      "truncating remainder (fmod) for negatives"),
    M("CRT", "21d88ceb", "    if x >= big_m - big_m // 2:\n        x -= big_m\n", "",
      "result not brought into [-M/2, M/2)"),
    M("CRT", "21d88ceb", " * pow(big_m // m, -1, m)", "", "no modular inverse"),
    M("CRT", "21d88ceb", "zip(r, moduli)) % big_m", "zip(r, moduli))", "sum not reduced modulo M"),
    # ---- mistakes along a dimension only the GPU's tiles have (issue 38 §1): each passes the check at
    # the simulator's tiles (equivalent there) and is caught by the check the cell runs once more, in
    # the simulator only, at the GPU's tiles
    # 04.3 exercise 1: the simulator's blocks are 8 x 8, the GPU's 64 query rows x 32 keys
    M("fused attention", "c8a88f30", "for jj in range(BN):\n                    j = j0 + jj",
      "for jj in range(BM):\n                    j = j0 + jj", "scores for BM keys a block, not BN"),
    # 04.3 exercise 2: the simulator's lane has 1 query row and 1 chunk of V; the GPU's 4 and 2
    M("tiled attention", "tiled-core", "load4(sm, (lr0 + i) * D + c)", "load4(sm, lr0 * D + c)",
      "every row of a lane multiplies its first row of Q"),
    M("tiled attention", "tiled-core", "load4(sm, pw + i * PP + j)", "load4(sm, pw + j)",
      "O += P V reads a lane's first row of P for every row"),
    M("tiled attention", "tiled-core", "4 * CG * ch + 4 * cg)", "4 * ch + 4 * cg)",
      "a lane's chunks of V 4 columns apart, not 4 CG"),
    # 02.3b kernel 6: the simulator's thread has 4 x 4 results (one 16-byte load a row), the GPU's 8 x 8
    M("SGEMM, vectorised loads", "c2dc4d80", "load4(a_t, (k, ty * TM + i))", "load4(a_t, (k, ty * TM))",
      "the upper half of a thread's rows of A loaded from the lower half"),
    M("SGEMM, vectorised loads", "c2dc4d80", "load4(b_t, (k, tx * TN + j))", "load4(b_t, (k, tx * TN))",
      "the upper half of a thread's columns of B loaded from the lower half"),
    # 02.3b kernel 7: the simulator's 2 warps are one row of warp tiles, the GPU's 8 are two rows
    M("SGEMM, warp tiling", "0dec6b1c", "return (warp // WARPS_N) * WM,", "return (warp // WARPS_N) * WN,",
      "rows of warp tiles stepped by the warp tile's width"),
    # ---- 08.1 exercise 1: one tile, one barrier
    M("tile copy", "tile-copy", "        fence_mbarrier_init()  #", "        pass  #", "no fence after the init"),
    M("tile copy", "tile-copy", "mbarrier_init(bars, 0, 1)", "mbarrier_init(bars, 0, cuda.blockDim.x)",
      "a count of every thread, but only thread 0 arrives"),
    M("tile copy", "tile-copy", "mbarrier_arrive_expect_tx(bars, 0, 4 * TILE)", "mbarrier_arrive_expect_tx(bars, 0, TILE)",
      "expect-tx in floats, not bytes"),
    M("tile copy", "tile-copy", "mbarrier_arrive_expect_tx(bars, 0, 4 * TILE)",
      "mbarrier_arrive_expect_tx(bars, 0, 4 * TILE + 16)", "expect-tx larger than the copy"),
    M("tile copy", "tile-copy", "mbarrier_wait_parity(bars, 0, 0)", "mbarrier_wait_parity(bars, 0, 1)",
      "a wait on parity 1, the phase before"),
    M("tile copy", "tile-copy", "    mbarrier_wait_parity(bars, 0, 0)  #", "    pass  #", "no wait: the tile read in flight"),
    # ---- 08.1 exercise 2: many rounds through one tile, `full` and `empty`
    M("rounds copy", "rounds-copy", "mbarrier_wait_parity(bars, FULL, r & 1)",
      "mbarrier_wait_parity(bars, FULL, (r & 1) ^ 1)", "the consumers wait on the other parity"),
    M("rounds copy", "rounds-copy", "mbarrier_wait_parity(bars, EMPTY, (r & 1) ^ 1)",
      "mbarrier_wait_parity(bars, EMPTY, r & 1)", "the producer's wait not one phase behind"),
    M("rounds copy", "rounds-copy", "        mbarrier_arrive(bars, EMPTY)  #", "        pass  #", "no arrive on empty"),
    M("rounds copy", "rounds-copy", "src, first + r * TILE, 4 * TILE", "src, first, 4 * TILE",
      "every round copies the block's first tile"),
    # ---- 08.1 exercise 3: a ring of stages in a persistent grid
    M("ring copy", "ring-copy", "mbarrier_wait_parity(bars, s, (r // STAGES) & 1)", "mbarrier_wait_parity(bars, s, r & 1)",
      "the parity of the tile, not of the stage's use"),
    M("ring copy", "ring-copy", "((q // STAGES) & 1) ^ 1)", "(q // STAGES) & 1)",
      "the producer's wait not one phase behind"),
    M("ring copy", "ring-copy", "nbytes = 4 * min(TILE, n - start)", "nbytes = 4 * TILE",
      "the short last tile copied whole"),
    M("ring copy", "ring-copy", "mbarrier_arrive_expect_tx(bars, s, nbytes)", "mbarrier_arrive_expect_tx(bars, s, 4 * TILE)",
      "a whole tile's bytes expected for the short last tile"),
    M("ring copy", "ring-copy", "start = (cuda.blockIdx.x + q * cuda.gridDim.x) * TILE",
      "start = (cuda.blockIdx.x + q) * TILE", "the producer strides by one tile, not the grid"),
    M("ring copy", "ring-copy", "r = q - (STAGES - 1)", "r = q - STAGES", "the producer STAGES tiles ahead, not STAGES - 1"),
    # ---- 08.2 exercise 1: the maps, a box in and the same box out
    M("TMA copy", "tma-copy", "TensorMap2D(d_out, (box, box), swizzle)", "TensorMap2D(d_in, (box, box), swizzle)",
      "the output's map built on the input"),
    M("TMA copy", "tma-copy", "        fence_proxy_tensormap_acquire(src_map)  #", "        pass  #",
      "the input's map used without its acquire fence"),
    M("TMA copy", "tma-copy", "mbarrier_arrive_expect_tx(bars, 0, BOX * BOX * 4)", "mbarrier_arrive_expect_tx(bars, 0, BOX * BOX)",
      "expect-tx in floats, not bytes"),
    M("TMA copy", "tma-copy", "mbarrier_arrive_expect_tx(bars, 0, BOX * BOX * 4)",
      "mbarrier_arrive_expect_tx(bars, 0, TILE_ELEMS * 4)", "expect-tx = the tile's padded size in shared memory"),
    M("TMA copy", "tma-copy", "        mbarrier_wait_parity(bars, 0, 0)  #", "        pass  #",
      "no wait: the store reads the box in flight"),
    M("TMA copy", "tma-copy", "src_map, x, y, bars, 0)", "src_map, y, x, bars, 0)", "the load's x and y swapped"),
    # ---- 08.2 exercise 2: the transpose through the swizzled layout
    M("TMA transpose", "tma-transpose", "v = smem[t_in + tma_tile_index(r, c, BOX, 4, SWIZZLE)]",
      "v = smem[t_in + r * BOX + c]", "the swizzled tile read as plain rows"),
    M("TMA transpose", "tma-transpose", "smem[t_out + tma_tile_index(c, r, BOX, 4, SWIZZLE)] = v",
      "smem[t_out + tma_tile_index(c, r, BOX, 4, 0)] = v", "the transposed tile written without the swizzle"),
    M("TMA transpose", "tma-transpose", "    fence_proxy_async_shared()  #", "    pass  #",
      "no proxy fence before the store"),
    M("TMA transpose", "tma-transpose", "cp_async_bulk_tensor_2d_store(dst_map, y, x, smem, t_out)",
      "cp_async_bulk_tensor_2d_store(dst_map, x, y, smem, t_out)", "the transposed box stored at (x, y)"),
    # ---- 08.2 exercise 3: the ring in a persistent grid
    M("TMA transpose ring", "tma-ring", "mbarrier_wait_parity(bars, s, (r // STAGES) & 1)",
      "mbarrier_wait_parity(bars, s, r & 1)", "the parity of the box, not of the stage's use"),
    M("TMA transpose ring", "tma-ring", "                cp_async_bulk_wait_group_read(1)  #", "                pass  #",
      "a transposed tile written again while its store reads it"),
    M("TMA transpose ring", "tma-ring", "i = cuda.blockIdx.x + q * cuda.gridDim.x", "i = cuda.blockIdx.x + q",
      "the producer strides by one box, not the grid"),
    M("TMA transpose ring", "tma-ring", "r = q - (STAGES - 1)", "r = q - STAGES",
      "the producer STAGES boxes ahead, not STAGES - 1"),
    # ---- 08.3 exercise 1: the descriptors
    M("descriptors", "descriptors", "desc |= ((lbo & 0x3FFFF) >> 4) << 16", "desc |= (lbo & 0x3FFFF) << 16",
      "LBO not divided by 16"),
    M("descriptors", "descriptors", "desc = (start & 0x3FFFF) >> 4", "desc = start & 0x3FFFF",
      "the start address not divided by 16"),
    M("descriptors", "descriptors", "code = 1 if swizzle == 128 else 2 if swizzle == 64 else 3 if swizzle == 32 else 0",
      "code = 3 if swizzle == 128 else 2 if swizzle == 64 else 1 if swizzle == 32 else 0",
      "the swizzle modes numbered 1, 2, 3 for 32, 64, 128 bytes"),
    M("descriptors", "descriptors", "desc |= code << 62", "desc |= swizzle << 62", "the swizzle's bytes as its mode"),
    M("descriptors", "descriptors", "make_desc(smem_start(sa, (0, 0)), 128, 256, 0)",
      "make_desc(smem_start(sa, (0, 0)), 256, 128, 0)", "LBO and SBO swapped"),
    M("descriptors", "descriptors", "desc_b = make_desc(smem_start(sb, (0, 0))", "desc_b = make_desc(smem_start(sa, (0, 0))",
      "B's descriptor on A's tile"),
    M("descriptors", "descriptors", "make_desc(smem_start(sb, (0, 0)), 128, 256, 0)",
      "make_desc(smem_start(sb, (0, 0)), 128, 128, 0)", "SBO of one core matrix, not of a 32-byte row"),
    # ---- 08.3 exercise 2: one wgmma and its fragment
    M("wgmma step", "wgmma-step", "    wgmma_wait_group(0)  #", "    pass  #", "no wait before the store"),
    M("wgmma step", "wgmma-step", "    wgmma_commit_group()  #", "    pass  #", "no commit"),
    M("wgmma step", "wgmma-step", "    wgmma_fence()  #", "    pass  #", "no fence before the first wgmma"),
    M("wgmma step", "wgmma-step",
      "        c[row, col + 8 * j] = acc[4 * j]\n        c[row, col + 8 * j + 1] = acc[4 * j + 1]\n"
      "        c[row + 8, col + 8 * j] = acc[4 * j + 2]\n        c[row + 8, col + 8 * j + 1] = acc[4 * j + 3]",
      "        c[col + 8 * j, row] = acc[4 * j]\n        c[col + 8 * j + 1, row] = acc[4 * j + 1]\n"
      "        c[col + 8 * j, row + 8] = acc[4 * j + 2]\n        c[col + 8 * j + 1, row + 8] = acc[4 * j + 3]",
      "the fragment's rows and columns swapped"),
    M("wgmma step", "wgmma-step", "= acc[4 * j + 1]\n        c[row + 8, col + 8 * j] = acc[4 * j + 2]",
      "= acc[4 * j + 2]\n        c[row + 8, col + 8 * j] = acc[4 * j + 1]", "registers 1 and 2 taken down a column"),
    M("wgmma step", "wgmma-step", "for j in range(len(acc) // 4):", "for j in range(len(acc) // 8):",
      "half the registers stored: N / 2 values taken for N / 2 groups of 4"),
    # ---- 08.3 exercise 3: the K loop, two stages, one group in flight
    M("wgmma GEMM", "wgmma-gemm", "make_desc(start_a + 32 * ks, 16, 1024, 128)  # SBO: 8 rows of 128 bytes; LBO unused\n"
      "            desc_b = make_desc(start_b + 32 * ks,",
      "make_desc(start_a, 16, 1024, 128)  # SBO: 8 rows of 128 bytes; LBO unused\n"
      "            desc_b = make_desc(start_b,", "the descriptors not moved along K"),
    M("wgmma GEMM", "wgmma-gemm", "make_desc(start_a + 32 * ks, 16, 1024, 128)  # SBO: 8 rows of 128 bytes; LBO unused\n"
      "            desc_b = make_desc(start_b + 32 * ks,",
      "make_desc(start_a + 16 * ks, 16, 1024, 128)  # SBO: 8 rows of 128 bytes; LBO unused\n"
      "            desc_b = make_desc(start_b + 16 * ks,", "K-steps 16 bytes apart: halves, not bytes"),
    M("wgmma GEMM", "wgmma-gemm", "acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 1)",
      "acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 0)", "scale_d 0: each wgmma overwrites the sum"),
    M("wgmma GEMM", "wgmma-gemm", "make_desc(start_a + 32 * ks, 16, 1024, 128)", "make_desc(start_a + 32 * ks, 16, 1024, 0)",
      "A's descriptor without the swizzle"),
    M("wgmma GEMM", "wgmma-gemm", "    wgmma_wait_group(0)\n", "", "no wait after the loop"),
    M("wgmma GEMM", "wgmma-gemm", "wgmma_wait_group(1)", "wgmma_wait_group(2)",
      "two groups left in flight while a stage is overwritten"),
    M("wgmma GEMM", "wgmma-gemm", "(kt + 1) * BK, 1 - s)", "(kt + 1) * BK, s)",
      "the next K-tile loaded into the stage in use"),
    M("wgmma GEMM", "wgmma-gemm", "smem_start(sa, (s, 0, 0)), smem_start(sb, (s, 0, 0))",
      "smem_start(sa, (0, 0, 0)), smem_start(sb, (0, 0, 0))", "every K-tile read from stage 0"),
    M("wgmma GEMM", "wgmma-gemm", "for kt in range(ktiles):", "for kt in range(ktiles - 1):", "the last K-tile left out"),
    # ---- 08.3 exercise 4: the next K-tile fetched before the wgmmas, placed after the wait. Not here, since the
    # simulator cannot catch them: no fence_proxy_async_shared() after place (its model of wgmma does not model
    # the proxies); the next K-tile's start in halves, or a K-tile past the end fetched (load4 stops them with an
    # IndexError, not a check's failure; the second changes no result)
    M("wgmma GEMM, prefetch", "wgmma-prefetch",
      "        wgmma_wait_group(1)  # K-tile kt - 1's group has completed: stage 1 - s is free\n"
      "        cuda.syncthreads()  # ... for every thread\n"
      "        if kt + 1 < ktiles:\n"
      "            place(sa, sb, 1 - s, ra, rb)  # the registers wait for their loads here, not before the wgmmas\n"
      "            fence_proxy_async_shared()\n",
      "        if kt + 1 < ktiles:\n"
      "            place(sa, sb, 1 - s, ra, rb)  # the registers wait for their loads here, not before the wgmmas\n"
      "            fence_proxy_async_shared()\n"
      "        wgmma_wait_group(1)  # K-tile kt - 1's group has completed: stage 1 - s is free\n"
      "        cuda.syncthreads()  # ... for every thread\n",
      "the registers placed before the wait: a wgmma still reads that stage"),
    M("wgmma GEMM, prefetch", "wgmma-prefetch",
      "        cuda.syncthreads()  # ... for every thread\n"
      "        if kt + 1 < ktiles:\n"
      "            place(sa, sb, 1 - s, ra, rb)  # the registers wait for their loads here, not before the wgmmas\n"
      "            fence_proxy_async_shared()\n",
      "        if kt + 1 < ktiles:\n"
      "            place(sa, sb, 1 - s, ra, rb)  # the registers wait for their loads here, not before the wgmmas\n"
      "            fence_proxy_async_shared()\n"
      "        cuda.syncthreads()  # ... for every thread\n",
      "the registers placed before the barrier: another thread's wgmma may still read that stage"),
    M("wgmma GEMM, prefetch", "wgmma-prefetch", "fetch(a, b, row0, col0, (kt + 1) * KW, ra, rb)",
      "fetch(a, b, row0, col0, kt * KW, ra, rb)", "K-tile kt fetched again, not kt + 1"),
    M("wgmma GEMM, prefetch", "wgmma-prefetch", "place(sa, sb, 1 - s, ra, rb)", "place(sa, sb, s, ra, rb)",
      "the registers placed into the stage in use"),
    M("wgmma GEMM, prefetch", "wgmma-prefetch",
      "            fence_proxy_async_shared()\n        cuda.syncthreads()\n    wgmma_wait_group(0)",
      "            fence_proxy_async_shared()\n    wgmma_wait_group(0)", "no barrier between place and the next wgmmas"),
    M("wgmma GEMM, prefetch", "wgmma-prefetch", "    place(sa, sb, 0, ra, rb)\n", "",
      "K-tile 0 fetched but never placed"),
    # ---- 08.4 exercise 1: the producer
    M("producer", "producer", "mbarrier_wait_parity(empty, s, parity ^ 1)", "mbarrier_wait_parity(empty, s, parity)",
      "the producer's wait on empty not one phase behind"),
    M("producer", "producer", "mbarrier_arrive_expect_tx(full, s, STAGE_BYTES)",
      "mbarrier_arrive_expect_tx(full, s, STAGE_BYTES // 2)", "expect-tx of half the stage's bytes"),
    # ---- 08.4 exercise 2: a consumer
    # (the consumers' wait on the other parity is caught too, but in one of several forms, depending on whether
    # the producer had issued the stage's load when the wgmma read it: tests/test_checks_hopper_ws_gemm.py)
    M("consumer", "consumer", "s, parity = ring_slot(q)", "s, parity = ring_slot(kt)",
      "the count restarted at each tile: stages and phases out of step with the producer's"),
    M("consumer", "consumer", "            if kt > 0:\n                release(empty, (q - 1) % STAGES)", "            pass",
      "a consumer that never arrives on empty in the K loop"),
    M("consumer", "consumer",
      "            wgmma_wait_group(1)  # the group of K-tile q - 1 has completed ...\n"
      "            if kt > 0:\n                release(empty, (q - 1) % STAGES)",
      "            release(empty, s)\n            wgmma_wait_group(1)",
      "the stage released before its wgmma group completed"),
    # ---- 09.1 exercise 1: a grid-stride read, one float a load
    M("peer read, one float", "peer-read-scalar", "i = cuda.grid(1)", "i = cuda.threadIdx.x",
      "start without the block offset"),
    M("peer read, one float", "peer-read-scalar", "stride = cuda.gridDim.x * cuda.blockDim.x",
      "stride = 2 * cuda.gridDim.x * cuda.blockDim.x", "stride of two grids"),
    M("peer read, one float", "peer-read-scalar", "while i < src.size:", "while i < src.size - 1:",
      "last element left out"),
    # ---- 09.1 exercise 2: 16 bytes a load, and the tail
    M("peer read", "peer-read", "n4 = src.size // 4", "n4 = (src.size + 3) // 4", "a partial group loaded whole"),
    M("peer read", "peer-read", "load4(src, 4 * i)", "load4(src, i)", "the group's index taken as its element's"),
    M("peer read", "peer-read", "store4(dst, 4 * i, a0, a1, a2, a3)", "store4(dst, 4 * i, a0, a1, a3, a2)",
      "two values swapped"),
    M("peer read", "peer-read", "stride = cuda.gridDim.x * cuda.blockDim.x",
      "stride = 4 * cuda.gridDim.x * cuda.blockDim.x", "stride in elements, not groups"),
    M("peer read", "peer-read", "j = 4 * n4 + cuda.grid(1)", "j = n4 + cuda.grid(1)", "the tail starts at n // 4"),
    M("peer read", "peer-read", "if j < src.size:", "if j < src.size - 1:", "the tail one short"),
    # ---- 09.2 exercise 1: the one-shot all-reduce's protocol and reduction
    M("one-shot all-reduce", "one-shot-block", "        cuda.threadfence_system()  #", "        pass  #", "no fence"),
    M("one-shot all-reduce", "one-shot-block", "cuda.threadfence_system()", "cuda.threadfence()",
      "a fence of this GPU's scope"),
    M("one-shot all-reduce", "one-shot-block", "while load_acquire_system(peer_flags, b) < epoch:",
      "while load_acquire_system(peer_flags, b) < epoch - 1:", "waits for the last call's flag"),
    M("one-shot all-reduce", "one-shot-block", "cuda.atomic.exch(my_flags, b, epoch)", "cuda.atomic.exch(my_flags, b, 1)",
      "flag 1 in place of the epoch"),
    M("one-shot all-reduce", "one-shot-block", "    cuda.syncthreads()\n    i = b * cuda.blockDim.x + t\n    while i < n:  # 4.",
      "    i = b * cuda.blockDim.x + t\n    while i < n:  # 4.", "no barrier after the wait"),
    M("one-shot all-reduce", "one-shot-block", "    cuda.syncthreads()\n    if t == 0:", "    if t == 0:",
      "no barrier before the flag"),
    M("one-shot all-reduce", "one-shot-block", "out[i] = x[i] + peer[half + i]", "out[i] = x[i] + mine[half + i]",
      "its own staging read for the peer's"),

]


# ---------------------------------------------------------------------------------------------
# Running a program

_SKIPPED_CALLS = ("benchmark", "sweep(", "compare(", "plot_", "rooflines(", "to_device", "device_array")


def _definitions(source: str) -> str:
    """The statements of a cell that define things: no checks, launches or measurements."""
    def defines(node) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            return True
        if isinstance(node, ast.If):  # e.g. simulator and GPU versions of a function
            return all(defines(n) for n in node.body + node.orelse)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            text = ast.get_source_segment(source, node) or ""
            return not any(call in text for call in _SKIPPED_CALLS)
        return False

    keep = [node for node in ast.parse(source).body if defines(node)]
    lines = source.splitlines()
    parts = []
    for node in keep:  # from the first decorator: get_source_segment leaves decorators out
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        parts.append("\n".join(lines[first - 1: node.end_lineno]))
    return "\n\n".join(parts)


_CELLS: dict[str, dict[str, str]] = {}


def _cells(notebook: str) -> dict[str, str]:
    if notebook not in _CELLS:
        nb = nbformat.read(ROOT / notebook, as_version=4)
        _CELLS[notebook] = {c.get("id"): c.source for c in nb.cells if c.cell_type == "code"}
    return _CELLS[notebook]


def program_sources(program: str, mutant: Mutant | None = None) -> list[tuple[str, str]]:
    """(cell id, source) of the program's cells, the mutant's edit applied."""
    notebook, parts = PROGRAMS[program]
    cells = _cells(notebook)
    out = []
    for part in parts:
        if part.startswith("="):  # a statement of the test's own: one of the cell's checks, alone
            out.append(("check", part[1:]))
            continue
        cell, _, mode = part.partition(":")
        if cell not in cells:
            raise MutantDoesNotApply(f"{notebook} has no code cell with id {cell!r}")
        source = cells[cell]
        if mutant is not None and mutant.cell == cell:
            count = source.count(mutant.old)
            if count != 1:
                raise MutantDoesNotApply(f"mutant {mutant.id!r}: {mutant.old!r} occurs {count} times in cell "
                                         f"{cell!r} of {notebook}, not once: update the mutant to the notebook")
            source = source.replace(mutant.old, mutant.new)
        out.append((cell, _definitions(source) if mode == "defs" else source))
    if mutant is not None and mutant.cell not in [p.partition(":")[0] for p in parts if not p.startswith("=")]:
        raise MutantDoesNotApply(f"mutant {mutant.id!r}: cell {mutant.cell!r} is not part of program {program!r}")
    return out


def _caught_types():
    from kernel_lab.simulator import KernelLabSimulatorError

    return (kl.CheckFailed, KernelLabSimulatorError)


def run_program(program: str, mutant: Mutant | None = None):
    """Run the cells; return None if they all ran, else the exception that stopped them."""
    namespace = {"__name__": "__mutation__"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for cell, source in program_sources(program, mutant):
                filename = f"<mutation test: {program}, cell {cell}>"
                # The simulator reads a failing kernel line from linecache, as it does for a notebook cell.
                linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
                exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    except MutantDoesNotApply:
        raise
    except Exception as error:  # noqa: BLE001 - whatever stopped the notebook's cells
        return error
    return None


@contextlib.contextmanager
def judging(seed: int = 20240516):
    """How mutants are judged: with a fixed seed (checks draw theirs from ``secrets``), so that the
    test is reproducible, and stopping at each check's first failure, which is all a verdict needs."""
    import kernel_lab.check as check

    real = secrets.randbits
    secrets.randbits = lambda k: seed % (1 << k)
    fast = getattr(check, "first_failure_only", contextlib.nullcontext)
    try:
        with fast():
            yield
    finally:
        secrets.randbits = real


# ---------------------------------------------------------------------------------------------
# The tests

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the mutation test runs in the simulator")


@pytest.fixture(scope="module", autouse=True)
def _setup():
    kl.setup(requires=["warp"], quiet=True)


def test_mutants_are_distinct_and_apply():
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)), "two mutants share a name"
    for m in MUTANTS:
        program_sources(m.program, m)


# Programs made of a notebook's cells as they are pass wherever the notebook passes (nbval runs it);
# those with a statement of the test's own must be seen to pass too, or their mutants prove nothing.
OWN_STATEMENTS = [name for name, (_, parts) in PROGRAMS.items() if any(p.startswith("=") for p in parts)]


@pytest.mark.parametrize("program", OWN_STATEMENTS)
def test_program_passes_unmutated(program):
    with judging():
        error = run_program(program)
    assert error is None, f"the unmutated program fails, so its mutants prove nothing: {error!r}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_mutant_is_caught(mutant):
    with judging():
        error = run_program(mutant.program, mutant)
    assert error is not None, f"the check passes a wrong kernel ({mutant.what}): {mutant.old!r} -> {mutant.new!r}"
    assert isinstance(error, _caught_types()), \
        f"the mutant stopped with {type(error).__name__}, not a check failure: {error}"
    # docs/mistakes.md quotes what the check says about each mutant (kernel_lab.mistakes_page).
    # A few mutants are caught through a race (uninitialised shared memory, which thread strays out of
    # bounds first), so the message can take one of several forms from run to run; the page quotes one.
    # A message that changed for good (new wording, a new check) never matches, whatever the retries.
    quoted = mistakes_page.expected(ROOT, mutant.id)
    said = [mistakes_page.summary(error)]
    while quoted is not None and not mistakes_page.matches(quoted, said[-1]) and len(said) < 4:
        with judging():
            again = run_program(mutant.program, mutant)
        said.append(mistakes_page.summary(again) if again is not None else "(passed)")
    assert mistakes_page.matches(quoted, said[-1]), (
        f"docs/mistakes.md {'quotes another message' if quoted else 'has no entry'} for {mutant.id!r} "
        f"(the check said, in {len(said)} run(s): {said}): run kernel-lab mistakes "
        "(python -m kernel_lab.mistakes_page) and commit the page")


def main() -> int:
    """Score every mutant, print the survivors (and the unmutated programs' state)."""
    kl.setup(requires=["warp"], quiet=True)
    caught_types = _caught_types()
    results = {"caught": [], "survived": [], "crashed": [], "not applicable": []}
    start = time.perf_counter()
    with judging():
        for program in PROGRAMS:
            try:
                error = run_program(program)
            except MutantDoesNotApply as e:
                print(f"program {program!r} does not apply: {e}")
                continue
            if error is not None:
                print(f"unmutated program {program!r} fails: {type(error).__name__}: {str(error)[:300]}")
        for m in MUTANTS:
            t0 = time.perf_counter()
            try:
                error = run_program(m.program, m)
            except MutantDoesNotApply as e:
                results["not applicable"].append((m, str(e)))
                continue
            kind = "survived" if error is None else "caught" if isinstance(error, caught_types) else "crashed"
            results[kind].append((m, error))
            print(f"{kind:>9}  {time.perf_counter() - t0:5.1f}s  {m.id}"
                  + (f"  [{type(error).__name__}: {str(error).splitlines()[0][:100]}]" if kind == "crashed" else ""),
                  flush=True)
    scored = len(results["caught"]) + len(results["survived"]) + len(results["crashed"])
    caught = len(results["caught"])
    print(f"\n{caught} of {scored} mutants caught ({100 * caught / max(scored, 1):.0f}%), "
          f"{len(results['survived'])} survived, {len(results['crashed'])} crashed, "
          f"{len(results['not applicable'])} not applicable; {time.perf_counter() - start:.0f} s")
    for m, _ in results["survived"]:
        print(f"  survived: {m.id}")
    for m, e in results["not applicable"]:
        print(f"  n/a: {m.id}: {e[:150]}")
    return 0 if not results["survived"] and not results["crashed"] else 1


if __name__ == "__main__":
    sys.exit(main())
