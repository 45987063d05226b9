"""kernel_lab.checks.hopper_wgmma (08.3): the package's copies of the learner's descriptors, step and
K loop pass; each classic mistake, fed to its check as a wrong copy, is named. The wrong copies are the
package's with one edit, as the mutants of tests/test_mutation_checks.py are the notebook's. These
tests run every exercise of 08.3 in the simulator, which nbval cannot until a GPU stores the notebook."""

from __future__ import annotations

import inspect
import textwrap

import kernel_lab as kl
import kernel_lab.simulator as ksim
import numpy as np  # noqa: F401  (the edited functions' globals)
import pytest
from kernel_lab.check import CheckFailed
from kernel_lab.checks import hopper_wgmma as checks
from kernel_lab.hopper_async import wgmma_gemm as wg

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the checks' mistakes are named by the simulator's model")

HANG_S = 5  # a wrong kernel that hangs is stopped after this (the right ones take about a second)


@pytest.fixture(autouse=True)
def _bounded(monkeypatch):
    monkeypatch.setattr(checks, "SMALL_S", HANG_S)
    with ksim.time_limit(120):  # nothing here may spin for ever
        yield


def edited(function, edits, **names):
    """The package's ``function`` with each ``(old, new)`` of ``edits`` applied (``old`` found once),
    compiled with the package module's globals and ``names`` over them."""
    from numba import cuda

    fn = getattr(function, "py_func", None) or getattr(function, "fn", function)
    source = textwrap.dedent(inspect.getsource(fn))
    for old, new in edits:
        assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times"
        source = source.replace(old, new)
    device = source.startswith("@cuda.jit(device=True)")
    source = source.split("\n", 1)[1]  # the decorator
    namespace = dict(vars(wg), **names)
    exec(compile(source, f"<edited {fn.__name__}>", "exec"), namespace)  # noqa: S102
    return cuda.jit(device=True)(namespace[fn.__name__]) if device else cuda.jit(namespace[fn.__name__])


def test_the_package_copies_pass(capsys):
    checks.check_descriptors(wg.make_desc, wg.tile_descriptors)
    checks.check_wgmma_step(wg.wgmma_step)
    checks.check_wgmma_gemm(wg.wgmma_gemm)
    out = capsys.readouterr().out
    assert out.count("correct") == 3, out


MAKE_DESC_MISTAKES = [
    ([("desc |= ((lbo & 0x3FFFF) >> 4) << 16", "desc |= (lbo & 0x3FFFF) << 16")], "the byte offset 128 itself"),
    ([("desc = (start & 0x3FFFF) >> 4", "desc = start & 0x3FFFF")], "divided by 16"),
    ([("code = 1 if swizzle == 128 else 2 if swizzle == 64 else 3 if swizzle == 32 else 0",
       "code = 3 if swizzle == 128 else 2 if swizzle == 64 else 1 if swizzle == 32 else 0")], "the modes are 1 = 128 B"),
    ([("desc |= code << 62", "desc |= swizzle << 62")], "bits 62-63 hold mode"),
    ([(">> 4) << 16", ">> 4) << 99"), (">> 4) << 32", ">> 4) << 16"), (">> 4) << 99", ">> 4) << 32")],
     "LBO and SBO are swapped"),
]


@pytest.mark.parametrize("edits, message", MAKE_DESC_MISTAKES, ids=[m[1] for m in MAKE_DESC_MISTAKES])
def test_make_desc_mistakes_are_named(edits, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_descriptors(edited(wg.make_desc, edits), wg.tile_descriptors)


TILE_MISTAKES = [
    ("desc_a = make_desc(smem_start(sa, (0, 0)), 128, 256, 0)", "desc_a = make_desc(smem_start(sa, (0, 0)), 256, 128, 0)",
     "LBO and SBO are swapped"),
    ("desc_b = make_desc(smem_start(sb, (0, 0)), 128, 256, 0)", "desc_b = make_desc(smem_start(sa, (0, 0)), 128, 256, 0)",
     "starts at A's tile"),
    ("desc_a = make_desc(smem_start(sa, (0, 0)), 128, 256, 0)", "desc_a = make_desc(smem_start(sa, (0, 0)), 128, 256, 32)",
     "bits 62-63 hold mode 3"),
    ("desc_b = make_desc(smem_start(sb, (0, 0)), 128, 256, 0)", "desc_b = make_desc(smem_start(sb, (0, 0)), 128, 128, 0)",
     r"SBO field holds 8 \(128 bytes\), expected 16"),
]


@pytest.mark.parametrize("old, new, message", TILE_MISTAKES, ids=[m[2] for m in TILE_MISTAKES])
def test_tile_descriptor_mistakes_are_named(old, new, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_descriptors(wg.make_desc, edited(wg.tile_descriptors, [(old, new)]))


STEP_MISTAKES = [
    ("    wgmma_wait_group(0)  #", "    pass  #", "read before the tensor cores wrote it"),
    ("    wgmma_fence()  #", "    pass  #", "before any wgmma_fence"),
    ("    wgmma_commit_group()  #", "    pass  #", "never committed"),
]


@pytest.mark.parametrize("old, new, message", STEP_MISTAKES, ids=[m[2] for m in STEP_MISTAKES])
def test_step_protocol_mistakes_are_named(old, new, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_wgmma_step(edited(wg.wgmma_step, [(old, new)]))


STORE_MISTAKES = [
    ([("c[row, col + 8 * j] = acc[4 * j]", "c[col + 8 * j, row] = acc[4 * j]"),
      ("c[row, col + 8 * j + 1] = acc[4 * j + 1]", "c[col + 8 * j + 1, row] = acc[4 * j + 1]"),
      ("c[row + 8, col + 8 * j] = acc[4 * j + 2]", "c[col + 8 * j, row + 8] = acc[4 * j + 2]"),
      ("c[row + 8, col + 8 * j + 1] = acc[4 * j + 3]", "c[col + 8 * j + 1, row + 8] = acc[4 * j + 3]")],
     "rows and columns swapped"),
    ([("c[row, col + 8 * j + 1] = acc[4 * j + 1]", "c[row, col + 8 * j + 1] = acc[4 * j + 2]"),
      ("c[row + 8, col + 8 * j] = acc[4 * j + 2]", "c[row + 8, col + 8 * j] = acc[4 * j + 1]")],
     "another element of the product"),
    ([("c[row + 8, col + 8 * j] = acc[4 * j + 2]", "c[row, col + 8 * j] = acc[4 * j + 2]"),
      ("c[row + 8, col + 8 * j + 1] = acc[4 * j + 3]", "c[row, col + 8 * j + 1] = acc[4 * j + 3]")],
     "never written"),
]


@pytest.mark.parametrize("edits, message", STORE_MISTAKES, ids=[m[1] for m in STORE_MISTAKES])
def test_store_mistakes_are_named(edits, message):
    store = edited(wg.store_fragment, edits)
    with pytest.raises(CheckFailed, match=message):
        checks.check_wgmma_step(edited(wg.wgmma_step, [], store_fragment=store))


GEMM_MISTAKES = [
    ([("make_desc(start_a + 32 * ks,", "make_desc(start_a,"), ("make_desc(start_b + 32 * ks,", "make_desc(start_b,")],
     "read the same K-step"),
    ([("acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 1)", "acc = wgmma_mma_async_f16(desc_a, desc_b, acc, 0)")],
     "the last K-step"),
    ([("    wgmma_wait_group(0)\n", "")], "read before the tensor cores wrote it"),
    ([("(kt + 1) * BK, 1 - s)", "(kt + 1) * BK, s)")], "written while the wgmma was in flight"),
    ([("smem_start(sa, (s, 0, 0))", "smem_start(sa, (0, 0, 0))")], "in flight"),
    ([("make_desc(start_a + 32 * ks, 16, 1024, 128)", "make_desc(start_a + 16 * ks, 16, 1024, 128)")],
     "elements of C wrong"),
]


@pytest.mark.parametrize("edits, message", GEMM_MISTAKES, ids=[m[1] for m in GEMM_MISTAKES])
def test_gemm_mistakes_are_named(edits, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_wgmma_gemm(edited(wg.wgmma_gemm, edits))
