"""Checks for module 07's GPU exercises: slicing, reconstruction, the diagonal kernel, the fused kernel.

Each check runs the learner's kernel on fresh random inputs at awkward sizes and compares with
``kernel_lab.ozaki`` (NumPy). Digits, exponents and INT32 products are integers: they must match
exactly. A float64 result must match the NumPy scheme to a few units of roundoff of the terms
behind each element (the two add the same numbers in nearly the same order).

When a result is wrong, the check recomputes in NumPy what the classic mistakes of the exercise
produce and names the one the learner's output matches: the unsigned low byte, digits taken from
the top, the last digit truncated instead of rounded, a digit order reversed; a diagonal missing
its last pair, the first pair multiplied again and again (no ``reset_tile``), the diagonal index
off by one; diagonal weights reversed, beta applied to every diagonal, C read when beta is 0, a
missing row or column exponent.

``check_row_exponents`` / ``check_slice_rows`` / ``check_reconstruct`` use plain Numba kernels and
run in the CUDA simulator; ``check_diagonal_kernel`` / ``check_fused_kernel`` need a Hopper GPU,
nvmath-python and CuPy.
"""

from __future__ import annotations

import numpy as np

from .. import progress
from ..check import CheckFailed, is_poison, poisoned_host
from ..environment import on_simulator
from ..ozaki import reference as ref
from ..ozaki import slicing
from ..validate import require_callable
from .ozaki import RECONSTRUCT_MISTAKES, SPLIT_MISTAKES

__all__ = ["check_row_exponents", "check_slice_rows", "check_reconstruct", "check_diagonal_kernel",
           "check_fused_kernel", "exponent_cases", "CHECK_SHAPE"]

# M, N, K of the pipeline kernels' checks: no multiple of any tile, yet padded to 8192^3 by the
# default configuration's tiles (128 x 256 x 128), the notebooks' benchmark shape: one compilation
# serves the check and the measurement. The NumPy reference is computed for a sample of rows.
CHECK_SHAPE = (8190, 8100, 8150)
SAMPLE_ROWS = 96


def _first_diff(got, want, what="") -> str:
    idx = np.argwhere(got != want)
    if not len(idx):
        return ""
    i = tuple(int(x) for x in idx[0])
    return f"{len(idx)} of {want.size} {what}differ; first at {list(i)}: expected {want[i]}, got {got[i]}"


# ---------------------------------------------------------------------------------------------
# 07.2: exponents and slices


def exponent_cases(rng) -> list[tuple[str, np.ndarray]]:
    """Matrices that catch exponent mistakes: powers of two, zero rows, subnormals, Inf/NaN, one
    element, K not a multiple of the block, and rows of very different magnitude."""
    big_k = 300 if on_simulator() else 5000
    mixed = rng.standard_normal((9, 77)) * np.exp2(rng.integers(-60, 60, (9, 1)))
    special = rng.standard_normal((7, 33))
    special[0] = 0.0
    special[1, 5] = 2.0  # a power of two as the maximum: frexp gives e = 2, floor(log2) gives 1
    special[1, :5] = 0.5
    special[1, 6:] = 0.25
    special[2] = 5e-324 * rng.integers(-9, 10, 33)  # subnormals
    special[3, 7] = np.inf
    special[4, 2] = np.nan
    special[5, -1] = -1e300
    return [("1x1", np.array([[3.0]])), ("special rows", special), ("mixed magnitudes", mixed),
            ("long rows", rng.standard_normal((5, big_k)))]


def _reference_exponents(a):
    finite = np.isfinite(a).all(axis=1)
    e = slicing.exponents(np.where(np.isfinite(a), a, 0.0), axis=1)
    return np.where(finite, e, 0).astype(np.int32), (~finite).astype(np.int32)


def check_row_exponents(launch, *, seed=None) -> None:
    """``launch(a, e, bad)`` must write ``e[row] = frexp(max |a[row]|)[1]`` (0 for a zero row) and
    ``bad[row] = 1`` for a row holding Inf or NaN (``e[row] = 0`` then), ``bad[row] = 0`` otherwise."""
    from numba import cuda

    require_callable(launch, "launch")
    rng = np.random.default_rng(seed)
    for label, a in exponent_cases(rng):
        want_e, want_bad = _reference_exponents(a)
        e = cuda.to_device(poisoned_host(a.shape[0], np.int32))
        bad = cuda.to_device(poisoned_host(a.shape[0], np.int32))
        launch(cuda.to_device(a), e, bad)
        got_e, got_bad = e.copy_to_host(), bad.copy_to_host()
        unwritten = is_poison(got_e) | is_poison(got_bad)
        if unwritten.any():
            raise CheckFailed(f"row exponents ({label}): {int(unwritten.sum())} of {a.shape[0]} rows never "
                              "written. Hint: one block per row; after the block's reduction thread 0 writes "
                              "e[row] and bad[row] (both, for every row).")
        if not np.array_equal(got_bad, want_bad):
            rows = np.flatnonzero(got_bad != want_bad)
            hint = ("a NaN loses every comparison, so `if v > amax` never takes it: compare `not v <= amax` "
                    "(true for NaN), or test the row's maximum with `amax - amax != 0` (NaN for Inf and NaN)")
            raise CheckFailed(f"row exponents ({label}): bad[] is wrong for rows {rows.tolist()[:5]} (expected "
                              f"{want_bad[rows[:5]].tolist()}, got {got_bad[rows[:5]].tolist()}).\nHint: {hint}")
        if not np.array_equal(got_e, want_e):
            rows = np.flatnonzero(got_e != want_e)
            diff = (got_e - want_e)[rows]
            msg = f"row exponents ({label}): " + _first_diff(got_e, want_e, "exponents ")
            amax = np.abs(np.where(np.isfinite(a), a, 0)).max(axis=1)[rows]
            if (diff == -1).all() and np.all(np.frexp(amax)[0] == 0.5):
                msg += ("\nHint: one too small exactly where the row's maximum is a power of two: the exponent must "
                        "make every |x| * 2**-e < 1, so 2.0 needs e = 2. math.frexp(2.0) = (0.5, 2) gives it; "
                        "ceil(log2(2.0)) = 1 does not.")
            elif (diff == -1).all():
                msg += ("\nHint: one too small on every row: floor(log2(max)) is frexp's exponent minus one, and "
                        "leaves |x| * 2**-e up to 2. Use math.frexp(amax)[1].")
            elif (amax == 0).all():
                msg += "\nHint: a row of zeros has no largest exponent: give it e = 0 (math.frexp(0.0) = (0.0, 0))."
            else:
                msg += ("\nHint: e is the exponent of the row's largest *magnitude*: reduce abs(x) with max over "
                        "the whole row (every thread's strided part, then the block), then math.frexp(amax)[1].")
            raise CheckFailed(msg)
    print(f"row exponents: correct for all {len(exponent_cases(rng))} cases "
          f"({', '.join(label for label, _ in exponent_cases(rng))})")
    progress.passed('row exponents')


def _digit_models(a, s):
    """What the classic slicing mistakes give, as {name: (int8 digits (s, M, K), explanation)}: the
    catalogue of notebook 07.1's check (``checks.ozaki.SPLIT_MISTAKES``), stored as int8 the way a
    kernel's int8 store wraps them."""
    out = {}
    for mistake in SPLIT_MISTAKES:
        digits, _ = mistake.model(a, s)
        if digits is not None:
            out[mistake.name] = (np.asarray(digits).astype(np.int8), mistake.explanation)
    return out


def check_slice_rows(launch, slices: int = 7, *, tile=(128, 128), seed=None) -> None:
    """``launch(a, e, digits)`` must write the ``slices`` signed digits of every element of ``a``
    (exponents ``e`` given) into ``digits`` of shape ``(slices, Mp, Kp)``, and zeros into the
    padding (rows >= M, columns >= K): the pipeline reads whole tiles."""
    from numba import cuda

    require_callable(launch, "launch")
    rng = np.random.default_rng(seed)
    large = (20, 150) if on_simulator() else (1000, 3000)
    cases = [("1x1", np.array([[-0.75]])),
             ("mixed magnitudes", rng.standard_normal((13, 70)) * np.exp2(rng.integers(-40, 40, (13, 1)))),
             ("spread inside rows", rng.standard_normal((6, 90)) * np.exp2(rng.integers(-30, 1, (6, 90)))),
             ("large", rng.standard_normal(large))]
    for label, a in cases:
        m, k = a.shape
        mp, kp = -(-m // tile[0]) * tile[0], -(-k // tile[1]) * tile[1]
        want, e = slicing.split(a, slices, axis=1)
        out = cuda.to_device(poisoned_host(slices * mp * kp, np.int8).reshape(slices, mp, kp))
        try:
            launch(cuda.to_device(a), cuda.to_device(e), out)
            cuda.synchronize()
        except OverflowError as exc:  # the simulator refuses an int8 store out of range; a GPU wraps it
            raise CheckFailed(
                f"slices ({label}): a digit does not fit in int8 ({exc}). The simulator stops at that store; "
                f"a GPU would wrap the value around silently.\nHint: every digit lies in [-128, 127]. The "
                f"leading slice keeps what the others leave, and fits only if the element is scaled by its "
                f"own row's exponent (2**(P - e[row])) and every step takes exactly 8 bits off "
                f"(big = (big - d) >> 8).") from None
        got = out.copy_to_host()
        pad = np.ones((slices, mp, kp), bool)
        pad[:, :m, :k] = False
        if (got[pad] != 0).any():
            n_bad = int((got[pad] != 0).sum())
            raise CheckFailed(f"slices ({label}): {n_bad} of {int(pad.sum())} padding digits are not 0 (the buffer is "
                              f"{slices} x {mp} x {kp} for a {m} x {k} matrix).\nHint: the grid covers the padded "
                              "buffer; threads whose row >= M or column >= K write 0 into every slice.")
        body = got[:, :m, :k]
        if np.array_equal(body, want):
            continue
        msg = f"slices ({label}): " + _first_diff(body, want, "digits ")
        for name, (model, explanation) in _digit_models(a, slices).items():
            if np.array_equal(body, model):
                msg += f"\nThe digits are exactly what this mistake gives: {name}.\nHint: {explanation}"
                break
        else:
            wrong_slices = [t for t in range(slices) if not np.array_equal(body[t], want[t])]
            msg += f"\nslices that differ: {wrong_slices} (0 = most significant)"
        raise CheckFailed(msg)
    print(f"{slices} slices: correct for all {len(cases)} cases ({', '.join(label for label, _ in cases)})")
    progress.passed(f"{slices} slices")


# ---------------------------------------------------------------------------------------------
# 07.3: reconstruction; models shared with the fused kernel's check


def _reconstruct_models(diags, ea, eb, alpha, beta, c):
    """What the classic reconstruction mistakes give, as {name: (result, explanation)}: notebook
    07.1's catalogue (``checks.ozaki.RECONSTRUCT_MISTAKES``) and, for kernels that look the exponents
    up themselves, a row or column exponent left out."""
    out = {}
    for mistake in RECONSTRUCT_MISTAKES:
        result = mistake.model(diags, ea, eb, alpha, beta, c)
        if result is not None:
            out[mistake.name] = (result, mistake.explanation)
    zeros_a, zeros_b = np.zeros_like(ea), np.zeros_like(eb)
    out["the row exponent ea is missing from the shift"] = (
        ref.reconstruct(diags, zeros_a, eb, alpha, beta, c), "element (row, col) is scaled by 2**(ea[row] + eb[col] - 12 - 8d).")
    out["the column exponent eb is missing from the shift"] = (
        ref.reconstruct(diags, ea, zeros_b, alpha, beta, c), "element (row, col) is scaled by 2**(ea[row] + eb[col] - 12 - 8d).")
    return out


def _compare_float_result(name, got, want, magnitude, models):
    """Raise CheckFailed naming the mistake whose model matches, if ``got`` is not ``want``."""
    allowed = 64 * ref.U64 * magnitude
    nan = ~np.isfinite(got)
    wrong = nan | (np.abs(got - want) > allowed)
    if not wrong.any():
        return
    i = tuple(int(x) for x in np.argwhere(wrong)[0])
    msg = (f"{name}: {int(wrong.sum())} of {want.size} elements are wrong; first at {list(i)}: expected "
           f"{want[i]:.17g}, got {got[i]:.17g} (allowed {allowed[i]:.2g})")
    for mistake, (model, explanation) in models.items():
        with np.errstate(invalid="ignore"):
            if np.all(np.abs(got - model) <= 64 * ref.U64 * (np.abs(model) + magnitude)):
                msg += f"\nThe result is exactly what this mistake gives: {mistake}.\nHint: {explanation}"
                break
    raise CheckFailed(msg)


def _problem(rng, shape):
    m, n, k = shape
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-20, 20, (1, n)))
    return a, b


def check_reconstruct(launch, slices: int = 7, *, from_pairs: bool = True, seed=None) -> None:
    """``launch(parts, ea, eb, alpha, beta, c)`` must write ``c = alpha * sum_d D_d * 2**(ea + eb - 12 - 8d)
    + beta * c``, diagonals least significant first, beta once, C not read when beta is 0.
    ``parts`` holds the pair products in ``reference.triangular_pairs`` order (``from_pairs``) or the
    diagonal sums, int32 ``(parts, M, N)``."""
    from numba import cuda

    require_callable(launch, "launch")
    rng = np.random.default_rng(seed)
    shape = (37, 29, 50) if on_simulator() else (300, 200, 400)
    a, b = _problem(rng, shape)
    da, ea = slicing.split(a, slices, 1)
    db, eb = slicing.split(b, slices, 0)
    parts = ref.pair_products(da, db) if from_pairs else ref.diagonal_sums(da, db)
    diags = ref.diagonal_sums(da, db)
    magnitude = np.abs(a) @ np.abs(b)
    c0 = rng.standard_normal((shape[0], shape[1]))
    for alpha, beta, c_in in [(0.9, 1.1, c0), (1.0, 0.0, np.full_like(c0, np.nan)), (-2.0, 1.0, c0)]:
        want = ref.reconstruct(diags, ea, eb, alpha, beta, c_in)
        out = cuda.to_device(c_in)
        launch(cuda.to_device(parts.astype(np.int32)), cuda.to_device(ea), cuda.to_device(eb), alpha, beta, out)
        got = out.copy_to_host()
        label = f"reconstruction (alpha={alpha}, beta={beta})"
        if beta == 0 and np.isnan(got).any():
            raise CheckFailed(f"{label}: {int(np.isnan(got).sum())} elements are NaN. C held NaN, and beta = 0 must "
                              "mean C is not read at all (BLAS's rule: 0 * NaN is NaN).\nHint: with beta == 0 write "
                              "`c[row, col] = alpha * total` without reading c.")
        models = _reconstruct_models(diags, ea, eb, alpha, beta, c_in)
        _compare_float_result(label, got, want, np.abs(alpha) * magnitude + np.abs(beta * np.nan_to_num(c_in)),
                              models)
    print(f"reconstruction from {'pair products' if from_pairs else 'diagonal sums'}: correct "
          "(alpha and beta, beta = 0 with C unread)")
    progress.passed(f"reconstruction from {'pair products' if from_pairs else 'diagonal sums'}")


# ---------------------------------------------------------------------------------------------
# 07.4 and 07.5: the pipeline kernels (GPU only)


def _diagonal_models(da, db):
    s = da.shape[0]
    fa, fb = da.astype(np.float64), db.astype(np.float64)
    prod = {(t, u): fa[t] @ fb[u] for t in range(s) for u in range(s)}
    zero = np.zeros_like(prod[(0, 0)])

    def diag(pairs_of):
        return np.stack([sum((prod[p] for p in pairs_of(d) if 0 <= p[0] < s and 0 <= p[1] < s), zero)
                         for d in range(s)]).astype(np.int64)

    return {
        "each diagonal misses its last pair (d + 1 pairs: t = 0 .. d)": diag(lambda d: [(t, d - t) for t in range(d)]),
        "the first pair is multiplied again and again (move the pipeline with reset_tile after each execute)":
            diag(lambda d: [(0, d)] * (d + 1)),
        "the pairs are (t, d - t + 1): the B slice is one too high": diag(lambda d: [(t, d - t + 1) for t in range(d + 1)]),
        "the pairs are (t + 1, d - t): the A slice is one too high": diag(lambda d: [(t + 1, d - t) for t in range(d + 1)]),
    }


def _gpu_problem(seed, slices):
    """Inputs at CHECK_SHAPE, the rows whose results are compared (the first and last tiles' rows and
    a random sample), and the NumPy slices of those rows of A and of all of B."""
    rng = np.random.default_rng(seed)
    a, b = _problem(rng, CHECK_SHAPE)
    m = CHECK_SHAPE[0]
    rows = np.unique(np.concatenate([np.arange(32), np.arange(m - 32, m),
                                     rng.choice(m, SAMPLE_ROWS - 64, replace=False)]))
    return rng, a, b, rows, slicing.split(a[rows], slices, 1), slicing.split(b, slices, 0)


def _shape_label():
    return "x".join(map(str, CHECK_SHAPE)) + f", {SAMPLE_ROWS} rows compared"


def check_diagonal_kernel(make_kernel, slices: int = 7, *, config=None, seed=None) -> None:
    """Run the learner's diagonal kernel (``make_kernel(MM, cfg)`` returns it) through
    ``OzakiGemm(method="partial")`` at an awkward shape; every INT32 diagonal sum must be exact."""
    import cupy as cp

    from ..ozaki.gpu import OzakiGemm

    require_callable(make_kernel, "make_kernel")
    _, a, b, rows, (da, ea), (db, eb) = _gpu_problem(seed, slices)
    g = OzakiGemm(slices, "partial", config, kernel=make_kernel)
    st = g._state(*CHECK_SHAPE[:2], CHECK_SHAPE[2])
    st["parts"].fill(int(poisoned_host(1, np.int32)[0]))  # "never written" is then recognisable
    g.slice_operands(cp.asarray(a), cp.asarray(b), st)
    kern, grid, args, smem = g._launch(st, 1.0, 0.0, cp.empty(CHECK_SHAPE[:2]))
    kern[grid, st["pipe"].block_dim, 0, smem](*args)
    raw = cp.asnumpy(st["parts"][:, cp.asarray(rows)])
    got = raw.astype(np.int64)
    want = ref.diagonal_sums(da, db)
    if np.array_equal(got, want):
        print(f"diagonal sums: exact for all {slices} diagonals ({_shape_label()})")
        return
    unwritten = is_poison(raw)
    if unwritten.any():
        d = sorted(set(np.argwhere(unwritten)[:, 0].tolist()))
        raise CheckFailed(f"diagonal sums: {int(unwritten.sum())} of {unwritten.size} elements never written (diagonals "
                          f"{d}).\nHint: block (x, y, d) writes out[d, row, col] for every element of its tile that lies "
                          "inside the M x N result (map_fragment_index gives the tile coordinates).")
    wrong_d = [d for d in range(slices) if not np.array_equal(got[d], want[d])]
    msg = f"diagonal sums: diagonals {wrong_d} are wrong (" + _first_diff(got, want) + ")"
    for name, model in _diagonal_models(da, db).items():
        if np.array_equal(got, model):
            msg += f"\nThey are exactly what this mistake gives: {name}."
            break
    else:
        for d in wrong_d:
            for e in (d - 1, d + 1):
                if 0 <= e < slices and np.array_equal(got[d], want[e]):
                    msg += f"\nout[{d}] holds diagonal {e}: the diagonal index is off by one."
                    break
    raise CheckFailed(msg)


def _require_written(label, got, c_in) -> None:
    """Raise if the kernel left C as it was: an epilogue not written yet, not a wrong result."""
    if np.array_equal(got, c_in, equal_nan=True):
        raise CheckFailed(f"{label}: C is exactly as it was before the launch: the kernel wrote nothing. "
                          "Not done yet? The epilogue must write every element of C inside the result.")


def check_fused_kernel(make_kernel, slices: int = 7, *, config=None, seed=None) -> None:
    """Run the learner's fused kernel through ``OzakiGemm(method="fused")`` at an awkward shape, with
    alpha and beta, and with beta = 0 over a C full of NaN; compare with the NumPy scheme."""
    import cupy as cp

    from ..ozaki.gpu import OzakiGemm

    require_callable(make_kernel, "make_kernel")
    rng, a, b, rows, (da, ea), (db, eb) = _gpu_problem(seed, slices)
    g = OzakiGemm(slices, "fused", config, kernel=make_kernel)
    magnitude = np.abs(a[rows]) @ np.abs(b)
    diags = ref.diagonal_sums(da, db)
    c_full = rng.standard_normal(CHECK_SHAPE[:2])
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    for alpha, beta, nan_c in [(0.9, 1.1, False), (1.0, 0.0, True), (-2.0, 1.0, False)]:
        c = cp.full(CHECK_SHAPE[:2], cp.nan) if nan_c else cp.asarray(c_full)
        c_in = np.full((len(rows), CHECK_SHAPE[1]), np.nan) if nan_c else c_full[rows]
        g(a_dev, b_dev, c, alpha, beta)
        got = cp.asnumpy(c[cp.asarray(rows)])
        label = f"fused kernel (alpha={alpha}, beta={beta})"
        _require_written(label, got, c_in)
        if beta == 0 and np.isnan(got).any():
            raise CheckFailed(f"{label}: {int(np.isnan(got).sum())} elements are NaN. C held NaN and beta = 0: C must "
                              "not be read (BLAS's rule).\nHint: on the first diagonal processed, write "
                              "`alpha * x` when beta == 0, `alpha * x + beta * c[...]` otherwise.")
        want = ref.reconstruct(diags, ea, eb, alpha, beta, c_in)
        models = _reconstruct_models(diags, ea, eb, alpha, beta, c_in)
        for name, dm in _diagonal_models(da, db).items():
            models[name] = (ref.reconstruct(dm, ea, eb, alpha, beta, c_in), "see the loop over the terms.")
        _compare_float_result(label, got, want, np.abs(alpha) * magnitude + np.abs(beta * np.nan_to_num(c_in)), models)
    print(f"fused kernel: correct ({_shape_label()}; alpha and beta, beta = 0 with C unread)")
    progress.passed('fused kernel')
