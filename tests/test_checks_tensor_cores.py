"""Module 06's checks of the learner's device functions: every named mistake fires, right answers pass.

Runs in the simulator (no GPU, no cuBLASDx): the device functions are what the learner writes in
06.2-06.4, tested in the checks' SIMT harness kernels.
"""

import math

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = pytest.mark.skipif(not kl.on_simulator(), reason="wrong device functions are fed to the checks in the simulator")

kl.setup(quiet=True)
from numba import cuda  # noqa: E402

from kernel_lab import CheckFailed  # noqa: E402
from kernel_lab.checks import tensor_cores as checks  # noqa: E402
from kernel_lab.tensor_cores import epilogues, gemm, tuner  # noqa: E402

K0 = math.sqrt(2.0 / math.pi)
mul_rn = epilogues.mul_rn()


def fails(check, fn, *words):
    with pytest.raises(CheckFailed) as err:
        check(fn)
    text = str(err.value)
    for w in words:
        assert w in text, text
    return text


# --- bias + GELU ----------------------------------------------------------------------------------

H, ONE, C3, K0_32 = np.float32(0.5), np.float32(1.0), np.float32(0.044715), np.float32(math.sqrt(2.0 / math.pi))


def gelu_fn(form):
    @cuda.jit(device=True)
    def f(value, bias):
        x = value + bias
        if form == "right":
            return H * x * (ONE + math.tanh(K0_32 * (x + C3 * x * x * x)))
        if form == "float64":  # right values, Python float constants: float64 arithmetic
            return 0.5 * x * (1.0 + math.tanh(K0 * (x + 0.044715 * x * x * x)))
        if form == "no bias":
            return 0.5 * value * (1.0 + math.tanh(K0 * (value + 0.044715 * value * value * value)))
        if form == "bias after":
            return 0.5 * value * (1.0 + math.tanh(K0 * (value + 0.044715 * value * value * value))) + bias
        if form == "erf":
            return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
        if form == "no half":
            return x * (1.0 + math.tanh(K0 * (x + 0.044715 * x * x * x)))
        if form == "no cubic":
            return 0.5 * x * (1.0 + math.tanh(K0 * x))
        return max(x, 0.0)
    return f


def test_bias_gelu_right_passes(capsys):
    checks.check_bias_gelu(gelu_fn("right"))
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("form,words", [("no bias", "bias is missing"), ("bias after", "after the activation"),
                                        ("erf", "erf"), ("no half", "1/2"), ("no cubic", "cubic"),
                                        ("relu", "ReLU"), ("float64", "float64 result")])
def test_bias_gelu_names_mistakes(form, words):
    fails(checks.check_bias_gelu, gelu_fn(form), words)


def test_bias_gelu_stub_is_not_done():
    @cuda.jit(device=True)
    def f(value, bias):
        pass
    fails(checks.check_bias_gelu, f, "not done")


def test_stubs_are_not_done():
    @cuda.jit(device=True)
    def nothing(*args):
        pass

    @cuda.jit(device=True)
    def q(acc, scale, zero_point):
        pass

    fails(checks.check_quantize, q, "not done")
    fails(checks.check_softmax_partial, lambda tm: (nothing, nothing, nothing), "not done")
    fails(checks.check_softmax_second_pass, nothing, "not done")


# --- quantize -------------------------------------------------------------------------------------

@cuda.jit(device=True)
def quant_right(acc, scale, zero_point):
    q = math.floor(mul_rn(float(acc), float(scale)) + 0.5) + zero_point
    return int(min(max(q, -128.0), 127.0))


@cuda.jit(device=True)
def quant_fma(acc, scale, zero_point):
    q = math.floor(float(acc) * float(scale) + 0.5) + zero_point
    return int(min(max(q, -128.0), 127.0))


@cuda.jit(device=True)
def quant_fma_two_lines(acc, scale, zero_point):
    x = float(acc) * scale
    q = math.floor(x + 0.5) + zero_point
    return int(min(max(q, -128.0), 127.0))


@cuda.jit(device=True)
def quant_even(acc, scale, zero_point):
    q = round(mul_rn(float(acc), float(scale))) + zero_point
    return int(min(max(q, -128.0), 127.0))


@cuda.jit(device=True)
def quant_away(acc, scale, zero_point):
    x = mul_rn(float(acc), float(scale))
    q = (math.floor(x + 0.5) if x >= 0 else -math.floor(0.5 - x)) + zero_point
    return int(min(max(q, -128.0), 127.0))


@cuda.jit(device=True)
def quant_trunc(acc, scale, zero_point):
    q = int(mul_rn(float(acc), float(scale)) + 0.5) + zero_point
    return int(min(max(q, -128), 127))


@cuda.jit(device=True)
def quant_f32(acc, scale, zero_point):
    q = math.floor(mul_rn(float(np.float32(acc)), float(scale)) + 0.5) + zero_point
    return int(min(max(q, -128.0), 127.0))


@cuda.jit(device=True)
def quant_noclamp(acc, scale, zero_point):
    return int(math.floor(mul_rn(float(acc), float(scale)) + 0.5) + zero_point)


def test_quantize_right_passes(capsys):
    checks.check_quantize(quant_right)
    assert "bit for bit" in capsys.readouterr().out


@pytest.mark.parametrize("fn,words", [(quant_fma, "FMA"), (quant_fma_two_lines, "FMA"),
                                      (quant_even, "half to even"), (quant_away, "away from zero"),
                                      (quant_trunc, "truncates"), (quant_f32, "float32"),
                                      (quant_noclamp, "clamp")])
def test_quantize_names_mistakes(fn, words):
    fails(checks.check_quantize, fn, words)


def test_quantize_fma_reference_differs_from_two_roundings():
    """The FMA cases must separate the two roundings, or the GPU run could not catch the mistake."""
    rows = [r for r in checks._quantize_cases() if r[3] == "fma"]
    assert rows
    assert any(checks._fused_floor(a, s) != math.floor(a * s + 0.5) for a, s, _, _ in rows)


# --- softmax, first pass --------------------------------------------------------------------------

def build_softmax(mistake=None):
    def build(tile_m):
        @cuda.jit(device=True)
        def prepare(lrow, value, stats, args):
            alpha = args[0]
            cuda.atomic.max(stats, lrow, value if mistake == "max without alpha" else alpha * value)

        @cuda.jit(device=True)
        def store(out, bz, row, col, lrow, value, stats, args):
            alpha = args[0]
            if mistake == "no max":
                e = math.exp(alpha * value)
            elif mistake == "max without alpha":
                e = math.exp(alpha * value - alpha * stats[lrow])
            else:
                e = math.exp(alpha * value - stats[lrow])
            out[bz, row, col] = e
            cuda.atomic.add(stats, tile_m + lrow, 1.0 if mistake == "count" else e)

        @cuda.jit(device=True)
        def finish(stats, bz, row0, tile_col, tid, m, args):
            row_max, row_sum = args[1], args[2]
            limit = tile_m - 1 if mistake == "rows" else tile_m
            if tid < limit and row0 + tid < m:
                row_max[bz, row0 + tid, tile_col] = stats[tid]
                row_sum[bz, row0 + tid, tile_col] = stats[tile_m + tid]

        return prepare, store, finish
    return build


def test_softmax_partial_right_passes(capsys):
    checks.check_softmax_partial(build_softmax())
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("mistake,words", [("no max", "without the row max"), ("max without alpha", "maximum of acc"),
                                           ("rows", "unwritten"), ("count", "number of columns")])
def test_softmax_partial_names_mistakes(mistake, words):
    fails(checks.check_softmax_partial, build_softmax(mistake), words)


def test_softmax_partial_package_functions_pass(capsys):
    ep = epilogues.row_softmax_partial(8)
    checks.check_softmax_partial(lambda tm: epilogues.row_softmax_partial(tm).build())
    assert ep.row_stats and "correct" in capsys.readouterr().out


# --- softmax, second pass -------------------------------------------------------------------------

def second_pass(mistake=None):
    @cuda.jit(device=True)
    def f(out, row_max, row_sum, bz, r, n, tile_n, tid, nthreads):
        tiles = row_max.shape[2]
        g = row_max[bz, r, 0]
        for t in range(1, tiles):
            g = max(g, row_max[bz, r, t])
        s = 0.0
        for t in range(tiles):
            s += row_sum[bz, r, t] if mistake == "no rescale of sums" else row_sum[bz, r, t] * math.exp(row_max[bz, r, t] - g)
        for c in range(tid, n, nthreads):
            t = c // tile_n
            if mistake == "own sum":
                out[bz, r, c] = out[bz, r, c] / row_sum[bz, r, t]
            elif mistake == "values not rescaled":
                out[bz, r, c] = out[bz, r, c] / s
            else:
                out[bz, r, c] = out[bz, r, c] * math.exp(row_max[bz, r, t] - g) / s
    return f


def test_softmax_second_pass_right_passes(capsys):
    checks.check_softmax_second_pass(second_pass())
    checks.check_softmax_second_pass(gemm.softmax_second_pass())
    assert capsys.readouterr().out.count("correct") == 2


@pytest.mark.parametrize("mistake,words", [("own sum", "its own block's sum"), ("no rescale of sums", "as they are"),
                                           ("values not rescaled", "values are not rescaled")])
def test_softmax_second_pass_names_mistakes(mistake, words):
    fails(checks.check_softmax_second_pass, second_pass(mistake), words)


# --- im2col ---------------------------------------------------------------------------------------

def im2col_fn(mistake=None):
    @cuda.jit(device=True)
    def load(x, gr, gc, geo):
        C, H, W, R, S, P, OH, OW = geo
        if mistake == "rows":
            oh, ow, nimg = gr % OH, (gr // OH) % OW, gr // (OW * OH)
        else:
            ow, oh, nimg = gr % OW, (gr // OW) % OH, gr // (OW * OH)
        if mistake == "cols":
            r, s, c = gc % R, (gc // R) % S, gc // (S * R)
        else:
            s, r, c = gc % S, (gc // S) % R, gc // (S * R)
        off = 0 if mistake == "no P" else P
        ih = oh + r - off + (1 if mistake == "plus one" else 0)
        iw = ow + s - off + (1 if mistake == "plus one" else 0)
        if mistake == "border":
            inside = 0 < ih < H and 0 <= iw < W
        elif mistake == "no test":
            inside = ih < H and iw < W
        else:
            inside = 0 <= ih < H and 0 <= iw < W
        if inside:
            return x[nimg, c, ih, iw]
        return 0
    return load


def test_im2col_right_passes(capsys):
    checks.check_im2col_load(im2col_fn())
    assert "correct for 3 geometries" in capsys.readouterr().out


@pytest.mark.parametrize("mistake,words", [("rows", "row order"), ("cols", "column order"),
                                           ("no P", "padding"), ("plus one", "off by one"),
                                           ("border", "off by one"), ("no test", "padding")])
def test_im2col_names_mistakes(mistake, words):
    fails(checks.check_im2col_load, im2col_fn(mistake), words)


# --- int4 -----------------------------------------------------------------------------------------

def int4_fn(mistake=None):
    @cuda.jit(device=True)
    def load(packed, kk, nn):
        byte = np.int32(packed[kk, nn >> 1])
        high = (nn & 1) == (0 if mistake in ("order", "both") else 1)
        nib = (byte >> 4) & 15 if high else byte & 15
        if mistake in ("unsigned", "both"):
            return nib
        if mistake == "threshold":
            return nib - 16 if nib > 8 else nib
        return nib - 16 if nib >= 8 else nib
    return load


@cuda.jit(device=True)
def int4_wrong_byte(packed, kk, nn):
    byte = np.int32(packed[kk, nn])
    nib = (byte >> 4) & 15 if nn & 1 else byte & 15
    return nib - 16 if nib >= 8 else nib


def test_int4_right_passes(capsys):
    checks.check_int4_load(int4_fn())
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("mistake,words", [("unsigned", "no sign extension"), ("order", "nibble order"),
                                           ("both", "both"), ("threshold", "off by one")])
def test_int4_names_mistakes(mistake, words):
    fails(checks.check_int4_load, int4_fn(mistake), words)


def test_int4_names_byte_index():
    fails(checks.check_int4_load, int4_wrong_byte, "n // 2")


# --- batched loader -------------------------------------------------------------------------------

def batched_fn(mistake=None):
    @cuda.jit(device=True)
    def load(x, bz, row, col, rows, cols):
        if mistake == "no fill":
            if row < x.shape[1] and col < x.shape[2]:
                return x[bz if x.shape[0] > 1 else 0, row, col]
            return 1.0
        if row < rows and col < cols:
            if mistake == "stride":
                return x[bz, row, col]
            if mistake == "batch 0":
                return x[0, row, col]
            return x[bz if x.shape[0] > 1 else 0, row, col]
        return 0
    return load


def test_batched_right_passes(capsys):
    checks.check_batched_load(batched_fn())
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("mistake,words", [("stride", "batch stride"), ("batch 0", "batch 0"),
                                           ("no fill", "zero fill")])
def test_batched_names_mistakes(mistake, words):
    fails(checks.check_batched_load, batched_fn(mistake), words)


# --- tuner ----------------------------------------------------------------------------------------

def search_fn(mistake=None):
    def search(candidates, time_ms):
        trials = []
        for c in candidates:
            if mistake == "no except":
                ms = float(time_ms(c))
                trials.append(tuner.Trial(c, ms))
                continue
            try:
                ms = float(time_ms(c))
                if mistake != "nan" and (not math.isfinite(ms) or ms <= 0):
                    raise ValueError("not a time")
                trials.append(tuner.Trial(c, ms))
            except Exception as exc:  # noqa: BLE001
                trials.append(tuner.Trial(c, None, str(exc)))
        ok = [t for t in trials if t.ms is not None]
        if mistake == "slowest":
            return max(ok, key=lambda t: t.ms), trials
        if mistake == "no raise" and not ok:
            return None, trials
        if not ok:
            raise RuntimeError("every candidate failed")
        return min(ok, key=lambda t: t.ms), trials
    return search


def test_tuner_search_right_passes(capsys):
    checks.check_tuner_search(search_fn())
    checks.check_tuner_search(lambda c, t: tuner.search(c, t))
    assert capsys.readouterr().out.count("correct") == 2


@pytest.mark.parametrize("mistake,words", [("no except", "stopped the search"), ("nan", "nan"),
                                           ("slowest", "smallest time"), ("no raise", "every candidate fails")])
def test_tuner_search_names_mistakes(mistake, words):
    fails(checks.check_tuner_search, search_fn(mistake), words)


def lookup_fn(mistake=None):
    def lookup(entries, key, candidates):
        if mistake == "prefix":  # matches on the GPU and kernel only
            hits = [v for k, v in entries.items() if k.split(" ; ")[:2] == key.split(" ; ")[:2]]
            entry = hits[0] if hits else None
        else:
            entry = entries.get(key)
        if entry is None:
            return None
        if mistake == "dict":
            return entry["best"]
        for c in candidates:
            if tuner.config_to_dict(c) == entry["best"]:
                return c
        return candidates[0] if mistake == "stale" else None
    return lookup


def test_cache_lookup_right_passes(capsys):
    checks.check_cache_lookup(lookup_fn())
    checks.check_cache_lookup(tuner.find_cached)
    assert capsys.readouterr().out.count("correct") == 2


@pytest.mark.parametrize("mistake,words", [("prefix", "another shape"), ("dict", "stored dict"),
                                           ("stale", "no longer a candidate")])
def test_cache_lookup_names_mistakes(mistake, words):
    fails(checks.check_cache_lookup, lookup_fn(mistake), words)


def test_tuner_uses_learner_functions(tmp_path):
    calls = []

    def search(c, t):
        calls.append("search")
        return tuner.search(c, t)

    def lookup(e, k, c):
        calls.append("lookup")
        return tuner.find_cached(e, k, c)

    tn = tuner.Tuner("fake", kernel_version="1", cache_dir=tmp_path, gpu="fake", search=search, lookup=lookup)
    cands = [{"x": 1}, {"x": 2}]
    first = tn.tune(cands, lambda c: 1.0 / c["x"], shape=(1, 1, 1), dtypes=("f",))
    again = tn.tune(cands, lambda c: 1.0 / c["x"], shape=(1, 1, 1), dtypes=("f",))
    assert first.best == {"x": 2} and again.from_cache and again.best == {"x": 2}
    assert calls == ["lookup", "search", "lookup"]


# --- the pipeline GEMM's element-wise epilogue form agrees with the per-element store ------------

@pytest.mark.parametrize("make", [epilogues.identity, lambda: epilogues.bias_activation("relu"),
                                  lambda: epilogues.bias_activation("gelu"),
                                  lambda: epilogues.bias_activation_from(gelu_fn("right"))],
                         ids=["identity", "bias_relu", "bias_gelu", "learner's bias_gelu"])
def test_elementwise_form_matches_the_store_form(make):
    """Whole tiles use (load, apply), edge tiles ``store``: one epilogue must give the same values
    both ways, or a GEMM's result would depend on where a tile falls."""
    ep = make()
    _, store, _ = ep.device_functions()
    load, apply = ep.elementwise_functions()

    @cuda.jit
    def both(acc, bias, via_store, via_elementwise):
        r, c = cuda.grid(2)
        if r < acc.shape[0] and c < acc.shape[1]:
            args = (bias,)
            store(via_store, 0, r, c, r, acc[r, c], via_store, args)
            via_elementwise[0, r, c] = apply(acc[r, c], load(r, c, args))

    rng = np.random.default_rng(5)
    acc = rng.uniform(-4, 4, (5, 7)).astype(np.float32)
    bias = rng.uniform(-1, 1, 5).astype(np.float32)
    a, b = np.full((1, 5, 7), np.nan, np.float32), np.full((1, 5, 7), np.nan, np.float32)
    both[(1, 1), (8, 8)](acc, bias, a, b)
    assert not np.isnan(a).any() and np.allclose(a, b, rtol=1e-6, atol=1e-7)
