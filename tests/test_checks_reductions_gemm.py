"""Module 02's checks: each classic mistake, fed to its check, gets its message; right kernels pass.

Runs under the simulator (no GPU needed); the package's own kernels (kernel_lab.reductions_gemm:
scans, sgemm) are the right answers.
"""

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="wrong kernels are fed to the checks in the simulator")

kl.setup(quiet=True)
from numba import cuda, float32, int32, int64, uint32, uint64  # noqa: E402

from kernel_lab import CheckFailed  # noqa: E402
from kernel_lab.reductions_gemm import scans, sgemm  # noqa: E402
from kernel_lab.checks import reductions_gemm as checks  # noqa: E402

SMALL = [("block-1", 63), ("block+1", 65), ("3 blocks+7", 199)]
T = scans.THREADS


def bits_launcher(kernel, zero=True):
    def launch(out, x):
        if zero:
            out[0] = 0
        kernel[-(-x.size // T), T](x.view(np.uint32), out.view(np.uint32))
    return launch


# --- absmax / argmax ------------------------------------------------------------------------------

def test_absmax_right_kernels_pass(capsys):
    for launch in (lambda o, x: scans.absmax_one_pass(o.view(np.uint32), x.view(np.uint32)),
                   lambda o, x: scans.absmax_two_pass(o.view(np.uint32), x.view(np.uint32)),
                   lambda o, x: scans.absmax_grid_stride(o.view(np.uint32), x.view(np.uint32))):
        checks.check_absmax(launch, block=T, sizes=SMALL)
    assert capsys.readouterr().out.count("correct for all 3 sizes") == 3


@cuda.jit
def absmax_signed(bits, out):  # the mistake: max of the values, not of the magnitudes
    i = cuda.grid(1)
    if i < bits.size:
        b = bits[i]
        v = b | uint32(0x80000000) if b & uint32(0x80000000) == 0 else ~b
        cuda.atomic.max(out, 0, v)


@cuda.jit
def absmax_full_blocks_only(bits, out):  # the mistake: the last, partial block returns early
    i = cuda.grid(1)
    if (cuda.blockIdx.x + 1) * cuda.blockDim.x > bits.size:
        return
    cuda.atomic.max(out, 0, bits[i] & uint32(0x7FFFFFFF))


def test_absmax_names_values_instead_of_magnitudes():
    def launch(out, x):
        ob = out.view(np.uint32)
        ob[0] = 0
        absmax_signed[-(-x.size // T), T](x.view(np.uint32), ob)
        raw = ob.copy_to_host()[0]  # decode the ordered key back into the float's bits
        raw = raw & 0x7FFFFFFF if raw & 0x80000000 else ~raw & 0xFFFFFFFF
        ob[0] = raw
    with pytest.raises(CheckFailed, match="largest \\*value\\*, not the largest \\*magnitude\\*"):
        checks.check_absmax(launch, block=T, sizes=SMALL, seed=1)


def test_absmax_names_the_missing_partial_block_and_the_unzeroed_output():
    with pytest.raises(CheckFailed, match="last, partial block was left out"):
        checks.check_absmax(bits_launcher(absmax_full_blocks_only), block=T, sizes=SMALL, seed=2)
    with pytest.raises(CheckFailed, match="never written"):
        checks.check_absmax(bits_launcher(scans.absmax_atomic_per_block, zero=False), block=T, sizes=SMALL)


def argmax_launcher(kernel):
    def launch(out, x):
        key = cuda.device_array(1, np.uint64)
        key[0] = 0
        kernel[scans.persistent_blocks(x.size), T](x.view(np.uint32), key)
        out[0] = scans.decode_argmax(key.copy_to_host()[0])[1]
    return launch


@cuda.jit
def argmax_highest_index(bits, key):  # the mistake: the index itself in the low bits: ties go to the highest
    i = cuda.grid(1)
    while i < bits.size:
        k = scans.argmax_key(bits[i], i)
        cuda.atomic.max(key, 0, (k & ~np.uint64(0xFFFFFFFF)) | np.uint64(i))
        i += cuda.gridsize(1)


def test_argmax_passes_and_names_the_tie_rule(capsys):
    checks.check_argmax(argmax_launcher(scans.argmax_persistent), block=T, sizes=SMALL)
    assert "argmax: correct" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="tie rule says the lowest index wins"):
        checks.check_argmax(argmax_launcher(argmax_highest_index), block=T, sizes=SMALL, seed=3)


# --- sums ---------------------------------------------------------------------------------------

@cuda.jit
def kahan_without_compensation(x, out):  # the mistake: c is computed but never used
    s = float32(0)
    c = float32(0)
    i = cuda.grid(1)
    while i < x.size:
        t = s + x[i]
        c = (t - s) - x[i]
        s = t
        i += cuda.gridsize(1)
    total = scans.block_sum_f64(np.float64(s))
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total + 0 * c)


def one_block(kernel):
    # One block: each thread sums n / T elements, long enough for float32 rounding to show.
    def launch(out, x):
        out[0] = 0
        kernel[1, T](x, out)
    return launch


def test_sums_pass_their_tolerance_and_lost_compensation_is_named(capsys):
    big = [("large", 300_000)]  # 4700 terms per thread: float32 rounding shows
    checks.check_sum(one_block(scans.sum_kahan), accumulation="kahan", block=T, sizes=big)
    checks.check_sum(one_block(scans.sum_f64_accumulate), accumulation="float64", block=T, sizes=big)
    checks.check_sum(one_block(scans.sum_f32), accumulation="float32", block=T, sizes=big)
    assert capsys.readouterr().out.count("correct for all 1 sizes") == 3
    with pytest.raises(CheckFailed, match="plain float32 sum"):
        checks.check_sum(one_block(kahan_without_compensation), accumulation="kahan", block=T, sizes=big, seed=5)


def test_sum_errors_orders_the_accumulations():
    errors = checks.sum_errors({"f32": one_block(scans.sum_f32), "kahan": one_block(scans.sum_kahan)}, 100_000)
    assert errors["kahan"] < errors["f32"]


# --- scans --------------------------------------------------------------------------------------

def test_both_scans_pass_every_schedule(capsys):
    checks.check_scan(scans.scan_three_kernels, tile=scans.TILE, name="three-kernel scan")
    checks.check_scan(scans.scan_single_pass_launch, tile=scans.TILE, name="single-pass scan",
                      kernel=scans.scan_single_pass)
    out = capsys.readouterr().out
    assert "three-kernel scan: correct" in out and "single-pass scan: correct" in out and "6 block schedules" in out


def test_the_status_word_scan_passes_every_schedule(capsys):
    checks.check_scan(scans.scan_status_word_launch, tile=scans.TILE, name="status-word scan",
                      kernel=scans.scan_status_word_launch.kernel)
    assert "status-word scan: correct" in capsys.readouterr().out


def test_tiles_numbered_by_block_index_stall_in_reverse_and_say_why():
    launch = scans.make_status_scan(by_ticket=False)
    with pytest.raises(CheckFailed, match="waited for each other forever") as failure:
        checks.check_scan(launch, tile=scans.TILE, name="blockIdx scan", kernel=launch.kernel,
                          sizes=[("5 tiles+3", 5 * scans.TILE + 3)])
    assert "blocks in reverse" in str(failure.value)


def test_status_word_packing_accepts_the_package_and_names_each_mistake(capsys):
    checks.check_status_word(scans.pack_status, scans.unpack_status)
    assert "agree bit for bit" in capsys.readouterr().out

    @cuda.jit(device=True)
    def converted(flag, value):
        return (uint64(flag) << uint64(32)) | uint64(value)

    @cuda.jit(device=True)
    def sign_extended(flag, value):
        return uint64((int64(flag) << int64(32)) | int64(int32(kl.float_bits(value))))

    @cuda.jit(device=True)
    def swapped(flag, value):
        return (uint64(kl.float_bits(value)) << uint64(32)) | uint64(flag)

    @cuda.jit(device=True)
    def unpack_by_value(word):
        return int32(word >> uint64(32)), float32(uint32(word & uint64(0xFFFFFFFF)))

    for pack, unpack, says in [(converted, scans.unpack_status, "converted to an integer"),
                               (sign_extended, scans.unpack_status, "sign bit"),
                               (swapped, scans.unpack_status, "halves are swapped"),
                               (scans.pack_status, unpack_by_value, "converted the bits' integer value")]:
        with pytest.raises(CheckFailed, match=says):
            checks.check_status_word(pack, unpack)


def test_a_status_scan_refuses_an_unfinished_pack_instead_of_hanging():
    @cuda.jit(device=True)
    def stub_pack(flag, value):
        return uint64(0)

    with pytest.raises(CheckFailed, match="not done yet"):
        scans.make_status_scan(stub_pack, scans.unpack_status)


def test_bit_casts_round_trip():
    for v in (1.5, -1.5, -0.0, np.inf, 1e-45):
        b = kl.float_bits(np.float32(v))
        assert b == np.array(v, np.float32).view(np.uint32)
        assert np.array(kl.bits_float(b), np.float32).view(np.uint32) == b


@cuda.jit
def scan_flag_first(x, out, ticket, flags, aggregates, prefixes):
    # The mistake: each block's flag is set before its value is written (and a thread-0 look-back).
    totals = cuda.shared.array(scans.TOTALS, float32)
    shared = cuda.shared.array(2, float32)
    tile_id = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        tile_id[0] = cuda.atomic.add(ticket, 0, 1)
    cuda.syncthreads()
    tile = tile_id[0]
    first = tile * scans.TILE + t * scans.ITEMS
    s = float32(0)
    for k in range(scans.ITEMS):
        if first + k < x.size:
            s += x[first + k]
    before, total = scans.block_exclusive_scan(s, totals)
    if t == 0:
        exclusive = float32(0)
        j = tile - 1
        while j >= 0:
            f = kl.load_acquire(flags, j)
            if f == 0:
                continue
            exclusive += prefixes[j]
            break
        cuda.atomic.exch(flags, tile, 2)  # BUG: published before the value below
        prefixes[tile] = exclusive + total
        shared[0] = exclusive
    cuda.syncthreads()
    acc = shared[0] + before
    for k in range(scans.ITEMS):
        if first + k < x.size:
            acc += x[first + k]
            out[first + k] = acc


def test_a_look_back_that_reads_before_publication_is_caught():
    def launch(out, x):
        tiles = -(-x.size // scans.TILE)
        ticket, flags, agg, pre = scans.single_pass_scratch(tiles)
        scans.reset_scratch[max(1, -(-(tiles + 1) // 256)), 256](ticket, flags)
        scan_flag_first[tiles, T](x, out, ticket, flags, agg, pre)
    with pytest.raises(CheckFailed, match="reads a partial before it is published"):
        checks.check_scan(launch, tile=scans.TILE, name="flag first", seed=7)


def test_missing_fence_and_plain_polling_are_named_from_the_source():
    def no_fence(x, flags):
        flags[0] = 1
        return cuda.atomic.add(flags, 0, 0)
    hints = checks._source_hints(no_fence)
    assert any("no cuda.threadfence()" in h for h in hints) and any("kl.load_acquire" in h for h in hints)
    assert checks._source_hints(scans.scan_single_pass) == []
    assert checks._source_hints(scans.scan_status_word_launch.kernel) == []  # one word: no fence to ask for


# --- GEMM ---------------------------------------------------------------------------------------

TILE = sgemm.TILE


def tiled(mistake=None):
    @cuda.jit
    def kernel(a, b, c):
        a_tile = cuda.shared.array((TILE, TILE), float32)
        b_tile = cuda.shared.array((TILE, TILE), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        m, n, kk = c.shape[0], c.shape[1], a.shape[1]
        acc = float32(0)
        k_end = kk - kk % TILE if mistake == "skip last k" else kk
        for k0 in range(0, k_end, TILE):
            a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < kk else float32(0)
            if mistake == "edge":  # off by one: the last column of B is never loaded
                b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < kk and col < n - 1 else float32(0)
            else:
                b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < kk and col < n else float32(0)
            if mistake != "first barrier":
                cuda.syncthreads()
            for k in range(TILE):
                acc += a_tile[ty, k] * b_tile[k, tx]
            if mistake != "second barrier":
                cuda.syncthreads()
        if row < m and col < n:
            c[row, col] = acc

    def launch(c, a, b):
        kernel[(-(-c.shape[1] // TILE), -(-c.shape[0] // TILE)), (TILE, TILE)](a, b, c)
    return launch


GEMM_SHAPES = [("1x1x1", (1, 1, 1)), ("tile-1 x tile+1 x bk+1", (TILE - 1, TILE + 1, TILE + 1)),
               ("non-multiples", (2 * TILE + 3, TILE + 5, 3 * TILE + 2))]


def test_the_package_sgemm_progression_and_dgemm_pass(capsys):
    for label, launch in sgemm.PROGRESSION:
        tiles = (sgemm.TILE,) * 3 if label[0] in "123" else (sgemm.BM, sgemm.BN, sgemm.BK)
        checks.check_gemm(launch, name=label, tiles=tiles, shapes=checks.gemm_shapes(*tiles, large=0)[:3])
    d = sgemm.DGEMM_TILES
    checks.check_gemm(sgemm.launch_dgemm, name="dgemm", precision="float64", tiles=(d.bm, d.bn, d.bk),
                      shapes=checks.gemm_shapes(d.bm, d.bn, d.bk, large=0))
    assert capsys.readouterr().out.count("correct for all") == len(sgemm.PROGRESSION) + 1


@pytest.mark.parametrize("mistake, message", [
    ("first barrier", "used before every thread has finished loading it"),
    ("second barrier", "overwritten while other threads still read it"),
    ("edge", "off-by-one on the tile edges"),
    ("skip last k", "last, partial tile along K"),
])
def test_gemm_tile_mistakes_are_named(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_gemm(tiled(mistake), tiles=(TILE, TILE, TILE), shapes=GEMM_SHAPES, seed=11)


def test_gemm_register_block_indexing_is_named():
    # 1D register blocking with the thread's TM4 rows taken as a stride instead of a block.
    BM4, BN4, BK4, TM4 = sgemm.BM4, sgemm.BN4, sgemm.BK4, sgemm.TM4

    @cuda.jit
    def wrong(a, b, c):
        a_tile = cuda.shared.array((BM4, BK4), float32)
        b_tile = cuda.shared.array((BK4, BN4), float32)
        t = cuda.threadIdx.x
        tx, ty = t % BN4, t // BN4
        row0, col0 = cuda.blockIdx.y * BM4, cuda.blockIdx.x * BN4
        m, n, kk = c.shape[0], c.shape[1], a.shape[1]
        acc = cuda.local.array(TM4, float32)
        for i in range(TM4):
            acc[i] = 0
        ar, ac, br, bc = t // BK4, t % BK4, t // BN4, t % BN4
        for k0 in range(0, kk, BK4):
            a_tile[ar, ac] = a[row0 + ar, k0 + ac] if row0 + ar < m and k0 + ac < kk else float32(0)
            b_tile[br, bc] = b[k0 + br, col0 + bc] if k0 + br < kk and col0 + bc < n else float32(0)
            cuda.syncthreads()
            for k in range(BK4):
                for i in range(TM4):
                    acc[i] += a_tile[ty * TM4 + i, k] * b_tile[k, tx]
            cuda.syncthreads()
        for i in range(TM4):
            r = row0 + i * (BM4 // TM4) + ty  # BUG: row ty + i * stride, not ty * TM4 + i
            if r < m and col0 + tx < n:
                c[r, col0 + tx] = acc[i]

    def launch(c, a, b):
        wrong[(-(-c.shape[1] // BN4), -(-c.shape[0] // BM4)), BM4 * BN4 // TM4](a, b, c)

    with pytest.raises(CheckFailed, match="register-block indexing"):
        checks.check_gemm(launch, tiles=(BM4, BN4, BK4), shapes=[("aligned", (2 * BM4, 2 * BN4, 2 * BK4))], seed=12)


# --- 02.4: the FMA-rate kernel ------------------------------------------------------------------

def _fma_factory(mistake=None):
    """02.4's fma_chains, right or with one classic mistake."""

    def make(T):
        @cuda.jit
        def fma_chains(out, iterations):
            if mistake == "stub":
                return
            x = T(cuda.grid(1) if mistake == "grid" else cuda.threadIdx.x) * T(1e-3)
            a0, a1, a2, a3 = x, x + T(1), x + T(2), x + T(3)
            a4, a5, a6, a7 = x + T(4), x + T(5), x + T(6), x + T(7)
            m, c = T(0.999), T(1e-4)
            trips = iterations + 1 if mistake == "one more" else iterations
            for _ in range(trips):
                a0 = a0 * m + c
                a1 = a1 * m + c
                a2 = a2 * m + c
                a3 = a3 * m + c
                a4 = a4 * m + c
                a5 = a5 * m + c
                a6 = a6 * m + c
                if mistake != "seven":
                    a7 = a7 * m + c
            total = a0 + a1 + a2 + a3 + a4 + a5 + a6 + (T(0) if mistake == "seven" else a7)
            if mistake == "half written" and cuda.threadIdx.x % 2:
                return
            out[cuda.grid(1)] = total

        return fma_chains

    return make


def test_fma_chains_right_passes_silently(capsys):
    checks.check_fma_chains(_fma_factory())
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("mistake,words", [("stub", "not done"), ("half written", "never written"),
                                           ("seven", "only 7 of the 8 chains"), ("one more", "runs 6 times"),
                                           ("grid", "start from cuda.grid(1)")])
def test_fma_chains_names_each_mistake(mistake, words):
    with pytest.raises(CheckFailed, match=words.replace("(", r"\(").replace(")", r"\)")):
        checks.check_fma_chains(_fma_factory(mistake))


def test_fma_chains_names_float64_arithmetic_in_the_float32_kernel(monkeypatch):
    # The PTX test runs on a GPU only; here its two inputs are stood in for.
    monkeypatch.setattr(checks, "on_simulator", lambda: False)
    monkeypatch.setattr(checks, "_computes_in_float64", lambda kernel: True)
    with pytest.raises(CheckFailed, match="computes in float64"):
        checks.check_fma_chains(_fma_factory())


def test_float64_arithmetic_is_read_from_the_ptx():
    class Kernel:
        def __init__(self, ptx):
            self.ptx = ptx

        def inspect_asm(self):
            return {("float32[:]", "int64"): self.ptx}

    assert checks._computes_in_float64(Kernel("cvt.rn.f32.u32 %f1, %r1;\n\tfma.rn.f64 %fd2, %fd1, %fd3, %fd4;"))
    assert not checks._computes_in_float64(Kernel("fma.rn.f32 %f2, %f1, %f3, %f4;\n\tadd.s64 %rd1, %rd2, 1;"))


# --- 02.4: the float64 step of k, and the tile budget -----------------------------------------------

DGEMM_STEP = """
def make(cfg):
    WMI, WNI, TM, TN = cfg.wm_iter, cfg.wn_iter, cfg.tm, cfg.tn
    RM, RN = WMI * TM, WNI * TN

    @cuda.jit(device=True, forceinline=True)
    def compute_k64(a_t, b_t, s, k, acc, a_reg, b_reg, wr, wc, tr, tc):
        for wi in range(WMI):
            for i in range(0, TM, 2):
                a_reg[wi * TM + i], a_reg[wi * TM + i + 1] = load2(a_t, (s, k, wr + wi * 8 * TM + tr * TM + i))
        for wj in range(WNI):
            for j in range(0, TN, 2):
                b_reg[wj * TN + j], b_reg[wj * TN + j + 1] = load2(b_t, (s, k, wc + wj * 4 * TN + tc * TN + j))
        for i in range(RM):
            for j in range(RN):
                acc[i, j] += a_reg[i] * b_reg[j]
    return compute_k64
"""


def dgemm_with_step(old="", new=""):
    """The package's DGEMM with 02.4's step, edited, at the simulator's tiles: the GPU's thread tile
    (2 x 2 warp steps of 4 x 4 a lane) in one warp, so a mistake along either step shows."""
    from kernel_lab.vector_loads import load2

    source = DGEMM_STEP.replace(old, new) if old else DGEMM_STEP
    assert old == "" or source != DGEMM_STEP
    namespace = {"cuda": cuda, "load2": load2, "float32": float32}
    exec(source, namespace)  # noqa: S102 - a kernel of the test's own, edited
    cfg = sgemm.DGEMM_TILES_SIM
    return sgemm.warptile_launcher(cfg, compute_k=namespace["make"](cfg)), cfg


def test_the_package_float64_step_is_the_notebook_one():
    # the package builds its DGEMM from make_compute_k64; the copy test holds it to 02.4's exercise 2
    cfg = sgemm.DGEMM_TILES
    assert sgemm.warptile_parts(cfg).compute_k is sgemm.make_compute_k64(cfg)


def test_the_lane_probe_passes_the_right_step_and_says_nothing(capsys):
    launch, cfg = dgemm_with_step()
    checks.lane_probe(launch, (cfg.bm, cfg.bn, cfg.bk), name="dgemm")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("old, new, words", [
    ("a_reg[wi * TM + i], a_reg[wi * TM + i + 1] = load2", "a_reg[wi * TM + i + 1], a_reg[wi * TM + i] = load2",
     "each pair of rows of C is swapped"),
    ("b_reg[wj * TN + j], b_reg[wj * TN + j + 1] = load2", "b_reg[wj * TN + j + 1], b_reg[wj * TN + j] = load2",
     "each pair of columns of C is swapped"),
    ("tr * TM + i", "tr * 2 + i", "counted in doubles"),
    ("wj * 4 * TN", "wj * TN", "the lane reads B's tile at the wrong place"),
    ("for i in range(0, TM, 2)", "for i in range(0, TM, 4)", "registers of a_reg that the step never loads"),
    ("        for wi in range(WMI):", "        return\n        for wi in range(WMI):", "not done yet"),
])
def test_the_lane_probe_names_each_mistake_of_the_step(old, new, words, monkeypatch):
    # Registers never loaded hold whatever was there: in the simulator a local array is np.empty, which
    # may hold another thread's values. NaN makes the test's never-loaded registers the same every run.
    from numba.cuda.simulator.kernelapi import FakeCUDALocal

    real = FakeCUDALocal.array

    def poisoned(self, shape, dtype, alignment=None):
        arr = real(self, shape, dtype, alignment)
        if arr.dtype.kind == "f":
            arr.fill(np.nan)
        return arr

    monkeypatch.setattr(FakeCUDALocal, "array", poisoned)
    launch, cfg = dgemm_with_step(old, new)
    with pytest.raises(CheckFailed, match=words):
        checks.lane_probe(launch, (cfg.bm, cfg.bn, cfg.bk), name="dgemm")


def test_float32_rounding_in_a_float64_gemm_is_named():
    launch, cfg = dgemm_with_step("acc[i, j] += a_reg[i] * b_reg[j]", "acc[i, j] += float32(a_reg[i] * b_reg[j])")
    checks.lane_probe(launch, (cfg.bm, cfg.bn, cfg.bk), name="dgemm")  # exact small integers: the probe passes
    with pytest.raises(CheckFailed, match="size of float32 rounding"):
        checks.check_gemm(launch, name="dgemm", precision="float64", tiles=(cfg.bm, cfg.bn, cfg.bk),
                          shapes=[("aligned", (cfg.bm, cfg.bn, 2 * cfg.bk))], seed=3)


def test_the_tile_budget_reference_passes_and_each_mistake_is_named(capsys):
    checks.check_tile_budget(checks.tile_budget_reference)
    assert "correct for all 5 configurations" in capsys.readouterr().out

    def budget(words_f64=2, operands=True, steps=True, stages2=2, bytes_f64=8):
        def fn(cfg):
            f64 = cfg.precision == "float64"
            rm, rn = (cfg.tm * cfg.wm_iter, cfg.tn * cfg.wn_iter) if steps else (cfg.tm, cfg.tn)
            regs = (words_f64 if f64 else 1) * (rm * rn + (rm + rn if operands else 0))
            smem = (stages2 if cfg.double_buffer else 1) * cfg.bk * (cfg.bm + cfg.bn) * (bytes_f64 if f64 else 4)
            return regs, smem
        return fn

    for wrong, words in [(budget(words_f64=1), "two 32-bit registers"),
                         (budget(operands=False), "operands are missing"),
                         (budget(steps=False), "not tm x tn"), (budget(stages2=1), "two stages"),
                         (budget(bytes_f64=4), "a double is 8 bytes"), (lambda cfg: (0, 0), "not done yet")]:
        with pytest.raises(CheckFailed, match=words):
            checks.check_tile_budget(wrong)
