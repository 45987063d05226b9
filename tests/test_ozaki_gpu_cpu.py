"""Module 07's GPU package on the CPU: configurations, the slicing and reconstruction kernels in the
simulator (bit-exact against NumPy, whole padded buffers), the benchmark's table, clear refusals."""

import numpy as np
import pytest

import kernel_lab as kl
from kernel_lab.ozaki import bench as bench_ozaki
from kernel_lab.ozaki import gpu as g
from kernel_lab.ozaki import gpu_ozaki2 as g2
from kernel_lab.ozaki import reference as ref
from kernel_lab.ozaki import slicing
from kernel_lab.validate import KernelLabArgumentError
from numba import cuda


@pytest.fixture(autouse=True, scope="module")
def _simulator_extensions():
    kl.setup(quiet=True)


def test_config_pads_to_whole_tiles_and_a_full_pipeline():
    cfg = g.OzakiConfig()
    assert cfg.padded(8190, 8100, 8150) == (8192, 8192, 8192)  # the notebooks' check shape shares 8192^3's kernel
    assert cfg.padded(1, 1, 1) == (cfg.tile_m, cfg.tile_n, cfg.depth * cfg.tile_k)
    assert cfg.problems() == []
    bad = g.OzakiConfig(tile_m=96, tile_k=32, threads=100, depth=1)
    assert len(bad.problems()) == 4
    assert "384 threads" in " ".join(g.OzakiConfig(threads=384).problems())  # slow and inexact on an H100


def test_ozaki_gemm_refuses_bad_arguments_before_any_gpu_work():
    with pytest.raises(KernelLabArgumentError, match="slices must be 1..8"):
        g.OzakiGemm(9)
    with pytest.raises(KernelLabArgumentError, match="method must be one of"):
        g.OzakiGemm(7, "faster")


def test_the_gpu_parts_say_why_they_cannot_run_here():
    assert "simulator" in g.why_not_here()


@pytest.mark.parametrize("slices", [3, 7])
def test_slicing_kernels_fill_whole_padded_buffers_exactly(slices):
    """A and B sliced on the 'GPU' (simulator) equal NumPy's split, padding zeros, planes beyond s untouched."""
    rng = np.random.default_rng(slices)
    m, k, n = 21, 70, 19
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-30, 30, (1, n)))
    a[4] = 0.0
    a[6, 3] = np.nan
    b[2, 7] = -np.inf
    mp, kp, np_ = 64, 128, 32
    da = cuda.to_device(np.full((g.PLANES, mp, kp), 99, np.int8))
    db = cuda.to_device(np.full((g.PLANES, np_, kp), 99, np.int8))
    ea, bad_a = cuda.to_device(np.zeros(m, np.int32)), cuda.to_device(np.zeros(m, np.int32))
    eb, bad_b = cuda.to_device(np.zeros(n, np.int32)), cuda.to_device(np.zeros(n, np.int32))
    amax = cuda.to_device(np.zeros(n))
    da_a, db_b = cuda.to_device(a), cuda.to_device(b)
    g.row_exponents_kernel()[m, g.ROW_THREADS](da_a, ea, bad_a)
    col_max, col_finish = g.col_exponents_kernels()
    col_max[(1, 1), (g.TILE, 8)](db_b, amax, bad_b)
    col_finish[1, 128](amax, eb, bad_b)
    words = da[:slices].view(np.int32)
    g.slice_rows_kernel(slices)[(1, mp // 8), (32, 8)](da_a, ea, bad_a, words)
    g.slice_cols_kernel(slices)[(np_ // g.TILE, kp // g.TILE), (g.TILE, 8)](db_b, eb, bad_b, db)
    assert bad_a.copy_to_host().tolist() == [1 if i == 6 else 0 for i in range(m)]
    assert bad_b.copy_to_host().tolist() == [1 if j == 7 else 0 for j in range(n)]
    a0 = np.where(np.isfinite(a), a, 0.0)
    a0[6] = 0.0
    b0 = np.where(np.isfinite(b), b, 0.0)
    b0[:, 7] = 0.0
    want_a, want_ea = slicing.split(a0, slices, axis=1)
    want_b, want_eb = slicing.split(b0, slices, axis=0)
    got_a, got_b = da.copy_to_host(), db.copy_to_host()
    assert np.array_equal(ea.copy_to_host(), want_ea) and np.array_equal(eb.copy_to_host(), want_eb)
    assert np.array_equal(got_a[:slices, :m, :k], want_a)
    assert np.array_equal(got_b[:slices, :n, :k], want_b.transpose(0, 2, 1))
    assert not got_a[:slices, m:].any() and not got_a[:slices, :, k:].any()
    assert not got_b[:slices, n:].any() and not got_b[:slices, :, k:].any()
    assert (got_a[slices:] == 99).all() and (got_b[slices:] == 99).all()  # unused planes are left alone


@pytest.mark.parametrize("from_pairs", [True, False], ids=["pair products", "diagonal sums"])
def test_reconstruction_kernel_matches_the_numpy_scheme(from_pairs):
    rng = np.random.default_rng(7)
    s, m, n, k = 5, 13, 11, 40
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    da, ea = slicing.split(a, s, 1)
    db, eb = slicing.split(b, s, 0)
    parts = ref.pair_products(da, db) if from_pairs else ref.diagonal_sums(da, db)
    c0 = rng.standard_normal((m, n))
    want = ref.reconstruct(ref.diagonal_sums(da, db), ea, eb, 0.5, 2.0, c0)
    c = cuda.to_device(c0)
    g.reconstruct_kernel(s, from_pairs)[(1, 2), (32, 8)](cuda.to_device(parts.astype(np.int32)), cuda.to_device(ea),
                                                          cuda.to_device(eb), 0.5, 2.0, c)
    got = c.copy_to_host()
    assert np.allclose(got, want, rtol=1e-15, atol=0)


def test_bench_table_formats_every_row():
    result = {"rows": [dict(method="cuBLAS DGEMM", shape=(8, 8, 8), ms=1.0, tflops=1e-6, ratio=1.0,
                            normwise=1e-16, componentwise=1.0),
                       dict(method="fully fused", shape=(8, 8, 8), ms=2.0, tflops=5e-7, ratio=0.5,
                            normwise=2e-16, componentwise=2.0, slicing_ms=0.1, int8_tops=1.0)]}
    text = bench_ozaki.format_table(result)
    assert "fully fused" in text and "0.50x" in text and text.count("\n") == 2
    with pytest.raises(KernelLabArgumentError, match="unknown method"):
        bench_ozaki.measure(sizes=(8,), methods=("sideways",))


def test_bench_refuses_without_a_gpu_and_says_why():
    with pytest.raises(KernelLabArgumentError, match="cannot run here: .*simulator"):
        bench_ozaki.measure(sizes=(8,))


def test_both_launchers_keep_one_shapes_work_buffers(monkeypatch):
    """OzakiGemm and Ozaki2Gemm get their buffers from gpu.work_buffers: the shared ones and each
    scheme's own, the same buffers again for the same shape, one shape held at a time. NumPy stands
    in for CuPy, and the digit planes for digit_buffers (its pipeline needs nvmath)."""
    import sys
    import types

    fake_cp = types.SimpleNamespace(empty=np.empty, zeros=np.zeros, asarray=np.asarray, arange=np.arange,
                                    int8=np.int8, int32=np.int32, float64=np.float64)
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)

    def planes_only(config, m, n, k, planes=g.PLANES):
        mp, np_, kp = config.padded(m, n, k)
        return {"padded": (mp, np_, kp), "da": np.zeros((planes, mp, kp), np.int8),
                "db": np.zeros((planes, np_, kp), np.int8), "pipe": None}

    monkeypatch.setattr(g, "digit_buffers", planes_only)
    shared = {"padded", "da", "db", "pipe", "ea", "eb", "bad_a", "bad_b"}
    own = {"fused": {"amax_b"}, "partial": {"amax_b", "parts"}, "unfused": {"amax_b", "parts", "pair_t", "pair_u"}}
    launchers = [(g.OzakiGemm(5, method), own[method], g.PLANES, 5 if method == "partial" else None)
                 for method in g.METHODS]  # partial: one product per diagonal, 5 slices
    launchers.append((g2.Ozaki2Gemm(18), {"q", "ra", "rb", "pmax", "psum", "parts", "pair"}, 18, 18))
    for gemm, keys, planes, products in launchers:
        st = gemm._state(70, 90, 300)
        assert set(st) == shared | keys, type(gemm).__name__
        assert st["da"].shape[0] == planes and st["ea"].shape == (70,) and st["bad_b"].shape == (90,)
        if products:
            assert st["parts"].shape == (products, 70, 90)
        assert gemm._state(70, 90, 300) is st  # the same shape: the same buffers, nothing made again
        other = gemm._state(40, 30, 1000)
        assert other is not st and list(gemm._shape_state) == [(40, 30, 1000)]  # one shape at a time
        assert gemm._state(70, 90, 300) is not st  # the first shape's buffers were let go
    ozaki2_st = launchers[-1][0]._state(8, 8, 8)
    assert ozaki2_st["ra"].base is ozaki2_st["da"] and ozaki2_st["ra"].shape[0] == 18  # planes of da, not copies


def test_kernel_factories_return_one_kernel_per_configuration():
    # compile_once allows a kernel its dynamic shared memory once per shape: a factory that built a
    # new dispatcher on every call would launch an unconfigured kernel the second time
    # (CUDA_ERROR_INVALID_VALUE on an H100)
    for factory in (g.pair_products_kernel, g.diagonal_sums_kernel, g.fused_kernel, g.grouped_tile_function):
        assert hasattr(factory, "cache_info"), f"{factory.__name__} is not cached"


@pytest.mark.parametrize("tiles_m, tiles_n, group", [(5, 3, 2), (20, 6, 8), (3, 4, 0), (7, 2, 16)])
def test_grouped_tiles_cover_every_tile_once_and_walk_a_band_of_rows(tiles_m, tiles_n, group):
    tile = g.grouped_tile_function(group)

    @cuda.jit
    def record(out):
        bm, bn = tile()
        pid = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
        out[pid, 0] = bm
        out[pid, 1] = bn

    out = cuda.to_device(np.full((tiles_m * tiles_n, 2), -1, np.int32))
    record[(tiles_m, tiles_n), 1](out)
    got = [tuple(int(v) for v in row) for row in out.copy_to_host()]
    assert sorted(got) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]
    if group == 0:
        assert got[:tiles_m] == [(i, 0) for i in range(tiles_m)]  # row after row down the first column
    else:
        band = min(group, tiles_m)
        assert got[:band] == [(i, 0) for i in range(band)]  # down the band, then one column right
        assert got[band] == ((0, 1) if tiles_n > 1 else (band, 0))
        assert all(bm < band for bm, _ in got[:band * tiles_n])
