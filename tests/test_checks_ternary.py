"""05.5's checks at full strength: each classic mistake of the 16-byte quantizer and of the warp GEMMs is
named, a kernel that never finishes is stopped and named, and the right kernels pass.

Runs under the simulator. The right kernels are the package's (kernel_lab.quant.ternary, the same code as
the notebook's solutions); each wrong kernel is one of them with one edit of its source (``mutant``).
"""

import inspect
import re
import textwrap
import time

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="wrong kernels are fed to the checks in the simulator")

kl.setup(requires=["warp"], quiet=True)
from numba import cuda  # noqa: E402

import kernel_lab.simulator as ksim  # noqa: E402
from kernel_lab import CheckFailed  # noqa: E402
from kernel_lab.checks import quantization as checks  # noqa: E402
from kernel_lab.quant import ternary  # noqa: E402
from kernel_lab.quant import warp as qwarp  # noqa: E402
from kernel_lab.reductions_gemm.scans import THREADS, persistent_blocks, zero_first  # noqa: E402

GEMM = [("1 x 8 x 1100", (1, 8, 1100)), ("6 x 3 x 137", (6, 3, 137))]


def mutant(fn, old, new, **extra_globals):
    """``fn`` (a kernel or device function) with ``old`` replaced by ``new`` in its source."""
    py = fn.py_func
    src = textwrap.dedent(inspect.getsource(py))
    assert old in src, f"{old!r} is not in {py.__name__}"
    src = re.sub(r"@cuda\.jit(\(.*\))?\n", "", src.replace(old, new))
    scope = dict(py.__globals__, **extra_globals)
    exec(compile(src, f"<mutant of {py.__name__}>", "exec"), scope)  # noqa: S102
    device = "device=True" in inspect.getsource(py).splitlines()[0]
    return cuda.jit(device=True)(scope[py.__name__]) if device else cuda.jit(scope[py.__name__])


def sum_launcher(kernel):
    def launch(total, x):
        flat = x.reshape(x.size)
        zero_first[1, 1](total)
        kernel[max(1, min(persistent_blocks(flat.size), -(-(flat.size // 4) // (4 * THREADS)))), THREADS](flat, total)
    return launch


def x16_launcher(pack=ternary.ternary_pack_x16, total_kernel=ternary.abs_sum_x4):
    def launch(packed, scale, w):
        total = cuda.device_array(1, np.float64)
        sum_launcher(total_kernel)(total, w)
        words = packed.reshape(packed.size).view(np.uint32)
        pack[max(1, -(-words.size // THREADS)), THREADS](w.reshape(w.size), total, words, scale)
    return launch


# --- the right kernels pass ----------------------------------------------------------------------

def abs_sum_4byte(total, x):
    zero_first[1, 1](total)
    ternary.abs_sum[persistent_blocks(x.size), THREADS](x, total)


def test_right_kernels_pass(capsys):
    checks.check_abs_sum(ternary.launch_abs_sum_x4)
    checks.check_abs_sum(abs_sum_4byte, name="abs sum (4-byte loads)")
    checks.check_ternary_quantize(ternary.launch_ternary_quantize_fast, whole_words=True)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_dp4a, shapes=GEMM)
    checks.check_ternary_gemm(ternary.launch_ternary_gemm_rows4, shapes=GEMM)
    out = capsys.readouterr().out
    assert out.count("abs sum") == 2 and "correct for all 4 sizes" in out
    assert "bit-exact for all 4 shapes (3 x 1424 (three trips of the sum)" in out
    assert out.count("correct for all 2 shapes") == 2


def test_the_shapes_take_every_path_at_the_persistent_grid():
    trip = 16 * THREADS * persistent_blocks(1 << 40)  # floats one trip of the x4 sum covers
    (label, (rows, cols)), *_ = checks.ternary_word_shapes()
    assert cols % 16 == 0 and 2 * trip < rows * cols < 3 * trip, "three trips of the sum, the last one partial"
    assert (rows * cols // 16) % THREADS, "the last block of words is partial"
    assert max(k for _, (_, _, k) in checks.ternary_gemm_shapes()) > 2 * 32 * 16, "a third 16-code word per lane"


# --- the sum with 16-byte loads ------------------------------------------------------------------

@pytest.mark.parametrize("old, new, named", [
    ("stride = uint64(cuda.gridDim.x) * uint64(4) * nb", "stride = uint64(cuda.gridDim.x) * nb",
     "added more than once"),
    ("while j < nq:", "if j < nq:", "only the first 2048 of the 4244 values"),
    ("        for k in range(4):", "        for k in range(3):", "about 3/4 of the sum"),
    ("            if jk < nq:", "            if j + uint64(3) * nb < nq:", "only the first 4096 of the 4244 values"),
    ("(float64(abs(a0)) + float64(abs(a1))) + (float64(abs(a2)) + float64(abs(a3)))",
     "(float64(a0) + float64(a1)) + (float64(a2) + float64(a3))", "the sum of x, not of |x|"),
    ("(float64(abs(a0)) + float64(abs(a1))) + (float64(abs(a2)) + float64(abs(a3)))",
     "float64((abs(a0) + abs(a1)) + (abs(a2) + abs(a3)))", "right to float32 precision only"),
    ("load4(x, uint64(4) * jk)", "load4(x, jk)", "misaligned 16-byte access"),
])
def test_abs_sum_mistakes_named(old, new, named):
    with pytest.raises(CheckFailed, match=re.escape(named)):
        checks.check_abs_sum(sum_launcher(mutant(ternary.abs_sum_x4, old, new)), seed=31)


def test_the_x4_launcher_refuses_a_size_that_is_not_whole_quads():
    with pytest.raises(kl.validate.KernelLabArgumentError, match="not a multiple of 4"):
        ternary.launch_abs_sum_x4(cuda.device_array(1, np.float64), cuda.to_device(np.ones(6, np.float32)))


def test_abs_sum_not_done_and_bad_sizes():
    @cuda.jit
    def stub(x, out):
        pass
    with pytest.raises(CheckFailed, match="nothing was added: is the exercise done"):
        checks.check_abs_sum(sum_launcher(stub), seed=32)
    with pytest.raises(ValueError, match="multiples of 4"):
        checks.check_abs_sum(sum_launcher(ternary.abs_sum_x4), sizes=[("n = 6", 6)])


# --- sixteen codes a word --------------------------------------------------------------------------

@pytest.mark.parametrize("old, new, named", [
    ("load4(w, uint64(16) * g + uint64(4 * k))", "load4(w, uint64(4) * g + uint64(4 * k))",
     "word g holds the codes of weights 4g..4g+15"),
    ("<< uint32(2 * t)", "<< uint32(2 * (15 - t))", "the sixteen codes of each word are in reverse order"),
    ("    for k in range(4):", "    for k in range(3):", "only codes 12-15 of each word's sixteen are wrong"),
])
def test_x16_pack_mistakes_named(old, new, named):
    bad = mutant(ternary.ternary_pack_x16, old, new)
    with pytest.raises(CheckFailed, match=re.escape(named)):
        checks.check_ternary_quantize(x16_launcher(pack=bad), whole_words=True, seed=33)


def test_a_wrong_sum_is_named_by_the_quantizer_check():
    bad = mutant(ternary.abs_sum_x4, "stride = uint64(cuda.gridDim.x) * uint64(4) * nb",
                 "stride = uint64(cuda.gridDim.x) * nb")
    with pytest.raises(CheckFailed, match="the sum of \\|w\\| added some weights more than once"):
        checks.check_ternary_quantize(x16_launcher(total_kernel=bad), whole_words=True, seed=34)


# --- the warp GEMMs --------------------------------------------------------------------------------

def dp4a_launcher(kernel):
    def launch(out, a, a_scale, w_packed, w_scale):
        grid = (-(-out.shape[1] // ternary.WARPS_PER_BLOCK), out.shape[0])
        kernel[grid, 32 * ternary.WARPS_PER_BLOCK](ternary.activation_words(a), a_scale, w_packed, w_scale, out,
                                                   ternary.ternary_lut_device())
    return launch


def rows4_launcher(kernel):
    def launch(out, a, a_scale, w_packed, w_scale):
        grid = (-(-out.shape[1] // ternary.WARPS_PER_BLOCK), -(-out.shape[0] // ternary.ROWS))
        kernel[grid, 32 * ternary.WARPS_PER_BLOCK](ternary.activation_words(a, ternary.ROWS), a_scale,
                                                   ternary.weight_words(w_packed), w_scale, out,
                                                   ternary.ternary_lut_device())
    return launch


def test_lanes_that_stop_after_their_first_byte_or_word_are_named():
    bad = mutant(ternary.ternary_gemm_dp4a, "range(lane, w_packed.shape[1], 32)",
                 "range(lane, min(w_packed.shape[1], 32), 32)")
    with pytest.raises(CheckFailed, match="only the first 128 values of K were added: each lane took its first byte"):
        checks.check_ternary_gemm(dp4a_launcher(bad), shapes=GEMM, seed=35)
    bad = mutant(ternary.ternary_gemm_rows4, "range(lane, w_words.shape[1], 32)",
                 "range(lane, min(w_words.shape[1], 32), 32)")
    with pytest.raises(CheckFailed, match="only the first 512 values of K were added: each lane took its first 16-code"):
        checks.check_ternary_gemm(rows4_launcher(bad), shapes=GEMM, seed=36)


def test_lane_partial_sums_never_added_are_named():
    bad = mutant(ternary.ternary_gemm_dp4a, "acc = warp_sum(acc)", "acc = acc")
    with pytest.raises(CheckFailed, match="only lane 0's share of K"):
        checks.check_ternary_gemm(dp4a_launcher(bad), shapes=GEMM, seed=37)


def test_rows_reading_the_first_rows_activations_are_named():
    bad = mutant(ternary.ternary_gemm_rows4, "acc2 = dp4a(a_words[r2, j], wt, acc2)",
                 "acc2 = dp4a(a_words[m0, j], wt, acc2)")
    with pytest.raises(CheckFailed, match="rows 4i\\+2 hold row 4i's product"):
        checks.check_ternary_gemm(rows4_launcher(bad), shapes=GEMM[1:], seed=38)


# --- a kernel that never finishes ------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_a_warp_sum_that_never_ends_is_stopped_and_named(monkeypatch):
    """The classic: ``while off >= 0`` with ``off //= 2`` (0 // 2 is 0). Its lanes keep meeting in the
    shuffle, which the deadlock detection counts as progress: only the check's time limit stops it."""
    monkeypatch.setattr(checks, "TIME_LIMIT_S", 2.0)
    endless = mutant(qwarp.warp_sum, "while off > 0:", "while off >= 0:")
    bad = mutant(ternary.ternary_gemm_dp4a, "acc = warp_sum(acc)", "acc = endless(acc)", endless=endless)
    start = time.monotonic()
    with pytest.raises(CheckFailed) as caught:
        checks.check_ternary_gemm(dp4a_launcher(bad), shapes=GEMM[:1], seed=39)
    text = str(caught.value)
    assert text.startswith("ternary gemm: your kernel did not finish: it was still running after 2 s")
    assert "Hint: a loop that does not end" in text
    assert "(in warp_sum)" in text or "(in ternary_gemm_dp4a)" in text  # where its threads were
    assert time.monotonic() - start < 30


def test_on_a_gpu_a_kernel_still_running_is_reported(monkeypatch, capsys):
    """A GPU cannot stop a kernel: after GPU_WATCHDOG_S the check says what is probably happening."""
    monkeypatch.setattr(checks, "on_simulator", lambda: False)
    monkeypatch.setattr(checks, "GPU_WATCHDOG_S", 0.05)
    monkeypatch.setattr(cuda, "synchronize", lambda: time.sleep(0.5))
    checks._run("demo", lambda: None)
    err = capsys.readouterr().err
    assert "demo: your kernel has been running for 0.05 s and has not finished" in err
    assert "restart the notebook's kernel" in err
    monkeypatch.setattr(cuda, "synchronize", lambda: None)
    checks._run("quick", lambda: None)
    time.sleep(0.1)
    assert "quick" not in capsys.readouterr().err


def test_the_simulators_time_limit():
    @cuda.jit
    def spin_in_shuffles(out):
        v = cuda.threadIdx.x
        off = 1
        while off > 0:  # never changes
            v = cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
        out[0] = v

    out = cuda.to_device(np.zeros(1, np.int64))
    with pytest.raises(ksim.KernelDidNotFinish, match="still running after 1 s") as caught:
        with ksim.time_limit(1):
            spin_in_shuffles[1, 32](out)
    assert "32 threads" in str(caught.value) and "spin_in_shuffles" in str(caught.value)
    assert ksim.settings.deadline is None, "the limit ends with its block"
    with ksim.time_limit(5):
        first = ksim.settings.deadline
        with ksim.time_limit(60):
            assert ksim.settings.deadline == first, "a nested limit keeps the earlier deadline"
    with pytest.raises(ValueError, match="positive"):
        ksim.time_limit(0)
