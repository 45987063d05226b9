"""Checks for module 03 (fusion): each names the classic mistake it recognises.

Every check draws fresh random inputs at shapes that catch edge mistakes (one pixel, one element,
channel counts and widths that are not multiples of any block, rows of length 1 and of odd
length), runs the learner's launcher on poisoned outputs (with a poisoned guard after the end),
compares with a float64 NumPy reference at the tolerance of the format, and on a mismatch tries
the references of the classic mistakes: when the result matches one of them, the message names it
("halo off by one", "bias of the wrong channel", "variance with the wrong divisor", "softmax
without the row max", ...), before the checker's general explanation.

* :func:`check_gemm_bias_relu`: ``launch(c, a, b, bias)`` -> ``relu(a @ b + bias)``;
* :func:`check_bytes_moved`: the learner's traffic count for notebook 03.1;
* :func:`check_conv`: ``launch(y, x, w, bias)`` -> 3x3 convolution, padding 1, + bias (+ ReLU); it
  names a window shifted, flipped, transposed or mirrored along one axis (the implicit GEMM's
  ``w - dj``), and turns the simulator's report of a read outside x into the padding's message;
* :func:`check_layernorm_gelu`: ``launch(y, mean, rstd, x, gamma, beta)``, float32 or float16;
* :func:`check_epilogue`: ``launch(c, a, b, aux)`` for an epilogue of :mod:`kernel_lab.fusion.epilogues`;
* :func:`check_row_softmax`: ``launch(out, a, b)`` -> ``softmax(a @ b)`` row by row.
"""

from __future__ import annotations

import math
import re
import secrets

import numpy as np

from .. import progress
from ..check import CheckFailed, _GuardedOutput, _mismatch, tolerance
from ..environment import on_simulator
from ..validate import require_callable


def _not_done(name, exc):
    return CheckFailed(f"{name}: the exercise is not done yet ({exc or 'the stub is still in place'})")


def _run(name, launch, outputs, inputs):
    """Poisoned outputs [(shape, dtype)], device copies of inputs; returns [(host, guard_written)]."""
    from numba import cuda

    outs = [_GuardedOutput(shape, dtype) for shape, dtype in outputs]
    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in inputs]
    try:
        launch(*[o.array for o in outs], *dev)
    except NotImplementedError as exc:
        raise _not_done(name, exc) from None
    return [o.fetch() for o in outs]


def _matches(got, ref, **kw):
    ref = np.asarray(ref, np.float64)
    if ref.shape != got.shape or not np.isfinite(ref).all():
        return False
    return _mismatch("", got, ref, **kw) is None


def _judge(name, context, got, guard, ref, *, fmt, k, magnitude=None, rtol=None, atol=None, mistakes=(),
           seed=None):
    """Raise CheckFailed if ``got`` is not ``ref``; name the first of ``mistakes`` (label, wrong
    reference or a function returning a hint or None) that explains it."""
    kw = dict(fmt=fmt, k=k, rtol=rtol, atol=atol, magnitude=magnitude)
    mm = _mismatch(name, got, ref, guard_written=guard, context=context, seed=seed, **kw)
    if mm is None:
        return
    named = None
    for hint, wrong in mistakes:
        if callable(wrong):
            found = wrong(got)
            if found:
                named = found if hint is None else f"{hint} {found}"
                break
        elif _matches(got, wrong, **kw):
            named = hint
            break
    text = mm.message()
    if named:
        first, _, rest = text.partition("\n")
        text = f"{first}\nThe mistake: {named}\n{rest}"
    raise _Failed(text, named is not None, got.size)


class _Failed(CheckFailed):
    """One shape's failure; :class:`_Shapes` chooses which to report."""

    def __init__(self, text, named, size):
        super().__init__(text)
        self.named, self.size = named, size


class _Shapes:
    """Run every shape, then report the most telling failure: the first (in the checks' order, which
    puts tiny shapes last: a 1 x 1 problem fits several mistakes at once) whose mistake has a name,
    and list the shapes that fail."""

    def __init__(self):
        self.failures = []

    def run(self, label, fn):
        try:
            fn()
        except _Failed as exc:
            self.failures.append((label, exc))

    def raise_any(self, labels):
        if not self.failures:
            return
        named = [f for f in self.failures if f[1].named]
        label, exc = named[0] if named else self.failures[0]
        failing = [lb for lb, _ in self.failures]
        passing = [lb for lb in labels if lb not in failing]
        raise CheckFailed(f"{exc}\nshapes that fail: {', '.join(failing)}; shapes that pass: "
                          f"{', '.join(passing) or 'none'}") from None


def _seed(seed):
    return secrets.randbits(32) if seed is None else seed


# ================================================================================================
# 03.1 GEMM + bias + ReLU


def _gemm_shapes():
    shapes = [("edges", (35, 37, 19)), ("K=1", (9, 40, 1)), ("1x1x1", (1, 1, 1))]
    if not on_simulator():
        shapes.insert(0, ("large", (1000, 1030, 515)))
    return shapes


def check_gemm_bias_relu(launch, *, name="GEMM + bias + ReLU", shapes=None, seed=None) -> None:
    """``launch(c, a, b, bias)`` must leave ``relu(a @ b + bias)`` in ``c`` (M x N, float32; the bias
    has one value per column). Shapes are no multiples of any tile, with M <= N (so a bias indexed
    by the row still reads inside the array and can be named)."""
    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or _gemm_shapes()
    fails = _Shapes()
    for label, (m, n, k) in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        (got, guard), = _run(name, launch, [((m, n), np.float32)], (a, b, bias))
        p = a.astype(np.float64) @ b
        bias64 = bias.astype(np.float64)
        mag = np.abs(a.astype(np.float64)) @ np.abs(b) + np.abs(bias64)
        mistakes = [
            ("the ReLU is missing: the result keeps its negative values (max(v, 0) after the bias).", p + bias64),
            ("the ReLU comes before the bias: relu(AB) + bias; the bias goes first, then max(v + bias, 0).",
             np.maximum(p, 0) + bias64),
            ("the bias is missing.", np.maximum(p, 0)),
            ("the bias is added twice (once in the chain and once more, or in two kernels).",
             np.maximum(p + 2 * bias64, 0)),
            ("the bias is indexed by the row: a linear layer adds bias[col], one value per column of C.",
             np.maximum(p + bias64[:m, None], 0) if m <= n else None),
        ]
        mistakes = [(h, r) for h, r in mistakes if r is not None]
        ctx = f" (shape {label}: M, N, K = {m}, {n}, {k})"
        fails.run(label, lambda: _judge(name, ctx, got, guard, np.maximum(p + bias64, 0), fmt="float32", k=k,
                                        magnitude=mag, mistakes=mistakes, seed=seed))
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


def check_bytes_moved(fn, *, name="bytes moved") -> None:
    """``fn(m, n, k, fused)`` must count the fewest bytes each variant moves (see
    :func:`kernel_lab.fusion.gemm_bias_relu.bytes_moved`)."""
    from ..fusion.gemm_bias_relu import bytes_moved

    require_callable(fn, "fn")
    for m, n, k in [(4096, 4096, 64), (1000, 3000, 17)]:
        for fused in (False, True):
            try:
                got = fn(m, n, k, fused)
            except NotImplementedError as exc:
                raise _not_done(name, exc) from None
            want = bytes_moved(m, n, k, fused)
            if got == want:
                continue
            what = "fused" if fused else "unfused"
            msg = f"{name} ({what}, M, N, K = {m}, {n}, {k}): expected {want:,} bytes, got {got}"
            if got is None:
                msg += "\nThe mistake: the function returns nothing."
            else:
                d = got - want
                passes = d / (4 * m * n)
                if abs(passes - round(passes)) < 1e-9 and round(passes) != 0:
                    msg += (f"\nThe mistake: {abs(round(passes))} pass(es) over the M x N floats of C too "
                            f"{'many' if passes > 0 else 'few'}: unfused, C is written by the GEMM, then read "
                            "and written by the bias kernel, then read and written by the ReLU (5 passes); "
                            "fused, written once.")
                elif abs(d) == 4 * n:
                    msg += "\nThe mistake: the bias (N floats, read once) is counted wrong."
                elif got == want // 4 or got * 4 == want:
                    msg += "\nThe mistake: elements, not bytes: a float32 is 4 bytes."
            raise CheckFailed(msg)
    progress.passed(name)
    print(f"{name}: your counts match for both variants")


# ================================================================================================
# 03.2 3x3 convolution + bias + ReLU


def _conv_shapes(tile):
    # (B, C_in, C_out, H, W): a single pixel (all border); odd sizes; a tile and one more
    shapes = [("odd", (2, 3, 5, 7, 6)), ("tile+1", (1, 2, 3, tile + 1, 2 * tile + 1)), ("1 pixel", (1, 1, 1, 1, 1))]
    if not on_simulator():
        shapes.insert(0, ("large", (2, 19, 37, 61, 45)))
    return shapes


def _conv_shifted(x, w, bias, sy, sx, relu):
    """The convolution with the window read (sy, sx) pixels off: x[h + i - 1 + sy, w + j - 1 + sx],
    zero outside the image."""
    b, c, h, wd = x.shape
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (2, 2), (2, 2)))
    w64 = np.asarray(w, np.float64)
    y = np.zeros((b, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            win = xp[:, :, 1 + i + sy:1 + i + sy + h, 1 + j + sx:1 + j + sx + wd]
            y += np.einsum("bchw,oc->bohw", win, w64[:, :, i, j], optimize=True)
    y += np.asarray(bias, np.float64)[None, :, None, None]
    return np.maximum(y, 0.0) if relu else y


def _window_sign(axis, wrong, index, weight):
    return (f"the window's {axis} offset has the wrong sign ({wrong}, or the weight {weight}): the window is "
            f"mirrored along the {axis}s. Output (h, w) reads x[h + i - 1, w + j - 1]: with the window offset "
            "(di, dj) = (i - 1, j - 1), the input pixel is (h + di, w + dj), multiplied by w[o, c, i, j].")


_READ_OUTSIDE = re.compile(r"reads `(?P<expr>[^`]*)`.*?outside the global array `\w+` of shape \((?P<shape>[\d, ]*)\)",
                           re.S)


def _conv_read_outside_x(name, exc, x):
    """A CheckFailed for the simulator's report of a read outside ``x`` (4-D, on a row or column axis;
    or flat, as the implicit GEMM takes it): a window position outside the image that was read
    instead of taken as 0 (or, the same in a flat x, a padded channel c >= C_in). None for any other
    error (a batch or channel index out of range keeps the simulator's own report)."""
    try:
        from ..simulator.errors import OutOfBoundsAccess
    except ImportError:  # no simulator: a GPU reports nothing here
        return None
    if not isinstance(exc, OutOfBoundsAccess):
        return None
    text = str(exc)
    m = _READ_OUTSIDE.search(text)
    if m is None:
        return None
    shape = tuple(int(v) for v in m.group("shape").replace(" ", "").split(",") if v)
    if shape not in (tuple(x.shape), (x.size,)):
        return None
    axis = re.search(r"Index -?\d+ on axis (\d+)", text)
    if shape != (x.size,) and (axis is None or int(axis.group(1)) < x.ndim - 2):
        return None  # a 4-D x read outside on the batch or channel axis: not the padding
    first = text.strip().splitlines()[0]
    site = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("at ")), "")
    hint = ("the padding: a column (or a row) outside the image must load 0, not be read. Test the input pixel "
            "under the window, 0 <= iy < H and 0 <= ix < W (iy = h + i - 1, ix = w + j - 1), before the load.")
    if shape == (x.size,):  # flat, as the implicit GEMM's gather reads it
        hint = ("the padding: a column (or a row) outside the image must load 0, not be read. Test the input "
                "pixel under the window offset, 0 <= hh < H and 0 <= ww < W (hh = h + di, ww = w + dj), and load 0 "
                "where the test fails. In a flat x, ww = -1 or W without the column test reads the neighbouring "
                "row's pixel (a wrong value), and outside the array at the ends of x, where the simulator stopped "
                "it. (Rows c >= C_in of a K-tile load 0 the same way.)")
    return CheckFailed(f"{name}: x was read outside the array: {first}" + (f"\n  {site}" if site else "")
                       + "\nHint: " + hint)


def _wrong_bias(x, w, bias, ref_lin, relu):
    """A function naming a bias taken from the wrong channel (or missing, or doubled) from what the
    kernel wrote: where both are positive, got - ref is constant per (batch, channel) plane."""
    def explain(got):
        g = got.astype(np.float64)
        planes = []
        for bi in range(ref_lin.shape[0]):
            for o in range(ref_lin.shape[1]):
                sel = (ref_lin[bi, o] > 1e-3) & (g[bi, o] > 1e-3) if relu else np.ones(g[bi, o].shape, bool)
                if not sel.any():
                    continue
                d = g[bi, o][sel] - ref_lin[bi, o][sel]
                if not np.isfinite(d).all() or np.ptp(d) > 1e-3 * (1 + np.abs(d).max()):
                    return None  # not a constant offset: another mistake
                planes.append((bi, o, float(d.mean())))
        bias64 = np.asarray(bias, np.float64)
        wrong = [(bi, o, d) for bi, o, d in planes if abs(d) > 1e-4 * (1 + abs(bias64[o]))]
        if not wrong:
            return None
        bi, o, d = wrong[0]
        used = bias64[o] + d
        js = [j for j in range(len(bias64)) if j != o and abs(bias64[j] - used) < 1e-4 * (1 + abs(used))]
        if js:
            return (f"bias of the wrong channel: output channel {o} (batch {bi}) received bias[{js[0]}] instead of "
                    f"bias[{o}]. The output channel is blockIdx.z % C_out (blockIdx.z = b * C_out + o), not the "
                    "input channel, the batch index or blockIdx.z itself.")
        if abs(used) < 1e-4 * (1 + abs(bias64[o])):
            return "the bias is missing: add bias[o] (o: the output channel) to every output of channel o."
        if abs(used - 2 * bias64[o]) < 1e-4 * (1 + abs(bias64[o])):
            return "the bias is added twice."
        return None
    return explain


def check_conv(launch, *, name="3x3 convolution + bias + ReLU", relu=True, tile=None, shapes=None,
               seed=None) -> None:
    """``launch(y, x, w, bias)`` must leave in ``y`` (B x C_out x H x W, float32) the 3x3
    convolution of ``x`` (B x C_in x H x W) with ``w`` (C_out x C_in x 3 x 3), padding 1, plus
    ``bias[o]``, then ReLU (``relu=False``: without the ReLU, the first kernel of the unfused chain).
    ``tile``: the kernel's tile width, to draw a shape one past it (default: the package's TILE)."""
    from ..fusion.conv import TILE, magnitude, reference

    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or _conv_shapes(tile or TILE)
    fails = _Shapes()
    for label, (b, cin, cout, h, wd) in shapes:
        x = rng.standard_normal((b, cin, h, wd), dtype=np.float32)
        w = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
        bias = (rng.standard_normal(cout) * 2).astype(np.float32)
        ctx = f" (shape {label}: B, C_in, C_out, H, W = {b}, {cin}, {cout}, {h}, {wd})"
        try:
            (got, guard), = _run(name, launch, [((b, cout, h, wd), np.float32)], (x, w, bias))
        except Exception as exc:  # noqa: BLE001 - the simulator's report of a read outside x
            named = _conv_read_outside_x(name + ctx, exc, x)
            if named is None:
                raise
            raise named from None
        ref = reference(x, w, bias, relu=relu)
        ref_lin = reference(x, w, bias, relu=False)
        inner = np.zeros((h, wd), bool)
        inner[1:-1, 1:-1] = True

        def border_only(g, ref=ref, inner=inner):
            with np.errstate(invalid="ignore"):
                bad = ~(np.abs(g.astype(np.float64) - ref) <= 1e-3 * (1 + np.abs(ref)))
            if inner.any() and bad.any() and not bad[:, :, inner].any():
                return ("only outputs on the image's border are wrong: the padding. Outside the image x "
                        "counts as 0, and every pixel inside counts: the tests are 0 <= iy < H and 0 <= ix < W.")
            return None

        mistakes = []
        for sy, sx in [(1, 1), (-1, -1), (1, 0), (0, 1), (-1, 0), (0, -1), (1, -1), (-1, 1)]:
            mistakes.append((f"halo off by one: the 3x3 window is shifted by ({sy:+d}, {sx:+d}) pixels. Output "
                             "(h, w) reads x[h + i - 1, w + j - 1] for i, j in 0, 1, 2; in a shared tile whose "
                             "element [0, 0] holds pixel (oy0 - 1, ox0 - 1), thread (ty, tx) reads "
                             "tile[ty + i, tx + j].", _conv_shifted(x, w, bias, sy, sx, relu)))
        mistakes += [
            ("the window is flipped (w[o, c, 2 - i, 2 - j]): a deep-learning 'convolution' is a "
             "cross-correlation, w[o, c, i, j] multiplies x[h + i - 1, w + j - 1].",
             reference(x, w[:, :, ::-1, ::-1], bias, relu=relu)),
            ("the window is transposed (w[o, c, j, i]): w[o, c, i, j] multiplies x[h + i - 1, w + j - 1], i along "
             "the rows.", reference(x, w.transpose(0, 1, 3, 2), bias, relu=relu)),
            (_window_sign("column", "w - dj", "j", "w[o, c, i, 2 - j]"),
             reference(x, w[:, :, :, ::-1], bias, relu=relu) if wd > 1 else None),
            (_window_sign("row", "h - di", "i", "w[o, c, 2 - i, j]"),
             reference(x, w[:, :, ::-1, :], bias, relu=relu) if h > 1 else None),
            ("the ReLU is missing.", ref_lin if relu else None),
            ("the ReLU is applied, but this kernel (the first of the unfused chain) must leave conv + bias.",
             None if relu else ref),
            ("the last input channel is left out: the sum runs over c in range(C_in).",
             reference(x[:, :-1], w[:, :-1], bias, relu=relu) if cin > 1 else None),
            (None, border_only),
            (None, _wrong_bias(x, w, bias, ref_lin, relu)),
        ]
        mistakes = [(hh, r) for hh, r in mistakes if r is not None]
        fails.run(label, lambda: _judge(name, ctx, got, guard, ref, fmt="float32", k=9 * cin + 1,
                                        magnitude=magnitude(x, w, bias), mistakes=mistakes, seed=seed))
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


# ================================================================================================
# 03.3 LayerNorm + GELU


def _ln_shapes(max_n):
    big = 1000 if not on_simulator() else 127
    shapes = [("odd length", (5, 33)), ("7 x 7", (7, 7)), ("a multiple of 4", (4, 36)), ("long rows", (3, min(big, max_n))),
              ("very long rows", (2, max_n)), ("rows of length 1", (3, 1))]
    seen, out = set(), []
    for label, (r, n) in shapes:
        if n <= max_n and (r, n) not in seen:
            seen.add((r, n))
            out.append((label, (r, n)))
    return out


def _ln_stats(x64, divisor_minus=0, eps=1e-5, eps_inside=True):
    n = x64.shape[1]
    mean = x64.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = ((x64 - mean[:, None]) ** 2).sum(axis=1) / (n - divisor_minus)
        rstd = 1.0 / np.sqrt(var + eps) if eps_inside else 1.0 / (np.sqrt(var) + eps)
    return mean, rstd


def check_layernorm_gelu(launch, *, name="LayerNorm + GELU", dtype="float32", max_n=None, eps=1e-5,
                         shapes=None, seed=None) -> None:
    """``launch(y, mean, rstd, x, gamma, beta)`` must leave ``gelu_tanh(layernorm(x) * gamma + beta)``
    in ``y`` (x's dtype, float32 or float16), and each row's mean and ``1 / sqrt(var + eps)`` (float32)
    in ``mean`` and ``rstd``; the variance divides by N. ``max_n``: the longest row the kernel takes
    (default: the package's warp-per-row limit)."""
    from ..fusion.layernorm import WARP_VALUES, gelu_tanh

    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    shapes = shapes or _ln_shapes(max_n or 32 * WARP_VALUES)
    fmt = "float16" if dt == np.float16 else "float32"
    fails = _Shapes()
    for label, (r, n) in shapes:
        x = (rng.standard_normal((r, n)) * 3 + 1).astype(dt)
        gamma = (1 + 0.5 * rng.standard_normal(n)).astype(np.float32)
        beta = rng.standard_normal(n).astype(np.float32)
        (y, gy), (mu, gm), (rs, gr) = _run(name, launch, [((r, n), dt), ((r,), np.float32), ((r,), np.float32)],
                                           (x, gamma, beta))
        x64, g64, b64 = x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64)
        mean, rstd = _ln_stats(x64, eps=eps)
        ctx = f" (shape {label}: {r} rows of {n}, {dt.name})"

        def y_of(mean_, rstd_, act=gelu_tanh):
            with np.errstate(all="ignore"):
                return act((x64 - mean_[:, None]) * rstd_[:, None] * g64 + b64)

        ref_y = y_of(mean, rstd)
        mag_y = 1.2 * ((np.abs(x64) + np.abs(mean)[:, None]) * rstd[:, None] * np.abs(g64) + np.abs(b64))
        # mean: a sum of n terms; rstd: relative, from a variance of n terms
        wrong_div = _ln_stats(x64, divisor_minus=1, eps=eps)[1]
        no_eps = _ln_stats(x64, eps=0.0)[1]
        eps_out = _ln_stats(x64, eps=eps, eps_inside=False)[1]
        stat_mistakes = [
            ("variance with the wrong divisor: LayerNorm's variance is the population variance, M2 / N, not "
             "M2 / (N - 1) (for rows of length 1 that divides by zero).", wrong_div),
            ("eps is left out: rstd = 1 / sqrt(var + eps) (a constant row has var = 0).", no_eps),
            ("eps is outside the square root: rstd = 1 / sqrt(var + eps), not 1 / (sqrt(var) + eps).", eps_out),
            ("rstd holds the standard deviation: store its reciprocal, 1 / sqrt(var + eps).",
             np.sqrt(1.0 / (rstd * rstd))),
        ]

        def nonfinite_rstd(got, n=n):
            if n == 1 and not np.isfinite(got.astype(np.float64)).all():
                nan = np.isnan(got.astype(np.float64)).any()
                return ("variance with the wrong divisor: M2 / (N - 1) is 0 / 0 for a row of length 1; "
                        "LayerNorm divides by N." if nan else
                        "eps is left out: a row of length 1 has var = 0, and 1 / sqrt(0) is infinite.")
            return None

        y_mistakes = [("GELU in its erf form: this kernel uses the tanh form, 0.5 v (1 + tanh(sqrt(2/pi) "
                       "(v + 0.044715 v^3))).", y_of(mean, rstd, act=lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)))))
                      ] if fmt == "float32" else []
        y_mistakes += [
            ("gamma and beta are swapped: y = gelu(xhat * gamma + beta).",
             gelu_tanh((x64 - mean[:, None]) * rstd[:, None] * b64 + g64)),
            ("the GELU is missing.", y_of(mean, rstd, act=lambda v: v)),
            ("y is normalised with the variance of the wrong divisor (M2 / (N - 1)); LayerNorm divides by N.",
             y_of(mean, wrong_div)),
        ]

        def judge_all():
            _judge(f"{name}, mean", ctx, mu, gm, mean, fmt="float32", k=n, magnitude=np.abs(x64).mean(axis=1),
                   mistakes=[("the mean is the row's sum, not divided by N.", x64.sum(axis=1))], seed=seed)
            _judge(f"{name}, rstd", ctx, rs, gr, rstd, fmt="float32", k=n, rtol=4 * tolerance("float32", n),
                   magnitude=rstd, mistakes=[(None, nonfinite_rstd)] + stat_mistakes, seed=seed)
            _judge(f"{name}, y", ctx, y, gy, ref_y, fmt=fmt, k=n if fmt == "float32" else 1, magnitude=mag_y,
                   mistakes=y_mistakes, seed=seed)
        fails.run(label, judge_all)
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name} ({dt.name}): y, mean and rstd correct for all {len(shapes)} shapes "
          f"({', '.join(lb for lb, _ in shapes)})")


def _erf(v):
    return np.vectorize(math.erf)(v)


# ================================================================================================
# 03.4 epilogues and the row softmax


def check_epilogue(launch, epilogue: str, *, name=None, shapes=None, seed=None) -> None:
    """``launch(c, a, b, aux)`` with ``aux = epilogues.epilogue_args(bias, c_in, alpha, beta, gamma)``
    must leave the named epilogue (a key of :data:`kernel_lab.fusion.epilogues.EPILOGUES`) of
    ``a @ b`` in ``c``."""
    from numba import cuda

    from ..fusion.epilogues import EPILOGUES, epilogue_args

    require_callable(launch, "launch")
    name = name or f"GEMM + {epilogue}"
    ref_fn = EPILOGUES[epilogue][1]
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or [("edges", (35, 37, 19)), ("1x1x1", (1, 1, 1))]
    alpha, beta, gamma = 0.75, -1.5, 2.0
    fails = _Shapes()
    for label, (m, n, k) in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        c_in = rng.standard_normal((m, n), dtype=np.float32)
        aux = epilogue_args(cuda.to_device(bias), cuda.to_device(c_in), alpha, beta, gamma)
        (got, guard), = _run(name, lambda c, a_, b_: launch(c, a_, b_, aux), [((m, n), np.float32)], (a, b))
        p = a.astype(np.float64) @ b
        bias64, c64 = bias.astype(np.float64), c_in.astype(np.float64)
        ref = ref_fn(p, bias64, c64, alpha, beta, gamma)
        pa = np.abs(a.astype(np.float64)) @ np.abs(b)
        mag = abs(alpha) * pa + abs(beta) * np.abs(c64) + abs(gamma) * np.abs(bias64) + pa + np.abs(bias64)
        # The same wrong result means two mistakes: with an activation, f(AB) + bias; in the
        # linear epilogue (no activation), a bias added without its gamma.
        late_bias = ("the bias is added without gamma: the epilogue adds gamma * bias[col]." if "gamma" in epilogue
                     else "the activation comes before the bias: f(AB) + bias; the bias goes inside, f(AB + bias).")
        mistakes = [("the bias is missing.", ref_fn(p, 0 * bias64, c64, alpha, beta, 0.0)),
                    (late_bias, ref_fn(p, 0 * bias64, c64, alpha, beta, gamma) + bias64),
                    ("alpha and beta are swapped: alpha scales A @ B, beta scales C.",
                     ref_fn(p, bias64, c64, beta, alpha, gamma)),
                    ("C is read at (col, row): the epilogue's C element is c_in[row, col].",
                     ref_fn(p, bias64, c64.T, alpha, beta, gamma) if m == n else None)]
        mistakes = [(h, r) for h, r in mistakes if r is not None and not np.allclose(r, ref)]
        ctx = f" (shape {label}: M, N, K = {m}, {n}, {k})"
        fails.run(label, lambda: _judge(name, ctx, got, guard, ref, fmt="float32", k=k + 2, magnitude=mag,
                                        mistakes=mistakes, seed=seed))
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


def check_row_softmax(launch, *, name="GEMM + row softmax", shapes=None, seed=None) -> None:
    """``launch(out, a, b)`` must leave ``softmax(a @ b)`` (each row: exp(z - max z) / sum) in ``out``.

    The last shape has logits of a few hundred: exp overflows float32 beyond 88.7, so a softmax that
    does not subtract the row's max returns inf / inf = NaN there."""
    from ..fusion.epilogues import SOFTMAX_THREADS, softmax_reference

    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    wide = SOFTMAX_THREADS + 3
    shapes = shapes or [("small logits", (3, 7, 5, 0.3)), ("wider than the block", (2, wide, 9, 0.3)),
                        ("large logits", (4, 37, 16, 40.0))]
    fails = _Shapes()
    for label, (m, n, k, scale) in shapes:
        a = (rng.standard_normal((m, k)) * scale).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        (got, guard), = _run(name, launch, [((m, n), np.float32)], (a, b))
        ref = softmax_reference(a, b)
        z = a.astype(np.float64) @ b
        pa = np.abs(a.astype(np.float64)) @ np.abs(b)
        mag = ref * (2 + 4 * pa.max(axis=1, keepdims=True))  # a logit's rounding error moves p relatively

        def no_max(g):
            g = g.astype(np.float64)
            hot = z.max(axis=1) > 88  # rows whose exp(z) overflows float32
            if not np.isfinite(g).all() and hot.any() and np.isfinite(g[~hot]).all():
                return ("softmax without the row max: exp(z) overflows float32 for z > 88.7 (here z reaches "
                        f"{z.max():.0f}), and inf / inf is NaN. Subtract the row's max first: exp(z - max) <= 1.")
            return None

        def partial_rows(g):
            g = g.astype(np.float64)
            finite = np.isfinite(g).all(axis=1)
            if finite.any():
                sums = g[finite].sum(axis=1)
                if np.abs(sums - 1).max() > 1e-3:
                    return (f"the rows do not sum to 1 (a row sums to {sums[np.argmax(np.abs(sums - 1))]:.4g}): "
                            "the sum (and the max) must cover the whole row, every thread's columns combined by "
                            "the block's reduction, not one thread's or one warp's part of it.")
            return None

        ctx = f" (shape {label}: M, N, K = {m}, {n}, {k})"
        # atol: probabilities below float32's range underflow to 0, rightly
        fails.run(label, lambda: _judge(name, ctx, got, guard, ref, fmt="float32", k=k, magnitude=mag, atol=1e-30,
                                        mistakes=[(None, no_max), (None, partial_rows)], seed=seed))
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")
