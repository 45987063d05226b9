"""Checks for module 06: the learner's device functions, before they meet cuBLASDx.

In module 06 the learner writes the parts of the tensor-core GEMMs that carry each notebook's idea
as small Numba device functions, and the package's kernels take them as parameters (the epilogue
functions of 06.2, the loaders of 06.3, the tuner's decisions of 06.4). A device function does not
need a tensor core to be tested: each check below runs it inside a small SIMT harness kernel (in
the CUDA simulator on a CPU, or on the GPU), compares with a float64 NumPy reference, prints one
deterministic line on success and raises :class:`kernel_lab.CheckFailed` naming the mistake:

* :func:`check_bias_gelu`: ``fn(value, bias)``; names a missing bias, the erf GELU, a missing 1/2
  or cubic term, the activation before the bias, float64 arithmetic from Python float constants;
* :func:`check_quantize`: ``fn(acc, scale, zero_point)``; names one fused multiply-add (a product
  not rounded before the +0.5), round half to even or away from zero, truncation toward zero,
  float32 arithmetic, a missing clamp;
* :func:`check_softmax_partial`: ``build(tile_m) -> (prepare, store, finish)``; names a softmax
  without the row max, a max without alpha, partials not written for every row;
* :func:`check_softmax_second_pass`: ``second_pass(out, row_max, row_sum, bz, r, n, tile_n, tid,
  nthreads)``; names a row sum that is one block's, or not rescaled by ``exp(m_b - M)``;
* :func:`check_im2col_load`: ``load(x, gr, gc, geo)``; names the padding border (off by one, or
  not zero), a missing ``- P``, the row and column orders;
* :func:`check_int4_load`: ``load(packed, k, n)``; names a missing or wrong sign extension and the
  nibble order;
* :func:`check_batched_load`: ``load(x, bz, row, col, rows, cols)``; names the batch stride of a
  shared operand, a batch index that is ignored, a missing zero fill, rows and columns swapped;
* :func:`check_tuner_search` and :func:`check_cache_lookup`: plain Python, the tuner's two
  decisions (06.4);
* :func:`check_issue_slice`: ``make_issue_slice(a_pos, b_pos)`` (06.1's numbered steps): the
  16-byte ``cp.async`` copies of one slice into a layout; names positions that are the plain
  layout's or swizzle the wrong row bits, chunks past the edge left unwritten (no zero fill), B
  written over A, and addresses formed outside the matrix.

Sizes are tiny on purpose (the simulator runs one Python thread per GPU thread).
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap

import numpy as np
from numba import cuda  # kernel_lab (imported first, as the package's parent) chose GPU or simulator

from .. import progress
from ..check import CheckFailed, finishes_within, is_poison, poisoned_host
from ..environment import on_simulator
from ..validate import KernelLabArgumentError, require_callable

# ================================================================================================
# plumbing


def _device_function(fn, what: str):
    require_callable(fn, what)
    if not hasattr(fn, "py_func"):
        raise KernelLabArgumentError(f"{what} must be a Numba device function: decorate it with "
                                     f"@cuda.jit(device=True)")
    return fn


def _poisoned(shape, dtype):
    n = int(np.prod(shape))
    return cuda.to_device(poisoned_host(n, dtype).reshape(shape))


def _launch(name, kernel, grid, block, *args):
    """Run a harness kernel; a Python error inside the learner's function becomes a CheckFailed."""
    try:
        kernel[grid, block](*args)
        cuda.synchronize()
    except CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's code raised inside the harness
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        full = str(exc)
        # a stub (``pass``) returns None: Python says NoneType, Numba's typing says "none"
        if "NoneType" in full or ", none" in full or "(none" in full or isinstance(exc, NotImplementedError):
            raise CheckFailed(f"{name}: the exercise is not done yet (the function returns nothing: {text})") from None
        raise CheckFailed(f"{name}: the device function raised {text}") from exc


def _float64_inside(fn, n_args: int) -> bool:
    """Whether ``fn`` returns a float64 when every argument is a float32.

    Numba types a Python float constant (``0.5``, ``math.sqrt(2 / math.pi)``) as float64, and one
    such constant turns the rest of the expression, ``tanh`` included, into float64 arithmetic: half
    the speed of float32 on an H100, a sixty-fourth on most other GPUs. Typing needs no GPU: the
    function's Python source is typed with ``numba.njit`` on the CPU. A function that typing cannot
    handle (it calls CUDA intrinsics) is given the benefit of the doubt."""
    import numba
    from numba import types

    py_func = getattr(fn, "py_func", None)
    if py_func is None:
        return False
    try:
        dispatcher = numba.njit(py_func)
        dispatcher.compile((types.float32,) * n_args)
        return dispatcher.nopython_signatures[0].return_type == types.float64
    except Exception:  # noqa: BLE001 - untypable on the CPU: nothing to say
        return False


def _close(got, want, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want)))


def _first_wrong(got, want, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want))
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return int(bad.sum()), idx


def _diagnose(name, got, want, hypotheses, rtol, atol, where=""):
    """Raise naming the first hypothesis (``(message, expected_if_that_mistake)``) that matches."""
    for message, alt in hypotheses:
        if alt is not None and _close(got, alt, rtol, atol):
            raise CheckFailed(f"{name}: {message}")
    count, idx = _first_wrong(got, want, rtol, atol)
    raise CheckFailed(f"{name}: {count} of {np.size(want)} values wrong{where}; first at {idx}: got "
                      f"{np.asarray(got)[idx]!r}, expected {want[idx]!r}")


# ================================================================================================
# 06.2: bias + GELU


_K0 = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(_K0 * (x + 0.044715 * x**3)))


def _gelu_erf(x):
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def check_bias_gelu(fn, *, name: str = "bias + GELU epilogue", seed: int = 0) -> None:
    """``fn(value, bias)`` must return ``gelu(value + bias)``, GELU in the tanh form of cuBLASLt's
    ``GELU_BIAS``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``. Float32 accuracy."""
    fn = _device_function(fn, "fn")

    @cuda.jit
    def harness(acc, bias, out):
        i = cuda.grid(1)
        if i < acc.size:
            r = i // acc.shape[1]
            c = i - r * acc.shape[1]
            out[r, c] = fn(acc[r, c], bias[r])

    rng = np.random.default_rng(seed)
    m, n = 7, 19
    acc = np.concatenate([np.linspace(-6, 6, 61), rng.uniform(-8, 8, m * n - 61)]).astype(np.float32).reshape(m, n)
    bias = rng.uniform(-1.5, 1.5, m).astype(np.float32)
    out = _poisoned((m, n), np.float32)
    _launch(name, harness, -(-m * n // 64), 64, cuda.to_device(acc), cuda.to_device(bias), out)
    got = out.copy_to_host()
    if np.isnan(got).all():
        raise CheckFailed(f"{name}: the exercise is not done yet (fn returns nothing)")
    if is_poison(got).any():
        raise CheckFailed(f"{name}: {int(is_poison(got).sum())} of {m * n} outputs never written: fn must return "
                          f"the value (the epilogue stores it)")
    a64, b64 = acc.astype(np.float64), bias.astype(np.float64)[:, None]
    x = a64 + b64
    want = _gelu_tanh(x)
    rtol, atol = 2e-5, 2e-6 * (1.0 + np.abs(x))
    if _close(got, want, rtol, atol):
        if _float64_inside(fn, 2):
            raise CheckFailed(
                f"{name}: the values are right, but float32 inputs give a float64 result. A Python float "
                f"constant (0.5, 1.0, 0.044715, math.sqrt(2 / math.pi)) is a float64 to Numba, and it turns "
                f"the whole GELU, tanh included, into float64 arithmetic: half of float32's speed on an "
                f"H100, a sixty-fourth on most other GPUs, for every element of the output. Use the "
                f"float32 constants of the cell (HALF, ONE, CUBIC, SQRT_2_OVER_PI) or np.float32(...)")
        progress.passed(name)
        print(f"{name}: correct ({m * n} values, x from {x.min():.1f} to {x.max():.1f}, float32 throughout)")
        return
    _diagnose(name, got, want, [
        ("the bias is missing: the activation applies to value + bias", _gelu_tanh(a64)),
        ("the bias is added after the activation: it goes inside, gelu(value + bias)", _gelu_tanh(a64) + b64),
        ("this is the exact (erf) GELU; cuBLASLt's GELU_BIAS, the peer, uses the tanh approximation "
         "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))", _gelu_erf(x)),
        ("the factor 1/2 is missing: 0.5 * x * (1 + tanh(...))", 2 * want),
        ("the cubic term is missing: tanh(sqrt(2/pi) * (x + 0.044715 * x**3))", 0.5 * x * (1 + np.tanh(_K0 * x))),
        ("this is ReLU, not GELU", np.maximum(x, 0)),
    ], rtol, atol)


# ================================================================================================
# 06.2: the quantizing epilogue


def _fused_floor(acc: int, scale: float) -> int:
    """floor(acc * scale + 0.5) with the product *not* rounded: what one FMA computes."""
    from fractions import Fraction

    return math.floor(float(Fraction(acc) * Fraction(scale) + Fraction(1, 2)))


def _fma_sources(py_func) -> str | None:
    """Why the compiler would fuse this function's multiply and add, or None.

    The simulator never fuses (Python rounds every operation), so on a CPU the mistake is found in
    the source: a product ``*`` whose result feeds an addition or subtraction, or ``cuda.fma``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(py_func)))
    except (OSError, TypeError, SyntaxError):
        return None
    products = set()  # names assigned from an expression containing a product
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if fname == "fma":
                return "it calls fma(): one rounding, where the reference rounds the product first"
        if isinstance(node, ast.Assign) and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)
                                                for n in ast.walk(node.value)):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    products.add(t.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            for side in (node.left, node.right):
                if isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult):
                    return "a product feeds an addition ('acc * scale + 0.5')"
                if isinstance(side, ast.Name) and side.id in products:
                    return f"'{side.id}', a product, feeds an addition"
    return None


def _quantize_cases():
    """(acc, scale, zero_point, label) rows that separate the classic mistakes."""
    rows = []
    for acc in range(-41, 42, 2):  # exact ties x = k + 0.5, both signs
        rows.append((acc, 0.5, 0, "tie"))
    rng = np.random.default_rng(7)
    for acc in rng.integers(-60000, 60000, 40):  # ordinary values, negative ones too
        rows.append((int(acc), 1.0 / 1000.0, 5, "plain"))
    for acc in (10**6, -(10**6), 3 * 10**6, -7 * 10**6):  # beyond int8: the clamp
        rows.append((acc, 1.0 / 1000.0, -3, "clamp"))
    for d in (-3, -1, 3):  # int32 sums above 2^24: float32 cannot hold them
        rows.append(((1 << 26) + (1 << 18) + d, 2.0**-19, -100, "float32"))
        rows.append((-((1 << 26) + (1 << 18)) + d, 2.0**-19, 100, "float32"))
    for d in (2000, 6000, 10000, 14000, 18000, 26000):  # products a hair past -0.5: FMA and two roundings differ
        s = 1.0 / d
        from fractions import Fraction

        if Fraction(s) > Fraction(1, d):
            rows.append((-d // 2, s, 0, "fma"))
    return rows


def check_quantize(fn, *, name: str = "quantizing epilogue") -> None:
    """``fn(acc, scale, zero_point)`` must return ``clamp(floor(acc * scale + 0.5) + zero_point,
    -128, 127)`` exactly as NumPy computes it: in float64, the product rounded *before* the
    addition (``epilogues.mul_rn()``), ties rounded up."""
    fn = _device_function(fn, "fn")

    @cuda.jit
    def harness(acc, scale, zp, out):
        i = cuda.grid(1)
        if i < acc.size:
            out[i] = fn(acc[i], scale[i], zp[i])

    rows = _quantize_cases()
    acc = np.array([r[0] for r in rows], np.int32)
    scale = np.array([r[1] for r in rows], np.float64)
    zp = np.array([r[2] for r in rows], np.int32)
    label = np.array([r[3] for r in rows])
    out = _poisoned(acc.size, np.int32)
    _launch(name, harness, -(-acc.size // 64), 64, cuda.to_device(acc), cuda.to_device(scale), cuda.to_device(zp), out)
    got = out.copy_to_host().astype(np.int64)
    x = acc.astype(np.float64) * scale
    clamp = lambda q: np.clip(q, -128, 127)  # noqa: E731
    want = clamp(np.floor(x + 0.5) + zp)
    fused = clamp(np.array([_fused_floor(int(a), float(s)) for a, s in zip(acc, scale)]) + zp)
    x32 = acc.astype(np.float32).astype(np.float64) * scale
    hypotheses = [
        ("it rounds with one fused multiply-add (FMA): the product acc * scale must be rounded before the + 0.5 "
         "(write the product with mul_rn(a, b), epilogues.mul_rn(), which the compiler cannot fuse)",
         fused),
        ("it rounds half to even (round/rint); the reference rounds ties up: floor(x + 0.5)",
         clamp(np.rint(x) + zp)),
        ("it rounds half away from zero; the reference rounds ties up, -2.5 to -2: floor(x + 0.5)",
         clamp(np.sign(x) * np.floor(np.abs(x) + 0.5) + zp)),
        ("it truncates toward zero (int(x + 0.5)); negative values need floor: math.floor(x + 0.5)",
         clamp(np.trunc(x + 0.5) + zp)),
        ("it computes in float32: an int32 sum above 2^24 loses its low bits; compute in float64",
         clamp(np.floor(x32 + 0.5) + zp)),
        ("the clamp to [-128, 127] is missing", np.floor(x + 0.5) + zp),
        ("the zero point is missing", clamp(np.floor(x + 0.5))),
    ]
    if not np.array_equal(got, want):
        for message, alt in hypotheses:
            if np.array_equal(got, alt):
                raise CheckFailed(f"{name}: {message}")
        bad = np.flatnonzero(got != want)
        i = int(bad[0])
        kinds = sorted(set(label[bad]))
        raise CheckFailed(f"{name}: {bad.size} of {got.size} codes wrong (cases: {', '.join(kinds)}); first: acc = "
                          f"{acc[i]}, scale = {scale[i]!r}, zero_point = {zp[i]}: got {got[i]}, expected {want[i]}")
    if on_simulator():  # Python never fuses: the simulator cannot show the FMA mistake, the source can
        why = _fma_sources(fn.py_func)
        if why:
            raise CheckFailed(f"{name}: on a GPU the compiler fuses this multiply and add into one FMA ({why}); "
                              f"it rounds once, and codes next to a half-integer come out one lower. Multiply "
                              f"with mul_rn(a, b) (epilogues.mul_rn()), a product the compiler may not fuse")
    progress.passed(name)
    print(f"{name}: correct, bit for bit ({got.size} codes: ties, negatives, clamps, sums above 2^24)")


# ================================================================================================
# 06.2: the row softmax, first pass (three epilogue functions) and second pass


def _softmax_inputs(batch=2, m=13, n=37, seed=3):
    rng = np.random.default_rng(seed)
    acc = (3 * rng.standard_normal((batch, m, n))).astype(np.float32)
    acc[0, 3] += 400.0  # alpha * acc near 200: exp overflows float32 without the row max
    acc[1, 5] -= 400.0  # near -200: every exp underflows to 0 without it
    acc[1, 8, 20:] += 40.0  # one tile of this row far above the others: the rescale matters
    return acc, 0.5


def _softmax_partials(acc, alpha, tile_n):
    """What the first pass must leave: exp(alpha acc - m_b), and per tile m_b and s_b."""
    batch, m, n = acc.shape
    tiles = -(-n // tile_n)
    x = alpha * acc.astype(np.float64)
    mb = np.empty((batch, m, tiles))
    for t in range(tiles):
        mb[:, :, t] = x[:, :, t * tile_n:(t + 1) * tile_n].max(axis=2)
    mcol = np.repeat(mb, tile_n, axis=2)[:, :, :n]
    e = np.exp(x - mcol)
    sb = np.stack([e[:, :, t * tile_n:(t + 1) * tile_n].sum(axis=2) for t in range(tiles)], axis=2)
    return x, e, mb, sb


def check_softmax_partial(build, *, name: str = "row softmax, first pass", tile_m: int = 8, tile_n: int = 16,
                          threads: int = 32) -> None:
    """``build(tile_m)`` returns the epilogue functions ``(prepare, store, finish)`` of
    :func:`kernel_lab.tensor_cores.epilogues.row_softmax_partial` (args ``(alpha, row_max,
    row_sum)``). The harness calls them as the GEMM does, on a ragged batch of tiles, with a
    partition of the tile among the threads of its own."""
    require_callable(build, "build")
    fns = build(tile_m)
    if not (isinstance(fns, tuple) and len(fns) == 3):
        raise KernelLabArgumentError(f"build(tile_m) must return (prepare, store, finish), got {fns!r}")
    prepare, store, finish = (_device_function(f, w) for f, w in zip(fns, ("prepare", "store", "finish")))
    TM, TN, NT = tile_m, tile_n, threads
    STATS = 2 * TM  # a shared array's shape must be a constant: Numba does not fold 2 * TM inside the kernel

    @cuda.jit
    def harness(acc, out, row_max, row_sum, m, n, alpha):
        stats = cuda.shared.array(shape=(STATS,), dtype=np.float32)
        tid = cuda.threadIdx.x
        for i in range(tid, 2 * TM, NT):
            stats[i] = -math.inf if i < TM else np.float32(0)
        cuda.syncthreads()
        row0 = cuda.blockIdx.x * TM
        col0 = cuda.blockIdx.y * TN
        bz = cuda.blockIdx.z
        args = (alpha, row_max, row_sum)
        for i in range(tid, TM * TN, NT):
            lr = i // TN
            lc = i - lr * TN
            if row0 + lr < m and col0 + lc < n:
                prepare(lr, acc[bz, row0 + lr, col0 + lc], stats, args)
        cuda.syncthreads()
        for i in range(tid, TM * TN, NT):
            lr = i // TN
            lc = i - lr * TN
            if row0 + lr < m and col0 + lc < n:
                store(out, bz, row0 + lr, col0 + lc, lr, acc[bz, row0 + lr, col0 + lc], stats, args)
        cuda.syncthreads()
        finish(stats, bz, row0, cuda.blockIdx.y, tid, m, args)

    acc, alpha = _softmax_inputs()
    batch, m, n = acc.shape
    tiles = -(-n // TN)
    out = _poisoned(acc.shape, np.float32)
    rmax = _poisoned((batch, m, tiles), np.float32)
    rsum = _poisoned((batch, m, tiles), np.float32)
    _launch(name, harness, (-(-m // TM), tiles, batch), NT, cuda.to_device(acc), out, rmax, rsum,
            np.int32(m), np.int32(n), alpha)
    got, gmax, gsum = out.copy_to_host(), rmax.copy_to_host(), rsum.copy_to_host()
    x, e, mb, sb = _softmax_partials(acc, alpha, TN)
    if is_poison(gmax).all() and is_poison(got).all():
        raise CheckFailed(f"{name}: the exercise is not done yet (nothing was written)")
    if is_poison(gmax).any() or is_poison(gsum).any():
        b, r, t = (int(i) for i in np.argwhere(is_poison(gmax) | is_poison(gsum))[0])
        raise CheckFailed(f"{name}: finish left row_max/row_sum[{b}, {r}, {t}] unwritten: every row of the tile "
                          f"(thread tid < tile_m, when row0 + tid < m) writes its statistics at column tile_col")
    if is_poison(got).any():
        idx = tuple(int(i) for i in np.argwhere(is_poison(got))[0])
        raise CheckFailed(f"{name}: store left out{list(idx)} unwritten")
    finite = np.isfinite(got)
    normal = np.ones(acc.shape[:2], bool)
    normal[0, 3] = normal[1, 5] = False
    if not finite.all() or _close(got[normal], np.exp(x[normal]), 1e-4, 1e-30):
        raise CheckFailed(f"{name}: a softmax without the row max: store must write exp(alpha * acc - m_b) with "
                          f"m_b = stats[lrow], the maximum prepare gathered (exp(200) overflows float32: "
                          f"{int((~finite).sum())} values are inf or nan)")
    if not _close(gmax, mb, 1e-6, 1e-6):
        accmax = np.stack([acc[:, :, t * TN:(t + 1) * TN].max(axis=2) for t in range(tiles)], axis=2)
        if _close(gmax, accmax, 1e-6, 1e-6):
            raise CheckFailed(f"{name}: row_max holds the maximum of acc; it must be the maximum of alpha * acc, "
                              f"the argument of the exponent")
        _diagnose(name, gmax, mb, [], 1e-6, 1e-6, " in row_max (the maximum of alpha * acc over this block's "
                  "columns of the row)")
    if not _close(got, e, 1e-4, 1e-30):
        _diagnose(name, got, e, [], 1e-4, 1e-30, " in out (exp(alpha * acc - m_b))")
    if not _close(gsum, sb, 1e-4, 1e-30):
        _diagnose(name, gsum, sb, [("row_sum holds the number of columns: add the exponentials, not 1",
                                    np.stack([np.minimum(n - t * TN, TN) * np.ones((batch, m)) for t in range(tiles)], 2))],
                  1e-4, 1e-30, " in row_sum (the sum of the values store wrote)")
    progress.passed(name)
    print(f"{name}: correct ({batch} x {m} x {n} in {tile_m} x {tile_n} tiles; rows reaching exp(+-200) included)")


def check_softmax_second_pass(second_pass, *, name: str = "row softmax, second pass", tile_n: int = 16,
                              threads: int = 32) -> None:
    """``second_pass(out, row_max, row_sum, bz, r, n, tile_n, tid, nthreads)`` turns the first
    pass's partials into the softmax of row ``r`` in place; run by the package's own second-pass
    kernel (``gemm.softmax_finish(..., second_pass=...)``), one block per row."""
    from ..tensor_cores import gemm

    second_pass = _device_function(second_pass, "second_pass")
    acc, alpha = _softmax_inputs()
    batch, m, n = acc.shape
    x, e, mb, sb = _softmax_partials(acc, alpha, tile_n)
    want = np.exp(x - x.max(axis=2, keepdims=True))
    want /= want.sum(axis=2, keepdims=True)
    out = cuda.to_device(e.astype(np.float32))
    kernel = gemm._softmax_finish_kernel(tile_n, second_pass)
    _launch(name, kernel, (m, batch), threads, out, cuda.to_device(mb.astype(np.float32)),
            cuda.to_device(sb.astype(np.float32)), np.int32(m), np.int32(n))
    got = out.copy_to_host()
    rtol, atol = 1e-4, 1e-7
    if np.array_equal(got, e.astype(np.float32)):
        raise CheckFailed(f"{name}: the exercise is not done yet (out is unchanged)")
    if _close(got, want, rtol, atol):
        progress.passed(name)
        print(f"{name}: correct ({batch} x {m} rows of {n}, {mb.shape[2]} tiles each)")
        return
    M = mb.max(axis=2, keepdims=True)
    scale_col = np.repeat(np.exp(mb - M), tile_n, axis=2)[:, :, :n]
    S = (sb * np.exp(mb - M)).sum(axis=2, keepdims=True)
    own = np.repeat(sb, tile_n, axis=2)[:, :, :n]
    _diagnose(name, got, want, [
        ("each column is divided by its own block's sum s_b; the row sum is S = sum_b s_b exp(m_b - M) over all "
         "the row's blocks", e / own),
        ("the row sum adds the s_b as they are; each was taken against its own block's maximum: "
         "S = sum_b s_b * exp(m_b - M), with M the row's maximum", e * scale_col / sb.sum(axis=2, keepdims=True)),
        ("the values are not rescaled: each block's exp(alpha x - m_b) must be multiplied by exp(m_b - M) / S",
         e / S),
        ("the row sum is right but the values are not divided by it", e * scale_col),
    ], rtol, atol)


# ================================================================================================
# 06.3: the implicit-GEMM gather (im2col)


def _im2col_variant(x, R, S, P, *, shift=0, pad_offset=True, rows="n,oh,ow", cols="c,r,s", pad_zero=True,
                    strict=True):
    n, C, H, W = x.shape
    OH, OW = H + 2 * P - R + 1, W + 2 * P - S + 1
    out = np.zeros((n * OH * OW, C * R * S))
    for gr in range(out.shape[0]):
        if rows == "n,oh,ow":
            ow, oh, nimg = gr % OW, (gr // OW) % OH, gr // (OW * OH)
        else:
            oh, ow, nimg = gr % OH, (gr // OH) % OW, gr // (OW * OH)
        for gc in range(out.shape[1]):
            if cols == "c,r,s":
                s, r, c = gc % S, (gc // S) % R, gc // (S * R)
            elif cols == "c,s,r":
                r, s, c = gc % R, (gc // R) % S, gc // (S * R)
            else:  # r, s, c
                c, s, r = gc % C, (gc // C) % S, gc // (C * S)
            ih = oh + r - (P if pad_offset else 0) + shift
            iw = ow + s - (P if pad_offset else 0) + shift
            inside = (0 <= ih < H and 0 <= iw < W) if strict else (0 < ih < H - 1 and 0 < iw < W - 1)
            if inside:
                out[gr, gc] = x[nimg, c, ih, iw]
            elif not pad_zero and -H <= ih < H and -W <= iw < W:
                out[gr, gc] = x[nimg, c, ih, iw]  # what a missing test reads (negative indices wrap)
    return out


def check_im2col_load(load, *, name: str = "implicit-GEMM gather (im2col)") -> None:
    """``load(x, gr, gc, geo)`` with ``geo = (C, H, W, R, S, P, OH, OW)`` must return element
    ``(gr, gc)`` of ``im2col(x)``: row ``(n, oh, ow)`` (``ow`` fastest), column ``(c, r, s)``
    (``s`` fastest), ``x[n, c, oh + r - P, ow + s - P]``, or 0 where that falls in the padding."""
    from ..tensor_cores import references as ref

    load = _device_function(load, "load")

    @cuda.jit
    def harness(x, cols, geo):
        gr, gc = cuda.grid(2)
        if gr < cols.shape[0] and gc < cols.shape[1]:
            cols[gr, gc] = load(x, gr, gc, geo)

    # N, C, H, W, R, S, P; padding 2 first: with padding 1 a missing "- P" and a "+ 1" look alike
    cases = [(1, 2, 4, 5, 3, 3, 2), (2, 2, 5, 4, 3, 2, 1), (1, 3, 4, 6, 2, 3, 0)]
    for nimg, C, H, W, R, S, P in cases:
        x = (1.0 + np.arange(nimg * C * H * W, dtype=np.float64)).reshape(nimg, C, H, W)
        OH, OW = ref.conv_output_shape(H, W, R, S, P)
        want = ref.im2col(x, R, S, P)
        cols = _poisoned(want.shape, np.float64)
        geo = (C, H, W, R, S, P, OH, OW)
        label = f"{name} (N={nimg}, C={C}, {H}x{W} image, {R}x{S} filter, padding {P})"
        try:
            _launch(label, harness, (-(-want.shape[0] // 8), -(-want.shape[1] // 8)), (8, 8), cuda.to_device(x), cols, geo)
        except CheckFailed as exc:
            if "Index" in str(exc) or "bounds" in str(exc).lower():
                raise CheckFailed(f"{label}: it reads outside x: a position in the padding (ih or iw < 0, or >= H, "
                                  f">= W) must give 0 without reading: test 0 <= ih < H and 0 <= iw < W first. "
                                  f"({exc})") from None
            raise
        got = cols.copy_to_host()
        if np.isnan(got).all():
            raise CheckFailed(f"{name}: the exercise is not done yet (load returns nothing)")
        if is_poison(got).any():
            raise CheckFailed(f"{label}: {int(is_poison(got).sum())} values never written: load must return a value "
                              f"for every (gr, gc), 0 in the padding")
        if np.array_equal(got, want):
            continue
        wrong = got != want
        if np.all(want[wrong] == 0):
            raise CheckFailed(f"{label}: the padding border: positions outside the image must read 0, not image "
                              f"values (test 0 <= ih < H and 0 <= iw < W; a negative index wraps around)")
        if np.all(got[wrong] == 0):
            raise CheckFailed(f"{label}: zeros inside the image at its border: the padding test is off by one "
                              f"(0 <= ih < H, 0 <= iw < W: ih = 0 and ih = H - 1 are inside)")
        _diagnose(label, got, want, [
            ("the padding offset is missing: ih = oh + r - P, iw = ow + s - P", _im2col_variant(x, R, S, P, pad_offset=False)),
            ("off by one: ih = oh + r - P (not + 1)", _im2col_variant(x, R, S, P, shift=1)),
            ("off by one: ih = oh + r - P (not - 1)", _im2col_variant(x, R, S, P, shift=-1)),
            ("row order: rows are (n, oh, ow) with ow fastest: ow = gr % OW, oh = (gr // OW) % OH",
             _im2col_variant(x, R, S, P, rows="n,ow,oh")),
            ("column order: columns are (c, r, s) with s fastest: s = gc % S, r = (gc // S) % R, c = gc // (R S)",
             _im2col_variant(x, R, S, P, cols="c,s,r")),
            ("column order: columns are (c, r, s) with s fastest, the channel slowest (the filters' layout)",
             _im2col_variant(x, R, S, P, cols="r,s,c")),
        ], 0.0, 0.0)
    progress.passed(name)
    print(f"{name}: correct for {len(cases)} geometries (padding 0, 1 and 2, R != S, several images)")


# ================================================================================================
# 06.3: int4 unpacking


def check_int4_load(load, *, name: str = "int4 unpacking") -> None:
    """``load(packed, k, n)`` must return B[k, n] as an int (-8..7) from ``packed`` (K, ceil(N/2))
    uint8 bytes (``references.pack_int4``): column 2j in the low nibble, 2j+1 in the high one,
    two's complement."""
    from ..tensor_cores import references as ref

    load = _device_function(load, "load")

    @cuda.jit
    def harness(packed, out):
        kk, nn = cuda.grid(2)
        if kk < out.shape[0] and nn < out.shape[1]:
            out[kk, nn] = load(packed, kk, nn)

    K, N = 16, 34
    vals = np.empty((K, N), np.int8)
    vals[:, 0::2] = np.arange(-8, 8)[:, None]  # every value in the low nibble
    vals[:, 1::2] = np.arange(7, -9, -1)[:, None]  # and in the high one, next to a different one
    packed = ref.pack_int4(vals).astype(np.uint8)
    out = _poisoned((K, N), np.int32)
    try:
        _launch(name, harness, (2, 5), (8, 8), cuda.to_device(packed), out)
    except CheckFailed as exc:
        if "Index" in str(exc) or "bounds" in str(exc).lower():
            raise CheckFailed(f"{name}: it reads past the packed bytes: column n lives in byte n // 2 ({exc})") from None
        raise
    got = out.copy_to_host().astype(np.int64)
    want = vals.astype(np.int64)
    if np.array_equal(got, want):
        progress.passed(name)
        print(f"{name}: correct (all 16 values in both nibbles, {K} x {N})")
        return
    swapped = want.copy()
    swapped[:, 0::2], swapped[:, 1::2] = want[:, 1::2], want[:, 0::2]
    unsigned = want & 15
    for message, alt in [
        ("no sign extension: a nibble 8..15 stands for -8..-1 (two's complement): subtract 16 when it is >= 8",
         unsigned),
        ("nibble order: column 2j is the low nibble (byte & 15), column 2j+1 the high one (byte >> 4)", swapped),
        ("nibble order and sign extension both: column 2j is the low nibble (byte & 15), 2j+1 the high one; "
         "then subtract 16 from nibbles >= 8", swapped & 15),
        ("sign extension off by one: 8 (0b1000) is already negative, -8: subtract 16 when nib >= 8, not > 8",
         np.where(want == -8, 8, want)),
    ]:
        if np.array_equal(got, alt):
            raise CheckFailed(f"{name}: {message}")
    bad = np.argwhere(got != want)[0]
    kk, nn = int(bad[0]), int(bad[1])
    raise CheckFailed(f"{name}: {int((got != want).sum())} of {got.size} values wrong; first B[{kk}, {nn}] (byte "
                      f"{packed[kk, nn // 2]:#04x}): got {got[kk, nn]}, expected {want[kk, nn]}")


# ================================================================================================
# 06.3: batched-GEMM indexing


def check_batched_load(load, *, name: str = "batched loader") -> None:
    """``load(x, bz, row, col, rows, cols)`` must return ``x[b, row, col]`` with ``b = bz``, or
    ``b = 0`` when ``x`` has a batch of one (an operand shared by every batch: batch stride 0),
    and 0 outside ``rows x cols``. Out of bounds reads are how the real kernel tiles ragged edges."""
    load = _device_function(load, "load")

    @cuda.jit
    def harness(x, out, rows, cols):
        r, c, bz = cuda.grid(3)
        if bz < out.shape[0] and r < out.shape[1] and c < out.shape[2]:
            out[bz, r, c] = load(x, bz, r, c, rows, cols)

    batch, rows, cols = 3, 5, 7
    for shared in (False, True):
        xb = 1 if shared else batch
        x = (1.0 + np.arange(xb * rows * cols, dtype=np.float64)).reshape(xb, rows, cols)
        want = np.zeros((batch, rows + 3, cols + 2))
        want[:, :rows, :cols] = x if not shared else x[0]
        out = _poisoned(want.shape, np.float64)
        label = f"{name} ({'one operand shared by' if shared else 'one operand per batch,'} {batch} batches)"
        try:
            _launch(label, harness, (1, 2, batch), (8, 8, 1), cuda.to_device(x), out, np.int32(rows), np.int32(cols))
        except CheckFailed as exc:
            if "Index" in str(exc) or "bounds" in str(exc).lower():
                if shared:
                    raise CheckFailed(f"{label}: batch stride: an operand with a batch of one is shared, its batch "
                                      f"stride is 0: read x[0] for every bz (x.shape[0] == 1) ({exc})") from None
                raise CheckFailed(f"{label}: it reads outside x: past rows x cols the loader returns 0 without "
                                  f"reading (the zero fill of the ragged tiles) ({exc})") from None
            raise
        got = out.copy_to_host()
        if np.isnan(got).all():
            raise CheckFailed(f"{name}: the exercise is not done yet (load returns nothing)")
        if is_poison(got).any():
            raise CheckFailed(f"{label}: {int(is_poison(got).sum())} elements never written: return 0 outside rows x cols")
        if np.array_equal(got, want):
            continue
        inside = np.zeros(want.shape, bool)
        inside[:, :rows, :cols] = True
        if np.array_equal(got[inside], want[inside]):
            raise CheckFailed(f"{label}: no zero fill: past rows x cols the loader must return 0 (the tile's zeros "
                              f"add nothing to the dot products)")
        if not shared and np.array_equal(got[:, :rows, :cols], np.broadcast_to(x[0], (batch, rows, cols))):
            raise CheckFailed(f"{label}: every batch reads batch 0: index the batch, x[bz, row, col], when x has "
                              f"more than one")
        if shared and np.array_equal(got[0, :rows, :cols], x[0]):
            raise CheckFailed(f"{label}: batch stride: batches 1.. read garbage: a shared operand (batch of one) "
                              f"is read at x[0] for every bz")
        if rows + 3 >= cols and np.array_equal(got[:, :cols, :rows],
                                                 np.swapaxes(want[:, :rows, :cols], 1, 2)[:, :cols, :rows]):
            raise CheckFailed(f"{label}: rows and columns swapped: x[b, row, col]")
        bad = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise CheckFailed(f"{label}: {int((got != want).sum())} elements wrong; first out{list(bad)}: got "
                          f"{got[bad]}, expected {want[bad]}")
    progress.passed(name)
    print(f"{name}: correct (per-batch and shared operands, {batch} batches, zero fill past the edges)")


# ================================================================================================
# 06.4: the tuner's search and its cache lookup (plain Python)


class _Timer:
    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, cand):
        self.calls.append(cand["name"])
        t = self.table[cand["name"]]
        if isinstance(t, Exception):
            raise t
        return t


def check_tuner_search(search, *, name: str = "tuner search") -> None:
    """``search(candidates, time_ms)`` must time each candidate once, record a failing one (it
    raises, or returns no positive finite time) as ``Trial(config, None, error)`` and go on, and
    return ``(best_trial, trials)``: the fastest trial and all of them, in order. When every
    candidate fails it raises (there is no best)."""
    require_callable(search, "search")
    names = ["128x128 d2", "256x128 d2", "128x128 d4", "128x256 d3", "64x64 d2"]
    table = {"128x128 d2": 2.0, "256x128 d2": RuntimeError("compilation failed: too much shared memory"),
             "128x128 d4": 0.5, "128x256 d3": float("nan"), "64x64 d2": 1.0}
    cands = [{"name": n} for n in names]
    timer = _Timer(table)
    try:
        result = search(cands, timer)
    except Exception as exc:  # noqa: BLE001
        if timer.calls and timer.calls[-1] == "256x128 d2":
            raise CheckFailed(f"{name}: a candidate whose timing raised ({type(exc).__name__}) stopped the search: "
                              f"catch the exception, record Trial(config, None, error) and go on") from None
        raise CheckFailed(f"{name}: search raised {type(exc).__name__}: {exc}") from None
    if result is None:
        raise CheckFailed(f"{name}: the exercise is not done yet (search returned None)")
    try:
        best, trials = result
    except (TypeError, ValueError):
        raise CheckFailed(f"{name}: search must return (best_trial, trials), got {result!r}") from None
    if sorted(timer.calls) != sorted(names):
        raise CheckFailed(f"{name}: each candidate must be timed exactly once (time_ms compiles and runs it: "
                          f"seconds to minutes each); timed {timer.calls}")
    trials = list(trials)
    if len(trials) != len(names):
        raise CheckFailed(f"{name}: trials must hold every candidate, the failed ones too ({len(trials)} of {len(names)})")
    by_name = {t.config["name"]: t for t in trials}
    for failed in ("256x128 d2", "128x256 d3"):
        if failed in by_name and by_name[failed].ms is not None:
            why = "raised" if failed == "256x128 d2" else "returned nan"
            raise CheckFailed(f"{name}: the candidate whose timing {why} must be recorded as failed (ms None, "
                              f"with the error), got ms = {by_name[failed].ms!r}")
    cfg = getattr(best, "config", best)
    picked = cfg.get("name") if isinstance(cfg, dict) else None
    if picked == "128x256 d3":
        raise CheckFailed(f"{name}: it picked a candidate whose time was nan: only positive finite times count "
                          f"(nan compares false with everything, so min() may keep it)")
    if picked == "128x128 d2":
        raise CheckFailed(f"{name}: it picked the first candidate (or the slowest): the best is the smallest time")
    if picked != "128x128 d4":
        raise CheckFailed(f"{name}: the best is the fastest successful candidate (128x128 d4, 0.5 ms), got {best!r}")
    if getattr(best, "ms", None) != 0.5:
        raise CheckFailed(f"{name}: best must be the fastest Trial (with its ms), got {best!r}")
    timer = _Timer({n: RuntimeError("no kernel image") for n in names})
    try:
        result = search(cands, timer)
    except Exception:  # noqa: BLE001 - expected: nothing to pick
        progress.passed(name)
        print(f"{name}: correct (failed candidates recorded, nan refused, fastest kept, all-failed raises)")
        return
    raise CheckFailed(f"{name}: when every candidate fails there is no best: raise (RuntimeError) instead of "
                      f"returning {result!r}")


def check_cache_lookup(lookup, *, name: str = "tuner cache lookup") -> None:
    """``lookup(entries, key, candidates)`` must return the candidate stored as the winner under
    exactly ``key`` (``entries[key]["best"]`` equals ``tuner.config_to_dict(candidate)``), or
    None when there is no entry for that key or its winner is no longer a candidate."""
    from dataclasses import dataclass

    from ..tuner import config_to_dict

    require_callable(lookup, "lookup")

    @dataclass(frozen=True)
    class Cfg:
        tile_m: int
        tile_n: int
        depth: int

    cands = [Cfg(128, 128, 2), Cfg(128, 256, 2), Cfg(128, 128, 4)]
    gpu = "gpu=NVIDIA H100 | GPU-1"

    def key(shape, dtypes=("float16", "float32"), g=gpu, version="06.2"):
        return f"{g} ; kernel=pipeline_gemm@{version} ; shape={shape} ; dtypes={dtypes}"

    entries = {
        key((4096, 4096, 4096)): {"best": config_to_dict(cands[2]), "best_ms": 0.4},
        key((2048, 2048, 2048)): {"best": config_to_dict(cands[1]), "best_ms": 0.1},
        key((4096, 4096, 4096), g="gpu=NVIDIA H200 | GPU-2"): {"best": config_to_dict(cands[0]), "best_ms": 0.3},
        key((1024, 1024, 1024)): {"best": {"type": "Cfg", "tile_m": 64, "tile_n": 64, "depth": 8}, "best_ms": 0.05},
    }
    snapshot = repr(entries)
    got = lookup(entries, key((4096, 4096, 4096)), cands)
    if isinstance(got, dict):
        raise CheckFailed(f"{name}: it returned the stored dict; return the candidate (configuration) it describes")
    if got is None:
        raise CheckFailed(f"{name}: the key is in the cache but nothing was returned (the exercise is not done, or "
                          f"the stored winner is compared with the candidates the wrong way: compare "
                          f"config_to_dict(candidate) with entries[key]['best'])")
    if got != cands[2]:
        raise CheckFailed(f"{name}: returned {got!r}, the winner of another entry; the winner stored under this exact "
                          f"key is {cands[2]!r}")
    for missing, why in ((key((4096, 4096, 8192)), "another shape"), (key((4096, 4096, 4096), version="06.3"),
                                                                       "another kernel version"),
                         (key((4096, 4096, 4096), dtypes=("int8", "int32")), "other dtypes")):
        got = lookup(entries, missing, cands)
        if got is not None:
            raise CheckFailed(f"{name}: for a key with {why} (not in the cache) it returned {got!r}: only an entry "
                              f"under exactly this key answers; otherwise return None and tune")
    got = lookup(entries, key((1024, 1024, 1024)), cands)
    if got is not None:
        raise CheckFailed(f"{name}: the stored winner (64x64, depth 8) is no longer a candidate: return None so the "
                          f"tuner measures again, got {got!r}")
    if repr(entries) != snapshot:
        raise CheckFailed(f"{name}: lookup changed the cache entries; it must only read them")
    progress.passed(name)
    print(f"{name}: correct (exact key, misses for another shape, version and dtypes, stale winner refused)")


# ================================================================================================
# 06.1: the numbered steps: 16-byte cp.async copies into cuBLASDx's layouts


def _check_positions(name, a_pos, b_pos, layout):
    """The learner's chunk positions against the layout's, in plain Python (their ``py_func``)."""
    from ..tensor_cores import async_gemm as ag

    want_a, want_b = ag.POSITIONS[layout]
    for which, fn, want, rows, per_row in (("a_pos", a_pos, want_a, ag.TM, ag.A_ROW_CHUNKS),
                                           ("b_pos", b_pos, want_b, ag.TK, ag.B_ROW_CHUNKS)):
        f = getattr(fn, "py_func", fn)
        got = [[f(r, c) for c in range(per_row)] for r in range(rows)]
        if any(v is None for row in got for v in row):
            raise CheckFailed(f"{name}: the exercise is not done yet ({which} returns nothing)")
        for r in range(rows):
            for c in range(per_row):
                if int(got[r][c]) != want(r, c):
                    plain = ag.POSITIONS["plain"][0 if which == "a_pos" else 1](r, c)
                    extra = ""
                    if layout == "suggested" and int(got[r][c]) == plain:
                        extra = (" (that is the plain, row-major position: the suggested layout swaps chunks within "
                                 "a row by an XOR with bits of the row index)")
                    elif which == "a_pos" and layout == "suggested" and int(got[r][c]) == r * ag.A_ROW_CHUNKS + (c ^ (r & 3)):
                        extra = " (an XOR with bits 0-1 of the row; A's swizzle uses bits 1-2: (r >> 1) & 3)"
                    raise CheckFailed(f"{name}: {which}({r}, {c}) = {got[r][c]}, but the {layout} layout puts chunk {c} "
                                      f"of row {r} at {want(r, c)}{extra}")
        flat = sorted(int(v) for row in got for v in row)
        if flat != list(range(rows * per_row)):
            raise CheckFailed(f"{name}: {which} does not give every chunk its own place")


POISON16 = 0xFFFF  # what the stage harness fills shared memory with before the copies


def _stage_harness(issue):
    """A one-block kernel ``harness(a, b, out, k0, row0, col0, m, n, k)``: shared memory poisoned,
    the learner's ``issue`` copies one slice into a stage there, the stage read back into ``out``."""
    from ..mma_ptx import cp_async_commit, cp_async_wait_all, shared_address
    from ..tensor_cores import async_gemm as ag

    ELEMS, THREADS, POISON = ag.STAGE_BYTES // 2, ag.THREADS, POISON16
    # cp.async writes whole 16-byte chunks: the array must start on 16 bytes (the simulator has no
    # aligned shared arrays, and needs none)
    ALIGN = None if on_simulator() else 16

    @cuda.jit
    def harness(a, b, out, k0, row0, col0, m, n, k):
        sm = cuda.shared.array(shape=(ELEMS,), dtype=np.uint16, alignment=ALIGN)
        tid = cuda.threadIdx.x
        for i in range(tid, ELEMS, THREADS):
            sm[i] = POISON
        cuda.syncthreads()
        issue(a, b, shared_address(sm, 0), k0, row0, col0, m, n, k, tid)
        cp_async_commit()
        cp_async_wait_all()
        cuda.syncthreads()
        for i in range(tid, ELEMS, THREADS):
            out[i] = sm[i]

    return harness


def _run_stage(name, harness, case, a_d, b_d, k0, row0, col0, m, n, k, matrix="the matrix"):
    """The stage the harness leaves for one slice (uint16 bits); an out-of-bounds address is named."""
    from ..tensor_cores import async_gemm as ag

    out = cuda.to_device(np.zeros(ag.STAGE_BYTES // 2, np.uint16))
    try:
        _launch(name, harness, 1, ag.THREADS, a_d, b_d, out, k0, row0, col0, m, n, k)
    except CheckFailed as exc:
        if "index" in str(exc).lower() or "bounds" in str(exc).lower() or "address" in str(exc).lower():
            raise CheckFailed(f"{name}, {case}: it forms an address outside {matrix} ({exc}); a chunk with nothing to "
                              "copy copies 0 bytes from a valid address, e.g. element 0") from None
        raise
    return out.copy_to_host()


def _stage_mistake(name, case, got, want, a_chunk=None):
    """Why the stage ``got`` is not ``want`` (both uint16 bits of a stage), as a CheckFailed; None when
    they agree. ``a_chunk(p)`` describes A's chunk p's source (the generic message otherwise)."""
    from ..tensor_cores import async_gemm as ag

    if np.array_equal(got, want):
        return None
    if np.all(got == POISON16):
        return CheckFailed(f"{name}: the exercise is not done yet (no chunk of the stage was written)")
    chunks_got, chunks_want = got.reshape(-1, 8), want.reshape(-1, 8)
    bad = [int(i) for i in np.nonzero(np.any(chunks_got != chunks_want, axis=1))[0]]
    p = bad[0]
    tile, local = ("A", p) if p < ag.A_CHUNKS else ("B", p - ag.A_CHUNKS)
    if np.all(chunks_got[p] == POISON16):
        if not np.any(chunks_want[p]):
            return CheckFailed(f"{name}, {case}: shared chunk {local} of the {tile} tile was never written; it lies "
                               "past the matrix edge (or in the padding) and must hold zeros: copy 0 source bytes there "
                               "(cp.async then fills the 16 bytes with zeros)")
        return CheckFailed(f"{name}, {case}: shared chunk {local} of the {tile} tile was never written: every "
                           f"chunk of the slice needs a copy ({len(bad)} chunks wrong)")
    if np.array_equal(chunks_got[:ag.B_CHUNKS], chunks_want[ag.A_CHUNKS:]):
        return CheckFailed(f"{name}, {case}: B's chunks land at the start of the stage, over A's: B's tile begins "
                           f"{ag.A_BYTES} bytes after the stage address")
    where = a_chunk(p) if a_chunk is not None and tile == "A" else (
        "check the global row and column of chunk (r, c) (row r, columns 8c..8c+7 of the slice) and the byte "
        "offset 16 * pos")
    return CheckFailed(f"{name}, {case}: shared chunk {local} of the {tile} tile holds the wrong 16 bytes "
                       f"({len(bad)} of {ag.A_CHUNKS + ag.B_CHUNKS} chunks wrong): {where}")


def check_issue_slice(make_issue_slice, a_pos, b_pos, *, layout: str = "suggested",
                      name: str = "cp.async tile copies") -> None:
    """``make_issue_slice(a_pos, b_pos)`` must return a device function
    ``issue(a, b, stage, k0, row0, col0, m, n, k, tid)`` whose 256 threads together start 16-byte
    ``cp.async`` copies of one slice: A's tile ``a[row0:row0+128, k0:k0+32]`` chunk (r, c) to shared
    chunk ``a_pos(r, c)`` of the stage, B's ``b[k0:k0+32, col0:col0+128]`` chunk (r, c) to chunk
    ``b_pos(r, c)`` after A's 8192 bytes, zeros for chunks past the matrix. Runs one block in a
    harness (the simulator or the GPU): shared memory poisoned, the copies, the stage read back."""
    from ..tensor_cores import async_gemm as ag

    require_callable(make_issue_slice, "make_issue_slice")
    _device_function(a_pos, "a_pos")
    _device_function(b_pos, "b_pos")
    _check_positions(name, a_pos, b_pos, layout)
    issue = make_issue_slice(a_pos, b_pos)
    _device_function(issue, "make_issue_slice(a_pos, b_pos)")
    harness = _stage_harness(issue)

    rng = np.random.default_rng(6)
    m, k, n = 160, 72, 136  # the second case's tile hangs over all three edges
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    a_d, b_d = cuda.to_device(a), cuda.to_device(b)
    for case, (k0, row0, col0) in (("a tile inside the matrix", (32, 0, 0)),
                                   ("a tile over the edges (rows 128-255 of 160, K 64-95 of 72, columns 128-255 of 136)",
                                    (64, 128, 128))):
        got = _run_stage(name, harness, case, a_d, b_d, k0, row0, col0, m, n, k)
        mistake = _stage_mistake(name, case, got, ag.reference_stage(a, b, k0, row0, col0, layout).view(np.uint16))
        if mistake is not None:
            raise mistake
    progress.passed(name)
    print(f"{name}: correct for both tiles ({layout} layout, zeros past the edges)")


def check_conv_issue_slice(make_conv_issue, a_pos, b_pos, *, layout: str = "suggested",
                           name: str = "implicit-GEMM chunk copies") -> None:
    """``make_conv_issue(geometry, a_pos, b_pos)`` must return a device function
    ``issue(x, b, stage, k0, row0, col0, m, n, k, tid)`` that starts the slice's 16-byte ``cp.async``
    copies of a convolution's implicit GEMM: A's chunk (r, c) is columns ``k0 + 8c .. + 7`` of row
    ``row0 + r`` of ``references.im2col_nhwc(x)`` (output pixel (n, oh, ow); filter tap (i, j) =
    divmod((k0 + 8c) // C, S), channels ``(k0 + 8c) % C ..`` + 7), read from the channels-last image
    ``x[n, oh + i - P, ow + j - P, ch:ch + 8]``, zeros in the padding and past the matrix; B's chunks
    as in 06.1. Checked in a one-block harness on two geometries (C = 16 and 8, padding 1 and 2,
    R != S, a ragged last tile), slice by slice against the explicit matrix."""
    from ..tensor_cores import async_gemm as ag
    from ..tensor_cores import references as ref
    from ..tensor_cores.validate import ConvGeometry

    require_callable(make_conv_issue, "make_conv_issue")
    _device_function(a_pos, "a_pos")
    _device_function(b_pos, "b_pos")
    _check_positions(name, a_pos, b_pos, layout)
    rng = np.random.default_rng(7)
    cases = [(ConvGeometry(n=2, c=16, h=9, w=11, r=3, s=3, padding=1), 136,
              [("slice 1 of the first tile", (32, 0, 0)),
               ("the last tile (rows 128-255 of 198, K 128-159 of 144, columns 128-255 of 136)", (128, 128, 128))]),
             (ConvGeometry(n=1, c=8, h=5, w=7, r=2, s=3, padding=2), 16,
              [("padding 2, a 2 x 3 filter", (32, 0, 0))])]
    for g, kf, slices in cases:
        issue = make_conv_issue(g, a_pos, b_pos)
        _device_function(issue, "make_conv_issue(geometry, a_pos, b_pos)")
        harness = _stage_harness(issue)
        x = rng.standard_normal((g.n, g.h, g.w, g.c)).astype(np.float16)
        wmat = rng.standard_normal((g.gemm_k, kf)).astype(np.float16)
        cols = ref.im2col_nhwc(x, g.r, g.s, g.padding)
        x_d, w_d = cuda.to_device(x), cuda.to_device(wmat)
        geo = f"C = {g.c}, {g.h} x {g.w} image, {g.r} x {g.s} filter, padding {g.padding}"
        for case, (k0, row0, col0) in slices:
            got = _run_stage(name, harness, f"{geo}, {case}", x_d, w_d, k0, row0, col0, g.gemm_m, kf, g.gemm_k,
                             matrix="the image")

            def a_chunk(p, g=g, k0=k0, row0=row0):
                r, c = _chunk_of(p, layout)
                gr, gc = row0 + r, k0 + 8 * c
                if gr >= g.gemm_m or gc >= g.gemm_k:
                    return f"it is chunk (r={r}, c={c}), past the matrix's edge: zeros"
                img, rest = divmod(gr, g.out_h * g.out_w)
                oh, ow = divmod(rest, g.out_w)
                (i, j), ch = divmod(gc // g.c, g.s), gc % g.c
                ih, iw = oh + i - g.padding, ow + j - g.padding
                src = (f"x[{img}, {ih}, {iw}, {ch}:{ch + 8}]" if 0 <= ih < g.h and 0 <= iw < g.w
                       else f"zeros (input pixel ({ih}, {iw}) is in the padding)")
                return (f"it is chunk (r={r}, c={c}): output pixel {gr} = (n={img}, oh={oh}, ow={ow}), columns {gc}.."
                        f"{gc + 7} = filter tap (i={i}, j={j}), channels {ch}..{ch + 7}: it must hold {src}")

            want = ag.reference_stage(cols, wmat, k0, row0, col0, layout).view(np.uint16)
            mistake = _stage_mistake(name, f"{geo}, {case}", got, want, a_chunk)
            if mistake is not None:
                raise mistake
    progress.passed(name)
    print(f"{name}: correct for {len(cases)} geometries ({layout} layout, zeros in the padding and past the edges)")


def _chunk_of(p, layout):
    """The (r, c) of A's tile whose chunk the layout puts at shared position ``p``."""
    from ..tensor_cores import async_gemm as ag

    pos = ag.POSITIONS[layout][0]
    for r in range(ag.TM):
        for c in range(ag.A_ROW_CHUNKS):
            if pos(r, c) == p:
                return r, c
    return p // ag.A_ROW_CHUNKS, p % ag.A_ROW_CHUNKS


# ================================================================================================
# 06.1: the kernel around cuBLASDx's pipeline API

PIPELINE_TILE = (128, 256, 64, 256)  # 06.1's fp16 pipeline: tile_m, tile_n, tile_k, threads
# On a GPU: one padded shape (384 x 512 x 256), so one compilation; n = 333 takes the element-by-element
# store everywhere (rows not 16-byte multiples), n = 512 the whole-tile store on the tiles inside
GPU_CASES = (("ragged, 300 x 333 x 200", 300, 333, 200), ("whole tiles, 300 x 512 x 200", 300, 512, 200))
# The right kernels take about a second in the simulator; a walk that never ends is stopped after this
PIPELINE_TIME_LIMIT_S = 20
WALK_NEVER_ENDS = ("a loop that does not end? In a persistent kernel, the counter must move on by the number "
                   "of blocks (cuda.gridDim.x) every pass, and the loop end when it reaches the number of tiles")


def _pipeline_cases(persistent):
    """(what, m, n, k, grid) for the simulator: every path of a pipeline kernel at 06.1's tiles."""
    if persistent:  # six tiles for four blocks: blocks 0 and 1 walk to a second tile
        return [("6 tiles, 4 blocks (blocks 0 and 1 take two tiles each), ragged edges", 260, 300, 64, (4, 1))]
    return [("2 x 2 tiles: one whole, three over the edges", 200, 300, 64, None),
            ("rows 258 floats apart (not whole 16-byte chunks)", 128, 258, 64, None)]


def _pipeline_mistake(name, case, got, want, executed, tiles, tm, tn, full=None):
    """Why a pipeline kernel's ``got`` is not ``want``: per tile, the classic mistakes. ``full`` is
    the product over the zero-padded tiles (the values a tile's accumulators hold, edges included)."""
    never = [tuple(int(v) for v in t) for t in np.argwhere(executed == 0)]
    twice = [tuple(int(v) for v in t) for t in np.argwhere(executed > 1)]
    poison = is_poison(got)
    if poison.all() and not executed.any():
        return CheckFailed(f"{name}: the exercise is not done yet (no tile was computed, nothing was written)")
    if poison.all() and not never:
        return CheckFailed(f"{name}, {case}: every tile was computed, but nothing was written to out: the store "
                           "(store_tile) is not done yet, or never called")
    if never:
        return CheckFailed(f"{name}, {case}: tile {never[0]} was never computed (no tile.execute for it; "
                           f"{len(never)} of {tiles[0] * tiles[1]} tiles missing): every tile of the output needs "
                           "one block, blockIdx for a grid of one block a tile, the walk for a persistent block")
    if twice:
        return CheckFailed(f"{name}, {case}: tile {twice[0]} was computed {int(executed[twice[0]])} times: two blocks "
                           "took the same tile (a persistent block steps by the number of blocks, gridDim.x)")
    with np.errstate(invalid="ignore"):
        tol = 1e-2 + 1e-2 * np.abs(want)
        bad = ~(np.abs(got.astype(np.float64) - want) <= tol)
    if not bad.any():
        return None
    m, n = want.shape
    for bm in range(tiles[0]):
        for bn in range(tiles[1]):
            r0, c0 = bm * tm, bn * tn
            sl = (slice(r0, min(r0 + tm, m)), slice(c0, min(c0 + tn, n)))
            if not bad[sl].any():
                continue
            where = f"tile ({bm}, {bn}), rows {sl[0].start}-{sl[0].stop - 1}, columns {sl[1].start}-{sl[1].stop - 1}"
            g, w = got[sl].astype(np.float64), want[sl]
            if poison[sl].all():
                edge = sl[0].stop - sl[0].start < tm or sl[1].stop - sl[1].start < tn
                return CheckFailed(f"{name}, {case}: nothing was written in {where}" +
                                   (" (a tile over the matrix's edge: its elements inside the matrix still need "
                                    "writing, one by one)" if edge else ""))
            if poison[sl].any():
                return CheckFailed(f"{name}, {case}: {int(poison[sl].sum())} elements of {where} were never written "
                                   "(every fragment index i of every active thread, range(frag.layout.size))")
            if full is not None:
                own = np.sort(full[r0:r0 + tm, c0:c0 + tn], axis=None)  # the tile's values, padding included
                pos = np.clip(np.searchsorted(own, g.ravel()), 1, own.size - 1)
                nearest = np.minimum(np.abs(own[pos] - g.ravel()), np.abs(own[pos - 1] - g.ravel()))
                if np.all(nearest <= 1e-2 + 1e-2 * np.abs(g.ravel())):
                    return CheckFailed(f"{name}, {case}: {where} holds its tile's values in the wrong places: the "
                                       "i-th value of the fragment belongs at (row0, col0) + acc.map_fragment_index(i)")
                diff = g - w
                for om in range(tiles[0]):
                    for on in range(tiles[1]):
                        other = full[om * tm:om * tm + diff.shape[0], on * tn:on * tn + diff.shape[1]]
                        if (om, on) != (bm, bn) and np.allclose(diff, other, rtol=1e-2, atol=1e-2):
                            return CheckFailed(
                                f"{name}, {case}: {where} holds its product plus tile ({om}, {on})'s: the "
                                "accumulator still held the block's previous tile (acc.clear() before each tile)")
            count, idx = int(bad[sl].sum()), tuple(int(i) for i in np.argwhere(bad[sl])[0])
            return CheckFailed(f"{name}, {case}: {count} values of {where} wrong; the first at "
                               f"({r0 + idx[0]}, {c0 + idx[1]}): got {g[idx]!r}, expected {w[idx]!r}")
    return None


def _model_failure(name, case, exc) -> CheckFailed:
    """What a kernel run against ``pipeline_model`` raised, as the learner's message: the model's own
    refusal (with the block that made it), a stub's NotImplementedError, or the simulator's report."""
    from ..tensor_cores import pipeline_model as pm

    model = exc
    while model is not None and not isinstance(model, pm.PipelineModelError):
        model = model.__cause__ or model.__context__
    text = str(model if model is not None else exc)
    found = re.search(r"ctaid=\[(\d+), (\d+), \d+\]: (.*)", text, re.DOTALL)
    if found:  # the simulator's "tid=[..] ctaid=[..]: message": name the block in words
        text = f"block ({found[1]}, {found[2]}): {found[3]}"
    if "NotImplementedError" in f"{type(exc).__name__}: {exc}":
        return CheckFailed(f"{name}: the exercise is not done yet ({text.splitlines()[-1]})")
    if model is not None:
        return CheckFailed(f"{name}, {case}: {text.strip()}")
    return CheckFailed(f"{name}, {case}: the kernel raised {type(exc).__name__}: {text.splitlines()[0] if text else ''}")


def _padded_operands(rng, m, n, k, tm, tn, spread=1.0):
    """fp16 A (m x k) and B transposed (n x k), their copies padded with zeros to whole tiles (as
    PipelineGemm pads them), and the float64 product of the padded copies (edge tiles' values included)."""
    tiles = (-(-m // tm), -(-n // tn))
    a = (rng.standard_normal((m, k)) * spread).astype(np.float16)
    b_t = (rng.standard_normal((n, k)) * spread).astype(np.float16)
    ap = np.zeros((tiles[0] * tm, k), np.float16)
    bp = np.zeros((tiles[1] * tn, k), np.float16)
    ap[:m], bp[:n] = a, b_t
    return a, b_t, ap, bp, ap.astype(np.float64) @ bp.astype(np.float64).T, tiles


def _launch_model(name, case, kernel, grid, threads, args, hint=None):
    """One launch against ``pipeline_model`` in the simulator, within its time limit; what the kernel
    raised becomes the learner's message (``_model_failure``)."""
    try:
        with finishes_within(f"{name}, {case}", PIPELINE_TIME_LIMIT_S, **({"hint": hint} if hint else {})):
            kernel[grid, threads](*args)
            cuda.synchronize()
    except CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's kernel raised: name it
        raise _model_failure(name, case, exc) from None


def _pipeline_check_simulator(name, make_kernel, persistent):
    from ..tensor_cores import pipeline_model as pm
    from ..tensor_cores.gemm import band_walk

    tm, tn, tk, threads = PIPELINE_TILE
    rng = np.random.default_rng(11)
    for case, m, n, k, grid in _pipeline_cases(persistent):
        mm = pm.ModelMatmul(tm, tn, tk, threads, np.float32, seed=m + n)
        body = make_kernel(mm, pm.make_tensor, band_walk(8)) if persistent else make_kernel(mm, pm.make_tensor)
        if body is None:
            raise CheckFailed(f"{name}: the exercise is not done yet (the factory returns nothing)")
        if hasattr(body, "py_func") or not callable(body):
            raise KernelLabArgumentError(f"{name}: the factory must return the kernel's plain Python function "
                                         "(no @cuda.jit: PipelineGemm compiles it with the pipeline's extensions)")
        _, _, ap, bp, full, tiles = _padded_operands(rng, m, n, k, tm, tn)
        pipeline = pm.ModelPipeline(mm, ap, bp)
        out = _poisoned((m, n), np.float32)
        _launch_model(name, case, cuda.jit(body), grid or tiles, threads, (out, np.int32(m), np.int32(n), pipeline),
                      hint=WALK_NEVER_ENDS)
        mistake = _pipeline_mistake(name, case, out.copy_to_host(), full[:m, :n], pipeline.executed, tiles, tm, tn,
                                    full)
        if mistake is not None:
            raise mistake
    return "the simulator's model of the pipeline API, 128 x 256 tiles, 256 threads"


def _pipeline_check_gpu(name, make_kernel, persistent):
    import cupy as cp

    from ..tensor_cores.configs import PipelineConfig
    from ..tensor_cores.gemm import PipelineGemm

    tm, tn, tk, threads = PIPELINE_TILE
    cfg = PipelineConfig(tm, tn, tk, threads, "float16", depth=3, persistent_group_m=8 if persistent else 0)
    gemm = PipelineGemm(cfg, kernel=make_kernel)
    rng = np.random.default_rng(11)
    for case, m, n, k in GPU_CASES:
        a, b_t, _, _, full, tiles = _padded_operands(rng, m, n, k, tm, tn)
        out = cp.full((m, n), cp.nan, dtype=cp.float32)
        try:
            gemm(cp.asarray(a), cp.asarray(b_t), out)
            cp.cuda.runtime.deviceSynchronize()
        except Exception as exc:  # noqa: BLE001 - a compile or launch error of the learner's kernel
            raise CheckFailed(f"{name}, {case}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        got = cp.asnumpy(out)
        mistake = _pipeline_mistake(name, case, got, full[:m, :n], np.ones(tiles, np.int64), tiles, tm, tn, full)
        if mistake is not None:
            raise mistake
    return "on the GPU, compiled with cuBLASDx: 300 x 333 and 300 x 512 outputs, K = 200"


def check_pipeline_kernel(make_kernel, *, persistent: bool = False, name: str | None = None) -> None:
    """``make_kernel(MM, make_tensor)`` (``make_kernel(MM, make_tensor, tile_of)`` when
    ``persistent``) must return the Python function of a kernel ``kernel(out, m, n,
    device_pipeline)`` that computes its tile (or, persistent, walks tiles ``blockIdx.x, +
    gridDim.x, ...`` in ``tile_of``'s order) with cuBLASDx's pipeline API and stores ``A @ B`` in the
    2-D ``out``: whole tiles with ``partition_and_copy``, edge tiles element by element. In the
    simulator the pipeline objects are ``tensor_cores.pipeline_model``'s (06.1's tiles, ragged
    edges, rows that are not whole 16-byte chunks, a persistent walk); on a GPU the real ones, compiled
    with cuBLASDx at a ragged shape. Names tiles never computed or computed twice, edge tiles stored
    whole, values in the wrong places, an accumulator not cleared between tiles, unwritten elements."""
    name = name or ("persistent pipeline kernel" if persistent else "pipeline kernel")
    require_callable(make_kernel, "make_kernel")
    how = (_pipeline_check_simulator if on_simulator() else _pipeline_check_gpu)(name, make_kernel, persistent)
    progress.passed(name)
    print(f"{name}: correct ({how})")


# ================================================================================================
# 06.2: the fused epilogue of the learner's pipeline kernel


def _gelu_bias_reference(x, bias_rows):
    return _gelu_tanh(x + bias_rows[:, None])


def _fused_store_mistake(name, case, got, want, full, bias, tiles, tm, tn, chunked):
    """Why the fused store's ``got`` differs from ``want`` (GELU of the product plus the row's bias)."""
    m, n = want.shape
    plain = full[:m, :n]
    candidates = [("the plain product A @ B: the epilogue was not applied", plain),
                  ("A @ B + bias without the GELU", plain + bias[:, None]),
                  ("GELU(A @ B) without the bias", _gelu_tanh(plain))]
    if n <= len(bias):
        candidates.append(("GELU(A @ B + bias[column]): the bias belongs to the row (bias[row0 + r])",
                           _gelu_tanh(plain + bias[None, :n])))
    for bm in range(tiles[0]):
        for bn in range(tiles[1]):
            r0, c0 = bm * tm, bn * tn
            sl = (slice(r0, min(r0 + tm, m)), slice(c0, min(c0 + tn, n)))
            g = got[sl].astype(np.float64)
            if _close(g, want[sl], 1e-2, 1e-2):
                continue
            whole = sl[0].stop - sl[0].start == tm and sl[1].stop - sl[1].start == tn and n % 4 == 0
            kind = "a whole tile (the partition_and_copy path)" if whole else "an edge tile (the value-by-value path)"
            where = f"tile ({bm}, {bn}), {kind}"
            for what, alt in candidates:
                if _close(g, alt[sl], 1e-2, 1e-2):
                    more = (" Transform the fragment in registers before partition_and_copy stores it"
                            if whole and what.startswith("the plain") else "")
                    return CheckFailed(f"{name}, {case}: {where} holds {what}.{more}")
            if whole and chunked:
                return CheckFailed(f"{name}, {case}: {where} is wrong: in the chunked loops, fragment index "
                                   "base + j is the value whose bias loaded[j] holds, and bias[row0 + r] is that "
                                   "value's bias, r from acc.map_fragment_index(base + j)")
            count, idx = _first_wrong(g, want[sl], 1e-2, 1e-2)
            return CheckFailed(f"{name}, {case}: {count} values of {where} wrong; the first at "
                               f"({r0 + idx[0]}, {c0 + idx[1]}): got {g[idx]!r}, expected {want[sl][idx]!r}")
    return None


def check_fused_store(make_store, act, *, chunked: bool = False, name: str | None = None) -> None:
    """``make_store(MM, make_tensor, act)`` must return a device function ``store_tile(acc, frag, out,
    bias, m, n, row0, col0)`` that stores ``act(value, bias[row])`` for every value of the tile whose
    corner is ``(row0, col0)``: on whole tiles by transforming the fragment in registers and storing
    it with ``partition_and_copy``, on edge tiles value by value. ``act`` is the learner's
    ``bias_gelu``. Run in a one-tile-a-block pipeline kernel: in the simulator against
    ``pipeline_model`` (06.1's tiles, ragged edges, rows that are not 16-byte chunks), on a GPU
    compiled with cuBLASDx. Names a store of the untransformed product, a missing bias or GELU, the
    bias by column, a transform that missed the edge tiles, and chunk indices that disagree."""
    name = name or ("fused bias + GELU store, chunked" if chunked else "fused bias + GELU store")
    require_callable(make_store, "make_store")
    _device_function(act, "act")

    def make_kernel(MM, make_tensor):
        TM, TN, _ = MM.size
        store_tile = make_store(MM, make_tensor, act)
        if store_tile is None:
            raise CheckFailed(f"{name}: the exercise is not done yet (make_store returns nothing)")

        def kernel(out, m, n, device_pipeline, bias):
            smem = cuda.shared.array(shape=(0,), dtype=np.int8, alignment=device_pipeline.buffer_alignment)
            tile = device_pipeline.get_tile(smem, cuda.blockIdx.x, cuda.blockIdx.y)
            acc = MM.suggest_accumulator()
            tile.execute(acc)
            store_tile(acc, acc.get_results(), out, bias, m, n, cuda.blockIdx.x * TM, cuda.blockIdx.y * TN)
            tile._del()

        return kernel

    tm, tn, tk, threads = PIPELINE_TILE
    rng = np.random.default_rng(12)
    if on_simulator():
        from ..tensor_cores import pipeline_model as pm

        cases = [(c, m, n, k) for c, m, n, k, _ in _pipeline_cases(False)]
        how = "the simulator's model of the pipeline API, 128 x 256 tiles, 256 threads"
    else:
        import cupy as cp

        from ..tensor_cores.configs import PipelineConfig
        from ..tensor_cores.gemm import PipelineGemm

        gemm = PipelineGemm(PipelineConfig(tm, tn, tk, threads, "float16", depth=3), kernel=make_kernel)
        cases = GPU_CASES
        how = "on the GPU, compiled with cuBLASDx: 300 x 333 and 300 x 512 outputs, K = 200"
    for case, m, n, k in cases:
        a, b_t, ap, bp, full, tiles = _padded_operands(rng, m, n, k, tm, tn, spread=0.25)
        bias = rng.standard_normal(m).astype(np.float32)
        if on_simulator():
            mm = pm.ModelMatmul(tm, tn, tk, threads, np.float32, seed=m + n)
            out = _poisoned((m, n), np.float32)
            _launch_model(name, case, cuda.jit(make_kernel(mm, pm.make_tensor)), tiles, threads,
                          (out, np.int32(m), np.int32(n), pm.ModelPipeline(mm, ap, bp), cuda.to_device(bias)))
            got = out.copy_to_host()
        else:
            out = cp.full((m, n), cp.nan, dtype=cp.float32)
            gemm(cp.asarray(a), cp.asarray(b_t), out, cp.asarray(bias))
            got = cp.asnumpy(out)
        if is_poison(got).all() or np.isnan(got).all():
            raise CheckFailed(f"{name}: the exercise is not done yet (nothing was written to out)")
        want = _gelu_bias_reference(full[:m, :n], bias.astype(np.float64))
        mistake = _fused_store_mistake(name, case, got, want, full, bias.astype(np.float64), tiles, tm, tn, chunked)
        if mistake is None and not _close(got, want, 1e-2, 1e-2):
            mistake = CheckFailed(f"{name}, {case}: some values are wrong")
        if mistake is not None:
            raise mistake
    progress.passed(name)
    print(f"{name}: correct ({how})")


# ================================================================================================
# 06.3: the conv layer's store (the chunked implicit GEMM's epilogue)


def _conv_store_harness(store_tile):
    """A kernel ``harness(ctiles, out, bias, m, n)``, one block of 256 threads a C tile: block
    ``(bx, by)`` hands the learner's ``store_tile`` its tile ``ctiles[bx, by]`` (128 x 128 float32,
    row-major, flat: what the stage loop leaves in shared memory) and its corner."""
    from ..tensor_cores import async_gemm as ag

    TM, TN = ag.TM, ag.TN

    @cuda.jit
    def harness(ctiles, out, bias, m, n):
        bx, by = cuda.blockIdx.x, cuda.blockIdx.y
        store_tile(ctiles[bx, by], out, bias, bx * TM, by * TN, m, n, cuda.threadIdx.x)

    return harness


def _conv_store_mistake(name, case, got, want, full, bias, tiles):
    """Why the conv layer's store left ``got`` (float16) instead of ``want``: the first tile that
    differs, and which slip fits it."""
    from ..tensor_cores import async_gemm as ag

    m, n = want.shape
    c = full[:m, :n]
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    candidates = [("the plain product: no bias and no ReLU", c),
                  ("the product plus the bias, without the ReLU (negative values kept)", c + bias[None, :]),
                  ("the ReLU of the product without the bias", relu(c)),
                  ("the ReLU applied before the bias is added: relu(acc) + bias, not relu(acc + bias)",
                   relu(c) + bias[None, :]),
                  ("the bias by row: bias[column] belongs to the output's column (one value a filter)",
                   relu(c + bias[np.arange(m) % n][:, None]))]
    # the tile read column-major: ctile[(c + e) * TM + r]
    transposed = np.zeros_like(full)
    for bm in range(tiles[0]):
        for bn in range(tiles[1]):
            blk = full[bm * ag.TM:(bm + 1) * ag.TM, bn * ag.TN:(bn + 1) * ag.TN]
            transposed[bm * ag.TM:(bm + 1) * ag.TM, bn * ag.TN:(bn + 1) * ag.TN] = blk.reshape(-1).reshape(ag.TN, ag.TM).T
    candidates.append(("the tile read column-major: value (r, c) of the C tile is ctile[r * TN + c] (row-major)",
                       relu(transposed[:m, :n] + bias[None, :])))
    unwritten = is_poison(got)
    for bm in range(tiles[0]):
        for bn in range(tiles[1]):
            r0, c0 = bm * ag.TM, bn * ag.TN
            sl = (slice(r0, min(r0 + ag.TM, m)), slice(c0, min(c0 + ag.TN, n)))
            where = f"tile ({bm}, {bn}) (rows {r0}-{sl[0].stop - 1}, columns {c0}-{sl[1].stop - 1})"
            hole = unwritten[sl]
            if hole.any():
                rr, cc = (int(i) for i in np.argwhere(hole)[0])
                share = f"{int(hole.sum())} of its {hole.size} values"
                if hole.all():
                    return CheckFailed(f"{name}, {case}: {where} was not stored at all; a block stores the values "
                                       "of its own tile, at rows row0 + r and columns col0 + c")
                return CheckFailed(f"{name}, {case}: {share} were never stored, the first at ({r0 + rr}, {c0 + cc}); "
                                   f"the 256 threads share the tile's {ag.C_CHUNKS} chunks of four values: "
                                   f"{ag.C_CHUNKS // ag.THREADS} passes, chunk tid + pass * 256 in each")
            g = got[sl].astype(np.float64)
            if _close(g, want[sl], 2e-3, 2e-3):
                continue
            for what, alt in candidates:
                if _close(g, alt[sl], 2e-3, 2e-3):
                    return CheckFailed(f"{name}, {case}: {where} holds {what}")
            count, idx = _first_wrong(g, want[sl], 2e-3, 2e-3)
            return CheckFailed(f"{name}, {case}: {count} values of {where} wrong; the first at "
                               f"({r0 + idx[0]}, {c0 + idx[1]}): got {g[idx]!r}, expected {want[sl][idx]!r} "
                               f"(relu(acc + bias[column]), rounded to float16)")
    return None


def check_conv_store(store_tile, *, name: str = "conv layer store (bias + ReLU, float16)") -> None:
    """``store_tile(ctile, out, bias, row0, col0, m, n, tid)`` must store the block's C tile (``ctile``:
    128 x 128 float32 results, row-major, flat, as the stage loop leaves them in shared memory) into
    rows ``row0..`` and columns ``col0..`` of the float16 ``out`` (m, n) as ``relu(value + bias[col])``,
    inside ``m x n`` only (``n`` a multiple of 8, so four values at a time are all in or all out).
    Run one block a tile, 256 threads, in the simulator or on the GPU alike (no cuBLASDx involved):
    a ragged output (200 x 136: a partial row of tiles and a second column of tiles eight wide) and a
    whole one. Names a missing bias or ReLU, the ReLU before the bias, the bias by row, the tile read
    column-major, and values never stored (chunks or edge rows missed); an index past ``out``
    (a missing row test) is the simulator's bounds report, or the GPU's error."""
    from ..tensor_cores import async_gemm as ag

    _device_function(store_tile, "store_tile")
    harness = _conv_store_harness(store_tile)
    rng = np.random.default_rng(21)
    cases = [("ragged, 200 x 136", 200, 136), ("whole tiles, 128 x 256", 128, 256)]
    for case, m, n in cases:
        tiles = (-(-m // ag.TM), -(-n // ag.TN))
        full = rng.standard_normal((tiles[0] * ag.TM, tiles[1] * ag.TN)).astype(np.float32)
        full[:8] = 0.0  # rows of exact zeros: relu(0 + bias) is the bias's own ReLU
        bias = rng.standard_normal(n).astype(np.float32)
        ctiles = np.ascontiguousarray(full.reshape(tiles[0], ag.TM, tiles[1], ag.TN).transpose(0, 2, 1, 3)
                                      .reshape(tiles[0], tiles[1], ag.TM * ag.TN))
        out = _poisoned((m, n), np.float16)
        with finishes_within(f"{name}, {case}", 60,
                             "a loop over the tile's chunks that does not end, or one thread doing every chunk?"):
            _launch(name, harness, tiles, ag.THREADS, cuda.to_device(ctiles), out, cuda.to_device(bias),
                    np.int32(m), np.int32(n))
        got = out.copy_to_host()
        if is_poison(got).all():
            raise CheckFailed(f"{name}: the exercise is not done yet (nothing was written to out)")
        want = np.maximum(full[:m, :n].astype(np.float64) + bias[None, :], 0.0).astype(np.float16).astype(np.float64)
        mistake = _conv_store_mistake(name, case, got, want, full.astype(np.float64), bias.astype(np.float64), tiles)
        if mistake is not None:
            raise mistake
    progress.passed(name)
    print(f"{name}: correct ({', '.join(c for c, _, _ in cases)}: edge rows and a partial column of tiles)")
