"""Module 03's checks: each classic mistake, fed to its check, gets its named message; the package's
kernels (kernel_lab.fusion) pass, on shapes with padding borders, channel counts and widths that are
not multiples of any block, float16 inputs, and rows of length 1 and of odd length.

Runs under the simulator (no GPU needed).
"""

import linecache
import math

import numpy as np
import pytest

import kernel_lab as kl

pytestmark = [pytest.mark.skipif(not kl.on_simulator(), reason="wrong kernels are fed to the checks in the simulator"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]  # the wrong kernels divide by zero, overflow

kl.setup(quiet=True)
from numba import cuda, float32  # noqa: E402

from kernel_lab import CheckFailed  # noqa: E402
from kernel_lab.checks import fusion as checks  # noqa: E402
from kernel_lab.fusion import conv, epilogues, gemm_bias_relu as gbr, layernorm as ln  # noqa: E402

# --- 03.1 GEMM + bias + ReLU -------------------------------------------------------------------


def test_gemm_bias_relu_unfused_and_fused_pass(capsys):
    checks.check_gemm_bias_relu(gbr.launch_unfused)
    checks.check_gemm_bias_relu(gbr.launch_fused)
    assert capsys.readouterr().out.count("correct for all 3 shapes") == 2


@cuda.jit(device=True)
def ep_no_relu(v, row, col, bias):
    return v + bias[col]


@cuda.jit(device=True)
def ep_relu_first(v, row, col, bias):
    return max(v, float32(0)) + bias[col]


@cuda.jit(device=True)
def ep_bias_by_row(v, row, col, bias):
    return max(v + bias[row], float32(0))


@pytest.mark.parametrize("epilogue, message", [(ep_no_relu, "the ReLU is missing"),
                                               (ep_relu_first, "the ReLU comes before the bias"),
                                               (ep_bias_by_row, "the bias is indexed by the row")])
def test_gemm_bias_relu_names_the_mistake(epilogue, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_gemm_bias_relu(gbr.fused_launcher(epilogue), seed=3)


def test_bytes_moved_pass_and_names_a_missing_pass(capsys):
    checks.check_bytes_moved(gbr.bytes_moved)
    assert "match" in capsys.readouterr().out

    def four_passes(m, n, k, fused):
        return gbr.bytes_moved(m, n, k, fused) - (0 if fused else 4 * m * n)
    with pytest.raises(CheckFailed, match="1 pass\\(es\\) over the M x N floats of C too few"):
        checks.check_bytes_moved(four_passes)
    with pytest.raises(CheckFailed, match="elements, not bytes"):
        checks.check_bytes_moved(lambda m, n, k, fused: gbr.bytes_moved(m, n, k, fused) // 4)


# --- 03.2 convolution --------------------------------------------------------------------------


def test_every_convolution_variant_passes(capsys):
    checks.check_conv(lambda y, x, w, b: conv.conv3x3_bias[conv.grid_2d(y)](x, w, b, y), relu=False,
                      name="direct")
    for label, launch in conv.VARIANTS.items():
        checks.check_conv(launch, name=label)
    checks.check_conv(conv.launch_register_blocked, name="register blocked", block=conv.RB)
    out = capsys.readouterr().out
    assert out.count("correct for all 4 shapes (21 channels, odd, tile+1, 1 pixel)") == 1 + len(conv.VARIANTS)
    assert "register blocked: correct for all 5 shapes (past the register block, 21 channels" in out


def _mutated(factory, old, new):
    """``factory`` (a function of kernel_lab.fusion.conv) with one edit of its source: a mistake."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(factory.__wrapped__ if hasattr(factory, "__wrapped__") else factory))
    source = "\n".join(ln for ln in source.splitlines() if not ln.startswith("@functools.cache"))
    assert source.count(old) == 1, old
    namespace = dict(vars(conv))
    source, filename = source.replace(old, new), f"<mutated {factory.__name__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # the simulator's reports
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[factory.__name__]


def _register_blocked(old, new, rb=conv.RB):
    return conv.register_blocked_launcher(_mutated(conv.make_register_blocked, old, new), rb)


@pytest.mark.parametrize("old, new, message", [
    ("w_s[(oc * cin + c) * 9 + i * 3 + j]", "w_s[(c * COB + oc) * 9 + i * 3 + j]",
     r"the wrong channel stride in the group's weights \(w_s\[\(c \* COB \+ oc\)"),
    ("w_s[(oc * cin + c) * 9 + i * 3 + j]", "w_s[(oc * COB + c) * 9 + i * 3 + j]",
     r"the wrong channel stride in the group's weights \(w_s\[\(oc \* COB \+ c\)"),
    ("max(acc[oc, p] + bias[o], float32(0))", "max(acc[oc, p] + bias[g * COB], float32(0))",
     r"received bias\[\d+\], the bias of its group's first channel"),
    ("                        if ox0 + p < wd:\n    ", "                        if True:\n    ",
     r"(?s)y was written outside the array.*the edge pixels of a group"),
    ("                if o < cout:\n", "                if True:\n",
     r"(?s)an output channel past C_out.*the last group of output channels"),
    ("for p in range(PX):\n                        if ox0 + p < wd:", "for p in range(PX):\n                        if ox0 + PX <= wd:",
     r"the edge pixels of a group: the last 1 column\(s\) of the image were never written"),
])
def test_register_blocking_mistakes_named(old, new, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_conv(_register_blocked(old, new), block=conv.RB, seed=5)


def test_the_fast_gathers_test_free_branch_for_padded_rows_is_named():
    make = _mutated(conv.make_gather_fast, "if rows >= NR * RP:", "if rows >= NR:")
    cfg = conv.igemm_tiles()
    with pytest.raises(CheckFailed, match=r"(?s)x was read outside the array.*a padded channel was loaded"):
        checks.check_conv(conv.igemm_launcher(cfg, gather=make(cfg)), name="implicit GEMM", seed=5)


T = conv.TILE


@cuda.jit
def conv_tile_halo_off_by_one(x, w, bias, y):
    # the mistake: the tile starts at the block's first output pixel, not one before it
    tile = cuda.shared.array((T + 2, T + 2), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    ox0, oy0 = cuda.blockIdx.x * T, cuda.blockIdx.y * T
    b, o = cuda.blockIdx.z // y.shape[1], cuda.blockIdx.z % y.shape[1]
    cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
    acc = float32(0)
    for c in range(cin):
        for e in range(ty * T + tx, (T + 2) * (T + 2), T * T):
            r, q = e // (T + 2), e % (T + 2)
            iy, ix = oy0 + r, ox0 + q
            tile[r, q] = x[b, c, iy, ix] if 0 <= iy < h and 0 <= ix < wd else float32(0)
        cuda.syncthreads()
        for i in range(3):
            for j in range(3):
                acc += tile[ty + i, tx + j] * w[o, c, i, j]
        cuda.syncthreads()
    if ox0 + tx < wd and oy0 + ty < h:
        y[b, o, oy0 + ty, ox0 + tx] = max(acc + bias[o], float32(0))


def _conv_kernel(bias_of, clamp=False, flip=False, relu=True, edge=0):
    """A one-pixel-per-thread kernel with one mistake chosen by the arguments."""
    @cuda.jit
    def k(x, w, bias, y):
        ox = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        oy = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        cout = y.shape[1]
        b, o = cuda.blockIdx.z // cout, cuda.blockIdx.z % cout
        cin, h, wd = x.shape[1], x.shape[2], x.shape[3]
        if ox < wd and oy < h:
            acc = float32(0)
            for c in range(cin):
                for i in range(3):
                    for j in range(3):
                        iy, ix = oy + i - 1, ox + j - 1
                        if clamp:  # the edge pixel repeated instead of zeros
                            iy, ix = min(max(iy, 0), h - 1), min(max(ix, 0), wd - 1)
                        if 0 <= iy < h and 0 <= ix < wd + edge:  # edge=1: the right edge's test <=
                            wi, wj = ((2 - i, j) if flip == "rows" else (j, i) if flip == "transpose"
                                      else (2 - i, 2 - j) if flip else (i, j))
                            acc += x[b, c, iy, ix] * w[o, c, wi, wj]
            v = acc + bias[bias_of(o, cout)]
            y[b, o, oy, ox] = max(v, float32(0)) if relu else v
    return conv.launcher(k)


same = cuda.jit(device=True)(lambda o, cout: o)
next_channel = cuda.jit(device=True)(lambda o, cout: (o + 1) % cout)


@pytest.mark.parametrize("launch, message", [
    (conv.launcher(conv_tile_halo_off_by_one), "halo off by one: the 3x3 window is shifted by \\(\\+1, \\+1\\)"),
    (_conv_kernel(next_channel), "bias of the wrong channel: output channel 0 \\(batch 0\\) received bias\\[1\\]"),
    (_conv_kernel(same, clamp=True), "only outputs on the image's border are wrong: the padding"),
    (_conv_kernel(same, flip=True), "the window is flipped"),
    (_conv_kernel(same, relu=False), "the ReLU is missing"),
])
def test_convolution_names_the_mistake(launch, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_conv(launch, seed=5)


# The implicit GEMM's gather, as the learner writes it (03.2, exercise 4), through
# igemm_launcher(gather=...): the simulator's smallest tile configuration (one pixel column per thread).
IGEMM = conv.igemm_tiles()
IG_BN, IG_RP = IGEMM.bn, IGEMM.threads // IGEMM.bn
IG_NR = IGEMM.bk // IG_RP


def _gather(sign=1, column_test=True):
    """The learner's gather_x; ``sign=-1``: the column offset's sign flipped (w - dj);
    ``column_test=False``: the padding test without its column half."""
    @cuda.jit(device=True, inline="always")
    def gather_x(x, rb, xb, c0, di, dj, ph, pw, cin, h, wd, t):
        r0 = t // IG_BN
        hw = h * wd
        hh, ww = ph[0] + di, pw[0] + sign * dj
        inside = 0 <= hh < h and (0 <= ww < wd or not column_test)
        for v in range(IG_NR):
            c = c0 + r0 + v * IG_RP
            rb[v] = x[xb + c * hw + hh * wd + ww] if inside and c < cin else float32(0)
    return gather_x


def test_implicit_gemm_learner_gather_passes(capsys):
    checks.check_conv(conv.igemm_launcher(IGEMM, gather=_gather()), name="implicit GEMM", seed=5)
    assert "implicit GEMM: correct for all 4 shapes" in capsys.readouterr().out


def test_implicit_gemm_stub_gather_says_not_done():
    @cuda.jit(device=True, forceinline=True)
    def gather_x(x, rb, xb, c0, di, dj, ph, pw, cin, h, wd, t):
        pass  # the course's stub
    with pytest.raises(CheckFailed, match=r"the exercise is not done yet \(gather_x's body is still `pass`"):
        checks.check_conv(conv.igemm_launcher(IGEMM, gather=gather_x), name="implicit GEMM", seed=5)


@pytest.mark.parametrize("gather, message", [
    (_gather(sign=-1), r"the window's column offset has the wrong sign \(w - dj"),
    (_gather(column_test=False), r"(?s)x was read outside the array.*a column \(or a row\) outside the image must "
                                 r"load 0, not be read"),
])
def test_implicit_gemm_gather_mistakes_named(gather, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_conv(conv.igemm_launcher(IGEMM, gather=gather), name="implicit GEMM", seed=5)


@pytest.mark.parametrize("launch, message", [
    # the sign mistake in a direct kernel: the weight's row index mirrored (w[o, c, 2 - i, j])
    (_conv_kernel(same, flip="rows"), r"the window's row offset has the wrong sign"),
    (_conv_kernel(same, flip="transpose"), r"the window is transposed \(w\[o, c, j, i\]\)"),
    (_conv_kernel(same, edge=1), r"(?s)x was read outside the array.*Hint: the padding: a column \(or a row\) "
                                 r"outside the image must load 0, not be read\. Test .* 0 <= ix < W"),
])
def test_direct_convolution_window_mistakes_named(launch, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_conv(launch, seed=5)


# --- 03.3 LayerNorm + GELU ---------------------------------------------------------------------


def test_layernorm_kernels_pass_in_float32_and_float16(capsys):
    for dtype in ("float32", "float16"):
        checks.check_layernorm_gelu(ln.launch_warp_per_row, dtype=dtype)
    checks.check_layernorm_gelu(ln.launch_block_per_row, max_n=ln.BLOCK * ln.BLOCK_VALUES, shapes=[
        ("rows of length 1", (2, 1)), ("odd, over a block", (2, ln.BLOCK + 3))])
    out = capsys.readouterr().out
    assert "(float32): y, mean and rstd correct" in out and "(float16): y, mean and rstd correct" in out
    assert "rows of length 1" in out and "odd length" in out


def _ln_kernel(minus=0, use_eps=True, erf=False):
    """Two-pass LayerNorm + GELU, one thread per row, with one mistake chosen by the arguments."""
    @cuda.jit
    def k(x, gamma, beta, y, mean_out, rstd_out, eps):
        r = cuda.grid(1)
        if r < x.shape[0]:
            n = x.shape[1]
            s = float32(0)
            for c in range(n):
                s += float32(x[r, c])
            mean = s / n
            m2 = float32(0)
            for c in range(n):
                d = float32(x[r, c]) - mean
                m2 += d * d
            var = m2 / (n - minus) if n - minus != 0 else m2 * float32(math.nan)
            rstd = float32(1) / math.sqrt(var + (eps if use_eps else float32(0)))
            mean_out[r], rstd_out[r] = mean, rstd
            for c in range(n):
                v = (float32(x[r, c]) - mean) * rstd * gamma[c] + beta[c]
                if erf:
                    y[r, c] = 0.5 * v * (1 + math.erf(v / math.sqrt(2.0)))
                else:
                    y[r, c] = 0.5 * v * (1 + math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))

    def launch(y, mean, rstd, x, gamma, beta):
        k[-(-x.shape[0] // 32), 32](x, gamma, beta, y, mean, rstd, float32(1e-5))
    return launch


def test_a_right_two_pass_kernel_passes(capsys):
    checks.check_layernorm_gelu(_ln_kernel(), max_n=64)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("launch, message", [
    (_ln_kernel(minus=1), "variance with the wrong divisor"),
    (_ln_kernel(use_eps=False), "eps is left out"),
    (_ln_kernel(erf=True), "GELU in its erf form"),
])
def test_layernorm_names_the_mistake(launch, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_layernorm_gelu(launch, max_n=64, seed=7)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_wrong_divisor_is_named_on_odd_rows_in_both_formats(dtype):
    with pytest.raises(CheckFailed, match="variance with the wrong divisor"):
        checks.check_layernorm_gelu(_ln_kernel(minus=1), dtype=dtype, shapes=[("odd length", (5, 33))], seed=8)


def test_statistics_accumulated_in_float16_fail():
    # the mistake: the row's sum kept in float16 (11-bit mantissa) instead of float32
    @cuda.jit
    def k(x, gamma, beta, y, mean_out, rstd_out, eps):
        r = cuda.grid(1)
        if r < x.shape[0]:
            n = x.shape[1]
            s = np.float16(0)
            for c in range(n):
                s = np.float16(s + x[r, c])
            mean = float32(s) / n
            m2 = float32(0)
            for c in range(n):
                d = float32(x[r, c]) - mean
                m2 += d * d
            rstd = float32(1) / math.sqrt(m2 / n + eps)
            mean_out[r], rstd_out[r] = mean, rstd
            for c in range(n):
                v = (float32(x[r, c]) - mean) * rstd * gamma[c] + beta[c]
                y[r, c] = 0.5 * v * (1 + math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))

    def launch(y, mean, rstd, x, gamma, beta):
        k[-(-x.shape[0] // 32), 32](x, gamma, beta, y, mean, rstd, float32(1e-5))
    with pytest.raises(CheckFailed, match="LayerNorm \\+ GELU, mean .*float16"):
        checks.check_layernorm_gelu(launch, dtype="float16", shapes=[("long rows", (4, 127))], seed=12)


# --- 03.4 epilogues and the row softmax --------------------------------------------------------


def test_every_epilogue_passes(capsys):
    for label, (fn, _) in epilogues.EPILOGUES.items():
        checks.check_epilogue(epilogues.gemm_with(fn), label, shapes=[("edges", (35, 37, 19))])
    assert capsys.readouterr().out.count("correct for all 1 shapes") == len(epilogues.EPILOGUES)


@cuda.jit(device=True)
def ep_sigmoid_then_bias(v, row, col, aux):
    return float32(1) / (float32(1) + math.exp(-v)) + aux[0][col]


@cuda.jit(device=True)
def ep_swapped(v, row, col, aux):
    return aux[3] * v + aux[2] * aux[1][row, col] + aux[4] * aux[0][col]


@pytest.mark.parametrize("fn, label, message", [
    (ep_sigmoid_then_bias, "bias + sigmoid", "the activation comes before the bias"),
    (ep_swapped, "alpha*AB + beta*C + gamma*bias", "alpha and beta are swapped"),
])
def test_epilogue_names_the_mistake(fn, label, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_epilogue(epilogues.gemm_with(fn), label, shapes=[("edges", (35, 37, 19))], seed=9)


def test_row_softmax_passes(capsys):
    checks.check_row_softmax(epilogues.launch_row_softmax)
    assert "correct for all 3 shapes" in capsys.readouterr().out


ST, SV = epilogues.SOFTMAX_THREADS, epilogues.SOFTMAX_VALUES


def _softmax_kernel(subtract_max=True, whole_row=True):
    @cuda.jit
    def k(a, b, out):
        scratch = cuda.shared.array(ST // 32, float32)
        v = cuda.local.array(SV, float32)
        row, t = cuda.blockIdx.x, cuda.threadIdx.x
        n, kk = b.shape[1], a.shape[1]
        m = float32(-math.inf)
        for j in range(SV):
            col = t + ST * j
            v[j] = float32(-math.inf)
            if col < n:
                acc = float32(0)
                for q in range(kk):
                    acc += a[row, q] * b[q, col]
                v[j] = acc
                m = max(m, acc)
        m = epilogues.block_max_f32(m, scratch) if subtract_max else float32(0)
        s = float32(0)
        for j in range(SV):
            v[j] = math.exp(v[j] - m) if v[j] != -math.inf else float32(0)
            s += v[j]
        if whole_row:
            s = epilogues.block_sum_f32(s, scratch)
        for j in range(SV):
            col = t + ST * j
            if col < n:
                out[row, col] = v[j] / s

    def launch(out, a, b):
        k[a.shape[0], ST](a, b, out)
    return launch


@pytest.mark.parametrize("launch, message", [(_softmax_kernel(subtract_max=False), "softmax without the row max"),
                                             (_softmax_kernel(whole_row=False), "the rows do not sum to 1")])
def test_row_softmax_names_the_mistake(launch, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_row_softmax(launch, seed=11)
