"""Module 06: the GPU smoke script's diagnosis of a wrong GEMM result (runs on the CPU).

The first GPU run of module 06 computed every value right and stored most in the wrong place
(a register partition mismatch). The smoke script now says so when it happens: these tests feed it
such a result, and an honestly wrong one, and check what it prints.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kernel_lab as kl

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_module06_smoke.py"


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_module06_smoke", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _want(m=200, n=150, k=64):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal((k, n)).astype(np.float16).astype(np.float64)
    return a @ b


def test_a_right_result_passes(smoke):
    want = _want()
    assert smoke._compare("fp16", want.astype(np.float32), want, "float16", 64, "identity") == "correct"


def test_values_stored_in_the_wrong_place_are_recognised(smoke):
    want = _want()
    got = want.astype(np.float32).copy()
    # swap rows 0-7 and 16-23 of every 128-row block tile, columns 8-15 only: right values, wrong place
    for r0 in range(0, want.shape[0] - 24, 128):
        got[r0:r0 + 8, 8:16], got[r0 + 16:r0 + 24, 8:16] = want[r0 + 16:r0 + 24, 8:16], want[r0:r0 + 8, 8:16]
    with pytest.raises(kl.CheckFailed) as info:
        smoke._compare("fp16 identity", got, want, "float16", 64, "identity")
    text = str(info.value)
    assert "elements are wrong" in text  # the checker's own message comes first
    assert "by (row mod 16, col mod 16)" in text
    lines = text.splitlines()
    row0 = next(line for line in lines if line.strip().startswith("row  0 "))
    cells = row0.rstrip()[-16:]
    assert cells[:8] == "........" and "." not in cells[8:], row0  # only columns 8-15 (mod 16) wrong
    assert "[0, 8] (tile position (0, 8))" in text
    assert "right value of tile position (16, 8)" in text


def test_values_computed_wrong_are_not_taken_for_a_permutation(smoke):
    want = _want()
    got = want.astype(np.float32) + 1000.0
    with pytest.raises(kl.CheckFailed) as info:
        smoke._compare("fp16 identity", got, want, "float16", 64, "identity")
    assert "right value of tile position no element of the tile" in str(info.value)


def test_integer_results_are_matched_exactly(smoke):
    want = np.arange(40 * 40, dtype=np.int64).reshape(40, 40)
    got = want.copy()
    got[3, 5], got[5, 3] = want[5, 3], want[3, 5]
    with pytest.raises(kl.CheckFailed) as info:
        smoke._compare("int8 identity", got.astype(np.int32), want, "int8", 64, "identity")
    assert "[3, 5] (tile position (3, 5)): got 203, want 125; the value got is the right value of tile position (5, 3)" \
        in str(info.value)
