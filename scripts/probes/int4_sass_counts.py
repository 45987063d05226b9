#!/usr/bin/env python3
"""Probe (notebook 05.2): how many instructions a value each step of the INT4 quantizer issues.

    python scripts/probes/int4_sass_counts.py          # no GPU needed: compiles for sm_90

Notebook 05.2 explains its quantizer's speed by instructions per value against the GPU's budget
(128 thread-instructions per SM and clock, shared by the values the copy roofline moves in that
time: about 50 per value on an H100, 35 on an H200). This script gives the counts its prose quotes.
Each step is compiled for sm_90 (Numba's GPU target, ``ptxas``), disassembled (``cuobjdump -sass``)
and counted on the path a warp takes on rows of 8192 values: the kernel's instructions up to its
last EXIT, less the calls into slow paths (the IEEE division's, taken only for operands near the ends
of float32's range, and the 64-bit integer division's, taken only for operands past 32 bits) and,
for the 16-byte forms, with the scalar path of rows that are not 16-byte
aligned cut out of the source first (see ``aligned_only``). The 2-D grid of exercise 3 is the
notebook's four lines, written out below. The count is static: both sides of a branch count, so a
count is an upper bound, good for comparing the steps rather than for exact budgets.

It re-executes itself with the stand-in driver of ``kernel_lab.tensor_cores.offline`` (as
``scripts/module05_offline_compile.py`` does). Needs NVVM and NVRTC (a CUDA toolkit or the
nvidia-*-cu13 wheels), ``ptxas`` and ``cuobjdump`` with ``nvdisasm`` on PATH (the wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry them).
"""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Exercise 3's kernel, as the notebook has the learner write it (the package keeps no copy of it).
ROWS_SCALAR = '''
def int4_quantize_rows(x, packed, scales):
    g = cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32
    if g >= scales.shape[1]:
        return
    quantize_group(x, packed, scales, cuda.blockIdx.y, g, cuda.threadIdx.x % 32)
'''


def aligned_only(fn) -> str:
    """The kernel's source without its branch for rows that are not 16-byte aligned (an ``if`` on
    ``cols`` whose body ends in ``return``): the path the notebook's 8192-wide rows take."""
    src = textwrap.dedent(inspect.getsource(fn.py_func))
    src = re.sub(r"@cuda\.jit[^\n]*\n", "", src)
    src, n = re.subn(r"\n    if [^\n]*cols[^\n]*(?:!= 0|!= uint64\(0\))[^\n]*\n(?:        [^\n]*\n)*?        return\n", "\n",
                     src, count=1)
    assert n == 1, f"{fn.__name__}: no branch for unaligned rows found"
    return src


def hot_path(sass: str) -> tuple[int, int]:
    """(instructions up to the kernel's last EXIT, of them in calls to slow paths)."""
    ins = [re.sub(r"^/\*[0-9a-f]{4}\*/\s*", "", re.sub(r"\s*;.*", "", ln).strip())
           for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", ln)]
    ins = [i for i in ins if i != "NOP"]
    last = max(k for k, i in enumerate(ins) if i.endswith("EXIT") and not i.startswith("@"))
    body, slow = ins[: last + 1], 0
    for k, i in enumerate(body):
        if i.startswith("CALL"):  # from the branch that jumps over the call to the BSYNC after it
            j = k
            while "BRA" not in body[j]:
                j -= 1
            e = k
            while not body[e].startswith("BSYNC"):
                e += 1
            slow += e - j - 1
    return len(body), slow


def _count():
    sys.path.insert(0, str(ROOT / "utilities"))
    import kernel_lab  # noqa: F401  (the GPU target: NUMBA_ENABLE_CUDASIM=0 set by the parent)
    import numba.cuda.dispatcher as numba_dispatcher
    from numba import cuda, types

    from kernel_lab.tensor_cores import offline

    numba_dispatcher.get_current_device = lambda: offline._PretendDevice((9, 0))
    from kernel_lab.quant import int4 as I4

    f32m, u8m, u16m = (types.Array(t, 2, "C") for t in (types.float32, types.uint8, types.uint16))
    scope = dict(vars(I4))
    exec(compile(ROWS_SCALAR, "<exercise 3>", "exec"), scope)  # noqa: S102
    steps = [("exercise 1: flat grid", I4.int4_quantize_groups.py_func, (f32m, u8m, f32m), 4),
             ("exercise 3: 2-D grid", scope["int4_quantize_rows"], (f32m, u8m, f32m), 4)]
    for label, fn, per_lane in (("exercise 4: 16-byte accesses", I4.int4_quantize_rows_x4, 4),
                                ("exercise 5: unsigned indices", I4.int4_quantize_rows_u64, 4),
                                ("exercise 6: a group on 16 lanes", I4.int4_quantize_rows_x8, 8)):
        exec(compile(aligned_only(fn), f"<{fn.__name__}, aligned rows>", "exec"), scope)  # noqa: S102
        steps.append((label, scope[fn.__name__], (f32m, u8m, u16m, f32m), per_lane))
    with tempfile.TemporaryDirectory() as tmp:
        for label, fn, sig, per_lane in steps:
            ptx, _ = cuda.compile(fn, sig, cc=(9, 0), output="ptx", device=False, abi="numba")
            p, c = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
            p.write_text(ptx)
            subprocess.run(["ptxas", "-arch=sm_90", "-O3", str(p), "-o", str(c)], check=True)
            sass = subprocess.run(["cuobjdump", "-sass", str(c)], capture_output=True, text=True, check=True).stdout
            total, slow = hot_path(sass)
            # a warp's instructions serve 32 lanes' values; the budget counts thread-instructions
            print(f"{label:<34} {total - slow:4d} instructions a warp ({slow} in slow paths left out): "
                  f"about {(total - slow) / per_lane:.0f} a value ({per_lane} values a lane)")


def main():
    if "--child" not in sys.argv:
        missing = [t for t in ("ptxas", "cuobjdump", "nvdisasm") if shutil.which(t) is None]
        if missing:
            sys.exit(f"needs {', '.join(missing)} on PATH (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; "
                     "ptxas comes with a CUDA toolkit)")
        sys.path.insert(0, str(ROOT / "utilities"))
        from kernel_lab.tensor_cores.offline import stand_in_environment

        sys.exit(subprocess.call([sys.executable, __file__, "--child"], env=stand_in_environment()))
    _count()


if __name__ == "__main__":
    main()
