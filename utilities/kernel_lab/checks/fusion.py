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
  :func:`check_gelu_fast`, :func:`check_team_sum` and :func:`check_team_threads`: the pieces of
  03.3's team kernel (GELU with the hardware's tanh, a team's sum, the team sized to the row);
  :func:`check_x8_team`: which float16 rows 03.3's exercise 7 (eight halves an access) takes;
* :func:`check_epilogue`: ``launch(c, a, b, aux)`` for an epilogue of :mod:`kernel_lab.fusion.epilogues`;
* :func:`check_row_softmax`: ``launch(out, a, b)`` -> ``softmax(a @ b)`` row by row.
"""

from __future__ import annotations

import itertools
import math
import re
import secrets

import numpy as np
from numba import cuda, float32, uint64  # kernel_lab (imported first) chose GPU or simulator

from .. import progress
from ..check import CheckFailed, _GuardedOutput, _mismatch, is_poison, tolerance
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
           seed=None, as_hint=False):
    """Raise CheckFailed if ``got`` is not ``ref``; name the first of ``mistakes`` (label, wrong
    reference or a function returning a hint or None) that explains it. ``as_hint``: name it on a
    ``Hint:`` line, ahead of the checker's general hints (03.3's checks), instead of ``The mistake:``."""
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
        if as_hint:  # the named mistake first; the checker's general guesses would only blur it
            rest = "\n".join(ln for ln in rest.splitlines() if not ln.lstrip().startswith("Hint:"))
        text = f"{first}\n{'Hint: the mistake:' if as_hint else 'The mistake:'} {named}\n{rest}"
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


def conv_deep_shapes():
    """The shape for a check of the implicit GEMM at the GPU's tiles in the simulator (seconds there):
    21 input channels, so that a window offset takes two K-tiles of 16 channels (8 in the simulator's
    tiles: three), the last with 5 real channels and the rest padding (5 is more than the 4 rows a
    thread loads in the simulator's tiles, 2 channels apart: the fast gather's test-free branch taken
    at rows >= NR instead of NR * RP reads padded channels)."""
    return [("21 channels", (1, 21, 5, 3, 7))]


def conv_block_shapes(tile):
    """The shapes for a check of a direct kernel at the GPU's block size in the simulator: a block and
    a partial one along both axes, and a single pixel (a block with one thread inside the image)."""
    return [("tile+1", (1, 2, 3, tile + 1, 2 * tile + 1)), ("1 pixel", (1, 1, 1, 1, 1))]


def _conv_shapes(tile, block=None):
    # (B, C_in, C_out, H, W): a single pixel (all border); odd sizes; a tile and one more; on a GPU a
    # large shape, in the simulator a small one with 21 input channels (the implicit GEMM's K-tiles of
    # 8 or 16 channels: full tiles, then one with 5 real channels; more than any register block)
    shapes = [("odd", (2, 3, 5, 7, 6)), ("tile+1", (1, 2, 3, tile + 1, 2 * tile + 1)), ("1 pixel", (1, 1, 1, 1, 1))]
    shapes.insert(0, ("large", (2, 19, 37, 61, 45)) if not on_simulator() else conv_deep_shapes()[0])
    if block is not None:
        # A register block of COB output channels x PX pixels (block.cob, block.px): more input and
        # output channels than COB, neither a multiple of it (the group's weights in shared memory are
        # laid out by C_in, and the last group is partial), and a row of two blocks' width whose last
        # group of PX pixels is partial.
        cob, px = block.cob, block.px
        cin = cob + 3 if (cob + 3) % cob else cob + 1
        cout = cob + 1
        shapes.insert(0, ("past the register block", (1, cin, cout, 3, block.tx * px + px - 1)))
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
        index = re.search(r"Index (-?\d+) on axis 0", text)
        if index and x.size <= int(index.group(1)) < 1 << 63 and _past_the_channels(int(index.group(1)), x.shape):
            hint = ("a padded channel was loaded: row c >= C_in of a K-tile (C_pad rounds C_in up to the K step) "
                    "must be 0, not read; in the last image it lies past the end of x. In the fast gather, the "
                    "branch without tests is right only when all NR of the thread's rows are real channels, "
                    "rows = C_in - c0 - r0 >= NR * RP (its rows are RP channels apart); a tile with fewer takes "
                    "the tested branch, and a pixel in the padding sets rows to 0.")
    return CheckFailed(f"{name}: x was read outside the array: {first}" + (f"\n  {site}" if site else "")
                       + "\nHint: " + hint)


def _past_the_channels(index, shape):
    """Whether a flat index past the end of x (B x C x H x W) is a channel c > C of the last image, or
    channel C at a pixel below the image's first row: no pixel just past the last row or column
    lands there, only a padded channel (the fast gather's test-free branch taken too often)."""
    b, c, h, wd = shape
    rel = index - (b - 1) * c * h * wd
    chan, pixel = divmod(rel, h * wd)
    return chan > c or (chan == c and pixel > wd)


def _conv_write_outside_y(name, exc, y_shape, block):
    """A CheckFailed, for a register-blocked kernel, for the simulator's report of a write outside
    ``y`` along the columns (a thread's group of PX pixels past the right edge), or of an access to
    ``y`` or ``bias`` past the output channels (the last group of COB channels past C_out); None for
    any other error."""
    try:
        from ..simulator.errors import OutOfBoundsAccess
    except ImportError:
        return None
    if block is None or not isinstance(exc, OutOfBoundsAccess):
        return None  # a kernel without a register block keeps the simulator's own report
    text = str(exc)
    m = re.search(r"(?P<verb>reads|writes) `(?P<expr>[^`]*)`.*?outside the global array `\w+` of shape "
                  r"\((?P<shape>[\d, ]*)\)", text, re.S)
    axis = re.search(r"Index -?\d+ on axis (\d+)", text)
    if m is None or axis is None:
        return None
    shape = tuple(int(v) for v in m.group("shape").replace(" ", "").split(",") if v)
    where = {(tuple(y_shape), 3): "edge", (tuple(y_shape), 1): "channels", ((y_shape[1],), 0): "channels"}
    kind = where.get((shape, int(axis.group(1))))
    if kind is None or kind == "edge" and m.group("verb") != "writes":
        return None
    hint = {"edge": ("the edge pixels of a group: a thread's PX pixels ox0 .. ox0 + PX - 1 can run past the "
                     "image's right edge when W is not a multiple of PX; store only the pixels ox0 + p < W (and "
                     "load the inputs under them as 0 where they are outside)."),
            "channels": ("the last group of output channels: C_out need not be a multiple of COB, so the channels "
                         "o = g * COB + oc of the last group can pass C_out; store (and read bias[o]) only for "
                         "o < C_out.")}[kind]
    first = text.strip().splitlines()[0]
    site = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("at ")), "")
    what = "y was written outside the array" if kind == "edge" else "an output channel past C_out"
    return CheckFailed(f"{name}: {what}: {first}" + (f"\n  {site}" if site else "") + "\nHint: " + hint)


def _group_stride_references(x, w, bias, relu, cob):
    """Wrong references for a register-blocked kernel that reads its group's weights, staged as
    w_s[(oc * C_in + c) * 9 + 3 i + j], at the wrong channel stride: [(what, reference)]."""
    from ..fusion.conv import reference

    cout, cin = w.shape[0], w.shape[1]
    found = []
    for what, index in [("w_s[(c * COB + oc) * 9 + ...]: output channel and input channel swapped in the index",
                         lambda oc, c: c * cob + oc),
                        ("w_s[(oc * COB + c) * 9 + ...]: output channels COB apart instead of C_in",
                         lambda oc, c: oc * cob + c),
                        (("w_s[c * 9 + ...]: the output channel left out, every channel of the group reads its first "
                          "channel's weights"), lambda oc, c: c)]:
        weff = np.zeros_like(np.asarray(w, np.float64))
        ok = True
        for o in range(cout):
            g, oc = divmod(o, cob)
            for c in range(cin):
                e = index(oc, c)
                src = g * cob + e // cin
                if not 0 <= e < cob * cin:
                    ok = False
                    break
                weff[o, c] = w[src, e % cin] if src < cout else 0.0
            if not ok:
                break
        if ok and not np.array_equal(weff, w):
            found.append((f"the wrong channel stride in the group's weights ({what}). The block stages its COB "
                          "output channels' weights as w_s[(oc * C_in + c) * 9 + 3 i + j]: output channel oc of the "
                          "group starts C_in * 9 values after the one before, input channel c 9 values after.",
                          reference(x, weff, bias, relu=relu)))
    return found


def _wrong_bias(x, w, bias, ref_lin, relu, cob=None):
    """A function naming a bias taken from the wrong channel (or missing, or doubled) from what the
    kernel wrote: where both are positive, got - ref is constant per (batch, channel) plane. ``cob``:
    the register block's output channels (a group's first channel's bias is named so)."""
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
        if js and cob and js[0] == (o // cob) * cob:
            return (f"bias of the wrong channel: output channel {o} (batch {bi}) received bias[{js[0]}], the bias of "
                    f"its group's first channel, instead of bias[{o}]. A thread computes COB output channels, "
                    "o = g * COB + oc for oc in range(COB): each needs its own bias, bias[g * COB + oc].")
        if js:
            return (f"bias of the wrong channel: output channel {o} (batch {bi}) received bias[{js[0]}] instead of "
                    f"bias[{o}]. The output channel is blockIdx.z % C_out (blockIdx.z = b * C_out + o), not the "
                    "input channel, the batch index or blockIdx.z itself"
                    + (" (with a register block: o = g * COB + oc, g the block's group of COB channels)." if cob
                       else "."))
        if abs(used) < 1e-4 * (1 + abs(bias64[o])):
            return "the bias is missing: add bias[o] (o: the output channel) to every output of channel o."
        if abs(used - 2 * bias64[o]) < 1e-4 * (1 + abs(bias64[o])):
            return "the bias is added twice."
        return None
    return explain


def check_conv(launch, *, name="3x3 convolution + bias + ReLU", relu=True, tile=None, shapes=None,
               seed=None, block=None) -> None:
    """``launch(y, x, w, bias)`` must leave in ``y`` (B x C_out x H x W, float32) the 3x3
    convolution of ``x`` (B x C_in x H x W) with ``w`` (C_out x C_in x 3 x 3), padding 1, plus
    ``bias[o]``, then ReLU (``relu=False``: without the ReLU, the first kernel of the unfused chain).
    ``tile``: the kernel's tile width, to draw a shape one past it (default: the package's TILE).
    ``block``: a register-blocked kernel's :class:`kernel_lab.fusion.conv.RegisterBlock` (COB output
    channels x PX pixels a thread): a shape with more channels than COB, neither a multiple of it, and
    a partial group of pixels at the right edge; the mistakes of the block named (the channel stride
    of the group's weights, the edge pixels of a group, a group's first bias for all its channels)."""
    from ..fusion.conv import TILE, magnitude, reference

    require_callable(launch, "launch")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    shapes = shapes or _conv_shapes(tile or TILE, block)
    cob = block.cob if block is not None else None
    fails = _Shapes()
    for label, (b, cin, cout, h, wd) in shapes:
        x = rng.standard_normal((b, cin, h, wd), dtype=np.float32)
        w = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
        bias = (rng.standard_normal(cout) * 2).astype(np.float32)
        ctx = f" (shape {label}: B, C_in, C_out, H, W = {b}, {cin}, {cout}, {h}, {wd})"
        try:
            (got, guard), = _run(name, launch, [((b, cout, h, wd), np.float32)], (x, w, bias))
        except Exception as exc:  # noqa: BLE001 - the simulator's report of a read outside x, a write outside y
            named = _conv_read_outside_x(name + ctx, exc, x) or _conv_write_outside_y(name + ctx, exc,
                                                                                        (b, cout, h, wd), block)
            if named is None and isinstance(exc, OverflowError):  # the simulator's np.uint64 of a negative int
                named = CheckFailed(
                    f"{name}{ctx}: a negative number was made an unsigned index ({exc}).\nHint: an unsigned "
                    "index cannot point before x's start: where the pixel under the window is in the padding "
                    "(hh or ww outside the image, so its address can be negative), nothing is loaded and the "
                    "index must be a harmless one, such as the image's start xb; set rows = 0 there. (On a GPU "
                    "the negative address wraps around to a huge one, and the load faults or reads garbage.)")
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

        def right_edge_unwritten(g, ref=ref, wd=wd):
            """Only columns at the right edge wrong, and never written: a partial group of pixels skipped."""
            with np.errstate(invalid="ignore"):
                bad = ~(np.abs(g.astype(np.float64) - ref) <= 1e-3 * (1 + np.abs(ref)))
            cols = np.flatnonzero(bad.any(axis=(0, 1, 2)))
            if block is None or not cols.size or cols[0] == 0 or cols[-1] != wd - 1 or len(cols) != wd - cols[0]:
                return None
            if not is_poison(g[..., cols[0]:]).all() or wd - cols[0] >= block.px:
                return None
            return (f"the edge pixels of a group: the last {wd - cols[0]} column(s) of the image were never written. "
                    f"W = {wd} is not a multiple of PX = {block.px}: the thread whose group of PX pixels crosses the "
                    "right edge must still compute and store the pixels ox0 + p < W.")

        mistakes = [(None, right_edge_unwritten)]
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
            (None, _wrong_bias(x, w, bias, ref_lin, relu, cob)),
        ]
        if cob:
            mistakes += _group_stride_references(x, w, bias, relu, cob)
        mistakes = [(hh, r) for hh, r in mistakes if r is not None]
        fails.run(label, lambda: _judge(name, ctx, got, guard, ref, fmt="float32", k=9 * cin + 1,
                                        magnitude=magnitude(x, w, bias), mistakes=mistakes, seed=seed,
                                        as_hint=True))
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name}: correct for all {len(shapes)} shapes ({', '.join(lb for lb, _ in shapes)})")


# ================================================================================================
# 03.3 LayerNorm + GELU


def _ln_shapes(max_n):
    big = 1000 if not on_simulator() else 127
    # every remainder of the length by 4 (33, 7, 36, 30): rows that take groups of four and rows that
    # cannot; lengths past a warp's and a team's first trip; rows of length 1 last
    shapes = [("odd length", (5, 33)), ("7 x 7", (7, 7)), ("a multiple of 4", (4, 36)), ("2 mod 4", (3, 30)),
              ("long rows", (3, min(big, max_n))), ("very long rows", (2, max_n)), ("rows of length 1", (3, 1))]
    seen, out = set(), []
    for label, (r, n) in shapes:
        if n <= max_n and (r, n) not in seen:
            seen.add((r, n))
            out.append((label, (r, n)))
    return out


_LN_PAST = re.compile(r"(?P<verb>reads|writes) `(?P<expr>[^`]*)`.*?outside the global array `(?P<array>\w+)` of shape "
                      r"\((?P<shape>[\d, ]*)\)", re.S)


def _ln_access_outside(name, exc, x_shape):
    """A CheckFailed for the simulator's report of an access past a row (or past the last row) in a
    LayerNorm kernel: which of the loads-first rules it broke. None for any other error."""
    try:
        from ..simulator.errors import OutOfBoundsAccess
        from ..vector_loads import MisalignedVectorAccess
    except ImportError:  # no simulator: a GPU reports nothing here
        return None
    text = str(exc)
    first = text.strip().splitlines()[0]
    site = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("at ")), "")
    eight = "load8" in text or "store8" in text
    if isinstance(exc, MisalignedVectorAccess) and "multiple of" in text and eight:
        hint = ("load8 and store8 take the column of a group's first half: 8 (t + T j) for group j of thread t, a "
                "multiple of 8. t + T j counts groups of eight, not columns.")
        return CheckFailed(f"{name}: {first}" + (f"\n  {site}" if site else "") + "\nHint: " + hint)
    if isinstance(exc, MisalignedVectorAccess) and "past the end" in text and eight:
        hint = ("the kernel of 16-byte accesses has no clamp and no test: a block of TEAM threads covers exactly "
                "TEAM x GROUPS x 8 columns, so it may only be given rows of that length. x8_team must return "
                "n / values threads only for a row that they hold exactly (0 sends the row to the team kernel).")
        return CheckFailed(f"{name}: {first}" + (f"\n  {site}" if site else "") + "\nHint: " + hint)
    if isinstance(exc, MisalignedVectorAccess) and "multiple of" in text:
        hint = ("load4 and store4 take the column of a group's first value: 4 q (W * q) for group q, a multiple "
                "of 4, where q counts groups of four. A row whose length is not a multiple of 4 takes one value "
                "per access (WIDTH = 1), since its rows do not start 16-byte aligned.")
        return CheckFailed(f"{name}: {first}" + (f"\n  {site}" if site else "") + "\nHint: " + hint)
    if isinstance(exc, MisalignedVectorAccess) and "past the end" in text:
        loads = "load4" in text and "store4" not in text
        load_of_x = loads and "axis of length 1," not in text and re.search(r"index \(", text) is not None
    elif isinstance(exc, OutOfBoundsAccess) and _LN_PAST.search(text):
        m = _LN_PAST.search(text)
        axis = re.search(r"Index -?\d+ on axis (\d+)", text)
        load_of_x = m.group("verb") == "reads" and m.group("shape").replace(" ", "") == ",".join(map(str, x_shape))
        if load_of_x and axis is not None and int(axis.group(1)) == 0:
            hint = ("a team past the last row read a row that does not exist. It must still load, add and shuffle "
                    "with the teams that share its warp: take the last row again, min(row, nrows - 1), and store "
                    "nothing (live = row < nrows is False).")
            return CheckFailed(f"{name}: {first}" + (f"\n  {site}" if site else "") + "\nHint: " + hint)
    else:
        return None
    if load_of_x:
        hint = ("the loads read past the row's end. Every load comes first and unconditionally, so clamp the column "
                "(exercise 2) or the group (q = min(t + T * j, ng - 1)) to the row's last one: past the end the "
                "thread loads the last group again, a copy the sums skip (t + T * j < ng) and no store uses.")
    else:
        hint = ("a store (or the gamma and beta it needs) past the row's last group: the stores run only for the "
                "groups inside the row, q < ng, of a row that exists (live), unlike the loads, which are clamped.")
    return CheckFailed(f"{name}: {first}" + (f"\n  {site}" if site else "") + "\nHint: " + hint)


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
        try:
            (y, gy), (mu, gm), (rs, gr) = _run(name, launch, [((r, n), dt), ((r,), np.float32), ((r,), np.float32)],
                                               (x, gamma, beta))
        except Exception as exc:  # noqa: BLE001 - the simulator's report of an access past a row
            if any(f.named for _, f in fails.failures):  # a crash on a later shape (the simulator's report of
                shapes = shapes[:[lb for lb, _ in shapes].index(label)]  # an access past the row, say) is
                break  # the mistake an earlier shape already named: report that name
            named = _ln_access_outside(name + f" (shape {label}: {r} rows of {n}, {dt.name})", exc, (r, n))
            if named is None:
                raise
            raise named from None
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

        def tail_left_out(got, n=n, x64=x64, which="mean"):
            # groups of four taken on a row whose length is not a multiple of 4: the last n % 4 values
            # never reach the sums (the row is still divided by n, or by the values that were summed)
            m = 4 * (n // 4)
            if n % 4 == 0 or m == 0:
                return None
            head = x64[:, :m]
            for divisor in (n, m):
                mu = head.sum(axis=1) / divisor
                var = ((head - mu[:, None]) ** 2).sum(axis=1) / divisor
                wrong = mu if which == "mean" else 1.0 / np.sqrt(var + eps)
                if _matches(got, wrong, fmt="float32", k=n, rtol=4 * tolerance("float32", n), atol=None,
                            magnitude=np.abs(wrong)):
                    return (f"the last {n % 4} value(s) of each row of {n} are left out of the sums: a row whose "
                            "length is not a multiple of 4 cannot be read in groups of four (its rows do not "
                            "start 16-byte aligned, and the last group would straddle the row's end); such rows "
                            "take one value per access (WIDTH = 1).")
            return None

        def lane_layout(got, which, n=n, x64=x64):
            # exercise 2's layout, lane l holding columns l, l + 32, ...: two mistakes that depend on it
            kw = dict(fmt="float32", k=n, rtol=4 * tolerance("float32", n), atol=None)
            if which == "mean" and n % 32:
                values = -(-n // 32)  # a lane's loads: past the end, copies of the last column
                wrong = (x64.sum(axis=1) + (32 * values - n) * x64[:, -1]) / (32 * values)
                if _matches(got, wrong, magnitude=np.abs(wrong), **kw):
                    return ("the clamped copies past the row's end were counted: the loads repeat the last column "
                            "there, and only the columns inside the row (lane + 32 k < N) count and add.")
            if which == "rstd" and n > 1:
                m2 = sum(((x64[:, l::32] - x64[:, l::32].mean(axis=1)[:, None]) ** 2).sum(axis=1)
                         for l in range(min(32, n)))
                wrong = 1.0 / np.sqrt(m2 / n + eps)
                if _matches(got, wrong, magnitude=np.abs(wrong), **kw):
                    return ("the variance lacks the spread between the lanes' means: Chan's combine adds "
                            "d^2 n_a n_b / n to M2_a + M2_b, with d the difference of the two means.")
            return None

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

        def group_order(got, n=n, r=r, fmt=fmt, xhat=(x64 - mean[:, None]) * rstd[:, None], ref=ref_y):
            # a group's four values in the wrong registers (the load4's) or the wrong columns (the
            # store4's): the statistics do not see the order, y does
            got4 = got.astype(np.float64).reshape(r, -1, 4) if n % 4 == 0 else None
            if got4 is None or not np.isfinite(got4).all():
                return None
            xhat4, g4, b4, ref4 = xhat.reshape(r, -1, 4), g64.reshape(-1, 4), b64.reshape(-1, 4), ref.reshape(r, -1, 4)
            tol = (2e-3 if fmt == "float16" else 1e-5) * (1 + np.abs(ref).max())
            explained = np.zeros(ref4.shape[:2], bool)
            for order in itertools.permutations(range(4)):
                order = list(order)
                for candidate in (gelu_tanh(xhat4[..., order] * g4 + b4), ref4[..., order]):
                    explained |= (np.abs(candidate - got4) <= tol).all(axis=2)
            if not explained.all():
                return None
            return ("the values of a group are in the wrong registers or columns: v[4 j + i] is column 4 q + i, as "
                    "load4 fills v and as store4 writes y (with load8 and store8, v[8 j + i] is column 8 (t + T j) + i).")

        def rows_unwritten(got, r=r):
            missing = is_poison(got)
            if not missing.any() or missing.all():
                return None
            rows = ", ".join(str(i) for i in np.flatnonzero(missing)[:6])
            return (f"rows {rows} of {r} were never written (their mean keeps the poison): no team took them. "
                    "A block of B threads holds B / TEAM rows (one when the team is the block): count the rows "
                    "a block holds as its threads over a team's, and launch blocks for every row.")

        if n == 1:  # xhat is 0: a GELU left out or applied before the scale and shift gives beta either way
            y_mistakes = [m for m in y_mistakes if "erf" in m[0]]
        else:
            y_mistakes += [("the GELU is applied before the scale and shift: y = gelu(xhat * gamma + beta).",
                            gelu_tanh((x64 - mean[:, None]) * rstd[:, None]) * g64 + b64),
                           ("the GELU is missing.", y_of(mean, rstd, act=lambda v: v))]
        y_mistakes += [
            (None, group_order),
            ("the shift has the wrong sign: (v - mean) * rstd is v * rstd + shift with shift = -mean * rstd.",
             y_of(-mean, rstd)),
            ("gamma and beta are swapped: y = gelu(xhat * gamma + beta).",
             gelu_tanh((x64 - mean[:, None]) * rstd[:, None] * b64 + g64)),
            ("y is normalised with the variance of the wrong divisor (M2 / (N - 1)); LayerNorm divides by N.",
             y_of(mean, wrong_div)),
        ]

        def judge_all():
            _judge(f"{name}, mean", ctx, mu, gm, mean, fmt="float32", k=n, magnitude=np.abs(x64).mean(axis=1),
                   mistakes=[(None, rows_unwritten), ("the mean is the row's sum, not divided by N.", x64.sum(axis=1)),
                             (None, tail_left_out), (None, lambda got: lane_layout(got, "mean"))],
                   seed=seed, as_hint=True)
            _judge(f"{name}, rstd", ctx, rs, gr, rstd, fmt="float32", k=n, rtol=4 * tolerance("float32", n),
                   magnitude=rstd, mistakes=[(None, nonfinite_rstd)] + stat_mistakes
                   + [(None, lambda got: tail_left_out(got, which="rstd")), (None, lambda got: lane_layout(got, "rstd"))],
                   seed=seed, as_hint=True)
            _judge(f"{name}, y", ctx, y, gy, ref_y, fmt=fmt, k=n if fmt == "float32" else 1, magnitude=mag_y,
                   mistakes=y_mistakes, seed=seed, as_hint=True)
        fails.run(label, judge_all)
    fails.raise_any([lb for lb, _ in shapes])
    progress.passed(name)
    print(f"{name} ({dt.name}): y, mean and rstd correct for all {len(shapes)} shapes "
          f"({', '.join(lb for lb, _ in shapes)})")


def check_gelu_fast(gelu, *, name="gelu_fast", seed=None) -> None:
    """``gelu(v)``, a float32 device function, must give GELU's tanh form,
    ``0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))``, to float16's precision: it computes the
    float16 results of 03.3, and the hardware's ``tanh.approx`` errs by about 2^-11 (in the simulator
    the tanh is exact). Names a missing cubic term, a cubic term outside ``sqrt(2/pi)``, a missing
    1/2 or ``+ v/2``, and the tanh taken of ``v`` or of ``2u``."""
    from ..fusion.layernorm import GELU_C, gelu_tanh

    require_callable(gelu, "gelu")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    v = np.concatenate([np.linspace(-6, 6, 49), 3 * rng.standard_normal(47), [0.0, -20.0, 20.0]]).astype(np.float32)

    @cuda.jit
    def _apply_gelu_fast(out, v):
        i = cuda.grid(1)
        if i < v.size:
            out[i] = gelu(v[i])

    (got, guard), = _run(name, lambda out, v_: _apply_gelu_fast[1, 128](out, v_), [(v.shape, np.float32)], (v,))
    v64 = v.astype(np.float64)
    u = GELU_C * (v64 + 0.044715 * v64 ** 3)
    with np.errstate(all="ignore"):
        mistakes = [
            ("it returns v: GELU is not applied yet.", v64),
            ("the cubic term is missing: u = sqrt(2/pi) (v + 0.044715 v^3).", 0.5 * v64 * (1 + np.tanh(GELU_C * v64))),
            ("the cubic term is outside sqrt(2/pi): u = sqrt(2/pi) (v + 0.044715 v^3), both terms scaled.",
             0.5 * v64 * (1 + np.tanh(GELU_C * v64 + 0.044715 * v64 ** 3))),
            ("the 1/2 is missing: gelu(v) = h tanh(u) + h with h = v / 2.", v64 * (1 + np.tanh(u))),
            ("the + h is missing: gelu(v) = h (1 + tanh(u)) = h tanh(u) + h.", 0.5 * v64 * np.tanh(u)),
            ("tanh is taken of v: its argument is u = sqrt(2/pi) (v + 0.044715 v^3).", 0.5 * v64 * (1 + np.tanh(v64))),
            ("tanh is taken of 2u: 0.5 (1 + tanh(u)) is sigmoid(2u), so the sigmoid form's 2u becomes u here.",
             0.5 * v64 * (1 + np.tanh(2 * u))),
        ]
    fails = _Shapes()
    # tanh.approx errs by at most about 2^-11 of tanh(u), so y by |v| 2^-12: allow 4 units of float16's
    # roundoff (2^-9) of |v|, eight times that, and tight enough to tell a misplaced cubic term
    fails.run("v from -20 to 20", lambda: _judge(name, " (v from -20 to 20, float32)", got, guard, gelu_tanh(v64),
                                                  fmt="float32", k=1, rtol=2.0 ** -9, magnitude=np.abs(v64) + 1e-3,
                                                  mistakes=mistakes, seed=seed, as_hint=True))
    fails.raise_any(["v from -20 to 20"])
    progress.passed(name)
    print(f"{name}: GELU's tanh form to float16's precision for {v.size} values from -20 to 20")


def _team_sum_kernel(team, warps, team_sum):
    """Each thread's two team sums, of a[g] then of b[g], as the LayerNorm kernel takes them."""
    @cuda.jit
    def _run_team_sum(first, second, a, b):
        part = cuda.shared.array((2, warps), float32)
        t = uint64(cuda.threadIdx.x) & uint64(team - 1)
        g = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        first[g] = team_sum(a[g], part, 0, t)
        second[g] = team_sum(b[g], part, 1, t)
    return _run_team_sum


def check_team_sum(make_team_sum, *, name="team_sum", teams=(8, 16, 32, 64, 128), seed=None) -> None:
    """``make_team_sum(TEAM)`` returns ``team_sum(s, part, k, t)``, a device function that gives every
    thread of a team of TEAM threads (a power of two: part of a warp, a warp, or a whole block) the sum
    of ``s`` over its team. ``part`` is the block's shared ``(2, max(1, TEAM // 32))`` float32 scratch,
    ``k`` (0 or 1) the row of it that this sum may use, ``t`` the thread's place in its team. The check
    runs two sums in a row, as the kernel does, for each team size, with several teams a block where a
    team is smaller than a block (128 threads); it names a sum that stopped at a warp, a butterfly that
    crossed into the next team, the second sum reading the first's slots, and a sum given to lane 0 only."""
    require_callable(make_team_sum, "make_team_sum")
    seed = _seed(seed)
    rng = np.random.default_rng(seed)
    fails = _Shapes()
    labels = []
    for team in teams:
        block, warps = (team if team > 32 else 128), max(1, team // 32)
        team_sum, nthreads = make_team_sum(team), 2 * (team if team > 32 else 128)
        label = f"teams of {team}"
        labels.append(label)

        run = _team_sum_kernel(team, warps, team_sum)
        # small whole numbers: every sum is exact in float32, whatever the order of its terms
        a = rng.integers(1, 10, nthreads).astype(np.float32)
        b = rng.integers(-50, 50, nthreads).astype(np.float32)
        (got1, g1), (got2, g2) = _run(name, lambda f, s, a_, b_, k=run, blk=block:
                                      k[nthreads // blk, blk](f, s, a_, b_),
                                      [((nthreads,), np.float32), ((nthreads,), np.float32)], (a, b))

        def over(values, size):
            return np.repeat(values.astype(np.float64).reshape(-1, size).sum(axis=1), size)

        def mistakes_of(values, other, team=team):
            out = []
            if team > 32:
                out.append(("each warp's own sum, not the team's: the warps' sums must meet in shared memory "
                            "(lane 0 of each warp writes its sum to part[k, warp], a barrier, then every thread "
                            "adds the warps' sums).", over(values, 32)))
                out.append((None, lambda got, expected=over(values, team):
                            "only lane 0 of each warp has the team's sum: after the barrier every thread reads "
                            "all the warps' sums from part." if np.array_equal(got[::32], expected[::32])
                            and not np.array_equal(got, expected) else None))
                out.append(("the sum over part started from this warp's own sum: start it from 0, since part "
                            "holds every warp's sum, this warp's too.", over(values, team) + over(values, 32)))
            if team < 32:
                out.append((f"the butterfly crossed into the next team: with teams of {team} lanes only the "
                            f"offsets below {team} stay inside a team (the larger ones add another row's values).",
                            over(values, 32)))
            out.append(("no sum: each thread kept its own value.", values.astype(np.float64)))
            out.append(("the second sum mixed with the first: each sum has its own row of part (part[k, warp]), "
                        "so that a warp that is ahead cannot overwrite a slot another warp has not read yet.",
                        over(values, team) + over(other, team)))
            return out

        def judge(got1=got1, g1=g1, got2=got2, g2=g2, a=a, b=b, team=team):
            ctx = f" (teams of {team} threads, {nthreads} threads in blocks of {team if team > 32 else 128})"
            _judge(f"{name}, first sum", ctx, got1, g1, over(a, team), fmt="float32", k=1,
                   magnitude=np.abs(over(a, team)) + 1, mistakes=mistakes_of(a, b), seed=seed, as_hint=True)
            _judge(f"{name}, second sum", ctx, got2, g2, over(b, team), fmt="float32", k=1,
                   magnitude=np.abs(over(b, team)) + 1, mistakes=mistakes_of(b, a), seed=seed, as_hint=True)
        fails.run(label, judge)
    fails.raise_any(labels)
    progress.passed(name)
    print(f"{name}: every thread has its team's sum, twice in a row, for teams of {', '.join(map(str, teams))} threads")


def check_team_threads(team_threads, *, values, limit, name="team_threads") -> None:
    """``team_threads(n, values)``: the threads that share a row of ``n`` values, the rule of 03.3's
    exercise 6: the smallest power of two from 8 to 1024 whose threads hold the row with at most
    ``values`` values each (1024 for the longest rows). Checked for every length up to 300 and around
    every power of two up to ``limit``; names a team that is not a power of two, below 8, above a
    block's 1024 threads, too small for the row or larger than it needs."""
    require_callable(team_threads, "team_threads")
    lengths = sorted({*range(1, 301), *(p + d for p in (1 << e for e in range(9, limit.bit_length() + 1))
                                         for d in (-1, 0, 1) if 1 <= p + d <= limit)})
    for n in lengths:
        t = team_threads(n, values)
        said = f"{name}({n}, {values}) = {t!r}"
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool):
            raise CheckFailed(f"{name}: {said}, not a whole number of threads")
        t = int(t)
        if t < 1 or t & (t - 1):
            raise CheckFailed(f"{name}: {said}, not a power of two\nHint: a team must be a power of two, so that it "
                              "divides a warp's 32 lanes (or a block is a whole number of warps): then each team's "
                              "lanes are neighbours, and a butterfly over the offsets below the team's size stays "
                              "inside the team.")
        if t < 8:
            raise CheckFailed(f"{name}: {said}, below 8\nHint: the smallest team is 8 threads: 8 lanes of 16 bytes "
                              "make one 128-byte line of float32 per access, where fewer lanes spread a warp's "
                              "access over more rows.")
        if t > 1024:
            raise CheckFailed(f"{name}: {said}, above 1024\nHint: a team of several warps is one block, and a block "
                              "holds at most 1024 threads (the longest rows get 1024 threads, more values each).")
        if t * values < n and t < 1024:
            raise CheckFailed(f"{name}: {said}: too few threads\nHint: {t} threads of at most {values} values hold "
                              f"{t * values}, not a row of {n}: round n / values up, then up to a power of two.")
        if t > 8 and (t // 2) * values >= n:
            raise CheckFailed(f"{name}: {said}: more threads than the row needs\nHint: {t // 2} threads of {values} "
                              f"values already hold a row of {n}: take the smallest power of two that does (from "
                              "n / values rounded up, not n / values + 1).")
    progress.passed(name)
    print(f"{name}: the right team for every row length checked from 1 to {limit} ({values} values a thread)")


def check_x8_team(x8_team, *, values, min_team, name="x8_team") -> None:
    """``x8_team(n, values, min_team)``: the threads of the block that holds a float16 row of ``n``
    values in 03.3's exercise 7, or 0 for a row that kernel does not take (the team kernel does). The
    kernel is compiled for one row length, with no clamp and no test: ``TEAM`` threads of exactly
    ``values`` values each (groups of eight halves), a whole number of warps, ``min_team`` to 1024 of
    them. Checked for every length up to 1024 threads' worth and a little more; names a row that is
    not ``TEAM x values`` long, a team that is not whole warps, below ``min_team`` or above 1024, and a
    row refused that the kernel holds."""
    require_callable(x8_team, "x8_team")
    for n in range(1, 1024 * values + 64 * values + 1):
        t = x8_team(n, values, min_team)
        said = f"{name}({n}, {values}, {min_team}) = {t!r}"
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool):
            raise CheckFailed(f"{name}: {said}, not a whole number of threads")
        t, team = int(t), n // values
        want = team if n % values == 0 and team % 32 == 0 and min_team <= team <= 1024 else 0
        if t == want:
            continue
        if t and t * values != n:
            what = ("the last values of a longer row are left out" if t * values < n else
                    "it reads and writes past the end of a shorter row")
            raise CheckFailed(f"{name}: {said}: {t} threads of {values} values hold {t * values}, not a row of {n}\n"
                              "Hint: the kernel has no clamp and no test: each thread reads and writes exactly "
                              f"{values} values, so {what}. "
                              "Return 0 unless the row is exactly n // values threads of values each (the team "
                              "kernel takes the rest).")
        if t and t % 32:
            raise CheckFailed(f"{name}: {said}: not a whole number of warps\nHint: the team's sums end with one value "
                              "a warp in shared memory, and the shuffles before that take every lane of a warp "
                              "(the full mask): the threads of a row must fill whole warps. Return 0 for such a row.")
        if t > 1024:
            raise CheckFailed(f"{name}: {said}: above 1024\nHint: the team is the block, and a block holds at most "
                              "1024 threads. Return 0 for a longer row.")
        if t and t < min_team:
            raise CheckFailed(f"{name}: {said}: below {min_team} threads\nHint: this kernel is for long rows, "
                              f"{min_team * values} values and more; shorter rows stay with the team kernel "
                              f"(return 0), which holds them in blocks of more warps.")
        if t == 0:
            raise CheckFailed(f"{name}: {said}, but {want} threads of {values} values ({want // 32} warps) hold the "
                              "row exactly\nHint: return n // values when it divides n, is a whole number of warps "
                              f"and lies from {min_team} to 1024.")
        raise CheckFailed(f"{name}: {said}, expected {want}")
    progress.passed(name)
    print(f"{name}: the right team for every row length checked from 1 to {n} ({values} values a thread, "
          f"teams of {min_team} to 1024 threads)")


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
