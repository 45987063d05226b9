"""Module 06: GEMM argument validation, the quiz checker, and the codegen cache's pure parts."""

import numpy as np
import pytest

from kernel_lab.tensor_cores import codegen_cache, epilogues, quiz
from kernel_lab.tensor_cores import validate as v
from numba import cuda  # noqa: E402  (after kernel_lab, which chose GPU or simulator)


def arr(shape, dtype=np.float16, order="C"):
    return np.zeros(shape, dtype=dtype, order=order)


def test_a_correct_gemm_passes():
    v.check_gemm(arr((5, 7)), arr((7, 3)), arr((5, 3), np.float32), m=5, n=3, k=7, precision="float16",
                 out_dtype=np.float32)
    v.check_gemm(arr((2, 5, 7)), arr((1, 7, 3)), arr((2, 5, 3), np.float32), m=5, n=3, k=7,
                 precision="float16", out_dtype=np.float32)


@pytest.mark.parametrize("a, b, out, kw, message", [
    (arr((5, 7)), arr((6, 3)), arr((5, 3), np.float32), dict(m=5, n=3, k=7), "inner dimensions differ"),
    (arr((5, 7), np.float32), arr((7, 3)), arr((5, 3), np.float32), dict(m=5, n=3, k=7), "a has dtype float32"),
    (arr((5, 7)), arr((7, 3)), arr((5, 3), np.float16), dict(m=5, n=3, k=7), "epilogue writes float32"),
    (arr((7, 5)).T, arr((7, 3)), arr((5, 3), np.float32), dict(m=5, n=3, k=7), "not a dense row-major"),
    (arr((5, 7)), arr((7, 3)), arr((4, 3), np.float32), dict(m=5, n=3, k=7), "out has 4 rows"),
    (arr((5,)), arr((7, 3)), arr((5, 3), np.float32), dict(m=5, n=3, k=7), "must be 2-D"),
    (arr((3, 5, 7)), arr((7, 3)), arr((2, 5, 3), np.float32), dict(m=5, n=3, k=7), "batch of 3"),
])
def test_each_mistake_gets_its_sentence(a, b, out, kw, message):
    with pytest.raises(v.GemmArgumentError, match=message):
        v.check_gemm(a, b, out, precision="float16", out_dtype=np.float32, **kw)


def test_precision_specific_dtypes_and_int4_packing():
    v.check_gemm(arr((4, 8), np.float32), arr((8, 4), np.float32), arr((4, 4), np.float32), m=4, n=4, k=8,
                 precision="tf32", out_dtype=np.float32)
    with pytest.raises(v.GemmArgumentError, match="tf32 operands are float32"):
        v.check_gemm(arr((4, 8)), arr((8, 4)), arr((4, 4), np.float32), m=4, n=4, k=8, precision="tf32",
                     out_dtype=np.float32)
    v.check_gemm(arr((4, 8), np.int8), arr((8, 3), np.uint8), arr((4, 6), np.int32), m=4, n=6, k=8,
                 precision="int4", out_dtype=np.int32)
    with pytest.raises(v.GemmArgumentError, match="pack_int4"):
        v.check_gemm(arr((4, 8), np.int8), arr((8, 6), np.int8), arr((4, 6), np.int32), m=4, n=6, k=8,
                     precision="int4", out_dtype=np.int32)


def test_pipeline_and_alignment_checks():
    v.check_pipeline(arr((8, 64), np.int8), arr((4, 64), np.int8), arr((8, 4), np.int32), precision="int8",
                     out_dtype=np.int32)
    with pytest.raises(v.GemmArgumentError, match="b_t is B transposed"):
        v.check_pipeline(arr((8, 64), np.int8), arr((64, 4), np.int8), arr((8, 4), np.int32), precision="int8",
                         out_dtype=np.int32)
    odd = np.zeros(100, np.int8)[1:65].reshape(8, 8)
    with pytest.raises(v.GemmArgumentError, match="multiple of 16 bytes"):
        v.check_alignment(odd, "a")
    rows = v.ArrayInfo((4, 3), np.dtype(np.int8), (3, 1), 0)
    with pytest.raises(v.GemmArgumentError, match="rows are 3 bytes apart"):
        v.check_alignment(rows, "a")


def test_epilogue_arguments_are_named_and_shaped():
    lin = epilogues.linear()
    ok = (1.0, 0.5, 1.0, np.zeros((1, 4, 6), np.float32), np.zeros(4, np.float32))
    v.check_epilogue_args(lin, ok, m=4, n=6, batch=1, tiles_n=1)
    with pytest.raises(v.GemmArgumentError, match="takes 5 extra argument"):
        v.check_epilogue_args(lin, ok[:2], m=4, n=6, batch=1, tiles_n=1)
    with pytest.raises(v.GemmArgumentError, match="one value per output row"):
        v.check_epilogue_args(lin, ok[:4] + (np.zeros(6, np.float32),), m=4, n=6, batch=1, tiles_n=1)
    with pytest.raises(v.GemmArgumentError, match="zero_point"):
        v.check_epilogue_args(epilogues.quantize(), (0.1, 300), m=4, n=6, batch=1, tiles_n=1)
    with pytest.raises(v.GemmArgumentError, match="alpha must be a number"):
        v.check_epilogue_args(epilogues.row_softmax_partial(128), ("x", None, None), m=4, n=6, batch=1, tiles_n=1)


def test_conv_geometry():
    g = v.ConvGeometry(2, 3, 8, 8, 3, 3, 1)
    assert (g.out_h, g.out_w, g.gemm_m, g.gemm_k) == (8, 8, 128, 27)
    with pytest.raises(v.GemmArgumentError, match="does not fit"):
        v.ConvGeometry(1, 1, 2, 2, 3, 3, 0)
    with pytest.raises(v.GemmArgumentError, match="expected \\(N, C, H, W\\)"):
        v.check_image(np.zeros((2, 3, 8, 7), np.float16), g, np.float16)


def test_quiz_checker(capsys):
    quiz.check("06.1-a", "a")
    assert capsys.readouterr().out.startswith("06.1-a: correct.")
    with pytest.raises(quiz.QuizWrong, match="is not it"):
        quiz.check("06.1-a", "b")
    with pytest.raises(quiz.QuizWrong, match="no answer yet"):
        quiz.check("06.1-a", ...)
    with pytest.raises(Exception, match="answer with one of"):
        quiz.check("06.1-a", "z")
    with pytest.raises(Exception, match="unknown question"):
        quiz.check("99-x", "a")
    for qid, q in quiz.QUESTIONS.items():
        assert q.answer in q.choices and q.why, qid


def test_codegen_cache_canonical_descriptions():
    import enum

    class E(enum.IntEnum):
        X = 7
    assert codegen_cache._canon([E.X, (1, True), "s"]) == (7, (1, 1), "s")
    with pytest.raises(codegen_cache.Uncacheable):
        codegen_cache._canon(object())


def test_codegen_cache_store_round_trip_and_corruption(tmp_path):
    store = codegen_cache._Store(tmp_path)
    assert store.get("ab" * 32) is None
    store.put("ab" * 32, {"kind": "code", "isa": 13000}, blob=b"\x01ltoir" * 100)
    got = store.get("ab" * 32)
    assert got["isa"] == 13000 and got["ltoir"] == b"\x01ltoir" * 100
    (tmp_path / "ab" / ("ab" * 32 + ".ltoir.z")).write_bytes(b"garbage")
    assert store.get("ab" * 32) is None  # a damaged blob is a miss, never wrong code
    store.put("cd" * 32, {"kind": "trait", "value": [1, 2, 3]})
    assert store.get("cd" * 32)["value"] == [1, 2, 3]
    assert codegen_cache.disk_usage(tmp_path)[0] == 2
    assert codegen_cache.clear(tmp_path) >= 3 and codegen_cache.disk_usage(tmp_path)[0] == 0


def test_codegen_cache_folder_follows_the_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path))
    assert codegen_cache.default_dir() == tmp_path / "mathdx-codegen"
    monkeypatch.setenv("KERNEL_LAB_NO_CODEGEN_CACHE", "1")
    assert codegen_cache.enable() is None


def test_precompile_wants_a_shape_for_pipeline_configurations():
    # A pipeline GEMM compiles for one problem shape: without it (or mixed with block-GEMM
    # configurations) precompile refuses before starting any worker.
    from kernel_lab.tensor_cores import gemm
    from kernel_lab.tensor_cores.configs import GemmConfig, PipelineConfig
    from kernel_lab.tensor_cores.validate import GemmArgumentError

    with pytest.raises(GemmArgumentError, match="shape"):
        gemm.precompile([PipelineConfig()], log=None)
    with pytest.raises(GemmArgumentError, match="alone"):
        gemm.precompile([PipelineConfig(), GemmConfig()], shape=(256, 256, 256), log=None)
    assert gemm.precompile([], log=None) == []


def test_a_bad_compile_process_cap_is_named(monkeypatch):
    # KERNEL_LAB_COMPILE_PROCESSES caps the compile workers (each opens a CUDA context)
    from kernel_lab.tensor_cores import gemm
    from kernel_lab.tensor_cores.configs import GemmConfig
    from kernel_lab.tensor_cores.validate import GemmArgumentError

    monkeypatch.setenv("KERNEL_LAB_COMPILE_PROCESSES", "two")
    with pytest.raises(GemmArgumentError, match="KERNEL_LAB_COMPILE_PROCESSES.*'two'"):
        gemm.precompile([GemmConfig()], log=None)


def test_pipeline_out_must_be_dense_and_16_byte_aligned():
    # the pipeline GEMM stores whole tiles with 16-byte stores, rows N elements apart
    a, b_t = arr((8, 64), np.int8), arr((4, 64), np.int8)
    wide = np.zeros((8, 6), np.int32)[:, :4]  # rows 6 elements apart
    with pytest.raises(v.GemmArgumentError, match="must be C-contiguous"):
        v.check_pipeline(a, b_t, wide, precision="int8", out_dtype=np.int32)
    shifted = v.ArrayInfo((8, 4), np.dtype(np.int32), (16, 4), 1024 + 4)
    with pytest.raises(v.GemmArgumentError, match="16-byte boundary"):
        v.check_pipeline(a, b_t, shifted, precision="int8", out_dtype=np.int32)
    v.check_pipeline(a, b_t, v.ArrayInfo((8, 4), np.dtype(np.int32), (16, 4), 1024), precision="int8",
                     out_dtype=np.int32)


@pytest.mark.parametrize("group,tiles_m,tiles_n", [(8, 32, 16), (8, 13, 5), (4, 3, 7), (16, 33, 2), (1, 5, 4)])
def test_the_persistent_walk_names_every_tile_once(group, tiles_m, tiles_n):
    """A persistent block computes the tiles t = blockIdx.x, + gridDim.x, ...: a walk that named a
    tile twice (or missed one) would leave part of C unwritten, on shapes whose tile rows are not
    a multiple of the band."""
    import kernel_lab as kl

    if not kl.on_simulator():
        pytest.skip("runs the device function in the simulator")
    from kernel_lab.tensor_cores import gemm

    global _TILE_OF
    _TILE_OF = gemm.band_walk(group)
    total = tiles_m * tiles_n
    out = np.full((total, 2), -1, np.int32)
    _walk_kernel()[-(-total // 64), 64](out, tiles_m, tiles_n)
    assert (out[:, 0] >= 0).all() and (out[:, 0] < tiles_m).all() and (out[:, 1] >= 0).all() and (out[:, 1] < tiles_n).all()
    assert len({(int(a), int(b)) for a, b in out}) == total
    # consecutive steps stay in one band of `group` rows (the point of the walk)
    assert all(out[t, 0] // group == out[t + 1, 0] // group or out[t + 1, 1] == 0 for t in range(total - 1))


_TILE_OF = None


def _walk_kernel():
    # at module level, so that ``cuda`` is a global the simulator can stand in for
    @cuda.jit
    def walk(out, tiles_m, tiles_n):
        t = cuda.grid(1)
        if t < tiles_m * tiles_n:
            bm, bn = _TILE_OF(t, tiles_m, tiles_n)
            out[t, 0] = bm
            out[t, 1] = bn

    return walk
