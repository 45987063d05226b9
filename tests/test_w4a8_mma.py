"""The tensor-core W4A8 (``kernel_lab.quant.w4a8_mma``) and the int8 ``mma`` it is made of, in the
simulator, where ``mma_ptx.mma_s8`` computes the instruction's documented fragment layout with warp
shuffles: the instruction against NumPy, the kernel against the float64 reference for every tile
parameter (one and two weight tiles a warp, one and several K-warps, activation rows over several
blocks, weight rows that leave a warp's tile part empty), the DP4A fallback, and two mutants the
check must catch. On a GPU: scripts/probes/w4a8_variants.py and notebook 05.6."""

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="the mma.sync kernels are checked in the simulator "
                                "here; on a GPU the probe and notebook 05.6 check them")

kl.setup(quiet=True)

from numba import cuda  # noqa: E402

from kernel_lab import mma_ptx as ptx  # noqa: E402
from kernel_lab.check import CheckFailed  # noqa: E402
from kernel_lab.checks import quantization as checks  # noqa: E402
from kernel_lab.device.dp4a import EVEN_BYTES  # noqa: E402
from kernel_lab.quant import integer as qref  # noqa: E402
from kernel_lab.quant import w4a8  # noqa: E402
from kernel_lab.quant import w4a8_mma as wm  # noqa: E402
from kernel_lab.validate import KernelLabArgumentError  # noqa: E402


def test_mma_s8_matches_the_documented_fragment_layout():
    # A (16 x 32) and B (32 x 8) int8 in the registers the PTX manual gives lane (g, t), four bytes a
    # register; D = A B + C in int32, read back the same way (C near the int32 limits: it wraps)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    b = rng.integers(-128, 128, (32, 8)).astype(np.int8)
    c = rng.integers(-2**31, 2**31 - 1, (16, 8), dtype=np.int64).astype(np.int32)
    aw = a.view(np.int32)  # (16, 8): word j of row r holds A[r, 4j:4j+4]
    btw = np.ascontiguousarray(b.T).view(np.int32)  # (8, 8): word j of column n holds B[4j:4j+4, n]
    out = np.zeros((16, 8), np.int32)

    @cuda.jit
    def one_mma(out, aw, btw, c):
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        d0, d1, d2, d3 = ptx.mma_s8(aw[g, t], aw[g + 8, t], aw[g, t + 4], aw[g + 8, t + 4], btw[g, t], btw[g, t + 4],
                                    c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
        out[g, 2 * t], out[g, 2 * t + 1], out[g + 8, 2 * t], out[g + 8, 2 * t + 1] = d0, d1, d2, d3

    one_mma[1, 32](out, aw, btw, c)
    want = (a.astype(np.int64) @ b.astype(np.int64) + c).astype(np.int32)  # wraps like the instruction
    np.testing.assert_array_equal(out, want)


def test_global_address_takes_a_row_and_column_as_on_a_gpu():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)
    assert ptx.global_address(a, (2, 3)) - ptx.global_address(a, 0) == 4 * (2 * 6 + 3)


PARAMS = [dict(NT=1, MTILES=1, WR=1, WK=1), dict(NT=1, MTILES=2, WR=2, WK=2), dict(NT=2, MTILES=1, WR=1, WK=3),
          dict(NT=1, MTILES=2, WR=1, WK=1), dict(NT=2, MTILES=2, WR=1, WK=2, form="tokens-inner"),
          dict(NT=1, MTILES=1, WR=2, WK=3, form="tokens-inner")]
# (M, N, K): several activation tiles over gridDim.y, N leaving a warp's weight tile part empty,
# K of one group and of five (more groups than K-warps, and not a multiple of them)
SHAPES = [("9 x 19 x 256", (9, 19, 256)), ("3 x 40 x 640", (3, 40, 640)), ("17 x 5 x 128", (17, 5, 128))]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_the_tensor_core_w4a8_is_right_for_every_tile_shape(params, capsys):
    checks.check_w4a8_gemm(lambda *a: wm.launch_w4a8_mma(*a, **params), shapes=SHAPES)
    assert "correct for all 3 shapes" in capsys.readouterr().out


def test_the_package_w4a8_takes_the_tensor_cores_from_two_rows_and_gives_the_dp4a_bits_otherwise():
    rng = np.random.default_rng(3)
    for m, k in ((1, 256), (3, 136)):  # one row: DP4A; K not whole groups of 128: DP4A from the tensor-core launcher
        wf = rng.standard_normal((7, k)).astype(np.float32)
        ws = qref.int4_group_scales_f32(wf)
        w32 = cuda.to_device(qref.int4_pack(qref.int4_quantize_f32(wf, ws)).view(np.int32))
        xq, xs = qref.int8_per_row_f32(rng.standard_normal((m, k)).astype(np.float32))
        args = (cuda.to_device(qref.as_words(xq)), cuda.to_device(xs), w32, cuda.to_device(ws))
        outs = []
        launches = (w4a8.launch_w4a8_gemm_words, wm.launch_w4a8_fast) + ((wm.launch_w4a8_mma,) if k % 128 else ())
        for launch in launches:
            y = cuda.to_device(np.full((m, 7), np.nan, np.float32))
            launch(y, *args)
            outs.append(y.copy_to_host().view(np.uint32))
        assert all(np.array_equal(outs[0], other) for other in outs[1:]), (m, k)
    assert wm.choose(64, 14336) == dict(NT=8, MTILES=2, WR=4, WK=2, form="tokens-inner")
    assert wm.choose(16, 14336) == dict(NT=2, MTILES=1, WR=2, WK=4)
    assert wm.choose(5, 4096) == dict(NT=1, MTILES=1, WR=1, WK=8)


@pytest.mark.parametrize("mutant", ["even and odd bytes swapped", "K-warps' sums dropped"])
def test_the_check_catches_a_broken_tensor_core_w4a8(mutant, monkeypatch):
    # the kernel's Python runs in the simulator, reading these names from the module when called
    if mutant == "even and odd bytes swapped":
        monkeypatch.setattr(wm, "EVEN_BYTES", wm.ODD_BYTES)
        monkeypatch.setattr(wm, "ODD_BYTES", EVEN_BYTES)
    else:
        monkeypatch.setattr(wm, "bits_float", lambda bits: np.float32(0.0))
    with pytest.raises(CheckFailed):
        checks.check_w4a8_gemm(lambda *a: wm.launch_w4a8_mma(*a, NT=1, MTILES=1, WR=1, WK=2),
                               shapes=[("3 x 8 x 512", (3, 8, 512))])


def test_bad_arguments_are_named():
    y = cuda.device_array((2, 3), np.float32)
    a32 = cuda.device_array((2, 64), np.int32)
    w32 = cuda.device_array((3, 16), np.int32)
    with pytest.raises(KernelLabArgumentError, match="pad both"):
        wm.launch_w4a8_mma(y, a32, cuda.device_array(2, np.float32), w32, cuda.device_array((3, 1), np.float32))
    with pytest.raises(KernelLabArgumentError, match="one per 128"):
        wm.launch_w4a8_mma(y, cuda.device_array((2, 64), np.int32), cuda.device_array(2, np.float32),
                           cuda.device_array((3, 32), np.int32), cuda.device_array((3, 1), np.float32))
    with pytest.raises(KernelLabArgumentError, match="SPLIT"):  # a removed form's parameter is not ignored
        wm.launch_w4a8_mma(y, a32, cuda.device_array(2, np.float32), cuda.device_array((3, 32), np.int32),
                           cuda.device_array((3, 2), np.float32), SPLIT=2)
    with pytest.raises(KernelLabArgumentError, match="form must be one of"):
        wm.launch_w4a8_mma(y, a32, cuda.device_array(2, np.float32), cuda.device_array((3, 32), np.int32),
                           cuda.device_array((3, 2), np.float32), form="resident")


def test_choose_takes_the_largest_blocks_that_fill_the_gpu():
    """The tile rule of ``choose`` on the three layers the probe measured (132 SMs) and on a GPU
    with half the SMs, where 8192 rows fill it with the largest blocks."""
    assert wm.choose(64, 14336, 132) == dict(NT=8, MTILES=2, WR=4, WK=2, form="tokens-inner")
    assert wm.choose(64, 8192, 132) == dict(NT=8, MTILES=2, WR=2, WK=4, form="tokens-inner")
    assert wm.choose(64, 4096, 132) == dict(NT=8, MTILES=2, WR=1, WK=8, form="direct")
    assert wm.choose(64, 8192, 66)["WR"] == 4
    assert wm.choose(16, 14336, 132) == dict(NT=2, MTILES=1, WR=2, WK=4)
    assert wm.choose(16, 8192, 132) == dict(NT=2, MTILES=1, WR=1, WK=8)
    assert wm.choose(3, 4096, 132) == dict(NT=1, MTILES=1, WR=1, WK=8)
