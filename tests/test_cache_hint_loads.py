"""cuda.ldcv / cuda.ldcg compile to loads the compiler may not move (kernel_lab.cache_hint_loads), and
kl.load_acquire to an acquire load (kernel_lab.acquire), the one a look-back polls its flags with.

numba-cuda emits them as side-effect-free inline PTX, which NVVM hoisted out of a polling loop (the
PTX of `while f == 0: f = cuda.ldcv(flags, j)` became a branch to itself) and which let module 02's
single-pass scan read a total before its flag on an H100. These tests run in a child process with
Numba's real CUDA target selected (no GPU needed: nothing is compiled for a device).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import os
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from llvmlite import ir
from numba.cuda import cache_hints as ch
from kernel_lab import cache_hint_loads as chl

import kernel_lab  # on Numba's CUDA target, the import installs the ordered loads
assert chl.install()  # and a second call is harmless
for op in ("ca", "cg", "cs", "lu", "cv"):
    name = f"ld{op}_intrinsic"
    assert getattr(ch, name) is chl.installed[name], op
fn = ir.FunctionType(ir.IntType(32), [ir.IntType(32).as_pointer()])
text = str(chl.load_asm(fn, "cv", 32))
assert "sideeffect" in text and "~{memory}" in text and "ld.global.cv.b32" in text, text
from kernel_lab import acquire
assert kernel_lab.load_acquire is acquire.load_acquire and hasattr(kernel_lab.load_acquire, "_defn")  # an intrinsic
text = str(acquire.acquire_asm(fn, 32))
assert "sideeffect" in text and "~{memory}" in text and "ld.acquire.gpu.global.b32" in text, text
text = str(acquire.acquire_asm(fn, 32, scope="sys"))  # module 09's flag poll over NVLink
assert "ld.acquire.sys.global.b32" in text and "sideeffect" in text, text
assert hasattr(acquire.load_acquire_system, "_defn")
print("ok")
"""


@pytest.mark.skipif(sys.platform != "linux", reason="numba-cuda's CUDA target imports on Linux")
def test_cache_hint_loads_are_ordered():
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'utilities'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_the_unpatched_asm_is_what_the_fix_is_for():
    # The defect the module exists for: numba-cuda's own load is built without side effects.
    from numba.cuda import cache_hints as ch  # the simulator has none: skip there
    assert "side_effect=True" not in Path(ch.__file__).read_text()


def test_load_acquire_is_a_plain_read_in_the_simulator():
    import numpy as np

    import kernel_lab as kl

    if not kl.on_simulator():
        pytest.skip("the simulator's version")
    assert kl.load_acquire(np.array([3, 4], np.int32), 1) == 4
